//! The watchdog's audit record kinds and their typed `data`.
//!
//! Every record is `{"v","run","seq","ts","mono_ns","kind","prev","data"}` on
//! one line. `data` is typed per `kind`; every struct denies unknown fields,
//! serde derive rejects duplicate keys, and there is no float and no
//! `serde_json::Value` anywhere, so a record means exactly one thing.

pub use super::group::{
    ContainMode, ContainRequest, Containment, ForeignMember, GroupIdentity, GroupKill,
    GroupKillFailed, GroupMember, GroupRemoved, GroupSeen, GroupState, Unkillable,
    GROUP_KILL_NAMED,
};
pub use super::stage::{
    StageArmed, StagingBaseline, StagingChanged, StagingInventoried, StartRefusal, StartRefused,
};
pub use super::stop::{StopPriority, StopTriggered};
pub use super::tree::{DirIdentity, Inventory, PrivateRemoved, PrivateState, TempEntry};
use crate::holders::HolderScan;
use crate::vocab::{Capture, Op, RefusalReason};
use serde::{Deserialize, Serialize};

/// Record format version (`v`).
pub const RECORD_VERSION: u32 = 1;

pub use crate::vocab::{
    AskEnd, AskSpan, Ident, Mode, Outcome, Proc, Sig, Stage, Status, StopReason, Stream,
    Uncertainty,
};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    pub action_deadline_ms: Option<u64>,
    pub term_grace_ms: u64,
    pub kill_bound_ms: u64,
    /// Combined stdout+stderr cap per job; `null` means uncapped (exec default).
    pub output_cap: Option<u64>,
    /// How long the ask step lasts (timeout's `-k`); absent: half the grace.
    #[serde(default, skip_serializing_if = "AskSpan::is_half_grace")]
    pub ask: AskSpan,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StreamSummary {
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RunStarted {
    pub version: String,
    pub mode: Mode,
    pub watchdog: Ident,
    pub state_dir: String,
    pub bounds: Bounds,
    pub staging: Option<DirIdentity>,
    pub pass_env: Vec<String>,
    /// exec and timeout only: how the job meets its caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<Handover>,
}

/// How exec's job meets its caller (docs/cli.md): by default it is the
/// caller's command (environment, stdin, stdout, stderr and ignored
/// signals handed on); `--env minimal` and `--capture` give run's way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Handover {
    /// The caller's environment (plus REA_*), not run's minimal job environment.
    pub env_inherited: bool,
    /// stdin, stdout and stderr are the caller's own descriptors (no relay,
    /// no output accounting or cap).
    pub stdio_inherited: bool,
    /// The signals the caller ignored that stay ignored in the job.
    pub kept_ignored: Vec<i32>,
    /// The job leads its own session (false: `--foreground`, it stays in
    /// the caller's process group).
    pub own_session: bool,
    /// The job's parent-death signal; 0: none (`timeout -s 0`).
    pub pdeathsig: i32,
    /// Children (and their subtrees) the process already had when exec
    /// began: not the action's, never signalled (`process::inherited`);
    /// the first 64 named, `inherited_total` counts them all.
    pub inherited: Vec<Proc>,
    pub inherited_total: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RootSource {
    /// The watchdog's parent at start (the default).
    Parent,
    /// `--root-pid` (and `--root-start-time`).
    Argument,
    /// None bound: the watchdog is a PID namespace's init (its parent,
    /// pid 0, is outside the namespace; a container's entrypoint).
    Init,
    /// None bound: the `timeout` personality, which, like timeout(1), does
    /// not care about its parent.
    Unwatched,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RootBound {
    /// `None` exactly when `source` is `init` or `unwatched`.
    pub root: Option<Ident>,
    pub comm: Option<String>,
    pub source: RootSource,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestReceived {
    /// Absent when the line could not be parsed far enough to know.
    pub id: Option<String>,
    pub op: Option<Op>,
    pub caller: Option<Ident>,
    pub bytes: u64,
}

/// Refusals that could not be answered (no usable reply channel: garbage,
/// oversize texts, fragments), coalesced into one record per burst, so a
/// flood of bad lines costs one record, not two synced ones per line
/// (docs/requests.md). Each stands for `count` requests received and refused.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestsRefused {
    pub count: u64,
    /// Bytes of all the refused texts together.
    pub bytes: u64,
    /// How many of each reason (every count positive, the sum is `count`).
    pub reasons: std::collections::BTreeMap<RefusalReason, u64>,
    /// The first few refusals of the burst, in order (at most
    /// [`RequestsRefused::SAMPLES`]).
    pub first: Vec<RequestRefused>,
}

impl RequestsRefused {
    /// How many refusals of a burst keep their detail.
    pub const SAMPLES: usize = 4;
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestRefused {
    pub id: Option<String>,
    pub reason: RefusalReason,
    /// Bounded, escaped diagnostic for people; never decides anything.
    pub detail: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JobSpawned {
    pub job: u64,
    pub id: String,
    pub name: Option<String>,
    /// What the job's process got as its argv.
    pub argv: Vec<String>,
    /// The file executed when `argv[0]` does not name it (exec's and
    /// timeout's bare name, found on `PATH`; the program sees it as typed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The request's `cwd`, and its `env`'s names (never the values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    pub pid: i32,
    pub start_time: u64,
    pub uid: u32,
    /// Read back from `/proc` after exec: the watchdog's pid.
    pub ppid: i32,
    /// Read back from `/proc` after exec: the job's own pid (its own session).
    pub sid: i32,
    pub caller: Option<Ident>,
    /// The running job the caller belongs to, when it is not the root:
    /// the job whose leader is the watchdog's child on the caller's
    /// ancestry, or whose session that child is in. A nested launcher is
    /// shown under the job that asked for it, whoever in its tree asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_job: Option<u64>,
    pub deadline_ms: Option<u64>,
    /// The inner alarm armed for the job (SIGALRM to its leader this long
    /// after the spawn, docs/requests.md): recorded whether or not it goes
    /// off, so that an armed alarm always leaves a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_alarm_ms: Option<u64>,
    pub capture: Capture,
    /// What the leader is asked to stop with when the action stops (the
    /// ask step, docs/stop.md).
    pub stop_signal: Sig,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JobFailed {
    pub job: u64,
    pub id: String,
    pub argv: Vec<String>,
    /// As in [`JobSpawned::program`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    pub errno: i32,
    pub reason: RefusalReason,
    pub detail: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JobExited {
    pub job: u64,
    pub pid: i32,
    pub start_time: u64,
    pub status: Status,
    pub duration_ms: u64,
    pub stdout: StreamSummary,
    pub stderr: StreamSummary,
    pub output_capped: bool,
    /// The leader died while the action was stopping.
    pub stopped: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OutputCapped {
    pub job: u64,
    pub stream: Stream,
    pub cap: u64,
}

/// A closure member that a sweep did not signal (zombie, already signalled,
/// or unprovable); listed so a replay can check every target's parent link.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub pid: i32,
    pub ppid: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SignalSweep {
    pub sweep: u32,
    /// Large sweeps are split; all parts share `sweep` and are written before
    /// any of its signals is sent.
    pub part: u32,
    pub stage: Stage,
    /// Sent to every target, in this order.
    pub signals: Vec<Sig>,
    pub targets: Vec<Proc>,
    pub others: Vec<Link>,
    /// The targets (by pid) that were seen stopped when bound and got
    /// SIGCONT after `signals` (a TERM sweep sends SIGCONT to no other
    /// target). Absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cont: Vec<i32>,
}

/// The ask step ended: from here TERM goes to every descendant still
/// alive. `after_ms` is since the stop began; `leaders_left` how many of
/// the leaders asked were still alive.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AskEnded {
    pub reason: AskEnd,
    pub after_ms: u64,
    pub leaders_left: u64,
}

/// A job's inner alarm went off (docs/requests.md): SIGALRM to its leader through
/// the leader's pidfd, `after_ms` after the spawn. The runtime's own alarm,
/// not a stop trigger; `errno` is set when the signal could not be sent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InnerAlarm {
    pub job: u64,
    pub pid: i32,
    pub start_time: u64,
    pub after_ms: u64,
    pub errno: Option<i32>,
}

/// A signal to the watchdog that is not a stop (docs/guarantees.md): under
/// exec forwarded to the job's leader, under run ignored unless
/// `--forward-signals`. `count` is how many deliveries the record stands
/// for: the first of a burst is recorded before it is passed on, and those
/// that follow within a second are counted into the next record (a flood
/// of signals grows the log by one record a second per signal).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SignalReceived {
    pub signal: i32,
    pub name: String,
    pub forwarded: bool,
    /// The leaders it went to (pid and start time).
    pub to: Vec<Ident>,
    pub count: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SignalFailed {
    pub sweep: u32,
    pub target: Ident,
    pub signal: Sig,
    pub errno: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReapedProc {
    pub pid: i32,
    pub start_time: Option<u64>,
    pub comm: Option<String>,
    pub status: Status,
}

/// Adopted descendants (not job leaders) reaped in one round.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Reaped {
    pub processes: Vec<ReapedProc>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MappingUncertain {
    pub process: Proc,
    pub reason: Uncertainty,
    pub detail: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StopCompleted {
    pub reason: StopReason,
    pub sweeps: u32,
    pub elapsed_ms: u64,
    /// `waitid(P_ALL)` said ECHILD (for an exec with inherited children:
    /// said nothing is waitable, and every child left was an inherited
    /// one, by pid and start time; see `process::inherited`).
    pub echild: bool,
    /// The last `/proc` scan found no descendant (inherited subtrees left out).
    pub scan_empty: bool,
    /// Descendants still seen when the kill bound ran out (0 on success).
    pub left: u64,
    /// Members of the action's group recorded as foreign by then
    /// (`foreign_member`): left alive, so the stop proves nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign: Option<u64>,
}

/// The quiescence rule (docs/stop.md, "The proof of quiescence"), for the
/// writer and the replay alike: "no live or waitable descendant" holds only
/// when `waitid` said ECHILD *and* a `/proc` scan that did not fail found no
/// descendant. Either alone is not enough: ECHILD misses a process reparented
/// away mid-exit, a scan misses one forked while it ran.
pub fn no_live_or_waitable(echild: bool, scan_empty: bool) -> bool {
    echild && scan_empty
}

impl StopCompleted {
    /// The stop proved quiescence. A stop that ran out of its kill bound
    /// failed for good, even if the stragglers died later.
    pub fn proved(&self) -> bool {
        no_live_or_waitable(self.echild, self.scan_empty)
            && self.left == 0
            && self.foreign.unwrap_or(0) == 0
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TempRootInventoried {
    pub path: String,
    pub inventory: Inventory,
    /// The first entries, for people; `inventory` covers all of them.
    pub listing: Vec<TempEntry>,
    pub truncated: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TempRootRemoved {
    pub removed: bool,
    pub detail: String,
}

/// The holder scan at close (docs/stage.md, "The holder scan"): the stage
/// and the temp root, after quiescence was proven and before the temp root
/// is removed (a held temp root is kept). Informative for the stage:
/// `rea-audit verify --staging` scans it again, at the moment that matters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum HoldersScanned {
    Scanned(HolderScan),
    /// A tree could not be walked: nothing is known.
    Failed {
        error: String,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReplyFailed {
    pub id: String,
    pub detail: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    pub requests: u64,
    pub refused: u64,
    pub jobs: u64,
    pub signals: u64,
    pub reaped: u64,
}

impl Counts {
    /// The count rule, the one the watchdog writes by and the replay checks
    /// by: every `request_received` is a request, every `request_refused` a
    /// refusal, a `requests_refused` burst of `count` is `count` of each, every `job_spawned` a job, every (target, signal) pair of a
    /// `signal_sweep` part a signal sent, every `job_exited` and every
    /// process of a `reaped` record one process reaped. Nothing else counts.
    pub fn add(&mut self, ev: &Event) {
        match ev {
            Event::RequestReceived(_) => self.requests += 1,
            Event::RequestRefused(_) => self.refused += 1,
            Event::RequestsRefused(r) => {
                self.requests += r.count;
                self.refused += r.count;
            }
            Event::JobSpawned(_) => self.jobs += 1,
            Event::SignalSweep(s) => {
                self.signals += (s.targets.len() * s.signals.len() + s.cont.len()) as u64
            }
            Event::JobExited(_) => self.reaped += 1,
            Event::Reaped(r) => self.reaped += r.processes.len() as u64,
            _ => {}
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub outcome: Outcome,
    pub stop_reason: Option<StopReason>,
    /// The whole proof: `no_live_or_waitable_descendants` and every pidfd
    /// the watchdog held reports its process exited.
    pub quiescent: bool,
    /// `waitid(P_ALL, WNOHANG|WNOWAIT)` said ECHILD and a scan was empty.
    pub no_live_or_waitable_descendants: bool,
    pub uncertain_mappings: u64,
    pub temp_root_removed: bool,
    pub root_alive: bool,
    pub counts: Counts,
    pub staging: Option<StagingInventoried>,
}

impl Receipt {
    /// A positive receipt: the proof holds and nothing was left uncertain.
    pub fn is_positive(&self) -> bool {
        self.quiescent
            && self.no_live_or_waitable_descendants
            && self.uncertain_mappings == 0
            && self.temp_root_removed
    }
}

macro_rules! events {
    ($($variant:ident($ty:ident) = $name:literal,)*) => {
        /// One audit record's `kind` and `data`.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Event { $($variant($ty),)* }

        /// Every record kind, in the order the schema lists them.
        pub const KINDS: &[&str] = &[$($name,)*];

        impl Serialize for EventData<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self.0 { $(Event::$variant(d) => d.serialize(s),)* }
            }
        }

        impl crate::log::Kind for Event {
            const VERSION: u32 = RECORD_VERSION;

            fn kind(&self) -> &'static str {
                match self { $(Event::$variant(_) => $name,)* }
            }

            fn data(&self) -> impl Serialize + '_ {
                EventData(self)
            }

            fn parse_data(kind: &str, data: &str) -> Option<Result<Event, crate::json_error::JsonError>> {
                match kind {
                    $($name => Some(crate::json_error::from_str::<$ty>(data).map(Event::$variant)),)*
                    _ => None,
                }
            }
        }
    };
}

/// The watchdog's audit log: the chained log of [`Event`]s.
pub type AuditWriter = crate::log::ChainWriter<Event>;

/// `Event`'s `data` as a value to serialise inside the record envelope.
pub(crate) struct EventData<'a>(&'a Event);

events! {
    RunStarted(RunStarted) = "run_started",
    RootBound(RootBound) = "root_bound",
    StageArmed(StageArmed) = "stage_armed",
    StagingBaseline(StagingBaseline) = "staging_baseline",
    RequestReceived(RequestReceived) = "request_received",
    RequestRefused(RequestRefused) = "request_refused",
    RequestsRefused(RequestsRefused) = "requests_refused",
    JobSpawned(JobSpawned) = "job_spawned",
    JobFailed(JobFailed) = "job_failed",
    JobExited(JobExited) = "job_exited",
    OutputCapped(OutputCapped) = "output_capped",
    ReplyFailed(ReplyFailed) = "reply_failed",
    StopTriggered(StopTriggered) = "stop_triggered",
    SignalSweep(SignalSweep) = "signal_sweep",
    SignalFailed(SignalFailed) = "signal_failed",
    AskEnded(AskEnded) = "ask_ended",
    InnerAlarm(InnerAlarm) = "inner_alarm",
    SignalReceived(SignalReceived) = "signal_received",
    Reaped(Reaped) = "reaped",
    MappingUncertain(MappingUncertain) = "mapping_uncertain",
    ForeignMember(ForeignMember) = "foreign_member",
    Unkillable(Unkillable) = "unkillable",
    StopCompleted(StopCompleted) = "stop_completed",
    TempRootInventoried(TempRootInventoried) = "temp_root_inventoried",
    TempRootRemoved(TempRootRemoved) = "temp_root_removed",
    StagingInventoried(StagingInventoried) = "staging_inventoried",
    StagingChanged(StagingChanged) = "staging_changed",
    HoldersScanned(HoldersScanned) = "holders_scanned",
    Receipt(Receipt) = "receipt",
    Containment(Containment) = "containment",
    GroupKill(GroupKill) = "group_kill",
    GroupKillFailed(GroupKillFailed) = "group_kill_failed",
    GroupRemoved(GroupRemoved) = "group_removed",
    StartRefused(StartRefused) = "start_refused",
}
