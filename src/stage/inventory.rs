//! The stage's listing, taken through its descriptor: every entry with
//! `fstatat(AT_SYMLINK_NOFOLLOW)` (uploads are never read: the decision
//! needs only their metadata, and a huge sparse file must not stall it),
//! and the receipt, when its size is at most [`MAX_RECEIPT`], read and
//! hashed through a descriptor checked to be that entry
//! (`O_NOFOLLOW|O_NONBLOCK`, then fstat: a FIFO swapped in cannot block the
//! read), never more than [`MAX_RECEIPT`] + 1 bytes.

use std::ffi::CStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use sha2::{Digest, Sha256};

use super::decide::{escape_name, Entry, EntryType};
use super::path::dir_flags;
use super::receipt::MAX_RECEIPT;
use super::RECEIPT_NAME;

/// Entries listed at most; a stage with more is refused (`too_many_entries`).
pub const MAX_ENTRIES: usize = 256;

pub struct Listing {
    pub entries: Vec<Entry>,
    /// Each entry's name as the bytes it has (for the removal).
    pub raw: Vec<Vec<u8>>,
    pub truncated: bool,
    /// Names whose file changed between `fstatat` and the read.
    pub changed: Vec<String>,
    /// The receipt's bytes (a regular file of at most [`MAX_RECEIPT`] bytes).
    pub receipt: Option<Vec<u8>>,
}

/// The names in `dirfd` (not `.`/`..`), sorted by their bytes; at most
/// `max` of them, and whether there were more.
pub fn names(dirfd: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<Vec<u8>>, bool)> {
    let dup = openat(dirfd, ".", dir_flags(), Mode::empty())?;
    let mut dir = Dir::from_fd(dup)?;
    let mut out = Vec::new();
    let mut more = false;
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if out.len() == max {
            more = true;
            break;
        }
        out.push(name.to_vec());
    }
    out.sort();
    Ok((out, more))
}

pub fn entry_of(name: &[u8], st: &FileStat) -> Entry {
    Entry {
        name: escape_name(name),
        kind: EntryType::of_mode(st.st_mode),
        size: st.st_size as u64,
        uid: st.st_uid,
        nlink: st.st_nlink,
        dev: st.st_dev,
        ino: st.st_ino,
        sha256: None,
    }
}

/// Reads and hashes the receipt `name` (at most `keep` bytes: its size was
/// checked). `Ok(None)`: the entry is no longer the file that was listed
/// (another inode, not a regular file, or longer than it was).
fn read_receipt(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    st: &FileStat,
    keep: u64,
) -> io::Result<Option<(String, Vec<u8>)>> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = match openat(dirfd, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let now = fstat(&fd)?;
    if now.st_mode & libc::S_IFMT != libc::S_IFREG
        || (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)
    {
        return Ok(None);
    }
    let mut kept = Vec::new();
    std::fs::File::from(fd)
        .take(keep + 1)
        .read_to_end(&mut kept)?;
    if kept.len() as u64 > keep {
        return Ok(None);
    }
    Ok(Some((crate::vocab::hex(&Sha256::digest(&kept)), kept)))
}

/// Lists the stage behind `dirfd`.
pub fn take(dirfd: BorrowedFd<'_>) -> io::Result<Listing> {
    let (names, truncated) = names(dirfd, MAX_ENTRIES)?;
    let mut out = Listing {
        entries: Vec::with_capacity(names.len()),
        raw: Vec::with_capacity(names.len()),
        truncated,
        changed: Vec::new(),
        receipt: None,
    };
    for raw in names {
        let c = std::ffi::CString::new(raw.clone()).map_err(io::Error::other)?;
        let st = match fstatat(dirfd, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT) => {
                out.changed.push(escape_name(&raw));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let mut e = entry_of(&raw, &st);
        // Only the receipt is ever read (uploads: their metadata alone),
        // and only when its size is one `begin` can have written.
        let is_receipt = raw.as_slice() == RECEIPT_NAME.as_bytes();
        if is_receipt && e.kind == EntryType::File && e.size <= MAX_RECEIPT {
            match read_receipt(dirfd, c.as_c_str(), &st, MAX_RECEIPT)? {
                None => out.changed.push(e.name.clone()),
                Some((sha, kept)) => {
                    e.sha256 = Some(sha);
                    out.receipt = Some(kept);
                }
            }
        }
        out.entries.push(e);
        out.raw.push(raw);
    }
    Ok(out)
}

/// Whether `name` under `dirfd` still is what `was` describes (type, inode,
/// links, owner, size), without following a link.
pub fn unchanged(dirfd: BorrowedFd<'_>, name: &CStr, was: &Entry) -> io::Result<bool> {
    let st = fstatat(dirfd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    let now = entry_of(name.to_bytes(), &st);
    Ok(now.kind == was.kind
        && (now.dev, now.ino, now.nlink, now.uid, now.size)
            == (was.dev, was.ino, was.nlink, was.uid, was.size))
}
