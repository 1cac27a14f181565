//! `rea-watchdog recover LOG --audit-log NEW [--staging DIR]`
//! (docs/containment.md, "Recover"): the operator's explicit recovery of an
//! action whose watchdog died, through the cgroup its log recorded.
//!
//! It checks, in order, and refuses (nothing killed) at the first that fails
//! ([`rule::refusal`]): LOG readable, its chain intact (a torn last line or a
//! missing receipt is fine: the watchdog died), LOG not sealed, its watchdog
//! gone (pidfd and start time), a cgroup recorded, the group's directory still
//! the recorded inode, this process not inside it; then NEW must not exist and
//! must not be inside the stage. Otherwise it freezes the group, records its
//! members each checked against the run, and refuses (thawed, nothing killed)
//! unless it froze and every member is the action's: started after the run's
//! watchdog and carrying the run's `REA_RUN_ID` (membership of a cgroup is not
//! ownership: anyone allowed to write its `cgroup.procs` can put a stranger in
//! it). Then it writes `cgroup.kill`, waits (bounded) for `populated 0`,
//! removes the group, inventories the stage, scans for the run's `REA_RUN_ID`
//! outside it, and seals NEW with the decision. NEW is a hash-chained log of
//! its own (docs/audit-log.md's chain rule; kinds in [`record`]) whose first
//! record names LOG's run and last intact seq and head; `rea-audit verify NEW`
//! checks it. LOG itself is never written: its verdict stays retain. A refusal
//! is recorded in NEW too, whenever NEW can be created.

pub mod act;
pub mod check;
mod help;
pub use help::HELP;
pub mod log;

use std::path::{Path, PathBuf};

use serde::Serialize;

use self::act::Acted;
use self::log::RecoveryLog;
use crate::kinds::group::UnprovenMember;
use crate::kinds::recovery::{
    Code, Outcome, Reason, RecoveryDecided, RecoveryEvent, RecoveryStarted,
};
use crate::kinds::recovery_rule as rule;

/// Exit statuses of `rea-watchdog recover` (125, a usage error, is the
/// binary's, as for every rea-watchdog command).
pub const EXIT_RECOVERED: i32 = 0;
/// It ran (the group was killed) but is not proven: still populated, not
/// removed, or processes of the run left outside the group.
pub const EXIT_FAILED: i32 = 1;
/// A check failed; nothing was killed.
pub const EXIT_REFUSED: i32 = 2;
/// NEW could not be created or written; stderr says whether the kill had
/// been written by then.
pub const EXIT_LOG_FAILED: i32 = 3;

#[derive(Clone, Debug)]
pub struct Options {
    pub log: PathBuf,
    pub new: PathBuf,
    pub staging: Option<PathBuf>,
}

/// What the command prints on stdout (one JSON line) and exits with.
#[derive(Serialize, Clone, Debug)]
pub struct Done {
    /// `null` when NEW could not be written.
    pub outcome: Option<Outcome>,
    pub exit_code: i32,
    pub reasons: Vec<Reason>,
    pub audit_log: String,
    /// NEW holds this answer (false: NEW was not created, or its writing failed).
    pub recorded: bool,
    /// NEW's head (SHA-256 of its last line), to pin as for any log.
    pub head: Option<String>,
    pub log: String,
    pub log_run: Option<String>,
    pub log_intact_seq: Option<u64>,
    pub log_intact_head: Option<String>,
    /// `cgroup.kill` was written.
    pub killed: bool,
    /// Members of the frozen group that are not the action's (a
    /// `foreign_member` refusal names them; empty otherwise).
    pub foreign_members: Vec<UnprovenMember>,
}

fn say(msg: &str) {
    crate::tell::note(format_args!("{}", crate::audit::people::escape(msg)));
}

impl Done {
    fn new(o: &Options, s: &RecoveryStarted) -> Done {
        Done {
            outcome: None,
            exit_code: EXIT_LOG_FAILED,
            reasons: Vec::new(),
            audit_log: o.new.display().to_string(),
            recorded: false,
            head: None,
            log: s.log.clone(),
            log_run: s.log_run.clone(),
            log_intact_seq: s.log_intact_seq,
            log_intact_head: s.log_intact_head.clone(),
            killed: false,
            foreign_members: Vec::new(),
        }
    }

    fn refused(mut self, r: Reason) -> Done {
        say(&format!(
            "recover refused ({}): {}; nothing was killed",
            r.code.as_str(),
            r.detail
        ));
        self.outcome = Some(Outcome::Refused);
        self.exit_code = EXIT_REFUSED;
        self.reasons = vec![r];
        self
    }

    fn log_failed(mut self, e: &dyn std::fmt::Display, killed: bool) -> Done {
        let what = if killed {
            "cgroup.kill WAS written; the log is unsealed: run rea-audit reconcile on LOG"
        } else {
            "nothing was killed"
        };
        say(&format!(
            "the recovery log {} could not be written ({e}): stopped; {what}",
            self.audit_log
        ));
        self.outcome = None;
        self.exit_code = EXIT_LOG_FAILED;
        self.killed = killed;
        self
    }
}

