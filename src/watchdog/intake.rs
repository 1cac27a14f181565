//! The intake room: FIFO bytes → request texts → admitted requests.
//!
//! - The framer (`framer.rs`) cuts the byte stream into RFC 7464 texts.
//! - [`Intake::fill`] and [`Intake::next`] bound the work of one wake-up
//!   (docs/requests.md): one FIFO read of at most [`READ_BUDGET`] bytes at a time,
//!   and at most [`TEXT_BUDGET`] texts that need real work, before signals,
//!   pidfds, deadlines and the stop step get their turn. A job flooding the
//!   FIFO can slow its own requests, never the watchdog.
//! - [`Intake::take`] runs one text through the parser
//!   (`protocol::parse_request`), the reply channel, the caller check
//!   (`caller::verify`) and admission. A refusal that can be answered is
//!   recorded and answered one by one; one that cannot (garbage, fragments,
//!   no usable reply FIFO) only joins the ledger's burst of unanswerable
//!   refusals, one record per burst, not two synced records per bad line.
//! - [`Intake::admit`] is pure: a parsed request, its checked caller and
//!   the state the loop hands in ([`Gate`]) → accepted or refused.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;

use super::caller::{self, Verified};
use super::effect::{Effects, ReplyTo};
use super::framer::{Framer, Text};
use super::launch_request::LaunchRequest;
use super::ledger::Ledger;
use super::reply::{Replies, ReplyError};
use super::state_dir::StateDir;
use super::stop::Trigger;
use crate::kinds::watchdog::{Event, RequestReceived, RequestRefused};
use crate::protocol::{parse_request, ParsedRequest, Reply, MAX_REQUEST, PROTOCOL_VERSION};
use crate::vocab::{bounded, Ident, Op, RefusalReason, StopReason};

/// Bytes read from the FIFO at a time (one read per wake-up at most).
pub const READ_BUDGET: usize = 64 * 1024;
/// Texts that need real work (parse, caller check, records) per wake-up.
/// Texts refused without a word (unframed, truncated, oversize) cost only a
/// count and are not limited beyond the read budget.
pub const TEXT_BUDGET: usize = 64;

/// The state admission decides on, handed in by the loop.
#[derive(Clone, Copy, Debug)]
pub struct Gate {
    /// `Some(reason)` once the action is stopping or stopped.
    pub stopped_for: Option<StopReason>,
    /// A close was requested (or exec is closing itself).
    pub closing: bool,
}

/// An accepted request: what the loop is to do.
pub enum Admitted {
    /// A job to launch (its caller bound, when not the root).
    Spawn(Box<LaunchRequest>),
    /// A stop, answered when it completes.
    Stop {
        reply: ReplyTo,
        trigger: Trigger,
    },
    Close {
        reply: ReplyTo,
    },
}

pub type Refused = (RefusalReason, String);

/// What taking one text needs from the loop, lent for the call.
pub struct Desk<'a> {
    pub ledger: &'a mut Ledger,
    pub replies: &'a mut Replies,
    pub state: &'a StateDir,
    pub me: Ident,
    /// `None` when no root was bound (an init, the `timeout` personality).
    pub root: Option<Ident>,
    pub root_alive: bool,
    /// Who `job_spawned` names when the root asked (`None` in exec mode).
    pub root_caller: Option<Ident>,
    pub gate: Gate,
    pub fx: &'a mut Effects,
}

impl Desk<'_> {
    fn open_reply(&mut self, name: &str) -> Result<u64, ReplyError> {
        self.replies
            .open(self.state.replies.as_fd(), name, self.me.uid)
    }

    /// Records a refusal (durably) and answers it on `chan`; an `aborted`
    /// one says why the action stopped.
    fn refuse(&mut self, (reason, detail): Refused, id: Option<String>, chan: u64) {
        let stop_reason = self
            .gate
            .stopped_for
            .filter(|_| reason == RefusalReason::Aborted);
        let detail = bounded(&detail);
        self.ledger.record(Event::RequestRefused(RequestRefused {
            id: id.clone(),
            reason,
            detail: detail.clone(),
        }));
        let to = ReplyTo {
            chan,
            id: id.clone().unwrap_or_else(|| "?".into()),
        };
        let reply = Reply::Refused {
            v: PROTOCOL_VERSION,
            id,
            reason,
            detail,
            stop_reason,
            errno: None,
        };
        self.fx.reply(&to, reply, true);
    }
}

