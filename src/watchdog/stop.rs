//! The stop procedure (SPEC 3.5), all of it, in one place: what a trigger
//! is and records, and the stepped procedure it starts.
//!
//! ```text
//! trigger ─► ASK (≤ half the grace) ─► TERM (rest of grace) ─► KILL (bound) ─► done
//!            each running job's        scan, bind, verify,     scan, bind, verify,
//!            leader: its stop signal   SIGTERM+SIGCONT to      SIGKILL to every
//!            + SIGCONT; nothing else   every newcomer          newcomer; reap
//! ```
//!
//! The ask step (SPEC 3.5 step 3) lets a runtime shut its own tree down:
//! only the leaders are signalled, once; it ends when every leader has
//! exited or half the TERM grace has passed (an `ask_ended` record says
//! which), and then TERM goes to everything still alive. With no job
//! running (abandoned, a close that found leftovers) it is empty and TERM
//! goes to all at once; with no grace at all the stop starts at KILL.
//!
//! Every step first reaps (jobs through their own pidfds, adopted orphans
//! by the pid a `WNOWAIT` peek returned), then checks for the end: `waitid`
//! says ECHILD *and* a `/proc` scan finds no descendant. The TERM stage ends
//! early when that holds; the KILL stage repeats sweeps until it holds or
//! the kill bound runs out (the proof then fails). A sweep's record is made
//! durable before any of its signals is sent; only verified pidfds are
//! signalled; "already signalled" is keyed by (pid, start time).
//!
//! A [`Trigger`] (`trigger.rs`) is a value: rooms return one (as an effect) and the loop,
//! which alone moves the phase, records it with [`Trigger::record`] and,
//! for the first, starts a [`Stopper`]. Later triggers only add a record.
//!
//! The loop calls [`Stopper::step`] at the instant the previous step asked
//! for, and early when reaping finds no child left (the end may have come);
//! in between it only reaps. Rescans are timed because a process forked
//! just before a sweep and orphaned afterwards produces no event for the
//! watchdog.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::stop_group as group;
use crate::audit::record::{
    no_live_or_waitable, AskEnd, AskEnded, Event, Ident, Link, Sig, SignalFailed, SignalSweep,
    Stage, StopCompleted, StopReason, Uncertainty,
};
use crate::clock::millis;
use crate::contain::group::ActionGroup;
use crate::process::identity::Stat;
use crate::process::pidfd::{bind, BindError, VerifiedPidFd};
use crate::process::reap::Peek;
use crate::process::scan::descendants;

/// Longest a TERM step waits for its group to report `frozen 1`.
const FREEZE_WAIT: Duration = Duration::from_millis(50);

/// How many members a TERM sweep binds between looks at the clock.
const CUT_EVERY: usize = 16;

/// Rescan interval while waiting out the TERM grace.
const TERM_RESCAN: Duration = Duration::from_millis(10);
/// Rescan interval between KILL sweeps.
const KILL_RESCAN: Duration = Duration::from_millis(4);
/// After a rescan that found nothing new to signal, the interval doubles,
/// up to this many times (TERM: 10 ms to 160 ms; KILL: 4 ms to 64 ms); a
/// newcomer resets it. A dying tree is then not rescanned (a `stat` read
/// of every visible process) dozens of times while it exits; the end is
/// noticed without a timer, by the loop, when the last child is reaped.
const MAX_BACKOFF: u32 = 4;
/// Targets in a sweep's first record part: small, so the first signals go
/// out after binding a few processes, not all of them.
const FIRST_PART: usize = 32;
/// Targets in each later part (one durable record each; far below the
/// audit line cap).
const PART: usize = 512;
/// Descriptors the stopper leaves free for everything else (the log, the
/// FIFO, replies, a caller check), whatever the limit (SPEC 3.5
/// "Descriptors"). The root's own stop and close need none: it is bound.
const RESERVE: usize = 16;

/// The soft descriptor limit (`RLIMIT_NOFILE`); 0 if it cannot be read.
fn soft_limit() -> usize {
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
/// part, and the closure members passed over (for the replay's parent links).
struct Part {
    sweep: u32,
    index: u32,
    targets: Vec<VerifiedPidFd>,
    others: Vec<Link>,
}

/// A running job's leader, asked first when a stop begins (SPEC 3.5 step
/// 3), with the signal its request chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub job: u64,
    pub pid: i32,
    pub start_time: u64,
    pub signal: Sig,
}

