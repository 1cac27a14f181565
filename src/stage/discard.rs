//! `rea-stage discard`: look, log, decide, and remove only an untouched stage.
//!
//! Order: the log is created (`O_EXCL`) before anything is looked at; the
//! stage is opened through its parent; `discard_started` is made durable;
//! the stage is listed and its receipt read through its descriptor;
//! `stage_inventoried` is made durable; then [`decide`] answers. A refusal is sealed at once and nothing
//! is touched. An approval is made durable (`discard_approved`, the whole
//! plan) before the first `unlinkat`; each removal is recorded as it is
//! done; the directory goes last, and `discard_decided` seals the log.

use std::os::fd::AsFd;
use std::path::Path;

use super::decide::{decide, plan, Code, DirId, Facts, Refusal};
use super::inventory::{self, Listing};
use super::log::{
    DiscardApproved, DiscardDecided, DiscardStarted, Outcome, Removed, RemovedEntry, StageEvent,
    StageInventoried, StageLog,
};
use super::path::{open_parent, Id, Parent};
use super::remove::{pause_hook, remove_stage, unlink_entry, unlink_own, PAUSE_UNLINK_ENV};
use super::{ARMED_NAME, DISCARDING_NAME, RECEIPT_NAME};
use crate::bounded::{self, Blocked, Failure, STAGE_DEADLINE};
use crate::holders::scan::scan_fds;
use crate::kinds::held;
use crate::kinds::watchdog::HoldersScanned;
use crate::log::LogError;

/// `rea-stage discard` exit codes (documented in `--help` and docs/stage.md).
pub const EXIT_DISCARDED: i32 = 0;
pub const EXIT_REFUSED: i32 = 1;
/// Removal had begun and stopped: a concurrent change or an I/O error.
pub const EXIT_STOPPED: i32 = 2;
pub const EXIT_LOG_FAILED: i32 = 3;
pub const EXIT_USAGE: i32 = 4;

/// What the command prints on stdout (one JSON line) and exits with.
pub struct Done {
    pub code: i32,
    pub outcome: Option<Outcome>,
    pub reasons: Vec<Refusal>,
    pub head: Option<String>,
}

fn log_failed(e: impl std::fmt::Display) -> Done {
    eprintln!("rea-stage: the audit log could not be written ({e}); stopped, nothing more is done");
    Done {
        code: EXIT_LOG_FAILED,
        outcome: None,
        reasons: Vec::new(),
        head: None,
    }
}

struct Run {
    log: StageLog,
    removed: u64,
}

impl Run {
    fn seal(
        &mut self,
        outcome: Outcome,
        reasons: Vec<Refusal>,
        stage_removed: bool,
        code: i32,
    ) -> Done {
        let ev = StageEvent::Decided(DiscardDecided {
            outcome,
            reasons: reasons.clone(),
            removed: self.removed,
            stage_removed,
        });
        if let Err(e) = self.log.seal(&ev) {
            return log_failed(e);
        }
        Done {
            code,
            outcome: Some(outcome),
            reasons,
            head: Some(self.log.head().to_string()),
        }
    }

    fn started(&mut self, stage: &str, id: Option<DirId>, hex: &str) -> Result<(), LogError> {
        self.log
            .record(&StageEvent::Started(DiscardStarted {
                version: env!("CARGO_PKG_VERSION").to_string(),
                stage: stage.to_string(),
                identity: id,
                receipt_sha256: hex.to_string(),
                uid: nix::unistd::getuid().as_raw(),
                pid: std::process::id(),
            }))
            .map(|_| ())
    }
}

/// What is known before the log exists. Every look runs in a helper with
/// a deadline (`src/bounded.rs`): a stuck file system (a FUSE or NFS
/// server gone) blocks a helper, never the discard.
pub(crate) enum Before {
    /// The stage answered (or failed in a way the discard reports itself).
    Ready,
    /// The log would be created inside the stage (its directory, or one
    /// above it up to `/`, is the stage by dev/inode): discard would be
    /// removing, or racing with, its own log.
    LogInStage(String),
    /// The directory of the log did not answer: no log can be written.
    LogDirBlocked(String),
    /// The stage, or a mount under it, did not answer: refused,
    /// `stage_unreadable`, nothing touched.
    StageBlocked(Blocked),
}

