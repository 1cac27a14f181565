//! `rea-watchdog`: owns every process of one action and proves none is left.

mod cli;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use rea::client::{resolve_program, ClientError, Session, Submit};
use rea::kinds::watchdog::{Handover, Mode};
use rea::protocol::{RefusalReason, Reply};
use rea::vocab::is_token;
use rea::watchdog::modes::{
    self, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_OWN_FAILURE, EXIT_STOPPED,
};
use rea::watchdog::start::RootChoice;

use cli::{config, Ask, Cli, Cmd};

fn die(msg: impl std::fmt::Display) -> i32 {
    rea::tell::note(msg);
    EXIT_OWN_FAILURE
}

/// Records SIGPIPE's disposition as the caller gave it, before Rust's
/// runtime sets it to SIG_IGN (`process::dispositions`): exec hands an
/// ignored SIGPIPE on to its job, as timeout(1) does.
#[used]
#[link_section = ".init_array"]
static NOTE_SIGPIPE: extern "C" fn() = {
    extern "C" fn note() {
        rea::process::dispositions::note_sigpipe_before_main();
    }
    note
};

pub fn main() -> ExitCode {
    // The `timeout` personality reads coreutils' command line, not ours.
    let args: Vec<OsString> = std::env::args_os().collect();
    let becomes_watchdog = |a: &OsString| a == "run" || a == "exec" || a == "timeout";
    if args.get(1).is_some_and(becomes_watchdog)
        || args
            .first()
            .is_some_and(|a| rea::timeout::invoked_as_timeout(a))
    {
        rea::process::dispositions::block_early();
    }
    let timeout = match args.get(1) {
        Some(a) if a == "timeout" => Some(&args[2..]),
        _ if args
            .first()
            .is_some_and(|a| rea::timeout::invoked_as_timeout(a)) =>
        {
            Some(&args[1..])
        }
        _ => None,
    };
    if let Some(rest) = timeout {
        return ExitCode::from(rea::timeout::main(rest).clamp(0, 255) as u8);
    }
    let code = match Cli::try_parse() {
        Ok(Cli { cmd: Some(cmd), .. }) => dispatch(cmd),
        Ok(Cli { generate, .. }) => {
            let kind = generate.unwrap_or(rea::generate::Generate::Man);
            rea::generate::print(kind, <Cli as clap::CommandFactory>::command())
        }
        Err(e) => {
            let _ = e.print();
            if e.use_stderr() {
                EXIT_OWN_FAILURE
            } else {
                0
            }
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// `exec --notes FILE` could not be opened for appending.
#[derive(Debug)]
struct NotesError {
    path: std::path::PathBuf,
    error: std::io::Error,
}

impl std::fmt::Display for NotesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--notes {}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for NotesError {}

/// `exec --notes FILE`: rea's own lines go to FILE (appended, created),
/// so that exec's stderr is the program's alone.
fn notes_to(path: &std::path::Path) -> Result<(), NotesError> {
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path);
    let f = file.map_err(|error| NotesError {
        path: path.to_path_buf(),
        error,
    })?;
    rea::tell::notes_to(f);
    Ok(())
}

/// `recover`: its result printed as one JSON line (a closed stdout is not
/// a reason to panic: the log holds it); its exit code.
fn recover(o: rea::recover::Options) -> i32 {
    let done = rea::recover::recover(&o);
    match serde_json::to_string(&done) {
        Ok(line) => {
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{line}");
        }
        Err(e) => return die(format!("cannot print the result: {e}")),
    }
    done.exit_code
}

fn dispatch(cmd: Cmd) -> i32 {
    match cmd {
        Cmd::Recover {
            log,
            audit_log,
            staging,
        } => recover(rea::recover::Options {
            log,
            new: audit_log,
            staging,
        }),
        Cmd::Run {
            state_dir,
            audit_log,
            run_id,
            root_pid,
            root_start_time,
            action_deadline,
            output_cap,
            forward_signals,
            bounds,
        } => {
            let contain = bounds.contain();
            let mut cfg = match config(Mode::Run, run_id, bounds) {
                Ok(c) => c,
                Err(e) => return die(e),
            };
            cfg.state_dir = state_dir;
            cfg.audit_log = audit_log;
            cfg.action_deadline = action_deadline;
            cfg.output_cap = Some(output_cap);
            cfg.forward_signals = forward_signals;
            modes::run(
                cfg,
                RootChoice {
                    pid: root_pid,
                    start_time: root_start_time,
                    unwatched: false,
                },
                &contain,
            )
        }
        Cmd::Exec {
            audit_log,
            deadline,
            output_cap,
            capture,
            env,
            json_status,
            notes,
            bounds,
            argv,
        } => {
            if let Err(e) = notes.as_deref().map_or(Ok(()), notes_to) {
                return die(e);
            }
            let contain = bounds.contain();
            let mut cfg = match config(Mode::Exec, None, bounds) {
                Ok(c) => c,
                Err(e) => return die(e),
            };
            cfg.audit_log = audit_log.unwrap_or_default();
            cfg.output_cap = output_cap;
            cfg.handover = Some(handover(&env, capture));
            modes::exec(cfg, argv, deadline, &contain, json_status.as_deref())
        }
        Cmd::Submit {
            state_dir,
            name,
            deadline,
            inner_alarm,
            stop_signal,
            capture,
            argv,
        } => submit(
            &state_dir,
            Submit {
                argv,
                deadline,
                inner_alarm,
                stop_signal,
                capture,
                name,
            },
        ),
        Cmd::Stop(Ask { state_dir, wait }) => answer("stop", &state_dir, |s| s.stop(wait), stopped),
        Cmd::Close(Ask { state_dir, wait }) => {
            answer("close", &state_dir, |s| s.close(wait), closed)
        }
    }
}

/// `exec`'s handover as the command line asks for it; what the caller
/// ignored and the children it has are filled in at start.
fn handover(env: &str, capture: bool) -> Handover {
    Handover {
        env_inherited: env == "inherit",
        stdio_inherited: !capture,
        kept_ignored: Vec::new(), // filled from what the caller ignored, at start
        own_session: true,
        pdeathsig: libc::SIGKILL,
        inherited: Vec::new(), // the children it has at start
        inherited_total: 0,
    }
}

/// `submit`: the name checked and the program resolved here (a missing
/// command is 127, as a shell says), then one spawn request; its exit.
fn submit(state_dir: &Path, mut job: Submit) -> i32 {
    if let Some(n) = &job.name {
        if !is_token(n) {
            return die(format!("--name {n:?} must match [A-Za-z0-9_.-]{{1,64}}"));
        }
    }
    match resolve_program(&job.argv[0]) {
        Some(p) => job.argv[0] = p.to_string_lossy().into_owned(),
        None => {
            rea::tell::note(format_args!("{}: command not found", job.argv[0]));
            return EXIT_NOT_FOUND;
        }
    }
    let session = match Session::open(state_dir) {
        Ok(s) => s,
        Err(e) => return die(e),
    };
    match session.submit(job) {
        Ok(replies) => submit_status(&replies),
        Err(e) => die(e),
    }
}

/// `stop`'s line and whether it is good: the stop completed quiescent.
fn stopped(reply: &Reply) -> Option<(serde_json::Value, bool)> {
    match reply {
        Reply::StopComplete {
            reason, quiescent, ..
        } => Some((
            serde_json::json!({"stopped": true, "reason": reason, "quiescent": quiescent}),
            *quiescent,
        )),
        _ => None,
    }
}

/// `close`'s line and whether it is good: the receipt is positive.
fn closed(reply: &Reply) -> Option<(serde_json::Value, bool)> {
    match reply {
        Reply::Closed {
            outcome,
            stop_reason,
            positive,
            head,
            audit_log,
            ..
        } => Some((
            serde_json::json!({
                "outcome": outcome, "stop_reason": stop_reason, "positive": positive,
                "head": head, "audit_log": audit_log,
            }),
            *positive,
        )),
        _ => None,
    }
}

/// `stop` and `close`: one request to the watchdog, its final reply printed
/// as one JSON line. Exit 0 when `report` says the outcome is good, 1 when
/// not, 125 for a refusal, an unexpected reply or any client error.
fn answer(
    what: &str,
    state_dir: &Path,
    ask: impl FnOnce(&Session) -> Result<Reply, ClientError>,
    report: impl FnOnce(&Reply) -> Option<(serde_json::Value, bool)>,
) -> i32 {
    let reply = match Session::open(state_dir).and_then(|s| ask(&s)) {
        Ok(r) => r,
        Err(e) => return die(e),
    };
    if let Reply::Refused { reason, detail, .. } = &reply {
        return die(format!("{what} refused: {} ({detail})", reason.as_str()));
    }
    match report(&reply) {
        Some((line, good)) => {
            rea::tell::line(rea::tell::Stream::Stdout, &line);
            if good {
                0
            } else {
                1
            }
        }
        None => die(format!("unexpected reply: {reply:?}")),
    }
}

/// Prints captured output and maps the result like timeout(1).
fn submit_status(replies: &[Reply]) -> i32 {
    use std::io::Write;
    let print = |s: &rea::protocol::StreamReply, out: &mut dyn Write| {
        if let Some(bytes) = s.data_b64.as_deref().and_then(rea::b64::decode) {
            let _ = out.write_all(&bytes);
            let _ = out.flush();
        }
    };
    match replies.last() {
        Some(Reply::Exited {
            status,
            stdout,
            stderr,
            ..
        }) => {
            print(stdout, &mut std::io::stdout());
            print(stderr, &mut std::io::stderr());
            status.shell_code()
        }
        Some(Reply::Stopped {
            reason,
            stdout,
            stderr,
            ..
        }) => {
            print(stdout, &mut std::io::stdout());
            print(stderr, &mut std::io::stderr());
            rea::tell::note(format_args!("the action was stopped ({})", reason.as_str()));
            EXIT_STOPPED
        }
        Some(Reply::Refused { reason, detail, .. }) => {
            rea::tell::note(format_args!("refused: {} ({detail})", reason.as_str()));
            match reason {
                RefusalReason::NotFound => EXIT_NOT_FOUND,
                RefusalReason::NotExecutable => EXIT_CANNOT_EXECUTE,
                _ => EXIT_OWN_FAILURE,
            }
        }
        other => die(format!("unexpected reply: {other:?}")),
    }
}
