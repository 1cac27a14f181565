//! `rea-audit verify` for a removal log (`rea-stage remove`, docs/stage.md,
//! "One verified removal").
//!
//! Detected by its first record's kind ([`is_remove_start`]). The same
//! strictness as for the other logs (the chain rule, [`crate::log`]); then
//! the structure (started, checked, approved, entry_removed..., decided,
//! nothing after) and the decision itself: the decision function
//! ([`decide`]) is run again on the recorded facts, so `removed` holds only
//! where the recorded verdict and walk allow it, and only with every
//! approved entry and then the stage recorded as removed.

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::log::{Finding, Problem, StageResult};
use crate::audit::reader::{open_log, read_lines, OpenError, Piece, Wire};
use crate::log::MAX_LINE;
use crate::stage::remove_decide::{decide, Code, Facts, Refusal};
use crate::stage::remove_log::{
    Outcome, RemoveApproved, RemoveChecked, RemoveDecided, RemoveEvent, RemoveStarted, What, KINDS,
};

/// What a removal log shows; each its own exit code (0-4 as for the other
/// logs; `stopped`, a removal begun and stopped, is 5).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum RemoveResult {
    Removed,
    Refused,
    Stopped,
    Incomplete,
    Tampered,
    Error,
}

impl RemoveResult {
    pub fn exit_code(self) -> i32 {
        match self {
            RemoveResult::Removed => 0,
            RemoveResult::Refused => 1,
            RemoveResult::Incomplete => 2,
            RemoveResult::Tampered => 3,
            RemoveResult::Error => 4,
            RemoveResult::Stopped => 5,
        }
    }

    fn of(class: StageResult) -> RemoveResult {
        match class {
            StageResult::Incomplete => RemoveResult::Incomplete,
            StageResult::Error => RemoveResult::Error,
            _ => RemoveResult::Tampered,
        }
    }
}

/// The object `verify --json` prints for a removal log.
#[derive(Serialize, Clone, Debug)]
pub struct RemoveVerdict {
    pub log_kind: &'static str,
    pub result: RemoveResult,
    pub exit_code: i32,
    pub log: String,
    pub run: Option<String>,
    pub records: u64,
    pub head: Option<String>,
    pub stage: Option<String>,
    /// The decision as recorded (when the log is intact).
    pub outcome: Option<Outcome>,
    /// Entries removed, as recorded (when the log is intact).
    pub removed: Option<u64>,
    pub refusals: Vec<Refusal>,
    pub problems: Vec<Finding>,
}

#[derive(Deserialize)]
struct KindOnly<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

/// Whether the log's first line (in `first`) is a record of a removal log
/// (any of its kinds; routing only).
pub fn is_remove_start(first: &[u8]) -> bool {
    let line = first.split(|&b| b == b'\n').next().unwrap_or(&[]);
    serde_json::from_slice::<KindOnly>(line).is_ok_and(|k| KINDS.contains(&k.kind.as_ref()))
}

/// [`is_remove_start`] of the log at `path`.
pub fn is_remove_log(path: &Path) -> bool {
    let Ok(f) = open_log(path) else {
        return false;
    };
    let mut first = Vec::new();
    if f.take(MAX_LINE as u64 + 1).read_to_end(&mut first).is_err() {
        return false;
    }
    is_remove_start(&first)
}

#[derive(Default)]
struct Check {
    found: Vec<Finding>,
    chain: crate::log::Chain,
    stage: Option<String>,
    events: Vec<(u64, RemoveEvent)>,
    /// Records past the ones kept (a removal writes one per entry).
    more: bool,
}

fn push_found(found: &mut Vec<Finding>, code: Problem, line: Option<u64>, detail: String) {
    if found.len() < 64 {
        found.push(Finding {
            code,
            class: code.class(),
            line,
            detail,
        });
    }
}

impl Check {
    fn push(&mut self, code: Problem, line: Option<u64>, detail: impl Into<String>) {
        push_found(&mut self.found, code, line, detail.into());
    }

