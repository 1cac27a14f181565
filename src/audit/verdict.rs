//! What `rea-audit verify` concludes, and why (docs/verdict.md).

use serde::Serialize;

use crate::holders::{text, HolderScan};
use crate::kinds::watchdog::{Outcome, StagingInventoried, StopReason};

/// The only two answers a controller acts on.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    DeleteAllowed,
    Retain,
}

/// Why the answer is what it is; each has its own exit code.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    DeleteAllowed,
    /// A sealed, intact log whose receipt or staging does not allow deletion.
    Retain,
    /// Torn last line, no receipt: the watchdog did not finish.
    Incomplete,
    /// The log is not what the watchdog wrote.
    Tampered,
    /// The log could not be read, or the command line was wrong.
    Error,
}

impl Status {
    /// `rea-audit verify` exit codes (documented in docs/verdict.md and `--help`).
    pub fn exit_code(self) -> i32 {
        match self {
            Status::DeleteAllowed => 0,
            Status::Retain => 1,
            Status::Incomplete => 2,
            Status::Tampered => 3,
            Status::Error => 4,
        }
    }
}

/// Every reason `verify` can give. The class of each decides the status.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    // The bytes are not a log the writer could have produced.
    Bom,
    CarriageReturn,
    InvalidUtf8,
    LineTooLong,
    MalformedJson,
    UnknownField,
    DuplicateKey,
    Float,
    BadField,
    UnknownKind,
    BadVersion,
    BadTimestamp,
    // The chain and the structure.
    SeqMismatch,
    PrevMismatch,
    GenesisMismatch,
    RunMismatch,
    FirstNotRunStarted,
    DuplicateReceipt,
    RecordAfterReceipt,
    HeadMismatch,
    ExpectRunMismatch,
    ReplayMismatch,
    // What a consistent writer always produces (docs/verdict.md).
    NonCanonical,
    MonoRegressed,
    BadDigest,
    ForeignUid,
    LeaderNotSession,
    StopNotCompleted,
    StopInClosedLog,
    SweepWithoutTrigger,
    // The watchdog did not finish.
    EmptyLog,
    TornLine,
    NoReceipt,
    // Sealed and intact, but deletion is not safe.
    NotQuiescent,
    UncertainMappings,
    /// A process the action did not start was in its group (drafted in):
    /// left alive, so the action's end is not proven its own.
    ForeignMember,
    /// A process could neither be ended nor reaped within the bounds (a
    /// tracee of an outside tracer, one stuck in a file system): the
    /// watchdog sealed without it.
    Unkillable,
    TempRootNotRemoved,
    RootLost,
    Hangup,
    AuditFailure,
    StagingMismatch,
    StagingNotRecorded,
    StagingNotChecked,
    /// A process, mount or loop device holds the stage (the holder scan).
    StageHeld,
    /// The stage could not be scanned for holders.
    HoldersNotScanned,
    /// The stage (or a mount under it) could not be read within its
    /// deadline, at close or now: its helper is named in the detail.
    StageUnreadable,
    /// The stage at close is not its baseline at start: an entry was
    /// added, removed, replaced or changed during the run (each named).
    StageChangedDuringRun,
    /// A run with a stage but no baseline of it: nothing shows the stage
    /// did not change during the run.
    StageBaselineMissing,
    /// The watchdog refused to start (nothing launched): the stage is not
    /// what its before-transfer receipt pins.
    StageNotAsUploaded,
    /// The watchdog refused to start (nothing launched): the stage could
    /// not be armed or walked.
    StageRefused,
    /// The stage's content at start is not the `--expect-stage-digest`
    /// the controller pinned for what it uploaded.
    StageDigestMismatch,
    /// The watchdog's state directory inside the stage was not removed at
    /// close (docs/stage.md, "The watchdog's own place").
    PrivateStateKept,
    /// The watchdog's own files in the stage are not as close left them:
    /// its state directory is back, or its log's path holds another file.
    PrivateStateChanged,
    // Could not look.
    IoError,
    NotARegularFile,
}

