//! One action: the watchdog's state and its single-threaded event loop.
//!
//! Everything the watchdog waits on is a descriptor in one `mio::Poll`
//! (signalfd, root pidfd, request FIFO, job pidfds and pipes, caller
//! pidfds, reply FIFOs being written, exec's output sinks); timers are the
//! poll timeout to the nearest deadline. With nothing running and nothing
//! due the poll sleeps without a timeout: an idle watchdog makes no wakeups.
//!
//! Phases: `Running` (requests served) → `Stopping` (the stop procedure in
//! `cleanup` runs; nothing launches again) → `Stopped` (waiting for close,
//! or finishing at once after a signal, root loss or audit failure) →
//! `Finished` (receipt written). Close while running goes through a stop.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use nix::sys::signalfd::SignalFd;

use super::caller::{self, Verified};
use super::cleanup::{Step, StopHost, Stopper};
use super::config::Config;
use super::job::{Job, Output, ReplyTo};
use super::passthrough::Passthrough;
use super::priority::Base;
use super::reply::Replies;
use super::spawn::{spawn, Launch};
use super::start::Started;
use super::state_dir::StateDir;
use crate::audit::record::{
    Counts, DirIdentity, Event, Ident, Inventory, JobExited, JobFailed, JobSpawned, Mode, Outcome,
    OutputCapped, Proc, Reaped, ReapedProc, Receipt, ReplyFailed, RequestReceived, RequestRefused,
    RootBound, RunStarted, StagingInventoried, Status, StopCompleted, StopReason, StopTriggered,
    Stream, TempRootInventoried, TempRootRemoved, Uncertainty,
};
use crate::audit::{AuditError, AuditWriter};
use crate::clock::millis;
use crate::inventory;
use crate::process::identity::{read_stat, read_uids, real_uid, Stat, UNKNOWN_UID};
use crate::process::pidfd::VerifiedPidFd;
use crate::process::reap::{self, Peek};
use crate::process::scan::descendants;
use crate::protocol::{
    parse_request, Capture, Op, ParsedRequest, RefusalReason, Reply, MAX_REQUEST, PROTOCOL_VERSION,
};
use crate::vocab::bounded;

const T_SIGNALS: Token = Token(0);
const T_ROOT: Token = Token(1);
const T_FIFO: Token = Token(2);
const T_PASS: [Token; 2] = [Token(3), Token(4)];
const JOB_TOKEN_BASE: usize = 16;
/// Token slots per job: leader pidfd, stdout, stderr, caller pidfd.
const JOB_SLOTS: usize = 4;
/// How long finishing waits for slow readers of replies and exec output.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

fn job_token(num: u64, slot: usize) -> Token {
    Token(JOB_TOKEN_BASE + num as usize * JOB_SLOTS + slot)
}

fn job_of(t: Token) -> Option<(u64, usize)> {
    if t.0 < JOB_TOKEN_BASE || t.0 >= super::reply::REPLY_TOKEN_BASE {
        return None;
    }
    let n = t.0 - JOB_TOKEN_BASE;
    Some(((n / JOB_SLOTS) as u64, n % JOB_SLOTS))
}

fn register(reg: &Registry, fd: RawFd, t: Token, i: Interest) -> io::Result<()> {
    reg.register(&mut SourceFd(&fd), t, i)
}

fn deregister(reg: &Registry, fd: RawFd) {
    let _ = reg.deregister(&mut SourceFd(&fd));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Stopping,
    Stopped,
    Finished,
}

/// How the exec job ended, for exec's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecResult {
    Exited(Status),
    Failed(RefusalReason),
}

/// What the action ended as; the binary turns it into an exit status.
#[derive(Clone, Debug)]
pub struct Finished {
    pub positive: bool,
    pub outcome: Outcome,
    pub stop_reason: Option<StopReason>,
    /// The signal that started the stop, when the first trigger was one.
    pub signal: Option<i32>,
    /// The sealed log's head; `None` if the receipt could not be made durable.
    pub head: Option<String>,
    pub audit_error: Option<String>,
    pub exec: Option<ExecResult>,
    pub audit_log: PathBuf,
    pub run_id: String,
}

/// One chunk-read result of a job's pipe.
struct Pumped {
    eof: bool,
    crossed_cap: bool,
    paused: bool,
}

pub struct Action {
    cfg: Config,
    me: Ident,
    audit: AuditWriter,
    audit_error: Option<String>,
    poll: Poll,
    signals: SignalFd,
    root: VerifiedPidFd,
    state: StateDir,
    staging_start: Option<DirIdentity>,
    env: Vec<(OsString, OsString)>,
    nofile: libc::rlimit,
    priority: Base,
    pass: Option<Passthrough>,
    fifo_buf: Vec<u8>,
    fifo_skipping: bool,
    jobs: BTreeMap<u64, Job>,
    next_job: u64,
    used_ids: HashSet<String>,
    replies: Replies,
    phase: Phase,
    stopper: Option<Stopper>,
    stop_wake: Instant,
    stop_result: Option<StopCompleted>,
    first_stop: Option<StopReason>,
    first_signal: Option<i32>,
    stop_waiters: Vec<ReplyTo>,
    close: Option<Option<ReplyTo>>,
    exit_after_stop: bool,
    counts: Counts,
    uncertain_seen: HashSet<(i32, u64)>,
    action_deadline: Option<Instant>,
    exec_result: Option<ExecResult>,
    finished: Option<Finished>,
}

