//! The jobs room: launching a job, pumping its output, finishing it.
//!
//! Owns every running job (leader pidfd, caller pidfd, pipes, deadline,
//! output accounting) and the job environment. It records what it does in
//! the ledger it is lent and returns everything else as effects: the
//! `accepted`, `exited`, `stopped` and `refused` replies, and the
//! `excess_output` and `caller_lost` triggers. It never reaps (ownership
//! does, and hands it the exit status) and never moves the phase.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::Interest;

use super::config::Config;
use super::effect::Effects;
use super::job::{close_pipe, pump, Job};
use super::job_env::{child_setup, job_env, requested_env};
use super::launch_request::LaunchRequest;
use super::ledger::Ledger;
use super::passthrough::Passthrough;
use super::priority::Base;
use super::receipt::ExecResult;
use super::sources::{Source, Sources};
use super::spawn::{spawn, ChildSetup, Launch};
use super::start::Started;
use super::state_dir::StateDir;
use super::stop::{Ask, Trigger};
use crate::clock::millis;
use crate::kinds::watchdog::{
    Event, InnerAlarm, JobExited, JobFailed, JobSpawned, OutputCapped, Stream,
};
use crate::process::identity::Stat;
use crate::protocol::{Reply, PROTOCOL_VERSION};
use crate::vocab::{bounded, Mode, RefusalReason, Status, StopReason};

/// The outcome of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launched {
    Running(u64),
    /// Nothing runs; the refusal was recorded and answered.
    Failed(RefusalReason),
}

pub struct Jobs {
    running: BTreeMap<u64, Job>,
    next: u64,
    env: Vec<(OsString, OsString)>,
    watchdog_pid: i32,
    nofile: libc::rlimit,
    priority: Base,
    output_cap: Option<u64>,
    action_deadline: Option<Instant>,
    /// The action deadline as configured (for the trigger's detail).
    action_limit: Option<Duration>,
    /// exec mode: the watchdog's own stdout/stderr, where output goes.
    pass: Option<Passthrough>,
    /// How the last job ended, or failed to start: exec's exit status
    /// (the last to happen wins).
    last: Option<ExecResult>,
    /// The action group's `cgroup.procs` (write-only): every job writes
    /// itself into it before exec (docs/containment.md).
    cgroup_procs: Option<OwnedFd>,
    child: ChildSetup,
}

impl Jobs {
    /// The jobs room of one action; in exec mode it opens the watchdog's
    /// own stdout and stderr for passing output through.
    pub fn new(
        cfg: &Config,
        state: &StateDir,
        started: &Started,
        action_deadline: Option<Instant>,
    ) -> io::Result<Jobs> {
        let group = started.contained.as_ref().and_then(|c| c.group.as_ref());
        let cgroup_procs = group.map(|g| g.procs_fd()).transpose()?;
        let pass = match cfg.mode {
            Mode::Exec if !cfg.stdio_inherited() => Some(Passthrough::new()?),
            Mode::Exec | Mode::Run => None,
        };
        Ok(Jobs {
            running: BTreeMap::new(),
            next: 1,
            env: job_env(cfg, state),
            watchdog_pid: started.me.pid,
            nofile: started.nofile,
            priority: started.priority,
            output_cap: cfg.output_cap,
            action_deadline,
            action_limit: cfg.action_deadline,
            pass,
            last: None,
            cgroup_procs,
            child: child_setup(cfg),
        })
    }

    /// Jobs whose leader has not been reaped yet.
    pub fn running(&self) -> impl Iterator<Item = &Job> {
        self.running.values().filter(|j| j.running())
    }

    /// The leaders of the jobs still running (not yet reaped).
    pub fn leaders(&self) -> impl Iterator<Item = &crate::vocab::Proc> {
        self.running().map(|j| j.leader.proc())
    }

    /// The running job a caller belongs to, from the watchdog's child on
    /// its ancestry (`via`): the job that child leads, or else the job
    /// whose session it is in (an orphan of that job the watchdog
    /// adopted), only for a job that leads its own session (timeout's
    /// `--foreground` job shares its caller's, and so may processes the
    /// watchdog did not start).
    fn job_of(&self, via: &Stat) -> Option<u64> {
        let leads = |j: &Job| {
            let l = j.leader.proc();
            l.pid == via.pid && l.start_time == via.start_time
        };
        let job = self.running().find(|j| leads(j));
        let in_session = |j: &&Job| j.sid == via.sid && j.sid == j.leader.pid();
        job.or_else(|| self.running().find(in_session))
            .map(|j| j.num)
    }