fn received(id: Option<String>, req: Option<&ParsedRequest>, bytes: u64) -> Event {
    Event::RequestReceived(RequestReceived {
        id,
        op: req.map(|r| r.op),
        caller: req.map(|r| r.caller.ident()),
        bytes,
    })
}

/// The intake's state: the framer, texts framed but not yet taken, and
/// admission's memory of the request ids used in this run.
#[derive(Debug, Default)]
pub struct Intake {
    framer: Framer,
    queue: VecDeque<Text>,
    /// The last read filled its buffer: the FIFO may hold more.
    more: bool,
    used_ids: HashSet<String>,
}

impl Intake {
    /// Reads the FIFO once (at most [`READ_BUDGET`] bytes) if every text
    /// read before has been taken. Memory stays bounded by one read.
    pub fn fill(&mut self, fifo: &mut File) {
        if !self.queue.is_empty() {
            // Readiness is edge-triggered: remember it, or input that came
            // while the queue was full would wait for a write that may never
            // come (a flooder blocked on the full pipe, then stopped).
            self.more = true;
            return;
        }
        let mut buf = vec![0u8; READ_BUDGET];
        let mut out = Vec::new();
        self.more = loop {
            match fifo.read(&mut buf) {
                Ok(n) => {
                    self.framer.feed(&buf[..n], &mut out);
                    break n == buf.len();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break false, // EAGAIN: drained
            }
        };
        self.queue.extend(out);
    }

    /// The FIFO polled readable: it may hold more than the last read saw
    /// (edge-triggered: no new event comes for what is already there), so
    /// it is read again once the queued texts are taken.
    pub fn readable(&mut self) {
        self.more = true;
    }

    /// The next framed text, if any.
    pub fn next_text(&mut self) -> Option<Text> {
        self.queue.pop_front()
    }

    /// Input is waiting (framed texts, or a FIFO that may hold more): the
    /// loop must come back without sleeping.
    pub fn pending(&self) -> bool {
        self.more || !self.queue.is_empty()
    }

    /// Takes one framed text: records it (a request that parsed durably,
    /// before anything is decided on it), opens its reply channel, checks
    /// its caller and admits it. `None` when it was refused (recorded and
    /// answered where it can be).
    pub fn take(&mut self, text: Text, desk: &mut Desk<'_>) -> Option<Admitted> {
        let quiet = |desk: &mut Desk<'_>, id: Option<&str>, reason, detail: String, n: usize| {
            desk.ledger.refused_quietly(id, reason, &detail, n as u64);
            None
        };
        let json = match text {
            Text::Json(json) => json,
            Text::Unframed(n) => {
                let detail = "a line without RS: requests are RS, JSON, LF (RFC 7464)";
                return quiet(desk, None, RefusalReason::Framing, detail.into(), n);
            }
            Text::Truncated(n) => {
                let detail = format!("{n} bytes cut off by the next RS before their LF");
                return quiet(desk, None, RefusalReason::Truncated, detail, n);
            }
            Text::Oversize(n) => {
                let detail = format!("a text longer than {MAX_REQUEST} bytes with RS and LF");
                return quiet(desk, None, RefusalReason::Oversize, detail, n);
            }
        };
        let bytes = json.len() as u64 + 2;
        let req = match parse_request(&json) {
            Ok(req) => req,
            Err(r) => match r.reply.as_deref().and_then(|n| desk.open_reply(n).ok()) {
                Some(chan) => {
                    desk.ledger.append(received(r.id.clone(), None, bytes));
                    desk.refuse((r.reason, r.detail), r.id, chan);
                    return None;
                }
                None => return quiet(desk, r.id.as_deref(), r.reason, r.detail, bytes as usize),
            },
        };
        // Without a usable reply FIFO nobody can be told: a quiet refusal.
        let chan = match desk.open_reply(&req.reply) {
            Ok(c) => c,
            Err(d) => {
                let id = Some(req.id.as_str());
                return quiet(
                    desk,
                    id,
                    RefusalReason::BadReply,
                    d.to_string(),
                    bytes as usize,
                );
            }
        };
        desk.ledger
            .record(received(Some(req.id.clone()), Some(&req), bytes));
        let mut gate = desk.gate;
        if desk.ledger.error().is_some() {
            // The loop turns the failure into a stop once this text is
            // taken; nothing launches meanwhile.
            gate.stopped_for.get_or_insert(StopReason::AuditFailure);
        }
        let caller = caller::verify(req.caller, desk.me, desk.root, desk.root_alive);
        let id = req.id.clone();
        desk.gate = gate;
        match self.admit(req, chan, caller, gate, desk.root_caller) {
            Ok(Admitted::Spawn(mut launch)) if launch.stdin_name.is_some() => {
                let name = launch.stdin_name.take().unwrap_or_default();
                match desk
                    .replies
                    .open_input(desk.state.replies.as_fd(), &name, desk.me.uid)
                {
                    Ok(file) => {
                        launch.stdin = Some(file);
                        Some(Admitted::Spawn(launch))
                    }
                    Err(e) => {
                        // Refused, so the id is not used after all.
                        self.used_ids.remove(&id);
                        desk.refuse((RefusalReason::BadStdin, e.to_string()), Some(id), chan);
                        None
                    }
                }
            }
            Ok(a) => Some(a),
            Err(r) => {
                desk.refuse(r, Some(id), chan);
                None
            }
        }
    }

