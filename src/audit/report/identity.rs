//! Who the run was and what it was bound by: run id, watchdog, the first
//! record's wall clock, the head (sealed or not), the bounds, the
//! containment, the root, the staging directory, and how it ended. Kept
//! from the first record of each kind (a later duplicate is a tampered
//! log's, and verify says so in the banner).

use std::fmt::Write as _;

use super::html::{row, text};
use super::verdict::Checked;
use crate::audit::people::word;
use crate::kinds::watchdog::{
    AskSpan, Containment, Event, GroupRemoved, Receipt, RootBound, RunStarted, StageArmed,
};

#[derive(Default)]
pub struct Identity {
    run: Option<String>,
    first_ts: Option<String>,
    last_ts: Option<String>,
    started: Option<RunStarted>,
    root: Option<RootBound>,
    containment: Option<Containment>,
    removed: Option<GroupRemoved>,
    armed: Option<StageArmed>,
    receipt: Option<Receipt>,
    /// Nanoseconds from the first record to the last.
    pub span: u64,
}

fn ms(v: Option<u64>) -> String {
    v.map_or("none".into(), |m| format!("{m} ms"))
}

impl Identity {
    pub fn note(&mut self, run: &str, ts: &str, at: u64, ev: &Event) {
        self.run.get_or_insert_with(|| run.to_string());
        self.first_ts.get_or_insert_with(|| ts.to_string());
        self.last_ts = Some(ts.to_string());
        self.span = self.span.max(at);
        match ev {
            Event::RunStarted(r) if self.started.is_none() => self.started = Some(r.clone()),
            Event::RootBound(r) if self.root.is_none() => self.root = Some(r.clone()),
            Event::Containment(c) if self.containment.is_none() => {
                self.containment = Some(c.clone())
            }
            Event::GroupRemoved(g) if self.removed.is_none() => self.removed = Some(g.clone()),
            Event::StageArmed(a) if self.armed.is_none() => self.armed = Some(a.clone()),
            Event::Receipt(r) if self.receipt.is_none() => self.receipt = Some(r.clone()),
            _ => {}
        }
    }

    /// The run id the log's records carry (verify's, when it read one).
    pub fn run(&self) -> Option<&str> {
        self.run.as_deref()
    }

    /// The facts table (`log` is the path as given).
    pub fn render(&self, c: &Checked, log: &str) -> String {
        let mut t = String::from("<table class=\"facts\">\n");
        let run = c.run().or(self.run.as_deref()).unwrap_or("unknown");
        row(&mut t, "run", &format!("<code>{}</code>", text(run)));
        row(&mut t, "log", &format!("<code>{}</code>", text(log)));
        let sealed = match c.sealed() {
            Some(true) => " (sealed)",
            Some(false) => " (not sealed)",
            None => "",
        };
        let head = c.head().map_or("none (no complete line)".into(), |h| {
            format!("<code>{}</code>", text(h))
        });
        row(&mut t, "head", &format!("{head}{sealed}"));
        row(&mut t, "records", &c.records().to_string());
        if let Some(ts) = &self.first_ts {
            row(&mut t, "started (wall clock)", &text(ts));
        }
        if let Some(ts) = &self.last_ts {
            row(
                &mut t,
                "last record",
                &format!(
                    "{} ({:.3} ms after the first)",
                    text(ts),
                    self.span as f64 / 1e6
                ),
            );
        }
        match c {
            Checked::Watchdog(_) => self.watchdog_rows(&mut t),
            Checked::Discard(v) => {
                row(&mut t, "kind", "discard log (rea-stage discard)");
                row(&mut t, "stage", &text(v.stage.as_deref().unwrap_or("?")));
            }
            Checked::Removal(v) => {
                row(&mut t, "kind", "removal log (rea-stage remove)");
                row(&mut t, "stage", &text(v.stage.as_deref().unwrap_or("?")));
            }
            Checked::Recovery(v) => {
                row(&mut t, "kind", "recovery log (rea-watchdog recover)");
                row(
                    &mut t,
                    "recovered log",
                    &text(v.recovered_log.as_deref().unwrap_or("?")),
                );
                row(
                    &mut t,
                    "recovered run",
                    &text(v.recovered_run.as_deref().unwrap_or("?")),
                );
            }
        }
        t.push_str("</table>\n");
        t
    }

