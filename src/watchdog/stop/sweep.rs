//! A sweep (docs/stop.md): bind and verify every live member the
//! census found and this stage has not signalled yet, make the sweep's
//! record durable, then signal, in parts, within the descriptors there are.
//!
//! Members come bound two ways ([`Census`]): by membership of the action's
//! group (cgroup mode with `PIDFD_GET_INFO`: the kernel says, through the
//! new pidfd, that the pinned process is in the recorded group) or by the
//! scan (start time, uid and parent read back after `pidfd_open`). A TERM
//! target gets SIGTERM, and SIGCONT only if it was seen stopped when bound
//! (the record's `cont` names them); a KILL target gets SIGKILL.

use std::collections::HashSet;
use std::time::Instant;

use super::census::Census;
use super::{StopHost, Stopper};
use crate::kinds::watchdog::{Event, Ident, Link, Sig, SignalFailed, SignalSweep, Stage};
use crate::process::identity::{read_stat, Stat};
use crate::process::pidfd::{
    bind_member, bind_scanned_child, BindError, MemberError, VerifiedPidFd,
};

/// How many members a TERM sweep binds between looks at the clock.
const CUT_EVERY: usize = 16;
/// Targets in a sweep's first record part: small, so the first signals go
/// out after binding a few processes, not all of them.
const FIRST_PART: usize = 32;
/// The most targets in one part (one durable record each; far below the
/// audit line cap). Parts double from [`FIRST_PART`] up to this: the
/// members of one part die on the other CPUs while the next is bound, so
/// a part as long as the last one keeps them busy, and a few more
/// records (one `fdatasync` each) cost less than CPUs left idle while
/// 512 members wait to be bound after the first 32 have died.
const PART: usize = 512;

/// Members passed over (`others`) in one part at most. A link is ~30
/// bytes of JSON: 16384 of them and [`PART`] targets keep a record near
/// half a MiB, under the audit line cap (1 MiB), however many processes a
/// sweep meets (a newcomer found among 40 000 zombies of a fork bomb would
/// otherwise make a record the log refuses: its signal would go out
/// unrecorded).
pub(super) const OTHERS_MAX: usize = 16384;

/// How many targets part `index` of a sweep holds at most.
fn part_limit(index: u32) -> usize {
    // 32 << 4 is 512: beyond that the cap, with no shift to overflow.
    match index {
        0..4 => FIRST_PART << index,
        _ => PART,
    }
}
/// Descriptors the stopper leaves free for everything else (the log, the
/// FIFO, replies, a caller check), whatever the limit (docs/stop.md
/// "Descriptors"). The root's own stop and close need none: it is bound.
const RESERVE: usize = 16;

/// The soft descriptor limit (`RLIMIT_NOFILE`); 0 if it cannot be read.
pub(super) fn soft_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
}

/// Descriptors open in this process now (a `/proc/self/fd` listing);
/// `None` when it cannot be listed (no descriptor left even for that).
fn open_descriptors() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count())
}

/// A sweep's record part being filled: the targets bound since the last
/// part, and the members passed over (for the replay's parent links).
pub(super) struct Part {
    pub sweep: u32,
    pub index: u32,
    pub targets: Vec<VerifiedPidFd>,
    pub others: Vec<Link>,
    /// Targets signalled by the parts written so far.
    pub signalled: usize,
}

impl Part {
    pub fn new(sweep: u32) -> Part {
        Part {
            sweep,
            index: 0,
            targets: Vec::new(),
            others: Vec::new(),
            signalled: 0,
        }
    }
}

