//! Binding processes to pidfds, and the crate's one signal function.
//!
//! A [`VerifiedPidFd`] can only be made here, by a step that proves the fd
//! names the process the watchdog meant: either its own unreaped child
//! (whose pid cannot be reused until it is reaped), or a process whose
//! start time, uids and parent were read back *after* `pidfd_open` and
//! matched. Like systemd's `PidRef` (`src/basic/pidref.c`: `pidref_kill`,
//! `pidref_wait`), the identity carries its operations:
//! [`VerifiedPidFd::signal`] is the only code in the crate that sends a
//! signal, and [`VerifiedPidFd::try_reap`] reaps through the same fd, so no
//! signal or wait can reach a process by a guessed, remembered or reused pid.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;

use super::forked::Forked;
use super::identity::{is_gone, read_stat, read_uids, Stat, Uids};
use super::info::{self, Answer};
use super::lineage::Lineage;
use super::reap;
use crate::vocab::{Ident, Proc, Status, Uncertainty};

/// A pidfd proven to refer to `proc`. Only this module constructs one.
#[derive(Debug)]
pub struct VerifiedPidFd {
    fd: OwnedFd,
    proc: Proc,
    /// Its `/proc/PID/stat` state when it was bound (`T`: stopped).
    state: u8,
    /// Its session when it was bound.
    sid: i32,
}

impl VerifiedPidFd {
    pub fn proc(&self) -> &Proc {
        &self.proc
    }

    pub fn ident(&self) -> Ident {
        self.proc.ident()
    }

    pub fn pid(&self) -> i32 {
        self.proc.pid
    }

    /// Its `/proc/PID/stat` as the bind read it (no read now).
    pub fn stat(&self) -> Stat {
        Stat {
            pid: self.proc.pid,
            comm: self.proc.comm.clone(),
            state: self.state,
            ppid: self.proc.ppid,
            sid: self.sid,
            start_time: self.proc.start_time,
            threads: 1,
        }
    }

    /// It was stopped (`T`, or `t` by a tracer) when it was bound: a
    /// SIGTERM stays pending until it is continued.
    pub fn seen_stopped(&self) -> bool {
        matches!(self.state, b'T' | b't')
    }

    /// True once the process has exited (the pidfd polls readable).
    pub fn has_exited(&self) -> bool {
        pidfd_exited(&self.fd)
    }

    /// The crate's only way to send a signal (`pidfd_send_signal`; the
    /// clippy.toml ban on every other one points here). ESRCH (already
    /// exited) is Ok: the pidfd still names the process it was bound to,
    /// never a successor.
    pub fn signal(&self, sig: Signal) -> io::Result<()> {
        self.signal_number(sig as libc::c_int)
    }

    /// [`VerifiedPidFd::signal`] by number, for the signals nix has no
    /// name for (the real-time ones exec forwards). The one place in the
    /// crate that calls `pidfd_send_signal`.
    pub fn signal_number(&self, sig: libc::c_int) -> io::Result<()> {
        // SAFETY: pidfd_send_signal(pidfd, sig, info = NULL, flags = 0) on
        // an fd this value owns; the kernel reads no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0u32,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ESRCH) {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Reaps the process through this pidfd (`waitid(P_PIDFD)`, never by
    /// pid). `None` while it still runs (or when a tracer made the fd
    /// readable with nothing to reap: try again later). Only this process's
    /// own children can be reaped: for any other it is ECHILD.
    pub fn try_reap(&self) -> io::Result<Option<Status>> {
        reap::reap_pidfd(self.fd.as_fd())
    }
}

impl AsFd for VerifiedPidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether this kernel has `PIDFD_GET_INFO`: asked once, about this
/// process, then remembered.
pub fn info_supported() -> bool {
    static ASKED: std::sync::Once = std::sync::Once::new();
    ASKED.call_once(|| {
        if let Ok(fd) = pidfd_open(std::process::id() as i32) {
            let _ = info::get(fd.as_fd());
        }
    });
    !info::known_unsupported()
}

/// Why a process could not be bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindError {
    /// The process no longer exists: nothing to signal, nothing uncertain.
    Gone,
    /// No descriptor to spare (EMFILE, ENFILE, ENOMEM) for the pidfd or the
    /// read-back: nothing was learnt about the process; bind it again later
    /// (docs/stop.md, "Descriptors"). Not an uncertain mapping by itself.
    NoDescriptors(String),
    /// It may be alive, but the fd cannot be proven to name it.
    Uncertain { reason: Uncertainty, detail: String },
}

