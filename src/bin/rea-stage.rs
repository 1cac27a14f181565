//! `rea-stage`: the before-transfer receipt, the conditional discard and
//! the verified removal after a run (docs/stage.md). The only part of rea
//! that ever deletes a stage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rea::audit::stage::remove::{remove, Args};
use rea::stage::discard::{discard, EXIT_USAGE};
use rea::stage::pinned::manifest;
use rea::stage::receipt::{begin, declare, BeginError};

const EXIT_HELP: &str = "\
Exit codes (begin):
  0  created    the stage and its receipt exist; the receipt's SHA-256 is on stdout
  1  refused    DIR exists, or its parent is not a real directory reached without symlinks
  3  failed     an I/O error while creating (see stderr)
  4  usage      bad arguments (a --file name that is not a plain name, a pin
                that is not 64 hex digits, ...)

Exit codes (discard):
  0  discarded  every check held; every entry, the receipt and DIR are gone
  1  refused    a check failed; nothing was removed (the reasons are in the log);
                a stage that does not answer within 5 s (a stuck FUSE or NFS
                mount) is refused as stage_unreadable
  2  stopped    removal had begun and stopped: the stage changed meanwhile
                (concurrent_change) or an I/O error during removal (io_error);
                what is left is kept (never forced), the log says what was
                removed and which reason stopped it
  3  log failed the audit log could not be written; nothing more was done
  4  usage      bad arguments, FILE already exists, FILE is inside DIR, or
                FILE's directory does not answer within 5 s (nothing is
                created or removed)

Before removing anything, discard scans the stage for holders through the
descriptor it listed it by (rea-audit holders --help): a process holding a
file, a cwd, a root or a mapping in it, a mount on or of it, a loop device
backed by a file in it refuses the discard (stage_held, each named), and so
does a scan that cannot run (holders_not_scanned). The scan is recorded
with the inventory and replayed by verify.

