//! Reaping without stealing.
//!
//! `peek` asks `waitid(P_ALL, WNOWAIT)` which child is waitable without
//! consuming it; a tracked child is then reaped through its own pidfd and
//! an adopted orphan by the pid the peek just returned (it is a zombie we
//! have not reaped, so the pid cannot have been reused). `__WALL` makes
//! children with an unusual exit signal visible too, so ECHILD means none.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::vocab::Status;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// ECHILD: the caller has no child at all, running or zombie.
    NoChildren,
    /// Children exist; none is waitable now.
    NothingWaitable,
    Waitable(i32),
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
        Ok(Some((pid, _))) => Ok(Peek::Waitable(pid)),
        Ok(None) => Ok(Peek::NothingWaitable),
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => Ok(Peek::NoChildren),
        Err(e) => Err(e),
    }
}

/// Reaps a child that `peek` returned. `None` if it was not waitable.
pub fn reap_pid(pid: i32) -> io::Result<Option<Status>> {
    Ok(waitid(libc::P_PID, pid as libc::id_t, 0)?.map(|(_, s)| s))
}

/// Reaps the child behind a pidfd. `None` while it still runs (or when a
/// tracer made the fd readable with nothing to reap: try again later).
pub fn reap_pidfd(fd: &impl AsFd) -> io::Result<Option<Status>> {
    Ok(waitid(libc::P_PIDFD, fd.as_fd().as_raw_fd() as libc::id_t, 0)?.map(|(_, s)| s))
}
