//! The two ways to run an action: `run` (a controller drives it through the
//! FIFO) and `exec` (the watchdog is its own controller, like timeout(1)).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

use super::action::Action;
use super::config::Config;
use super::launch_request::LaunchRequest;
use super::receipt::{ExecResult, Finished};
use super::start::{prepare, OpenError, RootChoice, StagingStart};
use super::state_dir;
use crate::contain::choice::{ContainChoice, Contained};
use crate::inventory;
use crate::kinds::watchdog::AuditWriter;
use crate::kinds::watchdog::{Outcome, StopReason};
use crate::protocol::RefusalReason;

/// timeout(1)'s codes, which `exec` and `submit` share.
pub const EXIT_STOPPED: i32 = 124;
pub const EXIT_OWN_FAILURE: i32 = 125;
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;

fn fail(msg: impl std::fmt::Display) -> i32 {
    crate::tell::note(msg);
    EXIT_OWN_FAILURE
}

/// Everything up to a serving action: checks, start, state dir, log.
fn open_action(
    cfg: &Config,
    root: &RootChoice,
    new_session: bool,
    contain: &ContainChoice,
) -> Result<Action, OpenError> {
    if cfg.audit_log.exists() {
        return Err(OpenError::AuditLogExists(cfg.audit_log.clone()));
    }
    let staging_start = match &cfg.staging {
        Some(p) => Some(staging_identity(p).map_err(OpenError::Staging)?),
        None => None,
    };
    let mut started = prepare(root, new_session).map_err(OpenError::Start)?;
    let mut cfg = cfg.clone();
    if let Some(h) = &mut cfg.handover {
        h.kept_ignored = started.ignored.numbers(); // read before any was changed
        let inherited = crate::process::inherited::adopt_at_start(started.me.pid);
        h.inherited_total = inherited.len() as u64;
        h.inherited = inherited.into_iter().take(64).collect();
    }
    let cfg = &cfg;
    // Before the state directory and the log: `cgroup` that cannot be had
    // fails closed with nothing made and nothing launched.
    let contained = contain.apply(&cfg.run_id).map_err(OpenError::Contain)?;
    let give_back = |c: Contained| {
        if let Some(g) = c.group {
            let _ = g.remove(); // empty: nothing was placed in it yet
        }
    };
    let state = match state_dir::create(&cfg.state_dir) {
        Ok(s) => s,
        Err(e) => {
            give_back(contained);
            return Err(OpenError::StateDir(e));
        }
    };
    let audit = match AuditWriter::create(&cfg.audit_log, &cfg.run_id) {
        Ok(a) => a,
        Err(e) => {
            give_back(contained);
            return Err(OpenError::AuditLog {
                path: cfg.audit_log.clone(),
                err: e,
            });
        }
    };
    started.contained = Some(contained);
    Action::new(cfg.clone(), started, state, audit, staging_start)
}

fn ready_line(action: &Action, cfg: &Config) -> String {
    let state = action.state();
    json!({
        "event": "ready",
        "run_id": action.run_id(),
        "pid": std::process::id(),
        "start_time": crate::process::identity::self_start_time().unwrap_or(0),
        "uid": nix::unistd::getuid().as_raw(),
        "state_dir": state.path,
        "fifo": state.fifo_path(),
        "audit_log": std::path::absolute(&cfg.audit_log).unwrap_or(cfg.audit_log.clone()),
    })
    .to_string()
}

fn sealed_line(f: &Finished) -> String {
    match &f.head {
        Some(head) => json!({
            "event": "sealed",
            "run_id": f.run_id,
            "head": head,
            "outcome": f.outcome,
            "stop_reason": f.stop_reason,
            "positive": f.positive,
            "audit_log": f.audit_log,
        }),
        None => json!({
            "event": "unsealed",
            "run_id": f.run_id,
            "detail": f.audit_error.clone().unwrap_or_else(|| "the receipt could not be written".into()),
            "audit_log": f.audit_log,
        }),
    }
    .to_string()
}

