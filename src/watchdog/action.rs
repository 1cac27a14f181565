//! One action: the loop, and the one place where the phase moves.
//!
//! Everything the watchdog waits on is a descriptor in [`Sources`]; a wake-up is one `match` over
//! what each event is about, handed to the room that owns it (intake, jobs, ownership, stop,
//! receipt). Rooms get plain values and the ledger on loan, and return [`Effect`]s; the loop
//! applies them here, in order, and only here does the phase change. With nothing running and
//! nothing due the poll sleeps without a timeout: an idle watchdog makes no wakeups. The phase and
//! its transition table are `phase.rs`; this file feeds it inputs and does what the table leaves
//! to the loop: checking a close for leftovers, and sealing.

use mio::{Events, Interest};
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::baseline::Stage;
use super::config::Config;
use super::effect::{Closer, Effect, Effects};
use super::external::External;
use super::framer::Text;
use super::intake::{Admitted, Desk, Intake, TEXT_BUDGET};
use super::jobs::{Jobs, Launched};
use super::launch_request::LaunchRequest;
use super::ledger::Ledger;
use super::ownership::{self, Running, StopDesk};
use super::phase::{Input, Phase, StopStart};
use super::receipt::{self, Finished, Sealing};
use super::reply::Replies;
use super::sources::{Source, Sources};
use super::start::{OpenError, Started};
use super::state_dir::StateDir;
use super::stop::{Exits, Step, Trigger};
use crate::contain::group::ActionGroup;
use crate::kinds::watchdog::{AuditWriter, DirIdentity};
use crate::process::reap::Peek;
use crate::protocol::Reply;
use crate::vocab::{Ident, Mode};

/// How long finishing waits for slow readers of replies and exec output.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

pub struct Action {
    cfg: Config,
    me: Ident,
    src: Sources,
    /// The watchdog's signals and the root controller.
    ext: External,
    state: StateDir,
    stage: Stage,
    /// How a first trigger starts the stop procedure (fixed at start).
    how: StopStart,
    ledger: Ledger,
    intake: Intake,
    jobs: Jobs,
    replies: Replies,
    phase: Phase,
    group: Option<ActionGroup>, // docs/containment.md: until close removes it
}

impl Action {
    /// Registers everything, writes the first records (durable) and returns
    /// an action ready to serve. Nothing has been spawned yet.
    pub fn new(
        cfg: Config,
        mut started: Started,
        state: StateDir,
        audit: AuditWriter,
        staging_start: Option<DirIdentity>,
    ) -> Result<Action, OpenError> {
        let mut src = Sources::new().map_err(OpenError::Epoll)?;
        let [first, root] = started.first_records(&cfg, &state, staging_start.clone());
        let deadline = cfg.action_deadline.map(|d| Instant::now() + d);
        let jobs = Jobs::new(&cfg, &state, &started, deadline).map_err(OpenError::Jobs)?;
        let (contained, how) = (started.contained.take(), StopStart::new(&cfg, &started));
        let ext = External::new(started.signals, started.root, &cfg, &mut src)?;
        src.add(state.fifo.as_raw_fd(), Source::Fifo, Interest::READABLE)
            .map_err(OpenError::Fifo)?;
        let mine = super::private::Mine::of(&state, &cfg.audit_log, &audit);
        let (mut ledger, mut stage) = (Ledger::new(audit), Stage::new(staging_start, mine));
        let group = ledger.start([first, root], contained, stage.arm_then_baseline(&cfg));
        let group = group.map_err(OpenError::Ledger)?;
        Ok(Action {
            cfg,
            me: started.me,
            src,
            ext,
            state,
            stage,
            how,
            ledger,
            intake: Intake::default(),
            jobs,
            replies: Replies::default(),
            phase: Phase::Running { closing: None },
            group,
        })
    }

