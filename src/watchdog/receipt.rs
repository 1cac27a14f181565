//! The receipt room: the proof of quiescence, the temp root, the staging
//! inventory, and what the action ended as (docs/stop.md).
//!
//! It takes plain values (what reaping and a scan said, whether the held
//! pidfds all exited, how the stop ended, the ledger's counts) and never
//! the other rooms, so the proof can be read in one place.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::baseline::Stage;
use super::effect::ReplyTo;
use super::ledger::Ledger;
use super::state_dir::StateDir;
use super::stop::Stopper;
use crate::bounded::{Failure, STAGE_DEADLINE};
use crate::contain::group::ActionGroup;
use crate::holders::scan::scan;
use crate::inventory::{self, Listing};
use crate::kinds::watchdog::HoldersScanned;
use crate::kinds::watchdog::{
    no_live_or_waitable, Event, Inventory, PrivateRemoved, Receipt, StagingInventoried,
    StopCompleted, TempRootInventoried, TempRootRemoved,
};
use crate::kinds::watchdog::{GroupIdentity, GroupRemoved};

/// How long close waits for `populated 0` after the last reap.
const GROUP_EMPTY_WAIT: std::time::Duration = std::time::Duration::from_millis(200);
use crate::process::reap::Peek;
use crate::process::scan::descendants;
use crate::protocol::{Reply, PROTOCOL_VERSION};
use crate::vocab::{bounded, Ident, Outcome, RefusalReason, Status, StopReason};

/// How the exec job ended, for exec's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecResult {
    Exited(Status),
    Failed(RefusalReason),
}

/// What the action ended as; the binary turns it into an exit status.
#[derive(Clone, Debug)]
pub struct Finished {
    pub positive: bool,
    pub outcome: Outcome,
    pub stop_reason: Option<StopReason>,
    /// The signal that started the stop, when the first trigger was one.
    pub signal: Option<i32>,
    /// The sealed log's head; `None` if the receipt could not be made durable.
    pub head: Option<String>,
    pub audit_error: Option<String>,
    pub exec: Option<ExecResult>,
    pub audit_log: PathBuf,
    pub run_id: String,
}

/// What the proof is made of, read just before the receipt.
pub struct Evidence<'a> {
    /// `waitid` said ECHILD after the last reap.
    pub echild: bool,
    /// A `/proc` scan that did not fail found no descendant.
    pub scan_empty: bool,
    /// Every pidfd the watchdog held (the stop's and the jobs') exited.
    pub held_exited: bool,
    /// How the stop ended, when there was one.
    pub stop: Option<&'a StopCompleted>,
    /// cgroup mode: `cgroup.events` said populated at close (an
    /// unreadable one counts as populated); `None` without a group.
    pub group_populated: Option<bool>,
    /// A foreign member was recorded (docs/ownership.md): a process the
    /// action did not start was in its group, so its end is not the
    /// action's own, whatever became of the stranger.
    pub foreign: bool,
}

impl Evidence<'_> {
    /// No live or waitable descendant (the one quiescence rule).
    pub fn no_live(&self) -> bool {
        no_live_or_waitable(self.echild, self.scan_empty)
    }

    /// The whole proof: nothing live or waitable, every held pidfd exited,
    /// and a stop (if any) that did not run out of its kill bound.
    pub fn quiescent(&self) -> bool {
        self.no_live()
            && self.held_exited
            && self.stop.is_none_or(StopCompleted::proved)
            && self.group_populated != Some(true)
            && !self.foreign
    }
}

/// Gathers the evidence just before the receipt: `last` is what `waitid`
/// said after the final reap; a `/proc` scan is made here; `held_exited`
/// covers the stop procedure's pidfds and the jobs'.
pub fn evidence(
    last: Peek,
    me: Ident,
    stop: Option<&mut (Stopper, StopCompleted)>,
    jobs_empty: bool,
    group_populated: Option<bool>,
    foreign: bool,
) -> Evidence<'_> {
    let scan_empty = matches!(descendants(me.pid), Ok(s) if s.is_empty());
    let (held_exited, done) = match stop {
        Some((stopper, done)) => (stopper.held_exited(), Some(&*done)),
        None => (true, None),
    };
    Evidence {
        echild: last.none_left(me.pid),
        scan_empty,
        held_exited: held_exited && jobs_empty,
        stop: done,
        group_populated,
        foreign,
    }
}

