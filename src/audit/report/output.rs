//! Where the page goes, and how it gets there whole or not at all.
//!
//! `-o FILE` names one of three things. A descriptor this process already
//! has (`-`, `/dev/stdout`, `/dev/fd/N`, or a link that leads to one): the
//! page is written to it. An existing file that is not a regular one once
//! links are followed (a FIFO, a terminal, `/dev/null`): the page is
//! written to it, never replaced (a regular file renamed over `/dev/null`
//! would, as root, replace the device for everyone). Anything else, a
//! regular file or no file yet: the page goes to a temporary file beside
//! it, renamed over it when whole; the temporary file is removed however
//! the run ends (a [`Temp`] guard, dropped on unwinding too).
//!
//! The page is always written whole before anything reaches a stream: to
//! the temporary file, or to an anonymous memory file (`memfd_create`)
//! copied out at the end, so that a page found untrustworthy at its last
//! check (the log changed while the table was read) can be replaced by
//! one that says so before anyone reads a byte of it. The page's size is
//! bounded by its caps (the table's rows, the drawings' lanes), whatever
//! the log's. Nothing is ever written inside the staging directory being
//! verified: that would change the stage the verdict is about.

use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use super::{Failure, Output};
use crate::audit::people::escape;

fn shown(p: &Path) -> String {
    escape(&p.display().to_string())
}

/// Where the page goes (see the module's documentation).
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// A descriptor of this process, and how to name it to people.
    Fd(RawFd, String),
    /// An existing file that is not a regular one: written to.
    Direct(PathBuf),
    /// A regular file, or none yet: a temporary file renamed over it.
    Replace(PathBuf),
}

/// `p` with `.` and repeated slashes dropped (`..` kept: it is not lexical
/// when links are involved).
fn tidy(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// The descriptor a path names by itself: `/dev/stdin`, `/dev/stdout`,
/// `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`,
/// `/proc/PID/fd/N` of this process.
fn fd_named(p: &Path) -> Option<RawFd> {
    let p = tidy(p);
    let s = p.to_str()?;
    match s {
        "/dev/stdin" => return Some(0),
        "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        _ => {}
    }
    let me = format!("/proc/{}/fd/", std::process::id());
    let n = [
        "/dev/fd/",
        "/proc/self/fd/",
        "/proc/thread-self/fd/",
        me.as_str(),
    ]
    .iter()
    .find_map(|prefix| s.strip_prefix(prefix))?;
    n.parse::<RawFd>().ok().filter(|&n| n >= 0)
}

/// The descriptor `p` leads to, following at most a few links by their
/// text (never through `/proc`'s magic links, which would lead to
/// whatever file the descriptor has open instead).
fn leads_to_fd(p: &Path) -> Option<RawFd> {
    let mut p = std::path::absolute(p).ok()?;
    for _ in 0..16 {
        if let Some(fd) = fd_named(&p) {
            return Some(fd);
        }
        let next = std::fs::read_link(&p).ok()?;
        p = match p.parent() {
            Some(dir) => dir.join(next),
            None => next,
        };
    }
    None
}

/// The directory a new file named `p` is made in.
fn dir_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether `dir` is `stage` or inside it (by device and inode, each
/// ancestor of its canonical path).
fn under(dir: &Path, stage: (u64, u64)) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    dir.ancestors()
        .any(|a| std::fs::metadata(a).is_ok_and(|m| (m.dev(), m.ino()) == stage))
}

/// The stage's device and inode, read in a helper with a deadline
/// ([`crate::bounded`]): a stage on a stuck mount is not compared (verify
/// then says `stage_unreadable` without waiting for it a second time).
fn stage_key(stage: &Path) -> Option<(u64, u64)> {
    let key = stage.to_string_lossy();
    let what = format!("the stage {}", stage.display());
    let stat = || {
        std::fs::metadata(stage)
            .map(|m| (m.dev(), m.ino()))
            .map_err(crate::bounded::WorkError::of)
    };
    crate::bounded::run(&what, &key, crate::bounded::STAGE_DEADLINE, &[], stat).ok()
}

impl Target {
    /// What `-o` names. Usage errors: a directory, and anything inside
    /// `staging` (the page would change the stage being verified).
    pub fn resolve(out: &Output, staging: Option<&Path>) -> Result<Target, Failure> {
        let t = match out {
            Output::Stdout => Target::Fd(1, "standard output".into()),
            Output::File(p) => match leads_to_fd(p) {
                Some(1) => Target::Fd(1, "standard output".into()),
                Some(fd) => Target::Fd(fd, format!("descriptor {fd} ({})", shown(p))),
                None => match std::fs::metadata(p) {
                    Ok(m) if m.is_dir() => {
                        return Err(Failure::Usage(format!("-o {}: is a directory", shown(p))))
                    }
                    Ok(m) if !m.is_file() => Target::Direct(p.clone()),
                    _ => Target::Replace(p.clone()),
                },
            },
        };
        if let Some(stage) = staging.and_then(stage_key) {
            // Where the bytes would land: the directory the temporary
            // file is made in, the file a link leads to, the file a
            // descriptor has open.
            let mut dirs = Vec::new();
            match &t {
                Target::Fd(fd, _) => {
                    if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
                        dirs.push(dir_of(&p));
                    }
                }
                Target::Direct(p) | Target::Replace(p) => {
                    dirs.push(dir_of(p));
                    if let Ok(real) = std::fs::canonicalize(p) {
                        dirs.push(dir_of(&real));
                    }
                }
            }
            if dirs.iter().any(|d| under(d, stage)) {
                return Err(Failure::Usage(format!(
                    "-o {}: inside the staging directory {}; writing the page there would change \
the stage just verified (write it elsewhere)",
                    match &t {
                        Target::Fd(_, name) => name.clone(),
                        Target::Direct(p) | Target::Replace(p) => shown(p),
                    },
                    staging.map(shown).unwrap_or_default()
                )));
            }
        }
        Ok(t)
    }

    /// A usage error when the page would land on the log itself (renamed
    /// over it, or written into it through a descriptor).
    pub fn refuse_log(&self, log: &Metadata) -> Result<(), Failure> {
        let same = |m: &Metadata| m.dev() == log.dev() && m.ino() == log.ino();
        let is_log = match self {
            Target::Fd(fd, _) => std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .ok()
                .filter(|m| m.is_file())
                .is_some_and(|m| same(&m)),
            Target::Direct(p) | Target::Replace(p) => std::fs::metadata(p).is_ok_and(|m| same(&m)),
        };
        if is_log {
            return Err(Failure::Usage(
                "-o names the log itself: the report is written beside it, never over it".into(),
            ));
        }
        Ok(())
    }

    fn name(&self) -> String {
        match self {
            Target::Fd(_, name) => name.clone(),
            Target::Direct(p) | Target::Replace(p) => shown(p),
        }
    }
}