/// `rea-watchdog run`: exit 0 only for a positive, sealed receipt.
pub fn run(cfg: Config, root: RootChoice, contain: &ContainChoice) -> i32 {
    let action = match open_action(&cfg, &root, true, contain) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let line = ready_line(&action, &cfg);
    if let Err(e) = action.state().write_ready(&line) {
        return fail(format!("cannot write ready.json: {e}"));
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    let fin = action.run();
    let _ = writeln!(out, "{}", sealed_line(&fin)).and_then(|_| out.flush());
    if fin.positive {
        0
    } else {
        1
    }
}

/// `rea-watchdog exec`: ARGV's status, 124 stopped (128+N when a signal to
/// the watchdog stopped it), 125 own failure, 126/127 cannot execute/find.
/// Says the sealed head (and a program it could not run) on stderr, and
/// writes `--json-status` once the action has ended.
pub fn exec(
    cfg: Config,
    argv: Vec<OsString>,
    deadline: Option<std::time::Duration>,
    contain: &ContainChoice,
    json_status: Option<&std::path::Path>,
) -> i32 {
    let how = ExecHow {
        deadline,
        stop_signal: crate::vocab::Sig::TERM,
        announce: true,
        unwatched: false,
    };
    let program = argv.first().cloned().unwrap_or_default();
    let fin = match exec_action(cfg, argv, &how, contain) {
        Ok(fin) => fin,
        Err(code) => return code,
    };
    super::exec_status::tell(&fin, &program);
    let code = exec_status(&fin);
    if let Some(path) = json_status {
        let status = super::exec_status::ExecStatus::of(&fin, code);
        if let Err(e) = super::exec_status::write(path, &status) {
            let path = path.display();
            crate::tell::note(format_args!("cannot write --json-status {path}: {e}"));
        }
    }
    code
}

/// What differs between `exec` and the `timeout` personality.
pub struct ExecHow {
    pub deadline: Option<std::time::Duration>,
    /// What ARGV's leader is asked to stop with.
    pub stop_signal: crate::vocab::Sig,
    /// Name the log on stderr when it was not given (exec; timeout is quiet).
    pub announce: bool,
    /// Bind no root (timeout does not care about its parent).
    pub unwatched: bool,
}

/// Runs ARGV as a one-job action to its sealed end; `Err` is the exit
/// status of a failure before anything was launched (said on stderr).
pub fn exec_action(
    mut cfg: Config,
    argv: Vec<OsString>,
    how: &ExecHow,
    contain: &ContainChoice,
) -> Result<Finished, i32> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let state_path = match mkdtemp(&base, "rea-exec.") {
        Ok(p) => p,
        Err(e) => {
            return Err(fail(format!(
                "cannot create a private state directory in {}: {e}",
                base.display()
            )))
        }
    };
    cfg.state_dir = state_path.clone();
    let announce = cfg.audit_log.as_os_str().is_empty() && how.announce;
    if cfg.audit_log.as_os_str().is_empty() {
        cfg.audit_log = base.join(format!("rea-exec-{}.jsonl", cfg.run_id));
    }
    let root = RootChoice {
        pid: None,
        start_time: None,
        unwatched: how.unwatched,
    };
    let mut action = match open_action(&cfg, &root, false, contain) {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&state_path);
            return Err(fail(e));
        }
    };
    // Nested `rea-watchdog submit` from inside ARGV finds and binds this
    // watchdog through ready.json, as with `run` (not printed: stdout is ARGV's).
    if let Err(e) = action.state().write_ready(&ready_line(&action, &cfg)) {
        let _ = std::fs::remove_dir_all(&state_path);
        return Err(fail(format!("cannot write ready.json: {e}")));
    }
    if announce {
        crate::tell::note(format_args!("audit log {}", cfg.audit_log.display()));
    }
    // A bare name is looked up on PATH here, and the program keeps the
    // name as typed for its argv[0] (as execvp gives it under timeout(1)).
    let program = argv
        .first()
        .and_then(|a| a.to_str())
        .filter(|a| !a.contains('/'))
        .and_then(crate::client::resolve_program)
        .map(|p| p.into_os_string());
    action.launch(LaunchRequest::exec(
        &argv,
        program,
        how.deadline,
        how.stop_signal,
    ));
    Ok(action.run())
}

/// exec's exit status for how the action ended.
pub fn exec_status(fin: &Finished) -> i32 {
    if fin.head.is_none() {
        crate::tell::note(format_args!(
            "the audit log could not be sealed: {}",
            fin.audit_error.as_deref().unwrap_or("unknown error")
        ));
        return EXIT_OWN_FAILURE;
    }
    match fin.exec {
        Some(ExecResult::Failed(RefusalReason::NotFound)) => return EXIT_NOT_FOUND,
        Some(ExecResult::Failed(RefusalReason::NotExecutable)) => return EXIT_CANNOT_EXECUTE,
        Some(ExecResult::Failed(_)) | None => return EXIT_OWN_FAILURE,
        Some(ExecResult::Exited(_)) => {}
    }
    if !fin.positive {
        crate::tell::note("quiescence was not proven; see the audit log");
        return EXIT_OWN_FAILURE;
    }
    match (fin.outcome, fin.stop_reason, fin.signal, fin.exec) {
        (Outcome::Stopped, Some(StopReason::Signal | StopReason::Hangup), Some(sig), _) => {
            128 + sig
        }
        (Outcome::Stopped, ..) => EXIT_STOPPED,
        (Outcome::Closed, _, _, Some(ExecResult::Exited(status))) => status.shell_code(),
        (Outcome::Closed, ..) => EXIT_OWN_FAILURE,
    }
}

fn mkdtemp(base: &std::path::Path, prefix: &str) -> std::io::Result<PathBuf> {
    let template = base.join(format!("{prefix}XXXXXX"));
    nix::unistd::mkdtemp(&template).map_err(std::io::Error::from)
}

/// The staging directory's identity at start, read by a helper with a
/// deadline (`src/bounded.rs`): a stage on a file system that does not
/// answer (a FUSE or NFS server gone) refuses the start, `stage_unreadable`,
/// with nothing made and nothing launched, instead of hanging before the
/// log exists.
fn staging_identity(
    p: &std::path::Path,
) -> Result<crate::kinds::watchdog::DirIdentity, StagingStart> {
    let what = format!("the staging directory {}", p.display());
    let key = p.display().to_string();
    let limit = crate::bounded::STAGE_DEADLINE;
    crate::bounded::run(&what, &key, limit, &[], || {
        inventory::dir_identity(p).map_err(crate::bounded::WorkError::of)
    })
    .map_err(|e| match e {
        crate::bounded::Failure::Blocked(b) => StagingStart::Unreadable(b),
        crate::bounded::Failure::Failed(cause) => StagingStart::Failed {
            path: p.to_path_buf(),
            cause,
        },
    })
}
