//! One `statx` for the scan: device, inode, links and type of a name.
//!
//! `AT_STATX_DONT_SYNC` takes what the kernel has cached, so a stat through
//! `/proc/PID/fd/N` of a file on a network or FUSE filesystem whose server
//! is stuck does not hang the scan.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What the scan needs of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `makedev(major, minor)` as `st_dev` has it.
    pub dev: u64,
    pub ino: u64,
    pub nlink: u32,
    /// `S_IFMT` bits.
    pub kind: u32,
}

impl Stat {
    pub fn key(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    pub fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }
}

/// `statx(dirfd, name)`; `follow` follows a symlink (and a `/proc` magic
/// link) at the last component.
pub fn at(dirfd: BorrowedFd<'_>, name: &CStr, follow: bool) -> io::Result<Stat> {
    let mut flags = libc::AT_STATX_DONT_SYNC | libc::AT_NO_AUTOMOUNT;
    if !follow {
        flags |= libc::AT_SYMLINK_NOFOLLOW;
    }
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    let mask = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_NLINK;
    // SAFETY: statx is all zeroes-valid plain data; the kernel writes it.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: dirfd is a live descriptor, name a NUL-terminated string and
    // buf a writable statx for the call's duration.
    let rc = unsafe { libc::statx(dirfd.as_raw_fd(), name.as_ptr(), flags, mask, &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Stat {
        dev: libc::makedev(buf.stx_dev_major, buf.stx_dev_minor),
        ino: buf.stx_ino,
        nlink: buf.stx_nlink,
        kind: u32::from(buf.stx_mode) & libc::S_IFMT,
    })
}

/// `statx` of a path (relative to the working directory).
pub fn path(name: &CStr, follow: bool) -> io::Result<Stat> {
    at(nix::fcntl::AT_FDCWD, name, follow)
}
