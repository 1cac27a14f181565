//! Containment records (docs/containment.md): what the action runs in, the group's
//! `cgroup.kill`, its removal at close, and a member that is not the
//! action's. Additive kinds: a log without
//! them is a `none` log as before.

use serde::{Deserialize, Serialize};

use crate::vocab::Proc;

pub use crate::kinds::mode::{ContainMode, ContainRequest};

/// The action's group: its path and inode (= the cgroup id).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupIdentity {
    pub path: String,
    pub ino: u64,
}

/// The third record: what containment was asked for and what the action
/// runs with; `group` is set exactly when `mode` is `cgroup`. `detail`
/// says why `auto` chose `none`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Containment {
    pub requested: ContainRequest,
    pub mode: ContainMode,
    pub group: Option<GroupIdentity>,
    pub detail: String,
}

/// Made durable before `cgroup.kill` is written (the KILL stage's first
/// step in cgroup mode): the group and the members it had just before.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupKill {
    pub ino: u64,
    /// The first [`GROUP_KILL_NAMED`] members (pids, as `cgroup.procs`
    /// lists them).
    pub members: Vec<i32>,
    /// How many more members the group had (absent when none): a fork
    /// bomb's group can hold more pids than a record may (`pid_max` is
    /// 4 194 304 on many hosts; at ~8 bytes a pid, 131 072 of them pass
    /// the 1 MiB line cap). `cgroup.kill` kills them all either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_members: Option<u64>,
}

/// Members a `group_kill` record names at most: ~130 KiB of pids.
pub const GROUP_KILL_NAMED: usize = 16_384;

impl GroupKill {
    /// The record for group `ino` whose members are `pids`: the first
    /// [`GROUP_KILL_NAMED`] named, the rest counted.
    pub fn of(ino: u64, mut pids: Vec<i32>) -> GroupKill {
        let more = pids.len().saturating_sub(GROUP_KILL_NAMED) as u64;
        pids.truncate(GROUP_KILL_NAMED);
        GroupKill {
            ino,
            members: pids,
            more_members: (more > 0).then_some(more),
        }
    }

    /// Every member the group had: named and counted.
    pub fn total(&self) -> u64 {
        self.members.len() as u64 + self.more_members.unwrap_or(0)
    }
}

/// `cgroup.kill` could not be written (the sweeps go on as in `none`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupKillFailed {
    pub ino: u64,
    pub errno: i32,
    pub detail: String,
}

/// At close: `cgroup.events` said `populated` (false is part of the
/// proof) and whether the group was removed; `detail` names why not.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupRemoved {
    pub group: GroupIdentity,
    pub populated: bool,
    pub removed: bool,
    pub detail: String,
}

/// One process of a group as seen now (`rea-audit reconcile`'s report and
/// `rea-watchdog recover`'s record of what it is about to kill): the pid
/// from `cgroup.procs`, start time and comm from `/proc/PID/stat` (absent
/// when it exited before they were read), and whether a pidfd probe by
/// (pid, start time) found it running.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupMember {
    pub pid: i32,
    pub start_time: Option<u64>,
    pub comm: Option<String>,
    pub alive: bool,
}

/// What a recorded group's directory is now.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    /// The recorded path names a cgroup2 directory with the recorded inode.
    Present,
    /// No directory has the recorded name (removed at close, or by hand).
    Gone,
    /// The name now names another directory (another inode): another
    /// group, which nothing in rea touches.
    Recreated,
    /// It could not be looked at (not a `rea-` group on cgroup2,
    /// permissions, I/O).
    Unreachable,
}

/// A recorded group looked up again by path and inode.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupSeen {
    pub state: GroupState,
    /// The inode the name has now, when it names a directory.
    pub ino_now: Option<u64>,
    pub detail: String,
}

/// A member of the action's group that the watchdog could not prove it
/// started (docs/ownership.md): anything that may write the group's
/// `cgroup.procs` can move an unrelated process in. It is never signalled
/// and never killed (no `cgroup.kill` while it is there), and the proof
/// fails: the group cannot become empty while it stays.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ForeignMember {
    pub process: Proc,
    /// What failed: the ancestor that is not the watchdog's descendant,
    /// or the start time before the watchdog's.
    pub why: String,
}

