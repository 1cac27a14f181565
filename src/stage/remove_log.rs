//! `rea-stage remove`'s own audit log: a chained log ([`crate::log`]: the
//! same envelope, chain rule and writer as the watchdog's and the
//! discard's) with record kinds of its own. Every record is made durable
//! before the act it announces; the last is always `remove_decided`.

use serde::{Deserialize, Serialize};

use super::decide::DirId;
use super::remove_decide::{LogVerdict, Refusal, Walked};
use crate::json_error::JsonError;

/// `v` of every record.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemoveStarted {
    pub version: String,
    /// The stage as given (made absolute).
    pub stage: String,
    /// Through the opened descriptor; `null` when DIR could not be opened.
    pub identity: Option<DirId>,
    /// `--audit-log`: the watchdog's log whose verdict is checked.
    pub audit_log: String,
    /// `--expect-head`.
    pub expect_head: String,
    pub uid: u32,
    pub pid: u32,
}

/// What the removal decided on: the log's verdict (verify's checks,
/// through the stage's descriptor) and its own walk of the stage.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemoveChecked {
    pub verdict: LogVerdict,
    pub walked: Option<Walked>,
    /// Why the walk failed (`walked` is then `null`).
    pub walk_error: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemoveApproved {
    /// Entries to remove (then the stage itself), deepest first.
    pub entries: u64,
    /// The inventory digest they were walked under.
    pub digest: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum What {
    File,
    Directory,
    Symlink,
    /// A FIFO, socket or device node.
    Special,
    /// The stage directory itself, last.
    Stage,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EntryRemoved {
    /// Relative to the stage, escaped as the inventory escapes it (the
    /// stage's absolute path for `stage`).
    pub path: String,
    pub what: What,
    pub dev: u64,
    pub ino: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every entry and the stage are gone.
    Removed,
    /// A check failed before the first removal; nothing was removed.
    Refused,
    /// Removal began and stopped (a change or an I/O error); the rest is kept.
    Stopped,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemoveDecided {
    pub outcome: Outcome,
    /// Empty exactly when removed.
    pub reasons: Vec<Refusal>,
    /// Entries removed (not the directory).
    pub removed: u64,
    pub stage_removed: bool,
}

/// One record of a removal log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoveEvent {
    Started(RemoveStarted),
    Checked(RemoveChecked),
    Approved(RemoveApproved),
    Removed(EntryRemoved),
    Decided(RemoveDecided),
}

/// Every kind, in order of appearance.
pub const KINDS: &[&str] = &[
    "remove_started",
    "remove_checked",
    "remove_approved",
    "entry_removed",
    "remove_decided",
];

impl RemoveEvent {
    pub fn kind(&self) -> &'static str {
        match self {
            RemoveEvent::Started(_) => KINDS[0],
            RemoveEvent::Checked(_) => KINDS[1],
            RemoveEvent::Approved(_) => KINDS[2],
            RemoveEvent::Removed(_) => KINDS[3],
            RemoveEvent::Decided(_) => KINDS[4],
        }
    }

    /// Typed parse of `data` for `kind`; `None` for a kind not of this log.
    pub fn parse(kind: &str, data: &str) -> Option<Result<RemoveEvent, JsonError>> {
        use crate::json_error::from_str;
        Some(match kind {
            "remove_started" => from_str(data).map(RemoveEvent::Started),
            "remove_checked" => from_str(data).map(RemoveEvent::Checked),
            "remove_approved" => from_str(data).map(RemoveEvent::Approved),
            "entry_removed" => from_str(data).map(RemoveEvent::Removed),
            "remove_decided" => from_str(data).map(RemoveEvent::Decided),
            _ => return None,
        })
    }
}

impl Serialize for RemoveEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RemoveEvent::Started(d) => d.serialize(s),
            RemoveEvent::Checked(d) => d.serialize(s),
            RemoveEvent::Approved(d) => d.serialize(s),
            RemoveEvent::Removed(d) => d.serialize(s),
            RemoveEvent::Decided(d) => d.serialize(s),
        }
    }
}

impl crate::log::Kind for RemoveEvent {
    const VERSION: u32 = VERSION;

    fn kind(&self) -> &'static str {
        RemoveEvent::kind(self)
    }

    fn data(&self) -> impl Serialize + '_ {
        self
    }

    fn parse_data(kind: &str, data: &str) -> Option<Result<RemoveEvent, JsonError>> {
        RemoveEvent::parse(kind, data)
    }
}

/// The removal log's writer.
pub type RemoveLog = crate::log::ChainWriter<RemoveEvent>;
