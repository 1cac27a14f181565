//! The shared vocabulary: who a process is, how it ended, why an action
//! stopped, what a request asks and why it was refused, and the small text
//! rules (tokens, bounded diagnostics, hex digests) every room spells alike.
//!
//! A leaf module: it imports nothing from the crate, and the audit log,
//! the wire protocol and the process layer all import it, so none of them
//! needs another (no import cycle). Each type's serde spelling is the one
//! in the records, the requests and the replies; changing one changes the
//! audit schema.

use serde::{Deserialize, Serialize};

/// A process as the watchdog can prove it: pid, start time (clock ticks since
/// boot, `/proc/PID/stat` field 22) and real uid. Keyed on all three, never
/// on the pid alone.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct Ident {
    pub pid: i32,
    pub start_time: u64,
    pub uid: u32,
}

/// A scanned descendant: identity, parent at the time it was verified, name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub start_time: u64,
    pub uid: u32,
    pub comm: String,
}

impl Proc {
    pub fn ident(&self) -> Ident {
        Ident {
            pid: self.pid,
            start_time: self.start_time,
            uid: self.uid,
        }
    }
}

/// How a process ended: `{"code":N}` or `{"signal":N}`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Status {
    Code(i32),
    Signal(i32),
}

/// For people: `exit N` or `signal N`.
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Code(c) => write!(f, "exit {c}"),
            Status::Signal(n) => write!(f, "signal {n}"),
        }
    }
}

impl Status {
    /// Shell convention: the code, or 128+N for signal N.
    pub fn shell_code(self) -> i32 {
        match self {
            Status::Code(c) => c,
            Status::Signal(s) => 128 + s,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Run,
    Exec,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The request and reply protocol's version (`v`, docs/requests.md).
pub const PROTOCOL_VERSION: u32 = 1;

/// Why an action stopped (docs/stop.md); also the receipt's `stop_reason`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Deadline,
    RootLost,
    CallerLost,
    Abandoned,
    ExcessOutput,
    MappingRefused,
    Signal,
    StopRequested,
    CloseWhileRunning,
    AuditFailure,
    /// SIGHUP to the watchdog: an SSH or terminal hangup. The controller's
    /// channel is gone, which neither proves it dead nor lets it clean up:
    /// the stop runs as usual, the verdict is retain (docs/stop.md, docs/verdict.md).
    Hangup,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Deadline => "deadline",
            StopReason::RootLost => "root_lost",
            StopReason::CallerLost => "caller_lost",
            StopReason::Abandoned => "abandoned",
            StopReason::ExcessOutput => "excess_output",
            StopReason::MappingRefused => "mapping_refused",
            StopReason::Signal => "signal",
            StopReason::StopRequested => "stop_requested",
            StopReason::CloseWhileRunning => "close_while_running",
            StopReason::AuditFailure => "audit_failure",
            StopReason::Hangup => "hangup",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Closed,
    Stopped,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Ask first (docs/stop.md): only running jobs' leaders, each with
    /// its own stop signal (and SIGCONT), so the runtime can shut its own
    /// tree down.
    Ask,
    Term,
    Kill,
}

/// Why the ask step ended (docs/stop.md).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AskEnd {
    /// Every leader asked has exited: TERM goes to whatever is left.
    LeadersExited,
    /// Half the TERM grace passed with a leader still alive.
    HalfGrace,
    /// timeout's `-k` duration passed with a leader still alive: KILL
    /// follows at once, with no TERM sweep.
    KillAfter,
    /// No leader still alive could be sent its stop signal (a
    /// `signal_failed` record says why): TERM follows at once.
    AskFailed,
}

/// How long a stop's ask step (docs/stop.md) lasts, and what follows
/// it. Recorded in `run_started`'s bounds (absent means `HalfGrace`).
/// timeout's two spans are for a time-out (a `deadline` stop); any other
/// stop (a signal, a hangup, an audit failure) asks for half the grace.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AskSpan {
    /// docs/stop.md: until every leader asked has exited or half the TERM
    /// grace has passed; then TERM to every descendant still alive.
    #[default]
    HalfGrace,
    /// timeout(1) without `-k`: until every leader asked has exited,
    /// however long that takes; then TERM to what is left (its escapees)
    /// for the TERM grace, then KILL.
    UntilExit,
    /// timeout(1)'s `-k DUR`: until every leader asked has exited (then
    /// as `UntilExit`) or DUR has passed; then KILL at once, no TERM.
    KillAfterMs(u64),
}

impl AskSpan {
    pub fn is_half_grace(&self) -> bool {
        *self == AskSpan::HalfGrace
    }
}

