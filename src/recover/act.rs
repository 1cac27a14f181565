//! The recovery itself, once every check passed: freeze the group
//! (bounded by [`FREEZE_WAIT`]), take the census of the frozen group and
//! check every member against the run ([`crate::contain::proof`]), and
//! refuse (thawed, nothing killed) unless the group froze and every member
//! is the action's. Then `cgroup.kill` (through [`ActionGroup::kill`], on
//! the group opened by its recorded inode: the one other way anything in
//! rea is killed), wait (bounded by [`WAIT`]) for `populated 0`, `rmdir`
//! the group, inventory the stage, and look for live processes that still
//! carry the run's `REA_RUN_ID` outside it. Each step is made durable in
//! the recovery log as it is done; the checked members before the kill.

use std::path::Path;
use std::time::{Duration, Instant};

use super::log::RecoveryLog;
use crate::audit::reconcile::env::run_processes;
use crate::contain::census::census;
use crate::contain::group::ActionGroup;
use crate::contain::proof::checked_census;
use crate::kinds::group::{GroupIdentity, UnprovenMember};
use crate::kinds::recovery::{
    Code, Reason, RecoveryEvent, RecoveryFreeze, RecoveryGroupRemoved, RecoveryKilled,
    RecoveryMembers, RecoveryScan, RecoveryStaging, RecoveryStarted, ScanProc,
};
use crate::kinds::recovery_rule::{explain_members, failures, foreign, member_refusal};
use crate::kinds::watchdog::GroupMember;

/// How long the recovery waits for `populated 0` after `cgroup.kill`.
/// A constant, not a flag: the kernel delivers SIGKILL to every member at
/// once and the group empties as they exit (about 10 ms for 1000 here);
/// a group still populated after 5 s holds something SIGKILL cannot end
/// promptly (uninterruptible sleep), and the recovery says so instead of
/// waiting longer.
pub const WAIT: Duration = Duration::from_secs(5);

/// How long the recovery waits for `frozen 1` after `cgroup.freeze` 1.
/// A constant, like [`WAIT`]: a member freezes at its next return to user
/// space (microseconds); one that does not within 5 s sleeps
/// uninterruptibly, and the recovery refuses rather than kill a group it
/// could not hold still while it checked it.
pub const FREEZE_WAIT: Duration = Duration::from_secs(5);

/// Processes of the run found outside the group that are listed, at most.
const MAX_SCAN: usize = 64;

/// A record could not be made durable; whether `cgroup.kill` was written.
pub struct LogFailed {
    pub error: crate::log::LogError,
    pub killed: bool,
}

fn pids(ms: &[GroupMember]) -> String {
    let v: Vec<String> = ms.iter().map(|m| m.pid.to_string()).collect();
    if v.is_empty() {
        "none listed".into()
    } else {
        v.join(", ")
    }
}

/// What the recovery did.
pub enum Acted {
    /// Refused after the census (the group thawed, nothing killed): the
    /// reason, and the members that are not the action's.
    Refused(Reason, Vec<UnprovenMember>),
    /// It ran: the reasons it is not proven (empty: recovered).
    Ran(Vec<Reason>),
}

/// Freezes `g`, takes the census of the frozen group and checks every
/// member against the run (the record `recover` makes before it kills).
fn frozen_census(g: &ActionGroup, s: &RecoveryStarted) -> RecoveryMembers {
    let t0 = Instant::now();
    let froze = g.freeze(FREEZE_WAIT);
    let freeze = RecoveryFreeze {
        frozen: matches!(froze, Ok(true)),
        waited_ms: t0.elapsed().as_millis() as u64,
        wait_limit_ms: FREEZE_WAIT.as_millis() as u64,
        error: froze.err().map(|e| format!("cgroup.freeze: {e}")),
    };
    let run = s.log_run.clone().unwrap_or_default();
    let start = s.watchdog.map_or(u64::MAX, |w| w.start_time);
    let c = checked_census(g, &run, start);
    RecoveryMembers {
        group: crate::kinds::watchdog::GroupIdentity {
            path: g.path().display().to_string(),
            ino: g.ino(),
        },
        freeze,
        populated: c.populated,
        members: c.members,
        members_not_listed: c.not_listed,
        members_not_listed_foreign: c.not_listed_foreign,
        members_not_visible: c.not_visible,
        error: c.error,
    }
}

/// Undoes the freeze; what to tell about it when it fails (the group's
/// members stay stopped until `cgroup.freeze` is 0 again).
fn thaw(g: &ActionGroup) -> String {
    match g.thaw() {
        Ok(()) => String::new(),
        Err(e) => format!(
            "; the group could NOT be thawed ({e}): write 0 to {}/cgroup.freeze",
            g.path().display()
        ),
    }
}

