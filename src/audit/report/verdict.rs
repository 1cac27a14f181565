//! Verification first: the same verifier `rea-audit verify` and `show`
//! run for the log's kind (a watchdog's log, a discard log written by
//! `rea-stage discard`, a recovery log written by `rea-watchdog recover`),
//! and its verdict as the page's banner.
//!
//! The three verdict objects differ in shape; the banner reads them as
//! their `--json` form (a `serde_json::Value`, as `show::header` does), so
//! a reason is a reason whichever verifier gave it.

use std::fmt::Write as _;

use super::html::{esc, text};
pub use crate::audit::checked::{Checked, LogKind, ReasonLine};

/// Reasons listed in the banner; a log can give thousands (the verifier
/// caps its own list, this keeps the banner readable on paper too).
const SHOWN: usize = 64;

/// What the banner says besides the verdict.
pub struct Context {
    /// `--expect-head` was given (verify compared the head with it).
    pub pinned: bool,
    /// Rows of the table below (`#line-N` exists for N up to this).
    pub rows: u64,
    /// The bytes verify read: all the page shows (a log still being
    /// written may have more by now).
    pub judged_bytes: u64,
}

/// The banner: green for delete_allowed and discarded, amber for retain,
/// refused and incomplete, red for a tampered log (UNTRUSTED) with every
/// reason listed (code, line, detail), a reason's line linked to its row
/// of the table where the table has one. Without a pinned head, the
/// banner says what only a pinned head would catch.
pub fn banner(c: &Checked, cx: &Context) -> String {
    let decision = c.decision();
    let status = c.status();
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
        match c.kind() {
            LogKind::Watchdog => "",
            LogKind::Discard => " (a discard log, written by rea-stage discard)",
            LogKind::Recovery => " (a recovery log, written by rea-watchdog recover)",
            LogKind::Removal => " (a removal log, written by rea-stage remove)",
        }
    );
    if code == 3 {
        s.push_str(
            "<p>The log is not what the watchdog wrote (or its head is not the pinned \
one). Nothing below can be relied on; it is shown only so that the edit can be found.</p>\n",
        );
    }
    if code == 2 {
        let _ = writeln!(
            s,
            "<p class=\"still\">The log is unfinished: its writer may still be appending to it. \
This page shows its first {} bytes, the ones verify judged; make the report again for what \
came after.</p>",
            cx.judged_bytes
        );
    }
    if !cx.pinned {
        s.push_str(
            "<p class=\"caveat\"><b>head not pinned (--expect-head): a log cut short and \
re-chained would look the same.</b> Give the head the watchdog printed when it sealed the log.</p>\n",
        );
    }
    let reasons = c.reasons();
    if !reasons.is_empty() {
        s.push_str("<ul class=\"reasons\">\n");
        for ReasonLine { code, line, detail } in reasons.iter().take(SHOWN) {
            // A link to the row of the table below (a fragment: no
            // request), where the table has that row.
            let at = match line {
                Some(l) if *l >= 1 && *l <= cx.rows => {
                    format!(" at <a href=\"#line-{l}\">line {l}</a>")
                }
                Some(l) => format!(" at line {l} (past the table's end)"),
                None => String::new(),
            };
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

/// The banner of a log that changed while the report read it: what verify
/// judged is not what would have been drawn, so nothing from the log is
/// shown (exit status 3, as a tampered log's).
pub fn changed_banner(why: &str) -> String {
    format!(
        "<div class=\"banner bad\" id=\"verdict\" data-status=\"log_changed\" data-exit=\"3\">\n\
<h1>LOG CHANGED WHILE READ — not verified</h1>\n\
<p>The log changed while this report read it ({}). The bytes verify judged are not the \
bytes that would be drawn, so nothing from the log is shown here and no verdict is given.</p>\n\
<p>Something is still writing the log, or someone changed it. Make the report again once \
nothing writes it, with the head pinned (<code>--expect-head</code>).</p>\n</div>\n",
        text(why)
    )
}
