//! A child this process has just forked and not waited for.
//!
//! [`Forked::spawn`] is the only way to make one, and it keeps the
//! `std::process::Child` to itself: nothing can `wait()` on it, so its pid
//! cannot be reaped (and reused) before
//! [`bind_child`](super::pidfd::bind_child) turns it into a pidfd.

use std::io;
use std::process::{Child, ChildStderr, ChildStdout, Command};

/// A just-forked, unreaped child of this process.
///
/// Dropping one without binding it leaves the child running (std's `Child`
/// neither waits nor kills on drop); the watchdog's `P_ALL` reaper collects
/// it as an orphan when it exits.
#[derive(Debug)]
pub struct Forked {
    child: Child,
}

impl Forked {
    /// Forks and execs `cmd` (std's `Command::spawn`: it returns once exec
    /// succeeded, or reaps the child and returns exec's error).
    pub fn spawn(cmd: &mut Command) -> io::Result<Forked> {
        Ok(Forked {
            child: cmd.spawn()?,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }
}
