//! The verified removal's unlinks (docs/stage.md, "One verified removal"):
//! each entry through the descriptor of its directory, every directory on
//! the way opened `O_DIRECTORY|O_NOFOLLOW` from the stage's descriptor and
//! checked to be the directory walked (device, inode), the entry itself
//! checked to still be the one walked (device, inode, type) right before
//! its `unlinkat`. No link is ever followed, so nothing outside the stage
//! can be reached; a change found is a [`Refusal`] (`concurrent_change`),
//! never forced.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags};
use nix::sys::stat::{fstat, fstatat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::decide::escape_name;
use super::path::dir_flags;
use super::remove_decide::{Code, Refusal};
use super::remove_log::What;
use crate::inventory::Node;

/// What a node is, for its record.
pub fn what_of(mode: u32) -> What {
    match mode & libc::S_IFMT {
        libc::S_IFREG => What::File,
        libc::S_IFDIR => What::Directory,
        libc::S_IFLNK => What::Symlink,
        _ => What::Special,
    }
}

/// The (device, inode) of every directory walked, by its path's bytes.
pub fn directories(nodes: &[Node]) -> HashMap<Vec<u8>, (u64, u64)> {
    nodes
        .iter()
        .filter(|n| n.mode & libc::S_IFMT == libc::S_IFDIR)
        .map(|n| (n.raw.clone(), (n.dev, n.ino)))
        .collect()
}

fn changed(n: &Node, detail: String) -> Refusal {
    Refusal::new(Code::ConcurrentChange, Some(&escape_name(&n.raw)), detail)
}

fn cstr(n: &Node, part: &[u8]) -> Result<CString, Refusal> {
    CString::new(part)
        .map_err(|_| Refusal::new(Code::IoError, Some(&escape_name(&n.raw)), "NUL in a name"))
}

/// Opens the directory `n` is in, from `stage` down, each step checked to
/// be the directory walked. `None`: `n` is directly in the stage.
fn open_parent_of(
    stage: BorrowedFd<'_>,
    n: &Node,
    dirs: &HashMap<Vec<u8>, (u64, u64)>,
) -> Result<Option<OwnedFd>, Refusal> {
    let parts: Vec<&[u8]> = n.raw.split(|&b| b == b'/').collect();
    let mut cur: Option<OwnedFd> = None;
    for i in 0..parts.len() - 1 {
        let prefix = parts[..=i].join(&b'/');
        let shown = escape_name(&prefix);
        let c = cstr(n, parts[i])?;
        let at = cur.as_ref().map_or(stage, |f| f.as_fd());
        let fd = openat(at, c.as_c_str(), dir_flags(), Mode::empty()).map_err(|e| match e {
            Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR => changed(
                n,
                format!("{shown} is no longer a directory reached without a link ({e})"),
            ),
            e => Refusal::new(Code::IoError, Some(&shown), format!("open {shown}: {e}")),
        })?;
        let st =
            fstat(&fd).map_err(|e| Refusal::new(Code::IoError, Some(&shown), e.to_string()))?;
        if dirs.get(&prefix) != Some(&(st.st_dev, st.st_ino)) {
            return Err(changed(
                n,
                format!(
                    "{shown} is now dev {} inode {}, not the directory walked",
                    st.st_dev, st.st_ino
                ),
            ));
        }
        cur = Some(fd);
    }
    Ok(cur)
}

/// Removes `n` if it still is the entry walked (its directory too).
pub fn remove_node(
    stage: BorrowedFd<'_>,
    n: &Node,
    dirs: &HashMap<Vec<u8>, (u64, u64)>,
) -> Result<(), Refusal> {
    let parent = open_parent_of(stage, n, dirs)?;
    let at = parent.as_ref().map_or(stage, |f| f.as_fd());
    let last = n.raw.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
    let c = cstr(n, last)?;
    let shown = escape_name(&n.raw);
    let st = match fstatat(at, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(e) => return Err(changed(n, format!("{shown} is gone or unreadable: {e}"))),
    };
    let now = (st.st_dev, st.st_ino, st.st_mode & libc::S_IFMT);
    if now != (n.dev, n.ino, n.mode & libc::S_IFMT) {
        return Err(changed(
            n,
            format!(
                "{shown} is now dev {} inode {} ({:?}), not the entry walked (dev {} inode {}, {:?})",
                now.0,
                now.1,
                what_of(st.st_mode),
                n.dev,
                n.ino,
                what_of(n.mode)
            ),
        ));
    }
    let flag = if now.2 == libc::S_IFDIR {
        UnlinkatFlags::RemoveDir
    } else {
        UnlinkatFlags::NoRemoveDir
    };
    match unlinkat(at, c.as_c_str(), flag) {
        Ok(()) => Ok(()),
        Err(Errno::ENOENT) => Err(changed(
            n,
            format!("{shown} vanished before it was removed"),
        )),
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => Err(changed(
            n,
            format!("{shown} is not empty: an entry appeared in it after the walk; nothing forced"),
        )),
        Err(e) => Err(Refusal::new(
            Code::IoError,
            Some(&shown),
            format!("unlink {shown}: {e}"),
        )),
    }
}