/// A signal, spelled in records as people read it: `SIGTERM`, `SIGUSR1`,
/// `SIGRTMIN+2`; one with no name as `SIG` and its number (`SIG0`,
/// `SIG32`). One spelling per signal ([`crate::signame::name`], the names
/// `timeout -v` prints), so a record can be compared as written.
///
/// Open (any number 0..=64), because timeout's `-s` may ask a leader to
/// stop with any signal (`-s 0` probes, `-s STOP` pauses); the watchdog's
/// own sweeps send only [`Sig::TERM`], [`Sig::CONT`] and [`Sig::KILL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sig(i32);

impl Sig {
    pub const TERM: Sig = Sig(libc::SIGTERM);
    pub const CONT: Sig = Sig(libc::SIGCONT);
    pub const KILL: Sig = Sig(libc::SIGKILL);
    pub const INT: Sig = Sig(libc::SIGINT);
    pub const HUP: Sig = Sig(libc::SIGHUP);
    pub const QUIT: Sig = Sig(libc::SIGQUIT);
    pub const USR1: Sig = Sig(libc::SIGUSR1);
    pub const USR2: Sig = Sig(libc::SIGUSR2);
    pub const ALRM: Sig = Sig(libc::SIGALRM);

    /// The signal numbered `n`, if Linux has one (0, the probe, included).
    pub fn from_number(n: i32) -> Option<Sig> {
        (0..=crate::signame::SIGNUM_BOUND as i32)
            .contains(&n)
            .then_some(Sig(n))
    }

    pub fn number(self) -> i32 {
        self.0
    }

    /// The name people read: `SIGTERM`, `SIGUSR1`, `SIGRTMIN+2`, `SIG0`.
    pub fn name(self) -> String {
        format!("SIG{}", crate::signame::name(self.0))
    }

    /// The inverse of [`Sig::name`], and nothing else: no alias
    /// (`SIGIOT`), no other case, no number where a name exists.
    pub fn from_name(s: &str) -> Option<Sig> {
        let base = s.strip_prefix("SIG")?;
        let n = crate::signame::str2sig(base.as_bytes())?;
        let sig = Sig::from_number(n)?;
        (sig.name() == s).then_some(sig)
    }
}

impl Serialize for Sig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Sig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Sig, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Sig::from_name(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{s:?} is not a signal as records spell it (SIGTERM, SIGRTMIN+2, SIG0)"
            ))
        })
    }
}

/// What a job's leader is asked to stop with (docs/requests.md `stop_signal`,
/// docs/stop.md), spelled as in requests: `TERM` (the default), `INT`,
/// `HUP`, `QUIT`, `USR1`, `USR2`, `ALRM` (timeout's `-s ALRM`, as in a
/// cascade of timeouts). Never KILL or STOP: asking is a request the
/// runtime can act on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum StopSignal {
    #[default]
    Term,
    Int,
    Hup,
    Quit,
    Usr1,
    Usr2,
    Alrm,
}

impl StopSignal {
    /// Every spelling a request may use, for messages and `--help`.
    pub const NAMES: &'static str = "TERM, INT, HUP, QUIT, USR1, USR2, ALRM";

    /// The signal as a sweep record spells it.
    pub fn sig(self) -> Sig {
        match self {
            StopSignal::Term => Sig::TERM,
            StopSignal::Int => Sig::INT,
            StopSignal::Hup => Sig::HUP,
            StopSignal::Quit => Sig::QUIT,
            StopSignal::Usr1 => Sig::USR1,
            StopSignal::Usr2 => Sig::USR2,
            StopSignal::Alrm => Sig::ALRM,
        }
    }

    /// The stop signal numbered `sig`, if it is one.
    pub fn from_number(sig: i32) -> Option<StopSignal> {
        [
            StopSignal::Term,
            StopSignal::Int,
            StopSignal::Hup,
            StopSignal::Quit,
            StopSignal::Usr1,
            StopSignal::Usr2,
            StopSignal::Alrm,
        ]
        .into_iter()
        .find(|s| s.sig().number() == sig)
    }

    /// Parses a request's or a command line's spelling (`TERM`, also
    /// `SIGTERM`, any case); `None` for anything else.
    pub fn parse(s: &str) -> Option<StopSignal> {
        let up = s.to_ascii_uppercase();
        let name = up.strip_prefix("SIG").unwrap_or(&up);
        Some(match name {
            "TERM" => StopSignal::Term,
            "INT" => StopSignal::Int,
            "HUP" => StopSignal::Hup,
            "QUIT" => StopSignal::Quit,
            "USR1" => StopSignal::Usr1,
            "USR2" => StopSignal::Usr2,
            "ALRM" => StopSignal::Alrm,
            _ => return None,
        })
    }
}

