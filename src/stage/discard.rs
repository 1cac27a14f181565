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
use super::path::{open_parent, Id};
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
        id.map(|i| (i.dev, i.ino)).map_err(|e| e.to_string())
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
fn ancestors(dir: &Path) -> Result<Vec<(u64, u64)>, String> {
    use nix::fcntl::{openat, OFlag};
    let mut fd: std::os::fd::OwnedFd = std::fs::File::open(dir).map_err(|e| e.to_string())?.into();
    let mut out = Vec::new();
    for _ in 0..4096 {
        let here = Id::of(fd.as_fd()).map_err(|e| e.to_string())?;
        if out.last() == Some(&(here.dev, here.ino)) {
            break;
        }
        out.push((here.dev, here.ino));
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        fd = openat(fd.as_fd(), "..", flags, nix::sys::stat::Mode::empty())
            .map_err(|e| e.to_string())?;
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

pub fn discard(dir: &Path, hex: &str, log_path: &Path) -> Done {
    let usage = |msg: String| {
        eprintln!("rea-stage: {msg}");
        Done {
            code: EXIT_USAGE,
            outcome: None,
            reasons: Vec::new(),
            head: None,
        }
    };
    if !crate::vocab::is_digest(hex) {
        return usage("--receipt-sha256 must be 64 lowercase hex digits".into());
    }
    let run_id = match super::receipt::nonce() {
        Ok(n) => format!("discard-{}", &n[..16]),
        Err(e) => return usage(format!("cannot read /dev/urandom: {e}")),
    };
    let shown = std::path::absolute(dir)
        .unwrap_or(dir.to_path_buf())
        .display()
        .to_string();
    let before = before_log(dir, log_path, &shown);
    match &before {
        Before::LogInStage(why) => return usage(why.clone()),
        Before::LogDirBlocked(why) => return usage(why.clone()),
        Before::Ready | Before::StageBlocked(_) => {}
    }
    let log = match StageLog::create(log_path, &run_id) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return usage(format!(
                "audit log {} already exists (one log per discard; it is never appended to)",
                log_path.display()
            ))
        }
        Err(e) => return log_failed(e),
    };
    let mut run = Run { log, removed: 0 };
    if let Before::StageBlocked(b) = before {
        let r = Refusal::new(Code::StageUnreadable, None, b.to_string());
        return unreachable(&mut run, &shown, hex, r);
    }
    let parent = match open_parent(dir) {
        Ok(p) => p,
        Err(e) => {
            return unreachable(
                &mut run,
                &shown,
                hex,
                Refusal::new(Code::StageUnreachable, None, e.to_string()),
            )
        }
    };
    let shown = parent.path.display().to_string();
    let reach = |e: std::io::Error| {
        Refusal::new(
            Code::StageUnreachable,
            None,
            format!("{shown} cannot be opened as a directory without following a link: {e}"),
        )
    };
    let stage = match parent.open_stage() {
        Ok(fd) => fd,
        Err(e) => return unreachable(&mut run, &shown, hex, reach(e)),
    };
    let id = match Id::of(stage.as_fd()) {
        Ok(id) => id,
        Err(e) => return unreachable(&mut run, &shown, hex, reach(e)),
    };
    let dir_id = DirId {
        dev: id.dev,
        ino: id.ino,
        uid: id.uid,
        mode: id.mode,
    };
    // Durable before the listing: a listing that stalls is on the record.
    if let Err(e) = run.started(&shown, Some(dir_id), hex) {
        return log_failed(e);
    }
    let listing = match inventory::take(stage.as_fd()) {
        Ok(l) => l,
        Err(e) => {
            let r = Refusal::new(Code::IoError, None, format!("listing the stage: {e}"));
            return run.seal(Outcome::Refused, vec![r], false, EXIT_REFUSED);
        }
    };
    let receipt = listing.receipt.as_deref().map(super::receipt::parse);
    // Who holds it, by the descriptor the listing was taken through.
    // A holder's open file on a stuck file system answers no stat: the scan
    // runs with a deadline too.
    let what = format!("the holder scan of {shown}");
    let scanned = bounded::run(&what, &shown, STAGE_DEADLINE, &[stage.as_fd()], || {
        scan_fds(&[(Path::new(&shown), stage.as_fd())]).map_err(|e| e.to_string())
    });
    let holders = match scanned {
        Ok(s) => HoldersScanned::Scanned(s),
        Err(e) => HoldersScanned::Failed {
            error: crate::vocab::bounded(&e.to_string()),
        },
    };
    let held = held::findings(&holders);
    let inv = StageInventoried {
        entries: listing.entries.clone(),
        truncated: listing.truncated,
        changed: listing.changed.clone(),
        receipt: receipt.as_ref().and_then(|r| r.as_ref().ok().cloned()),
        receipt_error: receipt.as_ref().and_then(|r| r.as_ref().err().cloned()),
        holders: Some(Box::new(holders)),
    };
    if let Err(e) = run.log.record(&StageEvent::Inventoried(inv)) {
        return log_failed(e);
    }
    let facts = Facts {
        uid: nix::unistd::getuid().as_raw(),
        expected: hex.to_string(),
        stage: dir_id,
        entries: listing.entries.clone(),
        truncated: listing.truncated,
        changed: listing.changed.clone(),
        receipt,
        holders: Some(held),
    };
    let refusals = decide(&facts);
    if !refusals.is_empty() {
        return run.seal(Outcome::Refused, refusals, false, EXIT_REFUSED);
    }
    let marker_ino = match interlock(stage.as_fd(), run.log.run()) {
        Ok(ino) => ino,
        Err(r) => return run.seal(Outcome::Refused, vec![r], false, EXIT_REFUSED),
    };
    let order = plan(&facts);
    if let Err(e) = run.log.record(&StageEvent::Approved(DiscardApproved {
        plan: order.clone(),
        marker_ino,
    })) {
        return log_failed(e);
    }
    if let Err(r) = remove_all(&mut run, &listing, &order, stage.as_fd(), marker_ino) {
        return match r {
            Stop::Log(e) => log_failed(e),
            Stop::Refused(r) => run.seal(Outcome::Refused, vec![r], false, EXIT_STOPPED),
        };
    }
    if let Err(r) = remove_stage(&parent, stage.as_fd(), id) {
        return run.seal(Outcome::Refused, vec![r], false, EXIT_STOPPED);
    }
    let _ = nix::unistd::fsync(&parent.fd);
    let gone = StageEvent::Removed(RemovedEntry {
        name: shown.clone(),
        what: Removed::Stage,
        ino: id.ino,
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
                Stop::Refused(Refusal::new(Code::ConcurrentChange, Some(name), why))
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
