//! Unix sockets bound to a socket file of the tree, from the kernel's
//! socket table (`NETLINK_SOCK_DIAG`, `unix_diag`).
//!
//! A process listening on `STAGE/live.sock` holds no descriptor of the
//! stage: its fd is a socket of `sockfs`, and the file in the stage is only
//! the name others connect through. The link from one to the other is the
//! kernel's: `UNIX_DIAG_VFS` gives the bound file's device and inode for
//! each socket (`UNIX_DIAG_NAME` the path the binder gave, for people: it
//! may be in another mount namespace, so it is never matched). A socket is
//! bound in the tree when that `(dev, ino)` is one of the tree's socket
//! files; the processes holding it are then found by the socket's own
//! inode ([`super::procs`]: an fd whose link is `socket:[INO]`).
//!
//! Two encodings must be reconciled (docs/stage.md, "The holder scan"):
//! - `udiag_vfs_dev` is the kernel's internal `dev_t` of the file's
//!   superblock, `MAJOR << 20 | MINOR` (include/linux/kdev_t.h), not
//!   userspace's `makedev` (a file on `254:0` has `0x0fe00000` there and
//!   `st_dev` `0xfe00`); and it is the superblock's device, which is not
//!   always `st_dev` (btrfs subvolumes report another). So a socket file's
//!   device is taken from `mountinfo`'s `MAJOR:MINOR` for its mount
//!   (`STATX_MNT_ID`), which is that same superblock device, and `st_dev`
//!   only when its mount is not listed.
//! - `udiag_vfs_ino` is 32 bits: inodes are compared modulo 2^32. Two
//!   socket files on one file system whose inodes differ by a multiple of
//!   2^32 are taken for each other, which can only make the answer "held".
//!
//! Only the scanner's network namespace is listed (a netlink socket sees
//! its own): a socket bound by a process in another network namespace is
//! a limit docs/guarantees.md names. Memory is bounded by what matches:
//! the dump of every socket on the host is read in 64 KiB datagrams and
//! only sockets bound in the tree are kept, at most [`MAX_BOUND`].

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::statx::Stat;
use super::tree::{SocketFile, Tree};

/// Sockets bound in the tree kept at most (a listener and every
/// connection it accepted share its file): more is an error, so the scan
/// says it could not run rather than miss a holder.
pub const MAX_BOUND: usize = 262_144;

/// How long one read of the dump may wait: the kernel answers at once, so
/// this only bounds a kernel that does not.
const RECV_TIMEOUT_S: libc::time_t = 5;

// include/uapi/linux/netlink.h, sock_diag.h, unix_diag.h.
const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLMSG_ERROR: u16 = 0x2;
const NLMSG_DONE: u16 = 0x3;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
/// `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// `struct unix_diag_msg`.
const UDIAG_MSG: usize = 16;
/// Times a dump the kernel marks inconsistent (`NLM_F_DUMP_INTR`) is read.
const DUMP_TRIES: usize = 3;

/// The kernel's internal `dev_t` (`MAJOR << 20 | MINOR`), as
/// `UNIX_DIAG_VFS` gives it, in userspace's encoding (`st_dev`).
pub fn from_kernel_dev(dev: u32) -> u64 {
    libc::makedev(dev >> 20, dev & 0xfffff)
}

/// A socket's type (`SOCK_STREAM`, ...).
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SockKind {
    Stream,
    Dgram,
    Seqpacket,
    Other,
}

impl SockKind {
    fn of(t: u8) -> SockKind {
        match i32::from(t) {
            libc::SOCK_STREAM => SockKind::Stream,
            libc::SOCK_DGRAM => SockKind::Dgram,
            libc::SOCK_SEQPACKET => SockKind::Seqpacket,
            _ => SockKind::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SockKind::Stream => "stream",
            SockKind::Dgram => "datagram",
            SockKind::Seqpacket => "seqpacket",
            SockKind::Other => "other",
        }
    }
}

/// A socket's state as `unix_diag` gives it (TCP's numbering).
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SockState {
    /// `TCP_LISTEN`: accepts connections through the file.
    Listening,
    /// `TCP_ESTABLISHED`: a connection accepted through the file (it
    /// shares the listener's name), or a bound datagram socket connected.
    Connected,
    /// `TCP_CLOSE`: bound but neither (a datagram socket receiving).
    Unconnected,
    /// `TCP_SYN_SENT` and anything else.
    Other,
}

impl SockState {
    fn of(s: u8) -> SockState {
        match s {
            10 => SockState::Listening,
            1 => SockState::Connected,
            7 => SockState::Unconnected,
            _ => SockState::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SockState::Listening => "listening",
            SockState::Connected => "connected",
            SockState::Unconnected => "bound",
            SockState::Other => "in another state",
        }
    }
}

