//! The reasons and the outcome of a reconcile report: each finding adds a
//! reason with the check a person should make; the outcome follows from
//! them (a sealed, verified, reasonless log alone allows deletion).

use super::report::{Outcome, RCode, RReason, Report};
use crate::audit::verdict::{Code, Decision, Reason, Status};
use crate::holders::text;
use crate::kinds::watchdog::GroupState;
use crate::process::alive::Liveness;

fn reason(code: RCode, detail: impl Into<String>, check: impl Into<String>) -> RReason {
    RReason {
        code,
        detail: detail.into(),
        check: check.into(),
    }
}

/// The reasons and the outcome.
pub(super) fn decide(r: &mut Report) {
    let mut rs = Vec::new();
    let alive = r.watchdog.as_ref().map(|w| w.liveness.state);
    let running = !r.log.sealed && alive == Some(Liveness::Alive);
    watchdog_reasons(r, &mut rs);
    chain_reasons(r, &mut rs);
    receipt_reasons(r, running, &mut rs);
    if !running {
        process_reasons(r, &mut rs);
    }
    if let Some(h) = r.holders.as_ref().filter(|h| h.held()) {
        rs.push(reason(
            RCode::StageHeld,
            format!("the stage is held: {}", text::findings(h).join("; ")),
            "keep it until each holder is gone (rea-audit holders DIR lists them); reconcile never signals",
        ));
    }
    let group_live = group_reasons(r, running, &mut rs);
    stage_reasons(r, &mut rs);
    r.outcome = if r.log.sealed && r.verify.verdict == Decision::DeleteAllowed && rs.is_empty() {
        Outcome::DeleteAllowed
    } else if (running || group_live) && r.log.chain_break.is_none() {
        // A broken chain names a watchdog nobody can trust to be this
        // action's: waiting on it could be waiting forever. Review it.
        Outcome::Running
    } else {
        Outcome::Review
    };
    r.exit_code = r.outcome.exit_code();
    r.reasons = rs;
}

/// An unsealed log whose watchdog is gone or cannot be told; a log that
/// names no watchdog at all.
fn watchdog_reasons(r: &Report, rs: &mut Vec<RReason>) {
    match &r.watchdog {
        None => rs.push(reason(
            RCode::NoRunStarted,
            "the log does not begin with a readable run_started: the watchdog cannot be identified",
            "find the watchdog another way (ps for rea-watchdog) before trusting anything here",
        )),
        Some(_) if r.log.start_refused.is_some() => {} // it exited on purpose
        Some(w) if !r.log.sealed => match w.liveness.state {
            Liveness::Alive => {}
            Liveness::Gone => rs.push(reason(
                RCode::WatchdogLost,
                format!(
                    "no receipt, and the watchdog (pid {}, start time {}) is gone: {}",
                    w.pid, w.start_time, w.liveness.detail
                ),
                "it was killed or crashed: its direct children died by PDEATHSIG, deeper \
                 descendants may survive; check every process listed as alive and the \
                 environment scan",
            )),
            Liveness::Unknown => rs.push(reason(
                RCode::WatchdogUnknown,
                format!(
                    "cannot tell whether the watchdog is alive: {}",
                    w.liveness.detail
                ),
                format!("ls -l /proc/{}/exe; cat /proc/{}/status", w.pid, w.pid),
            )),
        },
        Some(_) => {}
    }
}

/// A broken chain, or verify's own tamper findings.
fn chain_reasons(r: &Report, rs: &mut Vec<RReason>) {
    let pinned =
        "compare the head with the one the controller pinned (rea-audit verify --expect-head)";
    if let Some(b) = &r.log.chain_break {
        rs.push(reason(
            RCode::Tampered,
            format!(
                "the chain holds through record {} and breaks at line {} ({}: {})",
                r.log.intact_through, b.line, b.code, b.detail
            ),
            format!("records from line {} on are unverified; {pinned}", b.line),
        ));
    } else {
        let t: Vec<&Reason> = r
            .verify
            .reasons
            .iter()
            .filter(|x| x.class == Status::Tampered)
            .collect();
        if !t.is_empty() {
            let codes: Vec<String> = t.iter().map(|x| x.code.as_str()).collect();
            rs.push(reason(
                RCode::Tampered,
                format!("verify: {} ({})", codes.join(", "), t[0].detail),
                format!("the log is not what the watchdog wrote; {pinned}"),
            ));
        }
    }
}

