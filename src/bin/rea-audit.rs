//! `rea-audit`: verify a rea audit log and derive whether deletion is allowed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rea::audit::people::escape;
use rea::audit::reconcile::text::human;
use rea::audit::reconcile::{reconcile, Options as ReconcileOptions, EXIT_ERROR};
use rea::audit::recover::log::{is_recovery_log, verify_recovery_file, RecoveryOptions};
use rea::audit::show::write_timeline;
use rea::audit::stage::log::{is_stage_log, verify_stage_file};
use rea::audit::stage::remove_log::{is_remove_log, verify_remove_file};
use rea::audit::verdict::Status;
use rea::audit::verify::{verify_file, VerifyOptions};
use rea::log::chain::is_digest;
use rea::vocab::is_token;

const EXIT_HELP: &str = "\
Exit codes (verify):
  0  delete_allowed  sealed, intact, positive receipt (and --staging matches,
                     and no process, mount or loop device holds it now)
  1  retain          sealed and intact, but the receipt or staging forbids
                     deletion (stage_held: something holds the stage; each
                     holder is named, see rea-audit holders --help;
                     stage_unreadable: the stage, or a mount under it, could
                     not be read within 5 s, at close or now: the answer
                     still comes within 10 s, the blocked helper named)
  2  incomplete      torn last line or no receipt: the watchdog did not finish
  3  tampered        chain, sequence, run, replay or pinned head do not hold
  4  error           the log could not be read, or the command line is wrong

A discard log (written by rea-stage discard; its first record is
discard_started) is recognised and checked the same strict way (chain, seq,
run, genesis, canonical lines, the decision last, agreeing with the records):
  0  discarded       intact, and the stage was removed after every check held
  1  refused         intact, and the discard refused (or stopped on a change)
  2  incomplete      torn last line or no decision: the discard did not finish
  3  tampered        chain, sequence, run, order or the decision do not hold
  4  error           the log could not be read, or the command line is wrong

A removal log (written by rea-stage remove; its first record is
remove_started) is checked the same strict way, its decision run again on the
verdict and walk it recorded: 0 removed, 1 refused, 2 incomplete, 3 tampered,
4 error, 5 stopped (removal began and stopped; rea-stage remove --help).

