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
//! mappings found while binding, failed signals); each target is checked as
//! its part arrives, and only the closure's pids are kept (two bitmaps over
//! the pid space, [`PidSet`]) until the next sweep starts or the log ends:
//! one sweep of a million parts costs the same memory as one of a single part.

use std::collections::HashMap;

use self::ask::impossible_end;
use self::group::GroupSeen;
use crate::audit::verdict::{Code, Reason};
use crate::kinds::watchdog::{
    Counts, Event, Ident, JobSpawned, Outcome, Receipt, RunStarted, Sig, SignalSweep, Stage,
    StagingBaseline, StagingChanged, StagingInventoried, StartRefused, StopCompleted, StopReason,
};

pub mod ask;
pub mod group;
mod receipt;
mod records;
mod stage;

fn mismatch(detail: String) -> Reason {
    Reason::new(Code::ReplayMismatch, None, detail)
}

/// Reasons the replay keeps, at most (the rest are counted).
const MAX_OUT: usize = 64;

/// Linux pids are below `PID_MAX_LIMIT` (2^22 on 64-bit).
const PID_LIMIT: usize = 1 << 22;

/// A set of pids as a bitmap (512 KiB at most, allocated on first use),
/// cleared in time proportional to what was set.
#[derive(Default)]
struct PidSet {
    words: Vec<u64>,
    touched: Vec<u32>,
}

impl PidSet {
    /// Adds `pid`; false if it is outside the pid space.
    fn insert(&mut self, pid: i32) -> bool {
        let Ok(p) = usize::try_from(pid) else {
            return false;
        };
        if p == 0 || p >= PID_LIMIT {
            return false;
        }
        if self.words.is_empty() {
            self.words = vec![0; PID_LIMIT / 64];
        }
        let w = &mut self.words[p / 64];
        if *w == 0 {
            self.touched.push((p / 64) as u32);
        }
        *w |= 1 << (p % 64);
        true
    }

    fn clear(&mut self) {
        for &i in &self.touched {
            self.words[i as usize] = 0;
        }
        self.touched.clear();
    }

    /// Pids in `self` and not in `other`, the first `max` of them.
    fn missing_from(&self, other: &PidSet, max: usize) -> Vec<i32> {
        let mut out = Vec::new();
        for &i in &self.touched {
            let i = i as usize;
            let theirs = other.words.get(i).copied().unwrap_or(0);
            let mut bits = self.words[i] & !theirs;
            while bits != 0 && out.len() < max {
                let b = bits.trailing_zeros() as usize;
                out.push((i * 64 + b) as i32);
                bits &= bits - 1;
            }
        }
        out.sort_unstable();
        out
    }
}

/// The sweep being read: its number and the pids its closure check needs.
#[derive(Default)]
struct Sweep {
    current: Option<u32>,
    /// Every target and listed other of the sweep so far.
    members: PidSet,
    /// Parents of targets that are not the watchdog: each must be a member.
    parents: PidSet,
}

/// The ask step as the records tell it: asks come first, `ask_ended` once,
/// and TERM or KILL sweeps only after it.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum AskSeen {
    #[default]
    Before,
    Asking,
    /// `ask_ended` recorded, or a TERM/KILL sweep (no ask after either).
    Over,
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
    /// `foreign_member` records: processes in the action's group that it
    /// did not start.
    pub foreign: u64,
    /// `unkillable` records: processes sealed without, still there.
    pub unkillable: u64,
    /// Jobs spawned and not yet exited (job numbers only grow): leader pid,
    /// start time, stop signal.
    open: HashMap<u64, (i32, u64, Sig)>,
    /// Where the stop's ask step is (docs/stop.md).
    ask: AskSeen,
    last_job: Option<u64>,
    first_stop: Option<StopReason>,
    /// Line of the first stop_triggered or stop_completed record.
    stop_line: Option<u64>,
    triggered: bool,
    firsts: u32,
    temp_removed: Option<bool>,
    last_completed: Option<StopCompleted>,
    last_staging: Option<StagingInventoried>,
    /// The stage's baseline and what changed since (`stage.rs`).
    baseline: Option<StagingBaseline>,
    changed: Option<StagingChanged>,
    /// `start_refused`: the log's last record, nothing launched.
    refused: Option<StartRefused>,
    /// A `stop_triggered` for `audit_failure` was recorded.
    pub audit_failure_seen: bool,
    /// A `stop_triggered` for `root_lost` was recorded (first or later).
    pub root_lost_seen: bool,
    /// A `stop_triggered` for `hangup` was recorded (first or later).
    pub hangup_seen: bool,
    sweep: Sweep,
    /// The containment records (docs/containment.md).
    group: GroupSeen,
    out: Vec<Reason>,
    dropped: u64,
}

impl Replay {
    pub fn start(&self) -> Option<&RunStarted> {
        self.start.as_ref()
    }

    fn push(&mut self, r: Reason) {
        if self.out.len() < MAX_OUT {
            self.out.push(r);
        } else {
            self.dropped += 1;
        }
    }

    fn push_problem(&mut self, problem: Option<String>) {
        if let Some(p) = problem {
            self.push(mismatch(p));
        }
    }