/// A torn tail, no receipt, and the sealed receipt's own retain findings.
fn receipt_reasons(r: &Report, running: bool, rs: &mut Vec<RReason>) {
    if r.log.torn_tail_bytes > 0 && r.log.chain_break.is_none() {
        let n = r.log.torn_tail_bytes;
        rs.push(if running {
            reason(
                RCode::TornTail,
                format!("{n} bytes after the last newline: torn or still being written (the watchdog is alive)"),
                "run reconcile again once the watchdog has closed",
            )
        } else {
            reason(
                RCode::TornTail,
                format!("{n} bytes after the last newline: a torn tail (a write that did not finish)"),
                "the last record is lost; everything before it is reported",
            )
        });
    }
    if let Some(s) = &r.log.start_refused {
        rs.push(reason(
            RCode::StartRefused,
            format!("the watchdog refused to start, nothing was launched: {s}"),
            "nothing needs to be stopped; keep the stage and find out why it was refused \
             (for stage_not_as_uploaded: compare it with what was uploaded, rea-stage manifest)",
        ));
    } else if !r.log.sealed && !running && r.watchdog.is_some() {
        rs.push(reason(
            RCode::NoReceipt,
            "the log is not sealed: no receipt proves that nothing is left",
            "treat every process listed as alive, and any carrying the run's REA_RUN_ID, as possibly the action's",
        ));
    }
    if r.log.sealed && r.log.chain_break.is_none() {
        for x in &r.verify.reasons {
            if x.class == Status::Retain
                && !matches!(
                    x.code,
                    Code::StagingNotChecked | Code::StagingNotRecorded | Code::StageHeld
                )
            {
                rs.push(reason(
                    RCode::VerifyRetain,
                    format!("verify: {}: {}", x.code.as_str(), x.detail),
                    "the sealed receipt does not allow deletion: keep the stage and read the log (rea-audit show)",
                ));
            }
        }
    }
}

/// Once no watchdog runs: the named processes still alive or unknown, and
/// live processes carrying the run's id.
fn process_reasons(r: &Report, rs: &mut Vec<RReason>) {
    let alive: Vec<String> = r
        .processes
        .iter()
        .filter(|p| p.liveness.state == Liveness::Alive)
        .filter(|p| p.named.roles.iter().any(|x| x.is_action()))
        .map(|p| format!("{} (start {})", p.named.pid, p.named.start_time))
        .collect();
    if !alive.is_empty() {
        rs.push(reason(
            RCode::ProcessesAlive,
            format!(
                "processes the log names are still alive: {}",
                alive.join(", ")
            ),
            "for each, run the listed check and decide by hand; reconcile never signals",
        ));
    }
    let env: Vec<String> = r
        .unnamed
        .by_environment
        .iter()
        .map(|p| p.pid.to_string())
        .collect();
    if !env.is_empty() {
        rs.push(reason(
            RCode::RunProcessesAlive,
            format!(
                "live processes carry this run's REA_RUN_ID: {}",
                env.join(", ")
            ),
            "these are probably the action's (a hint: the environment can be changed); check each",
        ));
    }
    let unknown: Vec<String> = r
        .processes
        .iter()
        .filter(|p| p.liveness.state == Liveness::Unknown)
        .map(|p| p.named.pid.to_string())
        .collect();
    if !unknown.is_empty() {
        rs.push(reason(
            RCode::LivenessUnknown,
            format!(
                "cannot tell whether these are alive: {}",
                unknown.join(", ")
            ),
            "check each by hand",
        ));
    }
}

