//! Groups a job made inside the action's group (a root job, or one in a
//! delegated subtree, may `mkdir` there). `cgroup.procs` lists only the
//! group's own members, while `cgroup.kill`, `cgroup.freeze` and
//! `populated` cover the whole subtree: a census before `cgroup.kill` must
//! see every nested member, and the group can be removed only after its
//! nested groups, deepest first.
//!
//! Everything is reached with `openat` from the held directory fd of the
//! action's group, never by path, like the group's own files.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::dir::{Dir, Type};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Deepest nesting walked; a subtree deeper than this is an error (the
/// census is then not complete, and nothing relies on it).
const DEPTH: usize = 32;
/// Most nested groups walked.
const GROUPS: usize = 4096;

fn open_sub(dir: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty()).map_err(io::Error::from)
}

/// The names of the subdirectories of `dir` (the nested groups).
fn subgroups(dir: BorrowedFd<'_>) -> io::Result<Vec<String>> {
    let fd = open_sub(dir, ".")?;
    let mut d = Dir::from_fd(fd).map_err(io::Error::from)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(io::Error::from)?;
        let Ok(name) = e.file_name().to_str() else {
            continue;
        };
        if name == "." || name == ".." || e.file_type() != Some(Type::Directory) {
            continue;
        }
        out.push(name.to_string());
    }
    Ok(out)
}

fn procs(dir: BorrowedFd<'_>) -> io::Result<Vec<i32>> {
    let fd = openat(
        dir,
        "cgroup.procs",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let mut s = String::new();
    std::fs::File::from(fd).read_to_string(&mut s)?;
    Ok(s.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// The members of every group nested in `dir` (not `dir`'s own), at most
/// [`DEPTH`] deep and [`GROUPS`] groups; an error beyond either.
pub fn members(dir: BorrowedFd<'_>) -> io::Result<Vec<i32>> {
    let mut out = Vec::new();
    let mut walked = 0;
    walk(dir, 0, &mut walked, &mut |sub| {
        out.extend(procs(sub)?);
        Ok(())
    })?;
    Ok(out)
}

/// Removes every group nested in `dir`, deepest first (`rmdir` of an
/// empty cgroup). The first failure stops it (EBUSY: members left).
pub fn remove(dir: BorrowedFd<'_>) -> io::Result<()> {
    let mut walked = 0;
    remove_in(dir, 0, &mut walked)
}

fn remove_in(dir: BorrowedFd<'_>, depth: usize, walked: &mut usize) -> io::Result<()> {
    for name in subgroups(dir)? {
        let sub = enter(dir, &name, depth, walked)?;
        remove_in(sub.as_fd(), depth + 1, walked)?;
        unlinkat(dir, name.as_str(), UnlinkatFlags::RemoveDir).map_err(io::Error::from)?;
    }
    Ok(())
}

fn enter(dir: BorrowedFd<'_>, name: &str, depth: usize, walked: &mut usize) -> io::Result<OwnedFd> {
    *walked += 1;
    if depth >= DEPTH || *walked > GROUPS {
        return Err(io::Error::other(format!(
            "nested groups beyond {DEPTH} deep or {GROUPS} in all"
        )));
    }
    open_sub(dir, name)
}

fn walk(
    dir: BorrowedFd<'_>,
    depth: usize,
    walked: &mut usize,
    each: &mut impl FnMut(BorrowedFd<'_>) -> io::Result<()>,
) -> io::Result<()> {
    for name in subgroups(dir)? {
        let sub = enter(dir, &name, depth, walked)?;
        each(sub.as_fd())?;
        walk(sub.as_fd(), depth + 1, walked, each)?;
    }
    Ok(())
}
