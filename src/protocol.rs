//! The request FIFO's and reply FIFOs' wire format (docs/requests.md).
//!
//! A request is one RFC 7464 text, RS, one JSON object, LF, of at most
//! [`MAX_REQUEST`] bytes in all, so concurrent writers never interleave
//! (PIPE_BUF); the watchdog's framer (`watchdog/framer.rs`) cuts texts out
//! of the FIFO's bytes. Parsing a text is two-step: the envelope with every
//! field as raw JSON (so unknown fields and duplicate keys are caught before
//! anything is believed), then each field with its own refusal reason.
//! Where the schema says object, only an object is taken: serde's derive
//! would take a JSON array for a struct (fields by position).

use serde::de::Error as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::json_error::{self, ErrorKind, JsonError};
use crate::vocab::{bounded, is_reply_name, is_token, Ident, StopSignal};
/// The request vocabulary (defined in [`crate::vocab`]).
pub use crate::vocab::{Capture, Op, RefusalReason};
/// The reply lines (`protocol/reply.rs`).
pub use reply::{Reply, StreamReply};

mod reply;

/// Request line cap, newline included (PIPE_BUF).
pub const MAX_REQUEST: usize = 4096;
/// RFC 7464's record separator: the first byte of every request text.
pub const RS: u8 = 0x1e;

/// One request as a writer sends it (docs/requests.md): RS, the JSON, LF. Written
/// with one `write` of at most [`MAX_REQUEST`] bytes, it never interleaves
/// with another writer's.
pub fn frame(json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(json.len() + 2);
    v.push(RS);
    v.extend_from_slice(json);
    v.push(b'\n');
    v
}

pub use crate::vocab::PROTOCOL_VERSION;
/// The state directory's layout, as a client finds it: the request FIFO,
/// the directory of reply FIFOs, the private temp root and the ready file.
pub const REQUESTS: &str = "requests";
pub const REPLIES: &str = "replies";
pub const TMP: &str = "tmp";
pub const READY: &str = "ready.json";
/// Most argv entries a request may carry.
pub const MAX_ARGV: usize = 1024;

/// Who sends a request, as the request claims; the watchdog checks it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Caller {
    pub pid: i32,
    pub start_time: u64,
    pub uid: u32,
}

impl Caller {
    pub fn ident(self) -> Ident {
        Ident {
            pid: self.pid,
            start_time: self.start_time,
            uid: self.uid,
        }
    }
}

/// A request as the client writes it.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub v: u32,
    pub op: Op,
    pub id: String,
    pub caller: Caller,
    pub reply: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<Capture>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_alarm_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<StopSignal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
}

/// What a spawn request asks for, once every field has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnSpec {
    pub argv: Vec<String>,
    pub deadline_ms: u64,
    pub capture: Capture,
    pub name: Option<String>,
    /// The runtime's own alarm (docs/requests.md): SIGALRM to the leader this many
    /// ms after spawn, through its pidfd; below `deadline_ms`; not a stop.
    pub inner_alarm_ms: Option<u64>,
    /// What the leader is asked to stop with (docs/stop.md); TERM when
    /// the request did not say.
    pub stop_signal: StopSignal,
    /// The job's working directory (default: the watchdog's).
    pub cwd: Option<String>,
    /// The job's whole environment, the `REA_*` names set over it
    /// (default: the job environment of docs/architecture.md).
    pub env: Option<Vec<(String, String)>>,
    /// A regular file in `replies/` the job reads as its stdin (default
    /// `/dev/null`); opened and checked at admission.
    pub stdin: Option<String>,
}

/// A request whose every field has been parsed and checked for shape.
/// Whether the caller is who it claims is checked later, against `/proc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedRequest {
    pub op: Op,
    pub id: String,
    pub caller: Caller,
    pub reply: String,
    pub spawn: Option<SpawnSpec>,
}

/// A refusal found while parsing, with what was learnt before it (the id and
/// reply name, so the refusal can still be answered where possible).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub detail: String,
    pub id: Option<String>,
    pub reply: Option<String>,
}