impl Ask {
    fn key(&self) -> Key {
        (self.pid, self.start_time)
    }
}

pub use super::trigger::Trigger;

/// What the stop procedure needs from the event loop.
pub trait StopHost {
    /// The watchdog's own identity (root of the closure, uid to match).
    fn me(&self) -> Ident;
    /// Appends a record (durable at the next `sync`).
    fn append(&mut self, ev: Event);
    /// Makes appended records durable. Signals go out even if this fails:
    /// stopping everything comes before the evidence.
    fn sync(&mut self);
    /// Reaps every waitable child (or has just done so) and returns what
    /// `waitid` said after.
    fn reap(&mut self) -> Peek;
    /// Records a live descendant that could not be proven (once per process).
    fn uncertain(&mut self, st: &Stat, reason: Uncertainty, detail: &str);
    /// The action's cgroup in cgroup mode (SPEC 8).
    fn group(&self) -> Option<&ActionGroup> {
        None
    }
}

pub enum Step {
    /// Call again at this instant (or sooner, on any event).
    Wait(Instant),
    Done(StopCompleted),
}

type Key = (i32, u64);

pub struct Stopper {
    pub reason: StopReason,
    started: Instant,
    /// The leaders to ask first; emptied once the ask is sent.
    asks: Vec<Ask>,
    /// The leaders asked, until each is seen to have exited.
    asked: Vec<Ask>,
    /// Half the TERM grace: when the ask step ends at the latest.
    ask_until: Instant,
    grace_until: Instant,
    kill_until: Instant,
    kill_bound: Duration,
    stage: Stage,
    sweeps: u32,
    /// Consecutive rescans that found nothing new to signal.
    quiet: u32,
    termed: HashSet<Key>,
    killed: HashSet<Key>,
    uncertain: HashSet<Key>,
    /// Processes whose bind failed for lack of descriptors: bound again in
    /// every later sweep; uncertain only if still unbound, alive, when the
    /// kill bound runs out.
    retry: HashMap<Key, Stat>,
    /// Processes signalled, held by their pidfd until seen to have exited,
    /// as long as descriptors allow; beyond that the identity is kept (in
    /// `termed`/`killed`) and the fd closed, and the proof rests on the
    /// scan and ECHILD.
    held: HashMap<Key, VerifiedPidFd>,
    /// The soft descriptor limit, read when the stop began.
    soft: usize,
    /// cgroup mode: `cgroup.kill` was written (once, at the KILL stage).
    group_killed: bool,
}

impl Stopper {
    /// A stop beginning at `now`; `asks`: the running jobs' leaders.
    pub fn new(
        reason: StopReason,
        now: Instant,
        grace: Duration,
        kill_bound: Duration,
        asks: Vec<Ask>,
    ) -> Stopper {
        let grace_until = now + grace;
        let stage = match () {
            _ if grace.is_zero() => Stage::Kill,
            _ if asks.is_empty() => Stage::Term,
            _ => Stage::Ask,
        };
        Stopper {
            reason,
            started: now,
            asks: if stage == Stage::Ask {
                asks
            } else {
                Vec::new()
            },
            asked: Vec::new(),
            ask_until: now + grace / 2,
            grace_until,
            kill_until: grace_until + kill_bound,
            kill_bound,
            stage,
            sweeps: 0,
            quiet: 0,
            termed: HashSet::new(),
            killed: HashSet::new(),
            uncertain: HashSet::new(),
            retry: HashMap::new(),
            held: HashMap::new(),
            soft: soft_limit(),
            group_killed: false,
        }
    }

