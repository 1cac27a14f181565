//! The watchdog's CPU priority.
//!
//! A watchdog competes for the CPU with the very processes it watches.
//! Against a fork storm of 2000 runnable processes an ordinary (nice 0)
//! watchdog gets about 1/2000 of a CPU: the SIGTERM or pidfd that should
//! start a stop then waits seconds in the run queue before the watchdog
//! even reads it, and every sweep after it waits again. So:
//!
//! - from start-up the watchdog runs at the lowest nice value it may take
//!   (-20 with `CAP_SYS_NICE`, else what `RLIMIT_NICE` allows), so that it
//!   wakes promptly however many processes compete; it sleeps in `poll`
//!   almost all the time, so this costs nobody anything;
//! - every job gets the watchdog's original nice value back before exec
//!   ([`Base::restore_in_child`]): the raise is never handed on;
//! - for the stop, and only for it, the watchdog asks for `SCHED_FIFO`
//!   priority 1 (with `SCHED_RESET_ON_FORK`), so that no process it is
//!   stopping can preempt it between two signals. It runs only for its
//!   sweeps and sleeps between them, and the kernel's RT throttling bounds
//!   it anyway. The policy it had is restored when the stop is done.
//!
//! Invariant: priority is an optimisation, never a condition of the proof.
//! Where raising is not allowed the watchdog runs as it was started, and
//! the `stop_triggered` record says which priority the stop ran at.

use crate::audit::record::StopPriority;

/// The nice value the watchdog was started with, and whether it raised it.
#[derive(Clone, Copy, Debug)]
pub struct Base {
    nice: libc::c_int,
    raised: bool,
}

impl Base {
    /// Takes the lowest nice value allowed. Call once, at start-up.
    pub fn raise() -> Base {
        let nice = current_nice();
        let raised = [-20, lowest_allowed_nice()]
            .into_iter()
            .any(|n| n < nice && set_nice(n));
        Base { nice, raised }
    }

    /// In a job, between fork and exec: back to the original nice value
    /// (raising a nice value is always allowed). Async-signal-safe.
    pub fn restore_in_child(&self) {
        if self.raised {
            set_nice(self.nice);
        }
    }
}

/// `SCHED_FIFO` for the duration of a stop.
pub struct Boost {
    taken: StopPriority,
    policy: libc::c_int,
    param: libc::sched_param,
}

impl Boost {
    pub fn take(base: &Base) -> Boost {
        // SAFETY: plain syscalls on the calling (single) thread with valid
        // pointers.
        let policy = unsafe { libc::sched_getscheduler(0) };
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as above; `param` is a valid out-pointer.
        unsafe { libc::sched_getparam(0, &mut param) };
        let fifo = libc::sched_param { sched_priority: 1 };
        let taken = if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
            StopPriority::Unchanged // started real-time: leave it as it was set
        } else if unsafe {
            // SAFETY: valid pointer; affects only the calling thread.
            libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &fifo)
        } == 0
        {
            StopPriority::Fifo
        } else if base.raised {
            StopPriority::Nice
        } else {
            StopPriority::Unchanged
        };
        Boost {
            taken,
            policy,
            param,
        }
    }

    pub fn taken(&self) -> StopPriority {
        self.taken
    }

    /// Returns to the policy the watchdog had before the stop (lowering a
    /// priority is always allowed; the nice value was kept meanwhile).
    pub fn restore(self) {
        if self.taken == StopPriority::Fifo {
            // SAFETY: valid pointer to the saved parameters.
            unsafe { libc::sched_setscheduler(0, self.policy, &self.param) };
        }
    }
}

fn current_nice() -> libc::c_int {
    // -1 is a valid nice value, and PRIO_PROCESS 0 (the calling thread)
    // cannot fail, so the result needs no errno check.
    // SAFETY: no pointers.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// The lowest nice value `RLIMIT_NICE` allows (20 - limit, at least -20).
fn lowest_allowed_nice() -> libc::c_int {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NICE) {
        Ok((soft, _)) => 20 - soft.min(40) as libc::c_int,
        Err(_) => 20,
    }
}

fn set_nice(n: libc::c_int) -> bool {
    // SAFETY: no pointers; affects only the calling thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) == 0 }
}
