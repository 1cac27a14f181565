//! cgroup mode, the KILL stage's first step: whether `cgroup.kill` may be
//! written (docs/ownership.md).
//!
//! `cgroup.kill` kills every member of the group and of the groups nested
//! in it, proven or not. Membership is not ownership, so it is written
//! only when a census of the **frozen** group proved every member the
//! action's (by lineage: one `/proc` closure of the watchdog, and a walk
//! up the parents of a member the closure missed), and no process of the
//! action is alive outside the group (only an unfrozen process of the
//! action could draft a stranger in between). A frozen member can neither
//! fork nor move anyone. Otherwise nothing is written: the KILL sweeps
//! signal the proven members one by one through verified pidfds, and a
//! stranger found is recorded (`foreign_member`) and never signalled.
//!
//! The group is frozen when the grace is over; while it freezes (at most
//! [`FREEZE_WAIT`], or half the kill bound) no KILL sweep runs, and the
//! loop is never blocked: each step reads `cgroup.events` once. The
//! decision is made once; the record of the kill is durable before it is
//! written, and the group is thawed after, either way (and when the stop
//! ends while it freezes).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::group;
use super::{StopHost, Stopper};
use crate::kinds::watchdog::Proc;
use crate::process::identity::{is_gone, read_stat};
use crate::process::lineage::Lineage;
use crate::process::scan::descendants_known;

/// Longest the KILL stage waits for the group to report `frozen 1`, once
/// per stop (never longer than half the kill bound). A member in its exit path is not frozen until it has left
/// the group, so a tree dying of TERM (200 Python processes tearing down
/// on two CPUs) keeps the group from `frozen 1` for ~230 ms; a fork storm
/// of 2000 freezes in ~40 ms; on a loaded machine a dying tree has taken
/// over a second. Only members that are exiting (dying anyway) or blocked
/// uninterruptibly (which no signal reaches either) keep a group from
/// freezing, so waiting costs little. Past this, no `cgroup.kill`: the
/// KILL sweeps go on through verified pidfds.
const FREEZE_WAIT: Duration = Duration::from_millis(2000);

/// `PF_EXITING` in `/proc/PID/stat`'s flags: the process is in its exit
/// path. It has left its cgroup already (`cgroup_exit` comes before the
/// exit is notified), so it is not in `cgroup.procs`, yet its pidfd does
/// not poll readable yet: dying, not "alive outside the group". Gone
/// reads as exiting (nothing left there to draft anyone); unreadable as
/// not (unproven).
fn exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(t) => t,
        Err(e) => return is_gone(&e),
    };
    let flags = text
        .rfind(')')
        .and_then(|i| text[i + 1..].split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok());
    flags.is_none_or(|f| f & PF_EXITING != 0)
}

/// What the frozen census found.
enum Frozen {
    /// Every member proven, nothing of the action outside the group.
    Proven,
    /// Members that are not the action's.
    Foreign(Vec<(Proc, String)>),
    /// Not provable (unreadable): no `cgroup.kill`, the sweeps go on.
    Unproven,
    /// A process of the action is alive outside the group (a privileged
    /// job moved it): the sweeps end it first, then the census is taken
    /// again, while the freeze's time lasts.
    Outside,
}

/// Where the KILL stage's `cgroup.kill` stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// The KILL stage has not begun.
    Open,
    /// `cgroup.freeze` written; waiting (no longer than `until`) for the
    /// group to report `frozen 1`. No KILL sweep runs meanwhile.
    Freezing { until: Instant },
    /// Decided (written or withheld); the group is thawed.
    Decided,
}

