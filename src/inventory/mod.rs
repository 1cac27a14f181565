//! Directory identity, inventories and the temp root's removal.
//!
//! Everything walks by descriptor (`openat` with `O_NOFOLLOW`, `fstatat`
//! with `AT_SYMLINK_NOFOLLOW`): no symlink is ever followed and no other
//! filesystem is entered, so neither an inventory nor a removal can be
//! steered outside the directory it was asked about.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use sha2::{Digest, Sha256};

use crate::kinds::watchdog::{DirIdentity, Inventory, PrivateState, StagingInventoried, TempEntry};
use crate::vocab::hex;

pub mod listing;
mod remove;

pub use listing::{Entry, Listing};
pub use remove::{remove_contents, remove_tree_at};

/// Deepest directory nesting walked; deeper trees are an error, not a hang.
const MAX_DEPTH: usize = 256;

/// Sockets, FIFOs, devices and mount points named in a record, at most.
pub const MAX_SPECIAL: usize = 64;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens a directory without following a symlink at its last component.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(openat(AT_FDCWD, path, dir_flags(), Mode::empty())?)
}

fn identity_of(path: &Path, st: &FileStat) -> DirIdentity {
    DirIdentity {
        path: path.to_string_lossy().into_owned(),
        dev: st.st_dev,
        ino: st.st_ino,
        uid: st.st_uid,
        mode: st.st_mode,
    }
}

/// The identity of a directory (refuses a symlink). `path` is made absolute.
pub fn dir_identity(path: &Path) -> io::Result<DirIdentity> {
    let fd = open_dir(path)?;
    let st = fstat(&fd)?;
    let abs = std::path::absolute(path)?;
    Ok(identity_of(&abs, &st))
}

/// Same directory: device, inode, owner and mode (the path is for people).
pub fn same_dir(a: &DirIdentity, b: &DirIdentity) -> bool {
    a.dev == b.dev && a.ino == b.ino && a.uid == b.uid && a.mode == b.mode
}

fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "dir",
        libc::S_IFREG => "file",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char",
        libc::S_IFBLK => "block",
        _ => "other",
    }
}

/// Bytes as printable ASCII, everything else (and `\`) as `\xNN`: how
/// a name appears in an inventory line and a listing's `path`.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

fn names(dirfd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let dup = openat(dirfd, ".", dir_flags(), Mode::empty())?;
    let mut dir = Dir::from_fd(dup)?;
    let mut out = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        out.push(name.to_owned());
    }
    out.sort();
    Ok(out)
}

struct Walk<'a> {
    root_dev: u64,
    hasher: Sha256,
    entries: u64,
    bytes: u64,
    listing: Vec<TempEntry>,
    max_listing: usize,
    /// Hash every regular file's bytes into its line (the staging rule).
    contents: bool,
    /// Entries that are neither file, directory nor symlink (the first few).
    special: Vec<TempEntry>,
    special_truncated: bool,
    /// Every entry, for naming what changed (the staging rule), up to
    /// [`listing::MAX_LISTED`]; `None` when not asked for.
    list: Option<Listing>,
    /// Paths (relative to the root) left out of everything above: the
    /// watchdog's own files in a stage. `visit` still sees them (so a
    /// removal removes them), and a directory among them is not entered.
    skip: &'a [Vec<u8>],
    visit: &'a mut dyn FnMut(&[u8], &FileStat),
}

/// Hex SHA-256 of the bytes of regular file `name` under `dirfd`, read
/// through a descriptor that is checked to be the entry `st` describes
/// (never a FIFO or device swapped in: `O_NONBLOCK`, then fstat).
fn file_digest(dirfd: BorrowedFd<'_>, name: &CStr, st: &FileStat) -> io::Result<String> {
    use std::io::Read;
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = openat(dirfd, name, flags, Mode::empty())?;
    let now = fstat(&fd)?;
    if now.st_mode & libc::S_IFMT != libc::S_IFREG
        || (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)
    {
        return Err(io::Error::other(format!(
            "{} changed while it was inventoried",
            escape(name.to_bytes())
        )));
    }
    let mut f = std::fs::File::from(fd);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(hex(&h.finalize()))
}