    pub fn run_id(&self) -> &str {
        self.ledger.run()
    }

    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Serves until the receipt is written (or cannot be).
    pub fn run(mut self) -> Finished {
        let mut events = Events::with_capacity(1024);
        loop {
            if let Phase::Finished(f) = self.phase {
                return f;
            }
            let (deadline, burst) = (self.jobs.next_deadline(), self.ledger.burst_due());
            let wake = self.phase.wake(deadline, burst, self.cfg.is_exec());
            let timeout = match self.intake.pending() || self.jobs.output_left() {
                true => Some(Duration::ZERO), // input left from the last budget
                false => wake.map(|t| t.saturating_duration_since(Instant::now())),
            };
            if let Err(e) = self.src.wait(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.poll_failed(e);
                }
                continue;
            }
            let mut exits = Exits::default();
            for ev in events.iter() {
                let mut fx = Effects::default();
                match self.src.source(ev.token()) {
                    Some(Source::Signals) => exits.child |= self.ext.on_signals(&mut fx),
                    Some(Source::Root) => self.ext.on_root(&mut self.src, &mut fx),
                    Some(Source::Fifo) => self.intake.readable(),
                    Some(Source::Leader(_)) => (exits.child, exits.leader) = (true, true),
                    Some(Source::Exited(pid)) => exits.child |= self.phase.exited(pid),
                    Some(s @ (Source::Output(..) | Source::Pass(_) | Source::Caller(_))) => {
                        let (src, ledger) = (&mut self.src, &mut self.ledger);
                        self.jobs.on_source(s, src, ledger, &mut fx);
                    }
                    Some(Source::Reply(chan)) => {
                        if let Err(detail) = self.replies.flush(&mut self.src, chan) {
                            self.ledger.reply_failed(format!("channel {chan}"), &detail);
                        }
                    }
                    None => {} // removed earlier in this wake-up
                }
                self.apply(fx);
                if matches!(self.phase, Phase::Finished(_)) {
                    break;
                }
            }
            self.on_budgets();
            self.after_events(exits, Instant::now());
        }
    }

    /// Reaping (paced while stopping), deadlines and the stop step, once per wake-up; a stop
    /// step rescans when the last one asked, an exit may end the ask, or no child is left.
    fn after_events(&mut self, exits: Exits, now: Instant) {
        match &mut self.phase {
            Phase::Stopping { wake, stop, .. } => {
                let (asking, reap) = (exits.child && stop.asking(), stop.reap_now(exits, now));
                if now >= *wake || asking || (reap && self.reap().none_left(self.me.pid)) {
                    self.step_stop(now);
                }
            }
            Phase::Finished(_) => return,
            Phase::Running { .. } | Phase::Stopped { .. } if exits.child => _ = self.reap(),
            Phase::Running { .. } | Phase::Stopped { .. } => {}
        }
        let (jobs, ledger) = (&mut self.jobs, &mut self.ledger);
        let late = matches!(self.phase, Phase::Running { .. }).then(|| jobs.on_time(now, ledger));
        if let Some(t) = late.flatten() {
            self.on(Input::Trigger(t));
        }
        self.ledger.tick(now);
        self.maybe_finish();
    }

    /// Cannot wait any more: stop what can be stopped by blocking, give up.
    fn poll_failed(&mut self, e: io::Error) {
        crate::tell::note(format_args!("poll failed: {e}"));
        let t = Trigger::audit_failure(format!("poll failed: {e}"));
        self.on(Input::Trigger(t));
        while matches!(self.phase, Phase::Stopping { .. }) {
            self.step_stop(Instant::now());
            std::thread::sleep(Duration::from_millis(2));
        }
        self.maybe_finish();
    }

    /// Moves the phase (`phase.rs`), applies what that returned, checks a
    /// pending close. Only a close seals here; all else seals at the end of
    /// the wake-up ([`Action::after_events`]), never inside another handler.
    fn on(&mut self, input: Input) {
        let close = matches!(input, Input::Close(_));
        let mut fx = Effects::default();
        let phase = std::mem::replace(&mut self.phase, Phase::idle());
        let asks = || self.jobs.asks();
        self.phase = phase.on(input, &mut self.ledger, &mut fx, &self.how, &asks);
        self.apply(fx);
        if matches!(self.phase, Phase::Running { closing: Some(_) }) {
            self.check_close();
        } else if close {
            self.maybe_finish();
        }
    }

    /// A close with nothing stopping: a running job makes it a stop; any
    /// descendant left is abandoned; otherwise seal.
    fn check_close(&mut self) {
        let running = self.jobs.running().count();
        if running > 0 {
            return self.on(Input::Trigger(Trigger::close_while_running(running)));
        }
        let last = self.reap();
        if !matches!(self.phase, Phase::Running { closing: Some(_) }) {
            return; // reaping found something to stop
        }
        if last.none_left(self.me.pid) {
            return self.finalize(); // which cross-checks with a scan
        }
        match ownership::left_at_close(self.me) {
            Ok(None) => self.finalize(),
            Ok(Some(t)) | Err(t) => self.on(Input::Trigger(t)),
        }
    }

    /// `Stopped` seals once nobody is left to wait for.
    fn maybe_finish(&mut self) {
        let (exec, done) = (self.cfg.is_exec(), self.jobs.is_empty());
        if self.phase.seals(exec, done, Instant::now()) {
            self.finalize();
        }
    }

    fn apply(&mut self, mut fx: Effects) {
        for e in fx.take() {
            match e {
                Effect::Trigger(t) => self.on(Input::Trigger(t)),
                Effect::Close(c) => self.on(Input::Close(c)),
                Effect::Reply {
                    chan,
                    id,
                    reply,
                    last,
                } => self.send(chan, &id, &reply, last),
                Effect::Signal(sig) => self.ext.forward(sig, &self.jobs, &mut self.ledger),
            }
        }
        // A record that could not be made durable stops everything.
        if let Some(e) = self.ledger.take_failure() {
            self.on(Input::Trigger(Trigger::audit_failure(e)));
        }
    }

    fn send(&mut self, chan: u64, id: &str, reply: &Reply, last: bool) {
        if let Err(detail) = self.replies.send(&mut self.src, chan, reply, last) {
            self.ledger.reply_failed(id.to_string(), &detail);
        }
    }

    /// Reaps every waitable child, finishes the jobs whose leader exited
    /// and, while running, classifies what is left. Returns the last peek.
    fn reap(&mut self) -> Peek {
        let mut fx = Effects::default();
        let running = match &self.phase {
            Phase::Running { closing } => Some(Running {
                me: self.me,
                exec_closes: self.cfg.mode == Mode::Exec && closing.is_none(),
            }),
            _ => None,
        };
        let (jobs, ledger, src) = (&mut self.jobs, &mut self.ledger, &mut self.src);
        let (stopped_for, held) = (self.phase.stopped_for(), self.phase.held_mut());
        let last = ownership::reap_all(jobs, ledger, src, &mut fx, stopped_for, running, held);
        self.apply(fx);
        last
    }

    /// After a wake-up's events, one budget of what waits: the output left in the jobs' pipes
    /// (`job.rs`), and FIFO input (`intake.rs`: one read, [`TEXT_BUDGET`] texts that need work).
    fn on_budgets(&mut self) {
        let fx = self.jobs.pump_left(&mut self.src, &mut self.ledger);
        self.apply(fx);
        if !self.intake.pending() {
            return;
        }
        self.intake.fill(&mut self.state.fifo);
        let mut budget = TEXT_BUDGET;
        while budget > 0 && !matches!(self.phase, Phase::Finished(_)) {
            let Some(text) = self.intake.next_text() else {
                break;
            };
            budget -= usize::from(matches!(text, Text::Json(_)));
            self.on_text(text);
        }
    }

    /// One framed text: intake records, checks and admits it; the loop acts.
    fn on_text(&mut self, text: Text) {
        let mut fx = Effects::default();
        let gate = self.phase.gate();
        let mut desk = Desk {
            ledger: &mut self.ledger,
            replies: &mut self.replies,
            state: &self.state,
            me: self.me,
            root: self.ext.root(),
            root_alive: self.ext.root_alive(),
            root_caller: self.ext.root().filter(|_| self.cfg.mode == Mode::Run),
            gate,
            fx: &mut fx,
        };
        let admitted = self.intake.take(text, &mut desk);
        self.apply(fx);
        match admitted {
            None => {}
            Some(Admitted::Spawn(req)) => self.launch(*req),
            Some(Admitted::Stop { reply, trigger }) => {
                self.on(Input::Trigger(trigger));
                let mut fx = Effects::default();
                self.phase.await_stop(reply, &mut fx);
                self.apply(fx);
            }
            Some(Admitted::Close { reply }) => self.on(Input::Close(Closer::Request(reply))),
        }
    }

    /// Launches a job: an admitted spawn, or exec's own (`LaunchRequest::exec`).
    pub fn launch(&mut self, req: LaunchRequest) {
        let mut fx = Effects::default();
        let (src, ledger) = (&mut self.src, &mut self.ledger);
        // exec's own job failing to start ends exec; a nested request's failure is answered.
        let own = req.reply.is_none();
        let launched = self.jobs.launch(req, src, ledger, &mut fx);
        if matches!(launched, Launched::Failed(_)) && own && self.cfg.mode == Mode::Exec {
            fx.close(Closer::Own);
        }
        self.apply(fx);
    }

    /// One step of the stop procedure; reaping (and finishing jobs) is recorded before the sweep.
    fn step_stop(&mut self, now: Instant) {
        let peek = self.reap();
        let Phase::Stopping { stop, wake, .. } = &mut self.phase else {
            return;
        };
        let mut desk = StopDesk {
            me: self.me,
            ledger: &mut self.ledger,
            peek,
            group: self.group.as_ref(),
            src: &mut self.src,
        };
        let step = stop.step(&mut desk, now);
        if let Step::Wait(t) = step {
            *wake = t;
        }
        self.apply(Effects::default()); // the sweep's records may have failed
        if let Step::Done(c) = step {
            self.on(Input::StopDone(c));
        }
    }

    /// Proves quiescence, clears the temp root, inventories staging, seals, answers the closer.
    fn finalize(&mut self) {
        let last = self.reap();
        let Some(mut sealable) = self.phase.take_for_sealing() else {
            return; // reaping moved the phase: not ours to seal
        };
        let reason = sealable.reason();
        self.ext.flush_signals(&mut self.ledger);
        receipt::unkillable(self.jobs.leaders(), &mut self.ledger); // exec's final wait ran out
        let populated = receipt::close_group(self.group.take(), self.me, &mut self.ledger);
        let (stop, jobs_empty) = (sealable.stop.as_mut(), self.jobs.is_empty());
        let foreign = self.ledger.foreign_seen(); // a stranger was in the group
        let evidence = receipt::evidence(last, self.me, stop, jobs_empty, populated, foreign);
        let at = Sealing {
            state: &self.state,
            staging: self.cfg.staging.as_deref(),
            stage: &self.stage,
            root_alive: self.ext.root_alive(),
            reason,
        };
        let (positive, head) = receipt::seal(&evidence, &at, &mut self.ledger);
        if let Some(Closer::Request(to)) = &sealable.close {
            let log = self.ledger.path();
            let reply = receipt::closed_reply(to, reason, positive, head.as_deref(), log);
            self.send(to.chan, &to.id, &reply, true);
        }
        self.replies.drain_all(&mut self.src, EXIT_FLUSH);
        self.jobs.flush_passthrough(&mut self.src, EXIT_FLUSH);
        if self.cfg.mode == Mode::Exec && !self.stage.holds_state_dir() {
            let _ = self.state.remove_all_bounded(); // exec's (in a stage: gone at seal)
        }
        let exec = self.jobs.last().filter(|_| self.cfg.mode == Mode::Exec);
        let fin = receipt::finished(positive, head, reason, sealable.signal, exec, &self.ledger);
        self.phase = Phase::Finished(fin);
    }
}
