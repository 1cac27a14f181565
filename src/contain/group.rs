//! The action's own cgroup: [`ActionGroup`], made only by an exclusive
//! `mkdir` of `rea-<run id>` (or re-opened by its recorded inode), holding
//! the directory fd, its path and inode (the cgroup id).
//!
//! Like [`crate::process::pidfd::VerifiedPidFd`] for a process, the
//! identity carries its operations. Every file of the group is opened with
//! `openat` on the held directory fd, never by path, so a group removed and
//! recreated under the same name is never touched: its files are another
//! directory's. [`ActionGroup::kill`] (`cgroup.kill`) is, with
//! `VerifiedPidFd::signal`, the only way anything is ever killed
//! (docs/stop.md); no other code in the crate names `cgroup.kill`.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::discover::CGROUP2_MAGIC;

/// Every group this crate creates is named `rea-<run id>`.
pub const PREFIX: &str = "rea-";

/// The action's own cgroup (see the module doc).
#[derive(Debug)]
pub struct ActionGroup {
    /// The parent directory (the watchdog's own group), for `rmdir`.
    parent: OwnedFd,
    name: String,
    dir: OwnedFd,
    path: PathBuf,
    ino: u64,
    /// Made by [`ActionGroup::create`] and not yet removed: dropping it
    /// removes it if it is empty (a start that failed after making it,
    /// an early exit), so only a group with members outlives its
    /// watchdog. A group re-opened by its record (recovery, reconcile,
    /// a test) is never removed by a drop.
    owned: bool,
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL"))?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: valid NUL-terminated path; the fd returned is new and ours.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just returned by open; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn valid_name(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .is_some_and(crate::vocab::is_token)
}

impl ActionGroup {
    /// Creates `parent/rea-<run_id>` (exclusive: an existing directory is
    /// an error, never adopted) and opens it.
    pub fn create(parent: &Path, run_id: &str) -> io::Result<ActionGroup> {
        let name = format!("{PREFIX}{run_id}");
        if !valid_name(&name) {
            return Err(io::Error::other(format!("{name:?} is not a group name")));
        }
        let pfd = open_dir(parent)?;
        nix::sys::stat::mkdirat(&pfd, name.as_str(), Mode::from_bits_truncate(0o755))
            .map_err(io::Error::from)?;
        let opened = openat(&pfd, name.as_str(), dir_flags(), Mode::empty())
            .map_err(io::Error::from)
            .and_then(|dir| ActionGroup::from_parts(pfd.try_clone()?, &name, dir, parent))
            .map(|mut g| {
                g.owned = true;
                g
            });
        if opened.is_err() {
            let _ = unlinkat(&pfd, name.as_str(), UnlinkatFlags::RemoveDir);
        }
        opened
    }

    /// Re-opens a group from its recorded path and inode (recovery, a
    /// test's clean-up): only a `rea-` group on a cgroup2 mount whose
    /// directory still has the recorded inode.
    pub fn open_recorded(path: &Path, ino: u64) -> io::Result<ActionGroup> {
        ActionGroup::locate(path, ino).map_err(|m| io::Error::other(m.to_string()))
    }

