//! The private state directory (docs/architecture.md, "Start-up"):
//!
//! ```text
//! DIR/            0700, ours, created or found empty
//! DIR/requests    FIFO 0600: one JSON request per line
//! DIR/replies/    0700: reply FIFOs, created by callers
//! DIR/tmp/        0700: the private temp root (TMPDIR of every job)
//! DIR/ready.json  the ready line, for clients to find and bind the watchdog
//! ```

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmodat, fstat, mkdirat, FchmodatFlags, Mode};
use nix::unistd::mkfifoat;

use crate::inventory;
use crate::kinds::watchdog::DirIdentity;

pub use crate::protocol::{READY, REPLIES, REQUESTS, TMP};

pub struct StateDir {
    pub path: PathBuf,
    pub dir: OwnedFd,
    pub replies: OwnedFd,
    pub tmp: DirIdentity,
    /// The request FIFO, opened read-write and non-blocking: holding a
    /// writer ourselves means it never reports EOF as clients come and go.
    pub fifo: File,
}

fn err(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("state directory {}: {what}", path.display()))
}

/// Creates (or adopts an empty, private, own) state directory and its parts.
pub fn create(path: &Path) -> io::Result<StateDir> {
    let euid = nix::unistd::geteuid().as_raw();
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(path)
                .map_err(|e| err(path, format!("cannot create: {e}")))?;
        }
        Err(e) => return Err(err(path, e)),
        Ok(m) => {
            if !m.file_type().is_dir() {
                return Err(err(
                    path,
                    "exists and is not a directory (symlinks are refused)",
                ));
            }
            if m.uid() != euid {
                return Err(err(
                    path,
                    format!("owned by uid {}, not by us ({euid})", m.uid()),
                ));
            }
            if std::fs::read_dir(path)?.next().is_some() {
                return Err(err(
                    path,
                    "exists and is not empty (one state directory per action)",
                ));
            }
        }
    }
    let dir = inventory::open_dir(path).map_err(|e| err(path, e))?;
    let st = fstat(&dir)?;
    if st.st_uid != euid {
        return Err(err(path, "was replaced while being created"));
    }
    nix::sys::stat::fchmod(&dir, Mode::from_bits_truncate(0o700))?;

    mkfifoat(&dir, REQUESTS, Mode::from_bits_truncate(0o600))?;
    // umask may have taken bits away; the entries were just made by us in a
    // 0700 directory, so following (there is nothing to follow) is safe.
    fchmodat(
        &dir,
        REQUESTS,
        Mode::from_bits_truncate(0o600),
        FchmodatFlags::FollowSymlink,
    )?;
    for sub in [REPLIES, TMP] {
        mkdirat(&dir, sub, Mode::from_bits_truncate(0o700))?;
        fchmodat(
            &dir,
            sub,
            Mode::from_bits_truncate(0o700),
            FchmodatFlags::FollowSymlink,
        )?;
    }
    let fifo = openat(
        &dir,
        REQUESTS,
        OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )?;
    // A larger pipe (1 MiB where allowed; the default is 64 KiB) keeps room
    // for a well-behaved writer while a job floods the FIFO: the loop drains
    // it a budget at a time, and a full pipe would make every writer race
    // the flooder for each freed page. Best effort: the size is a tuning.
    let _ = nix::fcntl::fcntl(&fifo, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
    let replies = openat(
        &dir,
        REPLIES,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let tmp_fd = openat(
        &dir,
        TMP,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let tst = fstat(&tmp_fd)?;
    let abs = std::path::absolute(path)?;
    let tmp = DirIdentity {
        path: abs.join(TMP).to_string_lossy().into_owned(),
        dev: tst.st_dev,
        ino: tst.st_ino,
        uid: tst.st_uid,
        mode: tst.st_mode,
    };
    Ok(StateDir {
        path: abs,
        dir,
        replies,
        tmp,
        fifo: File::from(fifo),
    })
}

impl StateDir {
    /// The directory's device and inode, as made.
    pub fn id(&self) -> (u64, u64) {
        fstat(&self.dir).map_or((0, 0), |st| (st.st_dev, st.st_ino))
    }

    pub fn tmp_path(&self) -> PathBuf {
        self.path.join(TMP)
    }

    pub fn fifo_path(&self) -> PathBuf {
        self.path.join(REQUESTS)
    }

    /// Writes `ready.json` atomically (a client never reads half of it).
    pub fn write_ready(&self, line: &str) -> io::Result<()> {
        let tmp = self.path.join(".ready.json.tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(line.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.path.join(READY))
    }

    /// Inventories the temp root (for the record) and removes it, only if it
    /// is still the directory created at start.
    pub fn remove_tmp(&self) -> io::Result<()> {
        inventory::remove_tree_at(self.dir.as_fd(), OsStr::new(TMP), &self.tmp)
    }

    /// [`StateDir::remove_all`] in a helper with a deadline
    /// ([`crate::bounded`]): a stuck mount left in the directory must not
    /// keep exec from ending. What is left stays; `Err` says why.
    pub fn remove_all_bounded(&self) -> Result<(), crate::bounded::Failure> {
        let key = self.path.to_string_lossy();
        let keep = [self.dir.as_fd()];
        let limit = crate::bounded::STAGE_DEADLINE;
        crate::bounded::run("the state directory", &key, limit, &keep, || {
            self.remove_all().map_err(crate::bounded::WorkError::of)
        })
    }

    /// Removes the whole state directory (exec mode: it was private to us).
    pub fn remove_all(&self) -> io::Result<()> {
        inventory::remove_contents(self.dir.as_fd())?;
        std::fs::remove_dir(&self.path)
    }
}