/// Runs the recovery on `g` (see the module doc). Stops at the first
/// record that cannot be made durable (the group thawed if nothing was
/// killed).
pub fn act(log: &mut RecoveryLog, g: ActionGroup, s: &RecoveryStarted) -> Result<Acted, LogFailed> {
    let fail = |killed: bool| move |error: crate::log::LogError| LogFailed { error, killed };
    let before = frozen_census(&g, s);
    let identity = before.group.clone();
    if let Err(e) = log.record(&RecoveryEvent::Members(before.clone())) {
        thaw(&g);
        return Err(fail(false)(e));
    }
    if let Some(code) = member_refusal(s, &before) {
        let detail = explain_members(code, s, &before) + &thaw(&g);
        return Ok(Acted::Refused(Reason { code, detail }, foreign(s, &before)));
    }

    let killed = write_group_kill(&g);
    let populated = killed.populated;
    let wrote_kill = killed.kill_error.is_none();
    log.record(&RecoveryEvent::Killed(killed.clone()))
        .map_err(fail(wrote_kill))?;

    let removed = remove(g, identity, populated);
    log.record(&RecoveryEvent::GroupRemoved(removed.clone()))
        .map_err(fail(wrote_kill))?;

    if let Some(p) = &s.staging {
        let (staging, error) = match crate::inventory::staging(Path::new(p)) {
            Ok(st) => (Some(st), None),
            Err(e) => (None, Some(format!("cannot inventory {p}: {e}"))),
        };
        let rec = RecoveryStaging {
            path: p.clone(),
            staging,
            error,
        };
        log.record(&RecoveryEvent::Staging(rec))
            .map_err(fail(wrote_kill))?;
    }

    let run = s.log_run.clone().unwrap_or_default();
    let scan = scan_run(&run);
    log.record(&RecoveryEvent::Scan(scan.clone()))
        .map_err(fail(wrote_kill))?;

    let reasons = failures(&killed, &removed, &scan)
        .into_iter()
        .map(|code| Reason {
            code,
            detail: failure_detail(code, &killed, &removed, &scan),
        })
        .collect();
    Ok(Acted::Ran(reasons))
}

/// `cgroup.kill`, then the wait for `populated 0` (bounded by [`WAIT`]);
/// a group still populated is thawed, and its members left listed.
fn write_group_kill(g: &ActionGroup) -> RecoveryKilled {
    let t0 = Instant::now();
    let kill_error = g.kill().err().map(|e| format!("cgroup.kill: {e}"));
    if kill_error.is_none() {
        // Its answer is read again below, whatever it was.
        let _ = g.wait_empty(WAIT);
    }
    let waited_ms = t0.elapsed().as_millis() as u64;
    let populated = g.populated().ok();
    if populated != Some(false) {
        // Whoever is left runs again (a kill that was written is
        // delivered as they thaw); the group is not left stopped.
        thaw(g);
    }
    let left = match populated {
        Some(false) => Default::default(),
        _ => census(g),
    };
    RecoveryKilled {
        kill_error,
        populated,
        waited_ms,
        wait_limit_ms: WAIT.as_millis() as u64,
        members_left: left.members,
        members_left_not_listed: left.not_listed + left.not_visible,
    }
}

/// `rmdir` of the group, only once it is empty.
fn remove(g: ActionGroup, group: GroupIdentity, populated: Option<bool>) -> RecoveryGroupRemoved {
    let (removed, detail) = if populated == Some(false) {
        match g.remove() {
            Ok(()) => (true, String::new()),
            Err((_, e)) => (false, format!("rmdir: {e}")),
        }
    } else {
        (false, "not attempted: the group is still populated".into())
    };
    RecoveryGroupRemoved {
        group,
        removed,
        detail,
    }
}

/// The live processes that carry the run's `REA_RUN_ID` (the group is
/// gone or emptied: these are outside it), at most [`MAX_SCAN`] listed.
fn scan_run(run: &str) -> RecoveryScan {
    let mut scan = RecoveryScan {
        run: run.to_string(),
        processes: Vec::new(),
        processes_not_listed: 0,
        error: None,
    };
    match run_processes(run) {
        Ok(ps) => {
            for p in ps {
                if scan.processes.len() < MAX_SCAN {
                    scan.processes.push(ScanProc {
                        pid: p.pid,
                        start_time: p.start_time,
                        comm: crate::vocab::bounded(&p.comm),
                    });
                } else {
                    scan.processes_not_listed += 1;
                }
            }
        }
        Err(e) => scan.error = Some(format!("/proc scan: {e}")),
    }
    scan
}

/// What a failed step's reason says.
fn failure_detail(
    code: Code,
    killed: &RecoveryKilled,
    removed: &RecoveryGroupRemoved,
    scan: &RecoveryScan,
) -> String {
    match code {
        Code::KillFailed => killed.kill_error.clone().unwrap_or_default(),
        Code::StillPopulated => format!(
            "the group is still populated after {} ms (populated {:?}); left: {}",
            killed.waited_ms,
            killed.populated,
            pids(&killed.members_left)
        ),
        Code::GroupNotRemoved => removed.detail.clone(),
        Code::ScanFailed => scan.error.clone().unwrap_or_default(),
        _ => format!(
            "live processes outside the group carry REA_RUN_ID={}: {}",
            scan.run,
            scan.processes
                .iter()
                .map(|p| format!("{} ({})", p.pid, p.comm))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