    /// [`ActionGroup::open_recorded`], saying why not in a way a report can
    /// act on: gone (no such directory), recreated (the name now names a
    /// directory with another inode: another group, never touched), or
    /// unreachable. The name must be a `rea-` group's and the directory
    /// must be on cgroup2, so a forged record cannot point this at an
    /// ordinary directory with a file called `cgroup.kill` in it.
    pub fn locate(path: &Path, ino: u64) -> Result<ActionGroup, Missing> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| valid_name(n))
            .ok_or_else(|| Missing::NotAGroup(format!("{} is not a rea group", path.display())))?;
        let parent = path
            .parent()
            .ok_or_else(|| Missing::NotAGroup(format!("{} has no parent", path.display())))?;
        let missing = |e: io::Error| {
            if e.raw_os_error() == Some(libc::ENOENT) {
                Missing::Gone(format!("{} does not exist", path.display()))
            } else {
                Missing::Unreachable(format!("{}: {e}", path.display()))
            }
        };
        let pfd = open_dir(parent).map_err(missing)?;
        let dir = openat(&pfd, name, dir_flags(), Mode::empty())
            .map_err(|e| missing(io::Error::from(e)))?;
        if !on_cgroup2(&dir) {
            return Err(Missing::NotAGroup(format!(
                "{} is not on a cgroup2 mount",
                path.display()
            )));
        }
        let g = ActionGroup::from_parts(pfd, name, dir, parent).map_err(missing)?;
        if g.ino != ino {
            return Err(Missing::Recreated {
                ino_now: g.ino,
                detail: format!(
                    "{} has inode {}, the record says {ino}: another group",
                    path.display(),
                    g.ino
                ),
            });
        }
        Ok(g)
    }

    fn from_parts(parent: OwnedFd, name: &str, dir: OwnedFd, at: &Path) -> io::Result<Self> {
        let ino = fstat(&dir).map_err(io::Error::from)?.st_ino;
        Ok(ActionGroup {
            parent,
            name: name.to_string(),
            dir,
            path: at.join(name),
            ino,
            owned: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's inode: the cgroup id.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The name still names the directory held (same inode), so what is
    /// done through the held fd is done to the group the records name.
    fn check(&self) -> io::Result<()> {
        let held = fstat(&self.dir).map_err(io::Error::from)?.st_ino;
        let named = fstatat(
            &self.parent,
            self.name.as_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io::Error::from)?
        .st_ino;
        if held != self.ino || named != self.ino {
            return Err(io::Error::other(format!(
                "{} is no longer the group created (inode {named}, held {held}, recorded {})",
                self.path.display(),
                self.ino
            )));
        }
        Ok(())
    }

    fn open_file(&self, name: &str, flags: OFlag) -> io::Result<File> {
        let fd = openat(
            &self.dir,
            name,
            flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        Ok(File::from(fd))
    }

    fn read_file(&self, name: &str) -> io::Result<String> {
        let mut s = String::new();
        self.open_file(name, OFlag::O_RDONLY)?
            .read_to_string(&mut s)?;
        Ok(s)
    }

    /// A write-only `cgroup.procs` fd for placing jobs: a child writes `0`
    /// to it between fork and exec (docs/containment.md).
    pub fn procs_fd(&self) -> io::Result<OwnedFd> {
        self.check()?;
        Ok(self.open_file("cgroup.procs", OFlag::O_WRONLY)?.into())
    }

    /// The group's processes now (`cgroup.procs`), as pids of this
    /// process's PID namespace.
    pub fn members(&self) -> io::Result<Vec<i32>> {
        let text = self.read_file("cgroup.procs")?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// The members of the group and of every group nested in it (a job
    /// may make groups inside the action's; `cgroup.kill` reaches them
    /// all, so a census before it must see them all).
    pub fn members_deep(&self) -> io::Result<Vec<i32>> {
        let mut all = self.members()?;
        all.extend(super::nested::members(self.dir.as_fd())?);
        Ok(all)
    }

    /// `populated` of `cgroup.events`: some process is in the group (or a
    /// descendant group).
    pub fn populated(&self) -> io::Result<bool> {
        let text = self.read_file("cgroup.events")?;
        text.lines()
            .find_map(|l| l.strip_prefix("populated "))
            .map(|v| v.trim() == "1")
            .ok_or_else(|| io::Error::other("cgroup.events has no populated line"))
    }

    /// Waits (polling, at most `limit`) until the group is not populated.
    pub fn wait_empty(&self, limit: std::time::Duration) -> io::Result<bool> {
        let until = std::time::Instant::now() + limit;
        loop {
            if !self.populated()? {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Freezes the group (`cgroup.freeze` 1) and waits, at most `limit`,
    /// for `frozen 1` in `cgroup.events`; returns whether it froze. A
    /// frozen member neither runs nor forks; signals stay pending until
    /// [`ActionGroup::thaw`]; SIGKILL (and `cgroup.kill`) still ends it.
    pub fn freeze(&self, limit: std::time::Duration) -> io::Result<bool> {
        self.check()?;
        self.open_file("cgroup.freeze", OFlag::O_WRONLY)?
            .write_all(b"1")?;
        let until = std::time::Instant::now() + limit;
        loop {
            let events = self.read_file("cgroup.events")?;
            if events.lines().any(|l| l.trim() == "frozen 1") {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Undoes [`ActionGroup::freeze`] (`cgroup.freeze` 0).
    pub fn thaw(&self) -> io::Result<()> {
        self.open_file("cgroup.freeze", OFlag::O_WRONLY)?
            .write_all(b"0")
    }

    /// SIGKILL to every member, atomically with respect to fork
    /// (`cgroup.kill`, written through the held directory fd after the
    /// inode is checked again).
    pub fn kill(&self) -> io::Result<()> {
        self.check()?;
        self.open_file("cgroup.kill", OFlag::O_WRONLY)?
            .write_all(b"1")
    }

    /// `rmdir`, after checking the name still names this group; the group
    /// back with the error when it cannot be removed (EBUSY: members left).
    pub fn remove(mut self) -> Result<(), (ActionGroup, io::Error)> {
        match self.rmdir() {
            Ok(()) => {
                self.owned = false;
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }

    /// Removes the nested groups (deepest first), then the group.
    fn rmdir(&self) -> io::Result<()> {
        self.check()?;
        super::nested::remove(self.dir.as_fd())?;
        unlinkat(&self.parent, self.name.as_str(), UnlinkatFlags::RemoveDir)
            .map_err(io::Error::from)
    }
}

impl Drop for ActionGroup {
    /// See `owned`: a group this process made goes when it is empty (rmdir
    /// of a populated group fails with EBUSY and leaves it, for recovery).
    fn drop(&mut self) {
        if self.owned && matches!(self.populated(), Ok(false)) {
            let _ = self.rmdir();
        }
    }
}

/// Why a recorded group could not be re-opened ([`ActionGroup::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// No directory has the recorded name.
    Gone(String),
    /// The name now names a directory with another inode.
    Recreated { ino_now: u64, detail: String },
    /// Not a `rea-` name, or not on cgroup2.
    NotAGroup(String),
    /// It could not be opened or stat'd (permissions, I/O).
    Unreachable(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Gone(d)
            | Missing::Recreated { detail: d, .. }
            | Missing::NotAGroup(d)
            | Missing::Unreachable(d) => f.write_str(d),
        }
    }
}

fn on_cgroup2(dir: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed plain-old-data out-struct.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid open descriptor and a valid out-pointer.
    let rc = unsafe { libc::fstatfs(dir.as_raw_fd(), &mut fs) };
    rc == 0 && fs.f_type as i64 == CGROUP2_MAGIC
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_rea_named_directory_off_cgroup2_is_not_a_group() {
        // What a forged containment record could name: an ordinary
        // directory with the right name and inode, and a cgroup.kill file.
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("rea-forged");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup.kill"), b"").unwrap();
        let ino = std::fs::metadata(&dir).unwrap().ino();
        match ActionGroup::locate(&dir, ino) {
            Err(Missing::NotAGroup(d)) => assert!(d.contains("cgroup2"), "{d}"),
            other => panic!("{other:?}"),
        }
        assert!(ActionGroup::open_recorded(&dir, ino).is_err());
        assert_eq!(std::fs::read(dir.join("cgroup.kill")).unwrap(), b"");
        let gone = t.path().join("rea-gone");
        assert!(matches!(
            ActionGroup::locate(&gone, 1),
            Err(Missing::Gone(_))
        ));
        let other = t.path().join("not-rea");
        std::fs::create_dir(&other).unwrap();
        assert!(matches!(
            ActionGroup::locate(&other, 1),
            Err(Missing::NotAGroup(_))
        ));
    }
}