/// An error that says "out of descriptors or memory", not "no such process".
/// True once the process a pidfd pins has exited: the pidfd polls
/// readable (or hung up). Never blocks.
pub(crate) fn pidfd_exited(fd: &impl AsFd) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(1))
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP))
}

pub fn short_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

/// `pidfd_open` as a bind sees it.
fn open_for_bind(pid: i32) -> Result<OwnedFd, BindError> {
    match pidfd_open(pid) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(BindError::Gone),
        Err(e) if short_of_descriptors(&e) => {
            Err(BindError::NoDescriptors(format!("pidfd_open({pid}): {e}")))
        }
        Err(e) => Err(uncertain(
            Uncertainty::PidfdFailed,
            format!("pidfd_open({pid}): {e}"),
        )),
    }
}

fn uncertain(reason: Uncertainty, detail: impl Into<String>) -> BindError {
    BindError::Uncertain {
        reason,
        detail: detail.into(),
    }
}

/// `pidfd_open(pid, 0)`: a new fd pinning whatever process `pid` names now
/// (nothing is proven about which one; see [`bind_ident`] and
/// [`super::alive::probe`] for the read-back).
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    // pidfds are always close-on-exec.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// What a bind read back about the process an open pidfd pins.
struct Back {
    st: Stat,
    /// The uids, as read (see [`uniform`]).
    uids: Uids,
    /// Its cgroup v2 group id, where `PIDFD_GET_INFO` said.
    cgroup: Option<u64>,
}

/// Re-reads `/proc/PID/stat` for an open pidfd, then asks the kernel about
/// the pinned process itself (`PIDFD_GET_INFO`: its uids and cgroup, no
/// `/proc` read; `/proc/PID/status` where the kernel lacks it). `Gone` if
/// the process is no longer there. The order matters: the call through
/// the fd answers only while the pinned process is unreaped, so the `stat`
/// read before it was that process's (a pid is reused only after a reap).
fn read_back(fd: BorrowedFd<'_>, pid: i32) -> Result<Back, BindError> {
    let st = match read_stat(pid) {
        Ok(st) => st,
        Err(e) if is_gone(&e) => return Err(BindError::Gone),
        Err(e) if short_of_descriptors(&e) => {
            return Err(BindError::NoDescriptors(format!("/proc/{pid}/stat: {e}")))
        }
        Err(e) => {
            return Err(uncertain(
                Uncertainty::Unreadable,
                format!("/proc/{pid}/stat: {e}"),
            ))
        }
    };
    let (uids, cgroup) = match info::get(fd) {
        Ok(Answer::Info(i)) => (i.uids, i.cgroup),
        Ok(Answer::Gone) => return Err(BindError::Gone),
        Ok(Answer::Unsupported) => (status_uids(pid)?, None),
        Err(e) if short_of_descriptors(&e) => {
            return Err(BindError::NoDescriptors(format!(
                "PIDFD_GET_INFO({pid}): {e}"
            )))
        }
        Err(e) => {
            return Err(uncertain(
                Uncertainty::PidfdFailed,
                format!("PIDFD_GET_INFO({pid}): {e}"),
            ))
        }
    };
    Ok(Back { st, uids, cgroup })
}

/// The uid when all four agree; a process that changed only some is not
/// the plain process of one user the watchdog started.
fn uniform(uids: Uids) -> Result<u32, BindError> {
    uids.uniform().ok_or_else(|| {
        uncertain(
            Uncertainty::UidMismatch,
            format!(
                "uids differ (real {}, effective {}, saved {}, fs {})",
                uids.real, uids.effective, uids.saved, uids.fs
            ),
        )
    })
}

/// The process's uid is the watchdog's: else an uncertain mapping.
fn owned_by(uid: u32, expect_uid: u32) -> Result<(), BindError> {
    if uid == expect_uid {
        return Ok(());
    }
    Err(uncertain(
        Uncertainty::UidMismatch,
        format!("uid {uid}, the watchdog's is {expect_uid}"),
    ))
}

/// The uids from `/proc/PID/status` (kernels without `PIDFD_GET_INFO`).
fn status_uids(pid: i32) -> Result<Uids, BindError> {
    match read_uids(pid) {
        Ok(u) => Ok(u),
        Err(e) if is_gone(&e) => Err(BindError::Gone),
        Err(e) if short_of_descriptors(&e) => {
            Err(BindError::NoDescriptors(format!("/proc/{pid}/status: {e}")))
        }
        Err(e) => Err(uncertain(
            Uncertainty::Unreadable,
            format!("/proc/{pid}/status: {e}"),
        )),
    }
}

