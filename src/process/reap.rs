//! Reaping without stealing.
//!
//! `peek` asks `waitid(P_ALL, WNOWAIT)` which child is waitable without
//! consuming it. A tracked child is then reaped through its own pidfd
//! ([`VerifiedPidFd::try_reap`](super::pidfd::VerifiedPidFd::try_reap)); an
//! adopted orphan only through the [`Zombie`] the peek returned, which no
//! other code can make: there is no "reap this pid" in the API. `__WALL`
//! makes children with an unusual exit signal visible too, so ECHILD means
//! none.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::vocab::Status;

/// What `waitid(P_ALL, WNOWAIT)` said. Not `Clone`: a [`Zombie`] is reaped
/// at most once.
#[derive(Debug, PartialEq, Eq)]
pub enum Peek {
    /// ECHILD: the caller has no child at all, running or zombie.
    NoChildren,
    /// Children exist; none is waitable now.
    NothingWaitable,
    /// This child has exited and is not reaped yet.
    Waitable(Zombie),
}

impl Peek {
    /// No child of `me` is left that is the action's: ECHILD, or (a
    /// watchdog with inherited children) nothing waitable and every child
    /// left an inherited one (`process::inherited`).
    pub fn none_left(&self, me: i32) -> bool {
        match self {
            Peek::NoChildren => true,
            Peek::NothingWaitable => super::inherited::only_inherited_left(me),
            Peek::Waitable(_) => false,
        }
    }
}

/// A child that the `WNOWAIT` peek found waitable: exited, not reaped.
///
/// Only [`peek`] makes one (the field is private), and reaping consumes
/// it. Its pid is safe to wait on because only a parent can reap a child:
/// until this process reaps it, the zombie keeps its pid and the pid names
/// nothing else. That holds as long as nothing else in this process reaps
/// by `P_ALL`/`-1` or by this pid between the peek and [`Zombie::reap`]; the
/// watchdog reaps in one place, and drops its `std::process::Child` handles
/// without waiting on them.
#[derive(Debug, PartialEq, Eq)]
pub struct Zombie {
    pid: i32,
}

impl Zombie {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Reaps this child. `None` if it was not waitable after all (someone
    /// else reaped it first, or a tracer's stop was what the peek saw).
    pub fn reap(self) -> io::Result<Option<Status>> {
        Ok(waitid(libc::P_PID, self.pid as libc::id_t, 0)?.map(|(_, s)| s))
    }
}

fn waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    flags: libc::c_int,
) -> io::Result<Option<(i32, Status)>> {
    // SAFETY: siginfo_t is plain data; zeroed is its documented "nothing" value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `info` is a valid, writable siginfo_t.
        let r = unsafe {
            libc::waitid(
                idtype,
                id,
                &mut info,
                flags | libc::WEXITED | libc::WNOHANG | libc::__WALL,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // SAFETY: waitid filled `info` for a CLD_* event or left it zeroed.
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    let status = match info.si_code {
        libc::CLD_EXITED => Status::Code(status),
        _ => Status::Signal(status),
    };
    Ok(Some((pid, status)))
}

/// Which child, if any, could be reaped now (nothing is consumed).
pub fn peek() -> io::Result<Peek> {
    match waitid(libc::P_ALL, 0, libc::WNOWAIT) {
        Ok(Some((pid, _))) => Ok(Peek::Waitable(Zombie { pid })),
        Ok(None) => Ok(Peek::NothingWaitable),
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => Ok(Peek::NoChildren),
        Err(e) => Err(e),
    }
}

/// Reaps the child behind a pidfd (`P_PIDFD`): what
/// [`VerifiedPidFd::try_reap`](super::pidfd::VerifiedPidFd::try_reap) does.
pub(super) fn reap_pidfd(fd: BorrowedFd<'_>) -> io::Result<Option<Status>> {
    Ok(waitid(libc::P_PIDFD, fd.as_raw_fd() as libc::id_t, 0)?.map(|(_, s)| s))
}