    /// One step of the procedure. Never blocks.
    ///
    /// cgroup mode: a TERM step runs with the group frozen (thawed before
    /// it returns): a fork storm of thousands of runnable members would
    /// otherwise leave the watchdog a thousandth of a CPU (a TERM sweep
    /// took seconds past the grace), and frozen members cannot fork past
    /// the sweep. Their TERM is delivered when they thaw.
    pub fn step(&mut self, host: &mut impl StopHost, now: Instant) -> Step {
        let terming = match self.stage {
            Stage::Term => now < self.grace_until,
            Stage::Ask => now >= self.ask_until && now < self.grace_until,
            Stage::Kill => false,
        };
        let frozen = terming
            && host
                .group()
                .is_some_and(|g| matches!(g.freeze(FREEZE_WAIT), Ok(true)));
        let step = self.step_unfrozen(host, now);
        if frozen {
            if let Some(g) = host.group() {
                let _ = g.thaw();
            }
        }
        step
    }

    fn step_unfrozen(&mut self, host: &mut impl StopHost, now: Instant) -> Step {
        // cgroup mode: `cgroup.kill` goes out the moment the grace is over,
        // before this step's reaping and scanning (thousands of members
        // dying of TERM make both slow).
        let grace_over =
            self.stage == Stage::Kill || (self.stage == Stage::Term && now >= self.grace_until);
        if grace_over && !self.group_killed && host.group().is_some() {
            self.kill_group(host);
        }
        let peek = host.reap();
        let me = host.me();
        let (mut scan, mut scan_error) = match descendants(me.pid) {
            Ok(s) => (s, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        if let Some(g) = host.group() {
            // The group's members count as well (SPEC 8): one the closure
            // missed keeps the stop going (and binds only if its parent is
            // the watchdog or a member).
            if let Err(e) = group::add_members(g, &mut scan) {
                scan_error.get_or_insert(e.to_string());
            }
        }
        self.held.retain(|_, fd| !fd.has_exited());
        let echild = peek == Peek::NoChildren;
        let scan_empty = scan.is_empty() && scan_error.is_none();
        if no_live_or_waitable(echild, scan_empty) {
            return Step::Done(self.completed(now, echild, scan_empty, 0));
        }
        if self.stage == Stage::Ask {
            let live: HashSet<Key> = scan
                .iter()
                .filter(|s| !s.is_zombie())
                .map(|s| (s.pid, s.start_time))
                .collect();
            self.asked.retain(|a| live.contains(&a.key()));
            let sent = self.asks.is_empty();
            let reason = match () {
                // Never before the ask went out: a first step that comes
                // late (a busy wake-up, a tiny grace) still asks.
                _ if sent && self.asked.is_empty() => Some(AskEnd::LeadersExited),
                _ if sent && now >= self.ask_until => Some(AskEnd::HalfGrace),
                _ => None,
            };
            if let Some(reason) = reason {
                host.append(Event::AskEnded(AskEnded {
                    reason,
                    after_ms: millis(now - self.started),
                    leaders_left: self.asked.len() as u64,
                }));
                self.asks.clear();
                self.asked.clear();
                self.stage = Stage::Term;
                self.quiet = 0;
            }
        }
        if self.stage == Stage::Term && now >= self.grace_until {
            self.stage = Stage::Kill;
            // The kill bound is the KILL stage's own: a TERM sweep that
            // overran the grace (a watchdog starved by a fork storm) must
            // not use it up before a single SIGKILL went out.
            self.kill_until = self.kill_until.max(now + self.kill_bound);
        }
        if self.stage == Stage::Kill && now >= self.kill_until {
            let live: HashSet<Key> = scan.iter().map(|s| (s.pid, s.start_time)).collect();
            for (key, st) in std::mem::take(&mut self.retry) {
                if live.contains(&key) {
                    let detail = "still no descriptor to bind it when the kill bound ran out";
                    host.uncertain(&st, Uncertainty::PidfdFailed, detail);
                }
            }
            let left = scan.iter().filter(|s| !s.is_zombie()).count() as u64;
            return Step::Done(self.completed(now, echild, scan_empty, left));
        }
        if self.stage == Stage::Kill && !self.group_killed {
            self.kill_group(host);
        }
        let signalled = match self.stage {
            Stage::Ask => self.ask(host, &scan),
            Stage::Term | Stage::Kill => self.sweep(host, &scan),
        };
        let busy = signalled || !self.retry.is_empty(); // a bind to retry soon
        self.quiet = if busy { 0 } else { self.quiet + 1 };
        let backoff = 1 << self.quiet.min(MAX_BACKOFF);
        let next = match self.stage {
            Stage::Ask => (now + TERM_RESCAN * backoff).min(self.ask_until),
            Stage::Term => (now + TERM_RESCAN * backoff).min(self.grace_until),
            Stage::Kill => (now + KILL_RESCAN * backoff).min(self.kill_until),
        };
        Step::Wait(next)
    }

    /// The ask step's one sweep: each leader still alive is bound and
    /// verified like any target and gets its own stop signal and SIGCONT,
    /// one record part per signal. Nothing else is signalled. A leader
    /// that cannot be bound now is left to the TERM stage (its bind is
    /// retried there). Returns whether anything was signalled.
    fn ask(&mut self, host: &mut impl StopHost, scan: &[Stat]) -> bool {
        if self.asks.is_empty() {
            host.sync();
            return false;
        }
        let me = host.me();
        let members: HashSet<i32> = scan.iter().map(|s| s.pid).collect();
        let parent_ok = |p: i32| p == me.pid || members.contains(&p);
        let asks = std::mem::take(&mut self.asks);
        let mut part = Part {
            sweep: self.sweeps + 1,
            index: 0,
            targets: Vec::new(),
            others: Vec::new(),
        };
        let mut seen = HashSet::new();
        let signals: Vec<Sig> = asks
            .iter()
            .map(|a| a.signal)
            .filter(|s| seen.insert(*s))
            .collect();
        for sig in signals {
            for st in scan.iter().filter(|s| !s.is_zombie()) {
                let key = (st.pid, st.start_time);
                let Some(ask) = asks.iter().find(|a| a.key() == key && a.signal == sig) else {
                    continue;
                };
                match bind(st, me.uid, parent_ok) {
                    Ok(fd) => {
                        part.targets.push(fd);
                        self.asked.push(*ask);
                    }
                    Err(BindError::Gone) => {}
                    // Not asked, but still a live leader: the ask waits for
                    // it as for the others (TERM retries the bind).
                    Err(BindError::NoDescriptors(_)) => self.asked.push(*ask),
                    Err(BindError::Uncertain { reason, detail }) => {
                        self.uncertain.insert(key);
                        host.uncertain(st, reason, &detail);
                    }
                }
            }
            if !part.targets.is_empty() {
                self.signal_part(host, &mut part, &[sig, Sig::Cont]);
            }
        }
        if part.index == 0 {
            host.sync();
            return false;
        }
        self.sweeps = part.sweep;
        true
    }

    /// cgroup mode, the KILL stage's first step: `cgroup.kill`, once,
    /// recorded durably before it is written.
    fn kill_group(&mut self, host: &mut impl StopHost) {
        self.group_killed = true;
        let Some(ev) = host.group().map(group::kill_record) else {
            return;
        };
        host.append(ev);
        host.sync();
        if let Some(ev) = host.group().and_then(group::kill_now) {
            host.append(ev);
        }
    }

    /// The ask step is under way: a leader's exit may end it.
    pub fn asking(&self) -> bool {
        self.stage == Stage::Ask
    }

    /// Bind and verify every live closure member not yet signalled in this
    /// stage, record the sweep durably, then signal. Returns whether there
    /// was anything to signal.
    fn sweep(&mut self, host: &mut impl StopHost, scan: &[Stat]) -> bool {
        let signals: &[Sig] = match self.stage {
            Stage::Kill => &[Sig::Kill],
            Stage::Ask | Stage::Term => &[Sig::Term, Sig::Cont],
        };
        let me = host.me();
        let members: HashSet<i32> = scan.iter().map(|s| s.pid).collect();
        let parent_ok = |p: i32| p == me.pid || members.contains(&p);
        let stage = self.stage;
        let mut part = Part {
            sweep: self.sweeps + 1,
            index: 0,
            targets: Vec::new(),
            others: Vec::new(),
        };
        let mut spare = self.spare(0);
        // A TERM sweep ends at the grace: a fork storm that starves the
        // watchdog (one part of 512 binds took 6 s at load 1000) must not
        // hold the KILL stage off (in cgroup mode, `cgroup.kill`: all at
        // once). What it did not reach gets SIGKILL next.
        let cut = (stage == Stage::Term).then_some(self.grace_until);
        for (i, st) in scan.iter().enumerate() {
            if i % CUT_EVERY == CUT_EVERY - 1 && cut.is_some_and(|c| Instant::now() >= c) {
                break;
            }
            let key = (st.pid, st.start_time);
            let done = match stage {
                Stage::Ask | Stage::Term => {
                    self.termed.contains(&key) || self.killed.contains(&key)
                }
                Stage::Kill => self.killed.contains(&key),
            };
            let link = Link {
                pid: st.pid,
                ppid: st.ppid,
            };
            if st.is_zombie() || done || self.uncertain.contains(&key) {
                part.others.push(link);
                continue;
            }
            if spare == 0 {
                // Make room: signal what is bound, let go of held fds.
                if !part.targets.is_empty() {
                    self.signal_part(host, &mut part, signals);
                }
                self.held.clear();
                spare = self.spare(part.targets.len());
            }
            match bind(st, me.uid, parent_ok) {
                Ok(fd) => {
                    self.retry.remove(&key);
                    spare = spare.saturating_sub(1);
                    part.targets.push(fd);
                }
                Err(BindError::Gone) => part.others.push(link),
                Err(BindError::NoDescriptors(_)) => {
                    part.others.push(link);
                    self.retry.insert(key, st.clone());
                    spare = 0;
                }
                Err(BindError::Uncertain { reason, detail }) => {
                    part.others.push(link);
                    self.uncertain.insert(key);
                    host.uncertain(st, reason, &detail);
                }
            }
            // Signal in parts as the scan goes: in a fork storm, binding
            // thousands first would leave all of them running meanwhile.
            let limit = if part.index == 0 { FIRST_PART } else { PART };
            if part.targets.len() >= limit || (spare == 0 && !part.targets.is_empty()) {
                self.signal_part(host, &mut part, signals);
            }
        }
        if !part.targets.is_empty() {
            self.signal_part(host, &mut part, signals);
        }
        if part.index == 0 {
            host.sync(); // nothing to signal; what was appended is still made durable
            false
        } else {
            self.sweeps = part.sweep;
            true
        }
    }

    /// Records one part of a sweep durably, then signals its targets with
    /// `signals`, in order.
    fn signal_part(&mut self, host: &mut impl StopHost, part: &mut Part, signals: &[Sig]) {
        let stage = self.stage;
        let targets = std::mem::take(&mut part.targets);
        host.append(Event::SignalSweep(SignalSweep {
            sweep: part.sweep,
            part: part.index,
            stage,
            signals: signals.to_vec(),
            targets: targets.iter().map(|t| t.proc().clone()).collect(),
            others: std::mem::take(&mut part.others),
        }));
        host.sync();
        part.index += 1;
        for t in targets {
            let key = (t.pid(), t.proc().start_time);
            for &sig in signals {
                let sent = Signal::try_from(sig.number()).map_err(std::io::Error::from);
                if let Err(e) = sent.and_then(|s| t.signal(s)) {
                    host.append(Event::SignalFailed(SignalFailed {
                        sweep: part.sweep,
                        target: t.ident(),
                        signal: sig,
                        errno: e.raw_os_error().unwrap_or(0),
                    }));
                }
            }
            match stage {
                Stage::Ask => false, // asked leaders still get TERM later
                Stage::Term => self.termed.insert(key),
                Stage::Kill => self.killed.insert(key),
            };
            // Hold it while descriptors allow (the reserve stays free).
            if self.held.len() < self.soft / 2 {
                self.held.insert(key, t);
            }
        }
    }

    fn completed(
        &mut self,
        now: Instant,
        echild: bool,
        scan_empty: bool,
        left: u64,
    ) -> StopCompleted {
        StopCompleted {
            reason: self.reason,
            sweeps: self.sweeps,
            elapsed_ms: millis(now - self.started),
            echild,
            scan_empty,
            left,
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
        let mine = self.held.len() + in_part;
        let quarter = self.soft / 4;
        if mine < quarter {
            return quarter - mine;
        }
        match open_descriptors() {
            Some(open) => self.soft.saturating_sub(open + RESERVE),
            None => 0,
        }
    }

    /// Every pidfd the stop procedure bound reports its process exited.
    pub fn held_exited(&mut self) -> bool {
        self.held.retain(|_, fd| !fd.has_exited());
        self.held.is_empty()
    }
}