/// A temporary file, removed when dropped unless [`Temp::keep`] said it
/// was renamed: on an error, an early return, or a panic's unwinding.
pub struct Temp {
    path: Option<PathBuf>,
}

impl Temp {
    fn keep(&mut self) {
        self.path = None;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A temporary file beside `out`, private to this run of the command.
fn temp_beside(out: &Path, mode: u32) -> Result<(Temp, File), Failure> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir_of(out).join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| Failure::Write(format!("{}: {e}", shown(&tmp))))?;
    Ok((Temp { path: Some(tmp) }, f))
}

/// An anonymous file in memory (closed on exec), for a page bound for a
/// stream.
fn memory_file() -> io::Result<File> {
    // SAFETY: a NUL-terminated name and valid flags; the descriptor
    // returned is new and owned by nothing else.
    let fd = unsafe { libc::memfd_create(c"rea-report".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A descriptor of its own for `fd` (closed on exec).
fn dup(fd: RawFd) -> io::Result<File> {
    // SAFETY: F_DUPFD_CLOEXEC reads no memory; a closed `fd` is EBADF.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just made and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(new) })
}

/// The page as it is written (see the module's documentation).
pub struct Sink {
    file: File,
    temp: Option<Temp>,
    target: Target,
}

impl Sink {
    /// `mode`: the temporary file's permissions.
    pub fn new(target: Target, mode: u32) -> Result<Sink, Failure> {
        let (file, temp) = match &target {
            Target::Replace(p) => {
                let (temp, file) = temp_beside(p, mode)?;
                (file, Some(temp))
            }
            Target::Fd(..) | Target::Direct(_) => {
                let f = memory_file().map_err(|e| Failure::Write(format!("a memory file: {e}")))?;
                (f, None)
            }
        };
        Ok(Sink { file, temp, target })
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Starts the page again (what was written is dropped).
    pub fn restart(&mut self) -> Result<(), Failure> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.rewind())
            .map_err(|e| Failure::Write(format!("{}: {e}", self.target.name())))
    }

    /// Puts the page where it goes: renamed over the output, or copied to
    /// the stream.
    pub fn finish(mut self) -> Result<(), Failure> {
        let name = self.target.name();
        let failed = |e: io::Error| Failure::Write(format!("{name}: {e}"));
        match &self.target {
            Target::Replace(p) => {
                self.file.sync_all().map_err(failed)?;
                let tmp = self.temp.as_ref().and_then(|t| t.path.clone());
                std::fs::rename(tmp.unwrap_or_default(), p).map_err(failed)?;
                if let Some(t) = &mut self.temp {
                    t.keep();
                }
                Ok(())
            }
            Target::Fd(fd, _) => {
                let mut to = dup(*fd).map_err(failed)?;
                copy_out(&self.file, &mut to, &name)
            }
            Target::Direct(p) => {
                // No O_CREAT, no O_TRUNC: the file is the one that was
                // there; a FIFO waits for its reader, as a shell's `>` does.
                let mut to = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOCTTY)
                    .open(p)
                    .map_err(failed)?;
                if to.metadata().map_err(failed)?.is_file() {
                    return Err(Failure::Write(format!(
                        "{name}: became a regular file while the report was made; not written"
                    )));
                }
                copy_out(&self.file, &mut to, &name)
            }
        }
    }
}

/// Copies the whole page to `to`. A stream that stops taking it (a reader
/// gone: `| head`) after some bytes is said as a page cut short.
fn copy_out(mut page: &File, to: &mut File, name: &str) -> Result<(), Failure> {
    let total = page.metadata().map(|m| m.len()).unwrap_or(0);
    page.rewind()
        .map_err(|e| Failure::Write(format!("{name}: {e}")))?;
    let mut written = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match page.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::Write(format!("{name}: {e}"))),
        };
        let mut at = 0;
        while at < n {
            match to.write(&buf[at..n]) {
                Ok(0) => return Err(cut_short(name, written, total, "wrote nothing".into())),
                Ok(k) => {
                    at += k;
                    written += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(cut_short(name, written, total, e.to_string())),
            }
        }
    }
}