A recovery log (written by rea-watchdog recover; its first record is
recovery_started) is recognised too and checked the same strict way; the
recovery's decision is run again on the facts it recorded. The verdict has
a `result` (recovered, failed, refused, incomplete, tampered, error):
  0  delete_allowed  recovered: the group was emptied (populated 0) and
                     removed, nothing of the run left, and the stage LOG
                     recorded was inventoried and --staging matches it
  1  retain          refused (the refusal's code is a reason), failed, or
                     the stage is not cleared (staging_not_checked, ...)
  2  incomplete      torn last line or no decision: the recovery did not finish
  3  tampered        chain, sequence, run, order or the decision do not hold
  4  error           the log could not be read, or the command line is wrong
The lost watchdog's own log stays retain: recovery never writes it.

Only a pinned head (--expect-head) detects a log that was cut short and
re-chained by someone able to write the file; the chain alone cannot.";

const RECONCILE_HELP: &str = "\
Read-only: reconcile never signals, deletes, retries or writes anything. It
reads the log up to its last complete line (sealed, unsealed or still
growing), probes the watchdog and every process the log names by (pid, start
time) with pidfd_open and a /proc read-back, lists live processes whose
environment carries the run's REA_RUN_ID (a hint), and compares --staging and
--state-dir with what the log recorded.

With containment (the log's containment record names the action's cgroup),
it re-opens the group by its recorded path and inode and lists its members
(pid, start time, comm, alive); a group that is gone, or whose name now
names another directory (recreated), is said plainly and not read. Live
members are the action still running: outcome running, and with the
watchdog gone the report names the recovery command,
  rea-watchdog recover LOG --audit-log NEW [--staging DIR]

--state-dir DIR: checks that DIR is the path run_started recorded, is a
directory (not a symlink) owned by the watchdog's uid with mode 0700, and
reports whether the request FIFO, tmp/ (the private temp root) and
ready.json are still there.

Exit codes (reconcile; 1-3 are verify's and never used here):
  0  delete_allowed  sealed, verify says delete_allowed, nothing named alive
  5  running         the watchdog is alive and the log not sealed: wait, or
                     close it; or the action's cgroup has live members
                     (group_members_alive): with the watchdog gone, recover
  6  review          anything else: each reason is named with what to check
  4  error           the log could not be read, or the command line is wrong";

const HOLDERS_HELP: &str = "\
Read-only: the scan never signals, writes, or opens a file of the tree but
to walk it. It walks each DIR once by descriptor (no symlink followed, no
other filesystem entered) into the set of its (device, inode), then looks
at every process in /proc: its open fds (O_PATH too), cwd, root, exe and
file mappings, and its unix sockets bound to a socket file of the tree
(found in the kernel's socket table, sock_diag, by the file's device and
inode, whatever mount namespace bound it: named with the socket's path in
the tree, listening or connected); the mounts of every mount namespace a
process is in (on a tree entry, or a bind mount of one); and every bound
loop device (backing file). A socket file with no live socket behind it
holds nothing. A file unlinked from the tree while held counts when its last
directory is a tree directory. A process that cannot be read (another
user's, without root; one in an outer user namespace) is named as not
readable: the answer does not cover it. Processes in PID namespaces this
one cannot see are not covered either; run as root in the outermost one to
see every process.

rea-audit verify --staging DIR runs the same scan: a holder is retain
(stage_held).

Exit codes (holders):
  0  not held   no process, mount or loop device holds the trees (what
                could not be read is named)
  1  held       a holder, mount or loop device was found (each named)
  4  error      a DIR could not be walked, or the command line is wrong;
                a DIR not read within 5 s (a stuck mount on or under it)
                is stage_unreadable, the blocked helper named: the walk
                runs in a helper process, so the answer comes within 10 s";

#[derive(Parser)]
#[command(
    name = "rea-audit",
    version,
    about = "Verify a rea audit log and decide whether the staging directory may be deleted",
    long_about = "Verify a rea audit log (SHA-256 hash chain, sequence, receipt, replay) and \
derive the verdict: delete_allowed or retain. rea-audit never deletes anything.",
    after_help = EXIT_HELP,
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true
)]
struct Cli {
    /// Print this program's man page or a shell completion script (made
    /// from these very options) and exit.
    #[arg(long, value_name = "KIND")]
    generate: Option<rea::generate::Generate>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check the log and print the verdict (exit 0 only for delete_allowed).
    #[command(after_help = EXIT_HELP)]
    Verify {
        /// The audit log (JSON Lines) written by rea-watchdog, a discard
        /// log written by rea-stage discard, or a recovery log written by
        /// rea-watchdog recover.
        log: PathBuf,
        /// The head hash the controller pinned when the watchdog sealed the log.
        #[arg(long, value_name = "HEX")]
        expect_head: Option<String>,
        /// The run id the controller expects this log to belong to.
        #[arg(long, value_name = "ID")]
        expect_run: Option<String>,
        /// The staging directory about to be deleted: must be the one the
        /// receipt names, unchanged since.
        #[arg(long, value_name = "DIR")]
        staging: Option<PathBuf>,
        /// The content digest of what the controller uploaded, computed
        /// before the upload (`rea-stage manifest --digest FILE...`): the
        /// stage the run started with must hold exactly that
        /// (stage_digest_mismatch otherwise; docs/stage.md).
        #[arg(long, value_name = "HEX")]
        expect_stage_digest: Option<String>,
        /// Print the verdict object (audit-schema/verdict.schema.json).
        #[arg(long)]
        json: bool,
    },
    /// Say what is known and what may still be alive after an unhappy path
    /// (read-only): delete_allowed, running or review.
    #[command(after_help = RECONCILE_HELP)]
    Reconcile {
        /// The audit log (sealed, unsealed, or still being written).
        log: PathBuf,
        /// The watchdog's state directory, to compare with the log's.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// The staging directory, to compare with what the log recorded.
        #[arg(long, value_name = "DIR")]
        staging: Option<PathBuf>,
        /// Print the whole report (audit-schema/reconcile.schema.json).
        #[arg(long)]
        json: bool,
    },
    /// Verify the log, then print what verify found and the log as a
    /// timeline people read (control characters escaped); exits as verify.
    #[command(after_help = SHOW_HELP)]
    Show {
        /// The audit log (a watchdog's, a discard log, a recovery log).
        log: PathBuf,
        /// Print one JSON object instead: the verdict (as verify --json
        /// prints it), the first record's time, and every line's seq, time,
        /// kind and text (audit-schema/show.schema.json).
        #[arg(long)]
        json: bool,
    },
    /// Verify the log and write it as one self-contained HTML page for a
    /// reviewer (exits as verify).
    ///
    /// The verdict as its banner, the run, a timeline, the process tree of
    /// the stop, the staging inventory, every record, and the command that
    /// re-verifies.
    #[command(after_help = REPORT_HELP)]
    Report {
        /// The audit log (a watchdog's, a discard log, a recovery log).
        log: PathBuf,
        /// The staging directory about to be deleted, checked as verify
        /// --staging checks it (and named in the re-verify command).
        #[arg(long, value_name = "DIR")]
        staging: Option<PathBuf>,
        /// The head hash the controller pinned when the watchdog sealed the log.
        #[arg(long, value_name = "HEX")]
        expect_head: Option<String>,
        /// Where to write the page (FILE.html; `-` or /dev/stdout for
        /// standard output). Written whole to a temporary file beside it,
        /// then renamed; an existing FIFO or device is written to instead.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
    },
    /// List every process, mount and loop device that holds a directory
    /// tree (read-only; matched by device and inode, never by path).
    #[command(after_help = HOLDERS_HELP)]
    Holders {
        /// The directories (a stage, its temp root); not symlinks.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Print the scan (audit-schema/holders.schema.json).
        #[arg(long)]
        json: bool,
    },
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("rea-audit: {msg}");
    ExitCode::from(Status::Error.exit_code() as u8)
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Status::Error.exit_code()
            } else {
                0
            };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let Some(cmd) = cli.cmd else {
        let kind = cli.generate.unwrap_or(rea::generate::Generate::Man);
        let code = rea::generate::print(kind, <Cli as clap::CommandFactory>::command());
        return ExitCode::from(code as u8);
    };
    match cmd {
        Cmd::Verify {
            log,
            expect_head,
            expect_run,
            staging,
            expect_stage_digest,
            json,
        } => verify(
            &log,
            VerifyOptions {
                expect_head,
                expect_run,
                staging,
                expect_stage_digest,
                staging_fd: None,
            },
            json,
        ),
        Cmd::Reconcile {
            log,
            state_dir,
            staging,
            json,
        } => reconcile_log(&log, ReconcileOptions { state_dir, staging }, json),
        Cmd::Holders { dirs, json } => holders(&dirs, json),
        Cmd::Show { log, json } => show(&log, json),
        Cmd::Report {
            log,
            staging,
            expect_head,
            output,
        } => {
            use rea::audit::report::{run, Options, Output};
            let output = match output.as_os_str() == "-" {
                true => Output::Stdout,
                false => Output::File(output),
            };
            let opts = Options {
                log,
                staging,
                expect_head,
                output,
            };
            match run(&opts) {
                Ok(code) => ExitCode::from(code as u8),
                // Says whether no page was written or one was cut short.
                Err(e) => usage(&e.to_string()),
            }
        }
    }
}

