//! Strict reading of a chained log, whatever its kind: the file opened the
//! one safe way, its lines with bounded memory, each line into a typed
//! record of the log's [`Kind`].
//!
//! The bytes are checked before they are believed: UTF-8, no CR, bounded
//! length, an envelope with exactly the eight fields, `data` typed by `kind`
//! with unknown fields and duplicate keys refused, and no floats anywhere.

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Kind, MAX_LINE};
use crate::json_error::{self, ErrorKind, JsonError};

/// One record, as read (envelope strings borrowed from the line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a, K> {
    pub v: u32,
    pub run: Cow<'a, str>,
    pub seq: u64,
    pub ts: Cow<'a, str>,
    pub mono_ns: u64,
    pub prev: Cow<'a, str>,
    pub event: K,
}

/// One record line as read (docs/audit-log.md), its `data` not yet typed:
/// every log kind shares this envelope.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Wire<'a> {
    pub v: u32,
    #[serde(borrow)]
    pub run: Cow<'a, str>,
    pub seq: u64,
    #[serde(borrow)]
    pub ts: Cow<'a, str>,
    pub mono_ns: u64,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    pub prev: Cow<'a, str>,
    #[serde(borrow)]
    pub data: &'a RawValue,
}

/// What is wrong with a line, as the chain rule sees it, whatever the log's
/// kind: each log kind names these in its own reason codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    LineTooLong,
    CarriageReturn,
    InvalidUtf8,
    /// Not JSON, or not an object where one belongs.
    MalformedJson,
    UnknownField,
    DuplicateKey,
    Float,
    /// A field of the wrong type or shape (a run id that is not a token,
    /// a `prev` that is not a digest, ...).
    BadField,
    UnknownKind,
    BadTimestamp,
    BadVersion,
    /// Not byte for byte the writer's encoding of the record it parses to.
    NonCanonical,
    SeqMismatch,
    MonoRegressed,
    GenesisMismatch,
    RunMismatch,
    PrevMismatch,
}

/// Why a line is not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub fault: Fault,
    pub detail: String,
}

fn err(fault: Fault, detail: impl Into<String>) -> LineError {
    LineError {
        fault,
        detail: detail.into(),
    }
}

/// The fault a JSON error stands for, by its kind.
fn json_fault(e: &JsonError) -> Fault {
    match e.kind {
        ErrorKind::UnknownField => Fault::UnknownField,
        ErrorKind::DuplicateField => Fault::DuplicateKey,
        ErrorKind::Float => Fault::Float,
        ErrorKind::Syntax | ErrorKind::Eof => Fault::MalformedJson,
        _ => Fault::BadField,
    }
}

/// Parses one line (without its `\n`) into a record of kind `K`.
pub fn parse_line<K: Kind>(line: &[u8]) -> Result<Record<'_, K>, LineError> {
    if line.len() > MAX_LINE {
        return Err(err(
            Fault::LineTooLong,
            format!("{} bytes; the cap is {MAX_LINE}", line.len()),
        ));
    }
    if let Some(i) = line.iter().position(|&b| b == b'\r') {
        return Err(err(
            Fault::CarriageReturn,
            format!("carriage return at byte {i}"),
        ));
    }
    let text = std::str::from_utf8(line).map_err(|e| err(Fault::InvalidUtf8, e.to_string()))?;
    // serde's derive takes an array for a struct (fields by position): the
    // record and its data are objects, and nothing else is read as one.
    // (Nested objects written as arrays differ from the writer's encoding:
    // the check of the writer's encoding in `check.rs` refuses them.)
    if !text.trim_start().starts_with('{') {
        return Err(err(Fault::MalformedJson, "a record is a JSON object"));
    }
    let wire: Wire = json_error::from_str(text).map_err(|e| err(json_fault(&e), e.to_string()))?;
    if !wire.data.get().starts_with('{') {
        return Err(err(
            Fault::MalformedJson,
            format!(
                "data of {} is not a JSON object",
                crate::vocab::bounded(&wire.kind)
            ),
        ));
    }
    let event = match K::parse_data(&wire.kind, wire.data.get()) {
        None => {
            return Err(err(
                Fault::UnknownKind,
                format!("unknown kind {:?}", crate::vocab::bounded(&wire.kind)),
            ))
        }
        Some(Err(e)) => return Err(err(json_fault(&e), format!("{} data: {e}", wire.kind))),
        Some(Ok(ev)) => ev,
    };
    if !crate::vocab::is_token(&wire.run) {
        return Err(err(
            Fault::BadField,
            "run id must match [A-Za-z0-9_.-]{1,64}",
        ));
    }
    if !super::chain::is_digest(&wire.prev) {
        return Err(err(Fault::BadField, "prev must be 64 lowercase hex digits"));
    }
    if chrono::DateTime::parse_from_rfc3339(&wire.ts).is_err() || !wire.ts.ends_with('Z') {
        return Err(err(
            Fault::BadTimestamp,
            format!("ts {:?} is not RFC 3339 UTC", wire.ts),
        ));
    }
    Ok(Record {
        v: wire.v,
        run: wire.run,
        seq: wire.seq,
        ts: wire.ts,
        mono_ns: wire.mono_ns,
        prev: wire.prev,
        event,
    })
}