impl Walk<'_> {
    fn dir(&mut self, dirfd: BorrowedFd<'_>, rel: &mut Vec<u8>, depth: usize) -> io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(io::Error::other(format!("deeper than {MAX_DEPTH} levels")));
        }
        for name in names(dirfd)? {
            let st = fstatat(dirfd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
            let len = rel.len();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.to_bytes());
            if self.skip.iter().any(|s| s.as_slice() == rel.as_slice()) {
                (self.visit)(rel, &st);
                rel.truncate(len);
                continue;
            }
            let mut st = st;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                // A directory's link count counts its subdirectories; a
                // skipped one (the state directory, removed at close) is
                // not counted, so the parent's line does not change when
                // it goes.
                st.st_nlink = st
                    .st_nlink
                    .saturating_sub(self.skipped_dirs_in(dirfd, &name, rel));
            }
            self.entry(dirfd, &name, rel, &st)?;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_dev == self.root_dev {
                let sub = openat(dirfd, name.as_c_str(), dir_flags(), Mode::empty())?;
                self.dir(sub.as_fd(), rel, depth + 1)?;
            }
            rel.truncate(len);
        }
        Ok(())
    }

    /// How many of the skipped paths are subdirectories directly inside
    /// directory `rel` (named `name` under `dirfd`) right now.
    fn skipped_dirs_in(&self, dirfd: BorrowedFd<'_>, name: &CStr, rel: &[u8]) -> u64 {
        let children: Vec<&[u8]> = self
            .skip
            .iter()
            .filter_map(|s| s.strip_prefix(rel)?.strip_prefix(b"/"))
            .filter(|child| !child.is_empty() && !child.contains(&b'/'))
            .collect();
        if children.is_empty() {
            return 0;
        }
        let Ok(sub) = openat(dirfd, name, dir_flags(), Mode::empty()) else {
            return 0;
        };
        let is_dir = |child: &&[u8]| {
            CString::new(child.to_vec()).ok().is_some_and(|c| {
                fstatat(&sub, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            })
        };
        children.into_iter().filter(is_dir).count() as u64
    }

    fn entry(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &CStr,
        rel: &[u8],
        st: &FileStat,
    ) -> io::Result<()> {
        let kind = if st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_dev != self.root_dev {
            "mountpoint"
        } else {
            kind_of(st.st_mode)
        };
        let size = if kind == "file" { st.st_size as u64 } else { 0 };
        // Symlinks: the target text. Regular files (staging): their bytes.
        let extra = match kind {
            "symlink" => escape(nix::fcntl::readlinkat(dirfd, name)?.as_bytes()),
            "file" if self.contents => file_digest(dirfd, name, st)?,
            _ => String::new(),
        };
        let entry = Entry {
            path: escape(rel),
            kind: kind.to_string(),
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            size,
            links: st.st_nlink,
            ino: st.st_ino,
            extra,
        };
        self.hasher.update(entry.line().as_bytes());
        if let Some(list) = &mut self.list {
            list.push(entry);
        }
        self.entries += 1;
        self.bytes += size;
        let item = || TempEntry {
            path: escape(rel),
            kind: kind.to_string(),
            size,
        };
        if !matches!(kind, "file" | "dir" | "symlink") {
            if self.special.len() < MAX_SPECIAL {
                self.special.push(item());
            } else {
                self.special_truncated = true;
            }
        }
        if self.listing.len() < self.max_listing {
            self.listing.push(item());
        }
        (self.visit)(rel, st);
        Ok(())
    }
}

/// What one walk found.
struct Walked {
    inventory: Inventory,
    listing: Vec<TempEntry>,
    special: Vec<TempEntry>,
    special_truncated: bool,
    list: Option<Listing>,
}

/// A digest over one canonical line per entry ([`Entry::line`]), in walk
/// order (each directory's names sorted, a directory's entries right after
/// it): type, mode, owner, size, link count, inode, path, and a symlink's
/// target text or, with `contents`, a regular file's SHA-256 (so a file
/// rewritten in place with its size and mtime restored changes the digest,
/// and so does one replaced by a hard link or renamed over). Nothing else
/// (mtime, gid) is in it. With `list`, every entry is also kept.
fn walk(
    dirfd: BorrowedFd<'_>,
    max_listing: usize,
    contents: bool,
    list: bool,
    skip: &[Vec<u8>],
    visit: &mut dyn FnMut(&[u8], &FileStat),
) -> io::Result<Walked> {
    let root = fstat(dirfd)?;
    let mut w = Walk {
        root_dev: root.st_dev,
        hasher: Sha256::new(),
        entries: 0,
        bytes: 0,
        listing: Vec::new(),
        max_listing,
        contents,
        special: Vec::new(),
        special_truncated: false,
        list: list.then(Listing::default),
        skip,
        visit,
    };
    w.dir(dirfd, &mut Vec::new(), 0)?;
    Ok(Walked {
        inventory: Inventory {
            entries: w.entries,
            bytes: w.bytes,
            digest: hex(&w.hasher.finalize()),
        },
        listing: w.listing,
        special: w.special,
        special_truncated: w.special_truncated,
        list: w.list,
    })
}

