//! The `timeout` personality (docs/cli.md): rea-watchdog invoked as
//! `timeout` (argv\[0\]'s basename, or `rea-watchdog timeout ...`) takes
//! coreutils' command line ([`args`]), exit statuses and `-v` messages, and
//! is exec besides: the whole tree is owned (escapees are stopped too), an
//! audit log is written, and no root is bound.
//!
//! How coreutils' semantics map onto the stop procedure (docs/stop.md):
//! - DURATION is the job's deadline; `-s SIG` (any signal, 0 included) is
//!   what its leader is asked to stop with (the ask step), and its
//!   parent-death signal.
//! - The ask lasts as long as the leader lives (no `-k`) or until `-k DUR`
//!   has passed, and KILL follows ([`AskSpan`]); `-s KILL` is KILL at
//!   once. What the leader leaves behind (escapees) is then stopped: TERM,
//!   and KILL half a second later.
//! - 124 after a time-out, 137 when its leader had to be KILLed, the
//!   command's status with `--preserve-status` (128+N for signal N) and
//!   whenever the command ended on its own (its escapees stopped or not).

pub mod args;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use self::args::{Limit, Parsed, TimeoutArgs};
use crate::contain::choice::ContainChoice;
use crate::kinds::mode::ContainRequest;
use crate::kinds::watchdog::{Handover, Mode, Outcome, StopReason};
use crate::tell::{line, Stream};
use crate::vocab::{AskSpan, RefusalReason, Sig, Status};
use crate::watchdog::config::{new_run_id, Config};
use crate::watchdog::modes::{self, ExecHow, EXIT_OWN_FAILURE};
use crate::watchdog::receipt::{ExecResult, Finished};

/// Longer than this is no time-out at all (it would not fit an `Instant`).
const LONGEST: Duration = Duration::from_secs(u32::MAX as u64);
/// The TERM grace of what is left once the leader has exited: processes
/// timeout(1) would leave running, which no option of its speaks for.
const ESCAPEE_GRACE: Duration = Duration::from_millis(500);

/// True when the program was invoked as `timeout`.
pub fn invoked_as_timeout(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_name() == Some(std::ffi::OsStr::new("timeout"))
}

/// `timeout ARGS...` (ARGS without argv\[0\]): the exit status.
pub fn main(args: &[OsString]) -> i32 {
    let a = match args::parse(args) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => return say(Stream::Stdout, args::help_text().trim_end(), 0),
        Ok(Parsed::Version) => {
            let v = format!("timeout (rea-watchdog) {}", env!("CARGO_PKG_VERSION"));
            return say(Stream::Stdout, v, 0);
        }
        Err(msg) => return say(Stream::Stderr, msg, EXIT_OWN_FAILURE),
    };
    let (stop_signal, grace, ask) = stop_for(&a);
    let run_id = new_run_id();
    let audit_log = match std::env::var_os("REA_AUDIT_LOG") {
        Some(p) => PathBuf::from(p),
        None => std::env::temp_dir().join(format!("rea-timeout-{run_id}.jsonl")),
    };
    let cfg = Config {
        mode: Mode::Exec,
        run_id,
        state_dir: PathBuf::new(),
        audit_log,
        staging: None,
        action_deadline: None,
        term_grace: grace,
        kill_bound: Duration::from_secs(3),
        ask,
        output_cap: None,
        pass_env: Vec::new(),
        forward_signals: false,
        handover: Some(Handover {
            env_inherited: true,
            stdio_inherited: true,
            kept_ignored: Vec::new(),
            own_session: !a.foreground,
            pdeathsig: a.signal,
            inherited: Vec::new(),
            inherited_total: 0,
        }),
    };
    let how = ExecHow {
        deadline: match a.duration {
            Limit::After(d) if d <= LONGEST => Some(d),
            _ => None,
        },
        stop_signal,
        announce: false,
        unwatched: true,
    };
    // timeout's command line is coreutils' own: no --contain; the
    // environment picks it, as it sets exec's default.
    let request = match std::env::var_os("REA_CONTAIN") {
        None => ContainRequest::Auto,
        Some(v) => match v.to_str().and_then(ContainRequest::parse) {
            Some(r) => r,
            None => {
                let names = ContainRequest::NAMES;
                let msg = format!("timeout: REA_CONTAIN: {v:?} is not one of {names}");
                return say(Stream::Stderr, msg, EXIT_OWN_FAILURE);
            }
        },
    };
    let contain = ContainChoice {
        request,
        root_override: None,
    };
    match modes::exec_action(cfg, a.command.clone(), &how, &contain) {
        Ok(fin) => status(&a, &fin),
        Err(code) => code,
    }
}

