//! One job: its leader's pidfd, its caller, its output and its deadline.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::time::Instant;

use sha2::{Digest, Sha256};

use mio::Token;

use super::effect::ReplyTo;
use super::launch_request::LaunchRequest;
use super::passthrough::Passthrough;
use super::sources::Sources;
use super::spawn::Spawned;
use crate::b64;
use crate::kinds::watchdog::{Status, StreamSummary};
use crate::process::pidfd::VerifiedPidFd;
use crate::protocol::{Capture, StreamReply};
use crate::vocab::{hex, Sig};

/// One of a job's two output streams. Every byte read is counted and
/// hashed; with `capture`, bytes are kept while the job's combined total is
/// within the cap.
pub struct Output {
    pub pipe: Option<File>,
    /// The pipe's token in the loop's sources while it is open.
    pub token: Option<Token>,
    pub bytes: u64,
    hasher: Sha256,
    pub kept: Vec<u8>,
    /// exec mode: reading paused until the passthrough sink drains.
    pub paused: bool,
    /// The last [`pump`] ran out of its budget with bytes still to read:
    /// the loop reads again before it waits (edge-triggered readiness
    /// would not report them again).
    pub more: bool,
}

impl Output {
    /// `None`: the job writes the caller's own descriptor, not a pipe of ours.
    pub fn new(pipe: Option<File>) -> Output {
        Output {
            pipe,
            token: None,
            bytes: 0,
            hasher: Sha256::new(),
            kept: Vec::new(),
            paused: false,
            more: false,
        }
    }

    pub fn summary(&self) -> StreamSummary {
        StreamSummary {
            bytes: self.bytes,
            sha256: hex(&self.hasher.clone().finalize()),
        }
    }
}

pub struct Job {
    pub num: u64,
    pub id: String,
    pub leader: VerifiedPidFd,
    /// The leader pidfd's token in the loop's sources.
    pub leader_token: Option<Token>,
    /// The job's own session (= its leader's pid).
    pub sid: i32,
    pub started: Instant,
    pub deadline: Option<Instant>,
    /// The inner alarm's instant, until it has gone off.
    pub alarm: Option<Instant>,
    /// What the leader is asked to stop with (the stop's ask step).
    pub stop_signal: Sig,
    /// A caller other than the root, bound while the job runs.
    pub caller: Option<VerifiedPidFd>,
    pub caller_token: Option<Token>,
    pub reply: Option<ReplyTo>,
    pub capture: Capture,
    /// exec mode: output is forwarded to the watchdog's own stdout/stderr.
    pub passthrough: bool,
    pub out: [Output; 2],
    pub cap: Option<u64>,
    pub capped: bool,
    /// Set when the leader has been reaped.
    pub status: Option<Status>,
}

impl Job {
    /// A job as it is watched from its spawn on (no pass-through, no
    /// output cap: the caller sets those it has).
    pub fn spawned(
        num: u64,
        req: LaunchRequest,
        sp: Spawned,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Job {
        Job {
            num,
            id: req.id,
            leader: sp.leader,
            leader_token: None,
            sid: sp.sid,
            started: now,
            deadline,
            alarm: req.inner_alarm.map(|a| now + a),
            stop_signal: req.stop_signal,
            caller: req.caller,
            caller_token: None,
            reply: req.reply,
            capture: req.capture,
            passthrough: false,
            out: [Output::new(sp.stdout), Output::new(sp.stderr)],
            cap: None,
            capped: false,
            status: None,
        }
    }

    pub fn running(&self) -> bool {
        self.status.is_none()
    }

    pub fn total(&self) -> u64 {
        self.out[0].bytes + self.out[1].bytes
    }

    /// Accounts bytes read from stream `i`. Returns true exactly once: when
    /// these bytes take the job past its cap (excess output).
    pub fn take(&mut self, i: usize, data: &[u8]) -> bool {
        let before = self.total();
        let o = &mut self.out[i];
        o.bytes += data.len() as u64;
        o.hasher.update(data);
        if self.capture == Capture::Capture {
            let room = self
                .cap
                .map_or(usize::MAX, |c| c.saturating_sub(before) as usize);
            let keep = data.len().min(room);
            self.out[i].kept.extend_from_slice(&data[..keep]);
        }
        match self.cap {
            Some(cap) if !self.capped && self.total() > cap => {
                self.capped = true;
                true
            }
            _ => false,
        }
    }

    pub fn stream_reply(&self, i: usize) -> StreamReply {
        let s = self.out[i].summary();
        StreamReply {
            bytes: s.bytes,
            sha256: s.sha256,
            data_b64: (self.capture == Capture::Capture).then(|| b64::encode(&self.out[i].kept)),
        }
    }
}

/// Reads of one buffer per [`pump`] of a running job. A writer that
/// refills its pipe as fast as it is read (`vmsplice` gifts pages, no
/// copy) never lets "read until it would block" end: 636 MB were read past
/// a 64 KiB cap that way while the stop waited. Past the budget the loop
/// goes round (its other events, the stop's steps) and reads again.
const PUMP_READS: usize = 4;

/// Reads when the leader has been reaped (the last pump of its pipes):
/// the largest pipe an unprivileged writer can make (`pipe-max-size`,
/// 1 MiB by default) at one buffer a read. What an escapee writes past
/// it is not read: the pipe is closed.
const DRAIN_READS: usize = 16;

/// What one [`pump`] found.
pub struct Pumped {
    pub eof: bool,
    /// These reads took the job past its cap (once per job).
    pub crossed_cap: bool,
    /// exec mode: the passthrough sink is full; reading waits for it.
    pub paused: bool,
    /// The budget ran out before the pipe would block.
    pub more: bool,
}

/// Closes a stream's pipe and takes it out of the loop.
pub fn close_pipe(out: &mut Output, src: &mut Sources) {
    if let Some(p) = out.pipe.take() {
        if let Some(t) = out.token.take() {
            src.remove(t, p.as_raw_fd());
        }
    }
}

/// Reads a job's pipe until it would block, at most [`PUMP_READS`]
/// buffers ([`DRAIN_READS`] when `draining`), and not past the read that
/// crosses the cap: a job past its cap is not read again (at most the cap
/// plus one buffer is read; the stop it triggered ends the writer). In
/// exec mode, reading also pauses while the passthrough sink is full and
/// `draining` is false.
pub fn pump(
    job: &mut Job,
    i: usize,
    mut pass: Option<&mut Passthrough>,
    src: &mut Sources,
    draining: bool,
) -> Pumped {
    let mut buf = [0u8; 65536];
    let mut r = Pumped {
        eof: false,
        crossed_cap: false,
        paused: false,
        more: false,
    };
    let mut budget = if draining { DRAIN_READS } else { PUMP_READS };
    loop {
        if job.capped {
            break;
        }
        if budget == 0 {
            r.more = true;
            break;
        }
        budget -= 1;
        if let Some(p) = &pass {
            if !draining && p.is_full(i) {
                r.paused = true;
                break;
            }
        }
        let Some(pipe) = job.out[i].pipe.as_mut() else {
            break;
        };
        match pipe.read(&mut buf) {
            Ok(0) => {
                r.eof = true;
                break;
            }
            Ok(n) => {
                r.crossed_cap |= job.take(i, &buf[..n]);
                if let Some(p) = pass.as_mut() {
                    p.push(src, i, &buf[..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                r.eof = true;
                break;
            }
        }
    }
    r
}
