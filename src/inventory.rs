//! Directory identity, inventories and the temp root's removal.
//!
//! Everything walks by descriptor (`openat` with `O_NOFOLLOW`, `fstatat`
//! with `AT_SYMLINK_NOFOLLOW`): no symlink is ever followed and no other
//! filesystem is entered, so neither an inventory nor a removal can be
//! steered outside the directory it was asked about.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use sha2::{Digest, Sha256};

use crate::audit::record::{DirIdentity, Inventory, TempEntry};
use crate::vocab::hex;

/// Deepest directory nesting walked; deeper trees are an error, not a hang.
const MAX_DEPTH: usize = 256;

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

/// Bytes as printable ASCII, everything else (and `\`) as `\xNN`.
fn escape(bytes: &[u8]) -> String {
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
    visit: &'a mut dyn FnMut(&[u8], &FileStat),
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
            self.entry(dirfd, &name, rel, &st)?;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_dev == self.root_dev {
                let sub = openat(dirfd, name.as_c_str(), dir_flags(), Mode::empty())?;
                self.dir(sub.as_fd(), rel, depth + 1)?;
            }
            rel.truncate(len);
        }
        Ok(())
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
        let target = if kind == "symlink" {
            let t = nix::fcntl::readlinkat(dirfd, name)?;
            escape(t.as_bytes())
        } else {
            String::new()
        };
        let size = if kind == "file" { st.st_size as u64 } else { 0 };
        let line = format!(
            "{kind}\t{:o}\t{}\t{}\t{size}\t{}.{:09}\t{}\t{target}\n",
            st.st_mode & 0o7777,
            st.st_uid,
            st.st_gid,
            st.st_mtime,
            st.st_mtime_nsec,
            escape(rel),
        );
        self.hasher.update(line.as_bytes());
        self.entries += 1;
        self.bytes += size;
        if self.listing.len() < self.max_listing {
            self.listing.push(TempEntry {
                path: escape(rel),
                kind: kind.to_string(),
                size,
            });
        }
        (self.visit)(rel, st);
        Ok(())
    }
}

/// Inventory of everything under `dirfd`: a digest over one canonical line
/// per entry (kind, mode, owner, size, mtime, escaped path, link target),
/// in sorted order, plus the first `max_listing` entries for people.
pub fn inventory_fd(
    dirfd: BorrowedFd<'_>,
    max_listing: usize,
) -> io::Result<(Inventory, Vec<TempEntry>)> {
    let root = fstat(dirfd)?;
    let mut nothing = |_: &[u8], _: &FileStat| {};
    let mut w = Walk {
        root_dev: root.st_dev,
        hasher: Sha256::new(),
        entries: 0,
        bytes: 0,
        listing: Vec::new(),
        max_listing,
        visit: &mut nothing,
    };
    w.dir(dirfd, &mut Vec::new(), 0)?;
    let inv = Inventory {
        entries: w.entries,
        bytes: w.bytes,
        digest: hex(&w.hasher.finalize()),
    };
    Ok((inv, w.listing))
}

/// Inventory of a directory named by path (the last component must not be a symlink).
pub fn inventory(path: &Path) -> io::Result<Inventory> {
    let fd = open_dir(path)?;
    Ok(inventory_fd(fd.as_fd(), 0)?.0)
}

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

#[cfg(test)]
mod tests {
    use super::*;
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