/// At close in cgroup mode (docs/containment.md): waits (bounded) for `populated 0`,
/// removes the group when it is empty, records both. Returns whether it
/// was populated (`None` without a group); a group left behind is named
/// on stderr as well. A group still populated is searched for foreign
/// members (docs/ownership.md), each recorded; none is ever killed here.
pub fn close_group(group: Option<ActionGroup>, me: Ident, ledger: &mut Ledger) -> Option<bool> {
    let group = group?;
    let id = GroupIdentity {
        path: group.path().to_string_lossy().into_owned(),
        ino: group.ino(),
    };
    let populated = !matches!(group.wait_empty(GROUP_EMPTY_WAIT), Ok(true));
    if populated {
        for (process, why) in foreign_members(&group, me) {
            ledger.foreign(process, &why);
        }
    }
    let (removed, detail) = match populated {
        true => (
            false,
            "kept: cgroup.events does not say populated 0".to_string(),
        ),
        false => match group.remove() {
            Ok(()) => (true, String::new()),
            Err((_, e)) => (false, bounded(&format!("rmdir: {e}"))),
        },
    };
    if !removed {
        crate::tell::note(format_args!("cgroup {} left in place: {detail}", id.path));
    }
    ledger.append(Event::GroupRemoved(GroupRemoved {
        group: id,
        populated,
        removed,
        detail,
    }));
    Some(populated)
}

/// Records each job leader still unreaped at sealing (`exec` sealed after
/// its final wait): its state and wait channel, as `/proc` shows them.
pub fn unkillable<'a>(leaders: impl Iterator<Item = &'a crate::vocab::Proc>, ledger: &mut Ledger) {
    for p in leaders {
        let stat = crate::process::identity::read_stat(p.pid).ok();
        let same = stat.as_ref().filter(|s| s.start_time == p.start_time);
        let state = same.map_or("?".into(), |s| char::from(s.state).to_string());
        let wchan = std::fs::read_to_string(format!("/proc/{}/wchan", p.pid))
            .ok()
            .filter(|w| same.is_some() && !w.is_empty() && w != "0")
            .map(|w| bounded(&w));
        let process = p.clone();
        ledger.append(Event::Unkillable(crate::kinds::watchdog::Unkillable {
            process,
            state,
            wchan,
        }));
    }
}

/// The live members of `group` (nested groups too) that lineage does not
/// prove the action's (`me`: the watchdog).
fn foreign_members(group: &ActionGroup, me: Ident) -> Vec<(crate::vocab::Proc, String)> {
    use crate::process::identity::read_stat;
    use crate::process::lineage::{Lineage, Proven};
    let mut proven = Proven::default();
    let mut out = Vec::new();
    for pid in group.members_deep().unwrap_or_default() {
        let Ok(st) = read_stat(pid) else {
            continue;
        };
        if st.is_zombie() {
            continue;
        }
        if let Lineage::Foreign(why) = proven.prove(&st, me, |_| false) {
            out.push((st.recorded(), why));
        }
    }
    out
}

/// The `closed` reply to the request that closed the action.
pub fn closed_reply(
    to: &ReplyTo,
    reason: Option<StopReason>,
    positive: bool,
    head: Option<&str>,
    log: &Path,
) -> Reply {
    Reply::Closed {
        v: PROTOCOL_VERSION,
        id: to.id.clone(),
        outcome: outcome(reason),
        stop_reason: reason,
        positive: positive && head.is_some(),
        head: head.unwrap_or_default().to_string(),
        audit_log: log.to_string_lossy().into_owned(),
    }
}

