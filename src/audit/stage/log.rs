//! `rea-audit verify` for a discard log (`rea-stage discard`, docs/stage.md).
//!
//! Detected by its first record's kind ([`is_stage_log`]); the watchdog's
//! logs never reach this module. The same strictness as for those: lines
//! read bounded by the cap, no BOM/CR, typed records with unknown fields
//! refused, every line byte for byte the writer's encoding, `seq` 0, 1, 2,
//! one run, the genesis and the chain; then the structure (started,
//! inventoried, approved, removed..., decided, nothing after) and the
//! decision itself: the decision function is run again on the recorded
//! facts, so `discarded` holds only for a stage the rule accepts, and only
//! with every planned removal and the directory's own recorded.

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::audit::reader::{open_log, read_lines, OpenError, Piece, Wire};
use crate::log::MAX_LINE;
use crate::stage::decide::{decide, plan, Code, Facts, Refusal};
use crate::stage::log::{
    DiscardApproved, DiscardDecided, DiscardStarted, Outcome, Removed, StageEvent,
    StageInventoried, KINDS,
};
use crate::stage::receipt::ReceiptError;

/// What a discard log shows; each its own exit code (as for watchdog logs).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum StageResult {
    Discarded,
    Refused,
    Incomplete,
    Tampered,
    Error,
}

impl StageResult {
    pub fn exit_code(self) -> i32 {
        self as i32
    }
}

/// Why the log is not an intact, decided discard log.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    Malformed,
    UnknownKind,
    BadVersion,
    NonCanonical,
    SeqMismatch,
    GenesisMismatch,
    RunMismatch,
    PrevMismatch,
    MonoRegressed,
    OutOfOrder,
    RecordAfterDecision,
    DecisionMismatch,
    HeadMismatch,
    ExpectRunMismatch,
    EmptyLog,
    TornLine,
    NoDecision,
    IoError,
    NotARegularFile,
}

coarse_faults!(Problem);

impl Problem {
    pub fn class(self) -> StageResult {
        use Problem::*;
        match self {
            EmptyLog | TornLine | NoDecision => StageResult::Incomplete,
            IoError | NotARegularFile => StageResult::Error,
            _ => StageResult::Tampered,
        }
    }
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub code: Problem,
    pub class: StageResult,
    pub line: Option<u64>,
    pub detail: String,
}

/// The object `verify --json` prints for a discard log.
#[derive(Serialize, Clone, Debug)]
pub struct StageVerdict {
    pub log_kind: &'static str,
    pub result: StageResult,
    pub exit_code: i32,
    pub log: String,
    pub run: Option<String>,
    pub records: u64,
    pub head: Option<String>,
    pub stage: Option<String>,
    /// The decision as recorded (when the log is intact).
    pub outcome: Option<Outcome>,
    pub refusals: Vec<Refusal>,
    pub problems: Vec<Finding>,
}

#[derive(Deserialize)]
struct KindOnly<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

/// Whether the log's first line is a record of a discard log (any of its
/// kinds, so a reordered one is judged here too; routing only: everything
/// is checked strictly afterwards).
pub fn is_stage_log(path: &Path) -> bool {
    let Ok(f) = open_log(path) else {
        return false;
    };
    let mut first = Vec::new();
    if f.take(MAX_LINE as u64 + 1).read_to_end(&mut first).is_err() {
        return false;
    }
    is_stage_start(&first)
}

/// [`is_stage_log`] of a log whose first bytes (up to the line cap) are
/// `first`, for a caller that reads them itself.
pub fn is_stage_start(first: &[u8]) -> bool {
    let line = first.split(|&b| b == b'\n').next().unwrap_or(&[]);
    serde_json::from_slice::<KindOnly>(line).is_ok_and(|k| KINDS.contains(&k.kind.as_ref()))
}

#[derive(Default)]
struct Check {
    found: Vec<Finding>,
    /// The chain rule, line by line (lines, run, head).
    chain: crate::log::Chain,
    stage: Option<String>,
    events: Vec<(u64, StageEvent)>,
}

