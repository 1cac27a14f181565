//! The receipt checked against what the records show: its counts, its
//! first stop, and its claim of quiescence.

use super::{mismatch, Replay};
use crate::audit::verdict::Reason;
use crate::kinds::watchdog::{Outcome, Receipt};

impl Replay {
    /// The receipt's counts and first stop against the records'.
    pub(super) fn count_mismatches(&self, receipt: &Receipt, out: &mut Vec<Reason>) {
        let c = &receipt.counts;
        let counts = [
            ("requests", c.requests, self.counts.requests),
            ("refused", c.refused, self.counts.refused),
            ("jobs", c.jobs, self.counts.jobs),
            ("signals", c.signals, self.counts.signals),
            ("reaped", c.reaped, self.counts.reaped),
            (
                "uncertain_mappings",
                receipt.uncertain_mappings,
                self.uncertain,
            ),
        ];
        for (what, claimed, seen) in counts {
            if claimed != seen {
                out.push(mismatch(format!(
                    "receipt says {what}={claimed}, the records show {seen}"
                )));
            }
        }
        if self.firsts > 1 {
            out.push(mismatch(format!(
                "{} stop triggers claim to be the first",
                self.firsts
            )));
        }
        match (receipt.outcome, self.first_stop) {
            (Outcome::Closed, None) if receipt.stop_reason.is_none() => {}
            (Outcome::Stopped, Some(reason)) if receipt.stop_reason == Some(reason) => {}
            (o, f) => out.push(mismatch(format!(
                "receipt says {o:?} ({:?}); the first stop trigger recorded is {f:?}",
                receipt.stop_reason
            ))),
        }
    }

    /// A quiescent receipt with jobs never reaped, unkillable or foreign
    /// processes, or a stop that did not prove its end.
    pub(super) fn quiescence_mismatches(&self, receipt: &Receipt, out: &mut Vec<Reason>) {
        if receipt.quiescent {
            let mut open: Vec<_> = self.open.keys().collect();
            open.sort();
            if !open.is_empty() {
                out.push(mismatch(format!(
                    "receipt claims quiescence but jobs {open:?} were never reaped"
                )));
            }
        }
        if receipt.quiescent && self.unkillable > 0 {
            out.push(mismatch(format!(
                "receipt claims quiescence; {} process(es) were recorded unkillable",
                self.unkillable
            )));
        }
        if receipt.quiescent && self.foreign > 0 {
            out.push(mismatch(format!(
                "receipt claims quiescence; {} foreign member(s) were recorded",
                self.foreign
            )));
        }
        if receipt.temp_root_removed && self.temp_removed != Some(true) {
            out.push(mismatch(
                "receipt says the temp root was removed; no record shows it".into(),
            ));
        }
        if let Some(c) = &self.last_completed {
            // Only the whole proof depends on how the stop ended:
            // `no_live_or_waitable_descendants` is what close measured, and
            // stragglers of a stop that ran out its kill bound (a file
            // server that came back) may well have died by then.
            if !c.proved() && receipt.quiescent {
                out.push(mismatch(format!(
                "receipt claims quiescence; the stop ended with echild={} scan_empty={} left={}{}",
                c.echild,
                c.scan_empty,
                c.left,
                c.foreign.map(|f| format!(" foreign={f}")).unwrap_or_default()
            )));
            }
        }
    }
}
