//! Reaching a directory without following a symlink anywhere on the way.
//!
//! A stage path is walked from `/` one component at a time, each opened
//! `O_DIRECTORY|O_NOFOLLOW` relative to the one before, so neither the
//! stage nor any directory above it can be a symlink (`..` is refused: it
//! would make the walk's meaning depend on where a symlink pointed). What
//! comes back is the parent's descriptor and the last name, so the stage
//! itself is created, opened and removed relative to that descriptor.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, Mode};

/// Flags every directory on the way is opened with.
pub fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Device, inode, owner and mode of an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Id {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub mode: u32,
}

impl Id {
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Id> {
        let st = fstat(fd)?;
        Ok(Id {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            mode: st.st_mode,
        })
    }
}

/// The parent directory of a stage, opened, and the stage's own name.
pub struct Parent {
    pub fd: OwnedFd,
    pub name: CString,
    /// The absolute, lexically normal path (for records and people).
    pub path: PathBuf,
}

/// Why a path cannot name a stage.
#[derive(Debug)]
pub enum PathError {
    /// Empty, `/`, `..` anywhere, a NUL byte, or no last name.
    Unusable(String),
    /// A component (the parent or above) is a symlink or not a directory.
    NotReal { at: PathBuf, err: io::Error },
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathError::Unusable(why) => write!(f, "{why}"),
            PathError::NotReal { at, err } => write!(
                f,
                "{} is not a real directory reached without symlinks ({err})",
                at.display()
            ),
        }
    }
}

/// Opens the parent of `path` component by component with `O_NOFOLLOW`.
pub fn open_parent(path: &Path) -> Result<Parent, PathError> {
    let abs = std::path::absolute(path)
        .map_err(|e| PathError::Unusable(format!("{}: {e}", path.display())))?;
    let mut parts: Vec<&OsStr> = Vec::new();
    for c in abs.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => parts.push(p),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(PathError::Unusable(format!(
                    "{}: a stage path may not contain `..`",
                    path.display()
                )))
            }
        }
    }
    let Some(last) = parts.pop() else {
        return Err(PathError::Unusable("`/` cannot be a stage".into()));
    };
    let cname = |p: &OsStr| {
        CString::new(p.as_bytes())
            .map_err(|_| PathError::Unusable(format!("{}: NUL in path", path.display())))
    };
    let name = cname(last)?;
    let mut at = PathBuf::from("/");
    let mut fd =
        openat(AT_FDCWD, "/", dir_flags(), Mode::empty()).map_err(|e| PathError::NotReal {
            at: at.clone(),
            err: e.into(),
        })?;
    for p in parts {
        at.push(p);
        let c = cname(p)?;
        fd = openat(fd.as_fd(), c.as_c_str(), dir_flags(), Mode::empty()).map_err(|e| {
            PathError::NotReal {
                at: at.clone(),
                err: e.into(),
            }
        })?;
    }
    at.push(last);
    Ok(Parent { fd, name, path: at })
}

impl Parent {
    /// Opens the stage itself (`O_DIRECTORY|O_NOFOLLOW`) relative to the parent.
    pub fn open_stage(&self) -> io::Result<OwnedFd> {
        Ok(openat(
            self.fd.as_fd(),
            self.name.as_c_str(),
            dir_flags(),
            Mode::empty(),
        )?)
    }

    /// The identity the stage's name has in the parent now (no link followed).
    pub fn stage_id_now(&self) -> io::Result<Id> {
        use nix::fcntl::AtFlags;
        let st = nix::sys::stat::fstatat(
            self.fd.as_fd(),
            self.name.as_c_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        Ok(Id {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            mode: st.st_mode,
        })
    }
}