pub(crate) fn before_log(dir: &Path, log_path: &Path, shown: &str) -> Before {
    let parent = match log_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let key = parent.display().to_string();
    let what = format!("the audit log's directory {key}");
    let above = match bounded::run(&what, &key, STAGE_DEADLINE, &[], || ancestors(parent)) {
        Ok(ids) => ids,
        Err(Failure::Blocked(b)) => return Before::LogDirBlocked(b.to_string()),
        // Created later, and that reports the error.
        Err(Failure::Failed(_)) => Vec::new(),
    };
    let what = format!("the stage {shown}");
    let opened = bounded::run(&what, shown, STAGE_DEADLINE, &[], || {
        let stage = open_parent(dir).map_err(|e| e.to_string())?;
        let id = Id::of(stage.open_stage().map_err(|e| e.to_string())?.as_fd());
        id.map(|i| (i.dev, i.ino))
            .map_err(crate::bounded::WorkError::of)
    });
    match opened {
        Err(Failure::Blocked(b)) => return Before::StageBlocked(b),
        Ok(id) if above.contains(&id) => {
            return Before::LogInStage(format!(
                "--audit-log {} is inside the stage {}: the log must be outside it",
                log_path.display(),
                dir.display()
            ))
        }
        // Unreachable: refused once the log exists, for its own reason.
        Err(Failure::Failed(_)) => return Before::Ready,
        Ok(_) => {}
    }
    // Opened; listed the way the discard will (a mount under the stage
    // blocks here).
    let listed = bounded::run(&what, shown, STAGE_DEADLINE, &[], || {
        let stage = open_parent(dir).map_err(|e| e.to_string())?;
        let stage = stage.open_stage().map_err(|e| e.to_string())?;
        let listing = inventory::take(stage.as_fd()).map_err(|e| e.to_string())?;
        Ok(listing.entries.len())
    });
    match listed {
        Err(Failure::Blocked(b)) => Before::StageBlocked(b),
        _ => Before::Ready,
    }
}

/// The (dev, inode) of `dir` and of every directory above it up to `/`.
fn ancestors(dir: &Path) -> Result<Vec<(u64, u64)>, bounded::WorkError> {
    use nix::fcntl::{openat, OFlag};
    let mut fd: std::os::fd::OwnedFd = std::fs::File::open(dir)?.into();
    let mut out = Vec::new();
    for _ in 0..4096 {
        let here = Id::of(fd.as_fd())?;
        if out.last() == Some(&(here.dev, here.ino)) {
            break;
        }
        out.push((here.dev, here.ino));
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        fd = openat(fd.as_fd(), "..", flags, nix::sys::stat::Mode::empty())?;
    }
    Ok(out)
}

/// Refuses before anything was listed (the stage could not be reached).
fn unreachable(run: &mut Run, stage: &str, hex: &str, r: Refusal) -> Done {
    if let Err(e) = run.started(stage, None, hex) {
        return log_failed(e);
    }
    run.seal(Outcome::Refused, vec![r], false, EXIT_REFUSED)
}

/// Runs `rea-stage discard` (docs/stage.md) to its end: what it prints and
/// exits with. Every step but the argument check is on the record.
pub fn discard(dir: &Path, hex: &str, log_path: &Path) -> Done {
    steps(dir, hex, log_path).unwrap_or_else(|ended| ended)
}

/// A step of the discard: `Err` is the discard ending there, with what it
/// prints and exits with (a usage error, a log that could not be written,
/// or a refusal already sealed in the log).
type Step<T> = Result<T, Done>;

/// The discard's steps in the order of the module's doc; each makes
/// durable what it looked at before the next one acts on it.
fn steps(dir: &Path, hex: &str, log_path: &Path) -> Step<Done> {
    let (mut run, before, shown) = create_log(dir, hex, log_path)?;
    let stage = reach(&mut run, dir, hex, before, &shown)?;
    let (listing, facts) = look(&mut run, &stage, hex)?;
    let (order, marker_ino) = approve(&mut run, &stage, &facts)?;
    Ok(remove(&mut run, &stage, &listing, &order, marker_ino))
}

/// A usage error: said on stderr, nothing logged (there is no log yet).
fn usage(msg: String) -> Done {
    eprintln!("rea-stage: {msg}");
    Done {
        code: EXIT_USAGE,
        outcome: None,
        reasons: Vec::new(),
        head: None,
    }
}

