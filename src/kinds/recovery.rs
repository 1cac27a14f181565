//! The records of a recovery log (`rea-watchdog recover`, docs/containment.md): typed,
//! closed (`deny_unknown_fields`), no floats, and kinds of their own, so
//! `rea-audit verify` tells a recovery log from a watchdog's log and a
//! discard log by its first record.
//!
//! Order: `recovery_started` (what LOG shows: its run, last intact seq and
//! head, seal, watchdog, containment), `recovery_checked` (what was found
//! now: the watchdog's liveness, the group's directory), then either
//! `recovery_decided` (refused) at once, or `recovery_members` (the
//! frozen group's census, each member checked against the run; made
//! durable before `cgroup.kill`), then `recovery_decided` (refused: a
//! member is not the action's, or the group did not freeze) or
//! `recovery_killed`,
//! `recovery_group_removed`, `recovery_staging` (when a stage is known),
//! `recovery_scan`, and `recovery_decided` last.

use serde::{Deserialize, Serialize};

use crate::json_error::JsonError;
use crate::kinds::group::CheckedMember;
use crate::kinds::watchdog::{
    Containment, DirIdentity, GroupIdentity, GroupMember, GroupSeen, Ident, StagingInventoried,
};
use crate::process::alive::Liveness;

/// `v` of every record.
pub const VERSION: u32 = 1;

/// Why a recovery was refused (nothing was killed), or why one that ran
/// is not proven. Refusals are listed in the order they are checked.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// LOG could not be opened or read (not a regular file, I/O).
    LogUnreadable,
    /// LOG's chain is broken or a record is not the writer's (a torn last
    /// line or a missing receipt is not this: the watchdog died).
    LogTampered,
    /// LOG has its receipt: the watchdog finished; nothing to recover.
    LogSealed,
    /// LOG has no readable `run_started`: its watchdog cannot be named.
    NoRunStarted,
    /// LOG's watchdog (pid and start time) is alive: it owns its action.
    WatchdogAlive,
    /// Whether LOG's watchdog is alive cannot be told.
    WatchdogUnknown,
    /// LOG's action ran without a cgroup: there is nothing to kill
    /// through; `rea-audit reconcile` says what may be alive.
    NoGroup,
    /// The recorded group no longer exists.
    GroupGone,
    /// The recorded group's name now names another directory.
    GroupRecreated,
    /// The recorded group could not be looked at.
    GroupUnreachable,
    /// This very process is in the group (`cgroup.kill` would end it).
    RecovererInGroup,
    /// NEW already exists (never overwritten; not recorded).
    NewLogExists,
    /// NEW would be inside the stage (not created; not recorded).
    NewLogInStage,
    /// The group could not be frozen (`cgroup.freeze` unwritable, or no
    /// `frozen 1` within the bound): its census would not be a proof.
    FreezeFailed,
    /// Members of the frozen group could not be checked (`cgroup.procs`
    /// unreadable, or members outside this PID namespace).
    MembersUnproven,
    /// A member of the frozen group is not the action's: it started
    /// before the run's watchdog, or its environment lacks the run's
    /// `REA_RUN_ID` (or cannot be read). Membership is not ownership.
    ForeignMember,
    /// `cgroup.kill` could not be written.
    KillFailed,
    /// The group was still populated when the wait ran out.
    StillPopulated,
    /// The group could not be removed.
    GroupNotRemoved,
    /// The scan for processes carrying the run's `REA_RUN_ID` failed.
    ScanFailed,
    /// Live processes outside the group still carry the run's `REA_RUN_ID`.
    RunProcessesLeft,
}

impl Code {
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    pub code: Code,
    pub detail: String,
}

/// What LOG shows, read once, strictly (the chain as `reconcile` checks
/// it, and `verify`'s per-line rules on the same open file).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryStarted {
    pub version: String,
    /// LOG, made absolute.
    pub log: String,
    /// Why LOG could not be read at all (then every `log_*` is empty).
    pub log_error: Option<String>,
    pub log_run: Option<String>,
    /// Complete lines.
    pub log_records: u64,
    /// `seq` of the last record the chain vouches for.
    pub log_intact_seq: Option<u64>,
    /// SHA-256 of that record's line: LOG's last intact head.
    pub log_intact_head: Option<String>,
    pub log_torn_tail_bytes: u64,
    pub log_sealed: bool,
    /// Why LOG's chain is not trusted (`null`: it holds).
    pub log_tampered: Option<String>,
    /// LOG's watchdog, from `run_started`.
    pub watchdog: Option<Ident>,
    /// LOG's `containment` record.
    pub containment: Option<Containment>,
    /// The stage inventoried at the end: `--staging`, else the one LOG
    /// recorded (absolute).
    pub staging: Option<String>,
    /// Whether `staging` came from `--staging`.
    pub staging_given: bool,
    /// The stage's identity in LOG's `run_started`.
    pub staging_recorded: Option<DirIdentity>,
    pub uid: u32,
    pub pid: u32,
}

