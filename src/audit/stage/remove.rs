//! `rea-stage remove` (docs/stage.md, "One verified removal"): the stage
//! a sealed run used, removed only when the run's audit log says
//! `delete_allowed` for exactly that stage, and through the one descriptor
//! that verdict was checked on.
//!
//! Order: the removal log is created (`O_EXCL`) first; the stage is opened
//! once through its parent (`src/stage/path.rs`); `remove_started` is made
//! durable. Then verify runs on the audit log as `rea-audit verify LOG
//! --expect-head HEX --staging DIR` does, its stage checks (identity,
//! inventory against the close inventory, the holder scan) made through
//! that descriptor ([`VerifyOptions::staging_fd`]); the stage is walked
//! once more through it, the walk that is removed, and its digest must be
//! the log's close digest too. `remove_checked` records both; the pure
//! decision ([`decide`]) answers. A refusal is sealed at once and nothing
//! is touched. An approval is made durable, then every entry is removed
//! deepest first ([`remove_node`]), each recorded as it is done; the stage
//! itself goes last, through its parent, if its name still leads to it.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;

use crate::audit::verdict::Verdict;
use crate::audit::verify::{verify_file, VerifyOptions};
use crate::bounded::{self, hash_deadline};
use crate::inventory::{self, Node};
use crate::log::LogError;
use crate::stage::decide::{escape_name, DirId};
use crate::stage::discard::{before_log, Before};
use crate::stage::path::{open_parent, Id, Parent};
use crate::stage::remove::{pause_hook, remove_stage, PAUSE_UNLINK_ENV};
use crate::stage::remove_decide::{
    decide, plan, Code, Facts, LogVerdict, Refusal, VerdictReason, Walked, MAX_NODES,
};
use crate::stage::remove_log::{
    EntryRemoved, Outcome, RemoveApproved, RemoveChecked, RemoveDecided, RemoveEvent, RemoveLog,
    RemoveStarted, What,
};
use crate::stage::remove_tree::{directories, remove_node, what_of};

/// `rea-stage remove` exit codes (as discard's: `--help`, docs/stage.md).
pub const EXIT_REMOVED: i32 = 0;
pub const EXIT_REFUSED: i32 = 1;
pub const EXIT_STOPPED: i32 = 2;
pub const EXIT_LOG_FAILED: i32 = 3;
pub const EXIT_USAGE: i32 = 4;

/// What the command prints on stdout (one JSON line) and exits with.
pub struct Done {
    pub code: i32,
    pub outcome: Option<Outcome>,
    pub reasons: Vec<Refusal>,
    pub removed: u64,
    pub head: Option<String>,
}

fn bare(code: i32) -> Done {
    Done {
        code,
        outcome: None,
        reasons: Vec::new(),
        removed: 0,
        head: None,
    }
}

fn log_failed(e: impl std::fmt::Display) -> Done {
    eprintln!(
        "rea-stage: the removal log could not be written ({e}); stopped, nothing more is done"
    );
    bare(EXIT_LOG_FAILED)
}

fn usage(msg: &str) -> Done {
    eprintln!("rea-stage: {msg}");
    bare(EXIT_USAGE)
}

struct Run {
    log: RemoveLog,
    removed: u64,
}

impl Run {
    fn seal(&mut self, outcome: Outcome, reasons: Vec<Refusal>, stage_removed: bool) -> Done {
        let code = match outcome {
            Outcome::Removed => EXIT_REMOVED,
            Outcome::Refused => EXIT_REFUSED,
            Outcome::Stopped => EXIT_STOPPED,
        };
        let ev = RemoveEvent::Decided(RemoveDecided {
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
            removed: self.removed,
            head: Some(self.log.head().to_string()),
        }
    }

    fn refuse(&mut self, r: Refusal) -> Done {
        self.seal(Outcome::Refused, vec![r], false)
    }

    fn started(&mut self, s: RemoveStarted) -> Result<(), LogError> {
        self.log.record(&RemoveEvent::Started(s)).map(|_| ())
    }
}

/// The arguments, as given.
pub struct Args<'a> {
    pub dir: &'a Path,
    pub audit_log: &'a Path,
    pub expect_head: &'a str,
    pub log: &'a Path,
}

