//! Children the process already had when it became a watchdog, which are
//! not its own (docs/guarantees.md).
//!
//! `sleep 10 & exec rea-watchdog exec -- cmd` (an entrypoint script with a
//! sidecar) makes `sleep` the watchdog's child without the watchdog having
//! started it. It and its subtree as they are at start are *inherited*:
//! recorded, never signalled, never counted as abandoned, and reaped when
//! they exit. Because a child that lives keeps `waitid` from ever saying
//! ECHILD, "no child is left" becomes, for a watchdog with inherited
//! children, "no child is waitable and every child left is an inherited
//! one, by pid and start time" ([`only_inherited_left`]).
//!
//! The set is fixed once at start ([`adopt_at_start`]), before the first
//! spawn, and only read afterwards: one action per process.
//!
//! Limit: a process an inherited one starts *after* the watchdog started,
//! and that is then orphaned to the watchdog (a subreaper), is taken for
//! the action's own.

use std::collections::HashSet;
use std::sync::OnceLock;

use super::identity::{is_gone, read_stat, Stat};
use crate::vocab::Proc;

/// At most this many inherited processes are read at start.
pub const MAX_INHERITED: usize = 4096;

static INHERITED: OnceLock<HashSet<(i32, u64)>> = OnceLock::new();

/// The pids `/proc/PID/task/*/children` lists for `pid`'s threads;
/// `None` when a list cannot be read (a kernel without
/// CONFIG_PROC_CHILDREN, or `pid` gone).
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let text = std::fs::read_to_string(t.ok()?.path().join("children")).ok()?;
        out.extend(
            text.split_whitespace()
                .filter_map(|s| s.parse::<i32>().ok()),
        );
    }
    Some(out)
}

/// Records this process's children and their subtrees, as they are now,
/// as inherited; returns them (parents before children, with uids). Call
/// once, before anything is spawned; later calls return nothing new.
pub fn adopt_at_start(me: i32) -> Vec<Proc> {
    let mut found: Vec<Proc> = Vec::new();
    let mut frontier = children_of(me).unwrap_or_default();
    while let Some(pid) = frontier.pop() {
        if found.len() >= MAX_INHERITED {
            break;
        }
        let st = match read_stat(pid) {
            Ok(st) => st,
            Err(e) if is_gone(&e) => continue,
            Err(_) => continue,
        };
        let uid = super::identity::real_uid(pid).unwrap_or(u32::MAX);
        frontier.extend(children_of(pid).unwrap_or_default());
        found.push(st.to_proc(uid));
    }
    let set = found.iter().map(|p| (p.pid, p.start_time)).collect();
    if INHERITED.set(set).is_err() {
        return Vec::new();
    }
    found
}

/// Whether this process was inherited at start (by pid and start time).
pub fn is_inherited(st: &Stat) -> bool {
    INHERITED
        .get()
        .is_some_and(|s| s.contains(&(st.pid, st.start_time)))
}

/// True when the watchdog has inherited children at all, and every child
/// it has now is one of them: the ECHILD of a watchdog with inherited
/// children (see the module doc). False when none were inherited.
pub fn only_inherited_left(me: i32) -> bool {
    if INHERITED.get().is_none_or(|s| s.is_empty()) {
        return false;
    }
    let Some(children) = children_of(me) else {
        return false; // cannot tell: never taken for "none left"
    };
    children.into_iter().all(|pid| match read_stat(pid) {
        Ok(st) => is_inherited(&st) && !st.is_zombie(),
        Err(e) => is_gone(&e),
    })
}
