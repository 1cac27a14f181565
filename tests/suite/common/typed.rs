//! Reading a chained log into its typed records (issue 28), the way the
//! library reads it ([`rea::log::read::parse_line`]), instead of indexing
//! untyped JSON by string and comparing with a string: a test matches on the
//! record's variant and reads its struct fields, so a renamed field or a
//! changed type fails to compile instead of comparing with `null`.
//!
//! - [`Log::read`] reads a log of any kind (the watchdog's [`Event`]s by
//!   default; `Log::<StageEvent>::read`, `Log::<RecoveryEvent>::read`):
//!   every complete line must parse, and be byte for byte the writer's
//!   encoding of what it parses to (so a typed `None` is a key the line
//!   does not have, or `null`, as the writer spells it), or the test
//!   panics naming the file, the line and why. A torn tail (bytes after the last newline: a
//!   watchdog SIGKILLed mid-write) is not a record and is left out.
//! - [`all!`] and [`first!`] pick the records of one variant:
//!   `all!(log, Event::JobSpawned)` is a `Vec<&JobSpawned>`;
//!   `first!(log, Event::StopTriggered)` the first one, or a panic naming
//!   the file and the kinds it has.
//! - [`Log::receipt`] is the sealing receipt (the last record).
//!
//! Tests that forge or corrupt logs keep reading raw JSON on purpose: a
//! forged line need not parse into a record at all.

use std::path::{Path, PathBuf};

use rea::kinds::watchdog::Receipt;
use rea::log::read::{parse_line, read_lines, Piece};
use rea::log::Kind;

pub use rea::kinds::watchdog::Event;

/// One record, owned: its 1-based line in the file, its `seq` and
/// `mono_ns`, its event.
#[derive(Clone, Debug)]
pub struct Rec<K> {
    pub line: usize,
    pub seq: u64,
    pub mono_ns: u64,
    pub event: K,
}

/// A log read into typed records.
#[derive(Clone, Debug)]
pub struct Log<K = Event> {
    pub path: PathBuf,
    pub recs: Vec<Rec<K>>,
}

impl<K: Kind> Log<K> {
    /// Every complete line of `path` as a typed record. Panics (naming the
    /// file, and the line) when the file cannot be read or a line is not a
    /// record of kind `K`.
    #[track_caller]
    pub fn read(path: &Path) -> Log<K> {
        let file =
            rea::log::read::open_log(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut recs = Vec::new();
        let mut bad: Option<String> = None;
        let mut line = 0;
        read_lines(file, |piece| {
            line += 1;
            if bad.is_some() {
                return;
            }
            match piece {
                Piece::Line(bytes) => match parse_line::<K>(bytes) {
                    Ok(r) if !canonical(&r, bytes) => {
                        bad = Some(format!(
                            "{}:{line}: not byte for byte the writer's encoding of its record: {}",
                            path.display(),
                            String::from_utf8_lossy(&bytes[..bytes.len().min(400)])
                        ))
                    }
                    Ok(r) => recs.push(Rec {
                        line,
                        seq: r.seq,
                        mono_ns: r.mono_ns,
                        event: r.event,
                    }),
                    Err(e) => {
                        bad = Some(format!(
                            "{}:{line}: not a record ({:?}: {}): {}",
                            path.display(),
                            e.fault,
                            e.detail,
                            String::from_utf8_lossy(&bytes[..bytes.len().min(400)])
                        ))
                    }
                },
                Piece::Overlong(n) => {
                    bad = Some(format!(
                        "{}:{line}: a line of {n} bytes, over the cap",
                        path.display()
                    ))
                }
            }
        })
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Some(msg) = bad {
            panic!("{msg}");
        }
        Log {
            path: path.to_path_buf(),
            recs,
        }
    }

    /// The events, in order.
    pub fn iter(&self) -> impl Iterator<Item = &K> + '_ {
        self.recs.iter().map(|r| &r.event)
    }

    pub fn len(&self) -> usize {
        self.recs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// The `kind` of every record, in order (for messages).
    pub fn kinds(&self) -> Vec<&'static str> {
        self.iter().map(Kind::kind).collect()
    }

    /// The event of record `i` (0-based), or a panic naming the file.
    #[track_caller]
    pub fn at(&self, i: usize) -> &K {
        match self.recs.get(i) {
            Some(r) => &r.event,
            None => panic!(
                "{}: no record #{i} (0-based); it has {}: {:?}",
                self.path.display(),
                self.len(),
                self.kinds()
            ),
        }
    }

    /// The index of the first record `pred` holds for, or a panic naming
    /// the file and `what`.
    #[track_caller]
    pub fn position(&self, what: &str, pred: impl Fn(&K) -> bool) -> usize {
        self.iter().position(pred).unwrap_or_else(|| {
            panic!(
                "{}: no {what} record among {:?}",
                self.path.display(),
                self.kinds()
            )
        })
    }

    /// The `seq` of the first record `pred` holds for, or a panic naming
    /// the file and `what`.
    #[track_caller]
    pub fn seq_of(&self, what: &str, pred: impl Fn(&K) -> bool) -> u64 {
        self.recs[self.position(what, pred)].seq
    }
}

/// The line is exactly what the writer makes of the record it parses to
/// ([`rea::log::writer::encode`]), so the typed record says all the line
/// says: an optional field the writer leaves out when empty (`program`,
/// `inner_alarm_ms`) is `None` exactly when the line has no such key, and
/// `null` where the writer writes `null`.
fn canonical<K: Kind>(r: &rea::log::Record<'_, K>, bytes: &[u8]) -> bool {
    let line = rea::log::writer::Line {
        run: &r.run,
        seq: r.seq,
        ts: &r.ts,
        mono_ns: r.mono_ns,
        prev: &r.prev,
    };
    let mut out = Vec::with_capacity(bytes.len());
    r.v == K::VERSION && rea::log::writer::encode(&line, &r.event, &mut out).is_ok() && out == bytes
}

