//! What one action is allowed to do: bounds and paths, fixed at start.

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::millis;
use crate::kinds::watchdog::{AskSpan, Bounds, Handover, Mode};

#[derive(Clone, Debug)]
pub struct Config {
    pub mode: Mode,
    pub run_id: String,
    pub state_dir: PathBuf,
    pub audit_log: PathBuf,
    pub staging: Option<PathBuf>,
    pub action_deadline: Option<Duration>,
    pub term_grace: Duration,
    pub kill_bound: Duration,
    /// How long a stop's ask step lasts (timeout's `-k`; run and exec:
    /// half the grace).
    pub ask: AskSpan,
    /// Combined stdout+stderr bytes per job; `None` is uncapped (exec default).
    pub output_cap: Option<u64>,
    pub pass_env: Vec<String>,
    /// Under run, forward signals that are not stops to the running leaders.
    pub forward_signals: bool,
    /// exec and timeout: how the job meets its caller (`None`: run's way,
    /// docs/architecture.md: job environment, /dev/null, pipes, default dispositions).
    pub handover: Option<Handover>,
}

impl Config {
    /// `rea-watchdog exec` (one job, sealed when it is done).
    pub fn is_exec(&self) -> bool {
        self.mode == Mode::Exec
    }

    /// The job's parent-death signal (SIGKILL unless a handover says).
    pub fn pdeathsig(&self) -> i32 {
        self.handover
            .as_ref()
            .map_or(libc::SIGKILL, |h| h.pdeathsig)
    }

    /// Whether jobs read and write the caller's own descriptors.
    pub fn stdio_inherited(&self) -> bool {
        self.handover.as_ref().is_some_and(|h| h.stdio_inherited)
    }
}

impl Config {
    pub fn bounds(&self) -> Bounds {
        Bounds {
            action_deadline_ms: self.action_deadline.map(millis),
            term_grace_ms: millis(self.term_grace),
            kill_bound_ms: millis(self.kill_bound),
            output_cap: self.output_cap,
            ask: self.ask,
        }
    }
}

/// A fresh run id: UTC time, pid and 48 random bits (`[A-Za-z0-9_.-]`).
pub fn new_run_id() -> String {
    let mut rnd = [0u8; 6];
    // SAFETY: getrandom writes at most rnd.len() bytes into rnd.
    let n = unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) };
    if n != rnd.len() as isize {
        // Fall back to the monotonic clock: uniqueness, not secrecy, is needed.
        rnd.copy_from_slice(&crate::clock::mono_ns().to_le_bytes()[..6]);
    }
    format!(
        "{}-{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        std::process::id(),
        crate::vocab::hex(&rnd)
    )
}
