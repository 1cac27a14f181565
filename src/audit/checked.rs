//! The verdict of whichever verifier fits the log (a watchdog's log, a
//! discard log written by `rea-stage discard`, a removal log written by
//! `rea-stage remove`, a recovery log written by `rea-watchdog recover`), run on a reader, as `verify --json` prints it.
//! `rea-audit report` and `rea-audit show` judge a log through it, on the
//! bytes their one descriptor reads ([`super::passes`]).
//!
//! The three verdicts differ in shape; [`Checked`] holds whichever it is,
//! typed, and answers what every reader of a verdict asks (the exit code,
//! the head, the run, the reasons) from its fields, so that a reason is a
//! reason whichever verifier gave it.

use std::io::Read;
use std::path::PathBuf;

use serde::Serialize;

use super::recover::log::{
    is_recovery_start, verify_recovery_reader, RecoveryOptions, RecoveryVerdict,
};
use super::stage::log::{is_stage_start, verify_stage_reader, StageVerdict};
use super::stage::remove_log::{is_remove_start, verify_remove_reader, RemoveVerdict};
use super::verdict::Verdict;
use super::verify::{verify_reader, VerifyOptions};

/// Which verifier read the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    Watchdog,
    Discard,
    Recovery,
    /// A removal log (`rea-stage remove`).
    Removal,
}

/// The verdict of whichever verifier read the log, typed.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Checked {
    Watchdog(Verdict),
    Discard(StageVerdict),
    Recovery(RecoveryVerdict),
    Removal(RemoveVerdict),
}

/// One reason, whichever verifier gave it: its code as `--json` spells
/// it, the line it is about, what exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasonLine {
    pub code: String,
    pub line: Option<u64>,
    pub detail: String,
}

