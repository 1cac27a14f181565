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