    /// What a stop starting now asks first: each running job's leader
    /// and the signal it is asked to stop with.
    pub fn asks(&self) -> Vec<Ask> {
        let ask = |j: &Job| Ask {
            job: j.num,
            pid: j.leader.pid(),
            start_time: j.leader.proc().start_time,
            signal: j.stop_signal,
        };
        self.running().map(ask).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The running job led by `pid`, for ownership to reap through its pidfd.
    pub fn by_leader_mut(&mut self, pid: i32) -> Option<&mut Job> {
        self.running
            .values_mut()
            .find(|j| j.running() && j.leader.pid() == pid)
    }

    /// How the last job ended or failed to start.
    pub fn last(&self) -> Option<ExecResult> {
        self.last
    }

    /// The nearest job deadline, inner alarm or action deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.running
            .values()
            .filter(|j| j.running())
            .flat_map(|j| j.deadline.into_iter().chain(j.alarm))
            .chain(self.action_deadline)
            .min()
    }

    /// What the clock does to running jobs at `now`: every inner alarm
    /// that is due goes off (SIGALRM to the leader through its pidfd, once,
    /// recorded; the runtime's own alarm, not a stop), and a deadline that
    /// has passed is returned as the trigger it is.
    pub fn on_time(&mut self, now: Instant, ledger: &mut Ledger) -> Option<Trigger> {
        for job in self.running.values_mut().filter(|j| j.running()) {
            if job.alarm.is_some_and(|a| now >= a) {
                job.alarm = None;
                let errno = job
                    .leader
                    .signal(nix::sys::signal::Signal::SIGALRM)
                    .err()
                    .map(|e| e.raw_os_error().unwrap_or(0));
                let leader = job.leader.proc();
                ledger.append(Event::InnerAlarm(InnerAlarm {
                    job: job.num,
                    pid: leader.pid,
                    start_time: leader.start_time,
                    after_ms: millis(now - job.started),
                    errno,
                }));
            }
        }
        self.deadline_passed(now)
    }

    /// The trigger for a deadline that has passed at `now`, if any.
    fn deadline_passed(&self, now: Instant) -> Option<Trigger> {
        if self.action_deadline.is_some_and(|d| now >= d) {
            let ms = self.action_limit.map(millis).unwrap_or(0);
            let detail = format!("action deadline of {ms}ms passed");
            return Some(Trigger::new(StopReason::Deadline, detail));
        }
        let late = self
            .running
            .values()
            .find(|j| j.running() && j.deadline.is_some_and(|d| now >= d))?;
        let detail = format!(
            "job {} ({}) passed its deadline after {}ms",
            late.num,
            late.id,
            millis(now - late.started)
        );
        Some(Trigger::new(StopReason::Deadline, detail).job(late.num))
    }