impl Action {
    /// Registers everything, writes the first records (durable) and returns
    /// an action ready to serve. Nothing has been spawned yet.
    pub fn new(
        cfg: Config,
        started: Started,
        state: StateDir,
        audit: AuditWriter,
        staging_start: Option<DirIdentity>,
    ) -> Result<Action, String> {
        let poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
        let reg = poll.registry();
        let ioerr = |what: &str, e: io::Error| format!("{what}: {e}");
        register(
            reg,
            started.signals.as_fd().as_raw_fd(),
            T_SIGNALS,
            Interest::READABLE,
        )
        .map_err(|e| ioerr("signalfd", e))?;
        register(
            reg,
            started.root.as_fd().as_raw_fd(),
            T_ROOT,
            Interest::READABLE,
        )
        .map_err(|e| ioerr("root pidfd", e))?;
        register(reg, state.fifo.as_raw_fd(), T_FIFO, Interest::READABLE)
            .map_err(|e| ioerr("request FIFO", e))?;
        let pass = if cfg.mode == Mode::Exec {
            Some(Passthrough::new(T_PASS).map_err(|e| ioerr("stdout/stderr", e))?)
        } else {
            None
        };
        let env = job_env(&cfg, &state);
        let now = Instant::now();
        let mut a = Action {
            action_deadline: cfg.action_deadline.map(|d| now + d),
            me: started.me,
            audit,
            audit_error: None,
            poll,
            signals: started.signals,
            root: started.root,
            state,
            staging_start,
            env,
            nofile: started.nofile,
            priority: started.priority,
            pass,
            fifo_buf: Vec::new(),
            fifo_skipping: false,
            jobs: BTreeMap::new(),
            next_job: 1,
            used_ids: HashSet::new(),
            replies: Replies::default(),
            phase: Phase::Running,
            stopper: None,
            stop_wake: now,
            stop_result: None,
            first_stop: None,
            first_signal: None,
            stop_waiters: Vec::new(),
            close: None,
            exit_after_stop: false,
            counts: Counts {
                requests: 0,
                refused: 0,
                jobs: 0,
                signals: 0,
                reaped: 0,
            },
            uncertain_seen: HashSet::new(),
            exec_result: None,
            finished: None,
            cfg,
        };
        let first = Event::RunStarted(RunStarted {
            version: env!("CARGO_PKG_VERSION").to_string(),
            mode: a.cfg.mode,
            watchdog: a.me,
            state_dir: a.state.path.to_string_lossy().into_owned(),
            bounds: a.cfg.bounds(),
            staging: a.staging_start.clone(),
            pass_env: a.cfg.pass_env.clone(),
        });
        let root = Event::RootBound(RootBound {
            root: a.root.ident(),
            comm: a.root.proc().comm.clone(),
            source: started.root_source,
        });
        for ev in [first, root] {
            a.audit.append(&ev).map_err(|e| e.to_string())?;
        }
        a.audit.sync().map_err(|e| e.to_string())?;
        Ok(a)
    }

    pub fn run_id(&self) -> &str {
        self.audit.run()
    }

    pub fn state(&self) -> &StateDir {
        &self.state
    }

    // ----- the audit log -------------------------------------------------

    fn append(&mut self, ev: Event) {
        if self.phase == Phase::Finished {
            // Sealed: the receipt is the last record, whatever else arrives.
            return;
        }
        match self.audit.append(&ev) {
            Ok(_) => self.count(&ev),
            Err(e) => self.audit_failed(e),
        }
    }

    fn sync(&mut self) {
        if let Err(e) = self.audit.sync() {
            self.audit_failed(e);
        }
    }

    fn record(&mut self, ev: Event) {
        self.append(ev);
        self.sync();
    }

    /// Receipt counts are what was actually recorded, so a replay agrees.
    fn count(&mut self, ev: &Event) {
        let c = &mut self.counts;
        match ev {
            Event::RequestReceived(_) => c.requests += 1,
            Event::RequestRefused(_) => c.refused += 1,
            Event::JobSpawned(_) => c.jobs += 1,
            Event::SignalSweep(s) => c.signals += (s.targets.len() * s.signals.len()) as u64,
            Event::JobExited(_) => c.reaped += 1,
            Event::Reaped(r) => c.reaped += r.processes.len() as u64,
            _ => {}
        }
    }

    /// A record could not be made durable: stop everything, then exit
    /// non-zero. Later records fail silently (the writer is poisoned).
    fn audit_failed(&mut self, e: AuditError) {
        if self.audit_error.is_some() {
            return;
        }
        eprintln!("rea-watchdog: {e}; stopping the action");
        self.audit_error = Some(e.to_string());
        self.exit_after_stop = true;
        self.trigger(StopReason::AuditFailure, e.to_string(), None, Vec::new());
    }

    // ----- the loop ------------------------------------------------------

    /// Serves until the receipt is written (or cannot be).
    pub fn run(mut self) -> Finished {
        let mut events = Events::with_capacity(1024);
        while self.phase != Phase::Finished {
            let timeout = self
                .next_wake()
                .map(|t| t.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Cannot wait for anything any more: stop what can be
                // stopped with a blocking procedure and give up.
                eprintln!("rea-watchdog: poll failed: {e}");
                self.exit_after_stop = true;
                self.trigger(
                    StopReason::AuditFailure,
                    format!("poll failed: {e}"),
                    None,
                    Vec::new(),
                );
                while self.phase == Phase::Stopping {
                    self.step_stop(Instant::now());
                    std::thread::sleep(Duration::from_millis(2));
                }
                self.maybe_finish();
                continue;
            }
            let mut children = false;
            for ev in events.iter() {
                if self.phase == Phase::Finished {
                    break;
                }
                match ev.token() {
                    T_SIGNALS => self.on_signals(&mut children),
                    T_ROOT => self.on_root_lost(),
                    T_FIFO => self.on_fifo(),
                    t if T_PASS.contains(&t) => self.on_pass_writable(t),
                    t => {
                        if let Some(chan) = Replies::chan_of(t) {
                            if let Err(d) = self.replies.flush(self.poll.registry(), chan) {
                                self.append(Event::ReplyFailed(ReplyFailed {
                                    id: format!("channel {chan}"),
                                    detail: d,
                                }));
                            }
                        } else if let Some((num, slot)) = job_of(t) {
                            match slot {
                                0 => children = true,
                                1 | 2 => self.on_output(num, slot - 1),
                                _ => self.on_caller_lost(num),
                            }
                        }
                    }
                }
            }
            let now = Instant::now();
            if children && self.phase != Phase::Stopping {
                self.reap_all();
            }
            self.check_deadlines(now);
            if self.phase == Phase::Stopping {
                self.while_stopping(now, children);
            }
            self.maybe_finish();
        }
        self.finished
            .take()
            .unwrap_or_else(|| self.result(false, None))
    }

