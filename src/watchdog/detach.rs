//! Leaving the controller's session when `setsid` is refused (docs/architecture.md).
//!
//! `setsid()` fails with EPERM for a process-group leader, which is what a
//! shell makes of a foreground job (`rea-watchdog run ...` typed at a
//! prompt, or a controller that starts it with its own process group).
//! Staying in the controller's session would let an SSH or terminal hangup
//! (SIGHUP to the session) or a group kill reach the watchdog. So the
//! watchdog forks: the child, no longer a group leader, can `setsid()` and
//! carries on as the watchdog, keeping the root already bound (the pidfd is
//! inherited); the parent stays behind as a shim in the caller's group.
//!
//! The shim passes SIGTERM, SIGINT and SIGQUIT on to the watchdog (through
//! the verified pidfd of its own unreaped child), exits with the watchdog's
//! status when it ends, and dies of a SIGHUP like any job of a hung-up
//! terminal: the watchdog it leaves behind is not reached.

use std::io;

use nix::sys::signal::{SigSet, Signal};

use crate::process::forked::{Fork, Forked};
use crate::process::pidfd::bind_child;

/// The signals the shim passes on.
const PASSED: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGQUIT];

/// Forks; returns in the child only (which then calls `setsid`). The parent
/// becomes the shim and never returns.
pub fn detach() -> io::Result<()> {
    let mut mask = SigSet::empty();
    for s in PASSED {
        mask.add(s);
    }
    mask.add(Signal::SIGCHLD);
    // Blocked before the fork so that none is lost between fork and wait.
    // The child, the watchdog, keeps what it blocked (`main` blocked the
    // whole watched set: `prepare` reads them all from its signalfd). The
    // shim blocks exactly these, so that any other signal (a hangup of the
    // caller's group) has its default action on the shim alone.
    mask.thread_block().map_err(io::Error::from)?;
    match Forked::fork()? {
        Fork::Child => Ok(()),
        Fork::Parent(child) => {
            let _ = mask.thread_set_mask();
            shim(child, &mask)
        }
    }
}

/// The parent's whole remaining life.
fn shim(child: Forked, mask: &SigSet) -> ! {
    let watchdog = match bind_child(child) {
        Ok(fd) => fd,
        Err(e) => {
            crate::tell::note(format_args!("cannot hold the detached watchdog: {e}"));
            std::process::exit(125);
        }
    };
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Ok(Some(status)) = watchdog.try_reap() {
                    std::process::exit(status.shell_code());
                }
            }
            Ok(sig) => {
                let _ = watchdog.signal(sig);
            }
            Err(_) => continue,
        }
    }
}
