//! The removal: each entry through the stage's descriptor (`unlinkat`)
//! after checking it is still the entry inventoried, then the directory
//! through its parent's descriptor (`unlinkat(AT_REMOVEDIR)`) after checking
//! the name still leads to the directory that was opened. A change found on
//! the way is a [`Refusal`] (`concurrent_change`), never forced.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};

use nix::errno::Errno;
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::decide::{Code, Entry, Refusal};
use super::inventory::{names, unchanged};
use super::path::{Id, Parent};

/// The test hook: a FIFO `discard` reads one byte from before its final
/// `rmdir` (documented in `rea-stage --help`). It can only delay: every
/// check after it runs as it would have, and any failure of the hook
/// itself is ignored.
pub const PAUSE_ENV: &str = "REA_STAGE_PAUSE_BEFORE_RMDIR";
/// The second test hook, the same way: read one byte from this FIFO after
/// `.rea-discarding` was created and before discard looks for
/// `.rea-exec-started` (so before its first unlink).
pub const PAUSE_UNLINK_ENV: &str = "REA_STAGE_PAUSE_BEFORE_UNLINK";

fn concurrent(name: Option<&str>, detail: String) -> Refusal {
    Refusal::new(Code::ConcurrentChange, name, detail)
}

/// Removes one inventoried entry, if it is still that entry.
pub fn unlink_entry(dirfd: BorrowedFd<'_>, raw: &[u8], was: &Entry) -> Result<(), Refusal> {
    let name = Some(was.name.as_str());
    let c = CString::new(raw).map_err(|_| Refusal::new(Code::IoError, name, "NUL in a name"))?;
    match unchanged(dirfd, c.as_c_str(), was) {
        Ok(true) => {}
        Ok(false) => {
            return Err(concurrent(
                name,
                format!("{} changed after it was inventoried", was.name),
            ))
        }
        Err(e) => {
            return Err(concurrent(
                name,
                format!("{} is gone or unreadable: {e}", was.name),
            ))
        }
    }
    match unlinkat(dirfd, c.as_c_str(), UnlinkatFlags::NoRemoveDir) {
        Ok(()) => Ok(()),
        Err(Errno::ENOENT) => Err(concurrent(
            name,
            format!("{} vanished before it was removed", was.name),
        )),
        Err(e) => Err(Refusal::new(
            Code::IoError,
            name,
            format!("unlink {}: {e}", was.name),
        )),
    }
}

/// Why a marker rea created was not removed ([`unlink_own`]). Its text is
/// what the discard log and the watchdog's refusal record say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnlinkOwnError {
    /// The name could not be looked at (gone, or the directory failed).
    Stat { name: String, errno: Errno },
    /// The name is no longer the regular file of the inode created: someone
    /// replaced it, and what is there now is not ours to remove.
    Replaced {
        name: String,
        now: u64,
        created: u64,
    },
    /// `unlinkat` itself failed.
    Unlink { name: String, errno: Errno },
}

impl std::fmt::Display for UnlinkOwnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnlinkOwnError::Stat { name, errno } => write!(f, "{name}: {errno}"),
            UnlinkOwnError::Replaced { name, now, created } => write!(
                f,
                "{name} is now inode {now}, not the one created (inode {created})"
            ),
            UnlinkOwnError::Unlink { name, errno } => write!(f, "unlink {name}: {errno}"),
        }
    }
}

impl std::error::Error for UnlinkOwnError {}

/// Removes `name` (a marker rea created) if it is still the regular file
/// of inode `ino`; the error says why not.
pub fn unlink_own(dirfd: BorrowedFd<'_>, name: &str, ino: u64) -> Result<(), UnlinkOwnError> {
    use nix::fcntl::AtFlags;
    let named = || name.to_string();
    let st =
        nix::sys::stat::fstatat(dirfd, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|errno| {
            UnlinkOwnError::Stat {
                name: named(),
                errno,
            }
        })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_ino != ino {
        return Err(UnlinkOwnError::Replaced {
            name: named(),
            now: st.st_ino,
            created: ino,
        });
    }
    unlinkat(dirfd, name, UnlinkatFlags::NoRemoveDir).map_err(|errno| UnlinkOwnError::Unlink {
        name: named(),
        errno,
    })
}

/// Waits on the pause FIFO named by `var` if the hook is set (tests only).
pub fn pause_hook(var: &str) {
    let Some(path) = std::env::var_os(var) else {
        return;
    };
    let Ok(mut f) = std::fs::File::open(&path) else {
        return;
    };
    let is_fifo = f
        .metadata()
        .map(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()))
        .unwrap_or(false);
    if is_fifo {
        let mut b = [0u8; 1];
        let _ = f.read(&mut b);
    }
}

/// Removes the (now empty) stage, if its name still leads to `opened`.
pub fn remove_stage(parent: &Parent, stage: BorrowedFd<'_>, opened: Id) -> Result<(), Refusal> {
    pause_hook(PAUSE_ENV);
    match parent.stage_id_now() {
        Ok(now) if (now.dev, now.ino) == (opened.dev, opened.ino) => {}
        Ok(now) => {
            return Err(concurrent(
                None,
                format!(
                    "the stage's name now leads to dev {} inode {}, not the directory emptied (dev {} inode {})",
                    now.dev, now.ino, opened.dev, opened.ino
                ),
            ))
        }
        Err(e) => return Err(concurrent(None, format!("the stage's name is gone: {e}"))),
    }
    match unlinkat(
        parent.fd.as_fd(),
        parent.name.as_c_str(),
        UnlinkatFlags::RemoveDir,
    ) {
        Ok(()) => Ok(()),
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {
            let now = match names(stage, 8) {
                Ok((n, more)) => {
                    let mut s: Vec<String> =
                        n.iter().map(|b| super::decide::escape_name(b)).collect();
                    if more {
                        s.push("...".into());
                    }
                    s.join(", ")
                }
                Err(e) => format!("(cannot list: {e})"),
            };
            Err(concurrent(
                None,
                format!("rmdir: the stage is not empty (new entries: {now}); nothing forced"),
            ))
        }
        Err(e) => Err(Refusal::new(Code::IoError, None, format!("rmdir: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the discard log and the watchdog's refusal carry.
    #[test]
    fn why_a_marker_stays_reads_as_before() {
        let e = UnlinkOwnError::Replaced {
            name: ".rea-discarding".into(),
            now: 12,
            created: 11,
        };
        assert_eq!(
            e.to_string(),
            ".rea-discarding is now inode 12, not the one created (inode 11)"
        );
        let e = UnlinkOwnError::Unlink {
            name: "m".into(),
            errno: Errno::EBUSY,
        };
        assert_eq!(e.to_string(), format!("unlink m: {}", Errno::EBUSY));
    }
}
