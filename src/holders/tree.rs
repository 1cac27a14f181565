//! The tree being asked about, as the set of its `(dev, ino)`.
//!
//! Walked once by descriptor (`openat` with `O_NOFOLLOW`, `statx` without
//! following): no symlink is followed and no other filesystem is entered.
//! A mount point met in the tree is an entry (what is mounted there is
//! reached through the stage) but is not walked into. Its socket files are
//! kept apart with their paths: a unix socket bound to one of them is
//! looked for by [`super::sockets`].

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::statx::{self, Stat};
use super::ScanRoot;

/// Deepest nesting walked; deeper trees are an error, not a hang.
const MAX_DEPTH: usize = 256;
/// Entries held in memory at most (about 50 bytes each, plus, while one
/// directory is walked, the names of its subdirectories).
pub const MAX_ENTRIES: usize = 4_000_000;
/// Socket files kept at most (each with its path, at most about 260
/// bytes): more is an error, so the scan says it could not run rather
/// than miss a bound socket.
pub const MAX_SOCKET_FILES: usize = 65_536;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Every entry of the trees scanned.
#[derive(Default)]
pub struct Tree {
    /// `(dev, ino)` of every entry, the roots included -> the index of
    /// the first root it was met under.
    pub entries: HashMap<(u64, u64), u32>,
    /// The directories among them (where an unlinked file's last directory
    /// must be, for it to count).
    pub dirs: HashSet<(u64, u64)>,
    /// The devices of the filesystems walked.
    pub devs: HashSet<u64>,
    pub roots: Vec<ScanRoot>,
    /// Each root's mount (`STATX_MNT_ID`; 0 where unknown), in `roots` order.
    pub root_mounts: Vec<u64>,
    /// The socket files among them, in walk order.
    pub sockets: Vec<SocketFile>,
    /// The root being walked.
    root: u32,
}

/// A socket file of the tree: where a unix socket may be bound.
#[derive(Clone, Debug)]
pub struct SocketFile {
    /// The index in `roots` of its tree.
    pub root: u32,
    /// Its `st_dev`, inode and mount (`STATX_MNT_ID`, 0 where unknown).
    pub stat: Stat,
    /// Its path, the root's (as given) joined with the walk's names
    /// (escaped for people, cut at [`super::MAX_TEXT`] bytes).
    pub path: String,
}

impl Tree {
    /// Walks each of `paths` (a directory, not a symlink) into one set.
    pub fn of(paths: &[&Path]) -> io::Result<Tree> {
        let mut t = Tree::default();
        for path in paths {
            let fd = nix::fcntl::open(*path, dir_flags(), Mode::empty()).map_err(|e| {
                let e = io::Error::from(e);
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            })?;
            t.add_root(path, fd.as_fd())?;
        }
        Ok(t)
    }

    /// Walks each directory already open (`path` names it for people).
    pub fn of_fds(roots: &[(&Path, BorrowedFd<'_>)]) -> io::Result<Tree> {
        let mut t = Tree::default();
        for (path, fd) in roots {
            t.add_root(path, *fd)?;
        }
        Ok(t)
    }

    fn add_root(&mut self, path: &Path, fd: BorrowedFd<'_>) -> io::Result<()> {
        let st = statx::at(fd, c"", false)?;
        if !st.is_dir() {
            return Err(io::Error::other(format!(
                "{}: not a directory",
                path.display()
            )));
        }
        let before = self.entries.len();
        self.root = self.roots.len() as u32;
        self.add(&st);
        self.devs.insert(st.dev);
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let mut at = abs.as_os_str().as_encoded_bytes().to_vec();
        self.walk(fd, st.dev, 0, &mut at)?;
        self.root_mounts
            .push(if st.mount_root { st.mnt_id } else { 0 });
        self.roots.push(ScanRoot {
            path: super::bounded(abs.as_os_str().as_encoded_bytes()),
            dev: st.dev,
            ino: st.ino,
            entries: (self.entries.len() - before) as u64,
            held: 0,
        });
        Ok(())
    }

    /// The root whose tree holds the entry `key`, if any.
    pub fn root_of(&self, key: (u64, u64)) -> Option<u32> {
        self.entries.get(&key).copied()
    }

    /// `link` is `/a/b/name (deleted)` as the kernel names an unlinked
    /// file: the root whose tree has `/a/b` as a directory (by `(dev, ino)`
    /// of what that path is now, resolved without following any link), if
    /// any.
    pub fn unlinked_in(&self, link: &[u8]) -> Option<u32> {
        let path = link.strip_suffix(b" (deleted)")?;
        let cut = path.iter().rposition(|&b| b == b'/')?;
        let parent = if cut == 0 { &b"/"[..] } else { &path[..cut] };
        let st = statx::path_no_links(&CString::new(parent).ok()?).ok()?;
        if !st.is_dir() || !self.dirs.contains(&st.key()) {
            return None;
        }
        self.root_of(st.key())
    }

    fn socket(&mut self, st: &Stat, dir: &[u8], name: &[u8]) -> io::Result<()> {
        if self.sockets.len() >= MAX_SOCKET_FILES {
            return Err(io::Error::other(format!(
                "more than {MAX_SOCKET_FILES} socket files"
            )));
        }
        let mut path = dir.to_vec();
        path.push(b'/');
        path.extend_from_slice(name);
        self.sockets.push(SocketFile {
            root: self.root,
            stat: *st,
            path: super::bounded(&path),
        });
        Ok(())
    }

    fn add(&mut self, st: &Stat) {
        self.entries.entry(st.key()).or_insert(self.root);
        if st.is_dir() {
            self.dirs.insert(st.key());
        }
    }

    /// `at` is the path of `dirfd` (the root's as given, then the walk's
    /// names): kept only for socket files, so people can find them.
    fn walk(
        &mut self,
        dirfd: BorrowedFd<'_>,
        dev: u64,
        depth: usize,
        at: &mut Vec<u8>,
    ) -> io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(io::Error::other(format!("deeper than {MAX_DEPTH} levels")));
        }
        let dup = openat(dirfd, ".", dir_flags(), Mode::empty())?;
        let mut dir = Dir::from_fd(dup)?;
        let mut subdirs: Vec<CString> = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let st = match statx::at(dirfd, name, false) {
                Ok(st) => st,
                // Removed while walked: not an entry any more.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            if self.entries.len() >= MAX_ENTRIES {
                return Err(io::Error::other(format!("more than {MAX_ENTRIES} entries")));
            }
            self.add(&st);
            if st.kind == libc::S_IFSOCK {
                self.socket(&st, at, name.to_bytes())?;
            }
            // Another filesystem, or a bind mount of the same one: an
            // entry of the tree, not walked into.
            if st.is_dir() && st.dev == dev && !st.mount_root {
                subdirs.push(name.to_owned());
            }
        }
        drop(dir);
        for name in subdirs {
            match openat(dirfd, name.as_c_str(), dir_flags(), Mode::empty()) {
                Ok(sub) => {
                    let len = at.len();
                    at.push(b'/');
                    at.extend_from_slice(name.to_bytes());
                    let walked = self.walk(sub.as_fd(), dev, depth + 1, at);
                    at.truncate(len);
                    walked?
                }
                Err(nix::errno::Errno::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
