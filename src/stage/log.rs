//! The discard's own audit log: the chain rule of docs/audit-log.md exactly (the same
//! envelope `v, run, seq, ts, mono_ns, kind, prev, data`, the same genesis
//! and line hash from [`crate::audit::chain`]), with kinds of its own.
//!
//! The file is created `O_EXCL` (a log is never appended to twice), every
//! record is one `write(2)` on an `O_APPEND` descriptor and is made durable
//! (`fdatasync`) before the act it announces; after a failed write nothing
//! more is appended. The last record is always `discard_decided`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::decide::{DirId, Entry, Refusal};
use super::receipt::BeforeTransfer;
use crate::audit::chain;
use crate::audit::record::HoldersScanned;
use crate::audit::writer::MAX_LINE;

/// `v` of every record.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiscardStarted {
    pub version: String,
    /// The stage as given (made absolute).
    pub stage: String,
    /// Through the opened descriptor; `null` when DIR could not be opened.
    pub identity: Option<DirId>,
    /// `--receipt-sha256`.
    pub receipt_sha256: String,
    pub uid: u32,
    pub pid: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StageInventoried {
    pub entries: Vec<Entry>,
    pub truncated: bool,
    pub changed: Vec<String>,
    /// The receipt's content, when it was read and parsed.
    pub receipt: Option<BeforeTransfer>,
    /// Why it could not be parsed.
    pub receipt_error: Option<String>,
    /// The holder scan of the stage, through its descriptor (absent in a
    /// log written before the discard scanned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holders: Option<Box<HoldersScanned>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiscardApproved {
    /// What is removed, in order: the uploads, the receipt, then
    /// `.rea-discarding` (then the stage itself).
    pub plan: Vec<String>,
    /// The inode of the `.rea-discarding` marker this discard created
    /// (exclusively, before this record) and removes last.
    pub marker_ino: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Removed {
    File,
    Receipt,
    /// The discard's own `.rea-discarding`.
    Marker,
    Stage,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemovedEntry {
    pub name: String,
    pub what: Removed,
    pub ino: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Discarded,
    Refused,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiscardDecided {
    pub outcome: Outcome,
    /// Empty exactly when discarded.
    pub reasons: Vec<Refusal>,
    /// Entries removed (files and receipt; not the directory).
    pub removed: u64,
    pub stage_removed: bool,
}

/// One record of a discard log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageEvent {
    Started(DiscardStarted),
    Inventoried(StageInventoried),
    Approved(DiscardApproved),
    Removed(RemovedEntry),
    Decided(DiscardDecided),
}

/// Every kind, in order of appearance.
pub const KINDS: &[&str] = &[
    "discard_started",
    "stage_inventoried",
    "discard_approved",
    "removed",
    "discard_decided",
];

impl StageEvent {
    pub fn kind(&self) -> &'static str {
        match self {
            StageEvent::Started(_) => KINDS[0],
            StageEvent::Inventoried(_) => KINDS[1],
            StageEvent::Approved(_) => KINDS[2],
            StageEvent::Removed(_) => KINDS[3],
            StageEvent::Decided(_) => KINDS[4],
        }
    }

    /// Typed parse of `data` for `kind`; `None` for a kind not of this log.
    pub fn parse(kind: &str, data: &str) -> Option<serde_json::Result<StageEvent>> {
        use serde_json::from_str;
        Some(match kind {
            "discard_started" => from_str(data).map(StageEvent::Started),
            "stage_inventoried" => from_str(data).map(StageEvent::Inventoried),
            "discard_approved" => from_str(data).map(StageEvent::Approved),
            "removed" => from_str(data).map(StageEvent::Removed),
            "discard_decided" => from_str(data).map(StageEvent::Decided),
            _ => return None,
        })
    }
}

impl Serialize for StageEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StageEvent::Started(d) => d.serialize(s),
            StageEvent::Inventoried(d) => d.serialize(s),
            StageEvent::Approved(d) => d.serialize(s),
            StageEvent::Removed(d) => d.serialize(s),
            StageEvent::Decided(d) => d.serialize(s),
        }
    }
}

/// The exact line bytes (no `\n`) for a record: the one encoding the writer
/// produces and the verifier compares against.
pub fn encode(
    run: &str,
    seq: u64,
    ts: &str,
    mono_ns: u64,
    prev: &str,
    ev: &StageEvent,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&crate::audit::writer::Envelope {
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

pub struct StageLog {
    file: File,
    dir: File,
    run: String,
    seq: u64,
    prev: String,
    poisoned: bool,
}

impl StageLog {
    /// Creates the log exclusively (0600) and syncs its directory entry.
    pub fn create(path: &Path, run: &str) -> io::Result<StageLog> {
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
        Ok(StageLog {
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

    /// The hash of the last line written.
    pub fn head(&self) -> &str {
        &self.prev
    }

    /// Appends one record with one `write` and makes it durable.
    pub fn record(&mut self, ev: &StageEvent) -> io::Result<()> {
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
                "record of {} bytes over the line cap",
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
    pub fn seal(&mut self, ev: &StageEvent) -> io::Result<()> {
        self.record(ev)?;
        self.dir.sync_all()
    }
}