/// Checks the arguments, looks at the stage and the log's directory
/// ([`before_log`]), then creates the log (`O_EXCL`: one log per
/// discard). Returns the run writing that log, what the look found (a
/// stage that did not answer is refused once the log exists) and the
/// stage's absolute path as shown in records. Nothing is logged yet.
fn create_log(dir: &Path, hex: &str, log_path: &Path) -> Step<(Run, Before, String)> {
    if !crate::vocab::is_digest(hex) {
        return Err(usage(
            "--receipt-sha256 must be 64 lowercase hex digits".into(),
        ));
    }
    let run_id = match super::receipt::nonce() {
        Ok(n) => format!("discard-{}", &n[..16]),
        Err(e) => return Err(usage(format!("cannot get random bytes (getrandom): {e}"))),
    };
    let shown = std::path::absolute(dir)
        .unwrap_or(dir.to_path_buf())
        .display()
        .to_string();
    let before = before_log(dir, log_path, &shown);
    match &before {
        Before::LogInStage(why) => return Err(usage(why.clone())),
        Before::LogDirBlocked(why) => return Err(usage(why.clone())),
        Before::Ready | Before::StageBlocked(_) => {}
    }
    let log = match StageLog::create(log_path, &run_id) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(usage(format!(
                "audit log {} already exists (one log per discard; it is never appended to)",
                log_path.display()
            )))
        }
        Err(e) => return Err(log_failed(e)),
    };
    Ok((Run { log, removed: 0 }, before, shown))
}

/// The stage, opened through its parent without following a link, and
/// what the records call it.
struct Reached {
    parent: Parent,
    fd: std::os::fd::OwnedFd,
    id: Id,
    dir_id: DirId,
    /// The parent's normal path: what the records and the holder scan name.
    shown: String,
}

/// Opens the stage through its parent and records `discard_started` with
/// its identity, durably, before anything in it is listed (a listing that
/// stalls is then on the record). A stage that did not answer before the
/// log existed, or cannot be reached now, is refused (sealed).
fn reach(run: &mut Run, dir: &Path, hex: &str, before: Before, shown: &str) -> Step<Reached> {
    if let Before::StageBlocked(b) = before {
        let r = Refusal::new(Code::StageUnreadable, None, b.to_string());
        return Err(unreachable(run, shown, hex, r));
    }
    let parent = match open_parent(dir) {
        Ok(p) => p,
        Err(e) => {
            let r = Refusal::new(Code::StageUnreachable, None, e.to_string());
            return Err(unreachable(run, shown, hex, r));
        }
    };
    let shown = parent.path.display().to_string();
    let unopened = |e: std::io::Error| {
        Refusal::new(
            Code::StageUnreachable,
            None,
            format!("{shown} cannot be opened as a directory without following a link: {e}"),
        )
    };
    let fd = match parent.open_stage() {
        Ok(fd) => fd,
        Err(e) => return Err(unreachable(run, &shown, hex, unopened(e))),
    };
    let id = match Id::of(fd.as_fd()) {
        Ok(id) => id,
        Err(e) => return Err(unreachable(run, &shown, hex, unopened(e))),
    };
    let dir_id = DirId {
        dev: id.dev,
        ino: id.ino,
        uid: id.uid,
        mode: id.mode,
    };
    // Durable before the listing: a listing that stalls is on the record.
    if let Err(e) = run.started(&shown, Some(dir_id), hex) {
        return Err(log_failed(e));
    }
    Ok(Reached {
        parent,
        fd,
        id,
        dir_id,
        shown,
    })
}

