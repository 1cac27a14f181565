//! Containment records (SPEC 8): what the action runs in, the group's
//! `cgroup.kill`, and its removal at close. Additive kinds: a log without
//! them is a `none` log as before.

use serde::{Deserialize, Serialize};

pub use crate::contain::mode::{ContainMode, ContainRequest};

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
    pub members: Vec<i32>,
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