    fn next_wake(&self) -> Option<Instant> {
        match self.phase {
            Phase::Stopping => Some(self.stop_wake),
            Phase::Running => self
                .jobs
                .values()
                .filter(|j| j.running())
                .filter_map(|j| j.deadline)
                .chain(self.action_deadline)
                .min(),
            _ => None,
        }
    }

    fn maybe_finish(&mut self) {
        // exec closes by itself once its one job is gone.
        let exec_done = self.cfg.mode == Mode::Exec && self.jobs.is_empty();
        if self.phase == Phase::Stopped
            && (self.exit_after_stop || self.close.is_some() || exec_done)
        {
            self.finalize();
        }
    }

    // ----- events --------------------------------------------------------

    fn on_signals(&mut self, children: &mut bool) {
        loop {
            match self.signals.read_signal() {
                Ok(Some(info)) => {
                    let sig = info.ssi_signo as i32;
                    if sig == libc::SIGCHLD {
                        *children = true;
                    } else {
                        self.on_watchdog_signal(sig);
                    }
                }
                Ok(None) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
    }

    fn on_watchdog_signal(&mut self, sig: i32) {
        let name = nix::sys::signal::Signal::try_from(sig)
            .map(|s| s.as_str())
            .unwrap_or("signal");
        self.exit_after_stop = true;
        if self.phase == Phase::Running {
            self.first_signal = Some(sig);
        }
        self.trigger(
            StopReason::Signal,
            format!("{name} received"),
            None,
            Vec::new(),
        );
    }

    fn on_root_lost(&mut self) {
        if !self.root.has_exited() {
            return;
        }
        deregister(self.poll.registry(), self.root.as_fd().as_raw_fd());
        self.exit_after_stop = true;
        let detail = format!(
            "root controller pid {} ({}) exited",
            self.root.pid(),
            self.root.proc().comm
        );
        self.trigger(StopReason::RootLost, detail, None, Vec::new());
    }

    fn on_caller_lost(&mut self, num: u64) {
        let Some(job) = self.jobs.get_mut(&num) else {
            return;
        };
        let Some(caller) = job.caller.take_if(|c| c.has_exited()) else {
            return;
        };
        deregister(self.poll.registry(), caller.as_fd().as_raw_fd());
        if job.running() {
            let detail = format!(
                "caller pid {} of job {num} exited while the job ran",
                caller.pid()
            );
            self.trigger(StopReason::CallerLost, detail, Some(num), Vec::new());
        }
    }

    fn check_deadlines(&mut self, now: Instant) {
        if self.phase != Phase::Running {
            return;
        }
        if self.action_deadline.is_some_and(|d| now >= d) {
            let ms = self.cfg.action_deadline.map(millis).unwrap_or(0);
            self.trigger(
                StopReason::Deadline,
                format!("action deadline of {ms}ms passed"),
                None,
                Vec::new(),
            );
            return;
        }
        let late = self
            .jobs
            .values()
            .find(|j| j.running() && j.deadline.is_some_and(|d| now >= d));
        if let Some(j) = late {
            let (num, id) = (j.num, j.id.clone());
            let ms = millis(now - j.started);
            self.trigger(
                StopReason::Deadline,
                format!("job {num} ({id}) passed its deadline after {ms}ms"),
                Some(num),
                Vec::new(),
            );
        }
    }

    // ----- requests ------------------------------------------------------

    fn on_fifo(&mut self) {
        let mut buf = [0u8; 65536];
        loop {
            match self.state.fifo.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.feed(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }

    /// Splits FIFO bytes into request lines; a line over the cap is refused
    /// once and skipped up to its newline.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.phase != Phase::Finished {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let (line, rest) = (&data[..i], &data[i + 1..]);
                    data = rest;
                    if self.fifo_skipping {
                        self.fifo_skipping = false;
                        self.fifo_buf.clear();
                        continue;
                    }
                    let mut whole = std::mem::take(&mut self.fifo_buf);
                    whole.extend_from_slice(line);
                    self.on_line(&whole);
                }
                None => {
                    if !self.fifo_skipping {
                        self.fifo_buf.extend_from_slice(data);
                        if self.fifo_buf.len() >= MAX_REQUEST {
                            let len = self.fifo_buf.len();
                            self.fifo_buf.clear();
                            self.fifo_skipping = true;
                            self.append(Event::RequestReceived(RequestReceived {
                                id: None,
                                op: None,
                                caller: None,
                                bytes: len as u64,
                            }));
                            self.refuse(
                                RefusalReason::Oversize,
                                format!("request longer than {MAX_REQUEST} bytes with its newline"),
                                None,
                                None,
                            );
                        }
                    }
                    break;
                }
            }
        }
    }