impl Stopper {
    /// Binds and verifies every live member of `census` not yet signalled
    /// in this stage, records the sweep durably, then signals. Returns
    /// whether there was anything to signal.
    pub(super) fn sweep(&mut self, host: &mut impl StopHost, census: &Census) -> bool {
        let signals: &[Sig] = match self.stage {
            Stage::Kill => &[Sig::KILL],
            Stage::Ask | Stage::Term => &[Sig::TERM],
        };
        let me = host.me();
        let members: HashSet<i32> = census.all().map(|(s, _)| s.pid).collect();
        let parent_ok = |p: i32| p == me.pid || members.contains(&p);
        let stage = self.stage;
        let mut part = Part::new(self.sweeps + 1);
        // Parents of targets that the census does not list, passed over.
        let mut outside = HashSet::new();
        let mut spare = self.spare(0);
        // A TERM sweep ends at the grace: a fork storm that starves the
        // watchdog (one part of 512 binds took 6 s at load 1000) must not
        // hold the KILL stage off (in cgroup mode, `cgroup.kill`: all at
        // once). What it did not reach gets SIGKILL next.
        let cut = (stage == Stage::Term).then_some(self.grace_until);
        for (i, (st, group)) in census.all().enumerate() {
            if i % CUT_EVERY == CUT_EVERY - 1 && cut.is_some_and(|c| Instant::now() >= c) {
                break;
            }
            let key = (st.pid, st.start_time);
            let link = Link {
                pid: st.pid,
                ppid: st.ppid,
            };
            if st.is_zombie() || self.signalled(key) || self.uncertain.contains(&key) {
                part.others.push(link);
                continue;
            }
            if spare == 0 {
                // Make room: signal what is bound, let go of held fds.
                if !part.targets.is_empty() {
                    self.signal_part(host, &mut part, signals);
                }
                self.held.fds.clear();
                spare = self.spare(part.targets.len());
            }
            let bound = match group {
                Some(ino) => match self.bind_in_group(host, st, ino, me) {
                    Some(bound) => bound,
                    None => continue,
                },
                // No reaping happens inside a step: a child the census saw
                // is still that child.
                None => bind_scanned_child(st, me.uid, parent_ok),
            };
            let before = part.targets.len();
            self.file_bound(host, &mut part, st, link, bound, &mut spare);
            if part.targets.len() > before {
                close_lineage(&mut part, &members, &mut outside, st.ppid, me.pid);
            }
            // Signal in parts as the scan goes: in a fork storm, binding
            // thousands first would leave all of them running meanwhile.
            let limit = part_limit(part.index);
            if part.targets.len() >= limit || (spare == 0 && !part.targets.is_empty()) {
                self.signal_part(host, &mut part, signals);
            }
        }
        self.end_sweep(host, part, signals)
    }

    /// Whether the process `key` needs no signal from this stage: SIGKILLed
    /// already, or (asking or TERMing) SIGTERMed already.
    fn signalled(&self, key: (i32, u64)) -> bool {
        match self.stage {
            Stage::Ask | Stage::Term => self.termed.contains(&key) || self.killed.contains(&key),
            Stage::Kill => self.killed.contains(&key),
        }
    }

    /// Binds the census member `st` through its membership of the action's
    /// group (inode `group`), proving it the action's by its lineage.
    /// `None`: a member that is not the action's, now recorded as foreign
    /// (never signalled, left out of the census from now on). A member no
    /// longer in the group is `Gone` here: never signalled by this path; a
    /// descendant that left is found by the scan once the group is empty.
    fn bind_in_group(
        &mut self,
        host: &mut impl StopHost,
        st: &Stat,
        group: u64,
        me: Ident,
    ) -> Option<Result<VerifiedPidFd, BindError>> {
        let (proven, held) = (&mut self.proven, &self.held);
        let alive = |p: i32| held.alive(p);
        match bind_member(st.pid, group, me.uid, |s| proven.prove(s, me, alive)) {
            Ok(fd) => Some(Ok(fd)),
            Err(MemberError::Bind(e)) => Some(Err(e)),
            Err(MemberError::Foreign { process, why }) => {
                self.mark_foreign(host, process, why);
                None
            }
            Err(MemberError::NotMember | MemberError::Unsupported) => Some(Err(BindError::Gone)),
        }
    }

    /// Files the bind of census member `st` into `part`: a target, or a
    /// member passed over (gone; a placeholder found signalled already;
    /// out of descriptors, kept to retry; uncertain, reported). `spare` is
    /// what the stopper may still open after it.
    fn file_bound(
        &mut self,
        host: &mut impl StopHost,
        part: &mut Part,
        st: &Stat,
        link: Link,
        bound: Result<VerifiedPidFd, BindError>,
        spare: &mut usize,
    ) {
        let key = (st.pid, st.start_time);
        match bound {
            Ok(fd) => {
                self.retry.remove(&key);
                self.proven.insert(fd.pid(), fd.proc().start_time);
                *spare = spare.saturating_sub(1);
                let again = (fd.pid(), fd.proc().start_time);
                if again != key && (self.termed.contains(&again) || self.killed.contains(&again)) {
                    // A placeholder's bind found one already signalled.
                    part.others.push(link);
                } else {
                    part.targets.push(fd);
                }
            }
            Err(BindError::Gone) => part.others.push(link),
            Err(BindError::NoDescriptors(_)) => {
                part.others.push(link);
                if let Some(st) = known(st) {
                    self.retry.insert((st.pid, st.start_time), st);
                }
                *spare = 0;
            }
            Err(BindError::Uncertain { reason, detail }) => {
                part.others.push(link);
                if let Some(st) = known(st) {
                    self.uncertain.insert((st.pid, st.start_time));
                    host.uncertain(&st, reason, &detail);
                }
            }
        }
    }