    fn line(&mut self, bytes: &[u8]) {
        let found = &mut self.found;
        let (n, rec) = self.chain.line::<RemoveEvent>(bytes, &mut |f| {
            push_found(found, Problem::from(f.fault), Some(f.line), f.detail)
        });
        let Some(rec) = rec else {
            return;
        };
        // One record per entry: as many as a stage may hold, and a few more.
        if self.events.len() < crate::stage::remove_decide::MAX_NODES + 8 {
            self.events.push((n, rec.event));
        } else if !self.more {
            self.more = true;
            self.push(
                Problem::OutOfOrder,
                Some(n),
                "more records than any removal writes",
            );
        }
    }
}

/// Verifies the removal log at `path`; never fails.
pub fn verify_remove_file(
    path: &Path,
    expect_head: Option<&str>,
    expect_run: Option<&str>,
) -> RemoveVerdict {
    let name = path.display().to_string();
    match open_log(path) {
        Err(e) => {
            let mut c = Check::default();
            let code = match e {
                OpenError::Io(_) => Problem::IoError,
                OpenError::NotRegular(_) => Problem::NotARegularFile,
            };
            c.push(code, None, e.to_string());
            finish(c, name, None)
        }
        Ok(f) => verify_remove_reader(f, &name, expect_head, expect_run),
    }
}

