//! The stop's cgroup-mode steps (docs/containment.md), beside the stop procedure
//! (`stop.rs`): the group's members join the scan, and the KILL stage's
//! one `cgroup.kill`.

use std::collections::HashSet;

use crate::contain::group::ActionGroup;
use crate::kinds::watchdog::{Event, GroupKill, GroupKillFailed};
use crate::process::identity::{is_gone, read_stat, Stat};

/// Adds the group's members the `/proc` closure did not find to `scan`.
pub fn add_members(g: &ActionGroup, scan: &mut Vec<Stat>) -> std::io::Result<()> {
    let seen: HashSet<i32> = scan.iter().map(|s| s.pid).collect();
    for pid in g.members()? {
        if pid > 0 && !seen.contains(&pid) {
            match read_stat(pid) {
                Ok(st) => scan.push(st),
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// The record made durable before `cgroup.kill` is written (like a
/// sweep's): the group and the members it has just before.
pub fn kill_record(g: &ActionGroup) -> Event {
    Event::GroupKill(GroupKill::of(g.ino(), g.members().unwrap_or_default()))
}

/// Writes `cgroup.kill`; the record of its failure, if it failed (the
/// sweeps go on after it as in `none` either way).
pub fn kill_now(g: &ActionGroup) -> Option<Event> {
    let e = g.kill().err()?;
    Some(Event::GroupKillFailed(GroupKillFailed {
        ino: g.ino(),
        errno: e.raw_os_error().unwrap_or(0),
        detail: crate::vocab::bounded(&e.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use crate::kinds::watchdog::{GroupKill, GROUP_KILL_NAMED};
    use crate::log::writer::MAX_LINE;

    /// A fork bomb's group on a host whose `pid_max` is 4 194 304: 200 000
    /// seven-digit pids. All of them in one record pass the line cap (the
    /// log would refuse it and the stop end in `audit_failure`); the
    /// record names the first 16 384, counts the rest, and fits with room
    /// to spare for the envelope.
    #[test]
    fn a_fork_bombs_group_kill_is_counted_not_all_named() {
        let pids: Vec<i32> = (0..200_000).map(|i| 4_000_000 + i).collect();
        let all = GroupKill {
            ino: 7,
            members: pids.clone(),
            more_members: None,
        };
        assert!(serde_json::to_vec(&all).unwrap().len() > MAX_LINE);
        let k = GroupKill::of(7, pids.clone());
        assert_eq!(k.members[..], pids[..GROUP_KILL_NAMED]);
        assert_eq!(k.more_members, Some(200_000 - GROUP_KILL_NAMED as u64));
        assert_eq!(k.total(), 200_000);
        assert!(serde_json::to_vec(&k).unwrap().len() + 4096 < MAX_LINE);
        let few = GroupKill::of(7, vec![41, 42]);
        assert_eq!((few.members, few.more_members), (vec![41, 42], None));
        assert!(!serde_json::to_string(&GroupKill::of(7, vec![1]))
            .unwrap()
            .contains("more_members"));
    }
}
