//! The kill bound limits how long a stop waits for its proof, never whether
//! a process it sees gets its SIGKILL. Both tests drive the stop procedure
//! itself (as `stop::` does for the kill bound), in virtual time, with a
//! stand-in watchdog (`sh`) whose children are the action; the step that
//! matters comes after the kill bound, as after a reap the kernel made
//! slow (~950 ms to reap a killed `Z` leader on a loaded box: the kernel's
//! `release_task` in `d_invalidate` of its `/proc` entries).
//!
//! First, cgroup mode: a process of the action outside the action's
//! group (a privileged job moved it) is stopped with the group's members,
//! even when the members outlive the kill bound's first steps. Found by
//! `schedules::` (a `Z` leader with a live thread, a job that left the
//! group, `--term-grace 0`, in auto mode): the frozen census saw the
//! process outside the group ("the sweeps end it first"), but a step's
//! census in cgroup mode listed only the group's members and scanned the
//! `/proc` closure only once the group was empty. Reaping the killed `Z`
//! leader then blocked the loop, the kill bound ran out, and the stop
//! ended with the outside process never signalled: a job's leader died of
//! its parent-death signal when the watchdog exited, a tree's member
//! (`tree.py --shape leavegroup`) was left running. Here: one child in a
//! real action group under tools/test's group, one outside it; the step
//! after the first KILL sweep comes after the kill bound.
//!
//! Second, a KILL stage whose first step comes only after the bound (no
//! grace, the loop blocked in a reap) ended at once, with no SIGKILL at
//! all. `schedules::` saw it as `sweeps: 0` in the record of a stop whose
//! processes were all jobs' leaders (they died of their parent-death
//! signal once the watchdog exited); any other process would have been
//! left running, as here.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::stop::{test_cgroup, wait_for};
use rea::contain::group::ActionGroup;
use rea::kinds::watchdog::{AskSpan, Event, Ident, SignalSweep, Stage, StopReason, Uncertainty};
use rea::process::identity::Stat;
use rea::process::pidfd::{bind_unwaited_child, VerifiedPidFd};
use rea::process::reap::Peek;
use rea::watchdog::stop::{Step, StopHost, Stopper};

/// The watchdog's stand-in: the closure is rooted at `me`, the action's
/// group is `group` (none: `none` mode); records are kept in memory;
/// nothing is reapable here.
struct GroupHost {
    me: Ident,
    group: Option<ActionGroup>,
    events: Vec<Event>,
}

impl StopHost for GroupHost {
    fn me(&self) -> Ident {
        self.me
    }
    fn append(&mut self, ev: Event) {
        self.events.push(ev);
    }
    fn sync(&mut self) {}
    fn reap(&mut self) -> Peek {
        Peek::NothingWaitable
    }
    fn uncertain(&mut self, st: &Stat, reason: Uncertainty, detail: &str) {
        panic!("uncertain mapping for {st:?}: {reason:?} {detail}");
    }
    fn group(&self) -> Option<&ActionGroup> {
        self.group.as_ref()
    }
}

fn kill_sweeps(events: &[Event]) -> Vec<&SignalSweep> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::SignalSweep(s) if s.stage == Stage::Kill => Some(s),
            _ => None,
        })
        .collect()
}

/// `sh` (the stand-in watchdog) with `n` children `sleep 1000`, each held.
fn sleepers(n: usize) -> (std::process::Child, VerifiedPidFd, Vec<Stat>, Held) {
    let script = format!("{}wait", "/bin/sleep 1000 & ".repeat(n));
    let sh = Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sh");
    let sh_fd = bind_unwaited_child(&sh).unwrap();
    let sleeps = wait_for(PATIENCE, "the sleeps", || {
        let d = rea::process::scan::descendants(sh.id() as i32).ok()?;
        let s: Vec<Stat> = d.into_iter().filter(|s| s.comm == "sleep").collect();
        (s.len() == n).then_some(s)
    });
    let mut held = Held::default();
    for (i, s) in sleeps.iter().enumerate() {
        let ident = Ident {
            pid: s.pid,
            start_time: s.start_time,
            uid: uid(),
        };
        held.add(&format!("sleep{i}"), ident);
    }
    (sh, sh_fd, sleeps, held)
}