/// With `--json` the value as pretty JSON, else `human()` as is; `Err` is
/// the exit for a value that cannot be printed (`what` it is).
fn print_out<T: serde::Serialize>(
    json: bool,
    value: &T,
    what: &str,
    human: impl FnOnce() -> String,
) -> Result<(), ExitCode> {
    if !json {
        print!("{}", human());
        return Ok(());
    }
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            println!("{s}");
            Ok(())
        }
        Err(e) => Err(usage(&format!("cannot print the {what}: {e}"))),
    }
}

/// `verify LOG`: the verifier of the log's kind (discard, removal,
/// recovery or the watchdog's), its verdict printed, its exit code.
fn verify(log: &std::path::Path, opts: VerifyOptions, json: bool) -> ExitCode {
    if let Some(h) = &opts.expect_head {
        if !is_digest(h) {
            return usage("--expect-head must be 64 lowercase hex digits");
        }
    }
    if let Some(h) = &opts.expect_stage_digest {
        if !is_digest(h) {
            return usage("--expect-stage-digest must be 64 lowercase hex digits");
        }
    }
    let (head, run) = (opts.expect_head.as_deref(), opts.expect_run.as_deref());
    let other = is_stage_log(log) || is_recovery_log(log) || is_remove_log(log);
    if opts.expect_stage_digest.is_some() && other {
        return usage("--expect-stage-digest applies to a watchdog's audit log only");
    }
    if let Some(r) = run {
        if !is_token(r) {
            return usage("--expect-run must match [A-Za-z0-9_.-]{1,64}");
        }
    }
    if opts.staging.is_some() && (is_stage_log(log) || is_remove_log(log)) {
        return usage("--staging does not apply to a discard or removal log (rea-stage)");
    }
    if is_stage_log(log) {
        let v = verify_stage_file(log, head, run);
        if let Err(code) = print_out(json, &v, "verdict", || v.human()) {
            return code;
        }
        return ExitCode::from(v.exit_code as u8);
    }
    if is_remove_log(log) {
        let v = verify_remove_file(log, head, run);
        if let Err(code) = print_out(json, &v, "verdict", || v.human()) {
            return code;
        }
        return ExitCode::from(v.exit_code as u8);
    }
    if is_recovery_log(log) {
        let opts = RecoveryOptions {
            expect_head: opts.expect_head.clone(),
            expect_run: opts.expect_run.clone(),
            staging: opts.staging.clone(),
        };
        let v = verify_recovery_file(log, &opts);
        if let Err(code) = print_out(json, &v, "verdict", || v.human()) {
            return code;
        }
        return ExitCode::from(v.exit_code as u8);
    }
    let v = verify_file(log, &opts);
    if v.status == Status::Error {
        // Not a log at all (unreadable, a FIFO, a device): say so
        // where people look, whatever --json asks for on stdout.
        for r in &v.reasons {
            eprintln!(
                "rea-audit: {}: {}",
                escape(&log.display().to_string()),
                r.detail
            );
        }
    }
    if let Err(code) = print_out(json, &v, "verdict", || v.human()) {
        return code;
    }
    ExitCode::from(v.exit_code as u8)
}

