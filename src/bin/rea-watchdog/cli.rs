//! rea-watchdog's command line: the subcommands, their options and help,
//! and how the common bounds become a [`Config`]. `main.rs` dispatches.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use rea::contain::choice::ContainChoice;
use rea::kinds::mode::ContainRequest;
use rea::kinds::watchdog::Mode;
use rea::units::{parse_bytes, parse_duration, parse_positive_duration};
use rea::vocab::{is_token, AskSpan, StopSignal};
use rea::watchdog::config::{new_run_id, Config};

#[derive(Parser)]
#[command(
    name = "rea-watchdog",
    version,
    about = "Own every process of one action, stop it safely, prove nothing is left",
    long_about = "rea-watchdog owns every process of one action: each job is its own child in its \
own session, every orphan comes back to it (child subreaper), and on any stop trigger it \
TERMs, then KILLs, only processes it has bound to a verified pidfd, until waitid says ECHILD \
and /proc shows no descendant. Every decision goes into a SHA-256 hash-chained audit log; \
`rea-audit verify` decides from it whether the staging directory may be deleted.",
    after_help = rea::watchdog::help::EXIT_HELP,
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Print this program's man page or a shell completion script (made
    /// from these very options) and exit.
    #[arg(long, value_name = "KIND")]
    pub generate: Option<rea::generate::Generate>,
    #[command(subcommand)]
    pub cmd: Option<Cmd>,
}

#[derive(Args, Clone)]
pub struct Bounds {
    /// SIGTERM grace before SIGKILL sweeps (like timeout: 0.5, 500ms, 2s).
    #[arg(
        long,
        value_name = "DUR",
        allow_negative_numbers = true,
        value_parser = parse_duration,
        default_value = "500ms"
    )]
    pub term_grace: Duration,
    /// Longest the SIGKILL sweeps may take before the proof fails.
    #[arg(
        long,
        value_name = "DUR",
        allow_negative_numbers = true,
        value_parser = parse_duration,
        default_value = "3s"
    )]
    pub kill_bound: Duration,
    /// Forward these environment variables to jobs (repeatable).
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// A staging directory to inventory at close (never deleted).
    #[arg(long, value_name = "DIR")]
    pub staging: Option<PathBuf>,
    /// Kernel containment: the action's own cgroup v2 group (auto: when a
    /// writable cgroup2 hierarchy is found; cgroup: refuse to start
    /// without one; none: user space only). REA_CONTAIN sets the default.
    #[arg(
        long,
        value_name = "MODE",
        value_parser = parse_contain,
        default_value = "auto",
        env = "REA_CONTAIN"
    )]
    pub contain: ContainRequest,
    /// Look for the cgroup2 hierarchy at this mount point instead of
    /// /proc/self/mountinfo (tests).
    #[arg(long, value_name = "DIR", hide = true)]
    pub cgroup_root: Option<PathBuf>,
}

impl Bounds {
    pub fn contain(&self) -> ContainChoice {
        ContainChoice {
            request: self.contain,
            root_override: self.cgroup_root.clone(),
        }
    }
}

/// Why the command line's words did not make a [`Config`].
#[derive(Debug)]
pub enum CliError {
    /// A word that is none of the names the option takes.
    NotOneOf { text: String, names: &'static str },
    /// `--run-id` that is not a token.
    BadRunId(String),
    /// `--pass-env` that is not a variable name.
    BadPassEnv(String),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::NotOneOf { text, names } => write!(f, "{text:?} is not one of {names}"),
            CliError::BadRunId(id) => {
                write!(f, "--run-id {id:?} must match [A-Za-z0-9_.-]{{1,64}}")
            }
            CliError::BadPassEnv(name) => write!(f, "--pass-env {name:?} is not a variable name"),
        }
    }
}

impl std::error::Error for CliError {}

fn not_one_of(text: &str, names: &'static str) -> CliError {
    CliError::NotOneOf {
        text: text.to_string(),
        names,
    }
}

