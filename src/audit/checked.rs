//! The verdict of whichever verifier fits the log (a watchdog's log, a
//! discard log written by `rea-stage discard`, a recovery log written by
//! `rea-watchdog recover`), run on a reader, as `verify --json` prints it.
//! `rea-audit report` and `rea-audit show` judge a log through it, on the
//! bytes their one descriptor reads ([`super::passes`]).
//!
//! The three verdict objects differ in shape; they are read as their
//! `--json` form (a `serde_json::Value`), so a reason is a reason whichever
//! verifier gave it.

use std::io::Read;
use std::path::PathBuf;

use serde_json::Value;

use super::recover_log::{is_recovery_start, verify_recovery_reader, RecoveryOptions};
use super::stage_log::{is_stage_start, verify_stage_reader};
use super::verify::{verify_reader, VerifyOptions};

/// Which verifier read the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    Watchdog,
    Discard,
    Recovery,
}

/// The verdict, as `verify --json` prints it, and the log's kind.
pub struct Checked {
    pub kind: LogKind,
    pub verdict: Value,
}

impl Checked {
    /// verify's exit status for this log (4 when the object lacks one).
    pub fn exit_code(&self) -> i32 {
        self.verdict["exit_code"]
            .as_i64()
            .unwrap_or(4)
            .clamp(0, 255) as i32
    }

    /// A log that is not what its writer wrote (or changed under us):
    /// everything drawn from it is shown marked as untrusted.
    pub fn tampered(&self) -> bool {
        self.exit_code() == 3
    }

    pub fn head(&self) -> Option<&str> {
        self.verdict["head"].as_str()
    }

    pub fn run(&self) -> Option<&str> {
        self.verdict["run"].as_str()
    }

    /// Every reason, as (code, line, detail), whichever key the verifier
    /// uses for them (`reasons`, `problems`, `refusals`).
    pub fn reasons(&self) -> Vec<(String, Option<u64>, String)> {
        let mut out = Vec::new();
        for key in ["reasons", "problems", "refusals"] {
            for r in self.verdict[key].as_array().into_iter().flatten() {
                let code = match (&r["code"], &r["reason"]) {
                    (Value::String(c), _) | (_, Value::String(c)) => c.clone(),
                    (Value::Null, Value::Null) => "?".into(),
                    (c, Value::Null) => c.to_string(),
                    (_, c) => c.to_string(),
                };
                let detail = r["detail"].as_str().unwrap_or("").to_string();
                out.push((code, r["line"].as_u64(), detail));
            }
        }
        out
    }
}

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
) -> Result<Checked, String> {
    let (kind, verdict) = if is_stage_start(first) {
        if staging.is_some() {
            return Err("--staging does not apply to a discard log (rea-stage discard)".into());
        }
        let v = verify_stage_reader(log, name, expect_head, None);
        (LogKind::Discard, serde_json::to_value(v))
    } else if is_recovery_start(first) {
        let opts = RecoveryOptions {
            expect_head: expect_head.map(str::to_string),
            expect_run: None,
            staging: staging.cloned(),
        };
        (
            LogKind::Recovery,
            serde_json::to_value(verify_recovery_reader(log, name, &opts)),
        )
    } else {
        let opts = VerifyOptions {
            expect_head: expect_head.map(str::to_string),
            expect_run: None,
            staging: staging.cloned(),
        };
        (
            LogKind::Watchdog,
            serde_json::to_value(verify_reader(log, name, &opts)),
        )
    };
    let verdict = verdict.map_err(|e| format!("cannot make the verdict: {e}"))?;
    Ok(Checked { kind, verdict })
}