impl Refusal {
    fn new(reason: RefusalReason, detail: impl Into<String>) -> Self {
        Refusal {
            reason,
            detail: detail.into(),
            id: None,
            reply: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    #[serde(borrow)]
    v: &'a RawValue,
    #[serde(borrow)]
    op: &'a RawValue,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    caller: &'a RawValue,
    #[serde(borrow)]
    reply: &'a RawValue,
    #[serde(borrow, default, deserialize_with = "present")]
    argv: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    deadline_ms: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    capture: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    name: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    inner_alarm_ms: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    stop_signal: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    cwd: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    env: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    stdin: Option<&'a RawValue>,
}

impl Wire<'_> {
    /// Any of the fields only a spawn takes.
    fn has_spawn_fields(&self) -> bool {
        [
            self.argv,
            self.deadline_ms,
            self.capture,
            self.name,
            self.inner_alarm_ms,
            self.stop_signal,
            self.cwd,
            self.env,
            self.stdin,
        ]
        .iter()
        .any(Option::is_some)
    }
}

/// An `env` object's pairs in order; a name twice is an error, not "the
/// last one wins" (the envelope's own rule for duplicate keys).
struct EnvPairs(Vec<(String, String)>);

impl<'de> Deserialize<'de> for EnvPairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = EnvPairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of names to strings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<EnvPairs, A::Error> {
                let mut pairs: Vec<(String, String)> = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    if pairs.iter().any(|(n, _)| *n == k) {
                        return Err(A::Error::custom(format!("{k:?} twice")));
                    }
                    pairs.push((k, v));
                }
                Ok(EnvPairs(pairs))
            }
        }
        d.deserialize_map(V)
    }
}

/// An optional field that is present, even as `null`: an explicit `null`
/// is a wrong type for its field, not an absent field.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Only for addressing a refusal of a request that failed the strict parse;
/// nothing is ever decided from it.
#[derive(Deserialize)]
struct Addressing {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    reply: Option<String>,
}

/// A JSON text whose value is an object (its first significant byte is
/// `{`). Checked before any struct is deserialised from it: serde's derive
/// also accepts an array, taking the fields by position.
pub fn is_object(json: &str) -> bool {
    json.trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
}

/// The refusal a JSON error stands for, by its kind.
pub fn json_error_reason(e: &JsonError) -> RefusalReason {
    match e.kind {
        ErrorKind::UnknownField => RefusalReason::UnknownField,
        ErrorKind::DuplicateField => RefusalReason::DuplicateKey,
        _ => RefusalReason::Malformed,
    }
}

fn field<'de, T: Deserialize<'de>>(
    raw: &'de RawValue,
    reason: RefusalReason,
    what: &str,
) -> Result<T, Refusal> {
    serde_json::from_str(raw.get())
        .map_err(|e| Refusal::new(reason, format!("{what}: {}", bounded(&e.to_string()))))
}

