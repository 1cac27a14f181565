//! One process, looked at once: its fds, cwd, root, exe and file mappings
//! against the tree's `(dev, ino)`.
//!
//! Everything is read through the process's own `/proc/PID` directory
//! descriptor, so a pid reused mid-look reads as gone (`ESRCH`/`ENOENT`),
//! never as another process. Each fd is `statx`ed once through its magic
//! link (the inode it refers to, whichever namespace opened it); its
//! `fdinfo` and link text are read only when it matches. A socket fd
//! matches when it is one of the live sockets bound in the tree
//! ([`super::sockets::Live`]), by the socket's inode.

use std::ffi::{CStr, CString, OsStr};
use std::io::{self, Read};

use crate::process::identity::is_gone;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::dir::Dir;
use nix::fcntl::{openat, readlinkat, OFlag};
use nix::sys::stat::Mode;

use super::sockets::{Bound, Live};
use super::statx::{self, Stat};
use super::tree::Tree;
use super::{bounded, Access, Hold, Holder, How, SocketHold, Unreadable, MAX_HOLDS};

const O_PATH_BIT: u64 = 0o10000000;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

/// What looking at one process found.
#[derive(Default)]
pub struct Looked {
    /// Set when it holds something: who it is and what it holds.
    pub holder: Option<Holder>,
    /// Set when a part of it could not be read (it may hold the tree there).
    pub unreadable: Option<Unreadable>,
    /// Its mount namespace (inode of `ns/mnt`), when readable.
    pub mnt_ns: Option<u64>,
    /// The roots it holds (each once), named holds or not.
    pub roots: Vec<u32>,
    /// The inodes of the live sockets bound in the tree it holds.
    pub sockets: Vec<u64>,
}

/// Gone: the process exited (or was reaped) while it was looked at.
/// The holds found so far, the first [`MAX_HOLDS`] named.
struct Holds {
    named: Vec<Hold>,
    total: u64,
    roots: Vec<u32>,
    sockets: Vec<u64>,
}

impl Holds {
    fn push(&mut self, h: Hold) {
        self.total += 1;
        if !self.roots.contains(&h.root) {
            self.roots.push(h.root);
        }
        if self.named.len() < MAX_HOLDS {
            self.named.push(h);
        }
    }
}

/// The tree `st` is part of, or a file unlinked from: no link left, on a
/// tree device, and its last directory (as the kernel names it in `link`)
/// a tree directory by `(dev, ino)`. Returns `(root, deleted)`.
fn matches(st: &Stat, link: impl FnOnce() -> Option<Vec<u8>>, tree: &Tree) -> Option<(u32, bool)> {
    if let Some(root) = tree.root_of(st.key()) {
        return Some((root, false));
    }
    if st.nlink != 0 || !tree.devs.contains(&st.dev) {
        return None;
    }
    Some((tree.unlinked_in(&link()?)?, true))
}

fn link_of(dirfd: BorrowedFd<'_>, name: &CStr) -> Option<Vec<u8>> {
    readlinkat(dirfd, name).ok().map(|s| s.as_bytes().to_vec())
}

fn read_at(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    read_into(dirfd, name, &mut out)?;
    Ok(out)
}

