//! Verification first: the same verifier `rea-audit verify` and `show`
//! run for the log's kind (a watchdog's log, a discard log written by
//! `rea-stage discard`, a recovery log written by `rea-watchdog recover`),
//! and its verdict as the page's banner.
//!
//! The three verdict objects differ in shape; the banner reads them as
//! their `--json` form (a `serde_json::Value`, as `show::header` does), so
//! a reason is a reason whichever verifier gave it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::html::{esc, text};
use crate::audit::recover_log::{is_recovery_log, verify_recovery_file, RecoveryOptions};
use crate::audit::stage_log::{is_stage_log, verify_stage_file};
use crate::audit::verify::{verify_file, VerifyOptions};

/// Reasons listed in the banner; a log can give thousands (the verifier
/// caps its own list, this keeps the banner readable on paper too).
const SHOWN: usize = 64;

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

/// Runs the verifier for the log's kind with what the report was given.
/// `Err` is a usage error (as verify's: `--staging` with a discard log).
pub fn check(
    log: &Path,
    staging: Option<&PathBuf>,
    expect_head: Option<&str>,
) -> Result<Checked, String> {
    let (kind, verdict) = if is_stage_log(log) {
        if staging.is_some() {
            return Err("--staging does not apply to a discard log (rea-stage discard)".into());
        }
        let v = verify_stage_file(log, expect_head, None);
        (LogKind::Discard, serde_json::to_value(v))
    } else if is_recovery_log(log) {
        let opts = RecoveryOptions {
            expect_head: expect_head.map(str::to_string),
            expect_run: None,
            staging: staging.cloned(),
        };
        (
            LogKind::Recovery,
            serde_json::to_value(verify_recovery_file(log, &opts)),
        )
    } else {
        let opts = VerifyOptions {
            expect_head: expect_head.map(str::to_string),
            expect_run: None,
            staging: staging.cloned(),
        };
        (
            LogKind::Watchdog,
            serde_json::to_value(verify_file(log, &opts)),
        )
    };
    let verdict = verdict.map_err(|e| format!("cannot make the verdict: {e}"))?;
    Ok(Checked { kind, verdict })
}

/// The banner: green for delete_allowed and discarded, amber for retain,
/// refused and incomplete, red for a tampered log (UNTRUSTED) with every
/// reason listed (code, line, detail). `changed` is set when the report's
/// own reading of the log did not end on the head verify computed.
pub fn banner(c: &Checked, changed: Option<&str>) -> String {
    let v = &c.verdict;
    let word = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let decision = match word("verdict") {
        w if w.is_empty() => word("result"),
        w => w,
    };
    let status = match (word("status"), word("result")) {
        (s, _) if !s.is_empty() => s,
        (_, r) => r,
    };
    let code = c.exit_code();
    let (class, title) = match code {
        0 => (
            "ok",
            format!("{} — verified", decision.replace('_', " ").to_uppercase()),
        ),
        3 => ("bad", "UNTRUSTED — the log was tampered with".to_string()),
        4 => ("bad", "COULD NOT VERIFY".to_string()),
        _ if status == decision || status.is_empty() => ("warn", decision.to_uppercase()),
        _ => (
            "warn",
            format!("{} — {}", decision.to_uppercase(), status.replace('_', " ")),
        ),
    };
    let class = if changed.is_some() { "bad" } else { class };
    let mut s = format!(
        "<div class=\"banner {class}\" id=\"verdict\" data-status=\"{}\" data-exit=\"{code}\">\n<h1>{}</h1>\n",
        esc(&status),
        esc(&title)
    );
    let _ = writeln!(
        s,
        "<p>verdict <b>{}</b>, status <b>{}</b>: <code>rea-audit verify</code> exits {code} for this log{}.</p>",
        text(&decision),
        text(&status),
        match c.kind {
            LogKind::Watchdog => "",
            LogKind::Discard => " (a discard log, written by rea-stage discard)",
            LogKind::Recovery => " (a recovery log, written by rea-watchdog recover)",
        }
    );
    if code == 3 {
        s.push_str(
            "<p>The log is not what the watchdog wrote (or its head is not the pinned \
one). Nothing below can be relied on; it is shown only so that the edit can be found.</p>\n",
        );
    }
    if let Some(why) = changed {
        let _ = writeln!(
            s,
            "<p>The log changed while this report was made ({}): the sections below may \
not be what was verified. Make the report again.</p>",
            esc(why)
        );
    }
    let reasons = c.reasons();
    if !reasons.is_empty() {
        s.push_str("<ul class=\"reasons\">\n");
        for (code, line, detail) in reasons.iter().take(SHOWN) {
            // A link to the row of the table below (a fragment: no request).
            let at = line
                .map(|l| format!(" at <a href=\"#line-{l}\">line {l}</a>"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "<li><code>{}</code>{at}: {}</li>",
                text(code),
                text(detail)
            );
        }
        if reasons.len() > SHOWN {
            let _ = writeln!(
                s,
                "<li>and {} more (rea-audit verify LOG --json lists them all)</li>",
                reasons.len() - SHOWN
            );
        }
        s.push_str("</ul>\n");
    }
    s.push_str("</div>\n");
    s
}