    fn watchdog_rows(&self, t: &mut String) {
        if let Some(r) = &self.started {
            started_rows(t, r);
        }
        if let Some(a) = &self.armed {
            row(
                t,
                "stage armed",
                &format!("marker <code>{}</code> (inode {})", text(&a.marker), a.ino),
            );
        }
        if let Some(r) = &self.root {
            let who = match (&r.root, &r.comm) {
                (Some(id), comm) => format!(
                    "pid {} {} (start time {}), bound as the {}",
                    id.pid,
                    comm.as_deref().map(text).unwrap_or_default(),
                    id.start_time,
                    text(&word(&r.source))
                ),
                (None, _) => format!("none bound ({})", text(&word(&r.source))),
            };
            row(t, "root controller", &who);
        }
        self.containment_row(t);
        receipt_rows(t, self.receipt.as_ref());
    }

    /// The containment asked and got, its group and what the close found.
    fn containment_row(&self, t: &mut String) {
        if let Some(c) = &self.containment {
            let mut s = format!(
                "{} (asked {})",
                text(&word(&c.mode)),
                text(&word(&c.requested))
            );
            if let Some(g) = &c.group {
                let _ = write!(s, ": group <code>{}</code>, inode {}", text(&g.path), g.ino);
            }
            if !c.detail.is_empty() {
                let _ = write!(s, "; {}", text(&c.detail));
            }
            if let Some(g) = &self.removed {
                let _ = write!(
                    s,
                    "; at close populated {}, removed {}",
                    g.populated, g.removed
                );
            }
            row(t, "containment", &s);
        }
    }
}

/// What the run began with: mode, watchdog, state directory, bounds,
/// stage and (exec) the handover.
fn started_rows(t: &mut String, r: &RunStarted) {
    row(
        t,
        "mode",
        &format!("{} (rea {})", text(&word(&r.mode)), text(&r.version)),
    );
    row(
        t,
        "watchdog",
        &format!(
            "pid {} (start time {}, uid {})",
            r.watchdog.pid, r.watchdog.start_time, r.watchdog.uid
        ),
    );
    row(
        t,
        "state directory",
        &format!("<code>{}</code>", text(&r.state_dir)),
    );
    let b = &r.bounds;
    let ask = match b.ask {
        AskSpan::HalfGrace => "half the TERM grace".to_string(),
        AskSpan::UntilExit => "until every leader asked has exited".to_string(),
        AskSpan::KillAfterMs(k) => format!("until the leaders exit, or {k} ms then KILL"),
    };
    row(
        t,
        "bounds",
        &format!(
            "action deadline {}, TERM grace {} ms, kill bound {} ms, output cap {}, ask {}",
            ms(b.action_deadline_ms),
            b.term_grace_ms,
            b.kill_bound_ms,
            b.output_cap.map_or("none".into(), |c| format!("{c} bytes")),
            text(&ask)
        ),
    );
    match &r.staging {
        Some(s) => row(
            t,
            "staging",
            &format!(
                "<code>{}</code> (dev {}, inode {}, uid {}, mode {:04o})",
                text(&s.path),
                s.dev,
                s.ino,
                s.uid,
                s.mode & 0o7777
            ),
        ),
        None => row(t, "staging", "none recorded"),
    }
    if let Some(h) = &r.handover {
        row(
            t,
            "exec handover",
            &format!(
                "environment {}, stdio {}, own session {}, parent-death signal {}, {} inherited child(ren) left alone",
                if h.env_inherited { "inherited" } else { "minimal" },
                if h.stdio_inherited { "inherited" } else { "relayed" },
                h.own_session,
                h.pdeathsig,
                h.inherited_total
            ),
        );
    }
}

/// The receipt's outcome and counts, or that there is none.
fn receipt_rows(t: &mut String, receipt: Option<&Receipt>) {
    if let Some(r) = receipt {
        row(
            t,
            "outcome",
            &format!(
                "{}{}: quiescent {}, no live or waitable descendants {}, uncertain mappings {}, temp root removed {}, root alive {}",
                text(&word(&r.outcome)),
                r.stop_reason.map(|s| format!(" ({})", s.as_str())).unwrap_or_default(),
                r.quiescent,
                r.no_live_or_waitable_descendants,
                r.uncertain_mappings,
                r.temp_root_removed,
                r.root_alive
            ),
        );
        let k = &r.counts;
        row(
            t,
            "counts",
            &format!(
                "requests {}, refused {}, jobs {}, signals {}, reaped {}",
                k.requests, k.refused, k.jobs, k.signals, k.reaped
            ),
        );
    } else {
        row(t, "outcome", "no receipt: the log is not sealed");
    }
}