    /// Forks and execs one job. Records `job_spawned` (appended: the act
    /// was announced by the durable `request_received`, or `run_started`
    /// in exec mode) or a durable `job_failed`, and answers the request.
    pub fn launch(
        &mut self,
        mut req: LaunchRequest,
        src: &mut Sources,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> Launched {
        let num = self.next;
        self.next += 1;
        let now = Instant::now();
        let deadline = match (req.deadline.map(|d| now + d), self.action_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut env = match &req.env {
            Some(asked) => requested_env(asked, &self.env),
            None => self.env.clone(),
        };
        env.push(("REA_JOB".into(), num.to_string().into()));
        let argv_text: Vec<String> = req
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let program = req
            .program
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        let launch = Launch {
            argv: &req.argv,
            program: req.program.as_deref(),
            env: &env,
            cwd: req.cwd.as_deref(),
            stdin: req.stdin.take(),
            watchdog_pid: self.watchdog_pid,
            nofile: self.nofile,
            priority: self.priority,
            cgroup_procs: self.cgroup_procs.as_ref().map(|f| f.as_raw_fd()),
            child: self.child,
        };
        let sp = match spawn(launch) {
            Ok(sp) => sp,
            Err(e) => return self.failed(num, &req, argv_text, program, e, ledger, fx),
        };
        let leader = sp.leader.proc().clone();
        let spawned = JobSpawned {
            job: num,
            id: req.id.clone(),
            name: req.name.take(),
            argv: argv_text,
            program,
            cwd: req.cwd.as_ref().map(|c| c.to_string_lossy().into_owned()),
            env: req.env.as_ref().map(|e| {
                e.iter()
                    .map(|(k, _)| k.to_string_lossy().into_owned())
                    .collect()
            }),
            pid: leader.pid,
            start_time: leader.start_time,
            uid: leader.uid,
            ppid: sp.ppid,
            sid: sp.sid,
            caller: req.caller_ident,
            caller_job: req.caller_via.as_ref().and_then(|v| self.job_of(v)),
            deadline_ms: deadline.map(|d| millis(d.saturating_duration_since(now))),
            inner_alarm_ms: req.inner_alarm.map(millis),
            capture: req.capture,
            stop_signal: req.stop_signal,
        };
        ledger.append(Event::JobSpawned(spawned));
        if let Some(r) = &req.reply {
            let accepted = Reply::Accepted {
                v: PROTOCOL_VERSION,
                id: r.id.clone(),
                job: num,
                pid: leader.pid,
                start_time: leader.start_time,
            };
            fx.reply(r, accepted, false);
        }
        let mut job = Job::spawned(num, req, sp, now, deadline);
        job.passthrough = self.pass.is_some();
        job.cap = self.output_cap;
        if let Err(e) = watch(&mut job, src) {
            // Without its descriptors in the poll the job cannot be watched.
            let detail = format!("cannot poll job {num}: {e}");
            fx.trigger(Trigger::new(StopReason::AuditFailure, detail).job(num));
        }
        self.running.insert(num, job);
        Launched::Running(num)
    }

    /// A job that could not be launched: a durable `job_failed`, and the
    /// request answered `refused` with the errno (or, for exec's own job,
    /// nobody to answer, its status kept as exec's).
    #[allow(clippy::too_many_arguments)]
    fn failed(
        &mut self,
        num: u64,
        req: &LaunchRequest,
        argv: Vec<String>,
        program: Option<String>,
        e: super::spawn::SpawnError,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) -> Launched {
        ledger.record(Event::JobFailed(JobFailed {
            job: num,
            id: req.id.clone(),
            argv,
            program,
            errno: e.errno,
            reason: e.reason,
            detail: bounded(&e.detail),
        }));
        match &req.reply {
            Some(r) => {
                let reply = Reply::Refused {
                    v: PROTOCOL_VERSION,
                    id: Some(r.id.clone()),
                    reason: e.reason,
                    detail: bounded(&e.detail),
                    stop_reason: None,
                    errno: Some(e.errno),
                };
                fx.reply(r, reply, true);
            }
            None => self.last = Some(ExecResult::Failed(e.reason)),
        }
        Launched::Failed(e.reason)
    }

    /// An event on one of the jobs' descriptors: a pipe is readable, exec's
    /// sink can take more, or a caller exited. Other sources are not ours.
    pub fn on_source(
        &mut self,
        source: Source,
        src: &mut Sources,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        match source {
            Source::Output(num, i) => self.on_output(num, i, src, ledger, fx),
            Source::Pass(i) => self.on_pass_writable(i, src, ledger, fx),
            Source::Caller(num) => self.on_caller_lost(num, src, fx),
            _ => {}
        }
    }

    /// Stream `i` of job `num` is readable.
    fn on_output(
        &mut self,
        num: u64,
        i: usize,
        src: &mut Sources,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let Some(job) = self.running.get_mut(&num) else {
            return;
        };
        let pass = self.pass.as_mut().filter(|_| job.passthrough);
        let r = pump(job, i, pass, src, false);
        job.out[i].paused = r.paused;
        job.out[i].more = r.more;
        if r.eof {
            close_pipe(&mut job.out[i], src);
        }
        if r.crossed_cap {
            excess_output(num, i, self.output_cap, ledger, fx);
        }
    }

    /// Whether a stream's last read ran out of its budget with bytes left.
    pub fn output_left(&self) -> bool {
        self.running.values().any(|j| j.out.iter().any(|o| o.more))
    }

    /// Reads once more, within the budget, every stream left with bytes.
    pub fn pump_left(&mut self, src: &mut Sources, ledger: &mut Ledger) -> Effects {
        let mut fx = Effects::default();
        let left: Vec<(u64, usize)> = (self.running.values())
            .flat_map(|j| (0..2).filter(|&i| j.out[i].more).map(|i| (j.num, i)))
            .collect();
        for (num, i) in left {
            self.on_output(num, i, src, ledger, &mut fx);
        }
        fx
    }

    /// exec mode: the watchdog's stream `i` can take more; resume the
    /// jobs whose reading was paused for it.
    fn on_pass_writable(
        &mut self,
        i: usize,
        src: &mut Sources,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let Some(pass) = self.pass.as_mut() else {
            return;
        };
        pass.flush(src, i);
        if pass.is_full(i) {
            return;
        }
        let paused: Vec<u64> = self
            .running
            .values()
            .filter(|j| j.out[i].paused)
            .map(|j| j.num)
            .collect();
        for num in paused {
            self.on_output(num, i, src, ledger, fx);
        }
    }

    /// Job `num`'s caller pidfd is readable: a `caller_lost` trigger if the
    /// caller exited while the job ran.
    fn on_caller_lost(&mut self, num: u64, src: &mut Sources, fx: &mut Effects) {
        let Some(job) = self.running.get_mut(&num) else {
            return;
        };
        let Some(caller) = job.caller.take_if(|c| c.has_exited()) else {
            return;
        };
        if let Some(t) = job.caller_token.take() {
            src.remove(t, caller.as_fd().as_raw_fd());
        }
        if job.running() {
            let detail = format!(
                "caller pid {} of job {num} exited while the job ran",
                caller.pid()
            );
            fx.trigger(Trigger::new(StopReason::CallerLost, detail).job(num));
        }
    }

    /// The leader of job `num` was reaped with `status`: take what is left
    /// in its pipes, record `job_exited`, and answer `exited`, or `stopped`
    /// when `stopped_for` says the action is stopping.
    pub fn finish(
        &mut self,
        num: u64,
        status: Status,
        stopped_for: Option<StopReason>,
        src: &mut Sources,
        ledger: &mut Ledger,
        fx: &mut Effects,
    ) {
        let Some(mut job) = self.running.remove(&num) else {
            return;
        };
        let mut crossed = None;
        for i in 0..2 {
            let pass = self.pass.as_mut().filter(|_| job.passthrough);
            if pump(&mut job, i, pass, src, true).crossed_cap {
                crossed = Some(i);
            }
            close_pipe(&mut job.out[i], src);
        }
        if let Some(t) = job.leader_token.take() {
            src.remove(t, job.leader.as_fd().as_raw_fd());
        }
        if let (Some(c), Some(t)) = (job.caller.take(), job.caller_token.take()) {
            src.remove(t, c.as_fd().as_raw_fd());
        }
        let duration_ms = millis(job.started.elapsed());
        let leader = job.leader.proc().clone();
        self.last = Some(ExecResult::Exited(status));
        ledger.append(Event::JobExited(JobExited {
            job: num,
            pid: leader.pid,
            start_time: leader.start_time,
            status,
            duration_ms,
            stdout: job.out[0].summary(),
            stderr: job.out[1].summary(),
            output_capped: job.capped,
            stopped: stopped_for.is_some(),
        }));
        if let Some(r) = &job.reply {
            let (id, output_capped) = (r.id.clone(), job.capped);
            let (stdout, stderr) = (job.stream_reply(0), job.stream_reply(1));
            let reply = match stopped_for {
                Some(reason) => Reply::Stopped {
                    v: PROTOCOL_VERSION,
                    id,
                    job: num,
                    reason,
                    status,
                    duration_ms,
                    output_capped,
                    stdout,
                    stderr,
                },
                None => Reply::Exited {
                    v: PROTOCOL_VERSION,
                    id,
                    job: num,
                    status,
                    duration_ms,
                    output_capped,
                    stdout,
                    stderr,
                },
            };
            fx.reply(r, reply, true);
        }
        if let Some(i) = crossed {
            excess_output(num, i, self.output_cap, ledger, fx);
        }
    }

    /// At exit: write what exec's sinks still hold (bounded wait).
    pub fn flush_passthrough(&mut self, src: &mut Sources, within: Duration) {
        if let Some(p) = self.pass.as_mut() {
            p.finish(src, within);
        }
    }
}

/// Registers a new job's leader, pipes and caller with the loop, each on
/// its own (one failure does not leave the others unwatched); returns the
/// first error.
fn watch(job: &mut Job, src: &mut Sources) -> io::Result<()> {
    let num = job.num;
    let mut first = Ok(());
    let mut add = |fd, source| {
        let token = src.add(fd, source, Interest::READABLE);
        if let (Err(e), Ok(())) = (&token, &first) {
            first = Err(io::Error::new(e.kind(), e.to_string()));
        }
        token.ok()
    };
    job.leader_token = add(job.leader.as_fd().as_raw_fd(), Source::Leader(num));
    for (i, out) in job.out.iter_mut().enumerate() {
        if let Some(p) = &out.pipe {
            out.token = add(p.as_raw_fd(), Source::Output(num, i));
        }
    }
    if let Some(c) = &job.caller {
        job.caller_token = add(c.as_fd().as_raw_fd(), Source::Caller(num));
    }
    first
}

fn excess_output(num: u64, i: usize, cap: Option<u64>, ledger: &mut Ledger, fx: &mut Effects) {
    let cap = cap.unwrap_or(0);
    let stream = if i == 0 {
        Stream::Stdout
    } else {
        Stream::Stderr
    };
    ledger.append(Event::OutputCapped(OutputCapped {
        job: num,
        stream,
        cap,
    }));
    let detail = format!("job {num} wrote more than {cap} bytes");
    fx.trigger(Trigger::new(StopReason::ExcessOutput, detail).job(num));
}
