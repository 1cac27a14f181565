//! The watchdog's own place in its stage (docs/stage.md, "The watchdog's
//! own place").
//!
//! Deployed as the seed deploys it, the watchdog's binaries are uploaded
//! into `STAGE/.rea/bin/` and its state directory and audit log are
//! `STAGE/.rea/state` and `STAGE/.rea/audit.jsonl`. The binaries are upload
//! files like any other (pinned, walked, compared). The state directory
//! and the log are not: they change during every run by design. They are
//! found here, at start, by what they are (device and inode, reached from
//! the stage's own descriptor without following a link), named in the
//! baseline, left out of every walk of the stage, and accounted for on
//! their own: the state directory is removed at close, the log stays.
//!
//! Invariants: a private path is relative to the stage, under `.rea/`,
//! printable ASCII (so the walk's raw bytes and the record's text are the
//! same), and the log is not inside the state directory (which goes).

use std::path::{Component, Path, PathBuf};

use std::os::fd::AsFd;

use super::state_dir::StateDir;
use crate::inventory;
use crate::kinds::watchdog::{AuditWriter, PrivateState};
use crate::stage::PRIVATE_DIR;

/// What the watchdog itself made that may lie in the stage: each path with
/// the (device, inode) it was when made.
pub struct Mine {
    pub state_dir: (PathBuf, (u64, u64)),
    pub audit_log: (PathBuf, (u64, u64)),
}

impl Mine {
    /// The state directory and log as just made (an identity that cannot
    /// be read is (0, 0), which nothing in a stage is).
    pub fn of(state: &StateDir, log: &Path, audit: &AuditWriter) -> Mine {
        Mine {
            state_dir: (state.path.clone(), state.id()),
            audit_log: (log.to_path_buf(), audit.file_id().unwrap_or((0, 0))),
        }
    }
}

/// The watchdog's own files in `stage`: `None` when neither lies in it.
/// An error (the start is refused) when one does but not under `.rea/`,
/// when the log is inside the state directory, when a path is not
/// printable ASCII, or when the path found does not lead, from the stage
/// and without a link, to the very file or directory the watchdog made.
pub fn locate(stage: &Path, mine: &Mine) -> Result<Option<PrivateState>, String> {
    let base = canon(stage)?;
    let found = |(path, id): &(PathBuf, (u64, u64)), what| inside(stage, &base, path, *id, what);
    let state_dir = found(&mine.state_dir, "state directory")?;
    let audit_log = found(&mine.audit_log, "audit log")?;
    if state_dir.is_none() && audit_log.is_none() {
        return Ok(None);
    }
    if let (Some(s), Some(l)) = (&state_dir, &audit_log) {
        if l.starts_with(&format!("{s}/")) {
            return Err(format!(
                "the audit log {l} is inside the state directory {s}, which is removed at close: put it beside it (.rea/audit.jsonl)"
            ));
        }
    }
    let audit_log_ino = audit_log.as_ref().map(|_| mine.audit_log.1 .1);
    Ok(Some(PrivateState {
        state_dir,
        audit_log,
        audit_log_ino,
        state_dir_removed: None,
    }))
}

fn canon(p: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// `target`'s path relative to `stage` (resolved: `base`) when it lies in
/// it, checked.
fn inside(
    stage: &Path,
    base: &Path,
    target: &Path,
    id: (u64, u64),
    what: &str,
) -> Result<Option<String>, String> {
    // The log is a file: its directory is resolved, its name kept.
    let full = match (target.parent(), target.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => canon(dir)?.join(name),
        _ => canon(Path::new("."))?.join(target),
    };
    let Ok(rel) = full.strip_prefix(base) else {
        return Ok(None);
    };
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
            _ => return Err(format!("the {what} {}: not a plain path", target.display())),
        }
    }
    let text = parts.join("/");
    if parts.first().map(String::as_str) != Some(PRIVATE_DIR) || parts.len() < 2 {
        return Err(format!(
            "the {what} {} is in the stage but not under {PRIVATE_DIR}/ (the watchdog's own place: docs/stage.md)",
            target.display()
        ));
    }
    if inventory::escape(text.as_bytes()) != text || text.contains('\u{fffd}') {
        return Err(format!(
            "the {what}'s path in the stage, {text:?}, is not printable ASCII"
        ));
    }
    if reach(stage, &parts).map_err(|e| format!("the {what} {text}: {e}"))? != id {
        return Err(format!(
            "the {what} {text} in the stage is not the one the watchdog made (a link or a replaced entry)"
        ));
    }
    Ok(Some(text))
}

/// The (device, inode) of `parts` under `stage`, reached by descriptor
/// without following a link at any step.
fn reach(stage: &Path, parts: &[String]) -> std::io::Result<(u64, u64)> {
    let dir = inventory::open_dir(stage)?;
    match inventory::stat_under(dir.as_fd(), &parts.join("/"))? {
        Some(st) => Ok((st.st_dev, st.st_ino)),
        None => Err(std::io::ErrorKind::NotFound.into()),
    }
}