/// Adds a finding (at most 64 are kept).
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
        let (n, rec) = self.chain.line::<StageEvent>(bytes, &mut |f| {
            push_found(found, Problem::from(f.fault), Some(f.line), f.detail)
        });
        let Some(rec) = rec else {
            return;
        };
        // A discard log holds a handful of records (at most a few hundred).
        if self.events.len() < 1024 {
            self.events.push((n, rec.event));
        } else {
            self.push(
                Problem::OutOfOrder,
                Some(n),
                "more records than any discard writes",
            );
        }
    }
}

/// Verifies the discard log at `path`; never fails.
pub fn verify_stage_file(
    path: &Path,
    expect_head: Option<&str>,
    expect_run: Option<&str>,
) -> StageVerdict {
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
        Ok(f) => verify_stage_reader(f, &name, expect_head, expect_run),
    }
}

/// Verifies the discard log read from `f` (opened as [`open_log`] opens
/// one) under the name `name`; never fails.
pub fn verify_stage_reader<R: Read>(
    f: R,
    name: &str,
    expect_head: Option<&str>,
    expect_run: Option<&str>,
) -> StageVerdict {
    let mut c = Check::default();
    let name = name.to_string();
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
            c.push(
                Problem::TornLine,
                line,
                format!("{} bytes after the last newline", t.len()),
            );
        }
        Ok(None) => {}
    }
    if c.chain.lines() == 0 && c.found.is_empty() {
        c.push(Problem::EmptyLog, None, "the log is empty");
    }
    if let (Some(want), Some(run)) = (expect_run, c.chain.run().map(str::to_string)) {
        if want != run {
            c.push(
                Problem::ExpectRunMismatch,
                None,
                format!("log is of run {run}, expected {want}"),
            );
        }
    }
    if let Some(want) = expect_head {
        if c.chain.head().as_deref() != Some(want) {
            let d = format!(
                "head is {}, pinned {want}",
                c.chain.head().as_deref().unwrap_or("(none)")
            );
            c.push(Problem::HeadMismatch, None, d);
        }
    }
    let decided = structure(&mut c);
    finish(c, name, decided)
}

/// The records of a discard log that the decision is checked against.
#[derive(Default)]
struct Seen {
    started: Option<DiscardStarted>,
    inv: Option<StageInventoried>,
    approved: Option<DiscardApproved>,
    removed: Vec<(String, Removed, u64)>,
}

/// The order of the records, and the decision against the facts.
fn structure(c: &mut Check) -> Option<DiscardDecided> {
    let (seen, decided) = in_order(c);
    let Some((dline, d)) = decided else {
        c.push(
            Problem::NoDecision,
            None,
            "no discard_decided record: the discard did not finish",
        );
        return None;
    };
    let line = Some(dline);
    let files = seen
        .removed
        .iter()
        .filter(|r| r.1 != Removed::Stage)
        .count() as u64;
    let stage_gone = seen.removed.iter().any(|r| r.1 == Removed::Stage);
    if d.removed != files || d.stage_removed != stage_gone {
        c.push(Problem::DecisionMismatch, line, format!("the decision says removed={} stage_removed={}; the records show {files} and {stage_gone}", d.removed, d.stage_removed));
    }
    let facts = facts_of(&seen);
    let again = facts.as_ref().map(decide);
    let mismatches = match d.outcome {
        Outcome::Discarded => discarded(&seen, &d, facts.as_ref(), again.as_deref()),
        Outcome::Refused => refused(&seen, &d, stage_gone, again.as_deref()),
    };
    for why in mismatches {
        c.push(Problem::DecisionMismatch, line, why);
    }
    Some(d)
}