    /// Ends a sweep: signals the last part's targets, or records the
    /// members passed over after the last part. Returns whether anything
    /// was signalled; a sweep that recorded anything counts (`sweeps`).
    fn end_sweep(&mut self, host: &mut impl StopHost, mut part: Part, signals: &[Sig]) -> bool {
        if !part.targets.is_empty() {
            self.signal_part(host, &mut part, signals);
        } else if part.index > 0 && !part.others.is_empty() {
            // The members passed over after the last part are recorded too
            // (the replay's parent links span the whole sweep); no signal
            // waits on them, so the next sync makes them durable.
            others_only(host, &mut part, self.stage, signals, 0);
        }
        if part.index == 0 {
            host.sync(); // nothing to signal; what was appended is still made durable
            false
        } else {
            // Recorded (if only members passed over): it counts as a sweep.
            self.sweeps = part.sweep;
            part.signalled > 0
        }
    }

    /// Records one part of a sweep durably, then signals its targets with
    /// `signals`, in order; in a TERM sweep, SIGCONT follows for each
    /// target seen stopped when it was bound (and only for those: the
    /// record's `cont`).
    pub(super) fn signal_part(
        &mut self,
        host: &mut impl StopHost,
        part: &mut Part,
        signals: &[Sig],
    ) {
        let stage = self.stage;
        // Members passed over beyond one record's share go first, in parts
        // of their own (made durable by this part's sync).
        others_only(host, part, stage, signals, OTHERS_MAX);
        let targets = std::mem::take(&mut part.targets);
        let cont: Vec<i32> = match stage {
            Stage::Term => targets
                .iter()
                .filter(|t| t.seen_stopped())
                .map(|t| t.pid())
                .collect(),
            Stage::Ask | Stage::Kill => Vec::new(),
        };
        host.append(Event::SignalSweep(SignalSweep {
            sweep: part.sweep,
            part: part.index,
            stage,
            signals: signals.to_vec(),
            targets: targets.iter().map(|t| t.proc().clone()).collect(),
            others: std::mem::take(&mut part.others),
            cont,
        }));
        host.sync();
        part.index += 1;
        part.signalled += targets.len();
        for t in targets {
            let key = (t.pid(), t.proc().start_time);
            let then_cont = (stage == Stage::Term && t.seen_stopped()).then_some(Sig::CONT);
            for &sig in signals.iter().chain(then_cont.as_ref()) {
                if let Err(e) = t.signal_number(sig.number()) {
                    host.append(Event::SignalFailed(SignalFailed {
                        sweep: part.sweep,
                        target: t.ident(),
                        signal: sig,
                        errno: e.raw_os_error().unwrap_or(0),
                    }));
                    if stage == Stage::Ask {
                        // Not asked after all: the ask does not wait for it
                        // (under timeout it would wait as long as it lives).
                        let before = self.asked.len();
                        self.asked.retain(|a| a.key() != key);
                        self.ask_failed |= self.asked.len() < before;
                    }
                }
            }
            match stage {
                Stage::Ask => false, // asked leaders still get TERM later
                Stage::Term => self.termed.insert(key),
                Stage::Kill => self.killed.insert(key),
            };
            // Hold it while descriptors allow (the reserve stays free)
            // and the loop can be told of its exit.
            if self.held.fds.len() < self.soft / 2 && host.watch(&t) {
                self.held.fds.insert(key.0, t);
            }
        }
    }

    /// Descriptors the stopper may still open, with `in_part` bound and
    /// not yet signalled: the soft limit less what is open and the reserve.
    /// While the stopper's own descriptors are under a quarter of the limit
    /// nothing is counted (a `/proc/self/fd` listing per sweep would cost a
    /// fork storm's stop dearly) and a quarter is what it may take; beyond
    /// that every descriptor is counted. A bind that fails for lack of them
    /// all the same is retried later.
    fn spare(&self, in_part: usize) -> usize {
        let mine = self.held.fds.len() + in_part;
        let quarter = self.soft / 4;
        if mine < quarter {
            return quarter - mine;
        }
        match open_descriptors() {
            Some(open) => self.soft.saturating_sub(open + RESERVE),
            None => 0,
        }
    }
}

/// Records `part`'s members passed over, [`OTHERS_MAX`] a part with no
/// target, until at most `keep` are left (for the part being written).
/// Only a sweep that records anything records them: a rescan that
/// signals nothing writes nothing, however many it passed over.
fn others_only(
    host: &mut impl StopHost,
    part: &mut Part,
    stage: Stage,
    signals: &[Sig],
    keep: usize,
) {
    while part.others.len() > keep {
        let n = part.others.len().min(OTHERS_MAX);
        host.append(Event::SignalSweep(SignalSweep {
            sweep: part.sweep,
            part: part.index,
            stage,
            signals: signals.to_vec(),
            targets: Vec::new(),
            others: part.others.drain(..n).collect(),
            cont: Vec::new(),
        }));
        part.index += 1;
    }
}