/// `reconcile LOG`: the report printed, its exit code.
fn reconcile_log(log: &std::path::Path, opts: ReconcileOptions, json: bool) -> ExitCode {
    let r = match reconcile(log, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rea-audit: {}: {}", escape(&log.display().to_string()), e);
            return ExitCode::from(EXIT_ERROR as u8);
        }
    };
    if let Err(code) = print_out(json, &r, "report", || human(&r)) {
        return code;
    }
    ExitCode::from(r.exit_code as u8)
}

/// `holders DIR...`: the scan printed; exit 1 when held.
fn holders(dirs: &[std::path::PathBuf], json: bool) -> ExitCode {
    let paths: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
    // The walk and the scan run in a helper with a deadline: a
    // stuck mount on or under a DIR makes an answer, not a hang.
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let what = format!("the tree {}", shown.join(", "));
    let scanned = rea::bounded::run(
        &what,
        &shown.join("\0"),
        rea::bounded::STAGE_DEADLINE,
        &[],
        || rea::holders::scan::scan(&paths).map_err(rea::bounded::WorkError::of),
    );
    let scan = match scanned {
        Ok(s) => s,
        Err(rea::bounded::Failure::Blocked(b)) => {
            return usage(&escape(&format!("stage_unreadable: cannot scan: {b}")))
        }
        Err(rea::bounded::Failure::Failed(e)) => return usage(&escape(&e)),
    };
    if let Err(code) = print_out(json, &scan, "scan", || rea::holders::text::human(&scan)) {
        return code;
    }
    ExitCode::from(if scan.held() { 1 } else { 0 })
}

const REPORT_HELP: &str = "\
The page: verification first (the verifier verify runs for the log's
kind), its verdict as the banner: green for delete_allowed and discarded,
amber for retain, refused and incomplete, red for a tampered log, which is
still drawn but marked UNTRUSTED with every reason listed. Then the run
(id, watchdog, start, head, bounds, containment, staging), a timeline as
inline SVG (a lane per job, launchers under the job that asked for them,
triggers, each ask/TERM/KILL sweep with its count, the receipt), the
process tree of the stop (who was sent what, parent links), the staging
inventory and holder scan, the records (the first 5000), and the command
that re-verifies the log, quoted for a shell.

Self-contained: no script, no external resource (a Content Security
Policy forbids every load), prints on paper. Every string from the log
is escaped. Memory is bounded whatever the log's size.

The log is opened once and read through that descriptor only: verify
judges exactly the bytes that are drawn. If the readings differ, or the
file changes or is replaced while it is read, the page says LOG CHANGED
WHILE READ, draws nothing from the log, and the exit status is 3. A log
still being written (incomplete) may grow meanwhile: the page draws the
bytes verify read and says how many.

Exit codes: verify's for the log, the page written in each case:
  0  delete_allowed  (a discard log: discarded)
  1  retain          (a discard log: refused)
  2  incomplete      torn last line or no receipt
  3  tampered        the page is drawn, marked UNTRUSTED; or the log changed
                     while read (the page says so, nothing of it drawn)
  4  error           the log cannot be read, the page cannot be written, or
                     the command line is wrong (-o a directory, or inside
                     --staging): no page is written, and nothing
                     half-written is left; except that a stream that stops
                     reading (-o - | head) has the page's beginning, and
                     the message says the page was cut short";