/// Inventory of the temp root under `dirfd` (names, types, modes, owners,
/// sizes; not file contents: it is removed, not compared), with the first
/// `max_listing` entries and every socket, FIFO, device and mount point
/// (up to [`MAX_SPECIAL`] more) for people.
pub fn inventory_fd(
    dirfd: BorrowedFd<'_>,
    max_listing: usize,
) -> io::Result<(Inventory, Vec<TempEntry>)> {
    let w = walk(
        dirfd,
        max_listing,
        false,
        false,
        &[],
        &mut |_: &[u8], _: &FileStat| {},
    )?;
    let mut listing = w.listing;
    for e in w.special {
        if !listing.contains(&e) {
            listing.push(e);
        }
    }
    Ok((w.inventory, listing))
}

/// Full inventory of a directory named by path (the last component must not
/// be a symlink), regular files' bytes included.
pub fn inventory(path: &Path) -> io::Result<Inventory> {
    let fd = open_dir(path)?;
    Ok(walk(
        fd.as_fd(),
        0,
        true,
        false,
        &[],
        &mut |_: &[u8], _: &FileStat| {},
    )?
    .inventory)
}

/// The staging directory as a record: identity and full inventory from one
/// descriptor, and its sockets, FIFOs and devices named.
pub fn staging(path: &Path) -> io::Result<StagingInventoried> {
    Ok(staging_open(path, None)?.0)
}

/// [`staging`], and the descriptor it was taken through (so that what is
/// done next, the holder scan, is of the same directory). `private`: the
/// watchdog's own files in the stage, left out (docs/stage.md, "The
/// watchdog's own place"); the record names them.
pub fn staging_open(
    path: &Path,
    private: Option<&PrivateState>,
) -> io::Result<(StagingInventoried, OwnedFd)> {
    let (inv, _, fd) = staging_walk(path, false, private)?;
    Ok((inv, fd))
}

/// [`staging`] with every entry listed (up to [`listing::MAX_LISTED`]):
/// the baseline at start and the walk at close, which are compared entry by
/// entry to name what changed during the run (docs/stage.md).
pub fn staging_listed(
    path: &Path,
    private: Option<&PrivateState>,
) -> io::Result<(StagingInventoried, Listing)> {
    let (inv, list, _) = staging_walk(path, true, private)?;
    Ok((inv, list.unwrap_or_default()))
}

/// [`staging`] of a directory already open as `dirfd` (the descriptor a
/// caller reached without symlinks and keeps acting through; `path` names
/// it in the record): what `rea-stage remove` checks against the log.
pub fn staging_fd(
    dirfd: BorrowedFd<'_>,
    path: &Path,
    private: Option<&PrivateState>,
) -> io::Result<StagingInventoried> {
    let st = fstat(dirfd)?;
    let identity = identity_of(&std::path::absolute(path)?, &st);
    let skip = private.map(PrivateState::skipped).unwrap_or_default();
    let w = walk(
        dirfd,
        0,
        true,
        false,
        &skip,
        &mut |_: &[u8], _: &FileStat| {},
    )?;
    Ok(StagingInventoried {
        identity,
        inventory: w.inventory,
        special: w.special,
        special_truncated: w.special_truncated,
        unreadable: None,
        private: private.cloned(),
    })
}