/// The stage given against the recorded one, and the state directory.
fn stage_reasons(r: &Report, rs: &mut Vec<RReason>) {
    let st = &r.stage;
    match (&st.given, &st.at_start) {
        (None, Some(d)) => rs.push(reason(
            RCode::StageNotChecked,
            format!(
                "the log recorded the stage {}; --staging was not given",
                d.path
            ),
            "pass --staging DIR to compare it",
        )),
        (Some(g), None) if st.at_close.is_none() => rs.push(reason(
            RCode::StageNotRecorded,
            format!("--staging {g} given, but this run recorded no stage"),
            "check that this is the right log for that stage",
        )),
        (Some(g), _) if st.identity_matches == Some(false) || st.content_matches == Some(false) => {
            rs.push(reason(
                RCode::StageDiffers,
                format!("stage {g}: {}", st.detail),
                "keep it; find out who changed or replaced it",
            ))
        }
        _ => {}
    }
    let bad: Vec<String> = r
        .state_dir
        .checks
        .iter()
        .filter(|c| c.ok == Some(false))
        .map(|c| format!("{}: {}", c.check, c.detail))
        .collect();
    if !bad.is_empty() {
        rs.push(reason(
            RCode::StateDirDiffers,
            format!("state directory: {}", bad.join("; ")),
            "check that this is the right log for that state directory",
        ));
    }
}

/// The group's reasons; true when the recorded group has live members
/// (so the action is running, watchdog or not).
fn group_reasons(r: &Report, running: bool, rs: &mut Vec<RReason>) -> bool {
    let Some(g) = &r.group else {
        return false;
    };
    let alive: Vec<String> = g
        .alive()
        .map(|m| format!("{} ({})", m.pid, m.comm.as_deref().unwrap_or("?")))
        .collect();
    let live = !alive.is_empty() || g.populated == Some(true);
    let cmd = r
        .recover_command
        .as_deref()
        .unwrap_or("rea-watchdog recover");
    if live && !running {
        let mut who = alive.join(", ");
        if g.members_not_listed + g.members_not_visible > 0 || alive.is_empty() {
            who.push_str(" and members not listed here (populated 1)");
        }
        rs.push(reason(
            RCode::GroupMembersAlive,
            format!(
                "the action's cgroup {} still has live members, and no live watchdog owns them: {}",
                g.recorded.path,
                who.trim_start_matches(" and ")
            ),
            super::group::recover_hint(g, cmd),
        ));
    }
    if !r.log.sealed {
        let recorded = format!("{} (inode {})", g.recorded.path, g.recorded.ino);
        match g.now.state {
            GroupState::Present => {}
            GroupState::Gone if g.removed_at_close == Some(true) => {}
            // A refused start removed its empty group before it exited.
            GroupState::Gone if r.log.start_refused.is_some() => {}
            GroupState::Gone => rs.push(reason(
                RCode::GroupGone,
                format!("the action's cgroup {recorded} no longer exists"),
                "what ran in it cannot be listed or recovered through it: check the processes \
                 listed here and those carrying the run's REA_RUN_ID by hand",
            )),
            GroupState::Recreated => rs.push(reason(
                RCode::GroupRecreated,
                format!(
                    "the action's cgroup {recorded} was removed and its name made again: {}",
                    g.now.detail
                ),
                "that directory is another group; nothing in it is this action's or may be \
                 recovered; check the processes listed here by hand",
            )),
            GroupState::Unreachable => rs.push(reason(
                RCode::GroupUnknown,
                format!(
                    "cannot look at the action's cgroup {recorded}: {}",
                    g.now.detail
                ),
                format!(
                    "ls -ld {}; cat {}/cgroup.procs",
                    g.recorded.path, g.recorded.path
                ),
            )),
        }
    }
    live
}
