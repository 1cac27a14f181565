//! The recovery log's writer: the chain rule of docs/audit-log.md exactly (the shared
//! envelope `v, run, seq, ts, mono_ns, kind, prev, data`, the genesis and
//! line hash of [`crate::audit::chain`]), with the kinds of
//! [`super::record`], as the discard log does it (`crate::stage::log`).
//!
//! The file is created `O_EXCL` (never another's log, never twice), every
//! record is one `write(2)` on an `O_APPEND` descriptor made durable
//! (`fdatasync`) before the act it announces; after a failed write nothing
//! more is appended, so a torn line can only be the last. The last record
//! is always `recovery_decided`, and the directory entry is synced with it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::record::{RecoveryEvent, VERSION};
use crate::audit::chain;
use crate::audit::writer::{Envelope, MAX_LINE};

/// The exact line bytes (no `\n`) of a record: the one encoding the writer
/// produces and the verifier compares against.
pub fn encode(
    run: &str,
    seq: u64,
    ts: &str,
    mono_ns: u64,
    prev: &str,
    ev: &RecoveryEvent,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Envelope {
        v: VERSION,
        run,
        seq,
        ts,
        mono_ns,
        kind: ev.kind(),
        prev,
        data: ev,
    })
}

pub struct RecoveryLog {
    file: File,
    dir: File,
    run: String,
    seq: u64,
    prev: String,
    poisoned: bool,
}

impl RecoveryLog {
    /// Creates the log exclusively (0600, not through a symlink) and syncs
    /// its directory entry. `AlreadyExists` when NEW exists.
    pub fn create(path: &Path, run: &str) -> io::Result<RecoveryLog> {
        if !crate::vocab::is_token(run) {
            return Err(io::Error::other(format!("run id {run:?} is not a token")));
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
        Ok(RecoveryLog {
            file,
            dir,
            run: run.to_string(),
            seq: 0,
            prev: chain::genesis(run),
            poisoned: false,
        })
    }

    pub fn run(&self) -> &str {
        &self.run
    }

    /// The hash of the last line written (the genesis hash before any).
    pub fn head(&self) -> &str {
        &self.prev
    }

    /// Appends one record with one `write` and makes it durable.
    pub fn record(&mut self, ev: &RecoveryEvent) -> io::Result<()> {
        if self.poisoned {
            return Err(io::Error::other(
                "the log is unusable after an earlier failure",
            ));
        }
        let ts = crate::clock::rfc3339_now();
        let mut line = encode(
            &self.run,
            self.seq,
            &ts,
            crate::clock::mono_ns(),
            &self.prev,
            ev,
        )
        .map_err(io::Error::other)?;
        if line.len() > MAX_LINE {
            return Err(io::Error::other(format!(
                "{} record of {} bytes over the line cap",
                ev.kind(),
                line.len()
            )));
        }
        let hash = chain::line_hash(&line);
        line.push(b'\n');
        self.poisoned = true;
        match self.file.write(&line) {
            Ok(n) if n == line.len() => {}
            Ok(n) => {
                return Err(io::Error::other(format!(
                    "short write: {n} of {} bytes",
                    line.len()
                )))
            }
            Err(e) => return Err(e),
        }
        nix::unistd::fdatasync(&self.file)?;
        self.poisoned = false;
        self.seq += 1;
        self.prev = hash;
        Ok(())
    }

    /// The last record: durable, and the log's directory entry too.
    pub fn seal(&mut self, ev: &RecoveryEvent) -> io::Result<()> {
        self.record(ev)?;
        self.dir.sync_all()
    }
}
