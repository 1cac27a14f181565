//! The stop procedure (docs/stop.md; cgroup mode too): the stepped
//! procedure a first trigger starts. The ask is `ask.rs`, who a step sees
//! `census.rs`, binding and signalling `sweep.rs`, the cgroup steps
//! `group.rs`.
//!
//! ```text
//! trigger ─► ASK (≤ half the grace) ─► TERM (rest of grace) ─► KILL (bound) ─► done
//!            each running job's        census, bind, verify,   cgroup.kill once (cgroup
//!            leader: its stop signal   SIGTERM to every        mode); census, bind, verify,
//!            + SIGCONT; nothing else   newcomer, SIGCONT to    SIGKILL to every newcomer
//!                                      the stopped
//! ```
//!
//! The ask step (docs/stop.md) lets a runtime shut its own tree down:
//! only the leaders are signalled, once; it ends when every leader has
//! exited or half the TERM grace has passed (an `ask_ended` record says
//! which), and then TERM goes to everything still alive. With no job
//! running (abandoned, a close that found leftovers) it is empty and TERM
//! goes to all at once; with no grace at all the stop starts at KILL.
//!
//! The `timeout` personality asks as timeout(1) does ([`AskSpan`]): the
//! leader gets `-s SIG` and as long as it needs (`UntilExit`), or `-k DUR`
//! (`KillAfterMs`, after which KILL follows at once); once the leaders
//! have exited, TERM goes to what is left (escapees timeout would leave
//! running) for the TERM grace, counted from then.
//!
//! The loop reaps before every step (jobs through their own pidfds, held
//! orphans through theirs, others by the pid a `WNOWAIT` peek returned);
//! a step then checks for the end: `waitid` says ECHILD *and* the census
//! finds nothing. The TERM stage ends early when that holds; the KILL
//! stage repeats sweeps until it holds or the kill bound runs out (the
//! proof then fails, after a last sweep: the bound limits the wait for the
//! proof, never whether a process seen gets its SIGKILL). A sweep's record is made durable before any of its
//! signals is sent; only verified pidfds are signalled; "already
//! signalled" is keyed by (pid, start time).
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

use crate::clock::millis;
use crate::contain::group::ActionGroup;
use crate::kinds::watchdog::{
    no_live_or_waitable, AskEnd, AskEnded, AskSpan, Event, ForeignMember, Ident, Proc, Sig, Stage,
    StopCompleted, StopReason, Uncertainty,
};
use crate::process::identity::Stat;
use crate::process::lineage::Proven;
use crate::process::pidfd::VerifiedPidFd;
use crate::process::reap::Peek;

mod ask;
mod census;
mod group;
mod kill;
mod sweep;

/// New members a TERM step must see before it freezes the group.
const FREEZE_AT: usize = 256;
/// Longest a frozen TERM step waits for `frozen 1`.
const FREEZE_WAIT: Duration = Duration::from_millis(20);

/// Whether the CPUs are contended now: more runnable tasks (the fourth
/// field of `/proc/loadavg`) than twice the CPUs, plus two. A heuristic
/// for when to freeze, never part of the proof.
fn contended() -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/loadavg") else {
        return false;
    };
    let runnable = text
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split('/').next());
    // Once: std reads the cgroup's CPU quota files (seven system calls)
    // every time it is asked, and this is asked in every TERM sweep.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    runnable
        .and_then(|r| r.parse::<usize>().ok())
        .is_some_and(|r| r > 2 * cpus + 2)
}

/// Longer than any stop waits: the end of a timeout ask with no `-k`.
const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);

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
/// While stopping, the loop reaps at most this often (a child's exit is
/// noticed at once, reaped at the next pace): a tree of a thousand dying
/// at once would otherwise be reaped one child per wake-up, a record and
/// a walk of the children each, on a CPU the dying tree needs.
const REAP_PACE: Duration = Duration::from_millis(4);
/// The pace while the processes a sweep signalled are dying
/// ([`Stopper::reap_now`]).
const REAP_DYING: Duration = Duration::from_millis(25);

/// A running job's leader, asked first when a stop begins (docs/stop.md,
/// "The ask"), with the signal its request chose.
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
    /// Records a member of the action's group proven not the action's.
    fn foreign(&mut self, process: Proc, why: &str) {
        let why = crate::vocab::bounded(why);
        self.append(Event::ForeignMember(ForeignMember { process, why }));
    }
    /// The action's cgroup in cgroup mode (docs/containment.md).
    fn group(&self) -> Option<&ActionGroup> {
        None
    }
    /// Watches a held pidfd: the loop is told when its process exits
    /// ([`Held::exited`]), so it reaps that one, with no walk of the
    /// children. False when it cannot be watched: it is not held then
    /// (the census and the peek find it), for a held process whose exit
    /// the loop is never told of would keep [`Held::dying`] true.
    fn watch(&mut self, _fd: &VerifiedPidFd) -> bool {
        true
    }
}

