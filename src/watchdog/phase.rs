//! The action's phase and its transitions: one enum that carries its data,
//! one `match` (the state × event table of s6-supervise).
//!
//! | phase \ input | trigger | close | stop done |
//! |---|---|---|---|
//! | `Running` | record first, start the stop (asking the running jobs' leaders first) → `Stopping` | check for leftovers (`Running { closing }`) | – |
//! | `Stopping` | record | keep the closer | record, answer `stop`s → `Stopped` |
//! | `Stopped` | record | keep the closer (the loop seals) | – |
//! | `Finished` | – | – | – |
//!
//! The loop seals (→ `Finished`) from `Running { closing }` when nothing is
//! left, and from `Stopped` once [`Phase::seals`] says nobody is left to
//! wait for. What a transition records goes to the ledger it is lent; what
//! it answers goes out as effects.

use std::time::{Duration, Instant};

use super::config::Config;
use super::effect::{Closer, Effects, ReplyTo};
use super::intake::Gate;
use super::ledger::Ledger;
use super::receipt::Finished;
use super::start::Started;
use super::stop::{Ask, Stopper, Trigger};
use crate::kinds::watchdog::{Event, StopCompleted, StopPriority};
use crate::protocol::{Reply, PROTOCOL_VERSION};
use crate::vocab::{AskSpan, StopReason};

/// A stop under way or done, and what ends the action after it.
pub struct Ending {
    pub reason: StopReason,
    /// The watchdog signal behind the first trigger, if it was one.
    pub signal: Option<i32>,
    /// Seal as soon as the stop completes (nobody is left to close).
    pub finish: bool,
    pub close: Option<Closer>,
    /// `stop` requests answered when the stop completes.
    pub waiters: Vec<ReplyTo>,
}

pub enum Phase {
    /// Requests are served. `closing`: a close is being checked for leftovers.
    Running {
        closing: Option<Closer>,
    },
    Stopping {
        stop: Stopper,
        /// When the stop procedure wants its next step.
        wake: Instant,
        end: Ending,
    },
    Stopped {
        /// Kept for the pidfds it holds (the proof checks they all exited).
        stop: Stopper,
        done: StopCompleted,
        end: Ending,
        /// When the stop completed: `exec` waits at most [`FINAL_WAIT`]
        /// more for its job's leader to be reaped, then seals anyway.
        at: Instant,
    },
    Finished(Finished),
}

/// How long `exec` waits, after its stop completed, for its job's leader
/// to be reaped before it seals without it (recorded `unkillable`).
pub const FINAL_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// What moves the phase.
pub enum Input {
    Trigger(Trigger),
    Close(Closer),
    StopDone(StopCompleted),
}

/// What a sealing phase hands over.
pub struct Sealable {
    /// The stop procedure (for its held pidfds) and how it completed.
    pub stop: Option<(Stopper, StopCompleted)>,
    pub close: Option<Closer>,
    /// The signal behind a `signal` stop.
    pub signal: Option<i32>,
}

impl Sealable {
    /// The first stop trigger's reason; `None` for a plain close.
    pub fn reason(&self) -> Option<StopReason> {
        self.stop.as_ref().map(|(_, done)| done.reason)
    }
}

/// How a first trigger starts the stop procedure.
pub struct StopStart {
    pub priority: StopPriority,
    pub term_grace: Duration,
    pub kill_bound: Duration,
    pub ask: AskSpan,
}

impl StopStart {
    pub fn new(cfg: &Config, started: &Started) -> StopStart {
        StopStart {
            priority: started.priority.taken(),
            term_grace: cfg.term_grace,
            kill_bound: cfg.kill_bound,
            ask: cfg.ask,
        }
    }
}

/// The reply to a `stop` request once the stop completed.
pub fn stop_complete(to: &ReplyTo, reason: StopReason, quiescent: bool) -> Reply {
    Reply::StopComplete {
        v: PROTOCOL_VERSION,
        id: to.id.clone(),
        reason,
        quiescent,
    }
}

impl Phase {
    /// Running, nothing closing: the phase an action starts in.
    pub fn idle() -> Phase {
        Phase::Running { closing: None }
    }

    /// The transition table.
    /// `asks`: the running jobs' leaders, asked first when this input
    /// starts the stop (called only then).
    pub fn on(
        self,
        input: Input,
        ledger: &mut Ledger,
        fx: &mut Effects,
        how: &StopStart,
        asks: &dyn Fn() -> Vec<Ask>,
    ) -> Phase {
        match (self, input) {
            (Phase::Running { closing }, Input::Trigger(t)) => {
                ledger.append(t.record(Some(how.priority)));
                let now = Instant::now();
                let end = Ending {
                    reason: t.reason,
                    signal: t.signal,
                    finish: t.finish,
                    close: closing,
                    waiters: Vec::new(),
                };
                let stop = Stopper::new(
                    t.reason,
                    now,
                    how.term_grace,
                    how.kill_bound,
                    // timeout's long ask is for a time-out only: a stop
                    // the caller asked for (a signal, a hangup) or the log
                    // forced is never left waiting on the command.
                    if t.reason == StopReason::Deadline {
                        how.ask
                    } else {
                        AskSpan::HalfGrace
                    },
                    asks(),
                );
                Phase::Stopping {
                    stop,
                    wake: now,
                    end,
                }
            }
            (Phase::Running { closing: None }, Input::Close(c)) => {
                Phase::Running { closing: Some(c) }
            }
            (Phase::Stopping { stop, mut end, .. }, Input::StopDone(done)) => {
                ledger.record(Event::StopCompleted(done.clone()));
                for w in std::mem::take(&mut end.waiters) {
                    fx.reply(&w, stop_complete(&w, end.reason, done.proved()), true);
                }
                let at = Instant::now();
                Phase::Stopped {
                    stop,
                    done,
                    end,
                    at,
                }
            }
            (mut p, Input::Trigger(t)) => {
                if let Some(end) = p.ending_mut() {
                    ledger.append(t.record(None)); // a later trigger: a record, nothing else
                    end.finish |= t.finish;
                }
                p
            }
            (mut p, Input::Close(c)) => {
                if let Some(end) = p.ending_mut() {
                    end.close.get_or_insert(c);
                }
                p // a second close while closing, or finished
            }
            (p, Input::StopDone(_)) => p,
        }
    }

