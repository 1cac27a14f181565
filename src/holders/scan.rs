//! The holder scan: the tree once, the live unix sockets bound in it,
//! every process in `/proc` once, the mounts of every mount namespace
//! seen, every bound loop device.
//!
//! Cost is bounded by what is alive: each process's fd directory is read
//! once and each fd `statx`ed once; `maps` is read once; a namespace's
//! `mountinfo` once, however many processes share it. Nothing of the tree
//! is opened but by the walk.

use std::collections::{BTreeMap, HashSet};
use std::io;

use crate::process::identity::is_gone;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::sockets::{self, Live};
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

/// This process and its `/proc`, as the scan needs them.
struct Proc {
    fd: OwnedFd,
    /// This process as the `/proc` mounted here numbers it (another PID
    /// namespace's `/proc` numbers it otherwise than getpid does).
    me: i32,
    /// In a helper with a deadline (`src/bounded.rs`) the process that
    /// asked for the scan is its parent: not a holder either.
    asker: Option<i32>,
    /// This process's mount namespace (inode of `ns/mnt`).
    own_ns: u64,
    /// The mount `/proc` is.
    proc_mnt: u64,
}

impl Proc {
    fn open() -> io::Result<Proc> {
        let fd = nix::fcntl::open(
            "/proc",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let me: i32 = nix::fcntl::readlinkat(fd.as_fd(), c"self")?
            .to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other("/proc/self does not name a pid"))?;
        let asker = if crate::bounded::in_helper() {
            parent_of(fd.as_fd(), me)
        } else {
            None
        };
        let own_ns = statx::at(fd.as_fd(), c"self/ns/mnt", true)?.ino;
        let proc_mnt = statx::at(fd.as_fd(), c"", false)?.mnt_id;
        Ok(Proc {
            fd,
            me,
            asker,
            own_ns,
            proc_mnt,
        })
    }

    /// Every process in `/proc` but this one and its asker, by pid.
    fn pids(&self) -> io::Result<Vec<i32>> {
        let mut dir = Dir::from_fd(nix::fcntl::openat(
            self.fd.as_fd(),
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
                if pid != self.me && Some(pid) != self.asker {
                    pids.push(pid);
                }
            }
        }
        pids.sort_unstable();
        Ok(pids)
    }
}

fn unreadable(out: &mut HolderScan, u: Unreadable) {
    push_bounded(
        &mut out.unreadable,
        &mut out.unreadable_total,
        u,
        MAX_OTHERS,
    );
}

fn of_tree(tree: Tree, t0: Instant) -> io::Result<HolderScan> {
    let proc = Proc::open()?;
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
    let mut mountinfo = Vec::new();
    let own = procs::read_into(proc.fd.as_fd(), c"self/mountinfo", &mut mountinfo);
    let live = bound_sockets(&tree, &mountinfo, &mut out);
    let pids = proc.pids()?;
    let (namespaces, held) = processes(&proc, pids, &tree, &live, &mut out);
    namespace_mounts(&proc, namespaces, &tree, &mut out);
    if own.is_ok() {
        if let Some(why) = mounts::proc_hides(&mountinfo, proc.proc_mnt) {
            let what = "/proc".to_string();
            unreadable(
                &mut out,
                Unreadable {
                    pid: 0,
                    what,
                    error: why,
                },
            );
        }
    }
    loop_devices(&tree, &mut out);
    unseen_sockets(&tree, &mountinfo, &live, &held, &mut out);
    out.elapsed_us = t0.elapsed().as_micros() as u64;
    Ok(out)
}

/// The live sockets bound in the tree; when the kernel's table cannot be
/// read, none, and that is named.
fn bound_sockets(tree: &Tree, mountinfo: &[u8], out: &mut HolderScan) -> Live {
    sockets::live_in(tree, mountinfo).unwrap_or_else(|e| {
        let what = "unix sockets (sock_diag)".to_string();
        unreadable(
            out,
            Unreadable {
                pid: 0,
                what,
                error: e.to_string(),
            },
        );
        Live::default()
    })
}