/// Verifies the removal log read from `f` under the name `name`.
pub fn verify_remove_reader<R: Read>(
    f: R,
    name: &str,
    expect_head: Option<&str>,
    expect_run: Option<&str>,
) -> RemoveVerdict {
    let mut c = Check::default();
    let tail = read_lines(f, |p| match p {
        Piece::Line(l) => c.line(l),
        Piece::Overlong(len) => {
            let n = c.chain.skipped();
            c.push(
                Problem::Malformed,
                Some(n),
                format!("{len} bytes; the cap is {MAX_LINE}"),
            );
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
    if let (Some(want), Some(run)) = (expect_run, c.chain.run().map(str::to_string)) {
        if want != run {
            let d = format!("log is of run {run}, expected {want}");
            c.push(Problem::ExpectRunMismatch, None, d);
        }
    }
    if let Some(want) = expect_head {
        if c.chain.head().as_deref() != Some(want) {
            let head = c.chain.head().unwrap_or_else(|| "(none)".into());
            c.push(
                Problem::HeadMismatch,
                None,
                format!("head is {head}, pinned {want}"),
            );
        }
    }
    let decided = structure(&mut c);
    finish(c, name.to_string(), decided)
}

/// The records the decision is checked against.
#[derive(Default)]
struct Seen {
    started: Option<RemoveStarted>,
    checked: Option<RemoveChecked>,
    approved: Option<RemoveApproved>,
    /// (path, what) of each removal, in order.
    removed: Vec<(String, What)>,
}

/// Each record in the order remove writes them, up to the decision.
fn in_order(c: &mut Check) -> (Seen, Option<(u64, RemoveDecided)>) {
    let events = std::mem::take(&mut c.events);
    let mut seen = Seen::default();
    let mut decided: Option<(u64, RemoveDecided)> = None;
    for (n, ev) in events {
        if let Some((d, _)) = &decided {
            let detail = format!("{} after the decision on line {d}", ev.kind());
            c.push(Problem::RecordAfterDecision, Some(n), detail);
            continue;
        }
        let ok = match ev {
            RemoveEvent::Started(s) => {
                c.stage.get_or_insert_with(|| s.stage.clone());
                n == 1 && seen.started.replace(s).is_none()
            }
            RemoveEvent::Checked(k) => {
                n == 2 && seen.started.is_some() && seen.checked.replace(k).is_none()
            }
            RemoveEvent::Approved(a) => {
                seen.checked.is_some() && seen.approved.replace(a).is_none()
            }
            RemoveEvent::Removed(r) => {
                let after_stage = seen.removed.last().is_some_and(|l| l.1 == What::Stage);
                seen.removed.push((r.path, r.what));
                seen.approved.is_some() && !after_stage
            }
            RemoveEvent::Decided(d) => {
                decided = Some((n, d));
                seen.started.is_some()
            }
        };
        if !ok {
            let d = "a record out of the order remove writes them in";
            c.push(Problem::OutOfOrder, Some(n), d);
        }
    }
    if seen.started.is_none() && c.chain.lines() > 0 {
        c.push(
            Problem::OutOfOrder,
            Some(1),
            "the first record is not remove_started",
        );
    }
    (seen, decided)
}

/// The facts remove decided on, as its records give them.
fn facts_of(seen: &Seen) -> Option<Facts> {
    let (Some(s), Some(k)) = (&seen.started, &seen.checked) else {
        return None;
    };
    Some(Facts {
        expect_head: s.expect_head.clone(),
        verdict: k.verdict.clone(),
        stage: s.identity?,
        walked: match (&k.walked, &k.walk_error) {
            (Some(w), _) => Ok(w.clone()),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err(String::new()),
        },
    })
}

/// The order of the records, and the decision against the facts.
fn structure(c: &mut Check) -> Option<RemoveDecided> {
    let (seen, decided) = in_order(c);
    let Some((dline, d)) = decided else {
        let detail = "no remove_decided record: the removal did not finish";
        c.push(Problem::NoDecision, None, detail);
        return None;
    };
    let entries = seen.removed.iter().filter(|r| r.1 != What::Stage).count() as u64;
    let stage_gone = seen.removed.iter().any(|r| r.1 == What::Stage);
    let mut bad = Vec::new();
    if d.removed != entries || d.stage_removed != stage_gone {
        bad.push(format!(
            "the decision says removed={} stage_removed={}; the records show {entries} and {stage_gone}",
            d.removed, d.stage_removed
        ));
    }
    let again = facts_of(&seen).map(|f| decide(&f));
    let during = |r: &Refusal| matches!(r.code, Code::ConcurrentChange | Code::IoError);
    let planned = seen.approved.as_ref().map(|a| a.entries);
    match d.outcome {
        Outcome::Removed => {
            if !d.reasons.is_empty() || again.as_deref() != Some(&[]) {
                bad.push(
                    "removed, but the recorded verdict and walk are ones the rule refuses".into(),
                );
            }
            if planned != Some(entries) || !stage_gone {
                bad.push("removed, but not every approved entry and then the stage are recorded as removed".into());
            }
        }
        Outcome::Stopped => {
            if d.reasons.is_empty() || !d.reasons.iter().all(during) || stage_gone {
                bad.push(
                    "a stop is for a change or an I/O error during removal, the stage kept".into(),
                );
            }
            if again.as_deref() != Some(&[]) || planned.is_none_or(|p| entries > p) {
                bad.push(
                    "stopped, but the removal was never approved (or removed more than approved)"
                        .into(),
                );
            }
        }
        Outcome::Refused => {
            if d.reasons.is_empty() || planned.is_some() || !seen.removed.is_empty() {
                bad.push("refused with no reason, or after an approval or a removal".into());
            }
            let unreachable = d.reasons.len() == 1
                && matches!(d.reasons[0].code, Code::StageUnreachable | Code::IoError);
            match &again {
                Some(r) if *r != d.reasons => {
                    bad.push("the refusal's reasons are not what the recorded facts give".into())
                }
                None if !unreachable && seen.checked.is_none() => {
                    bad.push("refused without the checks recorded, for another reason than an unreachable stage".into())
                }
                _ => {}
            }
        }
    }
    for why in bad {
        c.push(Problem::DecisionMismatch, Some(dline), why);
    }
    Some(d)
}

fn finish(c: Check, log: String, decided: Option<RemoveDecided>) -> RemoveVerdict {
    let worst = c.found.iter().map(|f| RemoveResult::of(f.class)).max();
    let result = match (worst, &decided) {
        (Some(w), _) => w,
        (None, Some(d)) => match d.outcome {
            Outcome::Removed => RemoveResult::Removed,
            Outcome::Refused => RemoveResult::Refused,
            Outcome::Stopped => RemoveResult::Stopped,
        },
        (None, None) => RemoveResult::Incomplete,
    };
    let intact = worst.is_none();
    let decided = decided.filter(|_| intact);
    RemoveVerdict {
        log_kind: "stage_remove",
        result,
        exit_code: result.exit_code(),
        log,
        run: c.chain.run().map(str::to_string),
        records: c.chain.lines(),
        head: c.chain.head(),
        stage: c.stage,
        outcome: decided.as_ref().map(|d| d.outcome),
        removed: decided.as_ref().map(|d| d.removed),
        refusals: decided.map(|d| d.reasons).unwrap_or_default(),
        problems: c.found,
    }
}

impl RemoveVerdict {
    /// For people (control characters escaped).
    pub fn human(&self) -> String {
        let word = match self.result {
            RemoveResult::Removed => {
                "REMOVED (every check held; every entry and the stage are gone)"
            }
            RemoveResult::Refused => "REFUSED (nothing of the stage was removed)",
            RemoveResult::Stopped => "STOPPED (removal began and stopped; the rest is kept)",
            RemoveResult::Incomplete => "INCOMPLETE (the removal did not finish)",
            RemoveResult::Tampered => "TAMPERED (not the log rea-stage wrote)",
            RemoveResult::Error => "COULD NOT VERIFY",
        };
        let mut s = format!("{}: removal log: {word}\n", self.log);
        if let Some(run) = &self.run {
            s.push_str(&format!("  run      {run}\n"));
        }
        s.push_str(&format!("  records  {}\n", self.records));
        if let Some(n) = self.removed {
            s.push_str(&format!("  removed  {n} entries\n"));
        }
        if let Some(h) = &self.head {
            s.push_str(&format!("  head     {h}\n"));
        }
        for r in &self.refusals {
            let name = r
                .name
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default();
            s.push_str(&format!("  - {}{name}: {}\n", r.code.as_str(), r.detail));
        }
        for p in &self.problems {
            let line = p.line.map(|l| format!("line {l}: ")).unwrap_or_default();
            let code = serde_json::to_value(p.code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            s.push_str(&format!("  - {code} {line}{}\n", p.detail));
        }
        s.lines()
            .map(|l| crate::audit::people::escape(l) + "\n")
            .collect()
    }
}

/// What one record of a removal log says, for `rea-audit show` (`None`:
/// not one; show prints its seq, time and kind itself).
pub(crate) fn show_line(w: &Wire) -> Option<String> {
    let ev = RemoveEvent::parse(&w.kind, w.data.get())?.ok()?;
    let what = match &ev {
        RemoveEvent::Started(s) => format!(
            "stage {} log {} head {}",
            s.stage, s.audit_log, s.expect_head
        ),
        RemoveEvent::Checked(k) => {
            let walk = match (&k.walked, &k.walk_error) {
                (Some(w), _) => format!("walk {} entries, digest {}", w.entries, w.digest),
                (None, e) => format!("walk failed: {}", e.as_deref().unwrap_or("?")),
            };
            format!(
                "verdict {} ({} reasons); {walk}",
                k.verdict.status,
                k.verdict.reasons.len()
            )
        }
        RemoveEvent::Approved(a) => format!("removing {} entries (digest {})", a.entries, a.digest),
        RemoveEvent::Removed(r) => format!("removed {:?} {} (inode {})", r.what, r.path, r.ino),
        RemoveEvent::Decided(d) => {
            let codes: Vec<String> = d.reasons.iter().map(|r| r.code.as_str()).collect();
            format!("{:?} {}", d.outcome, codes.join(", "))
        }
    };
    Some(what)
}