/// A code as `--json` spells it (its serde name).
fn spelled<T: Serialize>(code: &T) -> String {
    match serde_json::to_value(code) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

impl Checked {
    pub fn kind(&self) -> LogKind {
        match self {
            Checked::Watchdog(_) => LogKind::Watchdog,
            Checked::Discard(_) => LogKind::Discard,
            Checked::Recovery(_) => LogKind::Recovery,
            Checked::Removal(_) => LogKind::Removal,
        }
    }

    /// verify's exit status for this log.
    pub fn exit_code(&self) -> i32 {
        match self {
            Checked::Watchdog(v) => v.exit_code,
            Checked::Discard(v) => v.exit_code,
            Checked::Recovery(v) => v.exit_code,
            Checked::Removal(v) => v.exit_code,
        }
    }

    /// A log that is not what its writer wrote (or changed under us):
    /// everything drawn from it is shown marked as untrusted.
    pub fn tampered(&self) -> bool {
        self.exit_code() == 3
    }

    pub fn head(&self) -> Option<&str> {
        match self {
            Checked::Watchdog(v) => v.head.as_deref(),
            Checked::Discard(v) => v.head.as_deref(),
            Checked::Recovery(v) => v.head.as_deref(),
            Checked::Removal(v) => v.head.as_deref(),
        }
    }

    pub fn run(&self) -> Option<&str> {
        match self {
            Checked::Watchdog(v) => v.run.as_deref(),
            Checked::Discard(v) => v.run.as_deref(),
            Checked::Recovery(v) => v.run.as_deref(),
            Checked::Removal(v) => v.run.as_deref(),
        }
    }

    /// Complete lines verify read.
    pub fn records(&self) -> u64 {
        match self {
            Checked::Watchdog(v) => v.records,
            Checked::Discard(v) => v.records,
            Checked::Recovery(v) => v.records,
            Checked::Removal(v) => v.records,
        }
    }

    /// Whether the log ends with its writer's last record (a discard log
    /// has no such word: `None`).
    pub fn sealed(&self) -> Option<bool> {
        match self {
            Checked::Watchdog(v) => Some(v.sealed),
            Checked::Discard(_) => None,
            Checked::Recovery(v) => Some(v.sealed),
            Checked::Removal(_) => None,
        }
    }

    /// The decision, as `--json` spells it: `delete_allowed` or `retain`,
    /// or for a discard log its result (`discarded`, `refused`, ...).
    pub fn decision(&self) -> String {
        match self {
            Checked::Watchdog(v) => spelled(&v.verdict),
            Checked::Discard(v) => spelled(&v.result),
            Checked::Recovery(v) => spelled(&v.verdict),
            Checked::Removal(v) => spelled(&v.result),
        }
    }

    /// Why, in one word: the status (`retain`, `incomplete`, `tampered`,
    /// ...), or a discard log's result.
    pub fn status(&self) -> String {
        match self {
            Checked::Watchdog(v) => spelled(&v.status),
            Checked::Discard(v) => spelled(&v.result),
            Checked::Recovery(v) => spelled(&v.status),
            Checked::Removal(v) => spelled(&v.result),
        }
    }

    /// The stage a discard log is of.
    pub fn stage(&self) -> Option<&str> {
        match self {
            Checked::Discard(v) => v.stage.as_deref(),
            Checked::Removal(v) => v.stage.as_deref(),
            _ => None,
        }
    }

    /// Every reason: a discard log's problems, then its refusals.
    pub fn reasons(&self) -> Vec<ReasonLine> {
        let line = |code: String, line, detail: &str| ReasonLine {
            code,
            line,
            detail: detail.to_string(),
        };
        match self {
            Checked::Watchdog(v) => v
                .reasons
                .iter()
                .map(|r| line(spelled(&r.code), r.line, &r.detail))
                .collect(),
            Checked::Discard(v) => v
                .problems
                .iter()
                .map(|p| line(spelled(&p.code), p.line, &p.detail))
                .chain(
                    v.refusals
                        .iter()
                        .map(|r| line(spelled(&r.code), None, &r.detail)),
                )
                .collect(),
            Checked::Recovery(v) => v
                .reasons
                .iter()
                .map(|r| line(spelled(&r.code), r.line, &r.detail))
                .collect(),
            Checked::Removal(v) => v
                .problems
                .iter()
                .map(|p| line(spelled(&p.code), p.line, &p.detail))
                .chain(
                    v.refusals
                        .iter()
                        .map(|r| line(spelled(&r.code), None, &r.detail)),
                )
                .collect(),
        }
    }
}

/// `--staging` given for a discard log, which records its own stage: a
/// usage error, as verify's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingForDiscardLog;

impl std::fmt::Display for StagingForDiscardLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("--staging does not apply to a discard log (rea-stage discard)")
    }
}

impl std::error::Error for StagingForDiscardLog {}

/// Runs the verifier for the log's kind on the bytes read from `log` (the
/// caller's own descriptor: verify judges exactly what is then shown). `first` is the log's start (up to
/// the line cap), which picks the verifier. `Err` is a usage error (as
/// verify's: `--staging` with a discard log).
pub fn check<R: Read>(
    log: R,
    first: &[u8],
    name: &str,
    staging: Option<&PathBuf>,
    expect_head: Option<&str>,
) -> Result<Checked, StagingForDiscardLog> {
    if is_stage_start(first) {
        if staging.is_some() {
            return Err(StagingForDiscardLog);
        }
        return Ok(Checked::Discard(verify_stage_reader(
            log,
            name,
            expect_head,
            None,
        )));
    }
    if is_remove_start(first) {
        if staging.is_some() {
            return Err(StagingForDiscardLog);
        }
        let v = verify_remove_reader(log, name, expect_head, None);
        return Ok(Checked::Removal(v));
    }
    if is_recovery_start(first) {
        let opts = RecoveryOptions {
            expect_head: expect_head.map(str::to_string),
            expect_run: None,
            staging: staging.cloned(),
        };
        return Ok(Checked::Recovery(verify_recovery_reader(log, name, &opts)));
    }
    let opts = VerifyOptions {
        expect_head: expect_head.map(str::to_string),
        staging: staging.cloned(),
        ..VerifyOptions::default()
    };
    Ok(Checked::Watchdog(verify_reader(log, name, &opts)))
}