fn say(stream: Stream, text: impl std::fmt::Display, code: i32) -> i32 {
    line(stream, text);
    code
}

/// What a time-out sends, as timeout(1) would: `-s SIG` to the leader,
/// then nothing until it exits (no `-k`) or until `-k DUR` has passed,
/// then KILL; `-s KILL` is KILL at once. Once the leader has exited, the
/// rest of the tree gets TERM, and KILL after [`ESCAPEE_GRACE`].
fn stop_for(a: &TimeoutArgs) -> (Sig, Duration, AskSpan) {
    // The parser admits 0..=64 only.
    let sig = Sig::from_number(a.signal).unwrap_or(Sig::TERM);
    if sig == Sig::KILL {
        return (Sig::TERM, Duration::ZERO, AskSpan::HalfGrace);
    }
    let span = match a.kill_after {
        Limit::After(d) => AskSpan::KillAfterMs(crate::clock::millis(d.min(LONGEST))),
        Limit::Never => AskSpan::UntilExit,
    };
    (sig, ESCAPEE_GRACE, span)
}

/// coreutils' exit status for how the action ended (module doc), with the
/// `-v` lines and the messages for 126 and 127.
fn status(a: &TimeoutArgs, fin: &Finished) -> i32 {
    let name = args::quote(a.command[0].as_encoded_bytes());
    match fin.exec {
        Some(ExecResult::Failed(RefusalReason::NotFound)) => {
            let msg = format!("timeout: failed to run command {name}: No such file or directory");
            return say(Stream::Stderr, msg, modes::EXIT_NOT_FOUND);
        }
        Some(ExecResult::Failed(RefusalReason::NotExecutable)) => {
            let msg = format!("timeout: failed to run command {name}: Permission denied");
            return say(Stream::Stderr, msg, modes::EXIT_CANNOT_EXECUTE);
        }
        _ => {}
    }
    if fin.head.is_none() || !fin.positive {
        return modes::exec_status(fin); // 125, with its message
    }
    let job = match fin.exec {
        Some(ExecResult::Exited(s)) => s,
        _ => return EXIT_OWN_FAILURE,
    };
    let timed_out =
        fin.outcome == Outcome::Stopped && fin.stop_reason == Some(StopReason::Deadline);
    if timed_out && a.verbose {
        let sent = args::signal_name(a.signal);
        line(
            Stream::Stderr,
            format_args!("timeout: sending signal {sent} to command {name}"),
        );
        if job == Status::Signal(libc::SIGKILL) && a.signal != libc::SIGKILL {
            line(
                Stream::Stderr,
                format_args!("timeout: sending signal KILL to command {name}"),
            );
        }
    }
    match (timed_out, job) {
        (true, Status::Signal(libc::SIGKILL)) => 128 + libc::SIGKILL,
        (true, _) if !a.preserve_status => modes::EXIT_STOPPED,
        (false, Status::Signal(n)) => {
            // Not ours to report as a number: die the same death.
            crate::process::dispositions::die_of(n);
            128 + n
        }
        (_, s) => s.shell_code(),
    }
}