pub fn remove(a: &Args<'_>) -> Done {
    if !crate::vocab::is_digest(a.expect_head) {
        return usage("--expect-head must be 64 lowercase hex digits");
    }
    let run_id = match crate::stage::receipt::nonce() {
        Ok(n) => format!("remove-{}", &n[..16]),
        Err(e) => return usage(&format!("cannot get random bytes (getrandom): {e}")),
    };
    let shown = std::path::absolute(a.dir)
        .unwrap_or(a.dir.to_path_buf())
        .display()
        .to_string();
    let before = before_log(a.dir, a.log, &shown);
    match &before {
        Before::LogInStage(_) => {
            let (l, d) = (a.log.display(), a.dir.display());
            return usage(&format!(
                "--log {l} is inside the stage {d}: the log must be outside it"
            ));
        }
        Before::LogDirBlocked(why) => return usage(why),
        Before::Ready | Before::StageBlocked(_) => {}
    }
    let log = match RemoveLog::create(a.log, &run_id) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let l = a.log.display();
            return usage(&format!(
                "--log {l} already exists (one log per removal; it is never appended to)"
            ));
        }
        Err(e) => return log_failed(e),
    };
    let mut run = Run { log, removed: 0 };
    let mut started = RemoveStarted {
        version: env!("CARGO_PKG_VERSION").to_string(),
        stage: shown.clone(),
        identity: None,
        audit_log: std::path::absolute(a.audit_log)
            .unwrap_or(a.audit_log.to_path_buf())
            .display()
            .to_string(),
        expect_head: a.expect_head.to_string(),
        uid: nix::unistd::getuid().as_raw(),
        pid: std::process::id(),
    };
    let unreachable = |run: &mut Run, s: RemoveStarted, r: Refusal| match run.started(s) {
        Err(e) => log_failed(e),
        Ok(()) => run.refuse(r),
    };
    if let Before::StageBlocked(b) = before {
        let r = Refusal::new(Code::StageUnreachable, None, b.to_string());
        return unreachable(&mut run, started, r);
    }
    let parent = match open_parent(a.dir) {
        Ok(p) => p,
        Err(e) => {
            let r = Refusal::new(Code::StageUnreachable, None, e.to_string());
            return unreachable(&mut run, started, r);
        }
    };
    let opened = parent
        .open_stage()
        .and_then(|fd| Ok((Id::of(fd.as_fd())?, fd)));
    let (id, stage) = match opened {
        Ok(x) => x,
        Err(e) => {
            let d =
                format!("{shown} cannot be opened as a directory without following a link: {e}");
            return unreachable(
                &mut run,
                started,
                Refusal::new(Code::StageUnreachable, None, d),
            );
        }
    };
    let dir_id = DirId {
        dev: id.dev,
        ino: id.ino,
        uid: id.uid,
        mode: id.mode,
    };
    started.identity = Some(dir_id);
    if let Err(e) = run.started(started) {
        return log_failed(e);
    }
    checked(&mut run, a, &parent, stage.as_fd(), dir_id)
}

