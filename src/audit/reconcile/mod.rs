//! `rea-audit reconcile LOG [--state-dir DIR] [--staging DIR]` (docs/containment.md):
//! after an unhappy path (the watchdog lost, the SSH response lost, a log
//! that is not sealed), what is known, what may still be alive, and what a
//! person must check. One outcome: `delete_allowed`, `running` or `review`.
//!
//! Read-only, always: the log is opened with [`open_log`] (`O_NONBLOCK`,
//! fstat'd regular) and read line by line up to its last complete line;
//! processes are probed with `pidfd_open` and a `/proc` read-back
//! ([`crate::process::alive`]), which cannot signal; the stage and the
//! state directory are only stat'd, listed and hashed; the action's cgroup
//! (cgroup mode) is re-opened by its recorded inode and only its
//! `cgroup.procs` and `cgroup.events` are read
//! ([`self::group`]). Nothing is created, written, appended,
//! signalled, retried or deleted. With live members in that group the
//! action is `running`, watchdog or not; with the watchdog gone the report
//! names `rea-watchdog recover`.

pub mod decide;
pub mod dirs;
pub mod env;
pub mod group;
pub mod log;
pub mod report;
pub mod text;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use self::group::{group_part, recover_command};
use self::log::{scan, LogScan, Named};
use crate::audit::reader::{open_log, OpenError};
use crate::audit::stage::held as stage_held;
use crate::audit::verify::{verify_file, VerifyOptions};
use crate::process::alive::{probe, Liveness};

pub use self::dirs::{stage_part, state_dir_part, DirCheck, StagePart, StateDirPart};
pub use self::env::{check_hint, run_processes, EnvProc};
pub use self::report::*;

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub state_dir: Option<PathBuf>,
    pub staging: Option<PathBuf>,
}

/// Builds the report. `Err` only when the log cannot be read at all.
pub fn reconcile(path: &Path, opts: &Options) -> Result<Report, ReconcileError> {
    let f = open_log(path).map_err(ReconcileError::Open)?;
    let s = scan(&f).map_err(ReconcileError::Read)?;
    // The same open file, not the path again: verify reads what was scanned.
    let same = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
    let v = verify_file(
        &same,
        &VerifyOptions {
            staging: opts.staging.clone(),
            ..VerifyOptions::default()
        },
    );
    drop(f);
    let mut holders = v.holders.clone();
    let verify = VerifySummary {
        verdict: v.verdict,
        status: v.status,
        exit_code: v.exit_code,
        reasons: v.reasons,
    };
    let watchdog = s.run_started.as_ref().map(|r| WatchdogPart {
        pid: r.watchdog.pid,
        start_time: r.watchdog.start_time,
        uid: r.watchdog.uid,
        mode: r.mode,
        state_dir: r.state_dir.clone(),
        liveness: probe(r.watchdog.pid, r.watchdog.start_time),
    });
    let processes = process_parts(&s.named);
    let unnamed = unnamed_part(&s);
    let state_dir = state_dir_part(s.run_started.as_ref(), opts.state_dir.as_deref());
    let stage = stage_part(&s, opts.staging.as_deref());
    if holders.is_none() && stage.identity_matches == Some(true) {
        // Verify scans only a sealed log's stage; this one is the run's.
        // One descriptor for the identity check and the scan.
        // In a helper with a deadline, as verify's (a stuck stage answers).
        holders = opts.staging.as_deref().and_then(|p| {
            let r = s.run_started.as_ref()?.staging.as_ref()?;
            let seen = stage_held::look(p, Some(r), None).ok()?;
            stage_held::found(seen.scan?).1
        });
    }
    let group = group_part(&s);
    // A refused start launched nothing: there is nothing to recover.
    let recover = (group.is_some() && !s.sealed && s.start_refused.is_none()).then(|| {
        let recorded = s.run_started.as_ref().and_then(|r| r.staging.as_ref());
        let dir = stage
            .given
            .clone()
            .or_else(|| recorded.map(|d| d.path.clone()));
        recover_command(path, dir.as_deref())
    });
    let mut r = Report {
        outcome: Outcome::Review,
        exit_code: Outcome::Review.exit_code(),
        log: log_part(path, &s),
        watchdog,
        processes,
        processes_not_listed: s.named_dropped,
        unnamed,
        state_dir,
        stage,
        containment: s.containment.clone(),
        group,
        recover_command: recover,
        verify,
        holders,
        reasons: Vec::new(),
    };
    self::decide::decide(&mut r);
    Ok(r)
}

/// Why a log could not be reconciled at all.
#[derive(Debug)]
pub enum ReconcileError {
    Open(OpenError),
    /// Reading the opened log failed.
    Read(std::io::Error),
}

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReconcileError::Open(e) => e.fmt(f),
            ReconcileError::Read(e) => write!(f, "cannot read the log: {e}"),
        }
    }
}

impl std::error::Error for ReconcileError {}

/// Each process the log named, probed now; a live one with how to check it.
fn process_parts(named: &[Named]) -> Vec<ProcPart> {
    named
        .iter()
        .map(|n| {
            let liveness = probe(n.pid, n.start_time);
            let check =
                (liveness.state == Liveness::Alive).then(|| check_hint(n.pid, n.start_time));
            ProcPart {
                named: n.clone(),
                liveness,
                check,
            }
        })
        .collect()
}

/// Whether descendants the log never named may exist (only an unsealed
/// log leaves room), and the run's environment scan as a hint.
fn unnamed_part(s: &LogScan) -> Unnamed {
    let (by_environment, scan_error) = match &s.run {
        Some(run) if crate::vocab::is_token(run) => match run_processes(run) {
            Ok(ps) => (ps, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        },
        _ => (Vec::new(), None),
    };
    let may_exist = !s.sealed && s.start_refused.is_none();
    Unnamed {
        may_exist,
        detail: if s.start_refused.is_some() {
            "the start was refused before anything was launched (start_refused)".into()
        } else if may_exist {
            "the log is not sealed: descendants it never named (setsid or double-forked \
             grandchildren of a lost watchdog) may be alive; the environment scan below \
             is a hint, not a proof"
                .into()
        } else {
            "the receipt proves no descendant was left at close".into()
        },
        by_environment,
        scan_error,
    }
}

/// What the log itself says: its chain, seal and stop.
fn log_part(path: &Path, s: &LogScan) -> LogPart {
    LogPart {
        path: path.display().to_string(),
        run: s.run.clone(),
        records: s.records,
        intact_through: s.intact_through,
        chain_break: s.chain_break.clone(),
        sealed: s.sealed,
        torn_tail_bytes: s.tail_bytes,
        head: s.head.clone(),
        outcome: s.receipt.as_ref().map(|r| r.outcome),
        stop_reason: s.receipt.as_ref().and_then(|r| r.stop_reason),
        first_stop: s.first_stop,
        stop_completed: s.stop_completed,
        start_refused: s.start_refused.clone(),
    }
}
