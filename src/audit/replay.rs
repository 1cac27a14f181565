//! Replay: does the receipt agree with the records before it?
//!
//! The receipt is the watchdog's summary; a replay recomputes what it can
//! from the individual records and names every disagreement. It also checks
//! what makes a signal defensible: every target has the watchdog's uid, is
//! neither the watchdog nor the root, and hangs off the watchdog through
//! parent links listed in the same sweep.

use std::collections::{HashMap, HashSet};

use super::reader::Record;
use super::record::{
    Event, Ident, Outcome, Receipt, RunStarted, StagingInventoried, StopCompleted,
};
use super::verdict::{Code, Reason};

fn mismatch(detail: String) -> Reason {
    Reason::new(Code::ReplayMismatch, None, detail)
}

/// Checks the receipt (the last record) against the records before it.
pub fn replay(records: &[Record], receipt: &Receipt) -> Vec<Reason> {
    let mut out = Vec::new();
    let Some(Event::RunStarted(start)) = records.first().map(|r| &r.event) else {
        return out; // reported as first_not_run_started already
    };
    let root = records.iter().find_map(|r| match &r.event {
        Event::RootBound(b) => Some(b.root),
        _ => None,
    });
    if !matches!(records.get(1).map(|r| &r.event), Some(Event::RootBound(_))) {
        out.push(mismatch(
            "the second record is not root_bound: the root was never bound".into(),
        ));
    }

    let mut requests = 0u64;
    let mut refused = 0u64;
    let mut signals = 0u64;
    let mut reaped = 0u64;
    let mut uncertain = 0u64;
    let mut spawned: HashMap<u64, (i32, u64)> = HashMap::new();
    let mut exited: HashSet<u64> = HashSet::new();
    let mut first_stop = None;
    let mut firsts = 0u32;
    let mut temp_removed = None;
    let mut last_completed: Option<&StopCompleted> = None;
    let mut last_staging: Option<&StagingInventoried> = None;
    let mut sweep_members: HashMap<u32, HashSet<i32>> = HashMap::new();

    // Pass 1: closure members per sweep (a sweep may span several parts).
    for r in records {
        if let Event::SignalSweep(s) = &r.event {
            let m = sweep_members.entry(s.sweep).or_default();
            m.extend(s.targets.iter().map(|t| t.pid));
            m.extend(s.others.iter().map(|o| o.pid));
        }
    }

    for r in records {
        match &r.event {
            Event::RequestReceived(_) => requests += 1,
            Event::RequestRefused(_) => refused += 1,
            Event::JobSpawned(j) => {
                if spawned.insert(j.job, (j.pid, j.start_time)).is_some() {
                    out.push(mismatch(format!("job {} spawned twice", j.job)));
                }
                if j.ppid != start.watchdog.pid {
                    out.push(mismatch(format!(
                        "job {} has parent {}, not the watchdog",
                        j.job, j.ppid
                    )));
                }
            }
            Event::JobExited(j) => {
                reaped += 1;
                match spawned.get(&j.job) {
                    Some(&(pid, st)) if pid == j.pid && st == j.start_time => {}
                    _ => out.push(mismatch(format!(
                        "job {} exited but was never spawned as pid {}",
                        j.job, j.pid
                    ))),
                }
                if !exited.insert(j.job) {
                    out.push(mismatch(format!("job {} exited twice", j.job)));
                }
            }
            Event::Reaped(p) => reaped += p.processes.len() as u64,
            Event::MappingUncertain(_) => uncertain += 1,
            Event::StopTriggered(t) if t.first => {
                firsts += 1;
                first_stop.get_or_insert(t.reason);
            }
            Event::SignalSweep(s) => {
                signals += (s.targets.len() * s.signals.len()) as u64;
                let members = sweep_members.get(&s.sweep);
                for t in &s.targets {
                    check_target(start, root, t.ident(), t.ppid, members, s.sweep, &mut out);
                }
            }
            Event::TempRootRemoved(t) => temp_removed = Some(t.removed),
            Event::StopCompleted(c) => last_completed = Some(c),
            Event::StagingInventoried(s) => last_staging = Some(s),
            _ => {}
        }
    }

    let c = &receipt.counts;
    let counts = [
        ("requests", c.requests, requests),
        ("refused", c.refused, refused),
        ("jobs", c.jobs, spawned.len() as u64),
        ("signals", c.signals, signals),
        ("reaped", c.reaped, reaped),
        ("uncertain_mappings", receipt.uncertain_mappings, uncertain),
    ];
    for (what, claimed, seen) in counts {
        if claimed != seen {
            out.push(mismatch(format!(
                "receipt says {what}={claimed}, the records show {seen}"
            )));
        }
    }
    if firsts > 1 {
        out.push(mismatch(format!(
            "{firsts} stop triggers claim to be the first"
        )));
    }
    match (receipt.outcome, first_stop) {
        (Outcome::Closed, None) if receipt.stop_reason.is_none() => {}
        (Outcome::Stopped, Some(reason)) if receipt.stop_reason == Some(reason) => {}
        (o, f) => out.push(mismatch(format!(
            "receipt says {o:?} ({:?}); the first stop trigger recorded is {f:?}",
            receipt.stop_reason
        ))),
    }
    if receipt.quiescent {
        let mut open: Vec<_> = spawned.keys().filter(|j| !exited.contains(j)).collect();
        open.sort();
        if !open.is_empty() {
            out.push(mismatch(format!(
                "receipt claims quiescence but jobs {open:?} were never reaped"
            )));
        }
    }
    if receipt.temp_root_removed && temp_removed != Some(true) {
        out.push(mismatch(
            "receipt says the temp root was removed; no record shows it".into(),
        ));
    }
    if let Some(c) = last_completed {
        let proved = c.echild && c.scan_empty && c.left == 0;
        if !proved && (receipt.quiescent || receipt.no_live_or_waitable_descendants) {
            out.push(mismatch(format!(
                "receipt claims quiescence; the stop ended with echild={} scan_empty={} left={}",
                c.echild, c.scan_empty, c.left
            )));
        }
    }
    if receipt.staging.is_some() && receipt.staging.as_ref() != last_staging {
        out.push(mismatch(
            "staging inventory in the receipt differs from the staging_inventoried record".into(),
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
    out
}

fn check_target(
    start: &RunStarted,
    root: Option<Ident>,
    t: Ident,
    ppid: i32,
    members: Option<&HashSet<i32>>,
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
    let linked = ppid == w.pid || members.is_some_and(|m| m.contains(&ppid));
    if !linked {
        out.push(mismatch(format!(
            "sweep {sweep} targets pid {} whose parent {ppid} is not in the sweep's closure",
            t.pid
        )));
    }
}