/// What `rel` (components joined by `/`) is under `dirfd`, reached one
/// component at a time without following a link anywhere: `None` when
/// it does not exist; an error when a component on the way is a link or
/// not a directory (`ELOOP`, `ENOTDIR`) or cannot be read.
pub fn stat_under(dirfd: BorrowedFd<'_>, rel: &str) -> io::Result<Option<FileStat>> {
    let parts: Vec<&str> = rel.split('/').collect();
    let Some((last, walk)) = parts.split_last() else {
        return Ok(None);
    };
    let mut dir: Option<OwnedFd> = None;
    for p in walk {
        let at = dir.as_ref().map_or(dirfd, |d| d.as_fd());
        match openat(at, *p, dir_flags(), Mode::empty()) {
            Ok(fd) => dir = Some(fd),
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    let at = dir.as_ref().map_or(dirfd, |d| d.as_fd());
    match fstatat(at, *last, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(nix::errno::Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One entry of a walk as the removal needs it: its path's bytes (relative
/// to the walked directory, `/` between components) and what `fstatat`
/// without following a link said it was.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub raw: Vec<u8>,
    pub dev: u64,
    pub ino: u64,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
}

/// The staging walk of `dirfd` (the same canonical lines, so the same
/// digest as [`staging`], `private` left out of it), and every entry it
/// saw as a [`Node`], in walk order, the private ones included (they go
/// with the stage); at most `max` nodes (`None` past it).
pub fn staging_nodes(
    dirfd: BorrowedFd<'_>,
    max: usize,
    private: Option<&PrivateState>,
) -> io::Result<(Inventory, Option<Vec<Node>>)> {
    let mut nodes = Some(Vec::new());
    let mut keep = |rel: &[u8], st: &FileStat| match &mut nodes {
        Some(n) if n.len() < max => n.push(Node {
            raw: rel.to_vec(),
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
        }),
        _ => nodes = None,
    };
    let skip = private.map(PrivateState::skipped).unwrap_or_default();
    let w = walk(dirfd, 0, true, false, &skip, &mut keep)?;
    Ok((w.inventory, nodes))
}

fn staging_walk(
    path: &Path,
    list: bool,
    private: Option<&PrivateState>,
) -> io::Result<(StagingInventoried, Option<Listing>, OwnedFd)> {
    let fd = open_dir(path)?;
    let st = fstat(&fd)?;
    let identity = identity_of(&std::path::absolute(path)?, &st);
    let skip = private.map(PrivateState::skipped).unwrap_or_default();
    let w = walk(
        fd.as_fd(),
        0,
        true,
        list,
        &skip,
        &mut |_: &[u8], _: &FileStat| {},
    )?;
    let inv = StagingInventoried {
        identity,
        inventory: w.inventory,
        special: w.special,
        special_truncated: w.special_truncated,
        unreadable: None,
        private: private.cloned(),
    };
    Ok((inv, w.list, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn inventory_sees_changes_and_never_follows_links() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("stage");
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/f"), b"12345").unwrap();
        symlink("/etc", d.join("etc-link")).unwrap();
        let inv1 = inventory(&d).unwrap();
        assert_eq!(inv1.entries, 4);
        assert_eq!(inv1.bytes, 5);
        assert_eq!(
            inventory(&d).unwrap(),
            inv1,
            "an unchanged tree has one digest"
        );
        fs::write(d.join("a/b/f"), b"123456").unwrap();
        assert_ne!(inventory(&d).unwrap().digest, inv1.digest);
        // A symlink to the directory is refused, not followed.
        symlink(&d, t.path().join("alias")).unwrap();
        assert!(dir_identity(&t.path().join("alias")).is_err());
    }

    #[test]
    fn remove_tree_leaves_link_targets_alone() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"x").unwrap();
        let tmp = t.path().join("tmp");
        fs::create_dir_all(tmp.join("deep/er")).unwrap();
        fs::write(tmp.join("deep/er/file"), b"y").unwrap();
        symlink(&outside, tmp.join("deep/link")).unwrap();
        let ident = dir_identity(&tmp).unwrap();
        let parent = open_dir(t.path()).unwrap();
        remove_tree_at(parent.as_fd(), OsStr::new("tmp"), &ident).unwrap();
        assert!(!tmp.exists());
        assert!(outside.join("keep").exists());
    }

    #[test]
    fn remove_tree_refuses_a_replaced_directory() {
        let t = tempfile::tempdir().unwrap();
        let created = t.path().join("created");
        fs::create_dir(&created).unwrap();
        let ident = dir_identity(&created).unwrap();
        // "tmp" is now some other directory than the one the identity names.
        let tmp = t.path().join("tmp");
        fs::create_dir(&tmp).unwrap();
        fs::write(tmp.join("precious"), b"z").unwrap();
        let parent = open_dir(t.path()).unwrap();
        let e = remove_tree_at(parent.as_fd(), OsStr::new("tmp"), &ident).unwrap_err();
        assert!(e.to_string().contains("no longer"), "{e}");
        assert!(tmp.join("precious").exists());
    }
}