    fn at(&mut self, code: Code, line: u64, detail: String) {
        self.push(Reason::new(code, Some(line), detail));
    }

    /// Feeds the next record that parsed, from 1-based `line` (the receipt
    /// is not fed).
    pub fn record(&mut self, ev: Event, line: u64) {
        self.seen += 1;
        self.counts.add(&ev);
        let wd = self.start.as_ref().map(|s| s.watchdog);
        if self.refused.is_some() {
            self.push(mismatch(format!(
                "{} after start_refused (the watchdog writes nothing after it)",
                crate::log::Kind::kind(&ev)
            )));
        }
        match ev {
            Event::RunStarted(s) if self.seen == 1 => self.start = Some(s),
            Event::RootBound(b) => self.root_bound(&b, wd, line),
            Event::StageArmed(a) => self.stage_armed(&a.path),
            Event::JobSpawned(j) => self.job_spawned(&j, wd, line),
            Event::JobExited(j) => match self.open.remove(&j.job) {
                Some((pid, st, _)) if pid == j.pid && st == j.start_time => {}
                Some(_) => self.push(mismatch(format!(
                    "job {} exited but was never spawned as pid {}",
                    j.job, j.pid
                ))),
                None => self.push(mismatch(format!(
                    "job {} exited but was not running (never spawned, or exited twice)",
                    j.job
                ))),
            },
            Event::InnerAlarm(a) => match self.open.get(&a.job) {
                Some(&(pid, st, _)) if pid == a.pid && st == a.start_time => {}
                _ => self.push(mismatch(format!(
                    "an inner alarm for job {} (pid {}), which was not running",
                    a.job, a.pid
                ))),
            },
            Event::MappingUncertain(_) => self.uncertain += 1,
            Event::ForeignMember(_) => self.foreign += 1,
            Event::Unkillable(_) => self.unkillable += 1,
            Event::StopTriggered(t) => {
                self.stop_line.get_or_insert(line);
                self.triggered = true;
                self.audit_failure_seen |= t.reason == StopReason::AuditFailure;
                self.root_lost_seen |= t.reason == StopReason::RootLost;
                self.hangup_seen |= t.reason == StopReason::Hangup;
                if t.first {
                    self.firsts += 1;
                    self.first_stop.get_or_insert(t.reason);
                }
            }
            Event::SignalSweep(s) => {
                self.ask_order(&s);
                self.sweep_part(s, line)
            }
            Event::AskEnded(a) => {
                if self.ask == AskSeen::Over || !self.triggered {
                    self.push(mismatch(
                        "ask_ended with no stop before it, twice, or after a TERM/KILL sweep"
                            .into(),
                    ));
                }
                self.ask = AskSeen::Over;
                let run = self.start.as_ref().zip(self.first_stop);
                if let Some(why) = run.and_then(|(r, f)| impossible_end(&a, &r.bounds, f)) {
                    self.push(mismatch(why));
                }
            }
            Event::TempRootRemoved(t) => self.temp_removed = Some(t.removed),
            Event::StopCompleted(c) => {
                self.stop_line.get_or_insert(line);
                self.last_completed = Some(c);
            }
            Event::StagingInventoried(s) => self.last_staging = Some(s),
            Event::StagingBaseline(b) => self.staging_baseline(b),
            Event::StagingChanged(c) => self.staging_changed(c),
            Event::StartRefused(r) => self.start_refused(r),
            Event::Containment(c) => {
                let p = self.group.containment(c, self.seen);
                self.push_problem(p);
            }
            Event::GroupKill(k) => {
                let p = self.group.kill(k.ino, false, self.triggered);
                self.push_problem(p);
            }
            Event::GroupKillFailed(k) => {
                let p = self.group.kill(k.ino, true, self.triggered);
                self.push_problem(p);
            }
            Event::GroupRemoved(g) => {
                let p = self.group.removed(&g.group, g.populated, g.removed);
                self.push_problem(p);
            }
            _ => {}
        }
    }

    /// `caller_job` names the running job whose process asked: a running
    /// job, the caller not the root controller, and when the caller is a
    /// running job's leader, that job.
    fn caller_job(&mut self, j: &JobSpawned, by: u64) {
        let is = |c: &Ident, pid: i32, st: u64| c.pid == pid && c.start_time == st;
        let root_asked = j
            .caller
            .is_some_and(|c| self.root.is_some_and(|r| is(&c, r.pid, r.start_time)));
        let led = j.caller.and_then(|c| {
            let mut open = self.open.iter();
            open.find(|(_, &(pid, st, _))| is(&c, pid, st))
                .map(|(n, _)| *n)
        });
        let wrong = !self.open.contains_key(&by) || j.caller.is_none() || root_asked;
        if wrong || led.is_some_and(|n| n != by) {
            self.push(mismatch(format!(
                "job {} names job {by} as its caller's, which was not a running job's process (or its caller leads another job)",
                j.job
            )));
        }
    }

