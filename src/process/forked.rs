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
    pid: i32,
    /// std's handle when it was spawned through a `Command` (its pipes).
    child: Option<Child>,
}

/// Which side of [`Forked::fork`] this is.
pub enum Fork {
    /// The parent, with its new child.
    Parent(Forked),
    /// The child (a copy of the caller, running on).
    Child,
}

impl Forked {
    /// Forks and execs `cmd` (std's `Command::spawn`: it returns once exec
    /// succeeded, or reaps the child and returns exec's error).
    pub fn spawn(cmd: &mut Command) -> io::Result<Forked> {
        let child = cmd.spawn()?;
        Ok(Forked {
            pid: child.id() as i32,
            child: Some(child),
        })
    }

    /// A plain `fork()` of this process. Only for a process that has one
    /// thread (the watchdog before it starts serving): the child is a copy
    /// that runs on from here.
    pub fn fork() -> io::Result<Fork> {
        // SAFETY: the caller is single-threaded (documented above), so the
        // child gets a consistent copy of every lock and allocation.
        match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
            nix::unistd::ForkResult::Child => Ok(Fork::Child),
            nix::unistd::ForkResult::Parent { child } => Ok(Fork::Parent(Forked {
                pid: child.as_raw(),
                child: None,
            })),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.as_mut()?.stderr.take()
    }
}
