//! Starting one job as the watchdog's own child (docs/architecture.md).
//!
//! In the child, before exec: its own session, SIGKILL on parent death,
//! exit at once if the parent is already gone (the pre-exec race
//! bubblewrap fixed), no new privileges, default signal dispositions and an
//! empty mask, the original descriptor limit and nice value, stdin from
//! /dev/null, stdout and stderr to pipes, every other descriptor
//! close-on-exec. The leader's pidfd is opened before the watchdog could
//! ever reap it. exec's handover (docs/cli.md) changes four of these:
//! the caller's stdin, stdout and stderr, the caller's ignored signals kept
//! ignored, the caller's process group kept (`--foreground`), and the
//! parent-death signal (timeout's `-s`).

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, OFlag};

use super::priority::Base;
use crate::process::dispositions::SignalBits;
use crate::process::forked::Forked;
use crate::process::identity::read_stat;
use crate::process::pidfd::{bind_child, VerifiedPidFd};
use crate::protocol::RefusalReason;

pub struct Spawned {
    pub leader: VerifiedPidFd,
    /// Read back after exec: the leader's session (its own pid) and parent.
    pub sid: i32,
    pub ppid: i32,
    /// `None` when the job writes the caller's own stdout and stderr.
    pub stdout: Option<File>,
    pub stderr: Option<File>,
}

#[derive(Debug)]
pub struct SpawnError {
    pub errno: i32,
    pub reason: RefusalReason,
    pub detail: String,
}

/// What the child gets: argv, the complete environment, and the limit to restore.
pub struct Launch<'a> {
    pub argv: &'a [OsString],
    /// The file to execute when `argv[0]` does not name it.
    pub program: Option<&'a std::ffi::OsStr>,
    pub env: &'a [(OsString, OsString)],
    /// The working directory (`None`: the watchdog's).
    pub cwd: Option<&'a std::ffi::OsStr>,
    /// The job's stdin (`None`: /dev/null, or the caller's in exec's handover).
    pub stdin: Option<File>,
    pub watchdog_pid: i32,
    pub nofile: libc::rlimit,
    pub priority: Base,
    /// A write-only `cgroup.procs` fd of the action's group: the child
    /// places itself there first thing (before exec, so every descendant
    /// is in the group).
    pub cgroup_procs: Option<i32>,
    pub child: ChildSetup,
}

/// What the child does between fork and exec besides the fixed steps.
#[derive(Clone, Copy, Debug)]
pub struct ChildSetup {
    /// stdin, stdout and stderr: the watchdog's own (the caller's), not
    /// /dev/null and pipes.
    pub inherit_stdio: bool,
    /// Signals left ignored (all others get their default action).
    pub keep_ignored: SignalBits,
    pub own_session: bool,
    pub pdeathsig: i32,
}

