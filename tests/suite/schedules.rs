//! Random schedules of real runs (a property test): whatever the triggers,
//! their order and timing, the bounds and what the processes do, an honest
//! log verifies as `delete_allowed` or `retain` (exit 0 or 1), never
//! `incomplete` or `tampered`, and nothing the run started is left.
//!
//! Each schedule is drawn from a seed (`schedules/plan.rs`): the mode
//! (`--contain none` or `auto`), the TERM grace (0-300 ms) and kill bound
//! (200 ms-1 s), one to three jobs of the fixtures' shapes (trees with
//! TERM-ignorers, processes that exit during the grace or by themselves,
//! zombies, crowds, a fork storm, a `Z` leader, launchers, in cgroup mode
//! jobs that nest, unnest or leave the action's group and remove the group
//! they left, tree members that leave it, a job that submits a job), the trigger (close, stop, a job's
//! or the action's deadline, SIGTERM to the watchdog, the jobs' own exit, a
//! lost caller), later triggers during the stop, an outside tracer holding a
//! member past the kill bound and letting it go before the close or after
//! the seal, and the delays between steps. The delays vary the schedule;
//! no assertion depends on them.
//!
//! For each run: the watchdog sealed (its `sealed` line, the receipt the
//! last record); `rea-audit verify LOG --staging DIR --expect-head HEAD
//! --json` exits 0 or 1 with a verdict that matches the schema (and 0 only
//! on a quiescent receipt); a live process the log says it sealed without
//! (`unkillable`) had a SIGKILL sweep first; every job's oracle FIFO (held
//! by each of its processes) reached EOF, no process carries the run's
//! `REA_RUN_ID`, and every client the test started has exited.
//!
//! A failure names its seed; replay it alone with
//! `REA_SCHEDULE_SEED=0x... tools/test schedules::random`, or run it N
//! times side by side with `REA_SCHEDULES=N` as well (a failure that
//! needs a loaded box); `REA_SCHEDULE_VERBOSE=1` (2: every record) prints
//! each run's verdict and stop. More:
//! `REA_SCHEDULES=N` (count), `REA_SCHEDULE_BASE=N` (other seeds), or the
//! ignored long variant `tools/test -- --ignored schedules::many`.

use crate::common;

mod plan;
mod procs;

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::harness::*;
use common::stop::{run_processes, test_cgroup, wait_for};
use common::typed::{all, first};
use nix::sys::signal::Signal;
use plan::{Later, Plan, Release, Trigger};
use procs::{await_record, Client, Escape, Fifo, Tracer, LASTING};
use rea::kinds::watchdog::{Event, Ident, Stage};
use rea::process::pidfd::bind_ident;