/// `st` itself, or for a census placeholder (a group member not read yet,
/// see [`Census`]) what `/proc` says of it now; `None` if it is gone.
/// Lists as passed over (`others`) each ancestor of a target, from
/// `ppid` up, that the census does not list, until the watchdog or a
/// census member: a zombie (a job leader that exited with a child of it
/// still running) is not in its cgroup's `cgroup.procs`, yet it is still
/// its child's parent, and the log's sweep must name every target's
/// parent (docs/stop.md; `verify` checks that closure). Each one once per
/// sweep (`outside`); at most 64 steps; an ancestor that cannot be read
/// ends the walk (what it left is the verifier's to judge).
fn close_lineage(
    part: &mut Part,
    members: &HashSet<i32>,
    outside: &mut HashSet<i32>,
    mut ppid: i32,
    me: i32,
) {
    for _ in 0..64 {
        if ppid == me || ppid <= 1 || members.contains(&ppid) || !outside.insert(ppid) {
            return;
        }
        let Ok(st) = read_stat(ppid) else {
            return;
        };
        part.others.push(Link {
            pid: ppid,
            ppid: st.ppid,
        });
        ppid = st.ppid;
    }
}

fn known(st: &Stat) -> Option<Stat> {
    if !super::census::is_placeholder(st) {
        return Some(st.clone());
    }
    read_stat(st.pid).ok()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::census::Census;
    use super::super::{StopHost, Stopper};
    use crate::kinds::watchdog::{AskSpan, Event, Ident, StopReason, Uncertainty};
    use crate::log::writer::MAX_LINE;
    use crate::process::identity::{read_stat, Stat};
    use crate::process::reap::Peek;
    use std::os::unix::process::ExitStatusExt;

    /// Keeps what the stopper appends; `me` is this test process (pid).
    struct Host(Vec<Event>, i32);

    impl StopHost for Host {
        fn me(&self) -> Ident {
            Ident {
                pid: self.1,
                start_time: read_stat(self.1).unwrap().start_time,
                uid: nix::unistd::geteuid().as_raw(),
            }
        }
        fn append(&mut self, ev: Event) {
            self.0.push(ev);
        }
        fn sync(&mut self) {}
        fn reap(&mut self) -> Peek {
            Peek::NoChildren
        }
        fn uncertain(&mut self, _: &Stat, _: Uncertainty, _: &str) {}
    }

    /// A newcomer met after 40 000 members passed over (zombies) is
    /// recorded in parts of one sweep, each under the audit line cap,
    /// together listing every member; a sweep that meets only the zombies
    /// signals and records nothing. The newcomer is this test's own child
    /// (`sleep`), bound by its pidfd and TERMed.
    #[test]
    fn a_sweep_that_passes_thousands_over_stays_under_the_line_cap() {
        let grace = Duration::from_secs(60);
        let ask = AskSpan::HalfGrace;
        let reason = StopReason::Deadline;
        let bound = Duration::from_secs(3);
        let new = || Stopper::new(reason, Instant::now(), grace, bound, ask, Vec::new());
        let mut host = Host(Vec::new(), std::process::id() as i32);
        assert!(!new().sweep(&mut host, &Census::of_zombies(40_000)));
        assert!(host.0.is_empty(), "nothing recorded: {:?}", host.0.first());

        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let mut census = Census::of_zombies(40_000);
        census.push_closure(read_stat(child.id() as i32).unwrap());
        let mut stopper = new();
        let signalled = stopper.sweep(&mut host, &census);
        let status = child.wait().unwrap(); // reaped whatever the sweep did
        assert!(signalled, "the child was signalled");
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        let mut listed = 0;
        let mut targets = 0;
        for (i, ev) in host.0.iter().enumerate() {
            let Event::SignalSweep(s) = ev else {
                panic!("not a sweep part: {ev:?}");
            };
            assert_eq!((s.sweep, s.part), (1, i as u32));
            assert!(s.others.len() <= super::OTHERS_MAX);
            let bytes = serde_json::to_vec(s).unwrap().len();
            assert!(bytes < MAX_LINE / 2, "part {i}: {bytes} bytes");
            listed += s.others.len();
            targets += s.targets.len();
        }
        assert_eq!((listed, targets), (40_000, 1));
        assert!(host.0.len() >= 3, "{} parts", host.0.len());
        assert_eq!(stopper.sweeps, 1);
    }

    #[test]
    fn parts_double_up_to_the_cap() {
        let limits: Vec<usize> = (0..7).map(super::part_limit).collect();
        assert_eq!(limits, [32, 64, 128, 256, 512, 512, 512]);
        assert_eq!(super::part_limit(63), 512);
        assert_eq!(super::part_limit(u32::MAX), 512);
    }
}
