//! `rea-audit verify`: chain, structure, replay, then the verdict table.

use std::path::{Path, PathBuf};

use super::chain;
use super::reader::{parse_line, split_lines, Record};
use super::record::{Event, Outcome, Receipt, StopReason, RECORD_VERSION};
use super::replay::replay;
use super::verdict::{Code, Reason, Status, Verdict};
use crate::inventory;

const BOM: &[u8] = b"\xef\xbb\xbf";
/// Reasons reported per log before the rest are summarised in one line.
const MAX_REASONS: usize = 64;

#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    pub expect_head: Option<String>,
    pub expect_run: Option<String>,
    pub staging: Option<PathBuf>,
}

/// Verifies the log at `path`. Never fails: an unreadable log is a verdict.
pub fn verify_file(path: &Path, opts: &VerifyOptions) -> Verdict {
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(data) => verify_bytes(&data, &name, opts),
        Err(e) => {
            let mut v = Verdict::empty(&name);
            v.reasons.push(Reason::new(
                Code::IoError,
                None,
                format!("cannot read the log: {e}"),
            ));
            v.finish()
        }
    }
}

struct Reasons(Vec<Reason>, usize);

impl Reasons {
    fn push(&mut self, code: Code, line: Option<u64>, detail: impl Into<String>) {
        if self.0.len() < MAX_REASONS {
            self.0.push(Reason::new(code, line, detail));
        } else {
            self.1 += 1;
        }
    }
}

pub fn verify_bytes(data: &[u8], name: &str, opts: &VerifyOptions) -> Verdict {
    let mut v = Verdict::empty(name);
    let mut rs = Reasons(Vec::new(), 0);
    if data.is_empty() {
        rs.push(
            Code::EmptyLog,
            None,
            "the log is empty: no record was ever made durable",
        );
        v.reasons = rs.0;
        return v.finish();
    }
    if data.starts_with(BOM) {
        rs.push(
            Code::Bom,
            Some(1),
            "byte order mark: the writer never produces one",
        );
        v.reasons = rs.0;
        return v.finish();
    }

    let (lines, torn) = split_lines(data);
    let records = check_lines(&lines, &mut rs);
    let has_receipt = records.iter().any(|r| matches!(r.event, Event::Receipt(_)));
    if let Some(t) = torn {
        if has_receipt {
            // The watchdog writes nothing after its receipt, so these bytes
            // are not a write it failed to finish: someone else appended them.
            rs.push(
                Code::RecordAfterReceipt,
                Some(lines.len() as u64 + 1),
                format!(
                    "{} bytes without a newline after the receipt (the watchdog never writes after it)",
                    t.len()
                ),
            );
        } else {
            rs.push(
                Code::TornLine,
                Some(lines.len() as u64 + 1),
                format!(
                    "{} bytes after the last newline (a write that did not finish)",
                    t.len()
                ),
            );
        }
    }
    v.records = lines.len() as u64;
    v.head = lines.last().map(|l| chain::line_hash(l));
    v.run = records.first().map(|r| r.run.clone());

    if let (Some(want), Some(run)) = (&opts.expect_run, &v.run) {
        if want != run {
            rs.push(
                Code::ExpectRunMismatch,
                None,
                format!("log is of run {run}, expected {want}"),
            );
        }
    }
    if let Some(want) = &opts.expect_head {
        match &v.head {
            Some(h) if h == want => {}
            h => rs.push(
                Code::HeadMismatch,
                None,
                format!(
                    "head is {}, pinned {want}",
                    h.as_deref().unwrap_or("(none)")
                ),
            ),
        }
    }

    let receipt = match records.last().map(|r| &r.event) {
        Some(Event::Receipt(rc)) if records.len() == lines.len() => Some(rc.clone()),
        _ => None,
    };
    if !has_receipt {
        rs.push(
            Code::NoReceipt,
            None,
            "no receipt: the watchdog did not finish (lost, killed, or the log was cut)",
        );
    }
    v.sealed = receipt.is_some() && torn.is_none();

    let tampered = rs.0.iter().any(|r| r.class == Status::Tampered);
    if let (Some(rc), false) = (&receipt, tampered) {
        for r in replay(&records, rc) {
            rs.push(r.code, r.line, r.detail);
        }
        v.outcome = Some(rc.outcome);
        v.stop_reason = rc.stop_reason;
        v.staging = rc.staging.clone();
        judge(&records, rc, opts, &mut rs);
    }
    if rs.1 > 0 {
        let more = rs.1;
        rs.0.push(Reason::new(
            rs.0[MAX_REASONS - 1].code,
            None,
            format!("... and {more} more"),
        ));
    }
    v.reasons = rs.0;
    v.finish()
}