    /// The ask step's rules: an ask sweep targets only running jobs'
    /// leaders, each with its own stop signal then SIGCONT, and comes
    /// before `ask_ended`; a TERM or KILL sweep never comes while asking.
    fn ask_order(&mut self, s: &SignalSweep) {
        match (s.stage, self.ask) {
            (Stage::Ask, AskSeen::Over) => self.push(mismatch(format!(
                "sweep {} asks after the ask step ended",
                s.sweep
            ))),
            (Stage::Ask, _) => self.ask = AskSeen::Asking,
            (Stage::Term | Stage::Kill, AskSeen::Asking) => self.push(mismatch(format!(
                "sweep {} sends {:?} during the ask step (no ask_ended before it)",
                s.sweep, s.stage
            ))),
            (Stage::Term | Stage::Kill, _) => self.ask = AskSeen::Over,
        }
        if s.stage != Stage::Ask {
            return;
        }
        for t in &s.targets {
            let leader = self
                .open
                .values()
                .find(|&&(pid, st, _)| pid == t.pid && st == t.start_time);
            let ok = leader.is_some_and(|&(_, _, sig)| s.signals == [sig, Sig::CONT]);
            if !ok {
                self.push(mismatch(format!(
                    "sweep {} asks pid {} with {:?}: not a running job's leader and its stop signal",
                    s.sweep, t.pid, s.signals
                )));
            }
        }
    }

    /// One part of a sweep: its targets are checked now, and only the pids
    /// the closure check needs are kept.
    fn sweep_part(&mut self, s: SignalSweep, line: u64) {
        if !self.triggered {
            let detail = format!("sweep {} with no stop_triggered before it", s.sweep);
            self.at(Code::SweepWithoutTrigger, line, detail);
        }
        if self.sweep.current.is_some_and(|c| c != s.sweep) {
            self.flush_sweep();
        }
        self.sweep.current = Some(s.sweep);
        let Some(start) = self.start.take() else {
            return;
        };
        let w = start.watchdog;
        for pid in &s.cont {
            if s.stage != Stage::Term || !s.targets.iter().any(|t| t.pid == *pid) {
                self.push(mismatch(format!(
                    "sweep {} sends SIGCONT to pid {pid}: only a TERM sweep's own targets get one",
                    s.sweep
                )));
            }
        }
        for o in &s.others {
            if !self.sweep.members.insert(o.pid) {
                self.push(mismatch(format!(
                    "sweep {} lists pid {} outside the pid space",
                    s.sweep, o.pid
                )));
            }
        }
        for t in &s.targets {
            if !self.sweep.members.insert(t.pid) {
                self.push(mismatch(format!(
                    "sweep {} targets pid {} outside the pid space",
                    s.sweep, t.pid
                )));
            }
            if t.ppid != w.pid && !self.sweep.parents.insert(t.ppid) {
                self.push(mismatch(format!(
                    "sweep {} targets pid {} whose parent {} is not in the sweep's closure",
                    s.sweep, t.pid, t.ppid
                )));
            }
            let mut out = Vec::new();
            check_target(&start, self.root, t.ident(), s.sweep, &mut out);
            for r in out {
                self.push(r);
            }
        }
        self.start = Some(start);
    }

    /// The closure check of the sweep just read: every target's parent is
    /// the watchdog or in the same sweep.
    fn flush_sweep(&mut self) {
        let Some(sweep) = self.sweep.current.take() else {
            return;
        };
        let missing = self.sweep.parents.missing_from(&self.sweep.members, 8);
        for ppid in missing {
            self.push(mismatch(format!(
                "sweep {sweep} targets a process whose parent {ppid} is not in the sweep's closure"
            )));
        }
        self.sweep.members.clear();
        self.sweep.parents.clear();
    }

    /// Compares the receipt (the last record) with everything fed before it.
    pub fn finish(&mut self, receipt: &Receipt) -> Vec<Reason> {
        self.flush_sweep();
        let Some(start) = self.start.take() else {
            return Vec::new(); // reported as first_not_run_started already
        };
        if receipt.outcome == Outcome::Stopped && self.last_completed.is_none() {
            self.push(Reason::new(
                Code::StopNotCompleted,
                None,
                "a stopped receipt, but no stop_completed record: the stop's end is missing",
            ));
        }
        if let (Outcome::Closed, Some(line)) = (receipt.outcome, self.stop_line) {
            self.at(
                Code::StopInClosedLog,
                line,
                "a stop record in a log whose receipt says closed".into(),
            );
        }
        let p = self.group.finish(receipt);
        self.push_problem(p);
        let mut out = std::mem::take(&mut self.out);
        if self.dropped > 0 {
            out.push(mismatch(format!("... and {} more", self.dropped)));
        }
        if !self.second_is_root_bound {
            out.insert(
                0,
                mismatch("the second record is not root_bound: the root was never bound".into()),
            );
        }
        self.count_mismatches(receipt, &mut out);
        self.quiescence_mismatches(receipt, &mut out);
        if receipt.staging.is_some() && receipt.staging.as_ref() != self.last_staging.as_ref() {
            out.push(mismatch(
                "staging inventory in the receipt differs from the staging_inventoried record"
                    .into(),
            ));
        }
        out.extend(self.stage_mismatches(receipt).map(mismatch));
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
}