/// Binds a process found by a scan: `pidfd_open`, then read back start time,
/// uids and parent and compare them with the scan. `parent_ok` says whether a
/// (possibly new) parent pid is the watchdog or a member of the same closure.
pub fn bind(
    scanned: &Stat,
    expect_uid: u32,
    parent_ok: impl Fn(i32) -> bool,
) -> Result<VerifiedPidFd, BindError> {
    let pid = scanned.pid;
    let fd = open_for_bind(pid)?;
    let Back { st, uids, .. } = read_back(fd.as_fd(), pid)?;
    let uid = uniform(uids)?;
    if st.start_time != scanned.start_time {
        return Err(uncertain(
            Uncertainty::StartTimeChanged,
            format!(
                "pid {pid} started at {} but the scan saw {}",
                st.start_time, scanned.start_time
            ),
        ));
    }
    owned_by(uid, expect_uid)?;
    if st.ppid != scanned.ppid && !parent_ok(st.ppid) {
        return Err(uncertain(
            Uncertainty::ParentChanged,
            format!("parent is now {}, was {}", st.ppid, scanned.ppid),
        ));
    }
    Ok(VerifiedPidFd {
        fd,
        state: st.state,
        sid: st.sid,
        proc: st.to_proc(uid),
    })
}

/// Binds a process a scan found as *this process's own child*, with no
/// `/proc` read-back: an unreaped child keeps its pid (only its parent
/// reaps it), so the pid the scan read still names it, and the new pidfd
/// pins it. The uids are asked through the pidfd (`PIDFD_GET_INFO`).
///
/// Precondition, the caller's: this process reaped nothing between the
/// scan and this call (the stop procedure reaps only between its steps).
/// Where the kernel lacks `PIDFD_GET_INFO`, or says the pinned process is
/// not this process's child, it is [`bind`] after all.
pub fn bind_scanned_child(
    scanned: &Stat,
    expect_uid: u32,
    parent_ok: impl Fn(i32) -> bool,
) -> Result<VerifiedPidFd, BindError> {
    let me = std::process::id() as i32;
    if scanned.ppid != me {
        return bind(scanned, expect_uid, parent_ok);
    }
    let fd = open_for_bind(scanned.pid)?;
    let uids = match info::get(fd.as_fd()) {
        Ok(Answer::Info(i)) if i.ppid == me => i.uids,
        Ok(Answer::Gone) => return Err(BindError::Gone),
        _ => return bind(scanned, expect_uid, parent_ok),
    };
    let uid = uniform(uids)?;
    owned_by(uid, expect_uid)?;
    Ok(VerifiedPidFd {
        fd,
        state: scanned.state,
        sid: scanned.sid,
        proc: scanned.to_proc(uid),
    })
}

/// Binds a process named by a claimed identity (the root controller, a
/// request's caller): the start time and uid read back must match.
pub fn bind_ident(ident: Ident) -> Result<VerifiedPidFd, BindError> {
    let fd = open_for_bind(ident.pid)?;
    let Back { st, uids, .. } = read_back(fd.as_fd(), ident.pid)?;
    let uid = uniform(uids)?;
    if st.is_zombie() {
        return Err(BindError::Gone);
    }
    if st.start_time != ident.start_time {
        return Err(uncertain(
            Uncertainty::StartTimeChanged,
            format!(
                "pid {} started at {}, not {}",
                ident.pid, st.start_time, ident.start_time
            ),
        ));
    }
    if uid != ident.uid {
        return Err(uncertain(
            Uncertainty::UidMismatch,
            format!("uid is {uid}, not {}", ident.uid),
        ));
    }
    Ok(VerifiedPidFd {
        fd,
        state: st.state,
        sid: st.sid,
        proc: st.to_proc(uid),
    })
}