impl Stopper {
    /// The KILL stage's group step in cgroup mode (see the module doc).
    /// Returns whether the group is still freezing (the caller then runs
    /// no KILL sweep this step; a process of the action outside the group
    /// is the exception: the sweeps must end it first). Never blocks.
    pub(super) fn kill_group(&mut self, host: &mut impl StopHost, now: Instant) -> bool {
        if !self.foreign.is_empty() && self.gate != Gate::Decided {
            self.beyond_group = true;
            self.thaw(host); // a stranger is in the group: never cgroup.kill
            return false;
        }
        let until = match self.gate {
            Gate::Decided => return false,
            Gate::Open => now + FREEZE_WAIT.min(self.kill_bound / 2),
            Gate::Freezing { until } => until,
        };
        // Writing `1` again is harmless; a zero wait reads `cgroup.events` once.
        let frozen = match host.group() {
            Some(g) => g.freeze(Duration::ZERO),
            None => return false,
        };
        match frozen {
            Ok(true) => {}
            Ok(false) if now < until => {
                self.gate = Gate::Freezing { until };
                return true;
            }
            Ok(false) | Err(_) => {
                self.beyond_group = true;
                self.thaw(host);
                return false;
            }
        }
        let census = self.frozen_census(host);
        // Only a proven census lets the sweeps look at the group alone.
        self.beyond_group |= !matches!(census, Frozen::Proven);
        match census {
            Frozen::Proven => {
                if let Some(ev) = host.group().map(group::kill_record) {
                    host.append(ev);
                    host.sync();
                }
                if let Some(ev) = host.group().and_then(group::kill_now) {
                    host.append(ev);
                }
            }
            Frozen::Foreign(list) => {
                for (process, why) in list {
                    self.mark_foreign(host, process, why);
                }
            }
            Frozen::Outside if now < until => {
                self.gate = Gate::Freezing { until };
                return false; // the sweeps run, the group stays frozen
            }
            Frozen::Outside | Frozen::Unproven => {}
        }
        self.thaw(host);
        false
    }

    /// Ends the group step: thaws the group if this stop froze it, and
    /// marks the decision made.
    pub(super) fn thaw(&mut self, host: &impl StopHost) {
        if matches!(self.gate, Gate::Freezing { .. } | Gate::Open) && host.group().is_some() {
            if let Some(g) = host.group() {
                let _ = g.thaw();
            }
        }
        self.gate = Gate::Decided;
    }

    /// The census of the frozen group: its members (nested groups too)
    /// against the watchdog's `/proc` closure.
    fn frozen_census(&mut self, host: &impl StopHost) -> Frozen {
        let me = host.me();
        let Some(members) = host.group().and_then(|g| g.members_deep().ok()) else {
            return Frozen::Unproven;
        };
        let held = &self.held;
        let known = |pid: i32| {
            held.fds
                .get(&pid)
                .map(|fd| super::census::held_stat(pid, fd))
        };
        let Ok(closure) = descendants_known(me.pid, known) else {
            return Frozen::Unproven;
        };
        let members: HashSet<i32> = members.into_iter().filter(|&p| p > 0).collect();
        let mut in_closure = HashSet::new();
        for st in &closure {
            in_closure.insert(st.pid);
            if !members.contains(&st.pid) && !st.is_zombie() && !exiting(st.pid) {
                return Frozen::Outside;
            }
        }
        let mut foreign = Vec::new();
        for &pid in members.difference(&in_closure) {
            // Missed by the closure: its parent may have exited while the
            // scan ran. The walk up its parents decides.
            let st = match read_stat(pid) {
                Ok(st) => st,
                Err(e) if is_gone(&e) => continue,
                Err(_) => return Frozen::Unproven,
            };
            if st.is_zombie() {
                continue; // dead already: cgroup.kill cannot harm it
            }
            let (proven, held) = (&mut self.proven, &self.held);
            let alive = |p: i32| held.alive(p);
            match proven.prove(&st, me, alive) {
                Lineage::Proven | Lineage::Gone => {}
                Lineage::Foreign(why) => {
                    foreign.push((st.recorded(), why));
                }
            }
        }
        match foreign.is_empty() {
            true => Frozen::Proven,
            false => Frozen::Foreign(foreign),
        }
    }
}