/// The pidfds the stop procedure holds, by pid (a held process keeps its
/// pid until it is reaped), and the pids the loop saw exit since its last
/// reap (their pidfds polled readable).
#[derive(Default)]
pub struct Held {
    pub fds: HashMap<i32, VerifiedPidFd>,
    pub exited: HashSet<i32>,
}

impl Held {
    /// `pid` names a process held and not seen to have exited: a proven
    /// process still alive (a walk of parents may stop there).
    pub fn alive(&self, pid: i32) -> bool {
        self.fds.get(&pid).is_some_and(|fd| !fd.has_exited())
    }

    /// Some process held has not been seen to exit yet. Cheap while many
    /// are alive (fewer exits seen than processes held says so at once);
    /// near the end, one look at each.
    pub fn dying(&self) -> bool {
        self.exited.len() < self.fds.len() || self.fds.keys().any(|p| !self.exited.contains(p))
    }
}

/// What one wake-up of the loop saw exit.
#[derive(Clone, Copy, Debug, Default)]
pub struct Exits {
    /// A child may be waitable (SIGCHLD, a leader's or a held pidfd).
    pub child: bool,
    /// A job's leader exited (its pidfd polled readable).
    pub leader: bool,
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
    /// An ask signal could not be sent to a live leader (it was then
    /// dropped from `asked`).
    ask_failed: bool,
    /// How long the ask lasts, and when it ends at the latest.
    span: AskSpan,
    ask_until: Instant,
    /// The TERM grace, and when it ends (for timeout's spans, counted
    /// from the end of the ask).
    grace: Duration,
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
    /// Processes signalled, held by their pidfd (by pid: a held process
    /// keeps its pid until it is reaped) until seen to have exited, as
    /// long as descriptors allow; beyond that the identity is kept (in
    /// `termed`/`killed`) and the fd closed, and the proof rests on the
    /// scan and ECHILD. The loop reaps through them ([`Stopper::held_mut`]).
    held: Held,
    /// The soft descriptor limit, read when the stop began.
    soft: usize,
    /// cgroup mode: where the KILL stage's `cgroup.kill` stands (`kill.rs`).
    gate: kill::Gate,
    /// cgroup mode: the KILL stage's frozen census did not prove that the
    /// group holds every live process of the action (one is outside it, a
    /// stranger is in it, the group did not freeze or could not be read),
    /// so every later census scans the `/proc` closure too, not only the
    /// group's members (`census.rs`).
    beyond_group: bool,
    /// Processes proven the action's by lineage (see `process::lineage`).
    proven: Proven,
    /// Members of the action's group proven *not* the action's, by pid and
    /// start time: recorded once, never signalled, left out of the census.
    foreign: HashMap<i32, u64>,
    /// The loop's paced reaping: the last reap, and whether a child's exit
    /// is waiting for the next.
    reaped_at: Instant,
    reap_wanted: bool,
}

impl Stopper {
    /// A stop beginning at `now`; `asks`: the running jobs' leaders;
    /// `ask`: how long asking them lasts (module doc).
    pub fn new(
        reason: StopReason,
        now: Instant,
        grace: Duration,
        kill_bound: Duration,
        ask: AskSpan,
        asks: Vec<Ask>,
    ) -> Stopper {
        let stage = match () {
            _ if grace.is_zero() => Stage::Kill,
            _ if asks.is_empty() => Stage::Term,
            _ => Stage::Ask,
        };
        // timeout's spans: the grace starts when the ask ends (`end_ask`).
        let asking_long = stage == Stage::Ask && !ask.is_half_grace();
        let grace_until = if asking_long {
            now + FOREVER
        } else {
            now + grace
        };
        let ask_until = match ask {
            AskSpan::HalfGrace => now + grace / 2,
            AskSpan::UntilExit => now + FOREVER,
            AskSpan::KillAfterMs(ms) => now + Duration::from_millis(ms).min(FOREVER),
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
            ask_failed: false,
            span: ask,
            ask_until,
            grace,
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
            held: Held::default(),
            soft: sweep::soft_limit(),
            gate: kill::Gate::Open,
            beyond_group: false,
            proven: Proven::default(),
            foreign: HashMap::new(),
            reaped_at: now,
            reap_wanted: false,
        }
    }