impl RecoveryStarted {
    /// The group LOG recorded, when its action ran in cgroup mode.
    pub fn group(&self) -> Option<&GroupIdentity> {
        self.containment.as_ref().and_then(|c| c.group.as_ref())
    }
}

/// LOG's watchdog probed by (pid, start time).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WatchdogSeen {
    pub state: Liveness,
    pub detail: String,
}

/// What was found now. A fact is only gathered once the checks before it
/// passed (`null` otherwise): the watchdog is probed once LOG's own checks
/// pass, the group looked up once the watchdog is gone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryChecked {
    pub watchdog: Option<WatchdogSeen>,
    pub group: Option<GroupSeen>,
    /// This process's pid is in the group's `cgroup.procs`.
    pub recoverer_in_group: Option<bool>,
}

/// `cgroup.freeze` 1 written to the group and `frozen 1` awaited: while
/// frozen no member runs or forks, and a process drafted into the group
/// after the census stays frozen in it, so the census is what the kill
/// would reach, apart from what is written into `cgroup.procs` meanwhile
/// (the window is the checks' few milliseconds, not the recovery's).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryFreeze {
    /// `frozen 1` was seen in `cgroup.events` within the bound.
    pub frozen: bool,
    pub waited_ms: u64,
    pub wait_limit_ms: u64,
    /// Why `cgroup.freeze` or `cgroup.events` could not be used.
    pub error: Option<String>,
}

/// The frozen group's members, each checked against the run (made
/// durable before `cgroup.kill`, and before a refusal that names them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryMembers {
    pub group: GroupIdentity,
    pub freeze: RecoveryFreeze,
    pub populated: Option<bool>,
    pub members: Vec<CheckedMember>,
    pub members_not_listed: u64,
    /// Members beyond the listing that are not the action's (counted).
    pub members_not_listed_foreign: u64,
    pub members_not_visible: u64,
    /// Why `cgroup.procs` or `cgroup.events` could not be read.
    pub error: Option<String>,
}

/// `cgroup.kill` written (or why not), and `populated` after the wait.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryKilled {
    pub kill_error: Option<String>,
    /// `populated` of `cgroup.events` when the wait ended (`null`: unreadable).
    pub populated: Option<bool>,
    pub waited_ms: u64,
    pub wait_limit_ms: u64,
    /// Who was still in the group when the wait ran out.
    pub members_left: Vec<GroupMember>,
    pub members_left_not_listed: u64,
}

/// The group's `rmdir` (attempted only once it is not populated).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryGroupRemoved {
    pub group: GroupIdentity,
    pub removed: bool,
    pub detail: String,
}

/// The stage's inventory after the group is gone (the watchdog's own
/// staging inventory: identity, every entry, regular files' bytes).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryStaging {
    pub path: String,
    pub staging: Option<StagingInventoried>,
    pub error: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScanProc {
    pub pid: i32,
    pub start_time: u64,
    pub comm: String,
}

/// Live processes still carrying LOG's `REA_RUN_ID` after the group is
/// gone (every job process inherits it: one outside the group left it
/// somehow). A hint, not a proof; any at all means not recovered.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryScan {
    pub run: String,
    pub processes: Vec<ScanProc>,
    pub processes_not_listed: u64,
    pub error: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The group was emptied and removed, nothing of the run is left.
    Recovered,
    /// The recovery ran but is not proven (see the reasons).
    Failed,
    /// A check failed; nothing was killed.
    Refused,
}

/// The last record.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RecoveryDecided {
    pub outcome: Outcome,
    /// Empty exactly when recovered; one refusal when refused.
    pub reasons: Vec<Reason>,
}

macro_rules! recovery_events {
    ($($variant:ident($ty:ident) = $name:literal,)*) => {
        /// One record of a recovery log.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum RecoveryEvent { $($variant($ty),)* }

        /// Every kind, in order of appearance.
        pub const KINDS: &[&str] = &[$($name,)*];

        impl RecoveryEvent {
            pub fn kind(&self) -> &'static str {
                match self { $(RecoveryEvent::$variant(_) => $name,)* }
            }

            /// Typed parse of `data` for `kind`; `None` for a kind not of this log.
            pub fn parse(kind: &str, data: &str) -> Option<Result<RecoveryEvent, JsonError>> {
                match kind {
                    $($name => Some(crate::json_error::from_str::<$ty>(data).map(RecoveryEvent::$variant)),)*
                    _ => None,
                }
            }
        }

        impl Serialize for RecoveryEvent {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self { $(RecoveryEvent::$variant(d) => d.serialize(s),)* }
            }
        }
    };
}

recovery_events! {
    Started(RecoveryStarted) = "recovery_started",
    Checked(RecoveryChecked) = "recovery_checked",
    Members(RecoveryMembers) = "recovery_members",
    Killed(RecoveryKilled) = "recovery_killed",
    GroupRemoved(RecoveryGroupRemoved) = "recovery_group_removed",
    Staging(RecoveryStaging) = "recovery_staging",
    Scan(RecoveryScan) = "recovery_scan",
    Decided(RecoveryDecided) = "recovery_decided",
}