    fn on_line(&mut self, line: &[u8]) {
        let bytes = line.len() as u64 + 1;
        match parse_request(line) {
            Err(r) => {
                self.append(Event::RequestReceived(RequestReceived {
                    id: r.id.clone(),
                    op: None,
                    caller: None,
                    bytes,
                }));
                let chan = r
                    .reply
                    .as_deref()
                    .and_then(|name| self.open_reply(name).ok());
                self.refuse(r.reason, r.detail, r.id, chan);
            }
            Ok(req) => {
                self.append(Event::RequestReceived(RequestReceived {
                    id: Some(req.id.clone()),
                    op: Some(req.op),
                    caller: Some(req.caller.ident()),
                    bytes,
                }));
                self.sync();
                self.dispatch(req);
            }
        }
    }

    fn open_reply(&mut self, name: &str) -> Result<u64, String> {
        self.replies
            .open(self.state.replies.as_fd(), name, self.me.uid)
    }

    /// Records a refusal (durably) and answers it where a channel exists.
    fn refuse(
        &mut self,
        reason: RefusalReason,
        detail: String,
        id: Option<String>,
        chan: Option<u64>,
    ) {
        self.record(Event::RequestRefused(RequestRefused {
            id: id.clone(),
            reason,
            detail: bounded(&detail),
        }));
        if let Some(chan) = chan {
            let reply = Reply::Refused {
                v: PROTOCOL_VERSION,
                id: id.clone(),
                reason,
                detail: bounded(&detail),
            };
            self.send(chan, id.as_deref().unwrap_or("?"), &reply, true);
        }
    }

    fn send(&mut self, chan: u64, id: &str, reply: &Reply, last: bool) {
        if let Err(detail) = self.replies.send(self.poll.registry(), chan, reply, last) {
            self.append(Event::ReplyFailed(ReplyFailed {
                id: id.to_string(),
                detail,
            }));
        }
    }

    fn dispatch(&mut self, req: ParsedRequest) {
        let chan = match self.open_reply(&req.reply) {
            Ok(c) => c,
            Err(detail) => return self.refuse(RefusalReason::BadReply, detail, Some(req.id), None),
        };
        let refuse = |a: &mut Action, reason, detail: String| {
            a.refuse(reason, detail, Some(req.id.clone()), Some(chan))
        };
        let caller = match caller::verify(req.caller, self.me, self.root.ident()) {
            Ok(c) => c,
            Err((reason, detail)) => return refuse(self, reason, detail),
        };
        if self.used_ids.contains(&req.id) {
            return refuse(
                self,
                RefusalReason::DuplicateId,
                format!("id {} was already used in this run", req.id),
            );
        }
        // A stop while closing is still a (later) stop trigger: a controller
        // may escalate close -> stop and must not get an error for it.
        if self.close.is_some() && req.op != Op::Stop {
            return refuse(self, RefusalReason::Closed, "the action is closing".into());
        }
        let reply_to = ReplyTo {
            chan,
            id: req.id.clone(),
        };
        match (req.op, req.spawn) {
            (Op::Spawn, Some(spec)) => {
                if self.phase != Phase::Running {
                    let why = self.first_stop.map(StopReason::as_str).unwrap_or("a stop");
                    return refuse(
                        self,
                        RefusalReason::Aborted,
                        format!("the action was stopped ({why}); nothing launches again"),
                    );
                }
                self.used_ids.insert(req.id.clone());
                let caller = match caller {
                    Verified::Root => None,
                    Verified::Bound(fd) => Some(fd),
                };
                let argv: Vec<OsString> = spec.argv.iter().map(OsString::from).collect();
                self.spawn_job(
                    &req.id,
                    &argv,
                    spec.name,
                    Some(Duration::from_millis(spec.deadline_ms)),
                    spec.capture,
                    caller,
                    Some(reply_to),
                );
            }
            (Op::Stop, _) => {
                self.used_ids.insert(req.id.clone());
                self.trigger(
                    StopReason::StopRequested,
                    format!("stop requested by pid {}", req.caller.pid),
                    None,
                    Vec::new(),
                );
                if self.phase == Phase::Stopped {
                    self.answer_stop(reply_to);
                } else {
                    self.stop_waiters.push(reply_to);
                }
            }
            (Op::Close, _) => {
                self.used_ids.insert(req.id.clone());
                self.on_close(Some(reply_to));
            }
            (Op::Spawn, None) => refuse(self, RefusalReason::BadArgv, "spawn without argv".into()),
        }
    }

    fn answer_stop(&mut self, to: ReplyTo) {
        let quiescent = self
            .stop_result
            .as_ref()
            .is_some_and(|c| c.echild && c.scan_empty);
        let reply = Reply::StopComplete {
            v: PROTOCOL_VERSION,
            id: to.id.clone(),
            reason: self.first_stop.unwrap_or(StopReason::StopRequested),
            quiescent,
        };
        self.send(to.chan, &to.id, &reply, true);
    }

    // ----- jobs ----------------------------------------------------------