/// The holder scan at close, of the stage and the temp root, recorded.
/// Returns why the temp root must be kept, if it must: something holds it
/// (a process that is not a descendant: quiescence is proven first), or
/// the scan could not say. It walks the trees, so it runs in a helper
/// with a deadline ([`crate::bounded`]): a scan that does not answer in
/// time is a failed scan (the temp root is kept), never a hang.
fn scan_holders(staging: Option<&Path>, state: &StateDir, ledger: &mut Ledger) -> Option<String> {
    let tmp = state.tmp_path();
    let mut roots: Vec<&Path> = staging.into_iter().collect();
    roots.push(&tmp);
    let key = format!(
        "holders {}",
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let scanned = crate::bounded::run("the holder scan", &key, STAGE_DEADLINE, &[], || {
        scan(&roots).map_err(crate::bounded::WorkError::of)
    });
    let (record, keep) = match scanned {
        Ok(h) => {
            let held = h.roots.last().map_or(0, |r| r.held);
            let keep = (held > 0).then(|| format!("kept: held by {held} holder(s) at close"));
            (HoldersScanned::Scanned(h), keep)
        }
        Err(e) => {
            let error = bounded(&e.to_string());
            crate::tell::note(format_args!("the holder scan at close failed: {error}"));
            let keep = format!("kept: the holder scan failed: {error}");
            (HoldersScanned::Failed { error }, Some(keep))
        }
    };
    ledger.append(Event::HoldersScanned(record));
    keep
}

/// Inventories the private temp root and removes it, only when no process
/// can still be using it and it is still the directory created at start.
fn clear_temp_root(
    state: &StateDir,
    quiescent: bool,
    held: Option<String>,
    ledger: &mut Ledger,
) -> bool {
    let tmp = state.tmp_path();
    let key = tmp.to_string_lossy();
    let opened = crate::bounded::run("the temp root", &key, STAGE_DEADLINE, &[], || {
        let fd = inventory::open_dir(&tmp).map_err(|e| e.to_string())?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| e.to_string())?;
        if (st.st_dev, st.st_ino) != (state.tmp.dev, state.tmp.ino) {
            return Err("the temp root was replaced".into());
        }
        inventory::inventory_fd(fd.as_fd(), 64).map_err(crate::bounded::WorkError::of)
    });
    match opened {
        Ok((inv, listing)) => {
            let truncated = (listing.len() as u64) < inv.entries;
            ledger.append(Event::TempRootInventoried(TempRootInventoried {
                path: state.tmp.path.clone(),
                inventory: inv,
                listing,
                truncated,
            }));
        }
        Err(e) => {
            ledger.append(Event::TempRootRemoved(TempRootRemoved {
                removed: false,
                detail: bounded(&format!("cannot inventory: {e}")),
            }));
            return false;
        }
    }
    let (removed, detail) = if !quiescent {
        let why = "kept: quiescence was not proven, a process may still use it";
        (false, why.to_string())
    } else if let Some(why) = held {
        (false, why)
    } else {
        // Through the state directory's descriptor, kept in the helper.
        let keep = [state.dir.as_fd()];
        match crate::bounded::run("the temp root", &key, STAGE_DEADLINE, &keep, || {
            state.remove_tmp().map_err(crate::bounded::WorkError::of)
        }) {
            Ok(()) => (true, String::new()),
            Err(e) => (false, bounded(&e.to_string())),
        }
    };
    ledger.append(Event::TempRootRemoved(TempRootRemoved { removed, detail }));
    removed
}

/// Staging is inventoried, never deleted. An unreadable stage keeps the
/// start identity with an empty inventory, which `verify --staging` then
/// cannot match (fail closed). The walk runs in a helper with a deadline
/// ([`crate::bounded`], room for the baseline's bytes): a stage that does
/// not answer in time (a stuck mount on or under it) is recorded
/// `unreadable`, its helper named, and `verify` says `stage_unreadable`
/// (retain). With a baseline, the entries are listed to name what changed.
fn read_staging(path: Option<&Path>, stage: &Stage) -> Option<(StagingInventoried, Listing)> {
    let (path, start) = (path?, stage.start.as_ref()?);
    let what = format!("the stage {}", path.display());
    let key = path.to_string_lossy();
    let read = crate::bounded::run(&what, &key, stage.close_deadline(), &[], || {
        inventory::staging_listed(path, stage.private.as_ref())
            .map_err(crate::bounded::WorkError::of)
    });
    let unreadable = match read {
        Ok(seen) => return Some(seen),
        Err(Failure::Blocked(b)) => {
            crate::tell::note(format_args!("{b}"));
            Some(bounded(&b.to_string()))
        }
        Err(Failure::Failed(_)) => None,
    };
    let seen = StagingInventoried {
        identity: start.clone(),
        inventory: Inventory {
            entries: 0,
            bytes: 0,
            digest: crate::log::chain::line_hash(b""),
        },
        special: Vec::new(),
        special_truncated: false,
        unreadable,
        private: stage.private.clone(),
    };
    Some((seen, Listing::default()))
}