impl ChildSetup {
    /// run's way (docs/architecture.md).
    pub const RUN: ChildSetup = ChildSetup {
        inherit_stdio: false,
        keep_ignored: SignalBits(0),
        own_session: true,
        pdeathsig: libc::SIGKILL,
    };
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Runs between fork and exec: only async-signal-safe calls, no allocation.
fn child_setup(
    parent: libc::pid_t,
    nofile: libc::rlimit,
    priority: Base,
    cgroup_procs: Option<i32>,
    how: ChildSetup,
) -> io::Result<()> {
    // SAFETY: plain syscalls on this (single-threaded, just forked) process.
    unsafe {
        if let Some(fd) = cgroup_procs {
            // "0" is the writer itself; a failure fails the spawn (never
            // run a job outside the group the stop relies on).
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        if how.own_session && libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            how.pdeathsig as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
        // The re-check after arming PDEATHSIG comes from systemd's
        // `pidref_safe_fork_full` (src/basic/process-util.c), which compares
        // getppid() with the pid it had before fork() and, if they differ,
        // emulates the death signal: the parent died before the prctl, so
        // the signal it armed will never come. Here the child just exits
        // (125, before exec). systemd also lets `getppid() == 0` pass (a
        // parent in another PID namespace); the watchdog's jobs are always
        // in its own namespace, so 0 is a mismatch like any other.
        if libc::getppid() != parent {
            // The watchdog died before PDEATHSIG was armed: never run unowned.
            libc::_exit(125);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                let to = match how.keep_ignored.contains(sig) {
                    true => libc::SIG_IGN,
                    false => libc::SIG_DFL,
                };
                libc::signal(sig, to); // glibc-reserved ones fail: set below
            }
        }
        crate::process::dispositions::default_glibc_reserved();
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::setrlimit(libc::RLIMIT_NOFILE, &nofile);
        priority.restore_in_child();
        // Anything inherited by accident is closed at exec (CLOSE_RANGE_CLOEXEC).
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
    Ok(())
}

fn classify(e: &io::Error) -> SpawnError {
    let errno = e.raw_os_error().unwrap_or(0);
    let reason = match errno {
        libc::ENOENT | libc::ENOTDIR => RefusalReason::NotFound,
        libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::EPERM | libc::ETXTBSY | libc::ELOOP => {
            RefusalReason::NotExecutable
        }
        _ => RefusalReason::SpawnFailed,
    };
    SpawnError {
        errno,
        reason,
        detail: e.to_string(),
    }
}

/// argv and envp for `execve`, built before the fork (no allocation after).
/// std's spawn would call `execvp`, which runs a file that `execve` refuses
/// with ENOEXEC (no `#!`, unknown format) through `/bin/sh`: never a shell
/// (docs/requests.md), so a path is executed here with `execve` itself.
struct Execve {
    prog: Option<CString>,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_strings`' heap buffers, owned by the
// same value and never changed; the value is only read, in the child.
unsafe impl Send for Execve {}
// SAFETY: as for `Send`: nothing writes through the pointers, so shared
// references on several threads only ever read immutable buffers.
unsafe impl Sync for Execve {}

/// An argv or env string with a NUL byte: it cannot be passed to execve.
#[derive(Debug)]
struct NulByte;

impl std::fmt::Display for NulByte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("argv or env holds a NUL byte")
    }
}

impl std::error::Error for NulByte {}

impl Execve {
    fn new(l: &Launch<'_>) -> Result<Execve, NulByte> {
        let c = |b: &[u8]| CString::new(b).map_err(|_| NulByte);
        let mut strings = Vec::new();
        for a in l.argv {
            strings.push(c(a.as_bytes())?);
        }
        for (k, v) in l.env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            strings.push(c(&kv)?);
        }
        let ptrs = |s: &[CString]| {
            s.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let n = l.argv.len();
        let argv = ptrs(&strings[..n]);
        let envp = ptrs(&strings[n..]);
        // A bare name (exec mode, not found on PATH) keeps std's PATH search.
        let prog = l
            .program
            .or_else(|| l.argv.first().map(|p| p.as_os_str()))
            .filter(|p| p.as_bytes().contains(&b'/'))
            .map(|p| c(p.as_bytes()))
            .transpose()?;
        Ok(Execve {
            prog,
            _strings: strings,
            argv,
            envp,
        })
    }

    /// In the child: execve, or the error for std to report to the parent.
    fn exec(&self) -> io::Result<()> {
        let Some(prog) = &self.prog else {
            return Ok(());
        };
        // SAFETY: NUL-terminated arrays of NUL-terminated strings, all alive.
        unsafe { libc::execve(prog.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
        Err(io::Error::last_os_error())
    }
}

pub fn spawn(mut l: Launch<'_>) -> Result<Spawned, SpawnError> {
    let (prog, args) = l.argv.split_first().ok_or_else(|| SpawnError {
        errno: libc::EINVAL,
        reason: RefusalReason::BadArgv,
        detail: "empty argv".into(),
    })?;
    let mut cmd = Command::new(prog);
    let io = |piped: fn() -> Stdio| match l.child.inherit_stdio {
        true => Stdio::inherit(),
        false => piped(),
    };
    let stdin = match l.stdin.take() {
        Some(file) => Stdio::from(file),
        None => io(Stdio::null),
    };
    cmd.args(args)
        .env_clear()
        .envs(l.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(io(Stdio::piped))
        .stderr(io(Stdio::piped));
    if let Some(dir) = l.cwd {
        // std changes directory in the child, before `pre_exec`: a
        // missing directory fails the spawn like a missing program
        // (ENOENT: not_found), as Python's subprocess reports it.
        cmd.current_dir(dir);
    }
    let (parent, nofile, priority, how) = (l.watchdog_pid, l.nofile, l.priority, l.child);
    let cgroup_procs = l.cgroup_procs;
    let exec = Execve::new(&l).map_err(|e| SpawnError {
        errno: libc::EINVAL,
        reason: RefusalReason::BadArgv,
        detail: e.to_string(),
    })?;
    // SAFETY: child_setup and Execve::exec only make async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || {
            child_setup(parent, nofile, priority, cgroup_procs, how)?;
            exec.exec()
        });
    }
    // std's spawn returns once exec succeeded (or reaps the child and returns
    // exec's errno), so the setup above has happened when we read /proc.
    let mut child = Forked::spawn(&mut cmd).map_err(|e| classify(&e))?;
    let pid = child.pid();
    let internal = |what: &str, e: io::Error| SpawnError {
        errno: e.raw_os_error().unwrap_or(0),
        reason: RefusalReason::SpawnFailed,
        detail: format!("{what}: {e}"),
    };
    let (stdout, stderr): (Option<OwnedFd>, Option<OwnedFd>) = match how.inherit_stdio {
        true => (None, None),
        false => (
            Some(
                child
                    .take_stdout()
                    .ok_or_else(|| internal("stdout pipe", io::Error::other("missing")))?
                    .into(),
            ),
            Some(
                child
                    .take_stderr()
                    .ok_or_else(|| internal("stderr pipe", io::Error::other("missing")))?
                    .into(),
            ),
        ),
    };
    // `child` is consumed without wait(): the watchdog reaps through the pidfd.
    let leader = bind_child(child).map_err(|e| internal("pidfd_open", e))?;
    let st = read_stat(pid).map_err(|e| internal("reading /proc after exec", e))?;
    for fd in stdout.iter().chain(&stderr) {
        set_nonblocking(fd).map_err(|e| internal("output pipe", e))?;
    }
    Ok(Spawned {
        leader,
        sid: st.sid,
        ppid: st.ppid,
        stdout: stdout.map(File::from),
        stderr: stderr.map(File::from),
    })
}