fn cut_short(name: &str, written: u64, total: u64, why: String) -> Failure {
    if written == 0 {
        return Failure::Write(format!("{name}: {why}"));
    }
    Failure::Partial(format!(
        "{name}: {why}: the page was cut short, {written} of its {total} bytes went to {name} \
(the reader stopped reading)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_named_descriptors() {
        assert_eq!(fd_named(Path::new("/dev/stdout")), Some(1));
        assert_eq!(fd_named(Path::new("//dev/./stdout")), Some(1));
        assert_eq!(fd_named(Path::new("/dev/stderr")), Some(2));
        assert_eq!(fd_named(Path::new("/dev/fd/7")), Some(7));
        assert_eq!(fd_named(Path::new("/proc/self/fd/1")), Some(1));
        assert_eq!(fd_named(Path::new("/dev/fd/x")), None);
        assert_eq!(fd_named(Path::new("/dev/null")), None);
        // /dev/stdout is a link to /proc/self/fd/1: followed by its text.
        assert_eq!(leads_to_fd(Path::new("/dev/stdout")), Some(1));
        let t = Target::resolve(&Output::File("/dev/stdout".into()), None).unwrap();
        assert_eq!(t, Target::Fd(1, "standard output".into()));
        let t = Target::resolve(&Output::File("/dev/null".into()), None).unwrap();
        assert_eq!(t, Target::Direct("/dev/null".into()));
    }

    #[test]
    fn the_temporary_file_goes_on_a_panic() {
        let dir = std::env::temp_dir().join(format!("rea-report-temp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("page.html");
        let made = std::panic::catch_unwind(|| {
            let (_temp, _f) = temp_beside(&out, 0o600).unwrap();
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
            panic!("drawing failed");
        });
        assert!(made.is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "removed");
        std::fs::remove_dir(&dir).unwrap();
    }
}
