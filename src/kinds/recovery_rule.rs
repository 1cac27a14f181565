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
//! created then.) Then, from the census of the frozen group
//! ([`member_refusal`]): the group did not freeze, members that cannot be
//! checked, a member that is not the action's (started before the run's
//! watchdog, or no `REA_RUN_ID` of the run in its environment). A
//! recovery that ran is `recovered` only when
//! `cgroup.kill` was written, the group is not populated, it was removed,
//! and no live process outside it carries the run's `REA_RUN_ID`.

use super::recovery::{
    Code, RecoveryChecked, RecoveryGroupRemoved, RecoveryKilled, RecoveryMembers, RecoveryScan,
    RecoveryStarted,
};
use crate::kinds::group::UnprovenMember;
use crate::kinds::watchdog::GroupState;
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

/// The run's start as the members are judged against it: the start time
/// of LOG's watchdog (clock ticks since boot). Without one (never, once
/// [`refusal`] passed) nothing can have started after it.
fn run_start(s: &RecoveryStarted) -> u64 {
    s.watchdog.map_or(u64::MAX, |w| w.start_time)
}

/// The refusal the frozen group's census gives, if any (asked once
/// [`refusal`] gave none): not frozen, members not checkable, a member
/// not the action's. Nothing is killed then.
pub fn member_refusal(s: &RecoveryStarted, m: &RecoveryMembers) -> Option<Code> {
    if !m.freeze.frozen || m.freeze.error.is_some() {
        return Some(Code::FreezeFailed);
    }
    if m.error.is_some() || m.members_not_visible > 0 {
        return Some(Code::MembersUnproven);
    }
    if m.members_not_listed_foreign > 0 || !foreign(s, m).is_empty() {
        return Some(Code::ForeignMember);
    }
    None
}

/// The listed members of the census that are not the action's.
pub fn foreign(s: &RecoveryStarted, m: &RecoveryMembers) -> Vec<UnprovenMember> {
    let start = run_start(s);
    m.members.iter().filter_map(|x| x.foreign(start)).collect()
}

/// For people: what a refusal from the census means.
pub fn explain_members(code: Code, s: &RecoveryStarted, m: &RecoveryMembers) -> String {
    let g = &m.group.path;
    match code {
        Code::FreezeFailed => format!(
            "the group {g} could not be frozen ({}): a census of a running group proves \
             nothing about who the kill would reach",
            m.freeze.error.clone().unwrap_or_else(|| format!(
                "no frozen 1 in cgroup.events after {} ms",
                m.freeze.waited_ms
            ))
        ),
        Code::MembersUnproven => format!(
            "the members of {g} cannot all be checked ({}): run recover in the PID namespace \
             the watchdog ran in",
            m.error.clone().unwrap_or_else(|| format!(
                "{} member(s) outside this PID namespace",
                m.members_not_visible
            ))
        ),
        Code::ForeignMember => {
            let named: Vec<String> = foreign(s, m).iter().map(|f| f.describe()).collect();
            let more = if m.members_not_listed_foreign > 0 {
                format!(" and {} more not listed", m.members_not_listed_foreign)
            } else {
                String::new()
            };
            format!(
                "the group {g} holds processes that are not the action's (membership is not \
                 ownership: a pid written into its cgroup.procs): {}{more}; a member must have \
                 started after the run's watchdog (start time {}) and carry REA_RUN_ID={}; \
                 move them out of the group (write each pid to another group's cgroup.procs) \
                 or end them yourself, then run recover again",
                named.join("; "),
                run_start(s),
                s.log_run.as_deref().unwrap_or("?")
            )
        }
        other => other.as_str(),
    }
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
