//! The holder scan: the tree once, every process in `/proc` once, the
//! mounts of every mount namespace seen, every bound loop device.
//!
//! Cost is bounded by what is alive: each process's fd directory is read
//! once and each fd `statx`ed once; `maps` is read once; a namespace's
//! `mountinfo` once, however many processes share it. Nothing of the tree
//! is opened but by the walk.

use std::collections::BTreeMap;
use std::io;

use crate::process::identity::is_gone;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::time::Instant;

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::tree::Tree;
use super::{loops, mounts, procs, statx, HolderScan, Unreadable, MAX_HOLDERS, MAX_OTHERS};

/// Processes kept per other mount namespace, to read its mounts through
/// (the first may exit before its turn comes).
const NS_READERS: usize = 4;

fn push_bounded<T>(v: &mut Vec<T>, total: &mut u64, item: T, cap: usize) {
    *total += 1;
    if v.len() < cap {
        v.push(item);
    }
}

/// Scans for holders of the trees at `paths` (directories, not symlinks).
/// `Err` only when a tree cannot be walked: then nothing is known, and the
/// caller must not take that as "not held".
pub fn scan(paths: &[&Path]) -> io::Result<HolderScan> {
    let t0 = Instant::now();
    of_tree(Tree::of(paths)?, t0)
}

/// [`scan`] of directories already open (`path` names each for people):
/// the trees scanned are the ones the caller checked, whatever their
/// names now point to.
pub fn scan_fds(roots: &[(&Path, BorrowedFd<'_>)]) -> io::Result<HolderScan> {
    let t0 = Instant::now();
    of_tree(Tree::of_fds(roots)?, t0)
}

fn of_tree(tree: Tree, t0: Instant) -> io::Result<HolderScan> {
    let proc = nix::fcntl::open(
        "/proc",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // This process as the /proc mounted here numbers it (another PID
    // namespace's /proc numbers it otherwise than getpid does).
    let me: i32 = nix::fcntl::readlinkat(proc.as_fd(), c"self")?
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("/proc/self does not name a pid"))?;
    // In a helper with a deadline (`src/bounded.rs`) the process that asked
    // for the scan is its parent: not a holder either.
    let asker = if crate::bounded::in_helper() {
        parent_of(proc.as_fd(), me)
    } else {
        None
    };
    let own_ns = statx::at(proc.as_fd(), c"self/ns/mnt", true)?.ino;
    let proc_mnt = statx::at(proc.as_fd(), c"", false)?.mnt_id;
    let mut out = HolderScan {
        roots: tree.roots.clone(),
        processes: 0,
        mount_namespaces: 0,
        holders: Vec::new(),
        holders_total: 0,
        mounts: Vec::new(),
        mounts_total: 0,
        loops: Vec::new(),
        loops_total: 0,
        unreadable: Vec::new(),
        unreadable_total: 0,
        elapsed_us: 0,
    };
    // Another namespace -> the first processes seen in it.
    let mut namespaces: BTreeMap<u64, Vec<i32>> = BTreeMap::new();
    let mut dir = Dir::from_fd(nix::fcntl::openat(
        proc.as_fd(),
        c".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)?;
    let mut pids: Vec<i32> = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        if let Some(pid) = std::str::from_utf8(entry.file_name().to_bytes())
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
        {
            if pid != me && Some(pid) != asker {
                pids.push(pid);
            }
        }
    }
    drop(dir);
    pids.sort_unstable();
    let mut scratch = Vec::new();
    for pid in pids {
        let seen = procs::look(proc.as_fd(), pid, &tree, &mut scratch);
        out.processes += 1;
        for r in &seen.roots {
            out.roots[*r as usize].held += 1;
        }
        if let Some(h) = seen.holder {
            push_bounded(&mut out.holders, &mut out.holders_total, h, MAX_HOLDERS);
        }
        if let Some(u) = seen.unreadable {
            push_bounded(
                &mut out.unreadable,
                &mut out.unreadable_total,
                u,
                MAX_OTHERS,
            );
        }
        if let Some(ns) = seen.mnt_ns.filter(|ns| *ns != own_ns) {
            let readers = namespaces.entry(ns).or_default();
            if readers.len() < NS_READERS {
                readers.push(pid);
            }
        }
    }
    let each_ns = std::iter::once((own_ns, vec![me], true))
        .chain(namespaces.into_iter().map(|(ns, pids)| (ns, pids, false)));
    for (ns, readers, own) in each_ns {
        out.mount_namespaces += 1;
        for (i, pid) in readers.iter().enumerate() {
            match mounts::holds(*pid, ns, own, &tree) {
                Ok(found) => {
                    for m in found {
                        out.roots[m.root as usize].held += 1;
                        push_bounded(&mut out.mounts, &mut out.mounts_total, m, MAX_OTHERS);
                    }
                    break;
                }
                // This reader exited: the next one, if any. When every
                // reader is gone, so are the processes that held the
                // namespace's mounts in view (a namespace no process is in
                // is a limit docs/guarantees.md names).
                Err(e) if is_gone(&e) && i + 1 < readers.len() => continue,
                Err(e) if is_gone(&e) => break,
                Err(e) => {
                    let u = Unreadable {
                        pid: *pid,
                        what: "mountinfo".to_string(),
                        error: e.to_string(),
                    };
                    push_bounded(
                        &mut out.unreadable,
                        &mut out.unreadable_total,
                        u,
                        MAX_OTHERS,
                    );
                    break;
                }
            }
        }
    }
    let mut own = Vec::new();
    if procs::read_into(proc.as_fd(), c"self/mountinfo", &mut own).is_ok() {
        if let Some(why) = mounts::proc_hides(&own, proc_mnt) {
            let u = Unreadable {
                pid: 0,
                what: "/proc".to_string(),
                error: why,
            };
            push_bounded(
                &mut out.unreadable,
                &mut out.unreadable_total,
                u,
                MAX_OTHERS,
            );
        }
    }
    let (found, unreadable) = loops::holds(&tree);
    for l in found {
        out.roots[l.root as usize].held += 1;
        push_bounded(&mut out.loops, &mut out.loops_total, l, MAX_OTHERS);
    }
    for u in unreadable {
        push_bounded(
            &mut out.unreadable,
            &mut out.unreadable_total,
            u,
            MAX_OTHERS,
        );
    }
    out.elapsed_us = t0.elapsed().as_micros() as u64;
    Ok(out)
}

/// The parent of `me` as this `/proc` numbers it (`None` when unreadable:
/// then the asker is scanned like any process, and named if it holds).
fn parent_of(proc: BorrowedFd<'_>, me: i32) -> Option<i32> {
    let mut buf = Vec::new();
    let path = std::ffi::CString::new(format!("{me}/stat")).ok()?;
    procs::read_into(proc, &path, &mut buf).ok()?;
    crate::process::identity::parse_stat(&buf).map(|s| s.ppid)
}
