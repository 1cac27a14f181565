//! Becoming a watchdog (docs/architecture.md, "Start-up"): bind the root
//! controller, leave its session, become a child subreaper, raise the
//! descriptor limit and the CPU priority (`priority`), and route the signals
//! that matter into a signalfd before anything is spawned.

use std::fmt;
use std::io;
use std::path::PathBuf;

use nix::errno::Errno;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::config::Config;
use super::ledger::StartFailed;
use super::state_dir::StateDir;
use crate::bounded::Blocked;
use crate::contain::choice::{CgroupRefused, Contained};
use crate::kinds::watchdog::{DirIdentity, Event, Ident, RootBound, RootSource, RunStarted};
use crate::process::dispositions::{self, SignalBits};
use crate::process::identity::read_stat;
use crate::process::pidfd::{bind_ident, BindError, VerifiedPidFd};

use super::detach::detach;
use super::priority::Base;

pub struct Started {
    pub me: Ident,
    /// `None` for an init or the `timeout` personality (`root_source` says which).
    pub root: Option<VerifiedPidFd>,
    pub root_source: RootSource,
    pub signals: SignalFd,
    /// The signals the caller left ignored (exec keeps them for its job).
    pub ignored: SignalBits,
    /// The descriptor limit before it was raised; jobs get it back.
    pub nofile: libc::rlimit,
    /// The nice value before it was raised; jobs get it back.
    pub priority: Base,
    /// The action's cgroup, when it has one, and its record (docs/containment.md).
    pub contained: Option<Contained>,
}

impl Started {
    /// The log's first two records: who the watchdog is, with its bounds
    /// and staging identity, and which root it bound.
    pub fn first_records(
        &self,
        cfg: &Config,
        state: &StateDir,
        staging: Option<DirIdentity>,
    ) -> [Event; 2] {
        [
            Event::RunStarted(RunStarted {
                version: env!("CARGO_PKG_VERSION").to_string(),
                mode: cfg.mode,
                watchdog: self.me,
                state_dir: state.path.to_string_lossy().into_owned(),
                bounds: cfg.bounds(),
                staging,
                pass_env: cfg.pass_env.clone(),
                handover: cfg.handover.clone(),
            }),
            Event::RootBound(RootBound {
                root: self.root.as_ref().map(|r| r.ident()),
                comm: self.root.as_ref().map(|r| r.proc().comm.clone()),
                source: self.root_source.clone(),
            }),
        ]
    }
}

/// Which process is the root controller.
pub struct RootChoice {
    pub pid: Option<i32>,
    pub start_time: Option<u64>,
    /// Bind none (the `timeout` personality).
    pub unwatched: bool,
}

type Root = (Option<VerifiedPidFd>, RootSource);

/// Why the root controller was not bound: the start is refused, nothing
/// made and nothing launched. The text names the pid and says so.
#[derive(Debug)]
pub enum RootRefused {
    /// The pid given (or the parent's) is 0 or negative.
    NotAProcess { pid: i32 },
    /// Its `/proc/PID/stat` could not be read (for its start time).
    Unreadable { pid: i32, err: io::Error },
    /// It is gone.
    NotAlive { pid: i32 },
    /// No descriptor to spare for its pidfd or its read-back.
    NoDescriptors { pid: i32, detail: String },
    /// The process there is not the one named (start time or uid differ).
    Mismatch { pid: i32, detail: String },
}

impl fmt::Display for RootRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootRefused::NotAProcess { pid } => {
                write!(
                    f,
                    "root controller pid {pid} is not a process (refusing to start)"
                )
            }
            RootRefused::Unreadable { pid, err } => {
                write!(f, "root controller pid {pid}: {err} (refusing to start)")
            }
            RootRefused::NotAlive { pid } => {
                write!(
                    f,
                    "root controller pid {pid} is not alive (refusing to start)"
                )
            }
            RootRefused::NoDescriptors { pid, detail } => write!(
                f,
                "root controller pid {pid}: out of descriptors (refusing to start): {detail}"
            ),
            RootRefused::Mismatch { pid, detail } => write!(
                f,
                "root controller pid {pid} does not match (refusing to start): {detail}"
            ),
        }
    }
}