/// Each record in the order discard writes them (a record out of it is a
/// finding), up to the decision; anything after the decision is one too.
fn in_order(c: &mut Check) -> (Seen, Option<(u64, DiscardDecided)>) {
    let events = std::mem::take(&mut c.events);
    let mut seen = Seen::default();
    let mut decided: Option<(u64, DiscardDecided)> = None;
    for (n, ev) in events {
        if let Some((d, _)) = &decided {
            let detail = format!("{} after the decision on line {d}", ev.kind());
            c.push(Problem::RecordAfterDecision, Some(n), detail);
            continue;
        }
        let ok = match ev {
            StageEvent::Started(s) => {
                c.stage.get_or_insert_with(|| s.stage.clone());
                n == 1 && seen.started.replace(s).is_none()
            }
            StageEvent::Inventoried(i) => {
                n == 2 && seen.started.is_some() && seen.inv.replace(i).is_none()
            }
            StageEvent::Approved(a) => seen.inv.is_some() && seen.approved.replace(a).is_none(),
            StageEvent::Removed(r) => {
                let ok = seen.approved.is_some()
                    && seen.removed.last().is_none_or(|l| l.1 != Removed::Stage);
                seen.removed.push((r.name, r.what, r.ino));
                ok
            }
            StageEvent::Decided(d) => {
                decided = Some((n, d));
                seen.started.is_some()
            }
        };
        if !ok {
            c.push(
                Problem::OutOfOrder,
                Some(n),
                "a record out of the order discard writes them in",
            );
        }
    }
    if seen.started.is_none() && c.chain.lines() > 0 {
        c.push(
            Problem::OutOfOrder,
            Some(1),
            "the first record is not discard_started",
        );
    }
    (seen, decided)
}

/// The facts the discard decided on, as its records give them (none
/// without a started record with the stage's identity and an inventory).
fn facts_of(seen: &Seen) -> Option<Facts> {
    let (Some(s), Some(i)) = (&seen.started, &seen.inv) else {
        return None;
    };
    s.identity.map(|id| Facts {
        uid: s.uid,
        expected: s.receipt_sha256.clone(),
        stage: id,
        entries: i.entries.clone(),
        truncated: i.truncated,
        changed: i.changed.clone(),
        receipt: match (&i.receipt, &i.receipt_error) {
            (Some(r), _) => Some(Ok(r.clone())),
            (None, Some(e)) => Some(Err(ReceiptError::Recorded(e.clone()))),
            (None, None) => None,
        },
        holders: i.holders.as_deref().map(super::held::findings),
    })
}

/// A discard is right only where the rule accepts the recorded facts and
/// the removals are the plan's entries, the receipt, the marker, then the
/// stage. The mismatches found.
fn discarded(
    seen: &Seen,
    d: &DiscardDecided,
    facts: Option<&Facts>,
    again: Option<&[Refusal]>,
) -> Vec<String> {
    let mut bad = Vec::new();
    if !d.reasons.is_empty() {
        bad.push("discarded, with refusal reasons".into());
    }
    match (facts, again) {
        (Some(f), Some([])) => {
            if seen.removed != removals_planned(seen, f) {
                bad.push("discarded, but the removals recorded are not every inventoried entry, the receipt, the discard's marker, then the stage".into());
            }
            if seen.approved.as_ref().map(|a| &a.plan) != Some(&plan(f)) {
                bad.push("the approved plan is not the inventory's".into());
            }
        }
        (_, Some(r)) => {
            let codes: Vec<String> = r.iter().map(|x| x.code.as_str()).collect();
            bad.push(format!(
                "discarded, but the recorded stage is one the rule refuses ({})",
                codes.join(", ")
            ));
        }
        _ => bad.push("discarded without an inventory".into()),
    }
    bad
}

/// The removals a discard of `f` records, in order: each planned entry
/// (the receipt and the marker named as such), then the stage.
fn removals_planned(seen: &Seen, f: &Facts) -> Vec<(String, Removed, u64)> {
    let ino = |n: &str| f.entries.iter().find(|e| e.name == n).map_or(0, |e| e.ino);
    let mut want: Vec<(String, Removed, u64)> = plan(f)
        .into_iter()
        .map(|n| {
            let (w, i) = if n == crate::stage::RECEIPT_NAME {
                (Removed::Receipt, ino(&n))
            } else if n == crate::stage::DISCARDING_NAME {
                let m = seen.approved.as_ref().map_or(0, |a| a.marker_ino);
                (Removed::Marker, m)
            } else {
                (Removed::File, ino(&n))
            };
            (n, w, i)
        })
        .collect();
    let stage = seen
        .started
        .as_ref()
        .map(|s| s.stage.clone())
        .unwrap_or_default();
    want.push((stage, Removed::Stage, f.stage.ino));
    want
}

