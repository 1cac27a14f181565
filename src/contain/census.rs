//! A recorded group looked up again, and who is in it now: what
//! `rea-audit reconcile` reports after a lost watchdog and what
//! `rea-watchdog recover` records before it writes `cgroup.kill`.
//!
//! Read-only: the group is re-opened by its recorded path *and inode*
//! ([`ActionGroup::locate`]), its `cgroup.procs` and `cgroup.events` are
//! read through the held directory fd, and each member is probed by
//! (pid, start time) with [`crate::process::alive::probe`], which cannot
//! signal. A name that now names another directory (a group removed and
//! made again under the same name) is reported as `recreated` and never
//! read: its members are someone else's.

use super::group::{ActionGroup, Missing};
use crate::kinds::group::{GroupIdentity, GroupMember, GroupSeen, GroupState};
use crate::process::alive::{probe, Liveness};
use crate::process::identity::read_stat;

/// Members listed, at most (the rest are counted): a fork storm's group
/// can hold thousands, and a record line is capped at 1 MiB.
pub const MAX_MEMBERS: usize = 1024;

/// Who is in a group now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// `populated` of `cgroup.events` (`None`: it could not be read).
    pub populated: Option<bool>,
    pub members: Vec<GroupMember>,
    /// Members beyond [`MAX_MEMBERS`].
    pub not_listed: u64,
    /// Members `cgroup.procs` shows as pid 0: processes outside this
    /// process's PID namespace (still in the group, still killed by
    /// `cgroup.kill`, but not nameable from here).
    pub not_visible: u64,
    /// Why `cgroup.procs` or `cgroup.events` could not be read.
    pub error: Option<String>,
}

impl Census {
    pub fn alive(&self) -> impl Iterator<Item = &GroupMember> {
        self.members.iter().filter(|m| m.alive)
    }
}

/// Re-opens the recorded group; what its name names now, and the group
/// when it is still the recorded one.
pub fn look(recorded: &GroupIdentity) -> (GroupSeen, Option<ActionGroup>) {
    let path = std::path::Path::new(&recorded.path);
    match ActionGroup::locate(path, recorded.ino) {
        Ok(g) => (
            GroupSeen {
                state: GroupState::Present,
                ino_now: Some(g.ino()),
                detail: format!("{} has the recorded inode {}", path.display(), g.ino()),
            },
            Some(g),
        ),
        Err(m) => {
            let (state, ino_now) = match &m {
                Missing::Gone(_) => (GroupState::Gone, None),
                Missing::Recreated { ino_now, .. } => (GroupState::Recreated, Some(*ino_now)),
                Missing::NotAGroup(_) | Missing::Unreachable(_) => (GroupState::Unreachable, None),
            };
            let seen = GroupSeen {
                state,
                ino_now,
                detail: m.to_string(),
            };
            (seen, None)
        }
    }
}

/// One member by pid: its start time and comm, and whether it runs.
fn member(pid: i32) -> GroupMember {
    match read_stat(pid) {
        Ok(st) => GroupMember {
            pid,
            start_time: Some(st.start_time),
            comm: Some(crate::vocab::bounded(&st.comm)),
            alive: probe(pid, st.start_time).state == Liveness::Alive,
        },
        // Exited between the listing and the read: gone.
        Err(_) => GroupMember {
            pid,
            start_time: None,
            comm: None,
            alive: false,
        },
    }
}

/// `populated` of `cgroup.events` and the pids of `cgroup.procs`, each
/// with why it could not be read; `None` pids: the census ends there.
pub fn listing(g: &ActionGroup, error: &mut Option<String>) -> (Option<bool>, Option<Vec<i32>>) {
    let populated = g
        .populated()
        .map_err(|e| *error = Some(format!("cgroup.events: {e}")))
        .ok();
    let pids = g
        .members()
        .map_err(|e| *error = Some(format!("cgroup.procs: {e}")))
        .ok();
    (populated, pids)
}

/// The group's members now (bounded; see [`Census`]).
pub fn census(g: &ActionGroup) -> Census {
    let mut c = Census::default();
    let (populated, pids) = listing(g, &mut c.error);
    c.populated = populated;
    let Some(pids) = pids else {
        return c;
    };
    for pid in pids {
        if pid <= 0 {
            c.not_visible += 1;
        } else if c.members.len() < MAX_MEMBERS {
            c.members.push(member(pid));
        } else {
            c.not_listed += 1;
        }
    }
    c
}
