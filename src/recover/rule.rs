//! The recovery's decision, as a function of the recorded facts alone, so
//! that `rea-audit verify` runs it again on what a recovery log recorded
//! (as it runs `rea-stage`'s decision again on a discard log): a log that
//! says `recovered` where the facts say otherwise is tampered.
//!
//! Refusals, in order (the first that holds is the one):
//! LOG unreadable, LOG tampered, LOG sealed, no `run_started`, the
//! watchdog alive (or unknown), no cgroup recorded, the group gone,
//! recreated or unreachable, this process inside the group. (NEW existing
//! or inside the stage come last and are never in a log: NEW is not
//! created then.) A recovery that ran is `recovered` only when
//! `cgroup.kill` was written, the group is not populated, it was removed,
//! and no live process outside it carries the run's `REA_RUN_ID`.

use super::record::{
    Code, RecoveryChecked, RecoveryGroupRemoved, RecoveryKilled, RecoveryScan, RecoveryStarted,
};
use crate::audit::record::GroupState;
use crate::process::alive::Liveness;

/// The first refusal the facts give, if any.
pub fn refusal(s: &RecoveryStarted, c: &RecoveryChecked) -> Option<Code> {
    if s.log_error.is_some() {
        return Some(Code::LogUnreadable);
    }
    if s.log_tampered.is_some() {
        return Some(Code::LogTampered);
    }
    if s.log_sealed {
        return Some(Code::LogSealed);
    }
    if s.watchdog.is_none() {
        return Some(Code::NoRunStarted);
    }
    match c.watchdog.as_ref().map(|w| w.state) {
        Some(Liveness::Gone) => {}
        Some(Liveness::Alive) => return Some(Code::WatchdogAlive),
        _ => return Some(Code::WatchdogUnknown),
    }
    if s.group().is_none() {
        return Some(Code::NoGroup);
    }
    match c.group.as_ref().map(|g| g.state) {
        Some(GroupState::Present) => {}
        Some(GroupState::Gone) => return Some(Code::GroupGone),
        Some(GroupState::Recreated) => return Some(Code::GroupRecreated),
        _ => return Some(Code::GroupUnreachable),
    }
    if c.recoverer_in_group != Some(false) {
        return Some(Code::RecovererInGroup);
    }
    None
}

/// Which facts a recovery gathers given LOG: (probe the watchdog, look
/// the group up, list the group's members for its own pid). Each only
/// once every check before it passed.
pub fn gathered(s: &RecoveryStarted, c: &RecoveryChecked) -> (bool, bool, bool) {
    let log_ok =
        s.log_error.is_none() && s.log_tampered.is_none() && !s.log_sealed && s.watchdog.is_some();
    let gone = c
        .watchdog
        .as_ref()
        .is_some_and(|w| w.state == Liveness::Gone);
    let look = log_ok && gone && s.group().is_some();
    let present = c
        .group
        .as_ref()
        .is_some_and(|g| g.state == GroupState::Present);
    (log_ok, look, look && present)
}

/// What is not proven about a recovery that ran (empty: recovered).
pub fn failures(k: &RecoveryKilled, r: &RecoveryGroupRemoved, scan: &RecoveryScan) -> Vec<Code> {
    let mut out = Vec::new();
    if k.kill_error.is_some() {
        out.push(Code::KillFailed);
    }
    if k.populated != Some(false) {
        out.push(Code::StillPopulated);
    }
    if !r.removed {
        out.push(Code::GroupNotRemoved);
    }
    if scan.error.is_some() {
        out.push(Code::ScanFailed);
    }
    if !scan.processes.is_empty() || scan.processes_not_listed > 0 {
        out.push(Code::RunProcessesLeft);
    }
    out
}

/// For people: what a refusal means and what to do instead.
pub fn explain(code: Code, s: &RecoveryStarted, c: &RecoveryChecked) -> String {
    let log = &s.log;
    let or_none = |o: &Option<String>| o.clone().unwrap_or_default();
    match code {
        Code::LogUnreadable => format!("cannot read {log}: {}", or_none(&s.log_error)),
        Code::LogTampered => format!(
            "{log} is not the log its watchdog wrote ({}); nothing it names can be trusted \
             enough to kill: compare its head with the one pinned, see rea-audit reconcile",
            or_none(&s.log_tampered)
        ),
        Code::LogSealed => format!(
            "{log} is sealed by its receipt: the watchdog finished its action, nothing to \
             recover (rea-audit verify {log} says what the receipt allows)"
        ),
        Code::NoRunStarted => {
            format!("{log} has no readable run_started: its watchdog cannot be identified")
        }
        Code::WatchdogAlive | Code::WatchdogUnknown => {
            let w = s.watchdog.map_or(String::new(), |w| {
                format!("(pid {}, start time {}) ", w.pid, w.start_time)
            });
            let d = c.watchdog.as_ref().map_or("", |w| w.detail.as_str());
            if code == Code::WatchdogAlive {
                format!(
                    "the watchdog of {log} {w}is alive ({d}): it owns its action; stop or \
                     close it (rea-watchdog stop/close), or wait for it"
                )
            } else {
                format!("cannot tell whether the watchdog of {log} {w}is alive: {d}")
            }
        }
        Code::NoGroup => format!(
            "{log}'s action ran without a cgroup ({}): recovery needs containment \
             (--contain cgroup); see what may be alive with rea-audit reconcile {log}",
            s.containment
                .as_ref()
                .map_or("no containment record".to_string(), |k| {
                    format!("mode {:?}", k.mode).to_lowercase()
                })
        ),
        Code::GroupGone | Code::GroupRecreated | Code::GroupUnreachable => {
            let g = s
                .group()
                .map_or(String::new(), |g| format!("{} (inode {})", g.path, g.ino));
            let d = c.group.as_ref().map_or("", |x| x.detail.as_str());
            match code {
                Code::GroupGone => format!("the recorded group {g} no longer exists ({d})"),
                Code::GroupRecreated => format!(
                    "the recorded group {g} was removed and its name made again ({d}): that \
                     is another group and nothing in it is touched"
                ),
                _ => format!("cannot look at the recorded group {g}: {d}"),
            }
        }
        Code::RecovererInGroup => {
            "this process is itself in the group: cgroup.kill would end it; run recover from \
             outside the action"
                .into()
        }
        other => other.as_str(),
    }
}