/// Per-line checks: parse, sequence, run, chain, receipt position.
fn check_lines(lines: &[&[u8]], rs: &mut Reasons) -> Vec<Record> {
    let mut records = Vec::with_capacity(lines.len());
    let mut run: Option<String> = None;
    let mut prev_hash: Option<String> = None;
    let mut receipt_line: Option<u64> = None;
    for (i, line) in lines.iter().enumerate() {
        let n = i as u64 + 1;
        let hash = chain::line_hash(line);
        match parse_line(line) {
            Err(e) => rs.push(e.code, Some(n), e.detail),
            Ok(rec) => {
                if rec.v != RECORD_VERSION {
                    rs.push(Code::BadVersion, Some(n), format!("v is {}", rec.v));
                }
                if rec.seq != i as u64 {
                    rs.push(
                        Code::SeqMismatch,
                        Some(n),
                        format!("seq {} where {i} belongs", rec.seq),
                    );
                }
                let run = run.get_or_insert_with(|| rec.run.clone());
                if i == 0 {
                    if rec.prev != chain::genesis(&rec.run) {
                        rs.push(
                            Code::GenesisMismatch,
                            Some(n),
                            "prev of the first record is not the genesis hash of its run",
                        );
                    }
                    if !matches!(rec.event, Event::RunStarted(_)) {
                        rs.push(
                            Code::FirstNotRunStarted,
                            Some(n),
                            format!("first record is {}", rec.event.kind()),
                        );
                    }
                } else if &rec.run != run {
                    rs.push(
                        Code::RunMismatch,
                        Some(n),
                        format!("record of run {} in a log of run {run}", rec.run),
                    );
                } else if Some(&rec.prev) != prev_hash.as_ref() {
                    rs.push(
                        Code::PrevMismatch,
                        Some(n),
                        "prev is not the hash of the line before: the chain is broken here",
                    );
                }
                match (receipt_line, &rec.event) {
                    (Some(r), Event::Receipt(_)) => rs.push(
                        Code::DuplicateReceipt,
                        Some(n),
                        format!("a second receipt (the first is on line {r})"),
                    ),
                    (Some(r), ev) => rs.push(
                        Code::RecordAfterReceipt,
                        Some(n),
                        format!("{} after the receipt on line {r}", ev.kind()),
                    ),
                    (None, Event::Receipt(_)) => receipt_line = Some(n),
                    (None, _) => {}
                }
                records.push(rec);
            }
        }
        prev_hash = Some(hash);
    }
    records
}

/// The verdict table (SPEC 5) for an intact, sealed log.
fn judge(records: &[Record], rc: &Receipt, opts: &VerifyOptions, rs: &mut Reasons) {
    let stopped_for = |reason| rc.outcome == Outcome::Stopped && rc.stop_reason == Some(reason);
    let audit_failed = stopped_for(StopReason::AuditFailure)
        || records.iter().any(
            |r| matches!(&r.event, Event::StopTriggered(t) if t.reason == StopReason::AuditFailure),
        );
    if audit_failed {
        rs.push(
            Code::AuditFailure,
            None,
            "a record could not be made durable during the action",
        );
    }
    if !rc.quiescent || !rc.no_live_or_waitable_descendants {
        rs.push(
            Code::NotQuiescent,
            None,
            "the receipt does not prove that no descendant is alive or waitable",
        );
    }
    if rc.uncertain_mappings > 0 {
        rs.push(
            Code::UncertainMappings,
            None,
            format!(
                "{} descendant(s) could not be proven to be the process scanned",
                rc.uncertain_mappings
            ),
        );
    }
    if !rc.temp_root_removed {
        rs.push(
            Code::TempRootNotRemoved,
            None,
            "the private temp root was not removed",
        );
    }
    if stopped_for(StopReason::MappingRefused) && rc.uncertain_mappings == 0 {
        // Not a reason the table lets through: the stop itself says a
        // descendant could not be proven, whatever the count claims.
        rs.push(
            Code::UncertainMappings,
            None,
            "the action stopped because a descendant could not be proven (mapping_refused)",
        );
    }
    // The controller may die after another trigger started the stop (say,
    // during the TERM grace): its root_lost is then a later trigger, and
    // its intent is just as unknown.
    let root_lost = stopped_for(StopReason::RootLost)
        || records.iter().any(
            |r| matches!(&r.event, Event::StopTriggered(t) if t.reason == StopReason::RootLost),
        );
    if root_lost {
        rs.push(
            Code::RootLost,
            None,
            "the controller died during the action; its intent is unknown, so keep the stage",
        );
    }
    let start_staging = records.first().and_then(|r| match &r.event {
        Event::RunStarted(s) => s.staging.clone(),
        _ => None,
    });
    if let (Some(at_start), Some(sealed)) = (&start_staging, &rc.staging) {
        if !inventory::same_dir(at_start, &sealed.identity) {
            rs.push(
                Code::StagingMismatch,
                None,
                "the staging directory was replaced during the action (identity at close differs from start)",
            );
        }
    }
    match (&opts.staging, &rc.staging) {
        (Some(path), None) => rs.push(
            Code::StagingNotRecorded,
            None,
            format!("--staging {} given, but this run recorded no staging directory", path.display()),
        ),
        (Some(path), Some(sealed)) => match (inventory::dir_identity(path), inventory::inventory(path)) {
            (Ok(id), Ok(inv)) => {
                if !inventory::same_dir(&id, &sealed.identity) {
                    rs.push(
                        Code::StagingMismatch,
                        None,
                        format!(
                            "{} is not the staging directory of this run (dev/ino/uid/mode differ)",
                            path.display()
                        ),
                    );
                } else if inv != sealed.inventory {
                    rs.push(
                        Code::StagingMismatch,
                        None,
                        format!("{} changed since the receipt (inventory differs)", path.display()),
                    );
                }
            }
            (Err(e), _) | (_, Err(e)) => rs.push(
                Code::StagingMismatch,
                None,
                format!("cannot inventory {}: {e}", path.display()),
            ),
        },
        (None, Some(_)) if rc.outcome == Outcome::Stopped => rs.push(
            Code::StagingNotChecked,
            None,
            "the action was stopped: deletion is allowed only for the exact stage; pass --staging DIR",
        ),
        (None, _) => {}
    }
}
