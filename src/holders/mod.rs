//! Who holds a directory tree: the holder scan (docs/stage.md, "The
//! holder scan").
//!
//! `delete_allowed` says nothing the watchdog started still runs. A stage
//! can still be in use by a process that is not a descendant: a daemon the
//! job handed work to, a process someone else started, a mount or a loop
//! device backed by a file in it. Whatever the ancestry, such a hold is
//! visible from `/proc` and `/sys`, and this module looks for it.
//!
//! Everything is matched by device and inode, never by path string: the
//! tree is walked once by descriptor ([`tree`]) into the set of its
//! `(dev, ino)`; a process holds it when one of its fds, its cwd, root or
//! exe, or a file mapping has one of them ([`procs`]); a mount holds it when
//! its mount point is a stage directory's entry or its root is a stage
//! entry, in this mount namespace and in every other one a process is in
//! ([`mounts`]); a loop device holds it when its backing file is a stage
//! entry ([`loops`]). A file unlinked from the stage while held (a running
//! program whose executable was deleted) has no entry left to match: it is
//! matched when its inode has no links, is on a stage device, and the
//! directory the kernel names as its last one is a stage directory by
//! `(dev, ino)`. A unix socket bound to a socket file of the tree holds it
//! through the processes holding the socket ([`sockets`]: the kernel's
//! socket table gives each socket's bound file by `(dev, ino)`, a process's
//! fd gives the socket's own inode).
//!
//! A process the scan cannot read is named as unreadable, never skipped
//! silently; a process that exits during the scan holds nothing. The scan only reads:
//! it never signals, opens a file of the stage for anything but `stat`, or
//! follows a path into it. [`scan::scan`] runs it; these are its results.

pub mod loops;
pub mod mounts;
pub mod procs;
pub mod scan;
pub mod sockets;
pub mod statx;
pub mod text;
pub mod tree;

use serde::{Deserialize, Serialize};

/// Holders named in a result, at most (the count covers them all).
pub const MAX_HOLDERS: usize = 32;
/// Holds named per holder, at most.
pub const MAX_HOLDS: usize = 8;
/// Mounts, loop devices and unreadable processes named, at most, each.
pub const MAX_OTHERS: usize = 32;
/// Bytes of a path, exe or comm kept in a result (escaped, then cut).
pub const MAX_TEXT: usize = 256;

/// One directory scanned, by the identity it had when the scan began.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScanRoot {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    /// Entries of the tree (the root included), each matched by `(dev, ino)`.
    pub entries: u64,
    /// Findings (holders, mounts, loop devices) that hold this tree.
    pub held: u64,
}

/// How a process holds a stage entry.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// An open file descriptor (`fd` says which, `access` how it was opened).
    Fd,
    /// Its working directory.
    Cwd,
    /// Its root directory (`chroot`).
    Root,
    /// The program it runs.
    Exe,
    /// A file mapped into its memory (`/proc/PID/maps`).
    Mapping,
    /// An fd of a unix socket bound to a socket file of the tree (`what`
    /// is that file, `socket` the socket).
    Socket,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Fd => "fd",
            How::Cwd => "cwd",
            How::Root => "root",
            How::Exe => "exe",
            How::Mapping => "mapping",
            How::Socket => "unix socket",
        }
    }
}

/// The access mode of an open descriptor (`/proc/PID/fdinfo/N` flags).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
    ReadWrite,
    /// `O_PATH`: no I/O, but the inode is pinned and usable with `*at`.
    Path,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "read/write",
            Access::Path => "O_PATH",
        }
    }
}

/// One thing a process holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    /// The index in `roots` of the tree held.
    pub root: u32,
    pub how: How,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    /// The entry as the kernel names it for this process (escaped; for
    /// people: the match was by `(dev, ino)`).
    pub what: String,
    /// The entry was unlinked from the stage while held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// For [`How::Socket`] (only): the socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<SocketHold>,
}

/// A live unix socket bound to a socket file of the tree, held through an
/// fd (matched by the file's `(dev, ino)`, never by its name).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SocketHold {
    /// The socket's own inode (`socket:[INO]` in `/proc/PID/fd`).
    pub ino: u64,
    pub kind: sockets::SockKind,
    pub state: sockets::SockState,
    /// The path its binder gave (escaped), in the binder's mount
    /// namespace: for people, it may name another path than the tree's.
    pub bound_as: String,
}

/// A process that holds part of the tree.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    pub pid: i32,
    /// Field 22 of `/proc/PID/stat` (clock ticks since boot).
    pub start_time: u64,
    /// Real uid.
    pub uid: u32,
    pub comm: String,
    /// Its program as the kernel names it (empty for a kernel thread).
    pub exe: String,
    pub holds: Vec<Hold>,
    /// Holds found, of which the first [`MAX_HOLDS`] are named.
    pub holds_total: u64,
}

/// How a mount holds the tree.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MountHow {
    /// Mounted on top of a stage entry: the stage cannot be removed whole.
    MountPoint,
    /// Its root is a stage entry (a bind mount of it elsewhere).
    Source,
}

/// A mount that holds part of the tree.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MountHold {
    /// The index in `roots` of the tree held.
    pub root: u32,
    pub how: MountHow,
    /// Where it is mounted, as its namespace's `mountinfo` says (escaped).
    pub mount_point: String,
    pub fstype: String,
    pub source: String,
    /// The mount namespace (inode of `/proc/PID/ns/mnt`).
    pub mnt_ns: u64,
    /// A process in that namespace, through whose `/proc/PID/root` it was seen.
    pub seen_by: i32,
}

/// A loop device whose backing file is part of the tree.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LoopHold {
    /// The index in `roots` of the tree held.
    pub root: u32,
    /// `loopN`.
    pub device: String,
    /// `/sys/block/loopN/loop/backing_file` (escaped).
    pub backing_file: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// A process, mount namespace or loop device the scan could not read. It
/// is named wherever the scan's answer is given (it might hold the tree);
/// it does not make the answer "held": what a scanner may read is its
/// privilege, like the PID namespaces it cannot see.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Unreadable {
    /// The process (0 for a loop device).
    pub pid: i32,
    /// What could not be read (`fd`, `maps`, `mountinfo`, `loop7`, ...).
    pub what: String,
    pub error: String,
}

/// What one scan found. Not [`HolderScan::held`] is the only "nothing
/// holds it"; `unreadable` says what that answer could not see.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HolderScan {
    pub roots: Vec<ScanRoot>,
    /// Processes looked at (every one visible in `/proc`, the scanner aside).
    pub processes: u64,
    /// Distinct mount namespaces whose mounts were read.
    pub mount_namespaces: u64,
    pub holders: Vec<Holder>,
    pub holders_total: u64,
    pub mounts: Vec<MountHold>,
    pub mounts_total: u64,
    pub loops: Vec<LoopHold>,
    pub loops_total: u64,
    pub unreadable: Vec<Unreadable>,
    pub unreadable_total: u64,
    /// Wall-clock time of the scan, in microseconds.
    pub elapsed_us: u64,
}

impl HolderScan {
    /// A process, mount or loop device holds the tree.
    pub fn held(&self) -> bool {
        self.holders_total + self.mounts_total + self.loops_total > 0
    }
}

/// `s` escaped for people and cut at [`MAX_TEXT`] bytes (on a char edge).
pub fn bounded(s: &[u8]) -> String {
    let mut out = String::new();
    for &b in s {
        if out.len() >= MAX_TEXT {
            out.push_str("...");
            break;
        }
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}