    /// Admits `req`, answered on `chan`, whose caller check gave `caller`.
    /// In this order: the caller, a reused id, a close in progress (only a
    /// stop may still come: a controller may escalate close → stop), and
    /// for a spawn, a stopped action (nothing launches again). An admitted
    /// request's id is used from now on; a refused one's is not.
    pub fn admit(
        &mut self,
        req: ParsedRequest,
        chan: u64,
        caller: Result<Verified, Refused>,
        gate: Gate,
        root: Option<Ident>,
    ) -> Result<Admitted, Refused> {
        let caller = caller?;
        if self.used_ids.contains(&req.id) {
            let detail = format!("id {} was already used in this run", req.id);
            return Err((RefusalReason::DuplicateId, detail));
        }
        if gate.closing && req.op != Op::Stop {
            return Err((RefusalReason::Closed, "the action is closing".into()));
        }
        let reply = ReplyTo {
            chan,
            id: req.id.clone(),
        };
        let admitted = match (req.op, req.spawn) {
            (Op::Spawn, Some(spec)) => {
                if let Some(why) = gate.stopped_for {
                    let detail = format!(
                        "the action was stopped ({}); nothing launches again",
                        why.as_str()
                    );
                    return Err((RefusalReason::Aborted, detail));
                }
                let caller = match caller {
                    Verified::Root => None,
                    Verified::Bound(b) => Some(b),
                };
                Admitted::Spawn(Box::new(LaunchRequest::admitted(reply, spec, caller, root)))
            }
            (Op::Spawn, None) => return Err((RefusalReason::BadArgv, "spawn without argv".into())),
            (Op::Stop, _) => {
                let detail = format!("stop requested by pid {}", req.caller.pid);
                let trigger = Trigger::new(StopReason::StopRequested, detail);
                Admitted::Stop { reply, trigger }
            }
            (Op::Close, _) => Admitted::Close { reply },
        };
        self.used_ids.insert(req.id);
        Ok(admitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse_request;

    fn request(op: &str, id: &str) -> ParsedRequest {
        let extra = if op == "spawn" {
            r#","argv":["/bin/true"],"deadline_ms":1000,"capture":"discard""#
        } else {
            ""
        };
        let line = format!(
            r#"{{"v":1,"op":"{op}","id":"{id}","caller":{{"pid":5,"start_time":7,"uid":0}},"reply":"r"{extra}}}"#
        );
        parse_request(line.as_bytes()).unwrap()
    }

    const ROOT: Ident = Ident {
        pid: 5,
        start_time: 7,
        uid: 0,
    };

    const RUNNING: Gate = Gate {
        stopped_for: None,
        closing: false,
    };

    fn reason(r: Result<Admitted, Refused>) -> Option<RefusalReason> {
        r.err().map(|(reason, _)| reason)
    }

    #[test]
    fn readiness_seen_while_texts_are_queued_is_not_lost() {
        use std::io::Write;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK).unwrap();
        let (mut r, mut w) = (File::from(r), File::from(w));
        let mut i = Intake::default();
        w.write_all(b"\x1e{}\n\x1e{}\n").unwrap();
        i.fill(&mut r);
        assert!(i.next_text().is_some());
        // More input arrives (one edge) while a text is still queued.
        w.write_all(b"\x1e{}\n").unwrap();
        i.fill(&mut r);
        assert!(i.next_text().is_some());
        assert!(i.pending(), "the FIFO's new input is still to be read");
        i.fill(&mut r);
        assert_eq!(i.next_text(), Some(Text::Json(b"{}".to_vec())));
        assert!(i.next_text().is_none());
    }

    #[test]
    fn an_id_is_used_once_admitted_and_not_when_refused() {
        let mut i = Intake::default();
        let closing = Gate {
            closing: true,
            ..RUNNING
        };
        let r = i.admit(
            request("spawn", "a"),
            0,
            Ok(Verified::Root),
            closing,
            Some(ROOT),
        );
        assert_eq!(reason(r), Some(RefusalReason::Closed));
        let r = i.admit(
            request("spawn", "a"),
            0,
            Ok(Verified::Root),
            RUNNING,
            Some(ROOT),
        );
        assert!(
            matches!(&r, Ok(Admitted::Spawn(req)) if req.caller.is_none() && req.caller_ident == Some(ROOT))
        );
        let r = i.admit(
            request("stop", "a"),
            0,
            Ok(Verified::Root),
            RUNNING,
            Some(ROOT),
        );
        assert_eq!(reason(r), Some(RefusalReason::DuplicateId));
    }

    #[test]
    fn the_caller_check_comes_first() {
        let mut i = Intake::default();
        let bad = Err((RefusalReason::CallerNotOwned, "no".to_string()));
        let r = i.admit(request("spawn", "a"), 0, bad, RUNNING, Some(ROOT));
        assert_eq!(reason(r), Some(RefusalReason::CallerNotOwned));
        // The refused request did not use its id.
        let r = i.admit(
            request("close", "a"),
            0,
            Ok(Verified::Root),
            RUNNING,
            Some(ROOT),
        );
        assert!(matches!(r, Ok(Admitted::Close { .. })));
    }

    #[test]
    fn once_stopped_nothing_launches_but_stop_and_close_are_taken() {
        let mut i = Intake::default();
        let stopped = Gate {
            stopped_for: Some(StopReason::Deadline),
            closing: false,
        };
        let r = i.admit(
            request("spawn", "a"),
            0,
            Ok(Verified::Root),
            stopped,
            Some(ROOT),
        );
        assert_eq!(reason(r), Some(RefusalReason::Aborted));
        let r = i.admit(
            request("stop", "b"),
            0,
            Ok(Verified::Root),
            stopped,
            Some(ROOT),
        );
        assert!(
            matches!(&r, Ok(Admitted::Stop { trigger, .. }) if trigger.detail == "stop requested by pid 5")
        );
        let closing = Gate {
            closing: true,
            ..stopped
        };
        let r = i.admit(
            request("stop", "c"),
            0,
            Ok(Verified::Root),
            closing,
            Some(ROOT),
        );
        assert!(
            matches!(r, Ok(Admitted::Stop { .. })),
            "close -> stop escalates"
        );
        let r = i.admit(
            request("close", "d"),
            0,
            Ok(Verified::Root),
            closing,
            Some(ROOT),
        );
        assert_eq!(reason(r), Some(RefusalReason::Closed));
    }
}
