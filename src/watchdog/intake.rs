//! The intake room: FIFO bytes → request texts → admitted requests.
//!
//! Two pure parts, each testable without a process:
//! - the [`Framer`] cuts the byte stream into texts (one request a line,
//!   at most [`MAX_REQUEST`] bytes with its newline; a longer one is
//!   refused once and skipped up to its newline);
//! - [`Intake::admit`] decides, for a request that parsed and whose caller
//!   was checked against `/proc`, whether it is accepted, from the state
//!   the loop hands in ([`Gate`]), never from the loop itself.
//!
//! [`Intake::take`] runs one text through all of it: the parser of one
//! text (`protocol::parse_request`), its records, the reply channel, who
//! the caller is (`caller::verify`), admission. Refusals are recorded and
//! answered here (as effects); what an admitted request does is the loop's.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;

use super::caller::{self, Verified};
use super::effect::{Effects, ReplyTo};
use super::jobs::LaunchRequest;
use super::ledger::Ledger;
use super::reply::Replies;
use super::state_dir::StateDir;
use super::stop::Trigger;
use crate::audit::record::{Event, RequestReceived, RequestRefused};
use crate::protocol::{parse_request, ParsedRequest, Reply, MAX_REQUEST, PROTOCOL_VERSION};
use crate::vocab::{bounded, Ident, Op, RefusalReason, StopReason};

/// One framed text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    /// A line without its newline.
    Line(Vec<u8>),
    /// A line that reached the cap without a newline (its length so far);
    /// the rest of it, up to the next newline, is skipped.
    Oversize(usize),
}

/// Cuts FIFO bytes into texts; keeps a partial line between reads.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    skipping: bool,
}

impl Framer {
    /// Appends the texts completed by `data` to `out`.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<Text>) {
        while !data.is_empty() {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let (line, rest) = (&data[..i], &data[i + 1..]);
                    data = rest;
                    if self.skipping {
                        self.skipping = false;
                        self.buf.clear();
                        continue;
                    }
                    let mut whole = std::mem::take(&mut self.buf);
                    whole.extend_from_slice(line);
                    out.push(Text::Line(whole));
                }
                None => {
                    if !self.skipping {
                        self.buf.extend_from_slice(data);
                        if self.buf.len() >= MAX_REQUEST {
                            out.push(Text::Oversize(self.buf.len()));
                            self.buf.clear();
                            self.skipping = true;
                        }
                    }
                    break;
                }
            }
        }
    }
}

/// Reads the FIFO until it would block and frames what was read.
pub fn read_fifo(fifo: &mut File, framer: &mut Framer) -> Vec<Text> {
    let mut buf = [0u8; 65536];
    let mut out = Vec::new();
    loop {
        match fifo.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => framer.feed(&buf[..n], &mut out),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    out
}

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
    Spawn(LaunchRequest),
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
    pub root: Ident,
    /// Who `job_spawned` names when the root asked (`None` in exec mode).
    pub root_caller: Option<Ident>,
    pub gate: Gate,
    pub fx: &'a mut Effects,
}

impl Desk<'_> {
    fn open_reply(&mut self, name: &str) -> Result<u64, String> {
        self.replies
            .open(self.state.replies.as_fd(), name, self.me.uid)
    }

    /// Records a refusal (durably) and answers it where a channel exists.
    fn refuse(&mut self, (reason, detail): Refused, id: Option<String>, chan: Option<u64>) {
        let detail = bounded(&detail);
        self.ledger.record(Event::RequestRefused(RequestRefused {
            id: id.clone(),
            reason,
            detail: detail.clone(),
        }));
        if let Some(chan) = chan {
            let to = ReplyTo {
                chan,
                id: id.clone().unwrap_or_else(|| "?".into()),
            };
            let reply = Reply::Refused {
                v: PROTOCOL_VERSION,
                id,
                reason,
                detail,
            };
            self.fx.reply(&to, reply, true);
        }
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

/// Admission's memory: the request ids used in this run.
#[derive(Debug, Default)]
pub struct Intake {
    pub framer: Framer,
    used_ids: HashSet<String>,
}

impl Intake {
    /// Takes one framed text: records it (a request that parsed durably,
    /// before anything is decided on it), opens its reply channel, checks
    /// its caller and admits it. `None` when it was refused (recorded and
    /// answered where it can be).
    pub fn take(&mut self, text: Text, desk: &mut Desk<'_>) -> Option<Admitted> {
        let line = match text {
            Text::Line(line) => line,
            Text::Oversize(len) => {
                desk.ledger.append(received(None, None, len as u64));
                let detail = format!("request longer than {MAX_REQUEST} bytes with its newline");
                desk.refuse((RefusalReason::Oversize, detail), None, None);
                return None;
            }
        };
        let bytes = line.len() as u64 + 1;
        let req = match parse_request(&line) {
            Ok(req) => req,
            Err(r) => {
                desk.ledger.append(received(r.id.clone(), None, bytes));
                let chan = r.reply.as_deref().and_then(|n| desk.open_reply(n).ok());
                desk.refuse((r.reason, r.detail), r.id, chan);
                return None;
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
        let chan = match desk.open_reply(&req.reply) {
            Ok(c) => c,
            Err(d) => {
                desk.refuse((RefusalReason::BadReply, d), Some(req.id), None);
                return None;
            }
        };
        let caller = caller::verify(req.caller, desk.me, desk.root);
        let id = req.id.clone();
        match self.admit(req, chan, caller, gate, desk.root_caller) {
            Ok(a) => Some(a),
            Err(r) => {
                desk.refuse(r, Some(id), Some(chan));
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
                    Verified::Bound(fd) => Some(fd),
                };
                Admitted::Spawn(LaunchRequest::admitted(reply, spec, caller, root))
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

    fn texts(chunks: &[&[u8]]) -> Vec<Text> {
        let mut f = Framer::default();
        let mut out = Vec::new();
        for c in chunks {
            f.feed(c, &mut out);
        }
        out
    }

    #[test]
    fn lines_are_cut_at_newlines_across_reads() {
        let out = texts(&[b"ab\ncd", b"e\n\nf"]);
        assert_eq!(
            out,
            vec![
                Text::Line(b"ab".to_vec()),
                Text::Line(b"cde".to_vec()),
                Text::Line(Vec::new())
            ]
        );
    }

    #[test]
    fn an_oversize_line_is_refused_once_and_skipped_to_its_newline() {
        let big = vec![b'x'; MAX_REQUEST + 10];
        let out = texts(&[&big, b"yyy", b"y\nok\n"]);
        assert_eq!(
            out,
            vec![Text::Oversize(MAX_REQUEST + 10), Text::Line(b"ok".to_vec())]
        );
    }

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