impl std::error::Error for RootRefused {}

fn bind_root(choice: &RootChoice, uid: u32) -> Result<Root, RootRefused> {
    let (pid, source) = match choice.pid {
        Some(p) => (p, RootSource::Argument),
        None if choice.unwatched => return Ok((None, RootSource::Unwatched)),
        // A parent outside our PID namespace reads as pid 0: we are the
        // namespace's init (a container's entrypoint), with no root to bind.
        None if nix::unistd::getppid().as_raw() == 0 => return Ok((None, RootSource::Init)),
        None => (nix::unistd::getppid().as_raw(), RootSource::Parent),
    };
    // The parent may be init (pid 1 in a PID namespace is a real
    // controller). A controller that can die before the watchdog binds it
    // should pass --root-pid and --root-start-time instead.
    if pid <= 0 {
        return Err(RootRefused::NotAProcess { pid });
    }
    let start_time = match choice.start_time {
        Some(t) => t,
        None => {
            read_stat(pid)
                .map_err(|err| RootRefused::Unreadable { pid, err })?
                .start_time
        }
    };
    let ident = Ident {
        pid,
        start_time,
        uid,
    };
    match bind_ident(ident) {
        Ok(fd) => Ok((Some(fd), source)),
        Err(BindError::Gone) => Err(RootRefused::NotAlive { pid }),
        Err(BindError::NoDescriptors(detail)) => Err(RootRefused::NoDescriptors { pid, detail }),
        Err(BindError::Uncertain { detail, .. }) => Err(RootRefused::Mismatch { pid, detail }),
    }
}

/// `/proc` must be the one of this process's PID namespace: every
/// identity the watchdog reads (its own, the root's, each member's start
/// time) comes from `/proc/PID`, and pidfds are opened by pid in this
/// namespace. A `/proc` mounted for another namespace (`unshare --pid
/// --fork` without `--mount-proc`) names other processes by the same
/// numbers: the watchdog would bind the wrong root and find no job.
/// `/proc/self` names this process by the number that `/proc` knows it by.
fn proc_is_ours() -> Result<(), ProcNotOurs> {
    let me = std::process::id();
    match std::fs::read_link("/proc/self") {
        Ok(p) if p.as_os_str() == me.to_string().as_str() => Ok(()),
        Ok(known_as) => Err(ProcNotOurs::OtherNamespace { known_as, me }),
        Err(e) => Err(ProcNotOurs::Unreadable(e)),
    }
}

/// Why `/proc` cannot be trusted to name this namespace's processes
/// ([`proc_is_ours`]).
#[derive(Debug)]
pub enum ProcNotOurs {
    /// `/proc/self` names another pid: a `/proc` of another PID namespace.
    OtherNamespace { known_as: PathBuf, me: u32 },
    /// `/proc/self` could not be read (no `/proc` mounted?).
    Unreadable(io::Error),
}

impl fmt::Display for ProcNotOurs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcNotOurs::OtherNamespace { known_as, me } => write!(
                f,
                "/proc belongs to another PID namespace (it knows this process as {}, \
                 which is pid {me} here): mount a proc for this namespace first \
                 (unshare --pid --fork --mount-proc)",
                known_as.display()
            ),
            ProcNotOurs::Unreadable(e) => write!(f, "/proc/self: {e} (is /proc mounted?)"),
        }
    }
}

impl std::error::Error for ProcNotOurs {}

