//! The replay's containment rules (docs/containment.md): what the records of a
//! cgroup-mode action must agree on.
//!
//! - `containment` is the third record, once; its `group` is set exactly
//!   in cgroup mode.
//! - `group_kill` (and `group_kill_failed`) name the recorded group, come
//!   only after a stop trigger, and only once.
//! - `group_removed` names the recorded group, once; a receipt that claims
//!   quiescence in cgroup mode needs it with `populated` false (the kernel's
//!   half of the proof).
//!
//! A log without a `containment` record is a log from before containment (or a
//! `none` run written by it): none of the group records may appear in it.

use crate::kinds::watchdog::{ContainMode, Containment, GroupIdentity, Receipt};

/// What the replay has seen of the group so far.
#[derive(Default)]
pub struct GroupSeen {
    /// The `containment` record, when it came.
    contain: Option<Containment>,
    killed: bool,
    /// `group_removed`'s (populated, removed), when it came.
    removed: Option<(bool, bool)>,
}

impl GroupSeen {
    /// Records before the stage is armed: 2, plus the containment record.
    pub fn first_records(&self) -> u64 {
        2 + u64::from(self.contain.is_some())
    }

    /// `containment` at record number `seen`; the problem, if any.
    pub fn containment(&mut self, c: Containment, seen: u64) -> Option<String> {
        let problem = if seen != 3 || self.contain.is_some() {
            Some("containment is not the third record (or comes twice)".to_string())
        } else if (c.mode == ContainMode::Cgroup) != c.group.is_some() {
            Some(format!(
                "containment mode {:?} {} a group",
                c.mode,
                if c.group.is_some() { "names" } else { "lacks" }
            ))
        } else {
            None
        };
        self.contain.get_or_insert(c);
        problem
    }

    fn group(&self) -> Option<&GroupIdentity> {
        self.contain.as_ref().and_then(|c| c.group.as_ref())
    }

    fn names(&self, what: &str, ino: u64) -> Option<String> {
        match self.group() {
            Some(g) if g.ino == ino => None,
            Some(g) => Some(format!(
                "{what} names group inode {ino}, the action's is {}",
                g.ino
            )),
            None => Some(format!("{what} in a log with no group")),
        }
    }

    /// `group_kill` or `group_kill_failed` for `ino`; `triggered`: a stop
    /// trigger came before it.
    pub fn kill(&mut self, ino: u64, failed: bool, triggered: bool) -> Option<String> {
        let what = if failed {
            "group_kill_failed"
        } else {
            "group_kill"
        };
        if let Some(p) = self.names(what, ino) {
            return Some(p);
        }
        if !triggered {
            return Some(format!("{what} with no stop_triggered before it"));
        }
        match (failed, self.killed) {
            (false, true) => Some("group_kill twice".to_string()),
            (true, false) => Some("group_kill_failed with no group_kill before it".to_string()),
            (false, false) => {
                self.killed = true;
                None
            }
            (true, true) => None,
        }
    }

    /// `group_removed` for `g`.
    pub fn removed(&mut self, g: &GroupIdentity, populated: bool, removed: bool) -> Option<String> {
        let problem = match self.group() {
            Some(mine) if mine != g => Some(format!(
                "group_removed names {} (inode {}), the action's group is {} (inode {})",
                g.path, g.ino, mine.path, mine.ino
            )),
            None => Some("group_removed in a log with no group".to_string()),
            Some(_) if self.removed.is_some() => Some("group_removed twice".to_string()),
            Some(_) if removed && populated => {
                Some("group_removed says removed while populated".to_string())
            }
            Some(_) => None,
        };
        self.removed.get_or_insert((populated, removed));
        problem
    }

    /// The receipt's claim against the group records.
    pub fn finish(&self, receipt: &Receipt) -> Option<String> {
        self.group()?;
        match self.removed {
            _ if !receipt.quiescent => None,
            Some((false, _)) => None,
            Some((true, _)) => {
                Some("receipt claims quiescence; group_removed says populated".to_string())
            }
            None => Some("receipt claims quiescence; no group_removed record".to_string()),
        }
    }
}
