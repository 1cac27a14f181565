//! What `exec` tells its caller besides its exit status: the sealed head
//! on stderr (`rea-watchdog: sealed head HEX`, to pin for `rea-audit
//! verify --expect-head`), a message naming a program it could not run
//! (126, 127), and with `--json-status FILE` the whole ending as one JSON
//! object (`audit-schema/exec-status.schema.json`), for a caller that
//! would otherwise parse stderr.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use super::receipt::{ExecResult, Finished};
use crate::vocab::{Outcome, RefusalReason, Status, StopReason};

/// The `--json-status` object. `exit` is the status exec exits with;
/// `head` is null when the log could not be sealed (exit 125); `job` is
/// null when nothing was launched.
#[derive(Serialize, Debug)]
pub struct ExecStatus<'a> {
    pub v: u32,
    pub run: &'a str,
    pub audit_log: String,
    pub head: Option<&'a str>,
    pub exit: i32,
    pub outcome: Outcome,
    pub stop_reason: Option<StopReason>,
    /// The receipt proved that nothing of the action is left.
    pub quiescent: bool,
    pub job: Option<JobEnd>,
}

/// How ARGV ended: its status, or why it could not be run.
#[derive(Serialize, Debug)]
#[serde(rename_all = "snake_case")]
pub enum JobEnd {
    Exited { status: Status },
    Failed { reason: RefusalReason },
}

impl<'a> ExecStatus<'a> {
    pub fn of(fin: &'a Finished, exit: i32) -> ExecStatus<'a> {
        ExecStatus {
            v: 1,
            run: &fin.run_id,
            audit_log: fin.audit_log.display().to_string(),
            head: fin.head.as_deref(),
            exit,
            outcome: fin.outcome,
            stop_reason: fin.stop_reason,
            quiescent: fin.positive,
            job: fin.exec.map(|e| match e {
                ExecResult::Exited(status) => JobEnd::Exited { status },
                ExecResult::Failed(reason) => JobEnd::Failed { reason },
            }),
        }
    }
}

/// Says on stderr what the caller needs beyond the exit status: that
/// `program` could not be run (as timeout(1) and tini name it), and the
/// sealed head.
pub fn tell(fin: &Finished, program: &OsStr) {
    let why = match fin.exec {
        Some(ExecResult::Failed(RefusalReason::NotFound)) => Some("No such file or directory"),
        Some(ExecResult::Failed(RefusalReason::NotExecutable)) => Some("Permission denied"),
        _ => None,
    };
    let name = Path::new(program).display();
    match (why, fin.exec) {
        (Some(why), _) => {
            crate::tell::note(format_args!("failed to run command '{name}': {why}"));
        }
        // Any other failure to start it (a fork refused at the process
        // limit, an exec the kernel refused): never a silent 125.
        (None, Some(ExecResult::Failed(reason))) => {
            crate::tell::note(format_args!(
                "could not start command '{name}': {} (the audit log's job_failed record \
                 has the detail: {})",
                reason.as_str(),
                fin.audit_log.display()
            ));
        }
        _ => {}
    }
    if let Some(head) = &fin.head {
        crate::tell::note(format_args!("sealed head {head}"));
    }
}

/// Writes `status` to `path` whole: to a temporary file beside it, synced,
/// then renamed over it, so a reader never sees half an object.
pub fn write(path: &Path, status: &ExecStatus) -> std::io::Result<()> {
    let mut text = serde_json::to_vec(status).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("names no file"))?;
    let mut tmp_name = OsStr::new(".").to_os_string();
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let done = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}
