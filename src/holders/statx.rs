//! One `statx` for the scan: device, inode, links and type of a name.
//!
//! `AT_STATX_DONT_SYNC` takes what the kernel has cached, so a stat through
//! `/proc/PID/fd/N` of a file on a network or FUSE filesystem whose server
//! is stuck does not hang the scan.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

/// What the scan needs of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `makedev(major, minor)` as `st_dev` has it.
    pub dev: u64,
    pub ino: u64,
    pub nlink: u32,
    /// `S_IFMT` bits.
    pub kind: u32,
    /// The root of a mount (`STATX_ATTR_MOUNT_ROOT`): a mount point as the
    /// walk meets it, whatever its filesystem.
    pub mount_root: bool,
    /// The mount it is on (`STATX_MNT_ID`, Linux 5.8+; 0 where unknown):
    /// `mountinfo`'s first field.
    pub mnt_id: u64,
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
    let mask = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_NLINK | libc::STATX_MNT_ID;
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
        mount_root: buf.stx_attributes_mask & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0
            && buf.stx_attributes & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0,
        mnt_id: if buf.stx_mask & libc::STATX_MNT_ID != 0 {
            buf.stx_mnt_id
        } else {
            0
        },
    })
}

/// `statx` of a path (relative to the working directory).
pub fn path(name: &CStr, follow: bool) -> io::Result<Stat> {
    at(nix::fcntl::AT_FDCWD, name, follow)
}

/// `statx` of `path` resolved with no symlink followed at any component
/// (`openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, Linux
/// 5.6+), so a path the kernel printed cannot be steered elsewhere by a
/// link planted since. Before 5.6, only the last component is not followed.
pub fn path_no_links(name: &CStr) -> io::Result<Stat> {
    // SAFETY: open_how is plain data, all zeroes valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: name is NUL-terminated and how a valid open_how, both alive
    // for the call; the kernel reads size_of::<open_how>() bytes of it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return path(name, false);
        }
        return Err(e);
    }
    // SAFETY: the kernel just returned this descriptor; it is ours alone.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    at(std::os::fd::AsFd::as_fd(&fd), c"", false)
}