impl From<crate::log::Fault> for Code {
    /// A fault of the chain rule, as `verify` names it.
    fn from(f: crate::log::Fault) -> Code {
        use crate::log::Fault as F;
        match f {
            F::LineTooLong => Code::LineTooLong,
            F::CarriageReturn => Code::CarriageReturn,
            F::InvalidUtf8 => Code::InvalidUtf8,
            F::MalformedJson => Code::MalformedJson,
            F::UnknownField => Code::UnknownField,
            F::DuplicateKey => Code::DuplicateKey,
            F::Float => Code::Float,
            F::BadField => Code::BadField,
            F::UnknownKind => Code::UnknownKind,
            F::BadTimestamp => Code::BadTimestamp,
            F::BadVersion => Code::BadVersion,
            F::NonCanonical => Code::NonCanonical,
            F::SeqMismatch => Code::SeqMismatch,
            F::MonoRegressed => Code::MonoRegressed,
            F::GenesisMismatch => Code::GenesisMismatch,
            F::RunMismatch => Code::RunMismatch,
            F::PrevMismatch => Code::PrevMismatch,
        }
    }
}

impl Code {
    pub fn class(self) -> Status {
        use Code::*;
        match self {
            Bom | CarriageReturn | InvalidUtf8 | LineTooLong | MalformedJson | UnknownField
            | DuplicateKey | Float | BadField | UnknownKind | BadVersion | BadTimestamp
            | SeqMismatch | PrevMismatch | GenesisMismatch | RunMismatch | FirstNotRunStarted
            | DuplicateReceipt | RecordAfterReceipt | HeadMismatch | ExpectRunMismatch
            | ReplayMismatch | NonCanonical | MonoRegressed | BadDigest | ForeignUid
            | LeaderNotSession | StopNotCompleted | StopInClosedLog | SweepWithoutTrigger => {
                Status::Tampered
            }
            EmptyLog | TornLine | NoReceipt => Status::Incomplete,
            NotQuiescent
            | UncertainMappings
            | ForeignMember
            | Unkillable
            | TempRootNotRemoved
            | RootLost
            | Hangup
            | AuditFailure
            | StagingMismatch
            | StagingNotRecorded
            | StagingNotChecked
            | StageHeld
            | HoldersNotScanned
            | StageUnreadable
            | StageChangedDuringRun
            | StageBaselineMissing
            | StageNotAsUploaded
            | StageRefused
            | StageDigestMismatch
            | PrivateStateKept
            | PrivateStateChanged => Status::Retain,
            IoError | NotARegularFile => Status::Error,
        }
    }

    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    pub code: Code,
    pub class: Status,
    /// 1-based line number, where the reason belongs to one line.
    pub line: Option<u64>,
    pub detail: String,
}

impl Reason {
    pub fn new(code: Code, line: Option<u64>, detail: impl Into<String>) -> Reason {
        Reason {
            code,
            class: code.class(),
            line,
            detail: detail.into(),
        }
    }
}

/// The verdict object printed by `verify --json` (schema: audit-schema/verdict.schema.json).
#[derive(Serialize, Clone, Debug)]
pub struct Verdict {
    pub verdict: Decision,
    pub status: Status,
    pub exit_code: i32,
    pub log: String,
    pub run: Option<String>,
    pub records: u64,
    /// SHA-256 of the last complete line: what a controller pins.
    pub head: Option<String>,
    pub sealed: bool,
    pub outcome: Option<Outcome>,
    pub stop_reason: Option<StopReason>,
    /// The exact staging directory a `delete_allowed` applies to, if any.
    pub staging: Option<StagingInventoried>,
    /// The holder scan of `--staging`, when it ran (its unreadable
    /// processes are named here, not as reasons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<HolderScan>,
    pub reasons: Vec<Reason>,
}

