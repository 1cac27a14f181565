//! What a stop trigger is (SPEC 3.5): a value rooms return as an effect,
//! and the `stop_triggered` record it makes. The loop records every
//! trigger; the first starts the stop procedure (`stop.rs`).

use nix::sys::signal::Signal;

use crate::audit::record::{Event, Proc, StopPriority, StopReason, StopTriggered};
use crate::vocab::bounded;

/// A reason to stop the action (SPEC 3.5), with what the record says.
#[derive(Clone, Debug)]
pub struct Trigger {
    pub reason: StopReason,
    pub detail: String,
    /// The job behind it (deadline, caller lost, excess output).
    pub job: Option<u64>,
    /// The processes behind it (abandoned or unprovable ones).
    pub processes: Vec<Proc>,
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

    pub fn processes(self, processes: Vec<Proc>) -> Trigger {
        Trigger { processes, ..self }
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
            priority,
        })
    }
}
