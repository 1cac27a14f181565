//! The holder scan at verification time: the moment that matters, just
//! before the stage is deleted. Any holder, mount or loop device means
//! retain (`stage_held`), each named; a stage that cannot be scanned means
//! retain too (`holders_not_scanned`). A process the scan cannot read is
//! named in the verdict but does not decide it: what a verifier may read
//! is its privilege, like the PID namespaces it cannot see (docs/guarantees.md).

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bounded::{self, hash_deadline, Failure};
use crate::holders::scan::scan_fds;
use crate::holders::HolderScan;
use crate::inventory;
pub use crate::kinds::held::{findings, held};
use crate::kinds::watchdog::{DirIdentity, PrivateState, StagingInventoried};

/// What a verifier says about the stage at `path`, open as `dir` (the
/// descriptor its inventory was taken through): one detail per finding
/// (`Err` when it could not be scanned), and the scan for the verdict.
pub fn check(
    path: &Path,
    dir: BorrowedFd<'_>,
) -> (Result<Vec<String>, NotScanned>, Option<HolderScan>) {
    match scan_fds(&[(path, dir)]) {
        Ok(s) => (Ok(held(&s)), Some(s)),
        Err(e) => {
            let why = NotScanned {
                stage: path.display().to_string(),
                cause: e.to_string(),
            };
            (Err(why), None)
        }
    }
}

/// The stage as a verifier finds it now: its inventory, and the holder
/// scan when it is the directory the log recorded (`Err`: why it could
/// not be scanned).
#[derive(Serialize, Deserialize)]
pub struct StageNow {
    pub now: StagingInventoried,
    pub scan: Option<Result<HolderScan, NotScanned>>,
    /// The watchdog's own files not as close left them, one detail each
    /// (`private_state_changed`; docs/stage.md, "The watchdog's own place").
    pub private: Vec<String>,
}

/// Why the stage could not be scanned for holders (`holders_not_scanned`).
/// Made in [`look`]'s helper and carried back across its pipe, so both
/// parts are text: the stage as shown, and the scan's own error.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct NotScanned {
    pub stage: String,
    pub cause: String,
}

impl std::fmt::Display for NotScanned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot scan {} for holders: {}", self.stage, self.cause)
    }
}

/// Inventories the stage at `path` and, when it is the directory `expect`
/// (device, inode, owner, mode), scans it for holders through the same
/// descriptor: all of it in a helper with a deadline ([`hash_deadline`])
/// ([`crate::bounded`]), so a stuck mount on or under the stage makes an
/// answer ([`Failure::Blocked`]: `stage_unreadable`), not a hang.
/// [`Failure::Failed`] is the inventory's own error.
pub fn look(
    path: &Path,
    expect: Option<&DirIdentity>,
    private: Option<&PrivateState>,
) -> Result<StageNow, Failure> {
    look_at(path, None, expect, private, 0)
}

/// [`look`] through `opened` when given: the stage a caller already opened
/// (without symlinks, `rea-stage remove`) and acts on through that
/// descriptor, so the inventory and the holder scan are of that very
/// directory, whatever `path` leads to now; `path` only names it.
/// `private`: the watchdog's own files the run recorded in the stage, left
/// out of the inventory as they were at close. `bytes`: the stage's size
/// as recorded, for the deadline (hashing takes time in proportion).
pub fn look_at(
    path: &Path,
    opened: Option<BorrowedFd<'_>>,
    expect: Option<&DirIdentity>,
    private: Option<&PrivateState>,
    bytes: u64,
) -> Result<StageNow, Failure> {
    let what = format!("the stage {}", path.display());
    let key = path.to_string_lossy();
    let keep: Vec<BorrowedFd<'_>> = opened.into_iter().collect();
    bounded::run(&what, &key, hash_deadline(bytes), &keep, || {
        let (now, dir) = match opened {
            Some(fd) => (inventory::staging_fd(fd, path, private), fd),
            None => {
                let (now, owned) =
                    inventory::staging_open(path, private).map_err(|e| e.to_string())?;
                return Ok(scanned(path, expect, now, owned.as_fd(), private));
            }
        };
        Ok(scanned(
            path,
            expect,
            now.map_err(|e| e.to_string())?,
            dir,
            private,
        ))
    })
}

fn scanned(
    path: &Path,
    expect: Option<&DirIdentity>,
    now: StagingInventoried,
    dir: BorrowedFd<'_>,
    private: Option<&PrivateState>,
) -> StageNow {
    let same = expect.is_some_and(|e| inventory::same_dir(e, &now.identity));
    let scan = same.then(|| {
        scan_fds(&[(path, dir)]).map_err(|e| NotScanned {
            stage: path.display().to_string(),
            cause: e.to_string(),
        })
    });
    let private = private.map_or_else(Vec::new, |p| super::private::now(dir, p));
    StageNow { now, scan, private }
}

/// [`check`]'s answer from a scan [`look`] made.
pub fn found(
    scan: Result<HolderScan, NotScanned>,
) -> (Result<Vec<String>, NotScanned>, Option<HolderScan>) {
    match scan {
        Ok(s) => (Ok(held(&s)), Some(s)),
        Err(e) => (Err(e), None),
    }
}
