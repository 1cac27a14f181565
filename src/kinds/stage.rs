//! The watchdog's records about the stage it was given (docs/stage.md).

use serde::{Deserialize, Serialize};

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
