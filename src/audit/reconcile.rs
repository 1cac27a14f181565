//! `rea-audit reconcile LOG [--state-dir DIR] [--staging DIR]` (docs/containment.md):
//! after an unhappy path (the watchdog lost, the SSH response lost, a log
//! that is not sealed), what is known, what may still be alive, and what a
//! person must check. One outcome: `delete_allowed`, `running` or `review`.
//!
//! Read-only, always: the log is opened with [`open_log`] (`O_NONBLOCK`,
//! fstat'd regular) and read line by line up to its last complete line;
//! processes are probed with `pidfd_open` and a `/proc` read-back
//! ([`crate::process::alive`]), which cannot signal; the stage and the
//! state directory are only stat'd, listed and hashed; the action's cgroup
//! (cgroup mode) is re-opened by its recorded inode and only its
//! `cgroup.procs` and `cgroup.events` are read
//! ([`super::reconcile_group`]). Nothing is created, written, appended,
//! signalled, retried or deleted. With live members in that group the
//! action is `running`, watchdog or not; with the watchdog gone the report
//! names `rea-watchdog recover`.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::reader::{open_log, OpenError};
use super::reconcile_group::{group_part, recover_command, GroupPart};
use super::reconcile_log::{scan, Break, Named};
use super::stage_held;
use super::verdict::{Code, Decision, Reason, Status};
use super::verify::{verify_file, VerifyOptions};
use crate::holders::{text, HolderScan};
use crate::kinds::watchdog::{Containment, GroupState, Mode, Outcome as RunOutcome, StopReason};
use crate::process::alive::{probe, Liveness, Probe};

pub use super::reconcile_dirs::{stage_part, state_dir_part, DirCheck, StagePart, StateDirPart};
pub use super::reconcile_env::{check_hint, run_processes, EnvProc};

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub state_dir: Option<PathBuf>,
    pub staging: Option<PathBuf>,
}

/// The one answer.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Sealed, `verify` says `delete_allowed`, nothing named is alive.
    DeleteAllowed,
    /// The watchdog is alive and the log not sealed: wait, or ask it to
    /// close. Or the action's cgroup still has live members: with the
    /// watchdog gone, `rea-watchdog recover` ends them (docs/containment.md).
    Running,
    /// Anything else: each reason is named with what to check.
    Review,
}

/// Exit status for a log that could not be read, or a bad command line
/// (verify's `error` code, the same meaning).
pub const EXIT_ERROR: i32 = 4;

impl Outcome {
    /// Distinct from verify's 1, 2 and 3 (retain, incomplete, tampered).
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::DeleteAllowed => 0,
            Outcome::Running => 5,
            Outcome::Review => 6,
        }
    }
}

/// Why the outcome is not `delete_allowed`.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RCode {
    NoRunStarted,
    Tampered,
    TornTail,
    NoReceipt,
    WatchdogLost,
    WatchdogUnknown,
    VerifyRetain,
    ProcessesAlive,
    RunProcessesAlive,
    LivenessUnknown,
    StageDiffers,
    StageNotChecked,
    StageNotRecorded,
    StateDirDiffers,
    /// The action's cgroup has live members and no watchdog owns them.
    GroupMembersAlive,
    /// The recorded group no longer exists (and the log is not sealed).
    GroupGone,
    /// The recorded group's name now names another directory.
    GroupRecreated,
    /// A process, mount or loop device holds the stage (the holder scan).
    StageHeld,
    /// The recorded group could not be looked at.
    GroupUnknown,
}

