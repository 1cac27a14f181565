//! The watchdog's records about the stage it was given (docs/stage.md).

use serde::{Deserialize, Serialize};

use super::tree::{DirIdentity, Inventory, PrivateState, TempEntry};

/// A stage made by `rea-stage begin` was armed (docs/stage.md): the watchdog
/// created `marker` in it exclusively, before its first spawn, so
/// `rea-stage discard` refuses it from then on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StageArmed {
    /// The stage (as in `run_started`'s staging identity).
    pub path: String,
    /// The marker's name in the stage (`.rea-exec-started`).
    pub marker: String,
    /// The marker's inode.
    pub ino: u64,
}

/// What happened to one entry of the stage between its baseline (at the
/// watchdog's start) and close.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Added,
    Removed,
    /// Another type, or another inode, at the same path (a file renamed
    /// over, swapped for a symlink or a hard link).
    Replaced,
    /// The same inode with other content, target, size, mode, owner or
    /// link count.
    Changed,
}

/// One field of an entry that differs between baseline and close.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Aspect {
    Inode,
    Content,
    Target,
    Size,
    Mode,
    Owner,
    Links,
}

/// One entry that differs, named for people.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StageChange {
    /// Relative to the stage, escaped as in inventories.
    pub path: String,
    pub change: Change,
    /// Its type at the baseline (absent when added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// Its type at close (absent when removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// What differs, for `changed` and for a `replaced` of the same type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub what: Vec<Aspect>,
}

/// The stage at close is not its baseline (docs/stage.md): written right
/// after `staging_inventoried` when the two digests differ. `verify`
/// decides from the digests (`stage_changed_during_run`); this record
/// names the entries.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StagingChanged {
    /// The baseline's inventory digest.
    pub baseline: String,
    /// The inventory digest at close.
    pub now: String,
    /// The first 64 entries that differ, in path order.
    pub changes: Vec<StageChange>,
    /// How many more differ.
    pub more: u64,
    /// Why the entries were not compared (a stage past the listing's cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unnamed: Option<String>,
}

/// The stage at the watchdog's start, before its first spawn (docs/stage.md,
/// "Nothing changes during the run"): the same walk as `staging_inventoried`
/// at close, plus what was uploaded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StagingBaseline {
    pub identity: DirIdentity,
    pub inventory: Inventory,
    /// Sockets, FIFOs, devices and mount points, named for people.
    pub special: Vec<TempEntry>,
    pub special_truncated: bool,
    /// The content digest (docs/stage.md, "The expected content"): what
    /// `rea-stage manifest --digest` computes from the local files and
    /// `rea-audit verify --expect-stage-digest` compares. `None` for a
    /// stage too large to list entry by entry.
    pub content: Option<String>,
    /// How many names the before-transfer receipt pinned a SHA-256 for;
    /// all of them matched (else the start was refused).
    pub pinned: u64,
    /// The watchdog's own files in the stage, left out of `inventory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<PrivateState>,
}

impl StagingBaseline {
    /// The baseline record of a walk (`seen`), with what was uploaded.
    pub fn new(seen: StagingInventoried, content: Option<String>, pinned: u64) -> StagingBaseline {
        StagingBaseline {
            identity: seen.identity,
            inventory: seen.inventory,
            special: seen.special,
            special_truncated: seen.special_truncated,
            content,
            pinned,
            private: seen.private,
        }
    }
}

/// Why a watchdog whose log was already open refused to start; nothing
/// was launched. The last record of such a log, which has no receipt.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StartRefusal {
    /// The stage is not what the before-transfer receipt pinned: an entry
    /// missing, added, of another type, or with other content.
    StageNotAsUploaded,
    /// The stage did not answer within its deadline (a stuck mount).
    StageUnreadable,
    /// The stage could not be armed or walked (replaced, already armed,
    /// being discarded, an I/O error).
    StageRefused,
}

/// The start was refused after the log was opened (`start_refused`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StartRefused {
    pub code: StartRefusal,
    /// What was wrong, for people (each mismatch named, bounded).
    pub detail: String,
}

impl StartRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            StartRefusal::StageNotAsUploaded => "stage_not_as_uploaded",
            StartRefusal::StageUnreadable => "stage_unreadable",
            StartRefusal::StageRefused => "stage_refused",
        }
    }
}

impl std::fmt::Display for StartRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.detail)
    }
}

/// The stage at close (`staging_inventoried`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StagingInventoried {
    pub identity: DirIdentity,
    pub inventory: Inventory,
    /// Sockets, FIFOs, devices and mount points in the stage, named for
    /// people (the first [`crate::inventory::MAX_SPECIAL`]); `inventory`
    /// covers them all.
    pub special: Vec<TempEntry>,
    pub special_truncated: bool,
    /// Set when the stage could not be read within its deadline at close
    /// (a stuck file system on or under it): why, the blocked helper
    /// named. `identity` is then the start's and `inventory` empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// The watchdog's own files in the stage, left out of `inventory`
    /// (docs/stage.md, "The watchdog's own place"); at close, with what
    /// became of the state directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<PrivateState>,
}