/// Parses one request line (without its newline). `line` may be any bytes.
pub fn parse_request(line: &[u8]) -> Result<ParsedRequest, Refusal> {
    if line.len() + 2 > MAX_REQUEST {
        return Err(Refusal::new(
            RefusalReason::Oversize,
            format!(
                "request is {} bytes with RS and LF; the cap is {MAX_REQUEST}",
                line.len() + 2
            ),
        ));
    }
    let text = std::str::from_utf8(line)
        .map_err(|e| Refusal::new(RefusalReason::Malformed, format!("invalid UTF-8: {e}")))?;
    if !is_object(text) {
        return Err(Refusal::new(
            RefusalReason::Malformed,
            "a request is a JSON object",
        ));
    }
    let wire: Wire = match json_error::from_str(text) {
        Ok(w) => w,
        Err(e) => {
            let mut r = Refusal::new(json_error_reason(&e), bounded(&e.to_string()));
            if let Ok(a) = serde_json::from_str::<Addressing>(text) {
                r.id = a.id.filter(|i| is_token(i));
                r.reply = a.reply.filter(|n| is_reply_name(n));
            }
            return Err(r);
        }
    };

    // id and reply first: with them a refusal can be answered. A bad id
    // is still answered (with a null id) when the reply name is usable.
    let bad_id = |r: Refusal| Refusal {
        reply: serde_json::from_str::<String>(wire.reply.get())
            .ok()
            .filter(|n| is_reply_name(n)),
        ..r
    };
    let id: String = field(wire.id, RefusalReason::BadId, "id").map_err(bad_id)?;
    if !is_token(&id) {
        return Err(bad_id(Refusal::new(
            RefusalReason::BadId,
            "id must match [A-Za-z0-9_.-]{1,64}",
        )));
    }
    let with_id = |mut r: Refusal| {
        r.id = Some(id.clone());
        r
    };
    let reply: String = field(wire.reply, RefusalReason::BadReply, "reply").map_err(with_id)?;
    if !is_reply_name(&reply) {
        return Err(with_id(Refusal::new(
            RefusalReason::BadReply,
            "reply must be a FIFO name inside replies/ ([A-Za-z0-9_.-]{1,64}, no path)",
        )));
    }
    let addressed = |r: Refusal| Refusal {
        id: Some(id.clone()),
        reply: Some(reply.clone()),
        ..r
    };

    let v: u64 = field(wire.v, RefusalReason::BadVersion, "v").map_err(addressed)?;
    if v != u64::from(PROTOCOL_VERSION) {
        return Err(addressed(Refusal::new(
            RefusalReason::BadVersion,
            format!("v is {v}; this watchdog speaks {PROTOCOL_VERSION}"),
        )));
    }
    let op: Op = field(wire.op, RefusalReason::BadOp, "op").map_err(addressed)?;
    let caller = parse_caller(wire.caller).map_err(addressed)?;

    let spawn = match op {
        Op::Spawn => Some(parse_spawn(&wire).map_err(addressed)?),
        Op::Stop | Op::Close => {
            if wire.has_spawn_fields() {
                return Err(addressed(Refusal::new(
                    RefusalReason::Malformed,
                    "argv, deadline_ms, capture, name, inner_alarm_ms, stop_signal, cwd, env \
                     and stdin belong to spawn only",
                )));
            }
            None
        }
    };
    Ok(ParsedRequest {
        op,
        id,
        caller,
        reply,
        spawn,
    })
}

/// The `caller` field: an object of exactly its three fields, a positive
/// pid (whether the caller is who it claims is checked later).
fn parse_caller(raw: &RawValue) -> Result<Caller, Refusal> {
    if !is_object(raw.get()) {
        return Err(Refusal::new(
            RefusalReason::BadCaller,
            "caller must be an object {\"pid\",\"start_time\",\"uid\"}",
        ));
    }
    let caller: Caller = json_error::from_str(raw.get()).map_err(|e| {
        let reason = match json_error_reason(&e) {
            RefusalReason::Malformed => RefusalReason::BadCaller,
            other => other,
        };
        Refusal::new(reason, format!("caller: {}", bounded(&e.to_string())))
    })?;
    if caller.pid <= 0 {
        return Err(Refusal::new(
            RefusalReason::BadCaller,
            "caller.pid must be positive",
        ));
    }
    Ok(caller)
}