    /// One step of the procedure. Never blocks.
    pub fn step(&mut self, host: &mut impl StopHost, now: Instant) -> Step {
        // cgroup mode: the group is frozen the moment the grace is over,
        // and `cgroup.kill` goes out as soon as its frozen census proves
        // every member, before this step's reaping and scanning
        // (thousands of members dying of TERM make both slow). While it
        // freezes, no KILL sweep runs (`kill.rs`), and nothing else is
        // done either: a census of thousands of members would only take
        // the CPU from the members the freeze waits for.
        if self.stage == Stage::Term && now >= self.grace_until {
            self.enter_kill(now);
        }
        if self.stage == Stage::Kill && host.group().is_some() && self.kill_group(host, now) {
            return Step::Wait((now + KILL_RESCAN).min(self.kill_until));
        }
        let echild = host.reap().none_left(host.me().pid);
        self.held.fds.retain(|_, fd| !fd.has_exited());
        // The ask step needs no scan: its leaders are known by identity.
        // ECHILD proves there is no descendant at all (every orphan comes
        // back to the subreaper), so it goes on to the end check.
        if self.stage == Stage::Ask && !echild {
            let signalled = self.ask_step(host, now);
            if self.stage == Stage::Ask {
                return Step::Wait(self.next(now, signalled));
            }
        }
        let mut census = self.census(host, echild);
        for (process, why) in std::mem::take(&mut census.foreign) {
            self.mark_foreign(host, process, why);
        }
        let scan_empty = census.is_empty() && census.error.is_none();
        if no_live_or_waitable(echild, scan_empty) {
            self.thaw(host);
            return Step::Done(self.completed(now, echild, scan_empty, 0));
        }
        if self.stage == Stage::Ask {
            // ECHILD, yet the group lists a process: no leader is left.
            self.end_ask(host, now, AskEnd::LeadersExited);
        }
        if self.stage == Stage::Term && now >= self.grace_until {
            self.enter_kill(now);
        }
        if self.stage == Stage::Kill && now >= self.kill_until {
            // The bound is over and the stop ends unproven, but what this
            // step sees and never signalled still gets its SIGKILL first:
            // the bound limits the wait for the proof, not the killing. (A
            // step may come late: the loop blocked in a reap the kernel
            // made slow, ~1 s for a killed `Z` leader on a loaded box.)
            self.sweep(host, &census);
            // By pid: a group member's census entry may not carry its start
            // time (see `Census`); a pid reused meanwhile makes the proof
            // fail, never pass.
            let live: HashSet<i32> = census.all().map(|(s, _)| s.pid).collect();
            for ((pid, _), st) in std::mem::take(&mut self.retry) {
                if live.contains(&pid) {
                    let detail = "still no descriptor to bind it when the kill bound ran out";
                    host.uncertain(&st, Uncertainty::PidfdFailed, detail);
                }
            }
            let left = census.all().filter(|(s, _)| !s.is_zombie()).count() as u64;
            self.thaw(host);
            return Step::Done(self.completed(now, echild, scan_empty, left));
        }
        // cgroup mode: a TERM sweep with many members to bind runs with
        // the group frozen (thawed right after) when the CPUs are
        // contended: members that fork through the grace (a fork storm of
        // thousands left one part of a sweep 4 s to bind 15) neither run
        // nor fork while it binds; their TERM is delivered when they thaw.
        // Not otherwise: freezing waits for every member to stop, and a
        // frozen member cannot act on its TERM (rescans that froze a storm
        // every 10 ms kept it from dying), nor a quiet tree start dying.
        let freeze = self.stage == Stage::Term && census.new_members() >= FREEZE_AT && contended();
        let frozen = freeze && host.group().is_some_and(|g| g.freeze(FREEZE_WAIT).is_ok());
        let signalled = self.sweep(host, &census);
        if frozen {
            if let Some(g) = host.group() {
                let _ = g.thaw();
            }
        }
        Step::Wait(self.next(now, signalled))
    }

    /// The grace is over: the KILL stage begins. The kill bound is its
    /// own: a TERM sweep that overran the grace (a watchdog starved by a
    /// fork storm) must not use it up before a single SIGKILL went out.
    fn enter_kill(&mut self, now: Instant) {
        self.stage = Stage::Kill;
        self.kill_until = self.kill_until.max(now + self.kill_bound);
    }