/// A refusal is right with a reason, nothing of the stage removed, and the
/// reasons the rule gives the recorded facts (or the interlock's one). The
/// mismatches found.
fn refused(
    seen: &Seen,
    d: &DiscardDecided,
    stage_gone: bool,
    again: Option<&[Refusal]>,
) -> Vec<String> {
    let mut bad = Vec::new();
    if d.reasons.is_empty() {
        bad.push("refused without a reason".into());
    }
    if stage_gone {
        bad.push("refused, but the stage's removal is recorded".into());
    }
    let during = |r: &Refusal| matches!(r.code, Code::ConcurrentChange | Code::IoError);
    if seen.approved.is_some() && !d.reasons.iter().all(during) {
        bad.push(
            "an approved discard can only stop for a change or an I/O error during removal".into(),
        );
    }
    // The rule accepted the stage, and the interlock (docs/stage.md:
    // `.rea-discarding` created, then `.rea-exec-started` looked
    // for) stopped it before the approval: one reason, of those.
    let interlock = |r: &[Refusal]| {
        r.len() == 1
            && matches!(
                r[0].code,
                Code::Armed | Code::DiscardInProgress | Code::IoError
            )
    };
    if seen.approved.is_none() {
        if let Some(r) = again {
            if !(r.is_empty() && interlock(&d.reasons)) && *r != d.reasons {
                bad.push("the refusal's reasons are not what the recorded facts give".into());
            }
        }
    }
    bad
}

fn finish(c: Check, log: String, decided: Option<DiscardDecided>) -> StageVerdict {
    let worst = c.found.iter().map(|f| f.class).max();
    let result = match (worst, &decided) {
        (Some(w), _) => w.max(StageResult::Refused),
        (None, Some(d)) if d.outcome == Outcome::Discarded => StageResult::Discarded,
        (None, Some(_)) => StageResult::Refused,
        (None, None) => StageResult::Incomplete,
    };
    let intact = worst.is_none();
    StageVerdict {
        log_kind: "stage_discard",
        result,
        exit_code: result.exit_code(),
        log,
        run: c.chain.run().map(str::to_string),
        records: c.chain.lines(),
        head: c.chain.head(),
        stage: c.stage,
        outcome: decided.as_ref().filter(|_| intact).map(|d| d.outcome),
        refusals: decided
            .filter(|_| intact)
            .map(|d| d.reasons)
            .unwrap_or_default(),
        problems: c.found,
    }
}

impl StageVerdict {
    /// For people (control characters escaped).
    pub fn human(&self) -> String {
        let word = match self.result {
            StageResult::Discarded => "DISCARDED (the stage was removed, every check held)",
            StageResult::Refused => "REFUSED (nothing of the stage was forced)",
            StageResult::Incomplete => "INCOMPLETE (the discard did not finish)",
            StageResult::Tampered => "TAMPERED (not the log rea-stage wrote)",
            StageResult::Error => "COULD NOT VERIFY",
        };
        let mut s = format!("{}: discard log: {word}\n", self.log);
        if let Some(run) = &self.run {
            s.push_str(&format!("  run      {run}\n"));
        }
        s.push_str(&format!("  records  {}\n", self.records));
        if let Some(h) = &self.head {
            s.push_str(&format!("  head     {h}\n"));
        }
        for r in &self.refusals {
            s.push_str(&format!("  - refused: {} {}\n", r.code.as_str(), r.detail));
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

/// What one record of a discard log says, for `rea-audit show` (`None`:
/// not one; show prints its seq, time and kind itself).
pub(crate) fn show_line(w: &Wire) -> Option<String> {
    let ev = StageEvent::parse(&w.kind, w.data.get())?.ok()?;
    let what = match &ev {
        StageEvent::Started(s) => format!("stage {} receipt {}", s.stage, s.receipt_sha256),
        StageEvent::Inventoried(i) => {
            let es: Vec<String> = i
                .entries
                .iter()
                .map(|e| format!("{} ({:?}, {} bytes)", e.name, e.kind, e.size))
                .collect();
            format!("{} entries: {}", i.entries.len(), es.join(", "))
        }
        StageEvent::Approved(a) => format!("removing {}", a.plan.join(", ")),
        StageEvent::Removed(r) => format!("removed {:?} {} (inode {})", r.what, r.name, r.ino),
        StageEvent::Decided(d) => {
            let codes: Vec<String> = d.reasons.iter().map(|r| r.code.as_str()).collect();
            format!("{:?} {}", d.outcome, codes.join(", "))
        }
    };
    Some(what)
}