/// One live socket bound to a socket file of the tree.
#[derive(Clone, Debug)]
pub struct Bound {
    /// The socket's own inode (`sockfs`): what `/proc/PID/fd/N` says as
    /// `socket:[INO]`.
    pub ino: u64,
    pub kind: SockKind,
    pub state: SockState,
    /// The path the binder gave (`UNIX_DIAG_NAME`, escaped): in its mount
    /// namespace, which may not be the scanner's.
    pub name: String,
    /// The socket file of the tree it is bound to.
    pub file: SocketFile,
}

/// The live sockets bound in the tree, by their own inode.
#[derive(Default)]
pub struct Live {
    /// `st_dev` of `sockfs` (a socket fd's), 0 when nothing is bound.
    pub sockfs_dev: u64,
    pub bound: Vec<Bound>,
    by_ino: HashMap<u64, usize>,
}

impl Live {
    /// The bound socket an fd statted as `st` is, if it is one.
    pub fn socket(&self, st: &Stat) -> Option<&Bound> {
        if self.bound.is_empty() || st.kind != libc::S_IFSOCK || st.dev != self.sockfs_dev {
            return None;
        }
        self.by_ino.get(&st.ino).map(|&i| &self.bound[i])
    }
}

/// The superblock device of each mount of `mountinfo` (`mnt_id` ->
/// `makedev(MAJOR, MINOR)` of its third field).
fn superblock_devs(mountinfo: &[u8]) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    for line in mountinfo.split(|&b| b == b'\n') {
        let mut f = line.split(|&b| b == b' ');
        let (Some(id), Some(_), Some(dev)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let parse = || -> Option<(u64, u64)> {
            let id = std::str::from_utf8(id).ok()?.parse().ok()?;
            let (maj, min) = std::str::from_utf8(dev).ok()?.split_once(':')?;
            Some((id, libc::makedev(maj.parse().ok()?, min.parse().ok()?)))
        };
        if let Some((id, dev)) = parse() {
            out.insert(id, dev);
        }
    }
    out
}

/// The live sockets bound to the socket files of `tree`; `mountinfo` is
/// the scanner's own (`/proc/self/mountinfo`). Nothing is asked of the
/// kernel when the tree has no socket file.
pub fn live_in(tree: &Tree, mountinfo: &[u8]) -> io::Result<Live> {
    if tree.sockets.is_empty() {
        return Ok(Live::default());
    }
    let devs = superblock_devs(mountinfo);
    let mut files: HashMap<(u64, u32), &SocketFile> = HashMap::new();
    for f in &tree.sockets {
        let dev = devs.get(&f.stat.mnt_id).copied().unwrap_or(f.stat.dev);
        files.entry((dev, f.stat.ino as u32)).or_insert(f);
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let (live, consistent) = dump(&files)?;
        if consistent || tries >= DUMP_TRIES {
            return Ok(live);
        }
    }
}

/// One dump of every unix socket; `false` when the kernel marked it
/// interrupted (the table changed while it was read).
fn dump(files: &HashMap<(u64, u32), &SocketFile>) -> io::Result<(Live, bool)> {
    let fd = netlink()?;
    let st = nix::sys::stat::fstat(&fd)?;
    let mut live = Live {
        sockfs_dev: st.st_dev,
        ..Live::default()
    };
    let mut f = std::fs::File::from(fd);
    f.write_all(&request())?;
    let mut buf = vec![0u8; 64 << 10];
    let mut consistent = true;
    loop {
        let n = match f.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::other(format!(
                    "sock_diag: no answer within {RECV_TIMEOUT_S} s"
                )))
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Err(io::Error::other("sock_diag: the dump ended without DONE"));
        }
        let mut at = 0;
        while at + NLMSG_HDR <= n {
            let len = u32_at(&buf, at) as usize;
            let kind = u16_at(&buf, at + 4);
            let flags = u16_at(&buf, at + 6);
            if len < NLMSG_HDR || at + len > n {
                return Err(io::Error::other("sock_diag: a malformed message"));
            }
            consistent &= flags & NLM_F_DUMP_INTR == 0;
            match kind {
                NLMSG_DONE => return Ok((live, consistent)),
                NLMSG_ERROR => {
                    let errno = if len >= NLMSG_HDR + 4 {
                        i32::from_ne_bytes(bytes4(&buf, at + NLMSG_HDR)).saturating_neg()
                    } else {
                        0
                    };
                    if errno <= 0 {
                        return Err(io::Error::other("sock_diag: an error without errno"));
                    }
                    return Err(io::Error::from_raw_os_error(errno));
                }
                _ => one(&buf[at + NLMSG_HDR..at + len], files, &mut live)?,
            }
            at += (len + 3) & !3;
        }
    }
}

