//! What a stop trigger is (docs/stop.md): a value rooms return as an effect,
//! and the `stop_triggered` record it makes. The loop records every
//! trigger; the first starts the stop procedure (`stop.rs`).

use nix::sys::signal::Signal;

use crate::kinds::watchdog::{Event, Proc, StopPriority, StopReason, StopTriggered};
use crate::vocab::bounded;

/// Processes one `stop_triggered` record names at most. An entry is ~80
/// bytes of JSON (up to ~170 with a name of escaped control characters):
/// 4096 keep the record well under the audit line cap (1 MiB), where a
/// job that left 8 000 processes behind made a trigger record the log
/// refused, and the stop ended in `audit_failure`.
pub const NAMED_MAX: usize = 4096;

/// A reason to stop the action (docs/stop.md), with what the record says.
#[derive(Clone, Debug)]
pub struct Trigger {
    pub reason: StopReason,
    pub detail: String,
    /// The job behind it (deadline, caller lost, excess output).
    pub job: Option<u64>,
    /// The processes behind it (abandoned or unprovable ones), the first
    /// [`NAMED_MAX`] of them; `more` counts the rest.
    pub processes: Vec<Proc>,
    pub more: u64,
    /// The watchdog signal behind a `signal` trigger.
    pub signal: Option<i32>,
    /// The action finishes as soon as the stop completes, without waiting
    /// for a close: nobody is left to ask (signal, root lost, audit failure).
    pub finish: bool,
}

impl Trigger {
    /// A trigger that waits for the controller's close after the stop.
    pub fn new(reason: StopReason, detail: impl Into<String>) -> Trigger {
        Trigger {
            reason,
            detail: detail.into(),
            job: None,
            processes: Vec::new(),
            more: 0,
            signal: None,
            finish: false,
        }
    }

    /// SIGTERM, SIGINT, SIGQUIT or SIGHUP to the watchdog: stop, then seal.
    /// SIGHUP is a `hangup` (an SSH or terminal hangup: the controller's
    /// channel is gone, which proves nothing about the controller), the
    /// others a `signal`.
    pub fn signal(sig: i32) -> Trigger {
        let name = Signal::try_from(sig)
            .map(|s| s.as_str())
            .unwrap_or("signal");
        let reason = match sig {
            libc::SIGHUP => StopReason::Hangup,
            _ => StopReason::Signal,
        };
        Trigger {
            signal: Some(sig),
            ..Trigger::new(reason, format!("{name} received")).finishing()
        }
    }

    /// The root controller's pidfd became readable: it exited.
    pub fn root_lost(root: &Proc) -> Trigger {
        let detail = format!("root controller pid {} ({}) exited", root.pid, root.comm);
        Trigger::new(StopReason::RootLost, detail).finishing()
    }

    /// A record could not be made durable (or the loop cannot wait any
    /// more): stop everything, then seal and exit non-zero.
    pub fn audit_failure(detail: impl Into<String>) -> Trigger {
        Trigger::new(StopReason::AuditFailure, detail).finishing()
    }

    /// A close came while `running` jobs still ran.
    pub fn close_while_running(running: usize) -> Trigger {
        let detail = format!("close requested while {running} job(s) ran");
        Trigger::new(StopReason::CloseWhileRunning, detail)
    }

    pub fn job(self, job: u64) -> Trigger {
        Trigger {
            job: Some(job),
            ..self
        }
    }

    /// The processes behind it; the record names the first
    /// [`NAMED_MAX`] and counts the rest (the stop signals every
    /// one regardless: it finds them itself).
    pub fn processes(self, mut processes: Vec<Proc>) -> Trigger {
        let more = processes.len().saturating_sub(NAMED_MAX) as u64;
        processes.truncate(NAMED_MAX);
        Trigger {
            processes,
            more,
            ..self
        }
    }

    /// The action ends when the stop completes (see [`Trigger::finish`]).
    pub fn finishing(self) -> Trigger {
        Trigger {
            finish: true,
            ..self
        }
    }

    /// The `stop_triggered` record. Appended, not synced: the first sweep's
    /// sync makes it durable before any signal goes out (one fdatasync on
    /// the way to the first TERM). `priority` is given for the first only.
    pub fn record(&self, priority: Option<StopPriority>) -> Event {
        Event::StopTriggered(StopTriggered {
            reason: self.reason,
            first: priority.is_some(),
            detail: bounded(&self.detail),
            job: self.job,
            processes: self.processes.clone(),
            more_processes: (self.more > 0).then_some(self.more),
            priority,
        })
    }
}
