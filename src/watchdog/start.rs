//! Becoming a watchdog (docs/architecture.md, "Start-up"): bind the root
//! controller, leave its session, become a child subreaper, raise the
//! descriptor limit and the CPU priority (`priority`), and route the signals
//! that matter into a signalfd before anything is spawned.

use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::config::Config;
use super::state_dir::StateDir;
use crate::contain::choice::Contained;
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

fn bind_root(choice: &RootChoice, uid: u32) -> Result<Root, String> {
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
        return Err(format!(
            "root controller pid {pid} is not a process (refusing to start)"
        ));
    }
    let start_time = match choice.start_time {
        Some(t) => t,
        None => {
            read_stat(pid)
                .map_err(|e| format!("root controller pid {pid}: {e} (refusing to start)"))?
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
        Err(BindError::Gone) => Err(format!(
            "root controller pid {pid} is not alive (refusing to start)"
        )),
        Err(BindError::NoDescriptors(detail)) => Err(format!(
            "root controller pid {pid}: out of descriptors (refusing to start): {detail}"
        )),
        Err(BindError::Uncertain { detail, .. }) => Err(format!(
            "root controller pid {pid} does not match (refusing to start): {detail}"
        )),
    }
}

/// `/proc` must be the one of this process's PID namespace: every
/// identity the watchdog reads (its own, the root's, each member's start
/// time) comes from `/proc/PID`, and pidfds are opened by pid in this
/// namespace. A `/proc` mounted for another namespace (`unshare --pid
/// --fork` without `--mount-proc`) names other processes by the same
/// numbers: the watchdog would bind the wrong root and find no job.
/// `/proc/self` names this process by the number that `/proc` knows it by.
fn proc_is_ours() -> Result<(), String> {
    let me = std::process::id();
    match std::fs::read_link("/proc/self") {
        Ok(p) if p.as_os_str() == me.to_string().as_str() => Ok(()),
        Ok(p) => Err(format!(
            "/proc belongs to another PID namespace (it knows this process as {}, \
             which is pid {me} here): mount a proc for this namespace first \
             (unshare --pid --fork --mount-proc)",
            p.display()
        )),
        Err(e) => Err(format!("/proc/self: {e} (is /proc mounted?)")),
    }
}

/// Steps 1-3 plus the limits and signals. `new_session` is false for exec,
/// which stays in its caller's process group so Ctrl-C reaches it.
pub fn prepare(choice: &RootChoice, new_session: bool) -> Result<Started, String> {
    proc_is_ours()?;
    let uid = nix::unistd::getuid().as_raw();
    if nix::unistd::geteuid().as_raw() != uid {
        return Err("real and effective uid differ; run rea-watchdog as one user".into());
    }
    // What the caller ignored, before anything here changes a disposition.
    let ignored = dispositions::ignored_now();
    dispositions::reset_sigchld().map_err(|e| format!("resetting SIGCHLD: {e}"))?;
    let (root, root_source) = bind_root(choice, uid)?;

    if new_session {
        match nix::unistd::setsid() {
            Ok(_) => {}
            Err(nix::errno::Errno::EPERM) => {
                // A process-group leader (a shell's foreground job): fork,
                // and the child, no group leader, leaves (`detach.rs`).
                detach().map_err(|e| format!("detaching from the caller's session: {e}"))?;
                nix::unistd::setsid().map_err(|e| format!("setsid after detaching: {e}"))?;
            }
            Err(e) => return Err(format!("setsid: {e}")),
        }
    }
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;

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
    mask.thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| format!("signalfd: {e}"))?;

    let me_stat =
        read_stat(std::process::id() as i32).map_err(|e| format!("/proc/self/stat: {e}"))?;
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