fn parse_spawn(wire: &Wire) -> Result<SpawnSpec, Refusal> {
    let raw = wire
        .argv
        .ok_or_else(|| Refusal::new(RefusalReason::BadArgv, "spawn needs argv"))?;
    let argv: Vec<String> = field(raw, RefusalReason::BadArgv, "argv")?;
    if argv.is_empty() || argv.len() > MAX_ARGV {
        return Err(Refusal::new(
            RefusalReason::BadArgv,
            format!("argv must have 1 to {MAX_ARGV} entries"),
        ));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(Refusal::new(
            RefusalReason::BadArgv,
            "argv entries may not contain NUL",
        ));
    }
    if !argv[0].starts_with('/') {
        return Err(Refusal::new(
            RefusalReason::RelativeArgv0,
            format!(
                "argv[0] must be an absolute path, got {:?}",
                bounded(&argv[0])
            ),
        ));
    }
    let raw = wire
        .deadline_ms
        .ok_or_else(|| Refusal::new(RefusalReason::BadDeadline, "spawn needs deadline_ms"))?;
    let deadline_ms: u64 = field(raw, RefusalReason::BadDeadline, "deadline_ms")?;
    if deadline_ms == 0 {
        return Err(Refusal::new(
            RefusalReason::BadDeadline,
            "deadline_ms must be positive",
        ));
    }
    let raw = wire
        .capture
        .ok_or_else(|| Refusal::new(RefusalReason::BadCapture, "spawn needs capture"))?;
    let capture: Capture = field(raw, RefusalReason::BadCapture, "capture")?;
    let name = match wire.name {
        None => None,
        Some(raw) => {
            let n: String = field(raw, RefusalReason::BadName, "name")?;
            if !is_token(&n) {
                return Err(Refusal::new(
                    RefusalReason::BadName,
                    "name must match [A-Za-z0-9_.-]{1,64}",
                ));
            }
            Some(n)
        }
    };
    let inner_alarm_ms = match wire.inner_alarm_ms {
        None => None,
        Some(raw) => {
            let ms: u64 = field(raw, RefusalReason::BadInnerAlarm, "inner_alarm_ms")?;
            if ms == 0 || ms >= deadline_ms {
                return Err(Refusal::new(
                    RefusalReason::BadInnerAlarm,
                    format!(
                        "inner_alarm_ms must be positive and below deadline_ms ({deadline_ms})"
                    ),
                ));
            }
            Some(ms)
        }
    };
    let stop_signal = match wire.stop_signal {
        None => StopSignal::default(),
        Some(raw) => field(raw, RefusalReason::BadStopSignal, "stop_signal").map_err(|r| {
            Refusal::new(
                r.reason,
                format!("stop_signal must be one of {}", StopSignal::NAMES),
            )
        })?,
    };
    let (cwd, env, stdin) = parse_surroundings(wire)?;
    Ok(SpawnSpec {
        argv,
        deadline_ms,
        capture,
        name,
        inner_alarm_ms,
        stop_signal,
        cwd,
        env,
        stdin,
    })
}

type Surroundings = (
    Option<String>,
    Option<Vec<(String, String)>>,
    Option<String>,
);

/// A spawn's `cwd`, `env` and `stdin`, each optional, each checked for shape.
fn parse_surroundings(wire: &Wire) -> Result<Surroundings, Refusal> {
    let cwd = match wire.cwd {
        None => None,
        Some(raw) => {
            let c: String = field(raw, RefusalReason::BadCwd, "cwd")?;
            if !c.starts_with('/') || c.contains('\0') {
                let detail = format!("cwd must be an absolute path, got {:?}", bounded(&c));
                return Err(Refusal::new(RefusalReason::BadCwd, detail));
            }
            Some(c)
        }
    };
    let env = match wire.env {
        None => None,
        Some(raw) if !is_object(raw.get()) => {
            return Err(Refusal::new(RefusalReason::BadEnv, "env must be an object"));
        }
        Some(raw) => {
            let EnvPairs(pairs) = field(raw, RefusalReason::BadEnv, "env")?;
            let bad = |(k, v): &&(String, String)| {
                k.is_empty() || k.contains(['=', '\0']) || v.contains('\0')
            };
            if let Some((k, _)) = pairs.iter().find(bad) {
                let detail = format!(
                    "env: {:?}: a name is not empty and has no = or NUL; a value has no NUL",
                    bounded(k)
                );
                return Err(Refusal::new(RefusalReason::BadEnv, detail));
            }
            Some(pairs)
        }
    };
    let stdin = match wire.stdin {
        None => None,
        Some(raw) => {
            let n: String = field(raw, RefusalReason::BadStdin, "stdin")?;
            if !is_reply_name(&n) {
                let detail = "stdin must be a file name inside replies/ ([A-Za-z0-9_.-]{1,64})";
                return Err(Refusal::new(RefusalReason::BadStdin, detail));
            }
            Some(n)
        }
    };
    Ok((cwd, env, stdin))
}