/// A `NETLINK_SOCK_DIAG` socket, its reads bounded by [`RECV_TIMEOUT_S`].
fn netlink() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; it returns a new
    // descriptor or -1.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; it is ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let tv = libc::timeval {
        tv_sec: RECV_TIMEOUT_S,
        tv_usec: 0,
    };
    // SAFETY: fd is open; tv is a valid timeval for the call's duration and
    // its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// `nlmsghdr` + `unix_diag_req`: every state, name and file of each.
fn request() -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR + 24);
    m.extend_from_slice(&((NLMSG_HDR + 24) as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    m.push(libc::AF_UNIX as u8); // sdiag_family
    m.push(0); // sdiag_protocol
    m.extend_from_slice(&0u16.to_ne_bytes()); // pad
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // udiag_states: all
    m.extend_from_slice(&0u32.to_ne_bytes()); // udiag_ino: any
    m.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // cookie: none
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m
}

/// One `unix_diag_msg` and its attributes: kept when its file is one of
/// `files`.
fn one(msg: &[u8], files: &HashMap<(u64, u32), &SocketFile>, live: &mut Live) -> io::Result<()> {
    if msg.len() < UDIAG_MSG {
        return Ok(());
    }
    let (kind, state, ino) = (msg[1], msg[2], u32_at(msg, 4));
    let mut name: &[u8] = &[];
    let mut vfs = None;
    let mut at = UDIAG_MSG;
    while at + 4 <= msg.len() {
        let len = usize::from(u16_at(msg, at));
        let ty = u16_at(msg, at + 2);
        if len < 4 || at + len > msg.len() {
            break;
        }
        let payload = &msg[at + 4..at + len];
        match ty {
            UNIX_DIAG_NAME => name = payload,
            UNIX_DIAG_VFS if payload.len() >= 8 => {
                // struct unix_diag_vfs { u32 udiag_vfs_ino; u32 udiag_vfs_dev; }
                vfs = Some((from_kernel_dev(u32_at(payload, 4)), u32_at(payload, 0)));
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    let Some(file) = vfs.and_then(|k| files.get(&k)) else {
        return Ok(());
    };
    if live.bound.len() >= MAX_BOUND {
        return Err(io::Error::other(format!(
            "more than {MAX_BOUND} sockets bound in the tree"
        )));
    }
    // An abstract name starts with NUL; a path name may end with one.
    let name = name.strip_suffix(b"\0").unwrap_or(name);
    live.by_ino.insert(u64::from(ino), live.bound.len());
    live.bound.push(Bound {
        ino: u64::from(ino),
        kind: SockKind::of(kind),
        state: SockState::of(state),
        name: super::bounded(name),
        file: (*file).clone(),
    });
    Ok(())
}

fn bytes4(b: &[u8], at: usize) -> [u8; 4] {
    let mut out = [0u8; 4];
    out.copy_from_slice(&b[at..at + 4]);
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes4(b, at))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_dev_is_major_shifted_by_20() {
        // /dev/vda (254:0) as UNIX_DIAG_VFS gives it on the build machine.
        assert_eq!(from_kernel_dev(0x0fe0_0000), libc::makedev(254, 0));
        assert_eq!(libc::makedev(254, 0), 0xfe00);
        assert_eq!(from_kernel_dev(27), libc::makedev(0, 27));
        assert_eq!(from_kernel_dev(0x0080_0123), libc::makedev(8, 0x123));
    }

    #[test]
    fn mountinfo_gives_each_mount_its_superblock_device() {
        let mi = b"27 1 254:0 / / rw - ext4 /dev/vda rw\n30 27 0:27 / /dev/shm rw - tmpfs tmpfs rw\nbad\n";
        let d = superblock_devs(mi);
        assert_eq!(d.get(&27), Some(&libc::makedev(254, 0)));
        assert_eq!(d.get(&30), Some(&libc::makedev(0, 27)));
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn a_listener_in_a_tree_is_found_by_the_file_it_is_bound_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let tree = Tree::of(&[dir.path()]).unwrap();
        assert_eq!(tree.sockets.len(), 1);
        let mut mi = Vec::new();
        std::fs::File::open("/proc/self/mountinfo")
            .unwrap()
            .read_to_end(&mut mi)
            .unwrap();
        let live = live_in(&tree, &mi).unwrap();
        assert_eq!(live.bound.len(), 1, "{:?}", live.bound);
        let b = &live.bound[0];
        assert_eq!(b.state, SockState::Listening);
        assert_eq!(b.kind, SockKind::Stream);
        assert_eq!(b.name, path.to_str().unwrap());
        let fd = std::os::fd::AsFd::as_fd(&l);
        let st = super::super::statx::at(fd, c"", false).unwrap();
        assert_eq!(live.socket(&st).map(|b| b.ino), Some(st.ino));
        drop(l);
        let live = live_in(&tree, &mi).unwrap();
        assert!(live.bound.is_empty(), "a closed socket is not live");
    }
}
