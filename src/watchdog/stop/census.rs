//! Who a stop step sees (docs/stop.md, "Who a step sees").
//!
//! * none mode: the `/proc` closure from the watchdog's pid (a `stat`
//!   read of every process visible).
//! * cgroup mode, where the kernel has `PIDFD_GET_INFO`: the group's
//!   `cgroup.procs`, and no `/proc` read at all for a member already
//!   signalled and held (its held pidfd says it is alive, and a held
//!   process keeps its pid). A member not held yet is a *placeholder*
//!   (pid only, [`is_placeholder`]): its bind reads it once, through the
//!   pidfd that proves its membership. The closure is scanned only when
//!   the group is empty but `waitid` still sees a child (a descendant that
//!   left the group, which only a privileged job can do), and, once the
//!   KILL stage's frozen census did not prove that the group holds every
//!   process of the action, on every step after it: a process outside
//!   the group is then signalled with the members, not only once they are
//!   gone (they may outlive the kill bound).
//! * cgroup mode without `PIDFD_GET_INFO`: the closure, plus the members
//!   it missed, all bound by the scan's read-back.

use std::collections::HashSet;

use super::group;
use super::{StopHost, Stopper};
use crate::kinds::watchdog::Proc;
use crate::process::identity::Stat;
use crate::process::lineage::Lineage;
use crate::process::pidfd::info_supported;
use crate::process::pidfd::VerifiedPidFd;
use crate::process::scan::descendants_known;

/// What one step sees.
#[derive(Default)]
pub(super) struct Census {
    /// Members of the action's group, to bind by membership of the group
    /// with this id.
    members: Vec<Stat>,
    group: Option<u64>,
    /// Descendants from the `/proc` closure (and, without
    /// `PIDFD_GET_INFO`, the group's members it missed), to bind by the
    /// scan's read-back.
    closure: Vec<Stat>,
    /// Why the group or `/proc` could not be read: the end is not proven.
    pub error: Option<String>,
    /// Members of the group found not the action's this step (without
    /// `PIDFD_GET_INFO`; with it, the bind finds them): to record.
    pub foreign: Vec<(Proc, String)>,
}

impl Census {
    /// Every process seen, with the group id to bind it by (`None`: by
    /// the scan).
    pub fn all(&self) -> impl Iterator<Item = (&Stat, Option<u64>)> {
        let g = self.group;
        let members = self.members.iter().map(move |s| (s, g));
        members.chain(self.closure.iter().map(|s| (s, None)))
    }

    /// How many group members not signalled yet were seen (cgroup mode).
    pub fn new_members(&self) -> usize {
        self.members.iter().filter(|s| is_placeholder(s)).count()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.closure.is_empty()
    }
}

#[cfg(test)]
impl Census {
    /// A closure of `n` zombies (for a sweep that passes every one over).
    pub(super) fn of_zombies(n: usize) -> Census {
        let zombie = |i: usize| Stat {
            pid: 100 + i as i32,
            comm: "z".into(),
            state: b'Z',
            ppid: 1,
            sid: 0,
            start_time: 1,
            threads: 1,
        };
        Census {
            closure: (0..n).map(zombie).collect(),
            ..Census::default()
        }
    }

    pub(super) fn push_closure(&mut self, st: Stat) {
        self.closure.push(st);
    }
}

/// The state byte of a placeholder: not a state `/proc` ever shows.
const PLACEHOLDER: u8 = b'?';

/// A group member known by pid only (start time 0, no parent yet).
pub(super) fn is_placeholder(st: &Stat) -> bool {
    st.state == PLACEHOLDER
}

fn placeholder(pid: i32) -> Stat {
    Stat {
        pid,
        comm: String::new(),
        state: PLACEHOLDER,
        ppid: 0,
        sid: 0,
        start_time: 0,
        threads: 1,
    }
}

impl Stopper {
    /// What this step sees; `echild`: `waitid` said there is no child.
    /// Members already recorded as foreign are left out: they are not the
    /// action's, and the stop does not wait for them.
    pub(super) fn census(&mut self, host: &impl StopHost, echild: bool) -> Census {
        let me = host.me();
        let Some(g) = host.group() else {
            return self.closure(me.pid);
        };
        if !info_supported() {
            let mut c = self.closure(me.pid);
            let mut missed = Vec::new();
            if let Err(e) = group::add_members(g, &mut missed) {
                c.error.get_or_insert(e.to_string());
            }
            let seen: HashSet<i32> = c.closure.iter().map(|s| s.pid).collect();
            for st in missed {
                if seen.contains(&st.pid) || self.is_foreign(st.pid, Some(st.start_time)) {
                    continue;
                }
                // Not in the closure: proven by its parents, or foreign.
                let held = &self.held;
                let alive = |p: i32| held.alive(p);
                match self.proven.prove(&st, me, alive) {
                    Lineage::Proven => c.closure.push(st),
                    Lineage::Gone => {}
                    Lineage::Foreign(why) => {
                        c.foreign.push((st.recorded(), why));
                    }
                }
            }
            return c;
        }
        let pids = match g.members() {
            Ok(p) => p,
            Err(e) => {
                // The group cannot be read: the closure at least, and the
                // end is not proven by it.
                let mut c = self.closure(me.pid);
                c.error
                    .get_or_insert(format!("{}: {e}", g.path().display()));
                return c;
            }
        };
        let mut c = Census {
            group: Some(g.ino()),
            ..Census::default()
        };
        for pid in pids.into_iter().filter(|&p| p > 0) {
            let known = self.held.fds.get(&pid).map(|fd| held_stat(pid, fd));
            if known.is_none() && self.is_foreign(pid, None) {
                continue;
            }
            let st = known.unwrap_or_else(|| placeholder(pid));
            c.members.push(st);
        }
        if (c.members.is_empty() && !echild) || self.beyond_group {
            // A child is left (a zombie not reaped yet, or a descendant
            // that left the group), or the KILL stage found a process of
            // the action outside the group: the closure says which. (Its
            // members are listed once, by the group.)
            let listed: HashSet<i32> = c.members.iter().map(|s| s.pid).collect();
            let scan = self.closure(me.pid);
            c.closure = scan.closure;
            c.closure.retain(|s| !listed.contains(&s.pid));
            c.error = scan.error;
        }
        c
    }

    /// The `/proc` closure of the watchdog. A process held (signalled
    /// already, its pidfd not exited) is not read again: it is in the
    /// closure whatever its parent is now, and what its bind read stands
    /// in for its `stat` (see [`held_stat`]).
    fn closure(&self, me: i32) -> Census {
        let known = |pid: i32| self.held.fds.get(&pid).map(|fd| held_stat(pid, fd));
        match descendants_known(me, known) {
            Ok(closure) => Census {
                closure,
                ..Census::default()
            },
            Err(e) => Census {
                error: Some(e.to_string()),
                ..Census::default()
            },
        }
    }
}

/// A held process's census entry, from what its bind read. Held pidfds
/// that polled exited were let go at the start of the step
/// (`Stopper::step`), so a held process is alive, and keeps its pid until
/// it is reaped. Its state is given as `S`: alive, and not signalled
/// again this stage.
pub(super) fn held_stat(pid: i32, fd: &VerifiedPidFd) -> Stat {
    let p = fd.proc();
    Stat {
        pid,
        comm: p.comm.clone(),
        state: b'S',
        ppid: p.ppid,
        sid: 0,
        start_time: p.start_time,
        threads: 1,
    }
}
