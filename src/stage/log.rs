//! The discard's own audit log: a chained log ([`crate::log`]: the same
//! envelope, chain rule and writer as the watchdog's) with record kinds of
//! its own. Every record is made durable before the act it announces
//! ([`StageLog::record`]); the last record is always `discard_decided`.

use serde::{Deserialize, Serialize};

use super::decide::{DirId, Entry, Refusal};
use super::receipt::BeforeTransfer;
use crate::json_error::JsonError;
use crate::kinds::watchdog::HoldersScanned;

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
    pub fn parse(kind: &str, data: &str) -> Option<Result<StageEvent, JsonError>> {
        use crate::json_error::from_str;
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

impl crate::log::Kind for StageEvent {
    const VERSION: u32 = VERSION;

    fn kind(&self) -> &'static str {
        StageEvent::kind(self)
    }

    fn data(&self) -> impl Serialize + '_ {
        self
    }

    fn parse_data(kind: &str, data: &str) -> Option<Result<StageEvent, JsonError>> {
        StageEvent::parse(kind, data)
    }
}

/// The discard log's writer.
pub type StageLog = crate::log::ChainWriter<StageEvent>;
