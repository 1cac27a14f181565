//! Becoming a watchdog (SPEC 3.2 steps 1-3): bind the root controller, leave
//! its session, become a child subreaper, raise the descriptor limit and the
//! CPU priority (`priority`), and route the signals that matter into a
//! signalfd before anything is spawned.

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::config::Config;
use super::state_dir::StateDir;
use crate::audit::record::{DirIdentity, Event, Ident, RootBound, RootSource, RunStarted};
use crate::contain::choice::Contained;
use crate::process::identity::read_stat;
use crate::process::pidfd::{bind_ident, BindError, VerifiedPidFd};

use super::detach::detach;
use super::priority::Base;

/// The signals the loop reads from its signalfd (all blocked).
pub const WATCHED: [Signal; 5] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

pub struct Started {
    pub me: Ident,
    pub root: VerifiedPidFd,
    pub root_source: RootSource,
    pub signals: SignalFd,
    /// The descriptor limit before it was raised; jobs get it back.
    pub nofile: libc::rlimit,
    /// The nice value before it was raised; jobs get it back.
    pub priority: Base,
    /// The action's cgroup, when it has one, and its record (SPEC 8).
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
            }),
            Event::RootBound(RootBound {
                root: self.root.ident(),
                comm: self.root.proc().comm.clone(),
                source: self.root_source.clone(),
            }),
        ]
    }
}

/// Which process is the root controller.
pub struct RootChoice {
    pub pid: Option<i32>,
    pub start_time: Option<u64>,
}

fn bind_root(choice: &RootChoice, uid: u32) -> Result<(VerifiedPidFd, RootSource), String> {
    let (pid, source) = match choice.pid {
        Some(p) => (p, RootSource::Argument),
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
        Ok(fd) => Ok((fd, source)),
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

/// Steps 1-3 plus the limits and signals. `new_session` is false for exec,
/// which stays in its caller's process group so Ctrl-C reaches it.
pub fn prepare(choice: &RootChoice, new_session: bool) -> Result<Started, String> {
    let uid = nix::unistd::getuid().as_raw();
    if nix::unistd::geteuid().as_raw() != uid {
        return Err("real and effective uid differ; run rea-watchdog as one user".into());
    }
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

    let mut mask = SigSet::empty();
    for s in WATCHED {
        mask.add(s);
    }
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
        nofile,
        priority,
        contained: None,
    })
}
