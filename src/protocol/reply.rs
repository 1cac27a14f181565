//! The reply FIFOs' wire format (docs/requests.md#replies): one JSON line
//! per reply, tagged by `type`.

use serde::de::Error as _;
use serde::{Deserialize, Serialize};

use crate::vocab::{Outcome, RefusalReason, Status, StopReason, PROTOCOL_VERSION};

/// One stream of a finished job, as the caller sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StreamReply {
    pub bytes: u64,
    pub sha256: String,
    /// The kept bytes, base64; present only with `capture`.
    pub data_b64: Option<String>,
}

/// A line on a reply FIFO. A spawn gets `accepted` or `refused`, then
/// `exited` or `stopped`; `stop` gets `stop_complete`; `close` gets `closed`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    Accepted {
        v: u32,
        id: String,
        job: u64,
        pid: i32,
        start_time: u64,
    },
    Refused {
        v: u32,
        id: Option<String>,
        reason: RefusalReason,
        detail: String,
        /// `aborted`: why the action stopped (docs/requests.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        /// `not_found`, `not_executable`, `spawn_failed`: what exec (or
        /// chdir, fork) said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
    },
    Exited {
        v: u32,
        id: String,
        job: u64,
        status: Status,
        duration_ms: u64,
        output_capped: bool,
        stdout: StreamReply,
        stderr: StreamReply,
    },
    Stopped {
        v: u32,
        id: String,
        job: u64,
        reason: StopReason,
        status: Status,
        duration_ms: u64,
        output_capped: bool,
        stdout: StreamReply,
        stderr: StreamReply,
    },
    StopComplete {
        v: u32,
        id: String,
        reason: StopReason,
        quiescent: bool,
    },
    Closed {
        v: u32,
        id: String,
        outcome: Outcome,
        stop_reason: Option<StopReason>,
        positive: bool,
        head: String,
        audit_log: String,
    },
}

impl Reply {
    /// Serialises with the trailing newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_else(|e| {
            // Serialising these plain structs cannot fail; keep the invariant
            // visible instead of panicking.
            format!("{{\"type\":\"refused\",\"v\":1,\"id\":null,\"reason\":\"malformed\",\"detail\":{:?}}}", e.to_string()).into_bytes()
        });
        v.push(b'\n');
        v
    }

    pub fn parse(line: &str) -> serde_json::Result<Reply> {
        let r: Reply = serde_json::from_str(line)?;
        if r.version() != PROTOCOL_VERSION {
            return Err(serde_json::Error::custom("unsupported reply version"));
        }
        Ok(r)
    }

    fn version(&self) -> u32 {
        match self {
            Reply::Accepted { v, .. }
            | Reply::Refused { v, .. }
            | Reply::Exited { v, .. }
            | Reply::Stopped { v, .. }
            | Reply::StopComplete { v, .. }
            | Reply::Closed { v, .. } => *v,
        }
    }
}