/// Why [`prepare`] did not make this process a watchdog: one variant per
/// step, carrying its cause. Nothing is made or launched before these
/// steps; the text is what the watchdog says on stderr.
#[derive(Debug)]
pub enum StartError {
    Proc(ProcNotOurs),
    /// The real and effective uids differ.
    UidsDiffer,
    ResetSigchld(io::Error),
    Root(RootRefused),
    /// The fork that leaves a process-group leader's session failed.
    Detach(io::Error),
    /// `setsid` failed after that fork.
    SetsidAfterDetach(Errno),
    Setsid(Errno),
    Subreaper(Errno),
    BlockSignals(Errno),
    Signalfd(Errno),
    /// This process's own `/proc/self/stat` (its identity) was unreadable.
    OwnStat(io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Proc(e) => e.fmt(f),
            StartError::UidsDiffer => {
                f.write_str("real and effective uid differ; run rea-watchdog as one user")
            }
            StartError::ResetSigchld(e) => write!(f, "resetting SIGCHLD: {e}"),
            StartError::Root(e) => e.fmt(f),
            StartError::Detach(e) => write!(f, "detaching from the caller's session: {e}"),
            StartError::SetsidAfterDetach(e) => write!(f, "setsid after detaching: {e}"),
            StartError::Setsid(e) => write!(f, "setsid: {e}"),
            StartError::Subreaper(e) => write!(f, "PR_SET_CHILD_SUBREAPER: {e}"),
            StartError::BlockSignals(e) => write!(f, "blocking signals: {e}"),
            StartError::Signalfd(e) => write!(f, "signalfd: {e}"),
            StartError::OwnStat(e) => write!(f, "/proc/self/stat: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Why an action could not be opened: everything that can fail from the
/// first check to a serving action (`modes.rs`'s `open_action`, then
/// [`super::action::Action::new`]), one variant per step, carrying its
/// cause. Nothing was launched; the text is what the watchdog says on
/// stderr before it exits 125.
#[derive(Debug)]
pub enum OpenError {
    /// The audit log exists: one log per action, never appended to.
    AuditLogExists(PathBuf),
    /// The staging directory's identity at start (`--staging`).
    Staging(StagingStart),
    /// Becoming a watchdog ([`prepare`]).
    Start(StartError),
    /// `--contain cgroup` that cannot be had: nothing made.
    Contain(CgroupRefused),
    /// The state directory could not be created.
    StateDir(io::Error),
    /// The audit log could not be created.
    AuditLog { path: PathBuf, err: io::Error },
    /// The event loop (epoll) could not be made.
    Epoll(io::Error),
    /// The jobs' table (its descriptors) could not be made.
    Jobs(io::Error),
    /// The signalfd could not join the loop.
    Signalfd(io::Error),
    /// The root controller's pidfd could not join the loop.
    RootPidfd(io::Error),
    /// The request FIFO could not join the loop.
    Fifo(io::Error),
    /// The log's first records could not be made durable, or arming the
    /// stage or taking its baseline refused the start.
    Ledger(StartFailed),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::AuditLogExists(path) => write!(
                f,
                "audit log {} already exists (one log per action; it is never appended to)",
                path.display()
            ),
            OpenError::Staging(e) => e.fmt(f),
            OpenError::Start(e) => e.fmt(f),
            OpenError::Contain(e) => e.fmt(f),
            OpenError::StateDir(e) => e.fmt(f),
            OpenError::AuditLog { path, err } => write!(f, "audit log {}: {err}", path.display()),
            OpenError::Epoll(e) => write!(f, "epoll: {e}"),
            OpenError::Jobs(e) => write!(f, "jobs: {e}"),
            OpenError::Signalfd(e) => write!(f, "signalfd: {e}"),
            OpenError::RootPidfd(e) => write!(f, "root pidfd: {e}"),
            OpenError::Fifo(e) => write!(f, "request FIFO: {e}"),
            OpenError::Ledger(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {}

/// Why the staging directory's identity was not read at start: the start
/// is refused, nothing made, nothing launched.
#[derive(Debug)]
pub enum StagingStart {
    /// The helper reading it did not answer within the deadline: a file
    /// system that does not answer (`stage_unreadable`, the text's prefix).
    Unreadable(Blocked),
    /// It could not be read: the helper's text of the cause.
    Failed { path: PathBuf, cause: String },
}

impl fmt::Display for StagingStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StagingStart::Unreadable(b) => write!(f, "stage_unreadable: {b}"),
            StagingStart::Failed { path, cause } => {
                write!(f, "staging directory {}: {cause}", path.display())
            }
        }
    }
}

impl std::error::Error for StagingStart {}

/// Steps 1-3 plus the limits and signals. `new_session` is false for exec,
/// which stays in its caller's process group so Ctrl-C reaches it.
pub fn prepare(choice: &RootChoice, new_session: bool) -> Result<Started, StartError> {
    proc_is_ours().map_err(StartError::Proc)?;
    let uid = nix::unistd::getuid().as_raw();
    if nix::unistd::geteuid().as_raw() != uid {
        return Err(StartError::UidsDiffer);
    }
    // What the caller ignored, before anything here changes a disposition.
    let ignored = dispositions::ignored_now();
    dispositions::reset_sigchld().map_err(StartError::ResetSigchld)?;
    let (root, root_source) = bind_root(choice, uid).map_err(StartError::Root)?;

    if new_session {
        match nix::unistd::setsid() {
            Ok(_) => {}
            Err(nix::errno::Errno::EPERM) => {
                // A process-group leader (a shell's foreground job): fork,
                // and the child, no group leader, leaves (`detach.rs`).
                detach().map_err(StartError::Detach)?;
                nix::unistd::setsid().map_err(StartError::SetsidAfterDetach)?;
            }
            Err(e) => return Err(StartError::Setsid(e)),
        }
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(StartError::Subreaper)?;

    let mut nofile = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile) } == 0 {
        let raised = libc::rlimit {
            rlim_cur: nofile.rlim_max,
            rlim_max: nofile.rlim_max,
        };
        // SAFETY: valid in-pointer; failure only leaves the old limit.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) };
    }

    let priority = Base::raise();

    // Every catchable signal is read from the signalfd: none of them can
    // end the watchdog by its default action (docs/guarantees.md).
    dispositions::ignore_glibc_reserved();
    let mask = dispositions::watched();
    mask.thread_block().map_err(StartError::BlockSignals)?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(StartError::Signalfd)?;

    let me_stat = read_stat(std::process::id() as i32).map_err(StartError::OwnStat)?;
    let me = Ident {
        pid: me_stat.pid,
        start_time: me_stat.start_time,
        uid,
    };
    Ok(Started {
        me,
        root,
        root_source,
        signals,
        ignored,
        nofile,
        priority,
        contained: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed errors read as the messages they replaced, word for word:
    /// tests and people match on these texts.
    #[test]
    fn the_refusals_read_as_before() {
        let root = RootRefused::NotAProcess { pid: 0 };
        assert_eq!(
            root.to_string(),
            "root controller pid 0 is not a process (refusing to start)"
        );
        let root = RootRefused::Mismatch {
            pid: 7,
            detail: "start time 1 != 2".into(),
        };
        assert_eq!(
            StartError::Root(root).to_string(),
            "root controller pid 7 does not match (refusing to start): start time 1 != 2"
        );
        let proc = ProcNotOurs::OtherNamespace {
            known_as: PathBuf::from("9"),
            me: 42,
        };
        assert_eq!(
            proc.to_string(),
            "/proc belongs to another PID namespace (it knows this process as 9, which is \
             pid 42 here): mount a proc for this namespace first (unshare --pid --fork \
             --mount-proc)"
        );
        assert_eq!(
            StartError::Setsid(Errno::EPERM).to_string(),
            format!("setsid: {}", Errno::EPERM)
        );
        let exists = OpenError::AuditLogExists(PathBuf::from("/x/a.jsonl"));
        assert_eq!(
            exists.to_string(),
            "audit log /x/a.jsonl already exists (one log per action; it is never appended to)"
        );
        let failed = StagingStart::Failed {
            path: PathBuf::from("/s"),
            cause: "gone".into(),
        };
        assert_eq!(
            OpenError::Staging(failed).to_string(),
            "staging directory /s: gone"
        );
    }
}