#[test]
fn a_process_outside_the_group_is_killed_when_the_members_outlive_the_bound() {
    require_pid_ns!("stop_outside");
    let Some(parent) = test_cgroup().filter(|_| nix::unistd::getuid().is_root()) else {
        assert!(
            !pid_ns_required(),
            "tools/test made no cgroup (root needed)"
        );
        eprintln!("SKIP: no test cgroup (run through tools/test as root)");
        return;
    };
    let sibling = Sibling::start();
    let run_id = format!("outside-{}", std::process::id());
    let group = ActionGroup::create(&parent, &run_id).expect("make the action's group");
    // sh (the stand-in watchdog) -> two sleeps; the first goes into the group.
    let (mut sh, sh_fd, sleeps, held) = sleepers(2);
    let (member, outside) = (sleeps[0].pid, sleeps[1].pid);
    std::fs::write(group.path().join("cgroup.procs"), member.to_string())
        .expect("move the member into the group");
    let mut host = GroupHost {
        me: sh_fd.ident(),
        group: Some(group),
        events: Vec::new(),
    };
    // No grace: the stop starts at KILL. Virtual time stands still at t0
    // while the group freezes for the census before cgroup.kill (the
    // member sleeps: it freezes at once), until the first KILL sweep.
    let t0 = Instant::now();
    let bound = Duration::from_secs(1);
    let mut stopper = Stopper::new(
        StopReason::StopRequested,
        t0,
        Duration::ZERO,
        bound,
        AskSpan::HalfGrace,
        Vec::new(),
    );
    wait_for(PATIENCE, "the first KILL sweep", || {
        if let Step::Done(c) = stopper.step(&mut host, t0) {
            panic!("the stop ended at t0: {c:?}");
        }
        (!kill_sweeps(&host.events).is_empty()).then_some(())
    });
    assert!(
        host.events
            .iter()
            .all(|e| !matches!(e, Event::GroupKill(_))),
        "no cgroup.kill: a process of the action is outside the group"
    );
    // The next step comes after the kill bound (the loop was blocked).
    let done = match stopper.step(&mut host, t0 + bound + Duration::from_millis(1)) {
        Step::Done(c) => c,
        Step::Wait(_) => panic!("the kill bound ran out, yet the stop goes on"),
    };
    let targeted: Vec<i32> = kill_sweeps(&host.events)
        .iter()
        .flat_map(|s| s.targets.iter().map(|t| t.pid))
        .collect();
    assert!(targeted.contains(&member), "{targeted:?}");
    assert!(
        targeted.contains(&outside),
        "the process outside the group ({outside}) was never signalled: sweeps {targeted:?}, {done:?}"
    );
    let left = held.wait_all_exited(PATIENCE);
    assert!(left.is_empty(), "still alive: {left:?}");
    let _ = sh_fd.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sh.wait();
    // The group is empty now: removed when it is dropped (it was made here).
    drop(host);
    sibling.assert_alive();
}

#[test]
fn a_kill_stage_whose_first_step_comes_after_the_bound_still_kills() {
    require_pid_ns!("stop_bound");
    let sibling = Sibling::start();
    let (mut sh, sh_fd, sleeps, held) = sleepers(1);
    let mut host = GroupHost {
        me: sh_fd.ident(),
        group: None,
        events: Vec::new(),
    };
    // No grace: the stop starts at KILL; its first step comes after the bound.
    let t0 = Instant::now();
    let bound = Duration::from_secs(1);
    let mut stopper = Stopper::new(
        StopReason::Signal,
        t0,
        Duration::ZERO,
        bound,
        AskSpan::HalfGrace,
        Vec::new(),
    );
    let late = t0 + bound + Duration::from_millis(1);
    let done = loop {
        // A step that waits (the bound extended, a sweep to come) is fine too.
        if let Step::Done(c) = stopper.step(&mut host, late) {
            break c;
        }
        if held.alive().is_empty() {
            break match stopper.step(&mut host, late + bound + bound) {
                Step::Done(c) => c,
                Step::Wait(_) => panic!("the stop outlived two kill bounds"),
            };
        }
    };
    let targeted: Vec<i32> = kill_sweeps(&host.events)
        .iter()
        .flat_map(|s| s.targets.iter().map(|t| t.pid))
        .collect();
    assert!(
        targeted.contains(&sleeps[0].pid),
        "the stop ended without a SIGKILL to {}: sweeps {targeted:?}, {done:?}",
        sleeps[0].pid
    );
    let left = held.wait_all_exited(PATIENCE);
    assert!(left.is_empty(), "still alive: {left:?}");
    let _ = sh_fd.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sh.wait();
    sibling.assert_alive();
}
