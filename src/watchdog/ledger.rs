//! The action's side of the audit log: append, sync, count, seal.
//!
//! The loop lends the ledger to each room (`&mut Ledger`); no room calls
//! back into the loop. A record that cannot be made durable does not stop
//! anything from here: the ledger keeps the failure, and the loop, which
//! alone moves the phase, takes it with [`Ledger::take_failure`] after every
//! handler and turns it into an `audit_failure` stop. After a failure the
//! writer is poisoned and every later append fails quietly (the first
//! failure is the one reported).
//!
//! Invariants: the receipt's counts are exactly what was appended
//! ([`Counts::add`], the rule the replay recounts by); an uncertain mapping
//! is recorded once per (pid, start time); nothing is appended after the
//! receipt.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::contain::{choice::Contained, group::ActionGroup};
use crate::kinds::watchdog::{AuditWriter, StartRefused};
use crate::kinds::watchdog::{
    Counts, Event, ForeignMember, MappingUncertain, Proc, ReplyFailed, RequestRefused,
    RequestsRefused,
};
use crate::log::LogError as AuditError;
use crate::process::identity::Stat;
use crate::vocab::{bounded, RefusalReason, Uncertainty};

/// How long a burst of unanswerable refusals collects before it is
/// recorded (unless another record comes first): a flood at full speed
/// then costs one small record a second (docs/requests.md: ≤ 1 MiB a minute).
pub const BURST: Duration = Duration::from_secs(1);

pub struct Ledger {
    audit: AuditWriter,
    counts: Counts,
    uncertain: HashSet<(i32, u64)>,
    /// Foreign members recorded (pid, start time): the proof fails if any.
    foreign: HashSet<(i32, u64)>,
    /// The first failure, for the exit status and the stderr message.
    error: Option<String>,
    /// A failure the loop has not yet turned into a stop.
    unhandled: Option<String>,
    /// Unanswerable refusals not yet recorded, and when the first came.
    burst: Option<(Instant, RequestsRefused)>,
    sealed: bool,
}

impl Ledger {
    pub fn new(audit: AuditWriter) -> Ledger {
        Ledger {
            audit,
            counts: Counts::default(),
            uncertain: HashSet::new(),
            foreign: HashSet::new(),
            error: None,
            unhandled: None,
            burst: None,
            sealed: false,
        }
    }

    pub fn run(&self) -> &str {
        self.audit.run()
    }

    pub fn path(&self) -> &Path {
        self.audit.path()
    }

    /// A reply (to request `id`, or to a channel) could not be delivered.
    pub fn reply_failed(&mut self, id: String, why: &super::reply::ReplyError) {
        let detail = why.to_string();
        self.append(Event::ReplyFailed(ReplyFailed { id, detail }));
    }

    /// Appends a record, durable at the next [`Ledger::sync`]. Once sealed,
    /// nothing is appended (the receipt stays the last record). A pending
    /// burst of quiet refusals is recorded first, so records stay in order.
    pub fn append(&mut self, ev: Event) {
        if self.sealed {
            return;
        }
        self.flush_burst();
        self.write(ev);
    }

    /// Records the pending burst of quiet refusals now, if there is one
    /// (before the receipt is made, so its counts include it).
    pub fn flush_burst(&mut self) {
        if let Some((_, burst)) = self.burst.take() {
            self.write(Event::RequestsRefused(burst));
        }
    }

    fn write(&mut self, ev: Event) {
        match self.audit.append(&ev) {
            Ok(_) => self.counts.add(&ev),
            Err(e) => self.failed(e),
        }
    }

    /// Makes every appended record durable.
    pub fn sync(&mut self) {
        if let Err(e) = self.audit.sync() {
            self.failed(e);
        }
    }

    /// Appends and syncs: the record is durable before the act it announces.
    pub fn record(&mut self, ev: Event) {
        self.append(ev);
        self.sync();
    }

    /// Records a live descendant that could not be proven, once per
    /// (pid, start time). Its uid is read now; `None` when unreadable.
    pub fn uncertain(&mut self, st: &Stat, reason: Uncertainty, detail: &str) {
        if !self.uncertain.insert((st.pid, st.start_time)) {
            return;
        }
        // Recorded, never decided on: a process whose uid cannot be read is
        // uncertain already, and the record needs a uid.
        self.append(Event::MappingUncertain(MappingUncertain {
            process: st.recorded(),
            reason,
            detail: bounded(detail),
        }));
    }

    /// Records a member of the action's group that is not the action's
    /// (docs/ownership.md), once per (pid, start time).
    pub fn foreign(&mut self, process: Proc, why: &str) {
        if !self.foreign.insert((process.pid, process.start_time)) {
            return;
        }
        let why = bounded(why);
        self.append(Event::ForeignMember(ForeignMember { process, why }));
    }