fn parse_contain(s: &str) -> Result<ContainRequest, CliError> {
    ContainRequest::parse(s).ok_or_else(|| not_one_of(s, ContainRequest::NAMES))
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Start a watchdog that serves a controller through DIR/requests.
    #[command(after_help = "\
Example (a controller in Python would read the ready line from stdout):
  rea-watchdog run --state-dir /tmp/act1 --audit-log /tmp/act1.jsonl \\
      --staging /srv/stage --action-deadline 10m
  REA_STATE_DIR=/tmp/act1 rea-watchdog submit --name install --deadline 200s -- ./install.sh
  rea-watchdog close --state-dir /tmp/act1      # prints the head hash to pin
  rea-audit verify /tmp/act1.jsonl --expect-head HEX --staging /srv/stage

The root controller is the parent unless --root-pid is given; if it dies, the
action stops (root_lost) and the verdict is retain.")]
    Run {
        /// Private state directory (created 0700, or an empty one of ours).
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// The audit log to create (must not exist).
        #[arg(long, value_name = "FILE")]
        audit_log: PathBuf,
        /// Run id ([A-Za-z0-9_.-]{1,64}); generated when absent.
        #[arg(long, value_name = "ID")]
        run_id: Option<String>,
        /// The root controller's pid (default: the parent).
        #[arg(long, value_name = "PID")]
        root_pid: Option<i32>,
        /// The root's start time (/proc/PID/stat field 22), to pin its identity.
        #[arg(long, value_name = "TICKS", requires = "root_pid")]
        root_start_time: Option<u64>,
        /// Forward signals that are not stops (USR1, USR2, WINCH, ...) to
        /// every running job's leader, instead of recording and ignoring them.
        #[arg(long)]
        forward_signals: bool,
        /// Deadline for the whole action; caps every job's deadline.
        #[arg(
            long,
            value_name = "DUR",
            allow_negative_numbers = true,
            value_parser = parse_positive_duration
        )]
        action_deadline: Option<Duration>,
        /// Combined stdout+stderr cap per job (65536, 64K, 1M).
        #[arg(long, value_name = "BYTES", value_parser = parse_bytes, default_value = "64K")]
        output_cap: u64,
        #[command(flatten)]
        bounds: Bounds,
    },
    /// Run ARGV as a one-job action, like timeout(1) but owning the whole tree.
    #[command(after_help = "\
Example:
  rea-watchdog exec --deadline 60 -- make -j2 check
ARGV is this process's command: its environment (--env minimal: run's), its
stdin, stdout and stderr (--capture: relayed, counted, --output-cap), and the
signals it ignores. Orphans ARGV leaves behind are stopped (exit 124); children
this process had before exec began are left alone. Ctrl-C stops the action
cleanly (exit 130); ALRM is the deadline now; USR1, USR2, WINCH and the other
signals are forwarded to ARGV. Nested jobs: ARGV may run
`rea-watchdog submit -- ...` (REA_STATE_DIR is set for it). As `timeout` (a
symlink, or `rea-watchdog timeout --help`) it takes coreutils' command line.")]
    Exec {
        /// Where to write the audit log (default: a private file, path on stderr).
        #[arg(long, value_name = "FILE")]
        audit_log: Option<PathBuf>,
        /// Stop the action after this long (exit 124).
        #[arg(
            long,
            value_name = "DUR",
            allow_negative_numbers = true,
            value_parser = parse_positive_duration
        )]
        deadline: Option<Duration>,
        /// Stop the action if ARGV writes more than this many bytes in all
        /// (with --capture).
        #[arg(long, value_name = "BYTES", value_parser = parse_bytes, requires = "capture")]
        output_cap: Option<u64>,
        /// Relay ARGV's output through pipes of the watchdog's (counted and
        /// hashed in the log; --output-cap applies) instead of handing it
        /// this process's stdin, stdout and stderr; stdin is /dev/null.
        #[arg(long)]
        capture: bool,
        /// ARGV's environment: `inherit` (this process's, with REA_*
        /// set) or `minimal` (run's job environment: PATH LANG HOME
        /// TMPDIR REA_* and --pass-env).
        #[arg(long, value_name = "ENV", value_parser = ["inherit", "minimal"], default_value = "inherit")]
        env: String,
        /// Once the action has ended, write how to FILE as one JSON object
        /// (exit status, outcome, stop reason, sealed head, ARGV's status;
        /// audit-schema/exec-status.schema.json).
        #[arg(long, value_name = "FILE")]
        json_status: Option<PathBuf>,
        /// Write rea-watchdog's own lines (the log's path, the sealed head,
        /// a program it could not run, any trouble) to FILE, appended,
        /// instead of stderr, which is then ARGV's alone.
        #[arg(long, value_name = "FILE")]
        notes: Option<PathBuf>,
        #[command(flatten)]
        bounds: Bounds,
        /// The command and its arguments.
        #[arg(required = true, last = true, value_name = "ARGV")]
        argv: Vec<OsString>,
    },
    /// Ask a running watchdog to run ARGV as this process's job and wait.
    #[command(after_help = "\
