//! `rea-audit verify` for a recovery log (`rea-watchdog recover`, docs/containment.md).
//!
//! Detected by its first record's kind ([`is_recovery_log`]). The same
//! strictness as for the other logs: lines read bounded by the cap, no
//! CR, typed records with unknown fields refused, every line byte for
//! byte the writer's encoding, `seq` 0, 1, 2, one run, the genesis and
//! the chain. Then [`super::judge`] checks the order of the
//! records, runs the recovery's decision again on the recorded facts,
//! and compares the stage. `delete_allowed` (result `recovered`) only for
//! an intact, sealed log whose facts show the group emptied
//! (`populated` false) and removed and nothing of the run left, and whose
//! stage matches as it must for a watchdog's log.

use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::judge::judge;
use super::lines::{Check, Judged};
use crate::audit::people;
use crate::audit::reader::{open_log, read_lines, OpenError, Piece, Wire};
use crate::audit::verdict::{Decision, Status};
use crate::holders::HolderScan;
use crate::kinds::group::RunIdSeen;
use crate::kinds::recovery::{Outcome, RecoveryEvent, KINDS};
use crate::kinds::watchdog::StagingInventoried;
use crate::log::MAX_LINE;

pub use super::lines::{Finding, FindingCode, Problem};

/// What a recovery log shows.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryResult {
    Recovered,
    Failed,
    Refused,
    Incomplete,
    Tampered,
    Error,
}

/// The object `verify --json` prints for a recovery log
/// (audit-schema/recovery-verdict.schema.json).
#[derive(Serialize, Clone, Debug)]
pub struct RecoveryVerdict {
    pub log_kind: &'static str,
    pub verdict: Decision,
    pub status: Status,
    pub result: RecoveryResult,
    pub exit_code: i32,
    pub log: String,
    pub run: Option<String>,
    pub records: u64,
    pub head: Option<String>,
    /// The last record is the decision and nothing follows it.
    pub sealed: bool,
    /// The lost watchdog's log the recovery was of, as it recorded it.
    pub recovered_log: Option<String>,
    pub recovered_run: Option<String>,
    pub recovered_intact_seq: Option<u64>,
    pub recovered_intact_head: Option<String>,
    /// The decision as recorded (when the log is intact).
    pub outcome: Option<Outcome>,
    /// The stage as the recovery inventoried it (what `--staging` must match).
    pub staging: Option<StagingInventoried>,
    /// The holder scan of `--staging`, when it ran (its unreadable
    /// processes are named here, not as reasons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<HolderScan>,
    pub reasons: Vec<Finding>,
}

#[derive(Deserialize)]
struct KindOnly<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

/// Whether the log's first line is a record of a recovery log (any of its
/// kinds, so a reordered one is judged here too; routing only: everything
/// is checked strictly afterwards).
pub fn is_recovery_log(path: &Path) -> bool {
    let Ok(f) = open_log(path) else {
        return false;
    };
    let mut first = Vec::new();
    if f.take(MAX_LINE as u64 + 1).read_to_end(&mut first).is_err() {
        return false;
    }
    is_recovery_start(&first)
}

/// [`is_recovery_log`] of a log whose first bytes (up to the line cap)
/// are `first`, for a caller that reads them itself.
pub fn is_recovery_start(first: &[u8]) -> bool {
    let line = first.split(|&b| b == b'\n').next().unwrap_or(&[]);
    serde_json::from_slice::<KindOnly>(line).is_ok_and(|k| KINDS.contains(&k.kind.as_ref()))
}

/// What `verify` was asked besides the log.
#[derive(Clone, Debug, Default)]
pub struct RecoveryOptions {
    pub expect_head: Option<String>,
    pub expect_run: Option<String>,
    pub staging: Option<PathBuf>,
}

/// Verifies the recovery log at `path`; never fails.
pub fn verify_recovery_file(path: &Path, opts: &RecoveryOptions) -> RecoveryVerdict {
    let name = path.display().to_string();
    match open_log(path) {
        Err(e) => {
            let mut c = Check::default();
            let code = match e {
                OpenError::Io(_) => Problem::IoError,
                OpenError::NotRegular(_) => Problem::NotARegularFile,
            };
            c.push(code, None, e.to_string());
            finish(c, name, Judged::default())
        }
        Ok(f) => verify_recovery_reader(f, &name, opts),
    }
}