    /// When the next step is due: a rescan interval that doubles while
    /// nothing new is found (up to [`MAX_BACKOFF`] times), never past the
    /// end of the stage.
    fn next(&mut self, now: Instant, signalled: bool) -> Instant {
        let busy = signalled || !self.retry.is_empty(); // a bind to retry soon
        self.quiet = if busy { 0 } else { self.quiet + 1 };
        let backoff = 1 << self.quiet.min(MAX_BACKOFF);
        match self.stage {
            Stage::Ask => (now + TERM_RESCAN * backoff).min(self.ask_until),
            Stage::Term => (now + TERM_RESCAN * backoff).min(self.grace_until),
            Stage::Kill => (now + KILL_RESCAN * backoff).min(self.kill_until),
        }
    }

    /// Records the end of the ask step; TERM goes out next, or KILL when
    /// timeout's `-k` ran out.
    fn end_ask(&mut self, host: &mut impl StopHost, now: Instant, reason: AskEnd) {
        host.append(Event::AskEnded(AskEnded {
            reason,
            after_ms: millis(now - self.started),
            leaders_left: self.asked.len() as u64,
        }));
        self.asks.clear();
        self.asked.clear();
        self.quiet = 0;
        if reason == AskEnd::KillAfter {
            self.stage = Stage::Kill;
            self.kill_until = now + self.kill_bound;
            return;
        }
        self.stage = Stage::Term;
        if !self.span.is_half_grace() {
            self.grace_until = now + self.grace;
            self.kill_until = self.grace_until + self.kill_bound;
        }
    }

    /// Records a member of the group proven not the action's, once (by pid
    /// and start time); it is never signalled and the census leaves it out.
    fn mark_foreign(&mut self, host: &mut impl StopHost, process: Proc, why: String) {
        if self.foreign.insert(process.pid, process.start_time) == Some(process.start_time) {
            return;
        }
        host.foreign(process, &why);
    }

    /// Whether `pid` is a foreign member already recorded (`start_time`
    /// `None`: a census placeholder; its `stat` is read to compare).
    fn is_foreign(&self, pid: i32, start_time: Option<u64>) -> bool {
        let Some(&t) = self.foreign.get(&pid) else {
            return false;
        };
        match start_time {
            Some(s) => s == t,
            None => crate::process::identity::read_stat(pid).is_ok_and(|s| s.start_time == t),
        }
    }

    /// Whether the loop should reap now, after the wake-up's `exits`; a
    /// leader's exit is reaped at once (its record and its requester's
    /// reply wait on it). Reaping is
    /// paced ([`REAP_PACE`]), and while processes this stop signalled and
    /// holds are still dying, slower ([`REAP_DYING`]): reaping a dying tree
    /// in rounds (a `waitid`, the kernel's release of the task, a record,
    /// for each) takes a CPU its members need to die. A zombie keeps its
    /// pid and counts against its uid's process limit until it is reaped,
    /// so the wait is bounded, and it ends as soon as the last held process
    /// exited (the end may have come). An exit that must wait is
    /// remembered, and [`Stopper::reap_due`] says when.
    pub fn reap_now(&mut self, exits: Exits, now: Instant) -> bool {
        self.reap_wanted |= exits.child;
        let due = match exits.leader {
            true => Some(now),
            false => self.reap_due(),
        };
        if due.is_none_or(|d| now < d) {
            return false;
        }
        self.reap_wanted = false;
        self.reaped_at = now;
        true
    }

    /// When a reap is due, if one is waiting.
    pub fn reap_due(&self) -> Option<Instant> {
        let dying = self.held.dying();
        let pace = if dying { REAP_DYING } else { REAP_PACE };
        self.reap_wanted.then_some(self.reaped_at + pace)
    }

    /// The ask step is under way: a leader's exit may end it.
    pub fn asking(&self) -> bool {
        self.stage == Stage::Ask
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
            foreign: (!self.foreign.is_empty()).then_some(self.foreign.len() as u64),
        }
    }

    /// Every pidfd the stop procedure bound reports its process exited.
    pub fn held_exited(&mut self) -> bool {
        self.held.fds.retain(|_, fd| !fd.has_exited());
        self.held.fds.is_empty()
    }

    /// The pidfds held, by pid, for the loop to reap through (an orphan
    /// that exited is reaped by its own pidfd, with no `WNOWAIT` peek and
    /// no `/proc` read for its record); what it reaped it removes.
    pub fn held_mut(&mut self) -> &mut Held {
        &mut self.held
    }
}