    /// A `stop` request was admitted (and triggered): answer it when the
    /// stop completes, or now if it already has.
    pub fn await_stop(&mut self, reply: ReplyTo, fx: &mut Effects) {
        match self {
            Phase::Stopping { end, .. } => end.waiters.push(reply),
            Phase::Stopped { done, end, .. } => {
                let answer = stop_complete(&reply, end.reason, done.proved());
                fx.reply(&reply, answer, true);
            }
            Phase::Running { .. } | Phase::Finished(_) => {}
        }
    }

    /// Takes what sealing needs out of a phase that may seal: a clean
    /// close being checked, or a completed stop. Any other phase is left
    /// as it is and `None` returned.
    pub fn take_for_sealing(&mut self) -> Option<Sealable> {
        let phase = std::mem::replace(self, Phase::Running { closing: None });
        match phase {
            Phase::Running { closing: Some(c) } => Some(Sealable {
                stop: None,
                close: Some(c),
                signal: None,
            }),
            Phase::Stopped {
                stop, done, end, ..
            } => Some(Sealable {
                signal: end
                    .signal
                    .filter(|_| matches!(end.reason, StopReason::Signal | StopReason::Hangup)),
                stop: Some((stop, done)),
                close: end.close,
            }),
            other => {
                *self = other;
                None
            }
        }
    }

    fn ending_mut(&mut self) -> Option<&mut Ending> {
        match self {
            Phase::Stopping { end, .. } | Phase::Stopped { end, .. } => Some(end),
            Phase::Running { .. } | Phase::Finished(_) => None,
        }
    }

    /// `Stopped`, and nobody is left to wait for: seal now. `exec_done`:
    /// exec's one job is gone (exec closes by itself).
    /// `exec`: the action is `exec`'s, which seals once its job is done
    /// (`jobs_empty`), or its final wait ran out by `now`.
    pub fn seals(&self, exec: bool, jobs_empty: bool, now: Instant) -> bool {
        let waited = self.final_wait(exec).is_some_and(|t| now >= t);
        match self {
            Phase::Stopped { end, .. } => {
                end.finish || end.close.is_some() || (exec && (jobs_empty || waited))
            }
            _ => false,
        }
    }

    /// `exec` only: the instant its final wait ends, once the stop has
    /// completed (a leader that cannot be ended or reaped: a tracee of an
    /// outside tracer, a process stuck in a file system that never
    /// answers). The watchdog never waits without bound for a reap.
    pub fn final_wait(&self, exec: bool) -> Option<Instant> {
        match self {
            Phase::Stopped { at, .. } if exec => Some(*at + FINAL_WAIT),
            _ => None,
        }
    }

    /// The stopper's held pidfds, while stopping or stopped (for the loop
    /// to reap through).
    pub fn held_mut(&mut self) -> Option<&mut super::stop::Held> {
        match self {
            Phase::Stopping { stop, .. } | Phase::Stopped { stop, .. } => Some(stop.held_mut()),
            Phase::Running { .. } | Phase::Finished(_) => None,
        }
    }

    /// A held pidfd polled readable: its process exited (true: a child
    /// may be waitable).
    pub fn exited(&mut self, pid: i32) -> bool {
        if let Some(held) = self.held_mut() {
            held.exited.insert(pid);
        }
        true
    }

    /// When the loop must wake up at the latest: the next job deadline
    /// while running, the next stop step while stopping, and `also` (a
    /// burst of refusals to record) in any phase.
    pub fn wake(
        &self,
        deadline: Option<Instant>,
        also: Option<Instant>,
        exec: bool,
    ) -> Option<Instant> {
        let own = match self {
            Phase::Running { .. } => deadline,
            Phase::Stopping { wake, stop, .. } => {
                stop.reap_due().map_or(Some(*wake), |r| Some(r.min(*wake)))
            }
            Phase::Stopped { .. } => self.final_wait(exec),
            Phase::Finished(_) => None,
        };
        own.into_iter().chain(also).min()
    }

    /// What admission may see of the phase.
    pub fn gate(&self) -> Gate {
        match self {
            Phase::Running { closing } => Gate {
                stopped_for: None,
                closing: closing.is_some(),
            },
            Phase::Stopping { end, .. } | Phase::Stopped { end, .. } => Gate {
                stopped_for: Some(end.reason),
                closing: end.close.is_some(),
            },
            Phase::Finished(f) => Gate {
                stopped_for: f.stop_reason,
                closing: true,
            },
        }
    }

    /// Why the action is stopping; `None` while running.
    pub fn stopped_for(&self) -> Option<StopReason> {
        self.gate().stopped_for
    }
}
