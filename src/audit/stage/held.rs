//! The holder scan at verification time: the moment that matters, just
//! before the stage is deleted. Any holder, mount or loop device means
//! retain (`stage_held`), each named; a stage that cannot be scanned means
//! retain too (`holders_not_scanned`). A process the scan cannot read is
//! named in the verdict but does not decide it: what a verifier may read
//! is its privilege, like the PID namespaces it cannot see (docs/guarantees.md).

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bounded::{self, Failure, STAGE_DEADLINE};
use crate::holders::scan::scan_fds;
use crate::holders::HolderScan;
use crate::inventory;
pub use crate::kinds::held::{findings, held};
use crate::kinds::watchdog::{DirIdentity, StagingInventoried};

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

/// The stage as a verifier finds it now: its inventory, and the holder
/// scan when it is the directory the log recorded (`Err`: why it could
/// not be scanned).
#[derive(Serialize, Deserialize)]
pub struct StageNow {
    pub now: StagingInventoried,
    pub scan: Option<Result<HolderScan, String>>,
}

/// Inventories the stage at `path` and, when it is the directory `expect`
/// (device, inode, owner, mode), scans it for holders through the same
/// descriptor: all of it in a helper with [`STAGE_DEADLINE`]
/// ([`crate::bounded`]), so a stuck mount on or under the stage makes an
/// answer ([`Failure::Blocked`]: `stage_unreadable`), not a hang.
/// [`Failure::Failed`] is the inventory's own error.
pub fn look(path: &Path, expect: Option<&DirIdentity>) -> Result<StageNow, Failure> {
    let what = format!("the stage {}", path.display());
    let key = path.to_string_lossy();
    bounded::run(&what, &key, STAGE_DEADLINE, &[], || {
        let (now, dir) = inventory::staging_open(path).map_err(|e| e.to_string())?;
        let same = expect.is_some_and(|e| inventory::same_dir(e, &now.identity));
        let scan = same.then(|| {
            scan_fds(&[(path, dir.as_fd())])
                .map_err(|e| format!("cannot scan {} for holders: {e}", path.display()))
        });
        Ok(StageNow { now, scan })
    })
}

/// [`check`]'s answer from a scan [`look`] made.
pub fn found(
    scan: Result<HolderScan, String>,
) -> (Result<Vec<String>, String>, Option<HolderScan>) {
    match scan {
        Ok(s) => (Ok(held(&s)), Some(s)),
        Err(e) => (Err(e), None),
    }
}