/// Looks at every process once. Returns the other mount namespaces seen
/// (each with the first processes in it) and the inodes of the live
/// sockets some process was seen holding.
fn processes(
    proc: &Proc,
    pids: Vec<i32>,
    tree: &Tree,
    live: &Live,
    out: &mut HolderScan,
) -> (BTreeMap<u64, Vec<i32>>, HashSet<u64>) {
    let mut namespaces: BTreeMap<u64, Vec<i32>> = BTreeMap::new();
    let mut held = HashSet::new();
    let mut scratch = Vec::new();
    for pid in pids {
        let seen = procs::look(proc.fd.as_fd(), pid, tree, live, &mut scratch);
        out.processes += 1;
        for r in &seen.roots {
            out.roots[*r as usize].held += 1;
        }
        held.extend(seen.sockets);
        if let Some(h) = seen.holder {
            push_bounded(&mut out.holders, &mut out.holders_total, h, MAX_HOLDERS);
        }
        if let Some(u) = seen.unreadable {
            unreadable(out, u);
        }
        if let Some(ns) = seen.mnt_ns.filter(|ns| *ns != proc.own_ns) {
            let readers = namespaces.entry(ns).or_default();
            if readers.len() < NS_READERS {
                readers.push(pid);
            }
        }
    }
    (namespaces, held)
}

/// The mounts of this mount namespace and of every other one seen, each
/// read once through the first of its processes still there.
fn namespace_mounts(
    proc: &Proc,
    namespaces: BTreeMap<u64, Vec<i32>>,
    tree: &Tree,
    out: &mut HolderScan,
) {
    let each_ns = std::iter::once((proc.own_ns, vec![proc.me], true))
        .chain(namespaces.into_iter().map(|(ns, pids)| (ns, pids, false)));
    for (ns, readers, own) in each_ns {
        out.mount_namespaces += 1;
        for (i, pid) in readers.iter().enumerate() {
            match mounts::holds(*pid, ns, own, tree) {
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
                    let what = "mountinfo".to_string();
                    let error = e.to_string();
                    unreadable(
                        out,
                        Unreadable {
                            pid: *pid,
                            what,
                            error,
                        },
                    );
                    break;
                }
            }
        }
    }
}

/// Every bound loop device.
fn loop_devices(tree: &Tree, out: &mut HolderScan) {
    let (found, unread) = loops::holds(tree);
    for l in found {
        out.roots[l.root as usize].held += 1;
        push_bounded(&mut out.loops, &mut out.loops_total, l, MAX_OTHERS);
    }
    for u in unread {
        unreadable(out, u);
    }
}

/// A live socket bound in the tree that no process was seen holding, and
/// still live when looked for again (a holder that exited meanwhile took
/// its socket with it): held by a process this `/proc` does not show (in a
/// PID namespace it does not see) or in flight in a message. Named as not
/// readable, as such a process would be.
fn unseen_sockets(
    tree: &Tree,
    mountinfo: &[u8],
    live: &Live,
    held: &HashSet<u64>,
    out: &mut HolderScan,
) {
    if live.bound.iter().all(|b| held.contains(&b.ino)) {
        return;
    }
    let Ok(again) = sockets::live_in(tree, mountinfo) else {
        return;
    };
    let before: HashSet<u64> = live.bound.iter().map(|b| b.ino).collect();
    let unseen = |b: &&sockets::Bound| before.contains(&b.ino) && !held.contains(&b.ino);
    for b in again.bound.iter().filter(unseen) {
        let u = Unreadable {
            pid: 0,
            what: format!("unix socket {}", b.file.path),
            error: format!(
                "live ({} {}, socket inode {}, bound as {}) but no process seen holding it: \
                 one in a PID namespace this /proc does not show, or in flight",
                b.kind.as_str(),
                b.state.as_str(),
                b.ino,
                b.name
            ),
        };
        unreadable(out, u);
    }
}

/// The parent of `me` as this `/proc` numbers it (`None` when unreadable:
/// then the asker is scanned like any process, and named if it holds).
fn parent_of(proc: BorrowedFd<'_>, me: i32) -> Option<i32> {
    let mut buf = Vec::new();
    let path = std::ffi::CString::new(format!("{me}/stat")).ok()?;
    procs::read_into(proc, &path, &mut buf).ok()?;
    crate::process::identity::parse_stat(&buf).map(|s| s.ppid)
}
