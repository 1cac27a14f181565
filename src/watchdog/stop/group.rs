//! The stop's cgroup-mode steps (SPEC 8), beside the stop procedure
//! (`stop.rs`): the group's members join the scan, and the KILL stage's
//! one `cgroup.kill`.

use std::collections::HashSet;

use crate::audit::record::{Event, GroupKill, GroupKillFailed};
use crate::contain::group::ActionGroup;
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
