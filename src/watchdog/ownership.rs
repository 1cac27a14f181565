//! The ownership room: reaping, and who is abandoned.
//!
//! Reaping never steals an exit: a `WNOWAIT` peek says which child is
//! waitable; a running job's leader is reaped through its own pidfd, an
//! adopted orphan by the pid the peek just returned (an unreaped zombie of
//! ours, so the pid cannot name anyone else). Job exits are handed back
//! for the jobs room to finish; orphans are recorded here.
//!
//! [`classify`] is the abandonment rule (docs/stop.md) as a pure function of
//! one scan: every live descendant must be a running job's leader or in a
//! running job's session; a descendant whose uids are not uniformly the
//! watchdog's cannot be proven at all.

use std::collections::HashSet;

use super::effect::{Closer, Effects};
use super::jobs::Jobs;
use super::ledger::Ledger;
use super::sources::{Source, Sources};
use super::stop::{Held, StopHost, Trigger};
use crate::contain::group::ActionGroup;
use crate::kinds::watchdog::{Event, Reaped, ReapedProc};
use crate::process::identity::{read_stat, read_uids, real_uid, Stat, Uids, UNKNOWN_UID};
use crate::process::pidfd::VerifiedPidFd;
use crate::process::reap::{self, Peek};
use crate::process::scan::descendants;
use crate::vocab::{Ident, Proc, Status, StopReason, Uncertainty};
use mio::Interest;
use std::os::fd::{AsFd, AsRawFd};

/// What one round of reaping did.
pub struct Reaping {
    /// Jobs whose leader was reaped, with its status, in reaping order.
    pub exited: Vec<(u64, Status)>,
    /// What `waitid` said after the last reap: with
    /// [`Peek::NoChildren`] the watchdog has no child left at all.
    pub last: Peek,
}

/// Reaps every waitable child now. Orphans are recorded (one `reaped`
/// record per round); job exits are returned for the jobs room.
///
/// `held`: the stopper's pidfds, by pid (while stopping). An orphan the
/// peek found that is among them is reaped through its own pidfd, and its
/// record made from what its bind read (no `/proc` read); it leaves
/// `held`. A running job's leader never is (the jobs room reaps it, with
/// its status).
pub fn reap(jobs: &mut Jobs, ledger: &mut Ledger, mut held: Option<&mut Held>) -> Reaping {
    let mut orphans = Vec::new();
    let mut exited = Vec::new();
    if let Some(held) = held.as_mut() {
        // Those seen to exit first, each through its own pidfd
        // (`waitid(P_PIDFD)` looks at that one process): the peek below
        // walks every live child before it finds a zombie, once per zombie.
        // Each leaves `held`: it exited, nothing of it is held any more
        // (else `Held::dying` would stay true for it).
        // (A pid seen to exit whose fd went, and that names a new held
        // process now, is not let go: `has_exited` asks its own fd.)
        for pid in std::mem::take(&mut held.exited) {
            let Some(fd) = held.fds.remove(&pid) else {
                continue;
            };
            if !fd.has_exited() {
                held.fds.insert(pid, fd);
                continue;
            }
            if jobs.by_leader_mut(pid).is_some() {
                continue; // the jobs room's, with its status
            }
            // Not this process's child (a grandchild, reaped by its
            // parent, or back here later): the peek's.
            if let Ok(Some(status)) = fd.try_reap() {
                orphans.push(reaped_held(&fd, status));
            }
        }
    }
    let last = loop {
        record_full(ledger, &mut orphans);
        match reap::peek() {
            Ok(Peek::Waitable(zombie)) => {
                let pid = zombie.pid();
                if let Some(job) = jobs.by_leader_mut(pid) {
                    match job.leader.try_reap() {
                        Ok(Some(status)) => {
                            job.status = Some(status);
                            exited.push((job.num, status));
                        }
                        _ => break Peek::NothingWaitable,
                    }
                } else if let Some(fd) = held.as_mut().and_then(|h| h.fds.remove(&pid)) {
                    // Held by the stopper: reaped through its own pidfd,
                    // its record from what the bind read.
                    match fd.try_reap() {
                        Ok(Some(status)) => orphans.push(reaped_held(&fd, status)),
                        _ => break Peek::NothingWaitable,
                    }
                } else {
                    let st = read_stat(pid).ok();
                    match zombie.reap() {
                        Ok(Some(status)) => orphans.push(ReapedProc {
                            pid,
                            start_time: st.as_ref().map(|s| s.start_time),
                            comm: st.map(|s| s.comm),
                            status,
                        }),
                        _ => break Peek::NothingWaitable,
                    }
                }
            }
            Ok(p) => break p,
            Err(_) => break Peek::NothingWaitable,
        }
    };
    if !orphans.is_empty() {
        ledger.append(Event::Reaped(Reaped { processes: orphans }));
    }
    Reaping { exited, last }
}

/// Processes in one `reaped` record at most. An entry is ~80 bytes of
/// JSON (up to ~170 with a name of escaped control characters): 4096 keep
/// a record well under the audit line cap (1 MiB), where the zombies of a
/// fork bomb reaped in one round (20 000: 1.4 MiB) made a record the log
/// refused, and the stop ended in `audit_failure`.
const REAPED_MAX: usize = 4096;

