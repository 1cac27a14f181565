//! Directory trees as records name them: a directory's identity, the
//! digest of a tree's listing, one entry named for people. The bottom of
//! the record kinds: it imports none of them.

use serde::{Deserialize, Serialize};

/// What a directory was when it was first seen; compared again by `verify`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirIdentity {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub mode: u32,
}

/// A digest of a directory tree's listing (see `inventory`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    pub entries: u64,
    pub bytes: u64,
    pub digest: String,
}

/// One entry of a tree, named for people.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TempEntry {
    pub path: String,
    pub kind: String,
    pub size: u64,
}

/// The watchdog's own files inside the stage it was given (docs/stage.md,
/// "The watchdog's own place"): its state directory and its audit log
/// when they lie in the stage (under `.rea/`). They are left out of the
/// stage's inventory and digests, and accounted for here instead: the
/// state directory is removed at close, the log stays, sealed, as the
/// very file the watchdog wrote.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PrivateState {
    /// The state directory, relative to the stage (`.rea/state`).
    pub state_dir: Option<String>,
    /// The audit log, relative to the stage (`.rea/audit.jsonl`).
    pub audit_log: Option<String>,
    /// The audit log's inode: the entry at `audit_log` must be this file.
    pub audit_log_ino: Option<u64>,
    /// At close only: whether the state directory was removed (`None` in
    /// the baseline, and when there is no state directory in the stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir_removed: Option<PrivateRemoved>,
}

/// What close did with the state directory in the stage.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PrivateRemoved {
    pub removed: bool,
    /// Why it was kept, or what failed; empty when removed.
    pub detail: String,
}

impl PrivateState {
    /// The paths a stage's walk leaves out, relative to the stage.
    pub fn skipped(&self) -> Vec<Vec<u8>> {
        [&self.state_dir, &self.audit_log]
            .into_iter()
            .flatten()
            .map(|p| p.as_bytes().to_vec())
            .collect()
    }

    /// The same paths, without what close adds: how a baseline's and a
    /// receipt's private state are compared.
    pub fn paths(&self) -> PrivateState {
        PrivateState {
            state_dir_removed: None,
            ..self.clone()
        }
    }
}
