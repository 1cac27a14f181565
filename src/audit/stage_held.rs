//! The holder scan at verification time: the moment that matters, just
//! before the stage is deleted. Any holder, mount or loop device means
//! retain (`stage_held`), each named; a stage that cannot be scanned means
//! retain too (`holders_not_scanned`). A process the scan cannot read is
//! named in the verdict but does not decide it: what a verifier may read
//! is its privilege, like the PID namespaces it cannot see (README).

use std::os::fd::BorrowedFd;
use std::path::Path;

use super::record::HoldersScanned;
use crate::holders::scan::scan_fds;
use crate::holders::{text, HolderScan};

/// What a recorded scan says: one detail per finding (none: not held), or
/// why it could not run. The discard decides on this, and its replay too.
pub fn findings(h: &HoldersScanned) -> Result<Vec<String>, String> {
    match h {
        HoldersScanned::Scanned(s) => Ok(held(s)),
        HoldersScanned::Failed { error } => Err(error.clone()),
    }
}

fn held(s: &HolderScan) -> Vec<String> {
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

/// What a verifier says about the stage at `path`, open as `dir` (the
/// descriptor its inventory was taken through): one detail per finding
/// (`Err` when it could not be scanned), and the scan for the verdict.
pub fn check(
    path: &Path,
    dir: BorrowedFd<'_>,
) -> (Result<Vec<String>, String>, Option<HolderScan>) {
    match scan_fds(&[(path, dir)]) {
        Ok(s) => (Ok(held(&s)), Some(s)),
        Err(e) => (
            Err(format!("cannot scan {} for holders: {e}", path.display())),
            None,
        ),
    }
}