/// cgroup mode: binds a pid read from the action's group's `cgroup.procs`.
/// The kernel, asked through the new pidfd, says the pinned process is in
/// the group with id `group` (the recorded inode); membership only narrows
/// the search, so `owned` then proves it the action's by lineage
/// ([`super::lineage`], given the `stat` read for this pidfd) before the
/// uid is compared: a stranger moved into the group is `Foreign`, whatever
/// its uid. `NotMember` when it is in another group (it left, or the pid
/// now names a process that was never the action's); `Unsupported` when
/// the kernel cannot say (no `PIDFD_GET_INFO`): bind it from a scan then.
pub fn bind_member(
    pid: i32,
    group: u64,
    expect_uid: u32,
    owned: impl FnOnce(&Stat) -> Lineage,
) -> Result<VerifiedPidFd, MemberError> {
    let fd = open_for_bind(pid).map_err(MemberError::Bind)?;
    let Back { st, uids, cgroup } = read_back(fd.as_fd(), pid).map_err(MemberError::Bind)?;
    match cgroup {
        None => return Err(MemberError::Unsupported),
        Some(c) if c != group => return Err(MemberError::NotMember),
        Some(_) => {}
    }
    match owned(&st) {
        Lineage::Proven => {}
        Lineage::Gone => return Err(MemberError::Bind(BindError::Gone)),
        Lineage::Foreign(why) => {
            let process = st.to_proc(uids.real);
            return Err(MemberError::Foreign { process, why });
        }
    }
    let uid = uniform(uids).map_err(MemberError::Bind)?;
    owned_by(uid, expect_uid).map_err(MemberError::Bind)?;
    Ok(VerifiedPidFd {
        fd,
        state: st.state,
        sid: st.sid,
        proc: st.to_proc(uid),
    })
}

/// Why [`bind_member`] bound nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberError {
    Bind(BindError),
    /// The pinned process is not in the action's group.
    NotMember,
    /// The kernel cannot say which group the process is in.
    Unsupported,
    /// In the group, but not the action's: never signalled.
    Foreign {
        process: Proc,
        why: String,
    },
}

/// Binds a child the watchdog just forked ([`Forked::spawn`]), consuming
/// it: nothing could have waited on it, and until it is reaped its pid
/// cannot name another process, so no read-back is needed to trust the fd
/// (`/proc` is still read for the record).
pub fn bind_child(child: Forked) -> io::Result<VerifiedPidFd> {
    bind_own_child(child.pid())
}

/// Binds a `std::process::Child` its caller still holds (the tests and the
/// bench start processes with std's `Command` and wait on them later).
///
/// Weaker than [`bind_child`], hence the separate name: the type cannot
/// show that `child` was never waited on. The caller must not have called
/// `wait`/`try_wait`/`wait_with_output` on it with success; a reaped pid may
/// since name another process. The parent check below catches a successor
/// that is not this process's child, not one that is.
pub fn bind_unwaited_child(child: &std::process::Child) -> io::Result<VerifiedPidFd> {
    bind_own_child(child.id() as i32)
}

fn bind_own_child(pid: i32) -> io::Result<VerifiedPidFd> {
    let fd = pidfd_open(pid)?;
    let st = read_stat(pid)?;
    if st.ppid != nix::unistd::getpid().as_raw() {
        return Err(io::Error::other(format!(
            "pid {pid} is not this process's child"
        )));
    }
    // The uid is never unknown here: an unreaped child's `/proc/PID/status`
    // is readable (a zombie's too) for as long as its `stat` is, so a
    // failure is an error like a failed `stat`, not a placeholder uid.
    let uid = read_uids(pid)?.real;
    Ok(VerifiedPidFd {
        fd,
        state: st.state,
        sid: st.sid,
        proc: st.to_proc(uid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn forked_child_is_bound_signalled_and_reaped_through_its_pidfd() {
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("30").stdin(Stdio::null());
        let child = Forked::spawn(&mut cmd).unwrap();
        let pid = child.pid();
        let fd = bind_child(child).unwrap();
        assert_eq!(fd.pid(), pid);
        assert_eq!(fd.proc().uid, nix::unistd::getuid().as_raw());
        assert_eq!(fd.try_reap().unwrap(), None, "still running");
        fd.signal(Signal::SIGKILL).unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !fd.has_exited() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(fd.try_reap().unwrap(), Some(Status::Signal(libc::SIGKILL)));
        // Reaped: signalling the same identity again reaches nothing.
        fd.signal(Signal::SIGKILL).unwrap();
    }

    fn at_least_6_13() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|x| x.parse::<u32>().unwrap_or(0));
        (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 13)
    }

    #[test]
    fn pidfd_get_info_describes_this_process() {
        let fd = pidfd_open(std::process::id() as i32).unwrap();
        let me = read_uids(std::process::id() as i32).unwrap();
        match info::get(fd.as_fd()).unwrap() {
            Answer::Info(i) => {
                assert_eq!(i.pid, std::process::id() as i32);
                assert_eq!(i.ppid, nix::unistd::getppid().as_raw());
                assert_eq!(i.uids, me);
            }
            // Only a kernel older than 6.13 may lack it (the fallback is
            // what runs there); on a newer one the binding is broken.
            Answer::Unsupported => assert!(
                !at_least_6_13(),
                "PIDFD_GET_INFO refused on a kernel that has it"
            ),
            Answer::Gone => panic!("this process is not gone"),
        }
    }
}
