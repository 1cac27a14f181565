//! Replay: does the receipt agree with the records before it?
//!
//! The receipt is the watchdog's summary; a replay recomputes what it can
//! from the individual records and names every disagreement. It also checks
//! what makes a signal defensible: every target has the watchdog's uid, is
//! neither the watchdog nor the root, and hangs off the watchdog through
//! parent links listed in the same sweep.
//!
//! It runs as the log streams by (records are fed in order and not kept),
//! so verifying a log of millions of records needs little memory. A sweep's
//! parts come in order, possibly with other records between them (uncertain
//! mappings found while binding, failed signals); its closure check runs
//! once the next sweep starts or the log ends.

use std::collections::{HashMap, HashSet};

use super::record::{
    Counts, Event, Ident, Outcome, Receipt, RunStarted, SignalSweep, StagingInventoried,
    StopCompleted, StopReason,
};
use super::verdict::{Code, Reason};

fn mismatch(detail: String) -> Reason {
    Reason::new(Code::ReplayMismatch, None, detail)
}

#[derive(Default)]
pub struct Replay {
    /// The first record, if it is `run_started`.
    start: Option<RunStarted>,
    root: Option<Ident>,
    seen: u64,
    second_is_root_bound: bool,
    /// Recounted from the records by the one count rule ([`Counts::add`]).
    counts: Counts,
    uncertain: u64,
    spawned: HashMap<u64, (i32, u64)>,
    exited: HashSet<u64>,
    first_stop: Option<StopReason>,
    firsts: u32,
    temp_removed: Option<bool>,
    last_completed: Option<StopCompleted>,
    last_staging: Option<StagingInventoried>,
    /// A `stop_triggered` for `audit_failure` was recorded.
    pub audit_failure_seen: bool,
    /// A `stop_triggered` for `root_lost` was recorded (first or later).
    pub root_lost_seen: bool,
    sweep: Vec<SignalSweep>,
    out: Vec<Reason>,
}

impl Replay {
    pub fn start(&self) -> Option<&RunStarted> {
        self.start.as_ref()
    }

    /// Feeds the next record that parsed (the receipt is not fed).
    pub fn record(&mut self, ev: Event) {
        self.seen += 1;
        self.counts.add(&ev);
        match ev {
            Event::RunStarted(s) if self.seen == 1 => self.start = Some(s),
            Event::RootBound(b) => {
                self.second_is_root_bound |= self.seen == 2;
                self.root.get_or_insert(b.root);
            }
            Event::JobSpawned(j) => {
                if self.spawned.insert(j.job, (j.pid, j.start_time)).is_some() {
                    self.out
                        .push(mismatch(format!("job {} spawned twice", j.job)));
                }
                if let Some(s) = &self.start {
                    if j.ppid != s.watchdog.pid {
                        self.out.push(mismatch(format!(
                            "job {} has parent {}, not the watchdog",
                            j.job, j.ppid
                        )));
                    }
                }
            }
            Event::JobExited(j) => {
                match self.spawned.get(&j.job) {
                    Some(&(pid, st)) if pid == j.pid && st == j.start_time => {}
                    _ => self.out.push(mismatch(format!(
                        "job {} exited but was never spawned as pid {}",
                        j.job, j.pid
                    ))),
                }
                if !self.exited.insert(j.job) {
                    self.out
                        .push(mismatch(format!("job {} exited twice", j.job)));
                }
            }
            Event::MappingUncertain(_) => self.uncertain += 1,
            Event::StopTriggered(t) => {
                self.audit_failure_seen |= t.reason == StopReason::AuditFailure;
                self.root_lost_seen |= t.reason == StopReason::RootLost;
                if t.first {
                    self.firsts += 1;
                    self.first_stop.get_or_insert(t.reason);
                }
            }
            Event::SignalSweep(s) => {
                if self.sweep.first().is_some_and(|p| p.sweep != s.sweep) {
                    self.flush_sweep();
                }
                self.sweep.push(s);
            }
            Event::TempRootRemoved(t) => self.temp_removed = Some(t.removed),
            Event::StopCompleted(c) => self.last_completed = Some(c),
            Event::StagingInventoried(s) => self.last_staging = Some(s),
            _ => {}
        }
    }