#[derive(Serialize, Clone, Debug)]
pub struct RReason {
    pub code: RCode,
    pub detail: String,
    /// What a person must check.
    pub check: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct LogPart {
    pub path: String,
    pub run: Option<String>,
    pub records: u64,
    pub intact_through: u64,
    pub chain_break: Option<Break>,
    pub sealed: bool,
    /// Bytes after the last newline.
    pub torn_tail_bytes: u64,
    pub head: Option<String>,
    pub outcome: Option<RunOutcome>,
    pub stop_reason: Option<StopReason>,
    /// The trigger that started a stop, even without a receipt.
    pub first_stop: Option<StopReason>,
    pub stop_completed: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct WatchdogPart {
    pub pid: i32,
    pub start_time: u64,
    pub uid: u32,
    pub mode: Mode,
    pub state_dir: String,
    pub liveness: Probe,
}

#[derive(Serialize, Clone, Debug)]
pub struct ProcPart {
    #[serde(flatten)]
    pub named: Named,
    pub liveness: Probe,
    /// For an alive process: commands that show what it is.
    pub check: Option<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Unnamed {
    /// Processes the log never named may be alive (no receipt: deeper
    /// descendants of a lost watchdog are not in any record).
    pub may_exist: bool,
    pub detail: String,
    /// Live processes whose environment carries `REA_RUN_ID=<run>` (every
    /// job process inherits it; a hint, since a process can change it).
    pub by_environment: Vec<EnvProc>,
    pub scan_error: Option<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct VerifySummary {
    pub verdict: Decision,
    pub status: Status,
    pub exit_code: i32,
    pub reasons: Vec<Reason>,
}

/// The whole report (`--json`; audit-schema/reconcile.schema.json).
#[derive(Serialize, Clone, Debug)]
pub struct Report {
    pub outcome: Outcome,
    pub exit_code: i32,
    pub log: LogPart,
    pub watchdog: Option<WatchdogPart>,
    pub processes: Vec<ProcPart>,
    /// Distinct processes named beyond the listing cap.
    pub processes_not_listed: u64,
    pub unnamed: Unnamed,
    pub state_dir: StateDirPart,
    pub stage: StagePart,
    /// The log's `containment` record (`null`: the log has none).
    pub containment: Option<Containment>,
    /// The recorded cgroup and its members now (cgroup mode only).
    pub group: Option<GroupPart>,
    /// `rea-watchdog recover ...` for this log, when it recorded a group
    /// and is not sealed (`NEW` is left for the operator to choose).
    pub recover_command: Option<String>,
    pub verify: VerifySummary,
    /// The holder scan of `--staging` (`null`: not given, or not this run's).
    pub holders: Option<HolderScan>,
    pub reasons: Vec<RReason>,
}

fn reason(code: RCode, detail: impl Into<String>, check: impl Into<String>) -> RReason {
    RReason {
        code,
        detail: detail.into(),
        check: check.into(),
    }
}

/// Builds the report. `Err` only when the log cannot be read at all.
pub fn reconcile(path: &Path, opts: &Options) -> Result<Report, String> {
    let f = open_log(path).map_err(|e: OpenError| e.to_string())?;
    let s = scan(&f).map_err(|e| format!("cannot read the log: {e}"))?;
    // The same open file, not the path again: verify reads what was scanned.
    let same = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
    let v = verify_file(
        &same,
        &VerifyOptions {
            staging: opts.staging.clone(),
            ..VerifyOptions::default()
        },
    );
    drop(f);
    let mut holders = v.holders.clone();
    let verify = VerifySummary {
        verdict: v.verdict,
        status: v.status,
        exit_code: v.exit_code,
        reasons: v.reasons,
    };
    let watchdog = s.run_started.as_ref().map(|r| WatchdogPart {
        pid: r.watchdog.pid,
        start_time: r.watchdog.start_time,
        uid: r.watchdog.uid,
        mode: r.mode,
        state_dir: r.state_dir.clone(),
        liveness: probe(r.watchdog.pid, r.watchdog.start_time),
    });
    let processes: Vec<ProcPart> = s
        .named
        .iter()
        .map(|n| {
            let liveness = probe(n.pid, n.start_time);
            let check =
                (liveness.state == Liveness::Alive).then(|| check_hint(n.pid, n.start_time));
            ProcPart {
                named: n.clone(),
                liveness,
                check,
            }
        })
        .collect();
    let (by_environment, scan_error) = match &s.run {
        Some(run) if crate::vocab::is_token(run) => match run_processes(run) {
            Ok(ps) => (ps, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        },
        _ => (Vec::new(), None),
    };
    let may_exist = !s.sealed;
    let unnamed = Unnamed {
        may_exist,
        detail: if may_exist {
            "the log is not sealed: descendants it never named (setsid or double-forked \
             grandchildren of a lost watchdog) may be alive; the environment scan below \
             is a hint, not a proof"
                .into()
        } else {
            "the receipt proves no descendant was left at close".into()
        },
        by_environment,
        scan_error,
    };
    let state_dir = state_dir_part(s.run_started.as_ref(), opts.state_dir.as_deref());
    let stage = stage_part(&s, opts.staging.as_deref());
    if holders.is_none() && stage.identity_matches == Some(true) {
        // Verify scans only a sealed log's stage; this one is the run's.
        // One descriptor for the identity check and the scan.
        // In a helper with a deadline, as verify's (a stuck stage answers).
        holders = opts.staging.as_deref().and_then(|p| {
            let r = s.run_started.as_ref()?.staging.as_ref()?;
            let seen = stage_held::look(p, Some(r)).ok()?;
            stage_held::found(seen.scan?).1
        });
    }
    let group = group_part(&s);
    let recover = (group.is_some() && !s.sealed).then(|| {
        let recorded = s.run_started.as_ref().and_then(|r| r.staging.as_ref());
        let dir = stage
            .given
            .clone()
            .or_else(|| recorded.map(|d| d.path.clone()));
        recover_command(path, dir.as_deref())
    });
    let log = LogPart {
        path: path.display().to_string(),
        run: s.run.clone(),
        records: s.records,
        intact_through: s.intact_through,
        chain_break: s.chain_break.clone(),
        sealed: s.sealed,
        torn_tail_bytes: s.tail_bytes,
        head: s.head.clone(),
        outcome: s.receipt.as_ref().map(|r| r.outcome),
        stop_reason: s.receipt.as_ref().and_then(|r| r.stop_reason),
        first_stop: s.first_stop,
        stop_completed: s.stop_completed,
    };
    let mut r = Report {
        outcome: Outcome::Review,
        exit_code: Outcome::Review.exit_code(),
        log,
        watchdog,
        processes,
        processes_not_listed: s.named_dropped,
        unnamed,
        state_dir,
        stage,
        containment: s.containment.clone(),
        group,
        recover_command: recover,
        verify,
        holders,
        reasons: Vec::new(),
    };
    decide(&mut r);
    Ok(r)
}

/// The reasons and the outcome.
fn decide(r: &mut Report) {
    let mut rs = Vec::new();
    let alive = r.watchdog.as_ref().map(|w| w.liveness.state);
    let running = !r.log.sealed && alive == Some(Liveness::Alive);
    let pinned =
        "compare the head with the one the controller pinned (rea-audit verify --expect-head)";
    match &r.watchdog {
        None => rs.push(reason(
            RCode::NoRunStarted,
            "the log does not begin with a readable run_started: the watchdog cannot be identified",
            "find the watchdog another way (ps for rea-watchdog) before trusting anything here",
        )),
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
    if !r.log.sealed && !running && r.watchdog.is_some() {
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
    if !running {
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
                format!("live processes carry this run's REA_RUN_ID: {}", env.join(", ")),
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
    if let Some(h) = r.holders.as_ref().filter(|h| h.held()) {
        rs.push(reason(
            RCode::StageHeld,
            format!("the stage is held: {}", text::findings(h).join("; ")),
            "keep it until each holder is gone (rea-audit holders DIR lists them); reconcile never signals",
        ));
    }
    let group_live = group_reasons(r, running, &mut rs);
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
            super::reconcile_group::recover_hint(g, cmd),
        ));
    }
    if !r.log.sealed {
        let recorded = format!("{} (inode {})", g.recorded.path, g.recorded.ino);
        match g.now.state {
            GroupState::Present => {}
            GroupState::Gone if g.removed_at_close == Some(true) => {}
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