/// Records the reaped processes `orphans` holds in full records of
/// [`REAPED_MAX`], leaving fewer: one round may reap a fork bomb's tens of
/// thousands of zombies.
fn record_full(ledger: &mut Ledger, orphans: &mut Vec<ReapedProc>) {
    while orphans.len() >= REAPED_MAX {
        let processes = orphans.drain(..REAPED_MAX).collect();
        ledger.append(Event::Reaped(Reaped { processes }));
    }
}

/// The record of a held process just reaped: what its bind read.
fn reaped_held(fd: &VerifiedPidFd, status: Status) -> ReapedProc {
    let p = fd.proc();
    ReapedProc {
        pid: p.pid,
        start_time: Some(p.start_time),
        comm: Some(p.comm.clone()),
        status,
    }
}

/// Reaps, then finishes every job whose leader exited (its record and
/// reply). `stopped_for` is why the action is stopping (`None`: running);
/// a trigger made while finishing one job (excess output on its last read,
/// a record that could not be made durable) stops the action then and
/// there, so the jobs finished after it are finished as stopped.
/// Returns the reaping, and why the action is stopping after it.
pub fn reap_and_finish(
    jobs: &mut Jobs,
    ledger: &mut Ledger,
    src: &mut Sources,
    fx: &mut Effects,
    mut stopped_for: Option<StopReason>,
    held: Option<&mut Held>,
) -> (Reaping, Option<StopReason>) {
    let r = reap(jobs, ledger, held);
    for &(num, status) in &r.exited {
        jobs.finish(num, status, stopped_for, src, ledger, fx);
        let failed = ledger.failure_pending().then_some(StopReason::AuditFailure);
        stopped_for = stopped_for.or(fx.first_trigger()).or(failed);
    }
    (r, stopped_for)
}

/// While running, a job's exit is followed by the abandonment check.
pub struct Running {
    pub me: Ident,
    /// exec mode, no close yet: the action closes itself once its job is gone.
    pub exec_closes: bool,
}

/// Reaps and finishes (see [`reap_and_finish`]); while `running`, a job
/// exit is followed by [`after_job_exit`] (a trigger), or in exec mode by
/// the close. Returns the last peek.
pub fn reap_all(
    jobs: &mut Jobs,
    ledger: &mut Ledger,
    src: &mut Sources,
    fx: &mut Effects,
    stopped_for: Option<StopReason>,
    running: Option<Running>,
    held: Option<&mut Held>,
) -> Peek {
    let (r, stopped_for) = reap_and_finish(jobs, ledger, src, fx, stopped_for, held);
    let still_running = running.filter(|_| stopped_for.is_none() && !r.exited.is_empty());
    if let Some(run) = still_running {
        match after_job_exit(&r.last, run.me, jobs, ledger) {
            Some(t) => fx.trigger(t),
            None if run.exec_closes && jobs.is_empty() => fx.close(Closer::Own),
            None => {}
        }
    }
    r.last
}

/// One scan, classified.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Classified {
    /// Live descendants outside every running job: the action must stop.
    pub abandoned: Vec<Proc>,
    /// Live descendants whose uids are not uniformly the watchdog's.
    pub unproven: Vec<(Stat, Uids)>,
}

/// The abandonment rule. `scan` holds each live or zombie descendant with
/// its uids (`None`: gone since the scan, so not counted); `leaders` and
/// `sessions` are the running jobs' leader pids and session ids.
pub fn classify(
    scan: &[(Stat, Option<Uids>)],
    leaders: &HashSet<i32>,
    sessions: &HashSet<i32>,
    uid: u32,
) -> Classified {
    let mut out = Classified::default();
    for (st, uids) in scan.iter().filter(|(s, _)| !s.is_zombie()) {
        let Some(uids) = uids else { continue };
        if uids.uniform() != Some(uid) {
            out.unproven.push((st.clone(), *uids));
        } else if !leaders.contains(&st.pid) && !sessions.contains(&st.sid) {
            out.abandoned.push(st.to_proc(uids.real));
        }
    }
    out
}