impl Verdict {
    /// Status is the worst class among the reasons; no reason means allowed.
    pub fn finish(mut self) -> Verdict {
        self.status = self
            .reasons
            .iter()
            .map(|r| r.class)
            .max()
            .unwrap_or(Status::DeleteAllowed);
        self.verdict = if self.status == Status::DeleteAllowed {
            Decision::DeleteAllowed
        } else {
            Decision::Retain
        };
        self.exit_code = self.status.exit_code();
        self
    }

    pub fn empty(log: &str) -> Verdict {
        Verdict {
            verdict: Decision::Retain,
            status: Status::Error,
            exit_code: Status::Error.exit_code(),
            log: log.to_string(),
            run: None,
            records: 0,
            head: None,
            sealed: false,
            outcome: None,
            stop_reason: None,
            staging: None,
            holders: None,
            reasons: Vec::new(),
        }
    }

    pub fn has(&self, code: Code) -> bool {
        self.reasons.iter().any(|r| r.code == code)
    }

    /// A short summary for people (what `verify` prints without `--json`),
    /// control characters escaped ([`super::people::escape`]).
    pub fn human(&self) -> String {
        self.human_raw()
            .lines()
            .map(|l| super::people::escape(l) + "\n")
            .collect()
    }

    fn human_raw(&self) -> String {
        let mut s = String::new();
        let status = match self.status {
            Status::DeleteAllowed => "DELETE ALLOWED",
            Status::Retain => "RETAIN",
            Status::Incomplete => "RETAIN (incomplete log)",
            Status::Tampered => "RETAIN (log tampered)",
            Status::Error => "RETAIN (could not verify)",
        };
        s.push_str(&format!("{}: {status}\n", self.log));
        if let Some(run) = &self.run {
            s.push_str(&format!("  run      {run}\n"));
        }
        s.push_str(&format!(
            "  records  {}{}\n",
            self.records,
            if self.sealed {
                ", sealed by a receipt"
            } else {
                ""
            }
        ));
        if let Some(head) = &self.head {
            s.push_str(&format!("  head     {head}\n"));
        }
        if let Some(o) = self.outcome {
            let o = match o {
                Outcome::Closed => "closed".to_string(),
                Outcome::Stopped => format!(
                    "stopped ({})",
                    self.stop_reason.map(StopReason::as_str).unwrap_or("?")
                ),
            };
            s.push_str(&format!("  outcome  {o}\n"));
        }
        if let Some(st) = &self.staging {
            s.push_str(&format!("  staging  {}\n", st.identity.path));
            for e in &st.special {
                s.push_str(&format!("           {} {}\n", e.kind, e.path));
            }
            if st.special_truncated {
                s.push_str("           ... (more sockets, FIFOs or devices)\n");
            }
        }
        if let Some(h) = &self.holders {
            s.push_str(&holders_lines(h));
        }
        for r in &self.reasons {
            let line = r.line.map(|l| format!("line {l}: ")).unwrap_or_default();
            s.push_str(&format!(
                "  - {} [{}] {line}{}\n",
                r.code.as_str(),
                class_name(r.class),
                r.detail
            ));
        }
        s
    }
}

/// The holder scan's summary line, and each process it could not read.
pub fn holders_lines(h: &HolderScan) -> String {
    let held = h.holders_total + h.mounts_total + h.loops_total;
    let mut s = format!(
        "  holders  {} ({} processes, {} mount namespaces, {} ms)\n",
        if held == 0 { "none" } else { "HELD" },
        h.processes,
        h.mount_namespaces,
        h.elapsed_us / 1000
    );
    for u in &h.unreadable {
        s.push_str(&format!(
            "           not readable: {}\n",
            text::unreadable(u)
        ));
    }
    let more = h.unreadable_total.saturating_sub(h.unreadable.len() as u64);
    if more > 0 {
        s.push_str(&format!("           ... and {more} more not readable\n"));
    }
    s
}

fn class_name(s: Status) -> &'static str {
    match s {
        Status::DeleteAllowed => "ok",
        Status::Retain => "retain",
        Status::Incomplete => "incomplete",
        Status::Tampered => "tampered",
        Status::Error => "error",
    }
}