/// What a group member's `/proc/PID/environ` says of the run's
/// `REA_RUN_ID` (every job the watchdog spawns carries it; a process
/// drafted into the group by writing its pid to `cgroup.procs` does not).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RunIdSeen {
    /// `REA_RUN_ID=<the run>` is in its environment.
    Carried,
    /// Its environment was read and has no `REA_RUN_ID=<the run>`.
    Missing,
    /// Its environment could not be read (EACCES, an I/O error) while the
    /// process still ran: nothing proves it is the action's.
    Unreadable,
    /// A zombie (it has no environment any more). Not counted against
    /// the action: a zombie runs no code, so drafting one gains nothing,
    /// and `cgroup.kill` does nothing to it (its parent reaps it).
    Zombie,
    /// It exited between the listing and the check: not a member now.
    Gone,
}

/// Why a member is not proven the action's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NotTheAction {
    /// It started before the run's watchdog (start times in clock ticks
    /// since boot, `/proc/PID/stat` field 22): no job of the run can be.
    StartedBeforeRun,
    /// Its environment has no `REA_RUN_ID` of the run.
    NoRunId,
    /// Its environment could not be read.
    EnvironUnreadable,
    /// Its start time could not be read while it still ran.
    StartTimeUnreadable,
}

impl NotTheAction {
    pub fn as_str(self) -> &'static str {
        match self {
            NotTheAction::StartedBeforeRun => "started_before_run",
            NotTheAction::NoRunId => "no_run_id",
            NotTheAction::EnvironUnreadable => "environ_unreadable",
            NotTheAction::StartTimeUnreadable => "start_time_unreadable",
        }
    }
}

/// One member of a group checked against the run (`rea-watchdog
/// recover`'s census of the frozen group, `rea-audit reconcile`'s
/// labels): the facts only; [`CheckedMember::failed`] decides, so a
/// verifier decides again from what was recorded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CheckedMember {
    pub pid: i32,
    /// `/proc/PID/stat` field 22 (`null`: unread; it exited, or `run_id`
    /// says why not).
    pub start_time: Option<u64>,
    /// Real uid from `/proc/PID/status`.
    pub uid: Option<u32>,
    pub comm: Option<String>,
    pub run_id: RunIdSeen,
    /// Why something could not be read (empty when all was).
    pub detail: String,
}

impl CheckedMember {
    /// What fails the proof that this member is the action's, for a run
    /// whose watchdog started at `run_start` (empty: it is the action's,
    /// or not a running member at all: gone or a zombie).
    pub fn failed(&self, run_start: u64) -> Vec<NotTheAction> {
        let mut out = Vec::new();
        if matches!(self.run_id, RunIdSeen::Gone | RunIdSeen::Zombie) {
            return out;
        }
        match self.start_time {
            None => out.push(NotTheAction::StartTimeUnreadable),
            Some(t) if t < run_start => out.push(NotTheAction::StartedBeforeRun),
            Some(_) => {}
        }
        match self.run_id {
            RunIdSeen::Missing => out.push(NotTheAction::NoRunId),
            RunIdSeen::Unreadable => out.push(NotTheAction::EnvironUnreadable),
            _ => {}
        }
        out
    }

    /// This member as named among the foreign ones, when it fails.
    pub fn foreign(&self, run_start: u64) -> Option<UnprovenMember> {
        let failed = self.failed(run_start);
        (!failed.is_empty()).then(|| UnprovenMember {
            pid: self.pid,
            start_time: self.start_time,
            uid: self.uid,
            comm: self.comm.clone(),
            failed,
        })
    }
}

/// A member that is not proven the action's: what `recover` names when
/// it refuses and `reconcile` labels `foreign`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UnprovenMember {
    pub pid: i32,
    pub start_time: Option<u64>,
    pub uid: Option<u32>,
    pub comm: Option<String>,
    pub failed: Vec<NotTheAction>,
}

impl UnprovenMember {
    /// "pid 42 (sleep, uid 0, start time 1234): started_before_run, no_run_id".
    pub fn describe(&self) -> String {
        let why: Vec<&str> = self.failed.iter().map(|f| f.as_str()).collect();
        format!(
            "pid {} ({}, uid {}, start time {}): {}",
            self.pid,
            self.comm.as_deref().unwrap_or("?"),
            self.uid.map_or("?".into(), |u| u.to_string()),
            self.start_time.map_or("?".into(), |t| t.to_string()),
            why.join(", ")
        )
    }
}

/// A process the watchdog could neither end nor reap within its bounds
/// (docs/ownership.md, "Every promise has a clock"): a tracee of an outside
/// tracer, a process stuck in a file system that never answers. The
/// watchdog seals without it; the proof fails.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Unkillable {
    pub process: Proc,
    /// Its state letter in `/proc/PID/stat` when sealing (`?` unreadable).
    pub state: String,
    /// `/proc/PID/wchan`, where readable and not `0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wchan: Option<String>,
}