/// Verifies the recovery log read from `f` (opened as [`open_log`] opens
/// one) under the name `name`; never fails.
pub fn verify_recovery_reader<R: Read>(
    f: R,
    name: &str,
    opts: &RecoveryOptions,
) -> RecoveryVerdict {
    let mut c = Check::default();
    let name = name.to_string();
    let tail = read_lines(f, |p| match p {
        Piece::Line(l) => c.line(l),
        Piece::Overlong(len) => {
            let n = c.chain.skipped();
            let d = format!("{len} bytes; the cap is {MAX_LINE}");
            c.push(Problem::Malformed, Some(n), d);
        }
    });
    match tail {
        Err(e) => c.push(Problem::IoError, None, e.to_string()),
        Ok(Some(t)) => {
            let line = Some(c.chain.lines() + 1);
            let d = format!("{} bytes after the last newline", t.len());
            c.push(Problem::TornLine, line, d);
        }
        Ok(None) => {}
    }
    if c.chain.lines() == 0 && c.found.is_empty() {
        c.push(Problem::EmptyLog, None, "the log is empty");
    }
    if let (Some(want), Some(run)) = (&opts.expect_run, c.chain.run().map(str::to_string)) {
        if *want != run {
            let d = format!("log is of run {run}, expected {want}");
            c.push(Problem::ExpectRunMismatch, None, d);
        }
    }
    if let Some(want) = &opts.expect_head {
        if c.chain.head().as_deref() != Some(want.as_str()) {
            let d = format!(
                "head is {}, pinned {want}",
                c.chain.head().as_deref().unwrap_or("(none)")
            );
            c.push(Problem::HeadMismatch, None, d);
        }
    }
    let judged = judge(&mut c, opts.staging.as_deref());
    finish(c, name, judged)
}

fn finish(c: Check, log: String, j: Judged) -> RecoveryVerdict {
    let status = c
        .found
        .iter()
        .map(|f| f.class)
        .max()
        .unwrap_or(Status::DeleteAllowed);
    let log_problem = c
        .found
        .iter()
        .filter(|f| matches!(f.code, FindingCode::Log(_)))
        .map(|f| f.class)
        .filter(|s| *s > Status::Retain)
        .max();
    let result = match (log_problem, j.outcome) {
        (Some(Status::Error), _) => RecoveryResult::Error,
        (Some(Status::Tampered), _) => RecoveryResult::Tampered,
        (Some(_), _) | (None, None) => RecoveryResult::Incomplete,
        (None, Some(Outcome::Recovered)) => RecoveryResult::Recovered,
        (None, Some(Outcome::Failed)) => RecoveryResult::Failed,
        (None, Some(Outcome::Refused)) => RecoveryResult::Refused,
    };
    // Recovered and nothing found: the only way to delete_allowed.
    let status = match (status, result) {
        (Status::DeleteAllowed, RecoveryResult::Recovered) => Status::DeleteAllowed,
        (Status::DeleteAllowed, _) => Status::Retain,
        (s, _) => s,
    };
    let intact = log_problem.is_none();
    RecoveryVerdict {
        log_kind: "recovery",
        verdict: if status == Status::DeleteAllowed {
            Decision::DeleteAllowed
        } else {
            Decision::Retain
        },
        status,
        result,
        exit_code: status.exit_code(),
        log,
        run: c.chain.run().map(str::to_string),
        records: c.chain.lines(),
        head: c.chain.head(),
        sealed: j.sealed && intact,
        recovered_log: j.recovered_log,
        recovered_run: j.recovered_run,
        recovered_intact_seq: j.recovered_intact_seq,
        recovered_intact_head: j.recovered_intact_head,
        outcome: j.outcome.filter(|_| intact),
        staging: j.staging,
        holders: j.holders,
        reasons: c.found,
    }
}

