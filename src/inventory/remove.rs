//! Removing a tree the watchdog made (the temp root, the state
//! directory): depth first, by descriptor, never following a link or
//! entering another file system.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use nix::fcntl::{openat, AtFlags};
use nix::sys::stat::{fstat, fstatat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::{dir_flags, escape, names, MAX_DEPTH};
use crate::kinds::watchdog::DirIdentity;

/// Removes everything below `dirfd`, depth first, without following links or
/// crossing into another filesystem (a mount point inside is an error).
pub fn remove_contents(dirfd: BorrowedFd<'_>) -> io::Result<()> {
    let root = fstat(dirfd)?;
    remove_below(dirfd, root.st_dev, 0)
}

fn remove_below(dirfd: BorrowedFd<'_>, dev: u64, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!("deeper than {MAX_DEPTH} levels")));
    }
    for name in names(dirfd)? {
        let st = fstatat(dirfd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if st.st_dev != dev {
                return Err(io::Error::other(format!(
                    "{} is a mount point; not removed",
                    escape(name.to_bytes())
                )));
            }
            let sub = openat(dirfd, name.as_c_str(), dir_flags(), Mode::empty())?;
            remove_below(sub.as_fd(), dev, depth + 1)?;
            unlinkat(dirfd, name.as_c_str(), UnlinkatFlags::RemoveDir)?;
        } else {
            unlinkat(dirfd, name.as_c_str(), UnlinkatFlags::NoRemoveDir)?;
        }
    }
    Ok(())
}

/// Removes directory `name` under `parent` if it is still the directory
/// `expect` (device and inode): contents first, then the entry itself.
pub fn remove_tree_at(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    expect: &DirIdentity,
) -> io::Result<()> {
    let fd = openat(parent, name, dir_flags(), Mode::empty())?;
    let st = fstat(&fd)?;
    if st.st_dev != expect.dev || st.st_ino != expect.ino {
        return Err(io::Error::other(
            "the directory is no longer the one the watchdog created; not removed",
        ));
    }
    remove_contents(fd.as_fd())?;
    unlinkat(parent, name, UnlinkatFlags::RemoveDir)?;
    Ok(())
}
