//! Whether a member of the action's group is the action's. Membership of
//! a cgroup is not ownership: any root process (or an unprivileged one in
//! a delegated subtree) can write an unrelated pid into the group's
//! `cgroup.procs`. A member counts as the action's only if it started
//! after the run's watchdog *and* its environment carries the run's
//! `REA_RUN_ID` (every job the watchdog spawns has it, and its
//! descendants inherit it). This gathers the facts, read-only from
//! `/proc`; [`CheckedMember::failed`] decides on them, so `rea-audit
//! verify` can decide again from a recorded census.

use super::group::ActionGroup;
use crate::contain::census::MAX_MEMBERS;
use crate::kinds::group::{CheckedMember, RunIdSeen};
use crate::process::alive::{probe, Liveness};
use crate::process::identity::{is_gone, read_stat, real_uid};

/// One process checked against run `run` (see the module doc). A process
/// in the middle of `execve` has no environment to read yet (the kernel
/// lays it out last): in a frozen group none is (tasks freeze on their
/// way back to user space); elsewhere (reconcile) it reads as `missing`
/// for that instant. Its stat
/// is read first and the process probed by (pid, that start time) after
/// its environment, so an environment read from a pid reused in between
/// is never taken for the member's: the member is then gone.
pub fn check_member(pid: i32, run: &str) -> CheckedMember {
    let mut m = CheckedMember {
        pid,
        start_time: None,
        uid: None,
        comm: None,
        run_id: RunIdSeen::Gone,
        detail: String::new(),
    };
    let st = match read_stat(pid) {
        Ok(st) => st,
        Err(e) if is_gone(&e) => {
            m.detail = "exited before it was checked".into();
            return m;
        }
        Err(e) => {
            m.run_id = RunIdSeen::Unreadable;
            m.detail = format!("/proc/{pid}/stat: {e}");
            return m;
        }
    };
    m.start_time = Some(st.start_time);
    m.comm = Some(crate::vocab::bounded(&st.comm));
    m.uid = real_uid(pid);
    if st.is_zombie() {
        m.run_id = RunIdSeen::Zombie;
        m.detail = "a zombie: it has no environment and runs nothing".into();
        return m;
    }
    let env = std::fs::read(format!("/proc/{pid}/environ"));
    let now = probe(pid, st.start_time);
    match now.state {
        Liveness::Alive => {}
        Liveness::Gone => {
            m.detail = format!("exited while it was checked ({})", now.detail);
            return m;
        }
        Liveness::Unknown => {
            m.run_id = RunIdSeen::Unreadable;
            m.detail = format!("cannot tell whether it still runs: {}", now.detail);
            return m;
        }
    }
    match env {
        Ok(env) => {
            let needle = format!("REA_RUN_ID={run}");
            let carried = env.split(|&b| b == 0).any(|v| v == needle.as_bytes());
            m.run_id = if carried && !run.is_empty() {
                RunIdSeen::Carried
            } else {
                RunIdSeen::Missing
            };
        }
        Err(e) => {
            m.run_id = RunIdSeen::Unreadable;
            m.detail = format!("/proc/{pid}/environ: {e}");
        }
    }
    m
}

/// A group's members, each checked against the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckedCensus {
    /// `populated` of `cgroup.events` (`None`: it could not be read).
    pub populated: Option<bool>,
    /// The first [`MAX_MEMBERS`] members.
    pub members: Vec<CheckedMember>,
    /// Members beyond [`MAX_MEMBERS`]: checked all the same, counted.
    pub not_listed: u64,
    /// Of those, how many fail the proof (started at or after
    /// `run_start`, `REA_RUN_ID` carried).
    pub not_listed_foreign: u64,
    /// Members `cgroup.procs` shows as pid 0 (outside this PID
    /// namespace): not nameable from here, so not provable either.
    pub not_visible: u64,
    /// Why `cgroup.procs` or `cgroup.events` could not be read.
    pub error: Option<String>,
}

/// Who is in `g` now, each member checked against run `run` whose
/// watchdog started at `run_start` (bounded; see [`CheckedCensus`]).
pub fn checked_census(g: &ActionGroup, run: &str, run_start: u64) -> CheckedCensus {
    let mut c = CheckedCensus::default();
    let (populated, pids) = crate::contain::census::listing(g, &mut c.error);
    c.populated = populated;
    let Some(pids) = pids else {
        return c;
    };
    for pid in pids {
        if pid <= 0 {
            c.not_visible += 1;
            continue;
        }
        let m = check_member(pid, run);
        if c.members.len() < MAX_MEMBERS {
            c.members.push(m);
        } else {
            c.not_listed += 1;
            if !m.failed(run_start).is_empty() {
                c.not_listed_foreign += 1;
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::group::NotTheAction;
    use crate::process::identity::self_start_time;

    #[test]
    fn this_process_is_not_a_run_it_does_not_carry() {
        let me = std::process::id() as i32;
        let m = check_member(me, "no-such-run-id");
        assert_eq!(m.run_id, RunIdSeen::Missing, "{m:?}");
        let st = self_start_time().unwrap();
        assert_eq!(m.start_time, Some(st));
        assert_eq!(m.failed(st), vec![NotTheAction::NoRunId]);
        assert_eq!(
            m.failed(st + 1),
            vec![NotTheAction::StartedBeforeRun, NotTheAction::NoRunId]
        );
        let gone = CheckedMember {
            run_id: RunIdSeen::Gone,
            start_time: None,
            ..m.clone()
        };
        assert!(gone.failed(st).is_empty());
        let zombie = CheckedMember {
            run_id: RunIdSeen::Zombie,
            ..m.clone()
        };
        assert!(zombie.failed(u64::MAX).is_empty());
        let unreadable = CheckedMember {
            run_id: RunIdSeen::Unreadable,
            ..m
        };
        assert_eq!(unreadable.failed(st), vec![NotTheAction::EnvironUnreadable]);
    }

    #[test]
    fn a_process_carrying_the_run_id_is_the_runs() {
        let run = "proof-test-run";
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .env("REA_RUN_ID", run)
            .spawn()
            .unwrap();
        // posix_spawn returns once the child has begun its exec, before
        // the kernel has laid out the new environment (`/proc/PID/environ`
        // reads empty until then): wait, bounded, for it to be there. A
        // frozen member (recover) has always finished its exec: tasks
        // freeze on their way back to user space.
        let environ = format!("/proc/{}/environ", child.id());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read(&environ).is_ok_and(|e| e.is_empty())
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let m = check_member(child.id() as i32, run);
        let other = check_member(child.id() as i32, "another-run");
        // The test's own child, ended through its pidfd.
        let fd = crate::process::pidfd::bind_unwaited_child(&child).unwrap();
        let _ = fd.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait();
        assert_eq!(m.run_id, RunIdSeen::Carried, "{m:?}");
        assert!(m.failed(self_start_time().unwrap()).is_empty(), "{m:?}");
        assert_eq!(other.run_id, RunIdSeen::Missing);
    }
}