impl Log<Event> {
    /// The receipt that seals the log (its last record), or a panic naming
    /// the file and its last kinds.
    #[track_caller]
    pub fn receipt(&self) -> &Receipt {
        match self.recs.last().map(|r| &r.event) {
            Some(Event::Receipt(r)) => r,
            _ => panic!(
                "{}: the last record is not a receipt: {:?}",
                self.path.display(),
                self.kinds()
            ),
        }
    }
}

/// Waits (bounded by [`super::harness::PATIENCE`]) until `pred` holds for
/// the watchdog's log at `path`; returns its records. Only for records no
/// reply announces. No polling: the log is read again each time inotify
/// says it was written to (`IN_MODIFY`), and once before the first wait.
#[track_caller]
pub fn wait_for_log(path: &Path, what: &str, pred: impl Fn(&Log) -> bool) -> Log {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let limit = super::harness::PATIENCE;
    let until = std::time::Instant::now() + limit;
    // SAFETY: inotify_init1 takes flags only; a non-negative result is a
    // new descriptor owned from here on.
    let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    assert!(
        raw >= 0,
        "inotify_init1: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let ino = unsafe { OwnedFd::from_raw_fd(raw) };
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in a path");
    // SAFETY: a valid inotify descriptor and a NUL-terminated path.
    let wd = unsafe { libc::inotify_add_watch(raw, c.as_ptr(), libc::IN_MODIFY) };
    assert!(
        wd >= 0,
        "{}: inotify_add_watch: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    loop {
        let log = Log::read(path);
        if pred(&log) {
            return log;
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        assert!(
            super::harness::wait_readable(&ino, left),
            "{}: the audit log never showed {what} within {limit:?}",
            path.display()
        );
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a buffer of its stated length; the events are
        // only drained (each one just means "read the log again").
        while unsafe { libc::read(raw, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

/// The watchdog's records of `path`, in order (see [`Log::read`]).
#[track_caller]
pub fn events(path: &Path) -> Vec<Event> {
    Log::<Event>::read(path)
        .recs
        .into_iter()
        .map(|r| r.event)
        .collect()
}

/// Every record of one variant, in order: `all!(log, Event::JobSpawned)`
/// is a `Vec<&JobSpawned>`. `log` is anything with an `iter()` over
/// events: a [`Log`], a `Vec<Event>`, a slice.
macro_rules! all {
    ($log:expr, $variant:path) => {
        $log.iter()
            .filter_map(|e| match e {
                $variant(d) => Some(d),
                #[allow(unreachable_patterns)]
                _ => None,
            })
            .collect::<Vec<_>>()
    };
}

/// The first record of one variant in a [`Log`], or a panic naming the
/// file and the kinds it has: `first!(log, Event::StopTriggered)`.
macro_rules! first {
    ($log:expr, $variant:path) => {{
        let log = &$log;
        match log.iter().find_map(|e| match e {
            $variant(d) => Some(d),
            #[allow(unreachable_patterns)]
            _ => None,
        }) {
            Some(d) => d,
            None => panic!(
                "{}: no {} record among {:?}",
                log.path.display(),
                stringify!($variant),
                log.kinds()
            ),
        }
    }};
}

pub(crate) use all;
pub(crate) use first;

/// The reader itself: a built log reads back as written, and a line that
/// is not the writer's encoding, or not a record, fails naming the file
/// and the line.
mod tests {
    use super::{Event, Log};
    use crate::common::logs::{build, read_lines, replace_once, write_lines, LogOpts};

    #[test]
    fn a_built_log_reads_back_typed() {
        let built = build(&LogOpts::closed("typed-read"));
        let log = Log::<Event>::read(&built.path);
        assert_eq!(log.kinds(), built.kinds);
        assert_eq!(Some(log.receipt()), built.receipt.as_ref());
        assert_eq!(all!(log, Event::JobSpawned).len(), 2);
        assert_eq!(first!(log, Event::JobSpawned).job, 1);
        let lines: Vec<usize> = log.recs.iter().map(|r| r.line).collect();
        assert_eq!(lines, (1..=built.kinds.len()).collect::<Vec<_>>());
    }

    #[track_caller]
    fn read_fails(path: &std::path::Path) -> String {
        let p = path.to_path_buf();
        let err = std::panic::catch_unwind(move || Log::<Event>::read(&p))
            .expect_err("the reader accepted the line");
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn a_line_that_is_not_the_writers_encoding_fails_naming_file_and_line() {
        let built = build(&LogOpts::closed("typed-fail"));
        let k = built.line_of("job_spawned", 0);
        let mut lines = read_lines(&built.path);
        // A space the writer never writes: the same record, other bytes.
        lines[k - 1] = replace_once(&lines[k - 1], "\"job\":", b"\"job\": ");
        write_lines(&built.path, &lines);
        let msg = read_fails(&built.path);
        let at = format!("{}:{k}: not byte for byte", built.path.display());
        assert!(msg.contains(&at), "{msg}");
        // Not a record at all.
        lines[k - 1] = b"{}".to_vec();
        write_lines(&built.path, &lines);
        let msg = read_fails(&built.path);
        let at = format!("{}:{k}: not a record", built.path.display());
        assert!(msg.contains(&at), "{msg}");
    }
}