    /// Checks the buffered parts of one sweep against its whole closure.
    fn flush_sweep(&mut self) {
        if self.sweep.is_empty() {
            return;
        }
        let parts = std::mem::take(&mut self.sweep);
        let members: HashSet<i32> = parts
            .iter()
            .flat_map(|s| {
                s.targets
                    .iter()
                    .map(|t| t.pid)
                    .chain(s.others.iter().map(|o| o.pid))
            })
            .collect();
        for s in &parts {
            let Some(start) = &self.start else { continue };
            for t in &s.targets {
                check_target(
                    start,
                    self.root,
                    t.ident(),
                    t.ppid,
                    &members,
                    s.sweep,
                    &mut self.out,
                );
            }
        }
    }

    /// Compares the receipt (the last record) with everything fed before it.
    pub fn finish(&mut self, receipt: &Receipt) -> Vec<Reason> {
        self.flush_sweep();
        let Some(start) = self.start.take() else {
            return Vec::new(); // reported as first_not_run_started already
        };
        let mut out = std::mem::take(&mut self.out);
        if !self.second_is_root_bound {
            out.insert(
                0,
                mismatch("the second record is not root_bound: the root was never bound".into()),
            );
        }
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
        if receipt.quiescent {
            let mut open: Vec<_> = self
                .spawned
                .keys()
                .filter(|j| !self.exited.contains(j))
                .collect();
            open.sort();
            if !open.is_empty() {
                out.push(mismatch(format!(
                    "receipt claims quiescence but jobs {open:?} were never reaped"
                )));
            }
        }
        if receipt.temp_root_removed && self.temp_removed != Some(true) {
            out.push(mismatch(
                "receipt says the temp root was removed; no record shows it".into(),
            ));
        }
        if let Some(c) = &self.last_completed {
            if !c.proved() && (receipt.quiescent || receipt.no_live_or_waitable_descendants) {
                out.push(mismatch(format!(
                    "receipt claims quiescence; the stop ended with echild={} scan_empty={} left={}",
                    c.echild, c.scan_empty, c.left
                )));
            }
        }
        if receipt.staging.is_some() && receipt.staging.as_ref() != self.last_staging.as_ref() {
            out.push(mismatch(
                "staging inventory in the receipt differs from the staging_inventoried record"
                    .into(),
            ));
        }
        // Whether the stage was *replaced* during the action is a verdict
        // (staging_mismatch), not tampering; here only presence must agree.
        if receipt.staging.is_some() != start.staging.is_some() {
            out.push(mismatch(
                "the receipt and the start record disagree on whether there is a staging directory"
                    .into(),
            ));
        }
        self.start = Some(start);
        out
    }
}

fn check_target(
    start: &RunStarted,
    root: Option<Ident>,
    t: Ident,
    ppid: i32,
    members: &HashSet<i32>,
    sweep: u32,
    out: &mut Vec<Reason>,
) {
    let w = start.watchdog;
    if t.pid == w.pid {
        out.push(mismatch(format!(
            "sweep {sweep} targets the watchdog itself"
        )));
    }
    if root.is_some_and(|r| r.pid == t.pid && r.start_time == t.start_time) {
        out.push(mismatch(format!(
            "sweep {sweep} targets the root controller {}",
            t.pid
        )));
    }
    if t.uid != w.uid {
        out.push(mismatch(format!(
            "sweep {sweep} targets pid {} of uid {}, not the watchdog's {}",
            t.pid, t.uid, w.uid
        )));
    }
    if ppid != w.pid && !members.contains(&ppid) {
        out.push(mismatch(format!(
            "sweep {sweep} targets pid {} whose parent {ppid} is not in the sweep's closure",
            t.pid
        )));
    }
}