The job runs as the watchdog's child in its own session, not as ours; our
exit status is the job's. With --capture its output comes back and is
printed here. If this process dies first, the whole action stops
(caller_lost).")]
    Submit {
        /// The watchdog's state directory (its ready line names it; set
        /// inside every job).
        #[arg(long, value_name = "DIR", env = "REA_STATE_DIR")]
        state_dir: PathBuf,
        /// A label for the audit log (install, rehearsal, ...).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// The job's deadline (the action stops when it passes).
        #[arg(
            long,
            value_name = "DUR",
            allow_negative_numbers = true,
            value_parser = parse_positive_duration,
            default_value = "60s"
        )]
        deadline: Duration,
        /// The job's own inner alarm: SIGALRM to its leader this long after
        /// it started (below --deadline; recorded; not a stop), as in
        /// "install 200 s, inner alarm 180 s".
        #[arg(long, value_name = "DUR", value_parser = parse_positive_duration)]
        inner_alarm: Option<Duration>,
        /// What the job's leader is asked to stop with when the action
        /// stops (TERM, INT, HUP, QUIT, USR1, USR2 or ALRM; default TERM). The
        /// leader is asked first and alone; the rest of its tree gets
        /// SIGTERM only when it has exited or half the TERM grace passed.
        #[arg(long, value_name = "SIG", value_parser = parse_stop_signal)]
        stop_signal: Option<StopSignal>,
        /// Return the job's output (up to the cap) and print it here.
        #[arg(long)]
        capture: bool,
        /// The program (looked up in PATH here) and its arguments.
        #[arg(required = true, last = true, value_name = "ARGV")]
        argv: Vec<String>,
    },
    /// Stop the action now (stop_requested) and wait until it is stopped.
    #[command(after_help = "\
Prints {\"stopped\":true,\"reason\":...,\"quiescent\":...}. Only the root
controller or a descendant may ask; from elsewhere, send the watchdog
SIGTERM (a clean stop with a receipt).")]
    Stop(Ask),
    /// Close the action: prove quiescence, write the receipt, print the head.
    #[command(after_help = "\
Prints {\"outcome\",\"stop_reason\",\"positive\",\"head\",\"audit_log\"}: pin
the head and give it to `rea-audit verify LOG --expect-head HEAD`. Closing
while jobs run stops them first (close_while_running).")]
    Close(Ask),
    /// After a lost watchdog: end what is left in its action's cgroup and
    /// write a sealed recovery log (refuses unless it is safe).
    #[command(after_help = rea::recover::HELP)]
    Recover {
        /// The lost watchdog's audit log (unsealed; a torn last line is
        /// fine). Only read, never written.
        log: PathBuf,
        /// The recovery log to create: must not exist, must not be inside
        /// the stage.
        #[arg(long, value_name = "NEW")]
        audit_log: PathBuf,
        /// The staging directory to inventory once the group is gone
        /// (default: the one LOG recorded; never deleted).
        #[arg(long, value_name = "DIR")]
        staging: Option<PathBuf>,
    },
}

/// `stop` and `close`: which watchdog, and how long to wait for its answer.
#[derive(Args)]
pub struct Ask {
    /// The watchdog's state directory (its ready line names it).
    #[arg(long, value_name = "DIR", env = "REA_STATE_DIR")]
    pub state_dir: PathBuf,
    /// How long to wait for the answer: 60, 0.5, 500ms, 2m.
    #[arg(
        long,
        value_name = "DUR",
        allow_negative_numbers = true,
        value_parser = parse_duration,
        default_value = "8s"
    )]
    pub wait: Duration,
}

pub fn config(mode: Mode, run_id: Option<String>, b: Bounds) -> Result<Config, CliError> {
    let run_id = run_id.unwrap_or_else(new_run_id);
    if !is_token(&run_id) {
        return Err(CliError::BadRunId(run_id));
    }
    for name in &b.pass_env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(CliError::BadPassEnv(name.clone()));
        }
    }
    Ok(Config {
        mode,
        run_id,
        state_dir: PathBuf::new(),
        audit_log: PathBuf::new(),
        staging: b.staging,
        action_deadline: None,
        term_grace: b.term_grace,
        kill_bound: b.kill_bound,
        ask: AskSpan::HalfGrace,
        output_cap: None,
        pass_env: b.pass_env,
        forward_signals: false,
        handover: None,
    })
}

/// `--stop-signal`: TERM, INT, HUP, QUIT, USR1, USR2, ALRM (also SIGTERM, any case).
fn parse_stop_signal(s: &str) -> Result<StopSignal, CliError> {
    StopSignal::parse(s).ok_or_else(|| not_one_of(s, StopSignal::NAMES))
}