/// Why a live descendant could not be proven to be the process scanned.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Uncertainty {
    /// `pidfd_open` failed while the process was alive (EMFILE, ENOMEM, ...).
    PidfdFailed,
    /// The pid now names a process with another start time (reuse).
    StartTimeChanged,
    /// Real, effective, saved or filesystem uid is not the watchdog's.
    UidMismatch,
    /// The parent changed to something other than the watchdog.
    ParentChanged,
    /// `/proc/PID` could not be read back after the pidfd was opened.
    Unreadable,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Spawn,
    Stop,
    Close,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Capture {
    /// Keep the bytes (up to the cap) and return them to the caller.
    Capture,
    /// Keep only byte counts and SHA-256 digests.
    Discard,
}

/// Why a request was refused. Each is a stable code in replies and records.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Not JSON, not an object, invalid UTF-8, a missing field or a wrong type.
    Malformed,
    /// Longer than 4096 bytes with its RS and LF.
    Oversize,
    /// A line that did not start with RS (requests are RFC 7464 texts).
    Framing,
    /// Bytes cut off by the next RS before their LF (a writer that died
    /// mid-request, or garbage): discarded so they cannot touch the next.
    Truncated,
    UnknownField,
    DuplicateKey,
    BadVersion,
    BadOp,
    BadId,
    BadCaller,
    BadArgv,
    RelativeArgv0,
    BadDeadline,
    BadCapture,
    BadName,
    /// `inner_alarm_ms` not a positive integer below `deadline_ms`.
    BadInnerAlarm,
    /// `stop_signal` not one of TERM, INT, HUP, QUIT, USR1, USR2.
    BadStopSignal,
    /// `cwd` not an absolute path without NUL.
    BadCwd,
    /// `env` not an object of names (no `=`, no NUL, not empty) to strings
    /// without NUL.
    BadEnv,
    /// `stdin` not a token; or the file in `replies/` is a symlink, not a
    /// regular file, of another owner or mode, or cannot be opened.
    BadStdin,
    /// Reply FIFO outside `replies/`, a symlink, not a FIFO, wrong owner or
    /// mode, or nobody reading it.
    BadReply,
    CallerNotAlive,
    /// The caller's start time or uid is not what the request claims, or
    /// not the watchdog's uid.
    CallerMismatch,
    /// The caller is neither the root controller nor a descendant of the
    /// watchdog or of the root.
    CallerNotOwned,
    DuplicateId,
    /// The action is stopping or stopped: nothing launches again.
    Aborted,
    /// The action is closing.
    Closed,
    /// The program does not exist (exec said ENOENT).
    NotFound,
    /// The program exists but cannot be executed.
    NotExecutable,
    /// fork/pipe/pidfd failed inside the watchdog.
    SpawnFailed,
    /// The watchdog is out of descriptors (EMFILE, ENFILE) for checking
    /// this caller; the request may be sent again.
    NoDescriptors,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::Malformed => "malformed",
            RefusalReason::Oversize => "oversize",
            RefusalReason::Framing => "framing",
            RefusalReason::Truncated => "truncated",
            RefusalReason::UnknownField => "unknown_field",
            RefusalReason::DuplicateKey => "duplicate_key",
            RefusalReason::BadVersion => "bad_version",
            RefusalReason::BadOp => "bad_op",
            RefusalReason::BadId => "bad_id",
            RefusalReason::BadCaller => "bad_caller",
            RefusalReason::BadArgv => "bad_argv",
            RefusalReason::RelativeArgv0 => "relative_argv0",
            RefusalReason::BadDeadline => "bad_deadline",
            RefusalReason::BadCapture => "bad_capture",
            RefusalReason::BadName => "bad_name",
            RefusalReason::BadInnerAlarm => "bad_inner_alarm",
            RefusalReason::BadStopSignal => "bad_stop_signal",
            RefusalReason::BadCwd => "bad_cwd",
            RefusalReason::BadEnv => "bad_env",
            RefusalReason::BadStdin => "bad_stdin",
            RefusalReason::BadReply => "bad_reply",
            RefusalReason::CallerNotAlive => "caller_not_alive",
            RefusalReason::CallerMismatch => "caller_mismatch",
            RefusalReason::CallerNotOwned => "caller_not_owned",
            RefusalReason::DuplicateId => "duplicate_id",
            RefusalReason::Aborted => "aborted",
            RefusalReason::Closed => "closed",
            RefusalReason::NotFound => "not_found",
            RefusalReason::NotExecutable => "not_executable",
            RefusalReason::SpawnFailed => "spawn_failed",
            RefusalReason::NoDescriptors => "no_descriptors",
        }
    }
}

/// `[A-Za-z0-9_.-]{1,64}`: request ids, job names, run ids.
pub fn is_token(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A reply FIFO's name: a token that is not `.` or `..` (no slash possible).
pub fn is_reply_name(s: &str) -> bool {
    is_token(s) && s != "." && s != ".."
}

/// Cuts a diagnostic to a bounded length (records and replies stay small).
pub fn bounded(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Lowercase hex, the only spelling of a digest in a record.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// A 64-digit lowercase hex digest (what `prev`, heads and `--expect-head` hold).
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