/// Reads the whole of `name` into `buf` (cleared first), in reads of at
/// least 64 KiB: a `/proc` file has no size to ask for, and small reads
/// are what a scan of thousands of processes would spend its time on.
pub(super) fn read_into(dirfd: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> io::Result<()> {
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let mut f = std::fs::File::from(openat(dirfd, name, flags, Mode::empty())?);
    buf.clear();
    loop {
        // Zero only the next chunk, not all spare capacity: a file of many
        // reads costs linear time.
        let len = buf.len();
        buf.resize(len + (64 << 10), 0);
        let got = f.read(&mut buf[len..]);
        buf.truncate(len + *got.as_ref().unwrap_or(&0));
        match got {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn access_of(fdinfo: &[u8]) -> Option<Access> {
    let text = std::str::from_utf8(fdinfo).ok()?;
    let flags = text.lines().find_map(|l| l.strip_prefix("flags:"))?;
    let flags = u64::from_str_radix(flags.trim(), 8).ok()?;
    if flags & O_PATH_BIT != 0 {
        return Some(Access::Path);
    }
    Some(match flags & 3 {
        0 => Access::Read,
        1 => Access::Write,
        _ => Access::ReadWrite,
    })
}

/// Looks at process `pid` (a name under `/proc`, opened through `proc`);
/// `scratch` is a buffer reused from one process to the next.
/// `live` are the sockets bound in the tree.
pub fn look(
    proc: BorrowedFd<'_>,
    pid: i32,
    tree: &Tree,
    live: &Live,
    scratch: &mut Vec<u8>,
) -> Looked {
    let Ok(name) = CString::new(pid.to_string()) else {
        return Looked::default();
    };
    let pd: OwnedFd = match openat(proc, name.as_c_str(), dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if is_gone(&e.into()) => return Looked::default(),
        Err(e) => {
            return Looked {
                unreadable: Some(Unreadable {
                    pid,
                    what: format!("/proc/{pid}"),
                    error: io::Error::from(e).to_string(),
                }),
                ..Looked::default()
            }
        }
    };
    let pd = pd.as_fd();
    let alt = live_thread(pd, pid);
    let v = alt.as_ref().map_or(pd, |t| t.as_fd());
    let mut holds = Holds {
        named: Vec::new(),
        total: 0,
        roots: Vec::new(),
        sockets: Vec::new(),
    };
    let mut unreadable: Option<Unreadable> = None;
    let mut mnt_ns = None;
    let mut unread = |what: &str, e: &io::Error| {
        if unreadable.is_none() {
            unreadable = Some(Unreadable {
                pid,
                what: what.to_string(),
                error: e.to_string(),
            });
        }
    };
    for (part, how) in [(c"cwd", How::Cwd), (c"root", How::Root), (c"exe", How::Exe)] {
        match statx::at(v, part, true) {
            Ok(st) => {
                if let Some((root, deleted)) = matches(&st, || link_of(v, part), tree) {
                    holds.push(Hold {
                        root,
                        how,
                        fd: None,
                        access: None,
                        what: bounded(&link_of(v, part).unwrap_or_default()),
                        deleted,
                        socket: None,
                    });
                }
            }
            // A zombie or a kernel thread has none; a gone process neither.
            Err(e) if is_gone(&e) => {}
            Err(e) => unread(part.to_str().unwrap_or(""), &e),
        }
    }
    match fds(v, tree, live, &mut holds) {
        Ok(None) => {}
        Ok(Some((n, e))) => unread(&format!("fd {n}"), &e),
        Err(e) if is_gone(&e) => {}
        Err(e) => unread("fd", &e),
    }
    match read_into(v, c"maps", scratch) {
        Ok(()) => mappings(scratch, tree, &mut holds),
        Err(e) if is_gone(&e) => {}
        Err(e) => unread("maps", &e),
    }
    match statx::at(v, c"ns/mnt", true) {
        Ok(st) => mnt_ns = Some(st.ino),
        Err(e) if is_gone(&e) => {}
        Err(e) => unread("ns/mnt", &e),
    }
    let roots = holds.roots.clone();
    let sockets = holds.sockets.clone();
    Looked {
        holder: (holds.total > 0).then(|| who(pd, pid, holds)),
        unreadable,
        mnt_ns,
        roots,
        sockets,
    }
}

/// A live thread's `task/TID` directory, when the main thread has exited
/// while others run (its `cwd`, `fd` and `maps` then read as empty,
/// though the others share them); `None` otherwise.
fn live_thread(pd: BorrowedFd<'_>, pid: i32) -> Option<OwnedFd> {
    match statx::at(pd, c"cwd", true) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        _ => return None,
    }
    let task = openat(pd, c"task", dir_flags(), Mode::empty()).ok()?;
    let mut dir =
        Dir::from_fd(openat(task.as_fd(), c".", dir_flags(), Mode::empty()).ok()?).ok()?;
    for entry in dir.iter() {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let tid = std::str::from_utf8(name.to_bytes()).ok()?.parse::<i32>();
        if tid.map_or(true, |t| t == pid) {
            continue;
        }
        if let Ok(t) = openat(task.as_fd(), name, dir_flags(), Mode::empty()) {
            if statx::at(t.as_fd(), c"cwd", true).is_ok() {
                return Some(t);
            }
        }
    }
    None
}

/// Every open descriptor of the process, `statx`ed through its link.
/// `Ok(Some(..))`: one could not be looked at (the first such, named); the
/// others were.
fn fds(
    pd: BorrowedFd<'_>,
    tree: &Tree,
    live: &Live,
    holds: &mut Holds,
) -> io::Result<Option<(i32, io::Error)>> {
    let mut failed = None;
    let mut dir = Dir::openat(pd, c"fd", dir_flags(), Mode::empty())?;
    let raw = dir.as_raw_fd();
    // SAFETY: `raw` is `dir`'s own descriptor, open for as long as `dir`,
    // which outlives every use below; statx and readlinkat through it do
    // not move the directory's read position.
    let fdd = unsafe { BorrowedFd::borrow_raw(raw) };
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        let Ok(n) = std::str::from_utf8(name.to_bytes())
            .unwrap_or("")
            .parse::<i32>()
        else {
            continue; // . and ..
        };
        let st = match statx::at(fdd, name, true) {
            Ok(st) => st,
            Err(e) if is_gone(&e) => continue, // closed meanwhile
            Err(e) => {
                // One fd refused (a FUSE mount denying root its getattr):
                // named, and the others still looked at.
                failed.get_or_insert((n, e));
                continue;
            }
        };
        if let Some(b) = live.socket(&st) {
            holds.push(socket_hold(n, b));
            if !holds.sockets.contains(&b.ino) {
                holds.sockets.push(b.ino);
            }
            continue;
        }
        let Some((root, deleted)) = matches(&st, || link_of(fdd, name), tree) else {
            continue;
        };
        let access = CString::new(format!("fdinfo/{n}"))
            .ok()
            .and_then(|p| read_at(pd, &p).ok())
            .and_then(|info| access_of(&info));
        holds.push(Hold {
            root,
            how: How::Fd,
            fd: Some(n),
            access,
            what: bounded(&link_of(fdd, name).unwrap_or_default()),
            deleted,
            socket: None,
        });
    }
    Ok(failed)
}

/// Fd `n`, the socket `b`: held through the socket file it is bound to.
fn socket_hold(n: i32, b: &Bound) -> Hold {
    Hold {
        root: b.file.root,
        how: How::Socket,
        fd: Some(n),
        access: None,
        what: b.file.path.clone(),
        deleted: false,
        socket: Some(SocketHold {
            ino: b.ino,
            kind: b.kind,
            state: b.state,
            bound_as: b.name.clone(),
        }),
    }
}

/// `/proc/PID/maps`: `addr perms offset MAJ:MIN inode path`, one hold per
/// inode mapped (however many ranges).
fn mappings(maps: &[u8], tree: &Tree, holds: &mut Holds) {
    let mut seen: std::collections::HashSet<(u64, u64)> = std::collections::HashSet::new();
    for line in maps.split(|&b| b == b'\n') {
        let mut f = line.splitn(6, |&b| b == b' ');
        let (Some(_), Some(_), Some(_), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or_default().trim_ascii_start();
        let Some(key) = map_key(dev, ino) else {
            continue;
        };
        if key.1 == 0 || seen.contains(&key) {
            continue;
        }
        let found = match tree.root_of(key) {
            Some(root) => Some((root, false)),
            None if tree.devs.contains(&key.0) => tree.unlinked_in(path).map(|r| (r, true)),
            None => None,
        };
        let Some((root, deleted)) = found else {
            continue;
        };
        seen.insert(key);
        holds.push(Hold {
            root,
            how: How::Mapping,
            fd: None,
            access: None,
            what: bounded(path),
            deleted,
            socket: None,
        });
    }
}

/// `fd:01` and `1234` as `(makedev(0xfd, 1), 1234)`.
fn map_key(dev: &[u8], ino: &[u8]) -> Option<(u64, u64)> {
    let dev = std::str::from_utf8(dev).ok()?;
    let (maj, min) = dev.split_once(':')?;
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    let ino = std::str::from_utf8(ino).ok()?.parse::<u64>().ok()?;
    Some((libc::makedev(maj, min), ino))
}

/// Who the holder is: start time and comm from `stat`, the real uid from
/// `status`, the program from `exe` (all through the same directory fd).
fn who(pd: BorrowedFd<'_>, pid: i32, holds: Holds) -> Holder {
    let stat = read_at(pd, c"stat").unwrap_or_default();
    let (comm, start_time) = match (
        stat.iter().position(|&b| b == b'('),
        stat.iter().rposition(|&b| b == b')'),
    ) {
        (Some(a), Some(b)) if a < b => {
            let rest = std::str::from_utf8(&stat[b + 1..]).unwrap_or("");
            // Fields after comm start at 3 (state); start time is field 22.
            let start = rest
                .split_ascii_whitespace()
                .nth(19)
                .and_then(|s| s.parse().ok());
            (bounded(&stat[a + 1..b]), start.unwrap_or(0))
        }
        _ => (String::new(), 0),
    };
    let status = read_at(pd, c"status").unwrap_or_default();
    let uid = std::str::from_utf8(&status)
        .unwrap_or("")
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_ascii_whitespace().next())
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX);
    let exe = link_of(pd, c"exe").unwrap_or_default();
    Holder {
        pid,
        start_time,
        uid,
        comm,
        exe: bounded(OsStr::from_bytes(&exe).as_bytes()),
        holds: holds.named,
        holds_total: holds.total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_flags_name_the_access() {
        assert_eq!(access_of(b"pos:\t0\nflags:\t0100000\n"), Some(Access::Read));
        assert_eq!(access_of(b"flags:\t02100001\n"), Some(Access::Write));
        assert_eq!(access_of(b"flags:\t0100002\n"), Some(Access::ReadWrite));
        assert_eq!(access_of(b"flags:\t012100000\n"), Some(Access::Path));
        assert_eq!(access_of(b"pos:\t0\n"), None);
    }

    #[test]
    fn a_maps_device_is_hex_major_minor() {
        assert_eq!(map_key(b"fd:01", b"42"), Some((libc::makedev(0xfd, 1), 42)));
        assert_eq!(map_key(b"00:00", b"0"), Some((0, 0)));
        assert_eq!(map_key(b"zz", b"1"), None);
    }
}
