//! `PIDFD_GET_INFO` (Linux 6.13+): what the kernel says about the process
//! a pidfd pins, with no `/proc` read (FIELD-NOTES "PIDFD_GET_INFO").
//!
//! It answers for the pinned process itself, never for a pid: once that
//! process is reaped the answer is ESRCH, so a read of `/proc/PID/...`
//! made *before* a successful call was a read of the pinned process (a
//! pid is reused only after its process is reaped). The bind uses that
//! order: `pidfd_open`, then `/proc/PID/stat`, then this.
//!
//! Where the kernel lacks it (ENOTTY, EINVAL) [`get`] says `Unsupported`
//! once and never asks again; callers fall back to `/proc/PID/status`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::identity::Uids;

/// `struct pidfd_info`, version 0 (64 bytes), as in `linux/pidfd.h`.
#[repr(C)]
#[derive(Default)]
struct RawInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

const INFO_PID: u64 = 1 << 0;
const INFO_CREDS: u64 = 1 << 1;
const INFO_CGROUPID: u64 = 1 << 2;

/// `_IOWR(0xFF, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: u64 =
    (3 << 30) | ((std::mem::size_of::<RawInfo>() as u64) << 16) | (0xFF << 8) | 11;

/// Set once the kernel said it has no `PIDFD_GET_INFO`.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Whether the kernel has said it lacks `PIDFD_GET_INFO` (see
/// [`crate::process::pidfd::info_supported`], which asks it once).
pub fn known_unsupported() -> bool {
    UNSUPPORTED.load(Ordering::Relaxed)
}

/// What the kernel said about a pinned process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// Its pid in this process's PID namespace.
    pub pid: i32,
    /// Its parent's pid (0 when the parent is outside this namespace).
    pub ppid: i32,
    /// Real, effective, saved and filesystem uids.
    pub uids: Uids,
    /// Its cgroup v2 group's id (= the group directory's inode); `None`
    /// when the kernel did not say (no cgroup v2).
    pub cgroup: Option<u64>,
}

/// What [`get`] found.
#[derive(Debug)]
pub enum Answer {
    Info(Info),
    /// The pinned process is gone (reaped): ESRCH.
    Gone,
    /// This kernel has no `PIDFD_GET_INFO`.
    Unsupported,
}

/// Asks the kernel about the process `fd` pins.
pub fn get(fd: BorrowedFd<'_>) -> io::Result<Answer> {
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(Answer::Unsupported);
    }
    let mut raw = RawInfo {
        mask: INFO_PID | INFO_CREDS | INFO_CGROUPID,
        ..RawInfo::default()
    };
    // SAFETY: PIDFD_GET_INFO reads the request mask from, and writes at
    // most size_of::<RawInfo>() bytes (the size encoded in the request
    // number) into, a valid, writable struct that outlives the call.
    let r = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            &mut raw as *mut RawInfo,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Ok(Answer::Gone),
            Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP) => {
                UNSUPPORTED.store(true, Ordering::Relaxed);
                Ok(Answer::Unsupported)
            }
            _ => Err(e),
        };
    }
    if raw.mask & (INFO_PID | INFO_CREDS) != (INFO_PID | INFO_CREDS) {
        UNSUPPORTED.store(true, Ordering::Relaxed);
        return Ok(Answer::Unsupported);
    }
    Ok(Answer::Info(Info {
        pid: raw.pid as i32,
        ppid: raw.ppid as i32,
        uids: Uids {
            real: raw.ruid,
            effective: raw.euid,
            saved: raw.suid,
            fs: raw.fsuid,
        },
        cgroup: (raw.mask & INFO_CGROUPID != 0).then_some(raw.cgroupid),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_struct_is_version_0() {
        assert_eq!(std::mem::size_of::<RawInfo>(), 64);
        assert_eq!(PIDFD_GET_INFO, 0xC040_FF0B);
    }
}