/// After a leader exited while running: scans and classifies. `last` is
/// what `waitid` said after reaping; with ECHILD there is no descendant at
/// all (every orphan comes back to the subreaper) and `/proc` is not read.
/// Unprovable descendants are recorded as uncertain mappings here.
pub fn after_job_exit(last: &Peek, me: Ident, jobs: &Jobs, ledger: &mut Ledger) -> Option<Trigger> {
    let scan = match last.none_left(me.pid) {
        true => Vec::new(),
        false => match descendants(me.pid) {
            Ok(s) => s,
            Err(e) => {
                let detail = format!("cannot scan /proc: {e}");
                return Some(Trigger::new(StopReason::MappingRefused, detail));
            }
        },
    };
    let leaders: HashSet<i32> = jobs.running().map(|j| j.leader.pid()).collect();
    let sessions: HashSet<i32> = jobs.running().map(|j| j.sid).collect();
    let scan: Vec<(Stat, Option<Uids>)> = scan
        .into_iter()
        .filter(|s| !s.is_zombie())
        .map(|s| {
            let uids = read_uids(s.pid).ok();
            (s, uids)
        })
        .collect();
    let found = classify(&scan, &leaders, &sessions, me.uid);
    if !found.unproven.is_empty() {
        let n = found.unproven.len();
        let mut procs = Vec::new();
        for (st, uids) in &found.unproven {
            let detail = format!("uid {} / euid {}", uids.real, uids.effective);
            ledger.uncertain(st, Uncertainty::UidMismatch, &detail);
            procs.push(st.to_proc(uids.real));
        }
        let detail = format!("{n} descendant(s) no longer have the watchdog's uid");
        return Some(Trigger::new(StopReason::MappingRefused, detail).processes(procs));
    }
    if !found.abandoned.is_empty() {
        let n = found.abandoned.len();
        let detail = format!("{n} descendant(s) outlived their job");
        return Some(Trigger::new(StopReason::Abandoned, detail).processes(found.abandoned));
    }
    None
}

/// At close with no job running: any descendant left is abandoned.
/// `Ok(None)` when none is left.
pub fn left_at_close(me: Ident) -> Result<Option<Trigger>, Trigger> {
    match descendants(me.pid) {
        Ok(scan) if scan.is_empty() => Ok(None),
        Ok(scan) => {
            let left: Vec<Proc> = scan
                .iter()
                // Named in the record only; every one of them is stopped.
                .map(|s| s.to_proc(real_uid(s.pid).unwrap_or(UNKNOWN_UID)))
                .collect();
            let detail = format!("{} descendant(s) left at close", left.len());
            Ok(Some(
                Trigger::new(StopReason::Abandoned, detail).processes(left),
            ))
        }
        Err(e) => Err(Trigger::new(
            StopReason::MappingRefused,
            format!("cannot scan /proc: {e}"),
        )),
    }
}

/// The stop procedure's view, lent for one step. The loop reaped (and
/// applied what finishing the jobs returned) just before the step, so the
/// jobs' records and replies come before the step's sweep, as they did
/// when the stopper reaped itself; `peek` is what that reaping said.
pub struct StopDesk<'a> {
    pub me: Ident,
    pub ledger: &'a mut Ledger,
    pub peek: Peek,
    pub group: Option<&'a ActionGroup>,
    pub src: &'a mut Sources,
}

impl StopHost for StopDesk<'_> {
    fn me(&self) -> Ident {
        self.me
    }

    fn append(&mut self, ev: Event) {
        self.ledger.append(ev);
    }

    fn sync(&mut self) {
        self.ledger.sync();
    }

    fn reap(&mut self) -> Peek {
        std::mem::replace(&mut self.peek, Peek::NothingWaitable)
    }

    fn uncertain(&mut self, st: &Stat, reason: Uncertainty, detail: &str) {
        self.ledger.uncertain(st, reason, detail);
    }

    fn foreign(&mut self, process: Proc, why: &str) {
        self.ledger.foreign(process, why);
    }

    fn group(&self) -> Option<&ActionGroup> {
        self.group
    }

    fn watch(&mut self, fd: &VerifiedPidFd) -> bool {
        let (raw, src) = (fd.as_fd().as_raw_fd(), Source::Exited(fd.pid()));
        self.src.add(raw, src, Interest::READABLE).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, sid: i32, state: u8) -> Stat {
        Stat {
            pid,
            comm: format!("p{pid}"),
            state,
            ppid: 1,
            sid,
            start_time: 100 + pid as u64,
            threads: 1,
        }
    }

    fn uids(u: u32) -> Option<Uids> {
        Some(Uids {
            real: u,
            effective: u,
            saved: u,
            fs: u,
        })
    }

    #[test]
    fn leaders_and_session_members_are_owned_others_abandoned() {
        let leaders = HashSet::from([10]);
        let sessions = HashSet::from([10]);
        let scan = vec![
            (stat(10, 10, b'S'), uids(7)), // a running job's leader
            (stat(11, 10, b'S'), uids(7)), // in its session
            (stat(12, 12, b'S'), uids(7)), // setsid escapee
            (stat(13, 99, b'Z'), uids(7)), // a zombie: being reaped, not counted
            (stat(14, 99, b'S'), None),    // gone since the scan
        ];
        let c = classify(&scan, &leaders, &sessions, 7);
        assert!(c.unproven.is_empty());
        let pids: Vec<i32> = c.abandoned.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![12]);
    }

    #[test]
    fn a_changed_uid_is_unproven_even_inside_a_job() {
        let leaders = HashSet::from([10]);
        let sessions = HashSet::from([10]);
        let mut setuid = uids(7).unwrap();
        setuid.effective = 0;
        let scan = vec![
            (stat(11, 10, b'S'), Some(setuid)),
            (stat(12, 12, b'S'), uids(8)),
        ];
        let c = classify(&scan, &leaders, &sessions, 7);
        assert!(c.abandoned.is_empty());
        let pids: Vec<i32> = c.unproven.iter().map(|(s, _)| s.pid).collect();
        assert_eq!(pids, vec![11, 12]);
    }
}
