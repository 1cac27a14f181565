//! The line-level half of verifying a recovery log: every complete line
//! checked on its own and against the one before it (strict parse, the
//! writer's exact encoding, `seq`, one run, genesis, chain, `mono_ns`),
//! and the findings vocabulary the judge ([`super::recover_judge`]) and
//! the verdict ([`super::recover_log`]) share.

use serde::Serialize;

use super::reader::Wire;
use super::record::StagingInventoried;
use super::verdict::Status;
use crate::holders::HolderScan;
use crate::log::chain;
use crate::recover::log::encode;
use crate::recover::record::{Code, Outcome, RecoveryEvent, VERSION};

/// Why the log is not an intact recovery log allowing deletion.
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
    StagingMismatch,
    StagingNotChecked,
    StagingNotRecorded,
    /// A process, mount or loop device holds the stage (the holder scan).
    StageHeld,
    /// The stage could not be scanned for holders.
    HoldersNotScanned,
    /// The stage could not be read within its deadline (a stuck mount).
    StageUnreadable,
}

impl Problem {
    pub fn class(self) -> Status {
        use Problem::*;
        match self {
            EmptyLog | TornLine | NoDecision => Status::Incomplete,
            IoError | NotARegularFile => Status::Error,
            StagingMismatch | StagingNotChecked | StagingNotRecorded | StageHeld
            | HoldersNotScanned | StageUnreadable => Status::Retain,
            _ => Status::Tampered,
        }
    }
}

/// A finding's code: a problem of the log, or a reason the recovery
/// itself recorded (a refusal, or why it is not proven).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum FindingCode {
    Log(Problem),
    Recovery(Code),
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub code: FindingCode,
    pub class: Status,
    pub line: Option<u64>,
    pub detail: String,
}

/// The streaming state of one verification, and what the judge reads.
#[derive(Default)]
pub struct Check {
    pub found: Vec<Finding>,
    pub lines: u64,
    pub run: Option<String>,
    pub prev: Option<String>,
    mono: Option<u64>,
    pub events: Vec<(u64, RecoveryEvent)>,
}

impl Check {
    pub fn push(&mut self, code: Problem, line: Option<u64>, detail: impl Into<String>) {
        self.push_code(FindingCode::Log(code), code.class(), line, detail);
    }

    pub fn push_code(
        &mut self,
        code: FindingCode,
        class: Status,
        line: Option<u64>,
        detail: impl Into<String>,
    ) {
        if self.found.len() < 64 {
            self.found.push(Finding {
                code,
                class,
                line,
                detail: detail.into(),
            });
        }
    }

    pub fn line(&mut self, bytes: &[u8]) {
        self.lines += 1;
        let n = self.lines;
        let prev = self.prev.replace(chain::line_hash(bytes));
        if bytes.contains(&b'\r') || !bytes.starts_with(b"{") {
            let d = "not a JSON object on one line without CR";
            return self.push(Problem::Malformed, Some(n), d);
        }
        let w: Wire = match serde_json::from_slice(bytes) {
            Ok(w) => w,
            Err(e) => return self.push(Problem::Malformed, Some(n), e.to_string()),
        };
        let ev = match RecoveryEvent::parse(&w.kind, w.data.get()) {
            None => {
                let d = format!("kind {:?}", crate::vocab::bounded(&w.kind));
                return self.push(Problem::UnknownKind, Some(n), d);
            }
            Some(Err(e)) => {
                let d = format!("{} data: {e}", w.kind);
                return self.push(Problem::Malformed, Some(n), d);
            }
            Some(Ok(ev)) => ev,
        };
        if w.v != VERSION {
            self.push(Problem::BadVersion, Some(n), format!("v is {}", w.v));
        }
        let ts_ok = chrono::DateTime::parse_from_rfc3339(&w.ts).is_ok() && w.ts.ends_with('Z');
        let canon = encode(&w.run, w.seq, &w.ts, w.mono_ns, &w.prev, &ev).is_ok_and(|c| c == bytes);
        if !canon || !ts_ok || !crate::vocab::is_token(&w.run) {
            let d = "not byte for byte the writer's encoding of this record";
            self.push(Problem::NonCanonical, Some(n), d);
        }
        if w.seq != n - 1 {
            let d = format!("seq {} where {} belongs", w.seq, n - 1);
            self.push(Problem::SeqMismatch, Some(n), d);
        }
        if self.mono.is_some_and(|m| w.mono_ns < m) {
            let d = "mono_ns is before the previous record's";
            self.push(Problem::MonoRegressed, Some(n), d);
        }
        self.mono = Some(w.mono_ns);
        match (&self.run, prev) {
            (None, _) => {
                if w.prev != chain::genesis(&w.run) {
                    let d = "prev of the first record is not the genesis hash of its run";
                    self.push(Problem::GenesisMismatch, Some(n), d);
                }
                self.run = Some(w.run.to_string());
            }
            (Some(run), _) if run.as_str() != w.run => {
                let d = format!("record of run {} in a log of run {run}", w.run);
                self.push(Problem::RunMismatch, Some(n), d);
            }
            (Some(_), p) if p.as_deref() != Some(w.prev.as_ref()) => {
                let d = "prev is not the hash of the line before: the chain is broken here";
                self.push(Problem::PrevMismatch, Some(n), d);
            }
            _ => {}
        }
        // A recovery log holds at most a handful of records.
        if self.events.len() < 64 {
            self.events.push((n, ev));
        } else {
            let d = "more records than any recovery writes";
            self.push(Problem::OutOfOrder, Some(n), d);
        }
    }
}

/// What the judge took from the records.
#[derive(Default)]
pub struct Judged {
    pub outcome: Option<Outcome>,
    pub sealed: bool,
    pub recovered_log: Option<String>,
    pub recovered_run: Option<String>,
    pub recovered_intact_seq: Option<u64>,
    pub recovered_intact_head: Option<String>,
    pub staging: Option<StagingInventoried>,
    /// The holder scan of `--staging`, when it ran.
    pub holders: Option<HolderScan>,
}
