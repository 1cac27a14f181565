//! The directory checks of `rea-audit reconcile`: `--state-dir` against
//! run_started's, `--staging` against the identity and inventory the log
//! recorded. Read-only: `lstat`, and the stage's inventory (which reads
//! and hashes, never writes).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde::Serialize;

use super::log::LogScan;
use crate::inventory;
use crate::kinds::watchdog::{DirIdentity, RunStarted, StagingInventoried};

#[derive(Serialize, Clone, Debug)]
pub struct DirCheck {
    pub check: String,
    /// `null` for what is only reported.
    pub ok: Option<bool>,
    pub detail: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct StateDirPart {
    pub recorded: Option<String>,
    pub given: Option<String>,
    pub checks: Vec<DirCheck>,
}

#[derive(Serialize, Clone, Debug)]
pub struct StagePart {
    pub given: Option<String>,
    /// run_started's staging identity.
    pub at_start: Option<DirIdentity>,
    /// The receipt's staging (or a `staging_inventoried` record's).
    pub at_close: Option<StagingInventoried>,
    /// What `--staging` is now.
    pub now: Option<StagingInventoried>,
    pub identity_matches: Option<bool>,
    pub content_matches: Option<bool>,
    pub detail: String,
}

/// The `--state-dir` checks (see `rea-audit reconcile --help`).
pub fn state_dir_part(run_started: Option<&RunStarted>, dir: Option<&Path>) -> StateDirPart {
    let recorded = run_started.map(|r| r.state_dir.clone());
    let given = dir.map(|p| p.display().to_string());
    let mut checks = Vec::new();
    if let (Some(dir), Some(rs)) = (dir, run_started) {
        let mut add = |check: &str, ok: Option<bool>, detail: String| {
            checks.push(DirCheck {
                check: check.into(),
                ok,
                detail,
            })
        };
        let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let same = abs == Path::new(&rs.state_dir)
            || matches!(
                (std::fs::canonicalize(dir), std::fs::canonicalize(&rs.state_dir)),
                (Ok(a), Ok(b)) if a == b
            );
        add(
            "same_path",
            Some(same),
            format!("given {}, the log recorded {}", abs.display(), rs.state_dir),
        );
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {
                add("exists", Some(true), "a directory (not a symlink)".into());
                let uid = rs.watchdog.uid;
                add(
                    "owner",
                    Some(m.uid() == uid),
                    format!("owner uid {}, the watchdog's is {uid}", m.uid()),
                );
                let mode = m.mode() & 0o7777;
                add(
                    "mode",
                    Some(mode == 0o700),
                    format!("mode {mode:04o} (0700 expected)"),
                );
                for (name, what) in [
                    ("requests", "the request FIFO"),
                    ("tmp", "the private temp root"),
                    ("ready.json", "the ready file"),
                ] {
                    let detail = match std::fs::symlink_metadata(dir.join(name)) {
                        Ok(m) => format!(
                            "{what} {name} is present ({})",
                            if m.file_type().is_fifo() {
                                "FIFO"
                            } else if m.is_dir() {
                                "directory"
                            } else {
                                "file"
                            }
                        ),
                        Err(_) => format!("{what} {name} is absent"),
                    };
                    add(name, None, detail);
                }
            }
            Ok(_) => add(
                "exists",
                Some(false),
                "not a directory (or a symlink)".into(),
            ),
            Err(e) => add("exists", Some(false), format!("cannot stat: {e}")),
        }
    }
    StateDirPart {
        recorded,
        given,
        checks,
    }
}

/// The `--staging` comparison with run_started's identity and the
/// receipt's (or a `staging_inventoried` record's) inventory.
pub fn stage_part(s: &LogScan, staging: Option<&Path>) -> StagePart {
    let at_start = s.run_started.as_ref().and_then(|r| r.staging.clone());
    let at_close = s
        .receipt
        .as_ref()
        .and_then(|r| r.staging.clone())
        .or_else(|| s.staging_inventoried.clone());
    let mut p = StagePart {
        given: staging.map(|p| p.display().to_string()),
        at_start,
        at_close,
        now: None,
        identity_matches: None,
        content_matches: None,
        detail: String::new(),
    };
    let Some(dir) = staging else {
        p.detail = match &p.at_start {
            Some(d) => format!(
                "the log recorded the stage {}; not checked (pass --staging)",
                d.path
            ),
            None => "the log recorded no stage".into(),
        };
        return p;
    };
    // In a helper with a deadline: a stuck mount on or under the stage
    // makes an answer (stage_unreadable), not a hang.
    let private = p.at_close.as_ref().and_then(|c| c.private.as_ref());
    let now = match crate::audit::stage::held::look(dir, None, private) {
        Ok(seen) => seen.now,
        Err(crate::bounded::Failure::Blocked(b)) => {
            p.identity_matches = Some(false);
            p.detail = format!("stage_unreadable: {b}");
            return p;
        }
        Err(crate::bounded::Failure::Failed(e)) => {
            p.identity_matches = Some(false);
            p.detail = format!("cannot inventory {}: {e}", dir.display());
            return p;
        }
    };
    let recorded = p
        .at_close
        .as_ref()
        .map(|c| &c.identity)
        .or(p.at_start.as_ref());
    let Some(id) = recorded else {
        p.detail = "the log recorded no stage to compare with".into();
        p.now = Some(now);
        return p;
    };
    let same = inventory::same_dir(id, &now.identity)
        && p.at_start
            .as_ref()
            .is_none_or(|a| inventory::same_dir(a, &now.identity));
    p.identity_matches = Some(same);
    p.content_matches = p
        .at_close
        .as_ref()
        .map(|c| c.inventory == now.inventory && c.special == now.special);
    p.detail = match (same, p.content_matches) {
        (false, _) => "not the directory the log recorded (dev/ino/uid/mode differ)".into(),
        (true, Some(true)) => "the recorded directory, content unchanged since it was inventoried".into(),
        (true, Some(false)) => "the recorded directory, but its content changed since it was inventoried".into(),
        (true, None) => "the recorded directory; no inventory was recorded to compare its content with (the watchdog did not reach close)".into(),
    };
    p.now = Some(now);
    p
}
