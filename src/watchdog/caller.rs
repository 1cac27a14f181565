//! Who may ask (docs/requests.md): the root controller, or an actual descendant of
//! the watchdog or of the root, with the watchdog's uid and exactly the
//! start time the request claims.

use crate::kinds::watchdog::Ident;
use crate::process::identity::{is_gone, read_stat, Stat};
use crate::process::pidfd::{bind_ident, BindError, VerifiedPidFd};
use crate::protocol::{Caller, RefusalReason};

/// Longest PPID chain walked before giving up (refused, never a hang).
const MAX_ANCESTRY: usize = 4096;

pub enum Verified {
    /// The caller is the root controller (already bound at start).
    Root,
    /// A bound descendant of the watchdog or of the root.
    Bound(Bound),
}

/// A caller bound by its pidfd, and where its ancestry met the watchdog.
pub struct Bound {
    pub fd: VerifiedPidFd,
    /// The watchdog's own child on the caller's PPID chain (the caller
    /// itself when the watchdog is its parent): a job's leader, or an
    /// orphan the watchdog adopted. `None` when the chain reached the
    /// root controller instead. It names the job that asked (docs/review.md:
    /// launchers shown under the job that asked for them).
    pub via: Option<Stat>,
}

pub type Refused = (RefusalReason, String);

/// Binds the claimed caller (pidfd first, then read back), then walks its
/// PPID links up to the watchdog or the root.
pub fn verify(
    claim: Caller,
    me: Ident,
    root: Option<Ident>,
    root_alive: bool,
) -> Result<Verified, Refused> {
    if claim.uid != me.uid {
        return Err((
            RefusalReason::CallerMismatch,
            format!(
                "caller uid {} is not the watchdog's uid {}",
                claim.uid, me.uid
            ),
        ));
    }
    if Some(claim.ident()) == root {
        // Bound at start and watched since: no new descriptor is needed, so
        // the root's stop and close work however short of them the watchdog
        // is (docs/stop.md, "Descriptors").
        return match root_alive {
            true => Ok(Verified::Root),
            false => Err((
                RefusalReason::CallerNotAlive,
                format!("caller pid {} (the root) is not alive", claim.pid),
            )),
        };
    }
    let fd = match bind_ident(claim.ident()) {
        Ok(fd) => fd,
        Err(BindError::Gone) => {
            return Err((
                RefusalReason::CallerNotAlive,
                format!("caller pid {} is not alive", claim.pid),
            ))
        }
        Err(BindError::NoDescriptors(detail)) => {
            return Err((RefusalReason::NoDescriptors, detail))
        }
        Err(BindError::Uncertain { detail, .. }) => {
            return Err((RefusalReason::CallerMismatch, detail))
        }
    };
    // The process below `pid` on the chain: `None` while that is the
    // caller itself (whose stat is read only if it is the watchdog's child).
    let mut below: Option<Stat> = None;
    let mut pid = fd.proc().ppid;
    for _ in 0..MAX_ANCESTRY {
        if pid == me.pid {
            // The caller itself when it is the watchdog's child: its stat
            // as the bind read it (its session names the job it leads).
            let via = Some(below.unwrap_or_else(|| fd.stat()));
            return Ok(Verified::Bound(Bound { fd, via }));
        }
        if pid <= 0 {
            break;
        }
        let st = match read_stat(pid) {
            Ok(st) => st,
            Err(e) if is_gone(&e) => break,
            Err(e) => {
                return Err((
                    RefusalReason::CallerNotOwned,
                    format!("cannot read /proc/{pid}: {e}"),
                ))
            }
        };
        // The root may be pid 1 (a PID namespace's init): compare before
        // stopping at the top of the tree.
        if root.is_some_and(|r| pid == r.pid && st.start_time == r.start_time) {
            return Ok(Verified::Bound(Bound { fd, via: None }));
        }
        if pid == 1 {
            break;
        }
        pid = st.ppid;
        below = Some(st);
    }
    Err((
        RefusalReason::CallerNotOwned,
        format!(
            "caller pid {} descends from neither the watchdog ({}) nor the root controller ({})",
            claim.pid,
            me.pid,
            root.map_or("none".to_string(), |r| r.pid.to_string())
        ),
    ))
}