/// Lists the stage and reads its receipt through its descriptor, scans
/// who holds it (under a deadline), and records all of it durably
/// (`stage_inventoried`). Returns the listing and the facts [`decide`]
/// judges. A listing that fails is refused (sealed).
fn look(run: &mut Run, stage: &Reached, hex: &str) -> Step<(Listing, Facts)> {
    let listing = match inventory::take(stage.fd.as_fd()) {
        Ok(l) => l,
        Err(e) => {
            let r = Refusal::new(Code::IoError, None, format!("listing the stage: {e}"));
            return Err(run.seal(Outcome::Refused, vec![r], false, EXIT_REFUSED));
        }
    };
    let receipt = listing.receipt.as_deref().map(super::receipt::parse);
    let holders = holder_scan(stage);
    let held = held::findings(&holders);
    let inv = StageInventoried {
        entries: listing.entries.clone(),
        truncated: listing.truncated,
        changed: listing.changed.clone(),
        receipt: receipt.as_ref().and_then(|r| r.as_ref().ok().cloned()),
        receipt_error: receipt
            .as_ref()
            .and_then(|r| r.as_ref().err().map(ToString::to_string)),
        holders: Some(Box::new(holders)),
    };
    if let Err(e) = run.log.record(&StageEvent::Inventoried(inv)) {
        return Err(log_failed(e));
    }
    let facts = Facts {
        uid: nix::unistd::getuid().as_raw(),
        expected: hex.to_string(),
        stage: stage.dir_id,
        entries: listing.entries.clone(),
        truncated: listing.truncated,
        changed: listing.changed.clone(),
        receipt,
        holders: Some(held),
    };
    Ok((listing, facts))
}

/// Who holds the stage, by the descriptor the listing was taken through.
/// A holder's open file on a stuck file system answers no stat: the scan
/// runs with a deadline too, and one that fails or stalls is recorded as
/// `Failed` (which refuses: `holders_not_scanned`).
fn holder_scan(stage: &Reached) -> HoldersScanned {
    let shown = &stage.shown;
    let what = format!("the holder scan of {shown}");
    let scanned = bounded::run(&what, shown, STAGE_DEADLINE, &[stage.fd.as_fd()], || {
        scan_fds(&[(Path::new(shown), stage.fd.as_fd())]).map_err(crate::bounded::WorkError::of)
    });
    match scanned {
        Ok(s) => HoldersScanned::Scanned(s),
        Err(e) => HoldersScanned::Failed {
            error: crate::vocab::bounded(&e.to_string()),
        },
    }
}

/// Decides; on approval creates the `.rea-discarding` marker (the
/// interlock with a watchdog arming the stage) and records the whole plan
/// durably (`discard_approved`) before anything is removed. Returns the
/// plan's order and the marker's inode. A refusal is sealed.
fn approve(run: &mut Run, stage: &Reached, facts: &Facts) -> Step<(Vec<String>, u64)> {
    let refusals = decide(facts);
    if !refusals.is_empty() {
        return Err(run.seal(Outcome::Refused, refusals, false, EXIT_REFUSED));
    }
    let marker_ino = match interlock(stage.fd.as_fd(), run.log.run()) {
        Ok(ino) => ino,
        Err(r) => return Err(run.seal(Outcome::Refused, vec![r], false, EXIT_REFUSED)),
    };
    let order = plan(facts);
    if let Err(e) = run.log.record(&StageEvent::Approved(DiscardApproved {
        plan: order.clone(),
        marker_ino,
    })) {
        return Err(log_failed(e));
    }
    Ok((order, marker_ino))
}

/// Removes the plan's entries in order, each recorded as it is done, then
/// the directory itself (through its parent, only if it is still the one
/// opened), and seals the log `discarded`. A removal that stops part way
/// is sealed `refused` with exit 2; nothing after it is touched.
fn remove(
    run: &mut Run,
    stage: &Reached,
    listing: &Listing,
    order: &[String],
    marker_ino: u64,
) -> Done {
    if let Err(r) = remove_all(run, listing, order, stage.fd.as_fd(), marker_ino) {
        return match r {
            Stop::Log(e) => log_failed(e),
            Stop::Refused(r) => run.seal(Outcome::Refused, vec![r], false, EXIT_STOPPED),
        };
    }
    if let Err(r) = remove_stage(&stage.parent, stage.fd.as_fd(), stage.id) {
        return run.seal(Outcome::Refused, vec![r], false, EXIT_STOPPED);
    }
    let _ = nix::unistd::fsync(&stage.parent.fd);
    let gone = StageEvent::Removed(RemovedEntry {
        name: stage.shown.clone(),
        what: Removed::Stage,
        ino: stage.id.ino,
    });
    if let Err(e) = run.log.record(&gone) {
        return log_failed(e);
    }
    run.seal(Outcome::Discarded, Vec::new(), true, EXIT_DISCARDED)
}