/// Why a log could not be opened for reading.
#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    /// Not a regular file: what it is instead ("FIFO", "directory", ...).
    NotRegular(&'static str),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "cannot read the log: {e}"),
            OpenError::NotRegular(what) => write!(
                f,
                "the log is not a regular file (it is a {what}); nothing was read"
            ),
        }
    }
}

/// Opens a log the one way every command reads one (docs/audit-log.md):
/// `O_NONBLOCK` (a FIFO cannot block the open), then `fstat` before a byte
/// is read; anything but a regular file (`/dev/zero`, a FIFO, a directory)
/// is refused at once.
pub fn open_log(path: &Path) -> Result<File, OpenError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(OpenError::Io)?;
    let t = f.metadata().map_err(OpenError::Io)?.file_type();
    if t.is_file() {
        return Ok(f);
    }
    Err(OpenError::NotRegular(if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }))
}

/// What [`read_lines`] hands on.
pub enum Piece<'a> {
    /// A complete line, without its `\n`.
    Line(&'a [u8]),
    /// A line over the cap (never buffered whole): its length.
    Overlong(u64),
}

/// Reads a log line by line with memory bounded by the line cap, whatever
/// the file's size: each complete line goes to `each`. Returns the torn tail (bytes after the last `\n`, at most
/// the cap; a longer tail is reported as overlong and `None` returned).
pub fn read_lines<R: io::Read>(
    mut r: R,
    mut each: impl FnMut(Piece<'_>),
) -> io::Result<Option<Vec<u8>>> {
    let cap = MAX_LINE + 1;
    let mut buf = vec![0u8; cap.max(64 << 10)];
    let mut filled = 0;
    // Bytes of a line over the cap already skipped.
    let mut skipping: Option<u64> = None;
    loop {
        let n = match r.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        let end = filled + n;
        let mut used = 0;
        while let Some(i) = buf[used..end].iter().position(|&b| b == b'\n') {
            match skipping.take() {
                Some(len) => each(Piece::Overlong(len + i as u64)),
                None => each(Piece::Line(&buf[used..used + i])),
            }
            used += i + 1;
        }
        buf.copy_within(used..end, 0);
        filled = end - used;
        if filled == buf.len() {
            *skipping.get_or_insert(0) += filled as u64;
            filled = 0;
        }
    }
    if let Some(len) = skipping {
        each(Piece::Overlong(len + filled as u64));
        return Ok(None);
    }
    Ok((filled > 0).then(|| buf[..filled].to_vec()))
}

/// The wall-clock time of the log's first record, if it parses.
pub fn started<R: io::Read>(r: R) -> Option<String> {
    let mut first = None;
    let _ = read_lines(r.take(MAX_LINE as u64 + 1), |piece| {
        if let (None, Piece::Line(line)) = (&first, piece) {
            // The envelope alone: a discard or recovery log's first
            // record has its time where a watchdog's has.
            first = Some(
                serde_json::from_slice::<Wire>(line)
                    .map(|w| w.ts.into_owned())
                    .unwrap_or_default(),
            );
        }
    });
    first.filter(|t| !t.is_empty())
}