/// Seals NEW with the decision; the answer as recorded.
/// Seals NEW with a refusal and says so (nothing was killed).
fn refuse(log: RecoveryLog, done: Done, r: Reason) -> Done {
    let done = seal(log, done, Outcome::Refused, vec![r.clone()]);
    if done.recorded {
        say(&format!(
            "recover refused ({}): {}; nothing was killed (recorded in {})",
            r.code.as_str(),
            r.detail,
            done.audit_log
        ));
    }
    done
}

fn seal(mut log: RecoveryLog, mut done: Done, outcome: Outcome, reasons: Vec<Reason>) -> Done {
    let ev = RecoveryEvent::Decided(RecoveryDecided {
        outcome,
        reasons: reasons.clone(),
    });
    if let Err(e) = log.seal(&ev) {
        let killed = done.killed;
        return done.log_failed(&e, killed);
    }
    done.recorded = true;
    done.head = Some(log.head().to_string());
    done.outcome = Some(outcome);
    done.reasons = reasons;
    done.exit_code = match outcome {
        Outcome::Recovered => EXIT_RECOVERED,
        Outcome::Failed => EXIT_FAILED,
        Outcome::Refused => EXIT_REFUSED,
    };
    done
}

/// Runs `recover` (see the module doc). Prints what it did on stderr;
/// the caller prints [`Done`] on stdout.
pub fn recover(o: &Options) -> Done {
    let s = check::started(&o.log, o.staging.as_deref());
    let (c, group) = check::checked(&s);
    let refusal = rule::refusal(&s, &c).map(|code| Reason {
        code,
        detail: rule::explain(code, &s, &c),
    });
    let done = Done::new(o, &s);
    let recorded = s
        .staging_recorded
        .as_ref()
        .map(|d| Path::new(d.path.as_str()));
    let stages: Vec<&Path> = s
        .staging
        .as_deref()
        .map(Path::new)
        .into_iter()
        .chain(recorded)
        .collect();
    if let Some((code, detail)) = check::new_log_problem(&o.new, &stages) {
        let first = refusal.unwrap_or(Reason {
            code,
            detail: detail.clone(),
        });
        let done = done.refused(first);
        say(&format!("not recorded: {detail}"));
        return done;
    }
    let run = crate::watchdog::config::new_run_id();
    let mut log = match RecoveryLog::create(&o.new, &run) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let detail = format!("--audit-log {} already exists", o.new.display());
            return done.refused(refusal.unwrap_or(Reason {
                code: Code::NewLogExists,
                detail,
            }));
        }
        Err(e) => return done.log_failed(&e, false),
    };
    for ev in [
        RecoveryEvent::Started(s.clone()),
        RecoveryEvent::Checked(c.clone()),
    ] {
        if let Err(e) = log.record(&ev) {
            return done.log_failed(&e, false);
        }
    }
    if let Some(r) = refusal {
        return refuse(log, done, r);
    }
    let Some(g) = group else {
        // The rule refuses whenever the group was not found; kept total.
        let r = Reason {
            code: Code::GroupUnreachable,
            detail: "the recorded group was not opened".into(),
        };
        return seal(log, done, Outcome::Refused, vec![r]);
    };
    let path = g.path().display().to_string();
    match act::act(&mut log, g, &s) {
        Err(f) => done.log_failed(&f.error, f.killed),
        Ok(Acted::Refused(r, foreign)) => {
            let mut done = done;
            done.foreign_members = foreign;
            refuse(log, done, r)
        }
        Ok(Acted::Ran(reasons)) => ran(log, done, reasons, &s, &path),
    }
}

/// The kill ran: recovered when no step failed; the log sealed either way
/// and the outcome said (the group's `path`).
fn ran(
    log: RecoveryLog,
    mut done: Done,
    reasons: Vec<Reason>,
    s: &RecoveryStarted,
    path: &str,
) -> Done {
    done.killed = !reasons.iter().any(|r| r.code == Code::KillFailed);
    let outcome = if reasons.is_empty() {
        Outcome::Recovered
    } else {
        Outcome::Failed
    };
    let done = seal(log, done, outcome, reasons);
    if done.recorded && outcome == Outcome::Recovered {
        say(&format!(
            "recovered run {}: cgroup.kill written to {path}, the group emptied \
             (populated 0) and removed; sealed {} (head {}); check it with \
             rea-audit verify {}{}",
            s.log_run.as_deref().unwrap_or("?"),
            done.audit_log,
            done.head.as_deref().unwrap_or("?"),
            done.audit_log,
            s.staging
                .as_deref()
                .map_or(String::new(), |d| format!(" --staging {d}"))
        ));
    } else if done.recorded {
        for r in &done.reasons {
            say(&format!(
                "not recovered ({}): {}",
                r.code.as_str(),
                r.detail
            ));
        }
    }
    done
}