Every decision, the inventory and each removal are in FILE, a hash-chained log
(the chain rule of rea-watchdog's audit log): `rea-audit verify FILE` says
discarded or refused. rea-stage never signals anything.

Test hooks: REA_STAGE_PAUSE_BEFORE_RMDIR=FIFO makes discard read one byte from
FIFO right before its final rmdir (tests use it to change the stage at that
exact point). REA_STAGE_PAUSE_BEFORE_UNLINK=FIFO does the same right after
discard created .rea-discarding, before it looks for .rea-exec-started (so
before its first unlink); remove reads it after remove_approved is durable,
before its first unlink, and the RMDIR one before its final rmdir. They can
only delay: every check after runs as it would.

Exit codes (remove):
  0  removed    the log's verdict is delete_allowed for exactly this stage, the
                stage is the inventory it recorded at close and held by nothing;
                every entry and DIR are gone
  1  refused    a check failed; nothing was removed (the reasons are in FILE)
  2  stopped    removal had begun and stopped: an entry was no longer the one
                walked (concurrent_change) or an I/O error; what is left is kept
                (never forced), FILE says what was removed
  3  log failed FILE could not be written; nothing more was done
  4  usage      bad arguments (--expect-head not 64 lowercase hex digits), FILE
                already exists, FILE is inside DIR (nothing is created or removed)

remove runs verify's checks on LOG (rea-audit verify LOG --expect-head HEX
--staging DIR) through the descriptor it opened DIR by, walks DIR once more
through it, and removes exactly what that walk saw, deepest first, each entry
checked to be the one walked right before its unlinkat; no link is followed.
`rea-audit verify FILE` says removed, refused or stopped (docs/stage.md, \"One
verified removal\").

Interlock with rea-watchdog: discard creates DIR/.rea-discarding exclusively
before its first removal, then refuses `armed` (removing only its own marker)
if DIR/.rea-exec-started exists; a watchdog arming the stage does the same the
other way round and refuses to start. It is removed last, before the rmdir.";

const MANIFEST_HELP: &str = "\
Example (bash):
  mapfile -t pins < <(rea-stage manifest build/runtime.bin build/hopper.so)
  digest=$(rea-stage manifest --digest build/runtime.bin build/hopper.so)
  rea-stage begin \"$STAGE\" \"${pins[@]}\"
  ... upload, run the watchdog with --staging \"$STAGE\", close ...
  rea-audit verify LOG --staging \"$STAGE\" --expect-stage-digest \"$digest\"

The content digest is SHA-256 over one line per entry, `kind TAB name TAB
sha256 NL`, in byte order of the names (docs/stage.md, \"The expected
content\"); the watchdog records the same digest of the stage at its start.

Exit codes: 0 printed; 4 usage (a file that is missing, not a regular file,
or whose name begin would refuse; nothing is printed).";

#[derive(Parser)]
#[command(
    name = "rea-stage",
    version,
    about = "Create a stage with a before-transfer receipt, discard one that no exec touched, or remove one after a verified run",
    long_about = "rea-stage begin makes a new, private stage directory and a receipt in it \
naming the files an upload may create; the controller keeps the receipt's SHA-256 as it pins \
a head. If the upload fails before any exec, rea-stage discard removes the stage, and only if \
it is exactly that stage, unarmed (no rea-watchdog ran there), holding nothing but declared \
regular files of ours with one link each, and held by no process, mount or loop device. Anything else is refused and nothing is deleted. \
After a run, rea-stage remove deletes the stage instead of rm -rf: only when the run's audit log, \
its head pinned, says delete_allowed for exactly that stage, checked through the descriptor it \
then deletes through.",
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
    /// Create DIR (mode 0700; it must not exist) and DIR/.rea-before-transfer;
    /// print the receipt's SHA-256.
    #[command(after_help = EXIT_HELP)]
    Begin {
        /// The stage to create. Its parent (and every directory above) must
        /// be a real directory, not a symlink.
        dir: PathBuf,
        /// A name the upload may create in DIR (a plain name: no `/`, not `.`
        /// or `..`, not rea's own; at most 64, each at most 255 bytes).
        /// `NAME=SHA256` also pins its content: a watchdog then refuses to
        /// start unless the stage holds exactly the declared names, each a
        /// regular file, every pinned one with that hash
        /// (stage_not_as_uploaded). `rea-stage manifest` prints these.
        #[arg(long = "file", value_name = "NAME[=SHA256]", required = true)]
        files: Vec<String>,
    },
    /// Print `--file=NAME=SHA256` for each local FILE (one argument per
    /// line, for `begin`), computed before the upload; with --digest, the
    /// content digest of a stage holding exactly these files instead (for
    /// `rea-audit verify --expect-stage-digest`).
    #[command(after_help = MANIFEST_HELP)]
    Manifest {
        /// The local files to upload; each is uploaded as its last
        /// path component.
        #[arg(required = true, value_name = "FILE")]
        paths: Vec<PathBuf>,
        /// Print only the content digest.
        #[arg(long)]
        digest: bool,
    },
    /// Remove DIR if it is the untouched stage the receipt names; otherwise
    /// remove nothing. Everything is recorded in FILE.
    #[command(after_help = EXIT_HELP)]
    Discard {
        /// The stage `begin` created.
        dir: PathBuf,
        /// The SHA-256 `begin` printed.
        #[arg(long, value_name = "HEX")]
        receipt_sha256: String,
        /// The discard's audit log (must not exist, must be outside DIR;
        /// created 0600).
        #[arg(long, value_name = "FILE")]
        audit_log: PathBuf,
    },
    /// Remove DIR after a run, only if the run's audit log LOG (its head
    /// pinned) says delete_allowed for exactly this stage, unchanged and
    /// held by nothing. Everything is recorded in FILE.
    #[command(after_help = EXIT_HELP)]
    Remove {
        /// The stage the run used (rea-watchdog --staging DIR).
        dir: PathBuf,
        /// The run's audit log (rea-watchdog --audit-log).
        #[arg(long, value_name = "LOG")]
        audit_log: PathBuf,
        /// The head the controller pinned (64 lowercase hex digits).
        #[arg(long, value_name = "HEX")]
        expect_head: String,
        /// The removal's own log (must not exist, must be outside DIR;
        /// created 0600).
        #[arg(long, value_name = "FILE")]
        log: PathBuf,
    },
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
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
        Cmd::Manifest { paths, digest } => match manifest(&paths) {
            Ok(m) if digest => {
                println!("{}", m.digest);
                ExitCode::SUCCESS
            }
            Ok(m) => {
                for a in m.args {
                    println!("{a}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rea-stage: manifest: {e}; nothing was printed");
                ExitCode::from(EXIT_USAGE as u8)
            }
        },
        Cmd::Begin { dir, files } => match declare(&files)
            .map_err(BeginError::Names)
            .and_then(|d| begin(&dir, &d))
        {
            Ok((sha, _)) => {
                println!("{sha}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                let left = match e {
                    BeginError::Io { .. } => {
                        "DIR may exist without a complete receipt (discard refuses it)"
                    }
                    _ => "nothing was created",
                };
                eprintln!("rea-stage: begin: {e}; {left}");
                let code = match e {
                    BeginError::Names(_) => EXIT_USAGE,
                    BeginError::Path(_) | BeginError::Exists(_) => 1,
                    BeginError::Io { .. } => 3,
                };
                ExitCode::from(code as u8)
            }
        },
        Cmd::Discard {
            dir,
            receipt_sha256,
            audit_log,
        } => {
            let done = discard(&dir, &receipt_sha256, &audit_log);
            if let Some(outcome) = done.outcome {
                let codes: Vec<String> = done.reasons.iter().map(|r| r.code.as_str()).collect();
                let line = serde_json::json!({
                    "outcome": outcome,
                    "reasons": codes,
                    "audit_log": audit_log,
                    "head": done.head,
                });
                println!("{line}");
                for r in &done.reasons {
                    eprintln!(
                        "rea-stage: {}: {}",
                        r.code.as_str(),
                        rea::audit::people::escape(&r.detail)
                    );
                }
            }
            ExitCode::from(done.code as u8)
        }
        Cmd::Remove {
            dir,
            audit_log,
            expect_head,
            log,
        } => {
            let done = remove(&Args {
                dir: &dir,
                audit_log: &audit_log,
                expect_head: &expect_head,
                log: &log,
            });
            print_removed(&done, &log);
            ExitCode::from(done.code as u8)
        }
    }
}

/// `remove`'s line on stdout and each reason on stderr.
fn print_removed(done: &rea::audit::stage::remove::Done, log: &std::path::Path) {
    let Some(outcome) = done.outcome else {
        return;
    };
    let codes: Vec<String> = done.reasons.iter().map(|r| r.code.as_str()).collect();
    let names: Vec<Option<String>> = done.reasons.iter().map(|r| r.name.clone()).collect();
    let line = serde_json::json!({
        "outcome": outcome,
        "reasons": codes,
        "names": names,
        "removed": done.removed,
        "log": log,
        "head": done.head,
    });
    println!("{line}");
    for r in &done.reasons {
        let name = r
            .name
            .as_deref()
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        eprintln!(
            "rea-stage: {}{}: {}",
            r.code.as_str(),
            rea::audit::people::escape(&name),
            rea::audit::people::escape(&r.detail)
        );
    }
}
