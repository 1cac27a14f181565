//! The line-level half of verifying a recovery log: every complete line
//! checked on its own and against the one before it (strict parse, the
//! writer's exact encoding, `seq`, one run, genesis, chain, `mono_ns`),
//! and the findings vocabulary the judge ([`super::judge`]) and
//! the verdict ([`super::log`]) share.

use serde::Serialize;

use crate::audit::verdict::Status;
use crate::holders::HolderScan;
use crate::kinds::recovery::{Code, Outcome, RecoveryEvent};
use crate::kinds::watchdog::StagingInventoried;

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

coarse_faults!(Problem);

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
    /// The chain rule, line by line (lines, run, head).
    pub chain: crate::log::Chain,
    pub events: Vec<(u64, RecoveryEvent)>,
}

/// Adds a finding of the log (at most 64 are kept).
fn push_found(found: &mut Vec<Finding>, code: Problem, line: Option<u64>, detail: String) {
    if found.len() < 64 {
        found.push(Finding {
            code: FindingCode::Log(code),
            class: code.class(),
            line,
            detail,
        });
    }
}

impl Check {
    pub fn push(&mut self, code: Problem, line: Option<u64>, detail: impl Into<String>) {
        push_found(&mut self.found, code, line, detail.into());
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
        let found = &mut self.found;
        let (n, rec) = self.chain.line::<RecoveryEvent>(bytes, &mut |f| {
            push_found(found, Problem::from(f.fault), Some(f.line), f.detail)
        });
        let Some(rec) = rec else {
            return;
        };
        // A recovery log holds at most a handful of records.
        if self.events.len() < 64 {
            self.events.push((n, rec.event));
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
