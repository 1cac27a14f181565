//! The watchdog's CPU priority.
//!
//! A watchdog competes for the CPU with the very processes it watches.
//! Against a fork storm of 2000 processes an ordinary watchdog, even at
//! nice -20, waited seconds in the run queue before it could read the
//! SIGTERM or pidfd event that should start a stop, and again before every
//! sweep (BENCHMARKS.md, section 3 and its notes). So, like the Linux
//! `watchdog` daemon (`realtime = yes`, `priority = 1`), rea-watchdog runs
//! at `SCHED_FIFO` priority 1 from start-up: a wake-up preempts any
//! ordinary process at once. It sleeps in `poll` almost all the time and
//! does bounded work per wake-up, and the kernel's RT throttling bounds it
//! anyway.
//!
//! The policy is taken with `SCHED_RESET_ON_FORK`, and every job gets the
//! watchdog's original nice value back before exec
//! ([`Base::restore_in_child`]): the raise is never handed on.
//!
//! Where `SCHED_FIFO` is refused (no `CAP_SYS_NICE` or `RLIMIT_RTPRIO`)
//! the watchdog takes the lowest nice value it may (-20 with
//! `CAP_SYS_NICE`, else what `RLIMIT_NICE` allows), and otherwise runs as
//! it was started. Priority is an optimisation, never a
//! condition of the proof; every `stop_triggered` record says which
//! priority the stop ran at.

use crate::kinds::watchdog::StopPriority;

/// What the watchdog was started with, and what it took.
#[derive(Clone, Copy, Debug)]
pub struct Base {
    nice: libc::c_int,
    taken: StopPriority,
}

impl Base {
    /// Raises the calling (single) thread's priority as far as allowed.
    /// Call once, at start-up, before anything is spawned.
    pub fn raise() -> Base {
        let nice = current_nice();
        // SAFETY: plain syscall on the calling thread.
        let policy = unsafe { libc::sched_getscheduler(0) };
        let taken = if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
            StopPriority::Unchanged // started real-time: leave it as it was set
        } else if take_fifo() {
            StopPriority::Fifo
        } else if [-20, lowest_allowed_nice()]
            .into_iter()
            .any(|n| n < nice && set_nice(n))
        {
            // -20 with CAP_SYS_NICE (where only RT is refused), else what
            // RLIMIT_NICE allows.
            StopPriority::Nice
        } else {
            StopPriority::Unchanged
        };
        Base { nice, taken }
    }

    pub fn taken(&self) -> StopPriority {
        self.taken
    }

    /// In a job, between fork and exec: back to the original nice value.
    /// After `SCHED_FIFO` with reset-on-fork the child starts at
    /// `SCHED_OTHER` nice 0; after a nice raise it starts at the raised
    /// value. Async-signal-safe.
    pub fn restore_in_child(&self) {
        match self.taken {
            StopPriority::Fifo if self.nice != 0 => {
                set_nice(self.nice);
            }
            StopPriority::Nice => {
                set_nice(self.nice); // raising a nice value is always allowed
            }
            _ => {}
        }
    }
}

fn take_fifo() -> bool {
    let fifo = libc::sched_param { sched_priority: 1 };
    // SAFETY: valid pointer; affects only the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &fifo) == 0 }
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