/// The default seeds: schedule `i` is `splitmix(BASE + i)`.
const BASE: u64 = 0x5EED_0000;
/// Schedules run side by side (most of a run waits on processes).
const WORKERS: usize = 4;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One schedule, run and checked; panics with what went wrong.
fn run(plan: &Plan) {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let n = RUNS.fetch_add(1, Ordering::SeqCst);
    let escape = Escape(test_cgroup().filter(|_| plan.contain == "auto").map(|g| {
        let p = g.join(format!("sched-{}-{n}", std::process::id()));
        std::fs::create_dir(&p).expect("make the escape group");
        p
    }));
    let mut flags = plan.flags();
    if escape.0.is_some() {
        flags.extend(["--pass-env".into(), "REA_TREE_ESCAPE_CGROUP".into()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut w = Watchdog::start_with(Scratch::new(), None, &flags, |cmd| {
        if let Some(p) = &escape.0 {
            cmd.env("REA_TREE_ESCAPE_CGROUP", p);
        }
    });
    let mut s = Steps {
        plan,
        fifos: Vec::new(),
        submits: Vec::new(),
        clients: Vec::new(),
        held: Held::default(),
        tracer: None,
        closed: false,
        signalled: false,
    };
    s.submit_all(&w, false);
    std::thread::sleep(ms(plan.trigger_delay_ms));
    let triggered = Instant::now();
    s.trigger(&w);
    if plan.await_stop
        && !matches!(
            plan.trigger,
            Trigger::Close | Trigger::Stop | Trigger::Sigterm
        )
    {
        // Only a variation: a deadline that is not there yet, a caller
        // whose job had ended, jobs that ended cleanly: no stop comes.
        let limit = ms(plan.action_deadline_ms.unwrap_or(0) + 3000);
        await_record(&w, "stop_triggered", limit);
    }
    s.submit_all(&w, true);
    for &(step, delay) in &plan.later {
        std::thread::sleep(ms(delay));
        s.later(&w, step);
    }
    match plan.tracer {
        Some((_, Release::Delay(d))) => {
            std::thread::sleep(ms(d).saturating_sub(triggered.elapsed()));
            s.release();
        }
        Some((_, Release::Stopped)) => {
            // A schedule with no stop before the close lets go after a while.
            await_record(&w, "stop_completed", Duration::from_secs(3));
            s.release();
        }
        _ => {}
    }
    if !s.closed && (!s.signalled || plan.close_after_sigterm) {
        s.ask(&w, "close");
    }
    let status = w.wait(PATIENCE);
    s.release();
    let mut codes = Vec::new();
    for c in s.submits.iter_mut().chain(s.clients.iter_mut()) {
        codes.push(c.finish());
    }
    check(&w, &mut s, status, &codes);
}

/// What the test does to the watchdog, step by step.
struct Steps<'a> {
    plan: &'a Plan,
    fifos: Vec<Fifo>,
    submits: Vec<Client>,
    clients: Vec<Client>,
    held: Held,
    tracer: Option<Tracer>,
    closed: bool,
    signalled: bool,
}

impl Steps<'_> {
    fn submit_all(&mut self, w: &Watchdog, after: bool) {
        for (i, j) in self.plan.jobs.iter().enumerate() {
            if j.after_trigger != after {
                continue;
            }
            std::thread::sleep(ms(j.delay_ms));
            let fifo = Fifo::new(&w.scratch, &format!("oracle-{i}"));
            let mut args = vec![
                "--name".to_string(),
                format!("job{i}"),
                "--deadline".into(),
                format!("{}ms", j.deadline_ms),
            ];
            if let Some(sig) = j.stop_signal {
                args.extend(["--stop-signal".into(), sig.to_string()]);
            }
            if let Some(a) = j.inner_alarm_ms {
                args.extend(["--inner-alarm".into(), format!("{a}ms")]);
            }
            let argv = j.shape.argv(&fifo.path);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let child = w.submit_bg(&args, &argv);
            self.submits
                .push(Client::new(format!("submit job{i}"), Some(i), child));
            self.fifos.push(fifo);
            if j.wait_ready && j.shape.reports_ready() {
                let gone = &self.submits.last().unwrap().fd;
                let members = self.fifos.last_mut().unwrap().ready(gone);
                self.bind(members.as_deref().unwrap_or_default());
                if let (Some((t, _)), Some(m)) = (self.plan.tracer, &members) {
                    // A member that lives until it is signalled, never the
                    // leader (its job would never end).
                    let m: Vec<_> = m
                        .iter()
                        .filter(|m| LASTING.contains(&m.role.as_str()))
                        .collect();
                    if t == i && !m.is_empty() {
                        let pick = m[(self.plan.seed >> 16) as usize % m.len()];
                        self.tracer = Some(Tracer::seize(pick.pid, &pick.role));
                    }
                }
            }
        }
    }

    /// Holds a pidfd of every member still there (SIGKILLed if a check fails).
    fn bind(&mut self, members: &[Member]) {
        for m in members {
            let ident = Ident {
                pid: m.pid,
                start_time: m.start_time,
                uid: uid(),
            };
            if let Ok(fd) = bind_ident(ident) {
                self.held.fds.push((m.clone(), fd));
            }
        }
    }

    /// `stop` or `close` in the background (its answer is collected last).
    fn ask(&mut self, w: &Watchdog, sub: &str) {
        let child = w
            .client(sub, &["--wait", "30s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client");
        self.clients.push(Client::new(sub.to_string(), None, child));
        self.closed |= sub == "close";
    }

    fn sigterm(&mut self, w: &Watchdog) {
        let _ = w.pidfd.signal(Signal::SIGTERM); // it may have sealed already
        self.signalled = true;
    }

    fn trigger(&mut self, w: &Watchdog) {
        match self.plan.trigger {
            Trigger::Close => self.ask(w, "close"),
            Trigger::Stop => self.ask(w, "stop"),
            Trigger::Sigterm => self.sigterm(w),
            Trigger::Deadline | Trigger::ActionDeadline => {}
            Trigger::JobExit => {
                let jobs = &self.plan.jobs;
                for c in &mut self.submits {
                    if c.job.is_some_and(|i| jobs[i].shape.ends_by_itself()) {
                        c.finish();
                    }
                }
            }
            Trigger::CallerLost => {
                let k = (self.plan.seed >> 8) as usize % self.submits.len();
                let _ = self.submits[k].fd.signal(Signal::SIGKILL);
            }
        }
    }

    fn later(&mut self, w: &Watchdog, step: Later) {
        match step {
            Later::Close => self.ask(w, "close"),
            Later::Stop => self.ask(w, "stop"),
            Later::Sigterm => self.sigterm(w),
        }
    }

    fn release(&mut self) {
        if let Some(t) = self.tracer.as_mut() {
            t.release();
        }
    }
}

/// The checks of one run.
fn check(w: &Watchdog, s: &mut Steps<'_>, status: std::process::ExitStatus, codes: &[String]) {
    let recs = w.log();
    let ks = recs.kinds();
    let context = || format!("watchdog {status:?}; clients {codes:?}; records {ks:?}");
    let sealed = w.sealed.as_ref().map(|v| v["event"].clone());
    assert_eq!(
        sealed,
        Some("sealed".into()),
        "the watchdog did not seal: {}",
        context()
    );
    assert_eq!(ks.last().copied(), Some("receipt"), "{}", context());
    let staging = w.staging.to_str().unwrap().to_string();
    let head = w.head().expect("the sealed line names the head");
    let (code, v) = w.verify(&["--staging", &staging, "--expect-head", &head]);
    let rc = recs.receipt();
    assert!(
        matches!(code, 0 | 1),
        "an honest, sealed log must verify 0 or 1, not {code}: {v:#}\nreceipt {rc:?}\n{}",
        context()
    );
    let want = if code == 0 {
        "delete_allowed"
    } else {
        "retain"
    };
    assert_eq!(v["verdict"], want, "{v:#}");
    if code == 0 {
        assert!(rc.quiescent, "delete_allowed on {rc:?}");
    }
    // The kill bound limits the wait for the proof, never the killing: a
    // process the watchdog sealed without had its SIGKILL first (unless it
    // had exited already, unreaped: `Z`).
    let killed: Vec<&rea::vocab::Proc> = all!(recs, Event::SignalSweep)
        .into_iter()
        .filter(|r| r.stage == Stage::Kill)
        .flat_map(|r| r.targets.iter())
        .collect();
    let unkillable = all!(recs, Event::Unkillable);
    for u in unkillable
        .into_iter()
        .filter(|u| !matches!(u.state.as_str(), "Z" | "X"))
    {
        let p = &u.process;
        assert!(
            killed
                .iter()
                .any(|t| t.pid == p.pid && t.start_time == p.start_time),
            "sealed without a process it never sent SIGKILL: {u:?}; {}",
            context()
        );
    }
    for (i, f) in s.fifos.iter_mut().enumerate() {
        assert!(
            f.gone(PATIENCE),
            "a process of job{i} is still alive (its oracle FIFO has a writer); notes {:?}; {}",
            f.notes,
            context()
        );
    }
    let left = s.held.wait_all_exited(PATIENCE);
    assert!(left.is_empty(), "members alive: {left:?}; {}", context());
    let run = w.run_id();
    wait_for(PATIENCE, "no process with the run's id", || {
        run_processes(&run).is_empty().then_some(())
    });
    if std::env::var_os("REA_SCHEDULE_VERBOSE").is_some_and(|v| v == "2") {
        for r in &recs.recs {
            eprintln!("  {r:?}");
        }
    }
    if std::env::var_os("REA_SCHEDULE_VERBOSE").is_some() {
        eprintln!(
            "seed {:#x}: {} {:?} {:?} {:?} traced={:?} {}\n  {}\n  {codes:?}",
            s.plan.seed,
            v["verdict"],
            reason_codes(&v),
            rc.stop_reason,
            first!(recs, Event::Containment).mode,
            s.tracer.as_ref().map(|t| (&t.role, t.seized)),
            all!(recs, Event::StopCompleted)
                .first()
                .map(|r| format!("{r:?}"))
                .unwrap_or_default(),
            s.plan.summary()
        );
    }
}

/// Whether schedules may move jobs between groups: auto mode gives
/// cgroup here (tools/test made a group), and this is root.
fn cgroup_moves() -> bool {
    test_cgroup().is_some() && nix::unistd::getuid().is_root()
}

/// Runs `count` schedules on [`WORKERS`] threads, schedule `i` the one
/// `plan_of(i)` draws; the failures are reported with their seeds.
fn run_many(count: u64, plan_of: impl Fn(u64) -> Plan + Sync) {
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    let slowest = Mutex::new((Duration::ZERO, 0u64));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= count || stop.load(Ordering::SeqCst) {
                    return;
                }
                let p = plan_of(i);
                let seed = p.seed;
                let t = Instant::now();
                let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&p)));
                let took = t.elapsed();
                let mut slow = slowest.lock().unwrap();
                if took > slow.0 {
                    *slow = (took, seed);
                }
                drop(slow);
                if let Err(e) = got {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    failures.lock().unwrap().push(format!(
                        "schedule {i}, seed {seed:#x} (replay: REA_SCHEDULE_SEED={seed:#x} \
                         tools/test schedules::random)\n  {}\n{msg}",
                        p.summary()
                    ));
                    stop.store(true, Ordering::SeqCst);
                }
            });
        }
    });
    let (slow, seed) = *slowest.lock().unwrap();
    eprintln!(
        "schedules: {} run in {:?} (slowest {slow:?}, seed {seed:#x})",
        next.load(Ordering::SeqCst).min(count),
        started.elapsed()
    );
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} schedule(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// 200 schedules (REA_SCHEDULES=N for another count), or the one
/// REA_SCHEDULE_SEED names.
#[test]
fn random_schedules_verify_and_leave_nothing() {
    require_pid_ns!("schedules");
    let count = env_u64("REA_SCHEDULES");
    if let Some(seed) = env_u64("REA_SCHEDULE_SEED") {
        // The one schedule, or (REA_SCHEDULES=N) N runs of it side by side.
        let p = Plan::draw(seed, cgroup_moves());
        eprintln!("replaying seed {seed:#x}:\n  {}", p.summary());
        match count {
            None => run(&p),
            Some(n) => run_many(n, |_| p.clone()),
        }
        return;
    }
    let base = env_u64("REA_SCHEDULE_BASE").unwrap_or(BASE);
    let cgroup = cgroup_moves();
    run_many(count.unwrap_or(200), |i| {
        Plan::draw(plan::splitmix(base.wrapping_add(i)), cgroup)
    });
}

/// The long variant: 2000 schedules from other seeds.
#[test]
#[ignore = "long: about 20 minutes on two cores"]
fn many_random_schedules() {
    require_pid_ns!("schedules");
    let base = env_u64("REA_SCHEDULE_BASE").unwrap_or(BASE ^ 0xFFFF_0000_0000);
    let count = env_u64("REA_SCHEDULES").unwrap_or(2000);
    let cgroup = cgroup_moves();
    run_many(count, |i| {
        Plan::draw(plan::splitmix(base.wrapping_add(i)), cgroup)
    });
}