const SHOW_HELP: &str = "\
First lines: the log, the verdict (what `rea-audit verify LOG` says, with
its exit status), the run and the wall-clock time of its first record, the
head (sealed or not), the reasons. Then one line per log line: seq, time
since the first record, kind, and what it says in plain words (a nested
launcher is named by the job that asked for it). A tampered log is shown,
and said to be tampered, first. Exit status: verify's (0 delete_allowed);
3, said on stderr, when the log changed while it was read (an edit,
records appended to a finished log, another file renamed over the path).
A log its watchdog is still writing (verify: incomplete, 2) may grow while
read: what is printed is what verify judged, and stderr says how much more
there is now (with --json, a last member log_grew).";

/// `rea-audit show`: verification first, then the timeline, both read
/// through one descriptor ([`rea::audit::passes`]): the lines shown are
/// the bytes verify judged, or the exit status says the log changed.
fn show(path: &std::path::Path, json: bool) -> ExitCode {
    use rea::audit::checked::check;
    use rea::audit::passes::{Ending, Log};
    use rea::audit::reader::started;
    use rea::audit::show::{each_line, header};
    let name = path.display().to_string();
    let unreadable = |e: &dyn std::fmt::Display| usage(&format!("{}: {e}", escape(&name)));
    let mut log = match Log::open(path) {
        Ok(l) => l,
        Err(e) => return unreadable(&e),
    };
    let start = match log.start() {
        Ok(b) => b,
        Err(e) => return unreadable(&e),
    };
    let verdict = match log.pass(|r| check(r, &start, &name, None, None)) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return usage(&e.to_string()),
        Err(e) => return unreadable(&e),
    };
    let code = verdict.exit_code().clamp(0, 255) as u8;
    // Unfinished: its watchdog may still be appending (see `passes`).
    let still_written = code == 2;
    let first = started(&start[..]);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // How the reading ended, looked at once: the document and the exit
    // status say the same.
    let mut end: Option<Ending> = None;
    let done = if json {
        // Streamed, line by line: memory stays bounded by the line cap.
        let opening = serde_json::json!({"log": name, "started": first, "verdict": verdict});
        let mut text = opening.to_string();
        text.pop(); // the closing brace: "lines" follows
        let mut failed = None;
        let mut sep = "";
        let wrote = write!(out, "{text},\"lines\":[").and_then(|()| {
            let read = log.pass(|r| {
                each_line(r, |l| {
                    if failed.is_none() {
                        let line = serde_json::to_string(&l).map_err(std::io::Error::other);
                        let r = line.and_then(|t| write!(out, "{sep}{t}"));
                        failed = r.err();
                        sep = ",";
                    }
                })
            });
            read.and_then(|r| r)
        });
        match (wrote, failed) {
            (Err(e), _) | (Ok(()), Some(e)) => Err(e),
            // The document itself says when its lines are not what the
            // verdict judged, not only the exit status.
            (Ok(()), None) => match end.insert(log.ending(still_written)) {
                Ending::Still => writeln!(out, "]}}"),
                Ending::Grew { judged, now } => writeln!(
                    out,
                    "],\"log_grew\":{}}}",
                    serde_json::json!({"judged_bytes": judged, "bytes_now": now})
                ),
                Ending::Changed(why) => {
                    writeln!(out, "],\"log_changed\":{}}}", serde_json::json!(why))
                }
            },
        }
    } else {
        let mut head = String::new();
        for line in header(&name, &verdict, first.as_deref()) {
            head.push_str(&escape(&line));
            head.push('\n');
        }
        writeln!(out, "{head}")
            .and_then(|()| log.pass(|r| write_timeline(r, &mut out)).and_then(|r| r))
    };
    if let Err(e) = done.and_then(|()| out.flush()) {
        return unreadable(&e);
    }
    match end.unwrap_or_else(|| log.ending(still_written)) {
        Ending::Still => ExitCode::from(code),
        Ending::Grew { judged, now } => {
            eprintln!(
                "rea-audit: {}: still being written: it grew from {judged} to {now} bytes \
                 while it was read; what was printed is what verify judged, its first \
                 {judged} bytes; show it again for the rest",
                escape(&name)
            );
            ExitCode::from(code)
        }
        Ending::Changed(why) => {
            eprintln!(
                "rea-audit: {}: the log changed while it was read ({}): what was printed \
                 is not what verify judged; show it again once it is still",
                escape(&name),
                escape(&why)
            );
            ExitCode::from(3)
        }
    }
}