/// The verdict and the walk, recorded, decided; then the removal.
fn checked(
    run: &mut Run,
    a: &Args<'_>,
    parent: &Parent,
    stage: BorrowedFd<'_>,
    dir_id: DirId,
) -> Done {
    let dup = match stage.try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => return run.refuse(Refusal::new(Code::IoError, None, format!("dup: {e}"))),
    };
    let opts = VerifyOptions {
        expect_head: Some(a.expect_head.to_string()),
        expect_run: None,
        staging: Some(parent.path.clone()),
        staging_fd: Some(Arc::new(dup)),
        expect_stage_digest: None,
    };
    let full = verify_file(a.audit_log, &opts);
    // The watchdog's own files the log left out of the stage's inventory
    // are left out of this walk's digest too, and removed with the rest.
    let private = full.staging.as_ref().and_then(|s| s.private.clone());
    let verdict = log_verdict(&full);
    let shown = parent.path.display().to_string();
    let what = format!("the walk of {shown}");
    let bytes = full.staging.as_ref().map_or(0, |s| s.inventory.bytes);
    let walk = bounded::run(&what, &shown, hash_deadline(bytes), &[stage], || {
        let nodes = inventory::staging_nodes(stage, MAX_NODES, private.as_ref());
        Ok(nodes.map_err(|e| e.to_string())?)
    });
    let (walked, nodes) = match walk {
        Ok((inv, nodes)) => {
            let other_dev: Vec<String> = nodes
                .iter()
                .flatten()
                .filter(|n| n.dev != dir_id.dev)
                .take(8)
                .map(|n| escape_name(&n.raw))
                .collect();
            let w = Walked {
                digest: inv.digest,
                entries: inv.entries,
                other_dev,
                too_many: nodes.is_none(),
            };
            (Ok(w), nodes.unwrap_or_default())
        }
        Err(e) => (Err(crate::vocab::bounded(&e.to_string())), Vec::new()),
    };
    let rec = RemoveChecked {
        verdict: verdict.clone(),
        walked: walked.as_ref().ok().cloned(),
        walk_error: walked.as_ref().err().cloned(),
    };
    if let Err(e) = run.log.record(&RemoveEvent::Checked(rec)) {
        return log_failed(e);
    }
    let facts = Facts {
        expect_head: a.expect_head.to_string(),
        verdict,
        stage: dir_id,
        walked: walked.clone(),
    };
    let refusals = decide(&facts);
    if !refusals.is_empty() {
        return run.seal(Outcome::Refused, refusals, false);
    }
    let approved = RemoveApproved {
        entries: nodes.len() as u64,
        digest: walked.map(|w| w.digest).unwrap_or_default(),
    };
    if let Err(e) = run.log.record(&RemoveEvent::Approved(approved)) {
        return log_failed(e);
    }
    removal(run, parent, stage, &nodes)
}

/// Verify's verdict as the removal records it.
fn log_verdict(v: &Verdict) -> LogVerdict {
    LogVerdict {
        status: word(&v.status),
        sealed: v.sealed,
        run: v.run.clone(),
        head: v.head.clone(),
        staging: v.staging.as_ref().map(|s| DirId {
            dev: s.identity.dev,
            ino: s.identity.ino,
            uid: s.identity.uid,
            mode: s.identity.mode,
        }),
        digest: v.staging.as_ref().map(|s| s.inventory.digest.clone()),
        reasons: v
            .reasons
            .iter()
            .map(|r| VerdictReason {
                code: r.code.as_str(),
                detail: crate::vocab::bounded(&r.detail),
            })
            .collect(),
    }
}

/// A unit enum's serde name.
fn word<T: serde::Serialize>(x: &T) -> String {
    serde_json::to_value(x)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Every node deepest first, each recorded; then the stage itself.
fn removal(run: &mut Run, parent: &Parent, stage: BorrowedFd<'_>, nodes: &[Node]) -> Done {
    let dirs = directories(nodes);
    pause_hook(PAUSE_UNLINK_ENV);
    for i in plan(nodes) {
        let n = &nodes[i];
        if let Err(r) = remove_node(stage, n, &dirs) {
            return run.seal(Outcome::Stopped, vec![r], false);
        }
        run.removed += 1;
        let rec = RemoveEvent::Removed(EntryRemoved {
            path: escape_name(&n.raw),
            what: what_of(n.mode),
            dev: n.dev,
            ino: n.ino,
        });
        if let Err(e) = run.log.record(&rec) {
            return log_failed(e);
        }
    }
    let id = match Id::of(stage) {
        Ok(id) => id,
        Err(e) => {
            return run.seal(
                Outcome::Stopped,
                vec![Refusal::new(Code::IoError, None, e.to_string())],
                false,
            )
        }
    };
    if let Err(r) = remove_stage(parent, stage, id) {
        let code = match r.code {
            crate::stage::decide::Code::ConcurrentChange => Code::ConcurrentChange,
            _ => Code::IoError,
        };
        return run.seal(
            Outcome::Stopped,
            vec![Refusal::new(code, None, r.detail)],
            false,
        );
    }
    let _ = nix::unistd::fsync(&parent.fd);
    let gone = RemoveEvent::Removed(EntryRemoved {
        path: parent.path.display().to_string(),
        what: What::Stage,
        dev: id.dev,
        ino: id.ino,
    });
    if let Err(e) = run.log.record(&gone) {
        return log_failed(e);
    }
    run.seal(Outcome::Removed, Vec::new(), true)
}