    /// Some foreign member was recorded: the action cannot be proven to
    /// have ended alone, whatever became of it.
    pub fn foreign_seen(&self) -> bool {
        !self.foreign.is_empty()
    }

    /// A refusal nobody can be told of (no usable reply channel): counted
    /// into the current burst, the first few with their detail.
    pub fn refused_quietly(
        &mut self,
        id: Option<&str>,
        reason: RefusalReason,
        detail: &str,
        bytes: u64,
    ) {
        let (_, b) = self.burst.get_or_insert_with(|| {
            let empty = RequestsRefused {
                count: 0,
                bytes: 0,
                reasons: Default::default(),
                first: Vec::new(),
            };
            (Instant::now(), empty)
        });
        b.count += 1;
        b.bytes += bytes;
        *b.reasons.entry(reason).or_insert(0) += 1;
        if b.first.len() < RequestsRefused::SAMPLES {
            b.first.push(RequestRefused {
                id: id.map(str::to_string),
                reason,
                detail: bounded(detail),
            });
        }
    }

    /// Records the burst once it is [`BURST`] old (called every wake-up);
    /// it becomes durable with the next sync.
    pub fn tick(&mut self, now: Instant) {
        let due = self.burst_due().is_some_and(|due| now >= due);
        if due && !self.sealed {
            self.flush_burst();
        }
    }

    /// When the pending burst must be recorded at the latest.
    pub fn burst_due(&self) -> Option<Instant> {
        self.burst.as_ref().map(|(since, _)| *since + BURST)
    }

    /// Distinct processes recorded as uncertain mappings.
    pub fn uncertain_count(&self) -> u64 {
        self.uncertain.len() as u64
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Writes the receipt (the last record, durable) and returns the head.
    /// `None` when it could not be made durable (the log stays unsealed).
    pub fn seal(&mut self, receipt: &Event) -> Option<String> {
        self.sealed = true;
        match self.audit.seal(receipt) {
            Ok(w) => Some(w.hash),
            Err(e) => {
                self.error.get_or_insert_with(|| e.to_string());
                None
            }
        }
    }

    /// The first failure, if any record could not be made durable.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// A failure is waiting for the loop (the action is as good as stopping).
    pub fn failure_pending(&self) -> bool {
        self.unhandled.is_some()
    }

    /// Writes the first records, durably, at start (before anything runs);
    /// an error here means the action never starts.
    /// With containment, its record is the third (docs/containment.md) and the group
    /// is handed back. Then `then` (arming the stage, the first act after
    /// them, and its baseline: `baseline.rs`), and its records, durable.
    pub fn start(
        &mut self,
        first: [Event; 2],
        contained: Option<Contained>,
        then: impl FnOnce() -> Result<Vec<Event>, StartRefused>,
    ) -> Result<Option<ActionGroup>, StartFailed> {
        let (third, group) = match contained {
            Some(c) => (Some(Event::Containment(c.record)), c.group),
            None => (None, None),
        };
        for ev in first.iter().chain(third.as_ref()) {
            self.audit.append(ev).map_err(StartFailed::Log)?;
            self.counts.add(ev);
        }
        self.audit.sync().map_err(StartFailed::Log)?;
        let events = match then() {
            Ok(events) => events,
            Err(refused) => {
                // The log's last record: why nothing was launched.
                let ev = Event::StartRefused(refused.clone());
                return Err(match self.audit.record(&ev) {
                    Ok(_) => StartFailed::Refused(refused),
                    Err(e) => StartFailed::RefusedUnrecorded(refused, e),
                });
            }
        };
        for ev in events {
            self.audit.record(&ev).map_err(StartFailed::Log)?;
            self.counts.add(&ev);
        }
        Ok(group)
    }

    /// A failure not yet acted on; each is handed out once.
    pub fn take_failure(&mut self) -> Option<String> {
        self.unhandled.take()
    }

    fn failed(&mut self, e: AuditError) {
        if self.error.is_some() {
            return;
        }
        crate::tell::note(format_args!("{e}; stopping the action"));
        self.error = Some(e.to_string());
        self.unhandled = Some(e.to_string());
    }
}

/// Why an action's first records did not make it start.
#[derive(Debug)]
pub enum StartFailed {
    /// A first record could not be made durable.
    Log(AuditError),
    /// The stage refused the start; `start_refused` is the log's last record.
    Refused(StartRefused),
    /// The stage refused the start, and that could not be recorded either.
    RefusedUnrecorded(StartRefused, AuditError),
}

impl std::fmt::Display for StartFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartFailed::Log(e) => write!(f, "{e}"),
            StartFailed::Refused(r) => write!(f, "{r}"),
            StartFailed::RefusedUnrecorded(r, e) => write!(f, "{r}; {e}"),
        }
    }
}