/// Removes the state directory the stage holds (docs/stage.md, "The
/// watchdog's own place"), only once the temp root inside it is gone
/// (no process can still use either); in a helper with a deadline. The
/// open reply channels outlive their names, so the closer still gets its
/// answer.
fn remove_state_dir(state: &StateDir, temp_root_removed: bool) -> PrivateRemoved {
    if !temp_root_removed {
        return PrivateRemoved {
            removed: false,
            detail: "kept: the temp root inside it was kept".into(),
        };
    }
    match state.remove_all_bounded() {
        Ok(()) => PrivateRemoved {
            removed: true,
            detail: String::new(),
        },
        Err(e) => PrivateRemoved {
            removed: false,
            detail: bounded(&format!("cannot remove: {e}")),
        },
    }
}

/// Where and when the action is sealed.
pub struct Sealing<'a> {
    pub state: &'a StateDir,
    pub staging: Option<&'a Path>,
    /// Its identity at start and its baseline.
    pub stage: &'a Stage,
    pub root_alive: bool,
    /// The first stop trigger's reason; `None` for a plain close.
    pub reason: Option<StopReason>,
}

/// Scans for holders, clears the temp root, inventories the stage, writes
/// the receipt (the last record). Returns whether the receipt is positive, and the head
/// (`None` when the receipt could not be made durable).
pub fn seal(ev: &Evidence<'_>, at: &Sealing<'_>, ledger: &mut Ledger) -> (bool, Option<String>) {
    ledger.flush_burst(); // its refusals are in the receipt's counts
                          // The stage is read first, so that a stage that cannot be read is
                          // left out of the holder scan (which would only block on it again);
                          // its record keeps its place, after the temp root's.
    let read = read_staging(at.staging, at.stage);
    let stuck = read.as_ref().is_some_and(|(s, _)| s.unreadable.is_some());
    let held = scan_holders(at.staging.filter(|_| !stuck), at.state, ledger);
    let removed = clear_temp_root(at.state, ev.quiescent(), held, ledger);
    let staging = read.map(|(mut seen, listing)| {
        if let Some(p) = seen.private.as_mut().filter(|p| p.state_dir.is_some()) {
            p.state_dir_removed = Some(remove_state_dir(at.state, removed));
        }
        ledger.append(Event::StagingInventoried(seen.clone()));
        if let Some(changed) = at.stage.changed(&seen, &listing) {
            ledger.append(changed);
        }
        seen
    });
    let rc = receipt(at.reason, ev, removed, staging, at.root_alive, ledger);
    let positive = rc.is_positive();
    (positive, ledger.seal(&Event::Receipt(rc)))
}

/// What the action ended as, for the binary.
pub fn finished(
    positive: bool,
    head: Option<String>,
    reason: Option<StopReason>,
    signal: Option<i32>,
    exec: Option<ExecResult>,
    ledger: &Ledger,
) -> Finished {
    Finished {
        positive: positive && head.is_some() && ledger.error().is_none(),
        outcome: outcome(reason),
        stop_reason: reason,
        signal,
        head,
        audit_error: ledger.error().map(str::to_string),
        exec,
        audit_log: ledger.path().to_path_buf(),
        run_id: ledger.run().to_string(),
    }
}

/// The receipt for what the action ended as.
fn receipt(
    stop_reason: Option<StopReason>,
    ev: &Evidence<'_>,
    temp_root_removed: bool,
    staging: Option<StagingInventoried>,
    root_alive: bool,
    ledger: &Ledger,
) -> Receipt {
    Receipt {
        outcome: outcome(stop_reason),
        stop_reason,
        quiescent: ev.quiescent(),
        no_live_or_waitable_descendants: ev.no_live(),
        uncertain_mappings: ledger.uncertain_count(),
        temp_root_removed,
        root_alive,
        counts: ledger.counts().clone(),
        staging,
    }
}

pub fn outcome(stop_reason: Option<StopReason>) -> Outcome {
    match stop_reason {
        Some(_) => Outcome::Stopped,
        None => Outcome::Closed,
    }
}