    /// exec mode: the one job, ARGV, with output passed through.
    pub fn spawn_exec_job(&mut self, argv: &[OsString], deadline: Option<Duration>) {
        self.spawn_job("exec", argv, None, deadline, Capture::Discard, None, None);
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_job(
        &mut self,
        id: &str,
        argv: &[OsString],
        name: Option<String>,
        deadline: Option<Duration>,
        capture: Capture,
        caller: Option<VerifiedPidFd>,
        reply: Option<ReplyTo>,
    ) {
        let num = self.next_job;
        self.next_job += 1;
        let now = Instant::now();
        let deadline_at = match (deadline.map(|d| now + d), self.action_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut env = self.env.clone();
        env.push(("REA_JOB".into(), num.to_string().into()));
        let argv_text: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let launch = Launch {
            argv,
            env: &env,
            watchdog_pid: self.me.pid,
            nofile: self.nofile,
            priority: self.priority,
        };
        let sp = match spawn(&launch) {
            Ok(sp) => sp,
            Err(e) => {
                self.record(Event::JobFailed(JobFailed {
                    job: num,
                    id: id.to_string(),
                    argv: argv_text,
                    errno: e.errno,
                    reason: e.reason,
                    detail: bounded(&e.detail),
                }));
                if let Some(r) = reply {
                    let reply = Reply::Refused {
                        v: PROTOCOL_VERSION,
                        id: Some(r.id.clone()),
                        reason: e.reason,
                        detail: bounded(&e.detail),
                    };
                    self.send(r.chan, &r.id, &reply, true);
                }
                if self.cfg.mode == Mode::Exec {
                    self.exec_result = Some(ExecResult::Failed(e.reason));
                    self.on_close(None);
                }
                return;
            }
        };
        let reg = self.poll.registry();
        let regs = [
            register(
                reg,
                sp.leader.as_fd().as_raw_fd(),
                job_token(num, 0),
                Interest::READABLE,
            ),
            register(
                reg,
                sp.stdout.as_raw_fd(),
                job_token(num, 1),
                Interest::READABLE,
            ),
            register(
                reg,
                sp.stderr.as_raw_fd(),
                job_token(num, 2),
                Interest::READABLE,
            ),
            caller.as_ref().map_or(Ok(()), |c| {
                register(
                    reg,
                    c.as_fd().as_raw_fd(),
                    job_token(num, 3),
                    Interest::READABLE,
                )
            }),
        ];
        let leader = sp.leader.proc().clone();
        let caller_ident = match &caller {
            Some(c) => Some(c.ident()),
            None if self.cfg.mode == Mode::Exec => None,
            None => Some(self.root.ident()),
        };
        // Appended, not synced: the act was announced by the durable
        // request_received (or run_started in exec mode) before the fork;
        // this record rides with the next sync.
        self.append(Event::JobSpawned(JobSpawned {
            job: num,
            id: id.to_string(),
            name,
            argv: argv_text,
            pid: leader.pid,
            start_time: leader.start_time,
            uid: leader.uid,
            ppid: sp.ppid,
            sid: sp.sid,
            caller: caller_ident,
            deadline_ms: deadline_at.map(|d| millis(d.saturating_duration_since(now))),
            capture,
        }));
        if let Some(r) = &reply {
            let accepted = Reply::Accepted {
                v: PROTOCOL_VERSION,
                id: r.id.clone(),
                job: num,
                pid: leader.pid,
                start_time: leader.start_time,
            };
            self.send(r.chan, &r.id, &accepted, false);
        }
        self.jobs.insert(
            num,
            Job {
                num,
                id: id.to_string(),
                leader: sp.leader,
                sid: sp.sid,
                started: now,
                deadline: deadline_at,
                caller,
                reply,
                capture,
                passthrough: self.pass.is_some(),
                out: [Output::new(sp.stdout), Output::new(sp.stderr)],
                cap: self.cfg.output_cap,
                capped: false,
                status: None,
            },
        );
        if let Some(Err(e)) = regs.into_iter().find(|r| r.is_err()) {
            // Without its descriptors in the poll the job cannot be watched.
            self.trigger(
                StopReason::AuditFailure,
                format!("cannot poll job {num}: {e}"),
                Some(num),
                Vec::new(),
            );
        }
    }

    /// Reads a job's pipe until it would block (or, in exec mode, until the
    /// passthrough sink is full and `draining` is false).
    fn pump(
        job: &mut Job,
        i: usize,
        pass: Option<(&mut Passthrough, &Registry)>,
        draining: bool,
    ) -> Pumped {
        let mut buf = [0u8; 65536];
        let mut r = Pumped {
            eof: false,
            crossed_cap: false,
            paused: false,
        };
        let mut pass = pass;
        loop {
            if let Some((p, _)) = &pass {
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
                    if let Some((p, reg)) = pass.as_mut() {
                        p.push(reg, i, &buf[..n]);
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

    fn on_output(&mut self, num: u64, i: usize) {
        let reg = self.poll.registry();
        let Some(job) = self.jobs.get_mut(&num) else {
            return;
        };
        let pass = if job.passthrough {
            self.pass.as_mut().map(|p| (p, reg))
        } else {
            None
        };
        let r = Self::pump(job, i, pass, false);
        job.out[i].paused = r.paused;
        if r.eof {
            if let Some(p) = job.out[i].pipe.take() {
                deregister(reg, p.as_raw_fd());
            }
        }
        if r.crossed_cap {
            self.excess_output(num, i);
        }
    }

    fn excess_output(&mut self, num: u64, i: usize) {
        let cap = self.cfg.output_cap.unwrap_or(0);
        self.append(Event::OutputCapped(OutputCapped {
            job: num,
            stream: if i == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            },
            cap,
        }));
        self.trigger(
            StopReason::ExcessOutput,
            format!("job {num} wrote more than {cap} bytes"),
            Some(num),
            Vec::new(),
        );
    }

    fn on_pass_writable(&mut self, t: Token) {
        let reg = self.poll.registry();
        let Some(pass) = self.pass.as_mut() else {
            return;
        };
        let Some(i) = pass.stream_of(t) else {
            return;
        };
        pass.flush(reg, i);
        if pass.is_full(i) {
            return;
        }
        let paused: Vec<u64> = self
            .jobs
            .values()
            .filter(|j| j.out[i].paused)
            .map(|j| j.num)
            .collect();
        for num in paused {
            self.on_output(num, i);
        }
    }

    /// Reaps every waitable child: job leaders through their pidfds, adopted
    /// orphans through the `Zombie` the peek returned. Returns the last peek.
    fn reap_all(&mut self) -> Peek {
        let mut orphans = Vec::new();
        let mut finished = Vec::new();
        let last = loop {
            match reap::peek() {
                Ok(Peek::Waitable(zombie)) => {
                    let pid = zombie.pid();
                    let job = self
                        .jobs
                        .values_mut()
                        .find(|j| j.running() && j.leader.pid() == pid);
                    if let Some(job) = job {
                        match job.leader.try_reap() {
                            Ok(Some(status)) => {
                                job.status = Some(status);
                                finished.push(job.num);
                            }
                            _ => break Peek::NothingWaitable,
                        }
                    } else {
                        let st = read_stat(pid).ok();
                        match zombie.reap() {
                            Ok(Some(status)) => orphans.push(ReapedProc {
                                pid,
                                start_time: st.as_ref().map(|s| s.start_time),
                                comm: st.map(|s| s.comm),
                                status,
                            }),
                            _ => break Peek::NothingWaitable,
                        }
                    }
                }
                Ok(p) => break p,
                Err(_) => break Peek::NothingWaitable,
            }
        };
        if !orphans.is_empty() {
            self.append(Event::Reaped(Reaped { processes: orphans }));
        }
        let any = !finished.is_empty();
        for num in finished {
            self.finish_job(num);
        }
        if any && self.phase == Phase::Running {
            self.after_job_exit(&last);
        }
        last
    }

    /// The leader was reaped: take what is left in its pipes, record, reply.
    fn finish_job(&mut self, num: u64) {
        let Some(mut job) = self.jobs.remove(&num) else {
            return;
        };
        let reg = self.poll.registry();
        let mut crossed = None;
        for i in 0..2 {
            let pass = if job.passthrough {
                self.pass.as_mut().map(|p| (p, reg))
            } else {
                None
            };
            if Self::pump(&mut job, i, pass, true).crossed_cap {
                crossed = Some(i);
            }
            if let Some(p) = job.out[i].pipe.take() {
                deregister(reg, p.as_raw_fd());
            }
        }
        deregister(reg, job.leader.as_fd().as_raw_fd());
        if let Some(c) = job.caller.take() {
            deregister(reg, c.as_fd().as_raw_fd());
        }
        let status = job.status.unwrap_or(Status::Code(-1));
        let stopped = self.phase != Phase::Running;
        let duration_ms = millis(job.started.elapsed());
        let leader = job.leader.proc().clone();
        self.append(Event::JobExited(JobExited {
            job: num,
            pid: leader.pid,
            start_time: leader.start_time,
            status,
            duration_ms,
            stdout: job.out[0].summary(),
            stderr: job.out[1].summary(),
            output_capped: job.capped,
            stopped,
        }));
        if let Some(r) = &job.reply {
            let (id, job_num, output_capped) = (r.id.clone(), num, job.capped);
            let (stdout, stderr) = (job.stream_reply(0), job.stream_reply(1));
            let reply = match (stopped, self.first_stop) {
                (true, Some(reason)) => Reply::Stopped {
                    v: PROTOCOL_VERSION,
                    id: id.clone(),
                    job: job_num,
                    reason,
                    status,
                    duration_ms,
                    output_capped,
                    stdout,
                    stderr,
                },
                _ => Reply::Exited {
                    v: PROTOCOL_VERSION,
                    id: id.clone(),
                    job: job_num,
                    status,
                    duration_ms,
                    output_capped,
                    stdout,
                    stderr,
                },
            };
            self.send(r.chan, &id, &reply, true);
        }
        if self.cfg.mode == Mode::Exec {
            self.exec_result = Some(ExecResult::Exited(status));
        }
        if let Some(i) = crossed {
            self.excess_output(num, i);
        }
    }

    /// After a leader exits while running: every live descendant must be a
    /// running job's leader or in a running job's session; others were
    /// abandoned. A descendant whose uid is not ours cannot be proven.
    /// `peek` is what waitid said after reaping: with ECHILD there is no
    /// descendant at all (every orphan comes back to the subreaper), so the
    /// `/proc` scan is skipped.
    fn after_job_exit(&mut self, peek: &Peek) {
        let scan = match peek {
            Peek::NoChildren => Ok(Vec::new()),
            _ => descendants(self.me.pid),
        };
        let scan = match scan {
            Ok(s) => s,
            Err(e) => {
                return self.trigger(
                    StopReason::MappingRefused,
                    format!("cannot scan /proc: {e}"),
                    None,
                    Vec::new(),
                );
            }
        };
        let leaders: HashSet<i32> = self
            .jobs
            .values()
            .filter(|j| j.running())
            .map(|j| j.leader.pid())
            .collect();
        let sessions: HashSet<i32> = self
            .jobs
            .values()
            .filter(|j| j.running())
            .map(|j| j.sid)
            .collect();
        let mut abandoned = Vec::new();
        let mut unproven = Vec::new();
        for st in scan.iter().filter(|s| !s.is_zombie()) {
            let uid = match read_uids(st.pid) {
                Ok(u) => u,
                Err(_) => continue, // gone since the scan
            };
            if uid.uniform() != Some(self.me.uid) {
                self.uncertain(
                    st,
                    Uncertainty::UidMismatch,
                    format!("uid {} / euid {}", uid.real, uid.effective),
                );
                unproven.push(st.to_proc(uid.real));
            } else if !leaders.contains(&st.pid) && !sessions.contains(&st.sid) {
                abandoned.push(st.to_proc(uid.real));
            }
        }
        if !unproven.is_empty() {
            let n = unproven.len();
            self.trigger(
                StopReason::MappingRefused,
                format!("{n} descendant(s) no longer have the watchdog's uid"),
                None,
                unproven,
            );
        } else if !abandoned.is_empty() {
            let n = abandoned.len();
            self.trigger(
                StopReason::Abandoned,
                format!("{n} descendant(s) outlived their job"),
                None,
                abandoned,
            );
        } else if self.cfg.mode == Mode::Exec && self.jobs.is_empty() && self.close.is_none() {
            self.on_close(None);
        }
    }

    // ----- stopping ------------------------------------------------------

    /// A stop trigger. The first one starts the stop procedure; every later
    /// one only adds a record.
    fn trigger(
        &mut self,
        reason: StopReason,
        detail: String,
        job: Option<u64>,
        processes: Vec<Proc>,
    ) {
        let first = self.phase == Phase::Running;
        // Not synced here: the first sweep's sync makes it durable before
        // any signal goes out (one fdatasync on the way to the first TERM).
        self.append(Event::StopTriggered(StopTriggered {
            reason,
            first,
            detail: bounded(&detail),
            job,
            processes,
            priority: first.then(|| self.priority.taken()),
        }));
        if first {
            let now = Instant::now();
            self.first_stop = Some(reason);
            self.phase = Phase::Stopping;
            self.stopper = Some(Stopper::new(
                reason,
                now,
                self.cfg.term_grace,
                self.cfg.kill_bound,
            ));
            self.stop_wake = now;
        }
    }

    /// A step rescans /proc: only at the instant the previous step asked
    /// for, or as soon as reaping finds no child left (the proof may hold).
    /// Rescanning on every child's exit would cost O(N) scans of O(N)
    /// while N processes die, and a watchdog at SCHED_FIFO would take that
    /// CPU from the dying.
    fn while_stopping(&mut self, now: Instant, children: bool) {
        if now >= self.stop_wake || (children && self.reap_all() == Peek::NoChildren) {
            self.step_stop(now);
        }
    }

    fn step_stop(&mut self, now: Instant) {
        let Some(mut s) = self.stopper.take() else {
            return;
        };
        let step = s.step(self, now);
        self.stopper = Some(s);
        match step {
            Step::Wait(t) => self.stop_wake = t,
            Step::Done(c) => {
                self.record(Event::StopCompleted(c.clone()));
                self.stop_result = Some(c);
                self.phase = Phase::Stopped;
                for w in std::mem::take(&mut self.stop_waiters) {
                    self.answer_stop(w);
                }
            }
        }
    }

    fn on_close(&mut self, reply: Option<ReplyTo>) {
        self.close = Some(reply);
        match self.phase {
            Phase::Running => {
                if self.jobs.values().any(Job::running) {
                    let n = self.jobs.values().filter(|j| j.running()).count();
                    return self.trigger(
                        StopReason::CloseWhileRunning,
                        format!("close requested while {n} job(s) ran"),
                        None,
                        Vec::new(),
                    );
                }
                let peek = self.reap_all();
                if self.phase != Phase::Running || self.close.is_none() {
                    return; // reaping found something to stop, or finished
                }
                if peek == Peek::NoChildren {
                    return self.finalize(); // which cross-checks with a scan
                }
                match descendants(self.me.pid) {
                    Ok(scan) if scan.is_empty() => self.finalize(),
                    Ok(scan) => {
                        // A descendant whose uid cannot be read (gone since
                        // the scan) is still listed with its pid, start time
                        // and name, its uid as UNKNOWN_UID: it was there at
                        // close, which is what this record says.
                        let left: Vec<Proc> = scan
                            .iter()
                            .map(|s| s.to_proc(real_uid(s.pid).unwrap_or(UNKNOWN_UID)))
                            .collect();
                        let n = left.len();
                        self.trigger(
                            StopReason::Abandoned,
                            format!("{n} descendant(s) left at close"),
                            None,
                            left,
                        );
                    }
                    Err(e) => self.trigger(
                        StopReason::MappingRefused,
                        format!("cannot scan /proc: {e}"),
                        None,
                        Vec::new(),
                    ),
                }
            }
            Phase::Stopped => self.finalize(),
            Phase::Stopping | Phase::Finished => {}
        }
    }

    // ----- the receipt ---------------------------------------------------

    /// Proves quiescence, clears the temp root, inventories staging, seals.
    fn finalize(&mut self) {
        let peek = self.reap_all();
        let scan = descendants(self.me.pid);
        let echild = peek == Peek::NoChildren;
        let scan_empty = matches!(&scan, Ok(s) if s.is_empty());
        let held_exited =
            self.stopper.as_mut().is_none_or(|s| s.held_exited()) && self.jobs.is_empty();
        // A stop that ran out of its kill bound failed its proof for good,
        // even if the stragglers died later.
        let stop_proved = self
            .stop_result
            .as_ref()
            .is_none_or(|c| c.echild && c.scan_empty && c.left == 0);
        let no_live = echild && scan_empty;
        let quiescent = no_live && held_exited && stop_proved;
        let temp_root_removed = self.clear_temp_root(quiescent);
        let staging = self.inventory_staging();
        let root_alive = !self.root.has_exited();
        let receipt = Receipt {
            outcome: if self.first_stop.is_some() {
                Outcome::Stopped
            } else {
                Outcome::Closed
            },
            stop_reason: self.first_stop,
            quiescent,
            no_live_or_waitable_descendants: no_live,
            uncertain_mappings: self.uncertain_seen.len() as u64,
            temp_root_removed,
            root_alive,
            counts: self.counts.clone(),
            staging,
        };
        let positive = receipt.is_positive();
        let head = match self.audit.seal(&Event::Receipt(receipt)) {
            Ok(w) => Some(w.hash),
            Err(e) => {
                if self.audit_error.is_none() {
                    self.audit_error = Some(e.to_string());
                }
                None
            }
        };
        if let Some(Some(to)) = self.close.take() {
            let reply = Reply::Closed {
                v: PROTOCOL_VERSION,
                id: to.id.clone(),
                outcome: if self.first_stop.is_some() {
                    Outcome::Stopped
                } else {
                    Outcome::Closed
                },
                stop_reason: self.first_stop,
                positive: positive && head.is_some(),
                head: head.clone().unwrap_or_default(),
                audit_log: self.audit.path().to_string_lossy().into_owned(),
            };
            self.send(to.chan, &to.id, &reply, true);
        }
        for w in std::mem::take(&mut self.stop_waiters) {
            self.answer_stop(w);
        }
        let reg = self.poll.registry();
        self.replies.drain_all(reg, EXIT_FLUSH);
        if let Some(p) = self.pass.as_mut() {
            p.finish(reg, EXIT_FLUSH);
        }
        if self.cfg.mode == Mode::Exec {
            // exec's state directory was private to this action.
            let _ = self.state.remove_all();
        }
        self.phase = Phase::Finished;
        self.finished = Some(self.result(positive, head));
    }

    fn result(&self, positive: bool, head: Option<String>) -> Finished {
        Finished {
            positive: positive && head.is_some() && self.audit_error.is_none(),
            outcome: if self.first_stop.is_some() {
                Outcome::Stopped
            } else {
                Outcome::Closed
            },
            stop_reason: self.first_stop,
            signal: self
                .first_signal
                .filter(|_| self.first_stop == Some(StopReason::Signal)),
            head,
            audit_error: self.audit_error.clone(),
            exec: self.exec_result,
            audit_log: self.audit.path().to_path_buf(),
            run_id: self.audit.run().to_string(),
        }
    }

    /// Inventories the private temp root and removes it, only when no
    /// process can still be using it and it is still the one created.
    fn clear_temp_root(&mut self, quiescent: bool) -> bool {
        let path = self.state.tmp.path.clone();
        let opened = inventory::open_dir(&self.state.tmp_path()).and_then(|fd| {
            let st = nix::sys::stat::fstat(&fd)?;
            if (st.st_dev, st.st_ino) != (self.state.tmp.dev, self.state.tmp.ino) {
                return Err(io::Error::other("the temp root was replaced"));
            }
            inventory::inventory_fd(fd.as_fd(), 64)
        });
        match opened {
            Ok((inv, listing)) => {
                let truncated = (listing.len() as u64) < inv.entries;
                self.append(Event::TempRootInventoried(TempRootInventoried {
                    path,
                    inventory: inv,
                    listing,
                    truncated,
                }));
            }
            Err(e) => {
                self.append(Event::TempRootRemoved(TempRootRemoved {
                    removed: false,
                    detail: bounded(&format!("cannot inventory: {e}")),
                }));
                return false;
            }
        }
        let (removed, detail) = if !quiescent {
            (
                false,
                "kept: quiescence was not proven, a process may still use it".to_string(),
            )
        } else {
            match self.state.remove_tmp() {
                Ok(()) => (true, String::new()),
                Err(e) => (false, bounded(&e.to_string())),
            }
        };
        self.append(Event::TempRootRemoved(TempRootRemoved { removed, detail }));
        removed
    }

    /// Staging is inventoried, never deleted. An unreadable staging keeps
    /// the start identity with an empty inventory, which `verify --staging`
    /// then cannot match (fail closed).
    fn inventory_staging(&mut self) -> Option<StagingInventoried> {
        let path = self.cfg.staging.clone()?;
        let start = self.staging_start.clone()?;
        let seen = match (inventory::dir_identity(&path), inventory::inventory(&path)) {
            (Ok(identity), Ok(inventory)) => StagingInventoried {
                identity,
                inventory,
            },
            _ => StagingInventoried {
                identity: start,
                inventory: Inventory {
                    entries: 0,
                    bytes: 0,
                    digest: crate::audit::chain::line_hash(b""),
                },
            },
        };
        self.append(Event::StagingInventoried(seen.clone()));
        Some(seen)
    }
}

impl StopHost for Action {
    fn me(&self) -> Ident {
        self.me
    }

    fn append(&mut self, ev: Event) {
        Action::append(self, ev);
    }

    fn sync(&mut self) {
        Action::sync(self);
    }

    fn reap(&mut self) -> Peek {
        self.reap_all()
    }

    fn uncertain(&mut self, st: &Stat, reason: Uncertainty, detail: String) {
        if !self.uncertain_seen.insert((st.pid, st.start_time)) {
            return;
        }
        // An uncertain mapping is recorded even when the uid cannot be read
        // (that is one way a mapping becomes uncertain): UNKNOWN_UID then.
        let uid = real_uid(st.pid).unwrap_or(UNKNOWN_UID);
        Action::append(
            self,
            Event::MappingUncertain(crate::audit::record::MappingUncertain {
                process: st.to_proc(uid),
                reason,
                detail: bounded(&detail),
            }),
        );
    }
}

/// The job environment (SPEC 3.4): minimal and explicit.
fn job_env(cfg: &Config, state: &StateDir) -> Vec<(OsString, OsString)> {
    let inherit = |k: &str, default: &str| std::env::var_os(k).unwrap_or_else(|| default.into());
    let mut env: Vec<(OsString, OsString)> = vec![
        (
            "PATH".into(),
            inherit("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ),
        ("LANG".into(), inherit("LANG", "C.UTF-8")),
        ("HOME".into(), inherit("HOME", "/")),
        ("TMPDIR".into(), state.tmp_path().into()),
        ("REA_RUN_ID".into(), cfg.run_id.clone().into()),
        ("REA_STATE_DIR".into(), state.path.clone().into()),
    ];
    for name in &cfg.pass_env {
        if let Some(v) = std::env::var_os(name) {
            env.retain(|(k, _)| k != name.as_str());
            env.push((name.into(), v));
        }
    }
    env
}
