//! The append-only writer of a chained log, one for every log kind: one
//! record is one `write(2)`.
//!
//! Invariants: the file is created with `O_EXCL` (and `O_NOFOLLOW`), so
//! this writer is its only author and it is never another's file; records
//! are written whole by a single `write(2)` on an `O_APPEND` descriptor;
//! after any failed or short write, or a failed sync, the writer is
//! poisoned and never appends again, so a torn line can only ever be the
//! last one. The directory entry is made durable at creation and with the
//! seal.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{chain, Kind};
use crate::clock;

/// Longest record line the writer produces and `verify` accepts, without `\n`.
pub const MAX_LINE: usize = 1 << 20;

#[derive(Debug)]
pub enum LogError {
    Io(io::Error),
    /// An earlier write or sync failed; nothing is appended after it.
    Poisoned(String),
    TooLarge(usize),
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogError::Io(e) => write!(f, "log I/O error: {e}"),
            LogError::Poisoned(why) => {
                write!(f, "log unusable after an earlier failure: {why}")
            }
            LogError::TooLarge(n) => write!(
                f,
                "record of {n} bytes exceeds the {MAX_LINE}-byte line cap"
            ),
        }
    }
}

impl std::error::Error for LogError {}

/// One record line as written (docs/audit-log.md), whatever its `data`:
/// every log kind shares this envelope and its key order.
#[derive(Serialize)]
pub(crate) struct Envelope<'a, D: Serialize> {
    pub v: u32,
    pub run: &'a str,
    pub seq: u64,
    pub ts: &'a str,
    pub mono_ns: u64,
    pub kind: &'a str,
    pub prev: &'a str,
    pub data: D,
}

/// The envelope fields of one record, as the writer spells them.
pub struct Line<'a> {
    pub run: &'a str,
    pub seq: u64,
    pub ts: &'a str,
    pub mono_ns: u64,
    pub prev: &'a str,
}

/// Appends the exact bytes of the record line (no `\n`) to `out`: the one
/// encoding the writer produces and the verifier compares against.
pub fn encode<K: Kind>(line: &Line<'_>, event: &K, out: &mut Vec<u8>) -> serde_json::Result<()> {
    let env = Envelope {
        v: K::VERSION,
        run: line.run,
        seq: line.seq,
        ts: line.ts,
        mono_ns: line.mono_ns,
        kind: event.kind(),
        prev: line.prev,
        data: event.data(),
    };
    serde_json::to_writer(out, &env)
}

/// The writer of one log of kind `K`.
pub struct ChainWriter<K: Kind> {
    file: File,
    /// The log's directory, opened at creation: synced with the seal.
    dir: File,
    path: PathBuf,
    run: String,
    seq: u64,
    /// Hash of the last line written (the genesis hash before the first).
    prev: String,
    poisoned: Option<String>,
    unsynced: bool,
    buf: Vec<u8>,
    kind: std::marker::PhantomData<fn(&K)>,
}

/// A record as written: its sequence number and the line's hash.
#[derive(Clone, Debug)]
pub struct Written {
    pub seq: u64,
    pub hash: String,
}

impl<K: Kind> ChainWriter<K> {
    /// Creates the log exclusively (mode 0600, never through a symlink) and
    /// makes its directory entry durable. `AlreadyExists` when `path` exists.
    pub fn create(path: &Path, run: &str) -> io::Result<ChainWriter<K>> {
        if !crate::vocab::is_token(run) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("run id {run:?} must match [A-Za-z0-9_.-]{{1,64}}"),
            ));
        }
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = File::open(parent)?;
        dir.sync_all()?;
        Ok(ChainWriter {
            file,
            dir,
            path: path.to_path_buf(),
            run: run.to_string(),
            seq: 0,
            prev: chain::genesis(run),
            poisoned: None,
            unsynced: false,
            buf: Vec::with_capacity(4096),
            kind: std::marker::PhantomData,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The log file's device and inode (what it is, whatever its path
    /// leads to later).
    pub fn file_id(&self) -> io::Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        Ok((m.dev(), m.ino()))
    }

    pub fn run(&self) -> &str {
        &self.run
    }

    /// The head: the hash of the last line written (genesis hash if none).
    pub fn head(&self) -> &str {
        &self.prev
    }

    pub fn next_seq(&self) -> u64 {
        self.seq
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Appends one record with one `write`. Not yet durable: see [`sync`].
    ///
    /// [`sync`]: AuditWriter::sync
    pub fn append(&mut self, event: &K) -> Result<Written, LogError> {
        if let Some(why) = &self.poisoned {
            return Err(LogError::Poisoned(why.clone()));
        }
        let ts = clock::rfc3339_now();
        self.buf.clear();
        let line = Line {
            run: &self.run,
            seq: self.seq,
            ts: &ts,
            mono_ns: clock::mono_ns(),
            prev: &self.prev,
        };
        encode(&line, event, &mut self.buf).map_err(|e| LogError::Io(io::Error::other(e)))?;
        if self.buf.len() > MAX_LINE {
            return Err(LogError::TooLarge(self.buf.len()));
        }
        let hash = chain::line_hash(&self.buf);
        self.buf.push(b'\n');
        match self.file.write(&self.buf) {
            Ok(n) if n == self.buf.len() => {}
            Ok(n) => {
                return Err(self.poison(format!("short write: {n} of {} bytes", self.buf.len())))
            }
            Err(e) => {
                let why = format!("write failed: {e}");
                self.poisoned = Some(why);
                return Err(LogError::Io(e));
            }
        }
        let written = Written {
            seq: self.seq,
            hash: hash.clone(),
        };
        self.seq += 1;
        self.prev = hash;
        self.unsynced = true;
        Ok(written)
    }

    /// `fdatasync`: everything appended so far is durable when this returns Ok.
    pub fn sync(&mut self) -> Result<(), LogError> {
        if let Some(why) = &self.poisoned {
            return Err(LogError::Poisoned(why.clone()));
        }
        if !self.unsynced {
            return Ok(());
        }
        if let Err(e) = nix::unistd::fdatasync(&self.file) {
            return Err(self.poison(format!("fdatasync failed: {e}")));
        }
        self.unsynced = false;
        Ok(())
    }

    /// Append and make durable: for records that announce an act.
    pub fn record(&mut self, event: &K) -> Result<Written, LogError> {
        let w = self.append(event)?;
        self.sync()?;
        Ok(w)
    }

    /// The last record: durable, and its directory entry too.
    pub fn seal(&mut self, last: &K) -> Result<Written, LogError> {
        let w = self.record(last)?;
        if let Err(e) = self.dir.sync_all() {
            return Err(self.poison(format!("directory fsync failed: {e}")));
        }
        Ok(w)
    }

    fn poison(&mut self, why: String) -> LogError {
        self.poisoned = Some(why.clone());
        LogError::Poisoned(why)
    }
}