/// The interlock with arming (docs/stage.md): creates `.rea-discarding`
/// exclusively through the stage's descriptor, durably, then looks for
/// `.rea-exec-started`. A watchdog does the same the other way round, so at
/// most one of the two goes ahead. Armed meanwhile: our marker is removed
/// again and nothing else is touched. The marker's inode on success.
fn interlock(dirfd: std::os::fd::BorrowedFd<'_>, run: &str) -> Result<u64, Refusal> {
    use nix::fcntl::AtFlags;
    use std::io::Write;
    let name = Some(DISCARDING_NAME);
    let mut f = match super::receipt::create_exclusive(dirfd, DISCARDING_NAME) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Refusal::new(
                Code::DiscardInProgress,
                name,
                "created by another discard after the listing",
            ))
        }
        Err(e) => {
            return Err(Refusal::new(
                Code::IoError,
                name,
                format!("creating it: {e}"),
            ))
        }
    };
    let made = (|| {
        let ino = nix::sys::stat::fstat(&f)?.st_ino;
        writeln!(f, "{run}")?;
        f.sync_all()?;
        nix::unistd::fsync(dirfd)?;
        Ok::<u64, std::io::Error>(ino)
    })();
    let ino = match made {
        Ok(ino) => ino,
        Err(e) => {
            let ino = nix::sys::stat::fstat(&f).map(|s| s.st_ino).unwrap_or(0);
            let left = match unlink_own(dirfd, DISCARDING_NAME, ino) {
                Ok(()) => "removed again".to_string(),
                Err(why) => format!("left in place ({why})"),
            };
            return Err(Refusal::new(
                Code::IoError,
                name,
                format!("writing it: {e}; it was {left}; nothing else was touched"),
            ));
        }
    };
    drop(f);
    pause_hook(PAUSE_UNLINK_ENV);
    let why = match nix::sys::stat::fstatat(dirfd, ARMED_NAME, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(nix::errno::Errno::ENOENT) => return Ok(ino),
        Ok(_) => (
            Code::Armed,
            "a watchdog armed the stage after the listing".to_string(),
        ),
        Err(e) => (Code::IoError, format!("looking for {ARMED_NAME}: {e}")),
    };
    let left = match unlink_own(dirfd, DISCARDING_NAME, ino) {
        Ok(()) => {
            let _ = nix::unistd::fsync(dirfd);
            format!("{DISCARDING_NAME} was removed again")
        }
        Err(e) => format!("{DISCARDING_NAME} could not be removed ({e})"),
    };
    Err(Refusal::new(
        why.0,
        Some(ARMED_NAME),
        format!("{}; {left}; nothing else was touched", why.1),
    ))
}

enum Stop {
    Log(LogError),
    Refused(Refusal),
}

fn remove_all(
    run: &mut Run,
    listing: &Listing,
    order: &[String],
    dirfd: std::os::fd::BorrowedFd<'_>,
    marker_ino: u64,
) -> Result<(), Stop> {
    for name in order {
        if name == DISCARDING_NAME {
            unlink_own(dirfd, DISCARDING_NAME, marker_ino).map_err(|why| {
                Stop::Refused(Refusal::new(
                    Code::ConcurrentChange,
                    Some(name),
                    why.to_string(),
                ))
            })?;
            run.removed += 1;
            let rec = StageEvent::Removed(RemovedEntry {
                name: name.clone(),
                what: Removed::Marker,
                ino: marker_ino,
            });
            run.log.record(&rec).map_err(Stop::Log)?;
            continue;
        }
        let Some(i) = listing.entries.iter().position(|e| &e.name == name) else {
            return Err(Stop::Refused(Refusal::new(
                Code::ConcurrentChange,
                Some(name),
                "not in the listing",
            )));
        };
        let e = &listing.entries[i];
        unlink_entry(dirfd, &listing.raw[i], e).map_err(Stop::Refused)?;
        run.removed += 1;
        let what = if name == RECEIPT_NAME {
            Removed::Receipt
        } else {
            Removed::File
        };
        let rec = StageEvent::Removed(RemovedEntry {
            name: name.clone(),
            what,
            ino: e.ino,
        });
        run.log.record(&rec).map_err(Stop::Log)?;
    }
    Ok(())
}
