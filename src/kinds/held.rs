//! What a recorded holder scan says, in words: one detail per holder,
//! mount or loop device found. The discard decides on it, its verifier's
//! replay re-derives the decision from it, and `verify` names the holders
//! of a stage with it.

use crate::holders::{text, HolderScan};
use crate::kinds::watchdog::HoldersScanned;

/// A recorded scan that could not run: its error as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanFailed(pub String);

impl std::fmt::Display for ScanFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a recorded scan says: one detail per finding (none: not held), or
/// why it could not run. The discard decides on this, and its replay too.
pub fn findings(h: &HoldersScanned) -> Result<Vec<String>, ScanFailed> {
    match h {
        HoldersScanned::Scanned(s) => Ok(held(s)),
        HoldersScanned::Failed { error } => Err(ScanFailed(error.clone())),
    }
}

/// One detail per finding of `s` (none: not held), the rest counted.
pub fn held(s: &HolderScan) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    found.extend(s.holders.iter().map(text::holder));
    found.extend(s.mounts.iter().map(text::mount));
    found.extend(s.loops.iter().map(text::loop_device));
    let named = (s.holders.len() + s.mounts.len() + s.loops.len()) as u64;
    let total = s.holders_total + s.mounts_total + s.loops_total;
    if total > named {
        found.push(format!("... and {} more", total - named));
    }
    found
}
