//! What `rea-audit reconcile` reports (docs/containment.md): the outcome,
//! each part of what is known (the log, the watchdog, the processes, the
//! stage, the group) and the reasons a person must read. The report is
//! printed as JSON or as text (`text.rs`); these are its fields.

use serde::Serialize;

use super::dirs::{StagePart, StateDirPart};
use super::env::EnvProc;
use super::group::GroupPart;
use super::log::{Break, Named};
use crate::audit::verdict::{Decision, Reason, Status};
use crate::holders::HolderScan;
use crate::kinds::watchdog::{Containment, Mode, Outcome as RunOutcome, StartRefused, StopReason};
use crate::process::alive::Probe;

/// The one answer.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Sealed, `verify` says `delete_allowed`, nothing named is alive.
    DeleteAllowed,
    /// The watchdog is alive and the log not sealed: wait, or ask it to
    /// close. Or the action's cgroup still has live members: with the
    /// watchdog gone, `rea-watchdog recover` ends them (docs/containment.md).
    Running,
    /// Anything else: each reason is named with what to check.
    Review,
}

/// Exit status for a log that could not be read, or a bad command line
/// (verify's `error` code, the same meaning).
pub const EXIT_ERROR: i32 = 4;

impl Outcome {
    /// Distinct from verify's 1, 2 and 3 (retain, incomplete, tampered).
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::DeleteAllowed => 0,
            Outcome::Running => 5,
            Outcome::Review => 6,
        }
    }
}

/// Why the outcome is not `delete_allowed`.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RCode {
    NoRunStarted,
    Tampered,
    TornTail,
    NoReceipt,
    WatchdogLost,
    WatchdogUnknown,
    VerifyRetain,
    ProcessesAlive,
    RunProcessesAlive,
    LivenessUnknown,
    StageDiffers,
    StageNotChecked,
    StageNotRecorded,
    StateDirDiffers,
    /// The action's cgroup has live members and no watchdog owns them.
    GroupMembersAlive,
    /// The recorded group no longer exists (and the log is not sealed).
    GroupGone,
    /// The recorded group's name now names another directory.
    GroupRecreated,
    /// A process, mount or loop device holds the stage (the holder scan).
    StageHeld,
    /// The recorded group could not be looked at.
    GroupUnknown,
    /// The watchdog refused to start after opening its log: nothing was
    /// launched, and the stage is kept for a person to see why.
    StartRefused,
}

#[derive(Serialize, Clone, Debug)]
pub struct RReason {
    pub code: RCode,
    pub detail: String,
    /// What a person must check.
    pub check: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct LogPart {
    pub path: String,
    pub run: Option<String>,
    pub records: u64,
    pub intact_through: u64,
    pub chain_break: Option<Break>,
    pub sealed: bool,
    /// Bytes after the last newline.
    pub torn_tail_bytes: u64,
    pub head: Option<String>,
    pub outcome: Option<RunOutcome>,
    pub stop_reason: Option<StopReason>,
    /// The trigger that started a stop, even without a receipt.
    pub first_stop: Option<StopReason>,
    pub stop_completed: bool,
    /// The log ends in `start_refused`: nothing was launched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_refused: Option<StartRefused>,
}

#[derive(Serialize, Clone, Debug)]
pub struct WatchdogPart {
    pub pid: i32,
    pub start_time: u64,
    pub uid: u32,
    pub mode: Mode,
    pub state_dir: String,
    pub liveness: Probe,
}

#[derive(Serialize, Clone, Debug)]
pub struct ProcPart {
    #[serde(flatten)]
    pub named: Named,
    pub liveness: Probe,
    /// For an alive process: commands that show what it is.
    pub check: Option<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Unnamed {
    /// Processes the log never named may be alive (no receipt: deeper
    /// descendants of a lost watchdog are not in any record).
    pub may_exist: bool,
    pub detail: String,
    /// Live processes whose environment carries `REA_RUN_ID=<run>` (every
    /// job process inherits it; a hint, since a process can change it).
    pub by_environment: Vec<EnvProc>,
    pub scan_error: Option<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct VerifySummary {
    pub verdict: Decision,
    pub status: Status,
    pub exit_code: i32,
    pub reasons: Vec<Reason>,
}

/// The whole report (`--json`; audit-schema/reconcile.schema.json).
#[derive(Serialize, Clone, Debug)]
pub struct Report {
    pub outcome: Outcome,
    pub exit_code: i32,
    pub log: LogPart,
    pub watchdog: Option<WatchdogPart>,
    pub processes: Vec<ProcPart>,
    /// Distinct processes named beyond the listing cap.
    pub processes_not_listed: u64,
    pub unnamed: Unnamed,
    pub state_dir: StateDirPart,
    pub stage: StagePart,
    /// The log's `containment` record (`null`: the log has none).
    pub containment: Option<Containment>,
    /// The recorded cgroup and its members now (cgroup mode only).
    pub group: Option<GroupPart>,
    /// `rea-watchdog recover ...` for this log, when it recorded a group
    /// and is not sealed (`NEW` is left for the operator to choose).
    pub recover_command: Option<String>,
    pub verify: VerifySummary,
    /// The holder scan of `--staging` (`null`: not given, or not this run's).
    pub holders: Option<HolderScan>,
    pub reasons: Vec<RReason>,
}