impl RecoveryVerdict {
    /// For people (control characters escaped).
    pub fn human(&self) -> String {
        let word = match (self.status, self.result) {
            (Status::DeleteAllowed, _) => {
                "DELETE ALLOWED (recovered: the group was emptied and removed)"
            }
            (_, RecoveryResult::Recovered) => "RETAIN (recovered, but the stage is not cleared)",
            (_, RecoveryResult::Failed) => "RETAIN (the recovery ran but is not proven)",
            (_, RecoveryResult::Refused) => "RETAIN (the recovery was refused; nothing was killed)",
            (_, RecoveryResult::Incomplete) => "RETAIN (incomplete: the recovery did not finish)",
            (_, RecoveryResult::Tampered) => "RETAIN (log tampered)",
            (_, RecoveryResult::Error) => "RETAIN (could not verify)",
        };
        let mut s = format!("{}: recovery log: {word}\n", self.log);
        if let Some(run) = &self.run {
            s.push_str(&format!("  run      {run}\n"));
        }
        let sealed = if self.sealed {
            ", sealed by its decision"
        } else {
            ""
        };
        s.push_str(&format!("  records  {}{sealed}\n", self.records));
        if let Some(h) = &self.head {
            s.push_str(&format!("  head     {h}\n"));
        }
        if let Some(l) = &self.recovered_log {
            s.push_str(&format!(
                "  recovers {l}: run {}, intact through seq {}, head {}\n",
                self.recovered_run.as_deref().unwrap_or("?"),
                self.recovered_intact_seq
                    .map_or("?".to_string(), |x| x.to_string()),
                self.recovered_intact_head.as_deref().unwrap_or("?")
            ));
        }
        if let Some(o) = self.outcome {
            s.push_str(&format!("  outcome  {}\n", people::word(&o)));
        }
        if let Some(st) = &self.staging {
            s.push_str(&format!("  staging  {}\n", st.identity.path));
        }
        if let Some(h) = &self.holders {
            s.push_str(&crate::audit::verdict::holders_lines(h));
        }
        for r in &self.reasons {
            let line = r.line.map(|l| format!("line {l}: ")).unwrap_or_default();
            s.push_str(&format!(
                "  - {} [{}] {line}{}\n",
                people::word(&r.code),
                people::word(&r.class),
                r.detail
            ));
        }
        s.lines()
            .map(|l| crate::audit::people::escape(l) + "\n")
            .collect()
    }
}

/// What one record of a recovery log says, for `rea-audit show` (`None`:
/// not one; show prints its seq, time and kind itself).
pub(crate) fn show_line(w: &Wire) -> Option<String> {
    let ev = RecoveryEvent::parse(&w.kind, w.data.get())?.ok()?;
    let what = match &ev {
        RecoveryEvent::Started(s) => format!(
            "of {} (run {}, intact through seq {})",
            s.log,
            s.log_run.as_deref().unwrap_or("?"),
            s.log_intact_seq.map_or("?".into(), |x| x.to_string())
        ),
        RecoveryEvent::Checked(c) => format!(
            "watchdog {}, group {}",
            c.watchdog
                .as_ref()
                .map_or("not probed".into(), |w| people::word(&w.state)),
            c.group
                .as_ref()
                .map_or("not looked at".into(), |g| people::word(&g.state))
        ),
        RecoveryEvent::Members(m) => {
            // Each pid, and what its environment said of the run's id
            // when it is not simply carried.
            let pids: Vec<String> = m
                .members
                .iter()
                .map(|x| match x.run_id {
                    RunIdSeen::Carried => x.pid.to_string(),
                    other => format!("{}({})", x.pid, people::word(&other)),
                })
                .collect();
            format!(
                "group {}; {} member(s) checked: {}",
                if m.freeze.frozen {
                    "frozen"
                } else {
                    "NOT frozen"
                },
                pids.len(),
                pids.join(" ")
            )
        }
        RecoveryEvent::Killed(k) => format!(
            "cgroup.kill {}; {} after {} ms",
            k.kill_error.as_deref().unwrap_or("written"),
            match k.populated {
                Some(false) => "populated 0",
                Some(true) => "STILL POPULATED",
                None => "populated unreadable",
            },
            k.waited_ms
        ),
        RecoveryEvent::GroupRemoved(r) => format!(
            "{} {}",
            r.group.path,
            if r.removed {
                "removed".to_string()
            } else {
                format!("NOT removed: {}", r.detail)
            }
        ),
        RecoveryEvent::Staging(st) => format!("stage {}", st.path),
        RecoveryEvent::Scan(sc) => format!("{} process(es) of the run left", sc.processes.len()),
        RecoveryEvent::Decided(d) => {
            let codes: Vec<String> = d.reasons.iter().map(|r| r.code.as_str()).collect();
            format!("{} {}", people::word(&d.outcome), codes.join(", "))
        }
    };
    Some(what)
}
