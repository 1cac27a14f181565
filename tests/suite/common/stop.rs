//! Support for the stop tests (`tests/suite/stop.rs`, `tests/suite/stop_storm.rs`):
//! the nasty tree every trigger must stop, pidfds that kill on drop, bounded
//! waits on audit records, and the checks docs/verdict.md asks of a positive stop.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, ChildStdout, Output, Stdio};
use std::time::{Duration, Instant};

use rea::kinds::watchdog::{
    ContainMode, ContainRequest, Event, Ident, JobSpawned, Outcome, Sig, Stage, StopCompleted,
    StopReason,
};
use serde_json::Value;

use super::harness::*;
use super::typed::{all, first, Log};

/// Every shape of docs/testing.md / issue 4: a setsid escapee, a double-forked
/// daemon, a SIGTERM-ignoring child, a stopped child, a child whose TERM
/// handler forks again, a 200-deep chain, a parent that never reaps its
/// zombies, and the "Hopper" whose argv the unrelated sibling shares.
pub const ALL_SHAPES: &[&str] = &[
    "escapee",
    "doublefork",
    "termignore",
    "stopped",
    "termfork",
    "chain:200",
    "zombies:5",
    "hopper",
];

/// `python3 fixtures/tree.py --oracle FIFO --shape ...` with every shape
/// plus `extra` shapes, then `then` (`wait` or `exit`).
pub fn tree_argv(oracle: &Oracle, extra: &[&str], then: &str) -> Vec<String> {
    let mut v = vec![
        python().to_string(),
        fixture("tree.py"),
        "--oracle".into(),
        oracle.arg().to_string(),
    ];
    for s in ALL_SHAPES.iter().chain(extra) {
        v.push("--shape".into());
        v.push(s.to_string());
    }
    v.push("--then".into());
    v.push(then.into());
    v
}

pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A tree of every shape, submitted as job `install` and fully reported.
pub struct Nasty {
    pub oracle: Oracle,
    /// The `rea-watchdog submit` that asked for the tree (its caller).
    pub submit: Option<Child>,
    pub members: Vec<Member>,
    pub held: Held,
}

impl Nasty {
    /// Submits the tree (`then` = `wait` or `exit`), waits until every member
    /// reported and binds them. With `exit` the leader is gone at once and
    /// the stop may begin before the test binds: members already gone are
    /// then skipped.
    pub fn start(w: &Watchdog, sibling: &Sibling, extra: &[&str], then: &str) -> Nasty {
        let mut oracle = Oracle::new(&w.scratch, "oracle");
        let argv = tree_argv(&oracle, extra, then);
        let submit = w.submit_bg(&["--name", "install", "--deadline", "200s"], &strs(&argv));
        let (members, ready) = oracle.wait_ready(PATIENCE);
        assert_eq!(members.len() as u64, ready["count"].as_u64().unwrap());
        let held = if then == "exit" {
            Held::bind_live(&members)
        } else {
            Held::bind_all(&members)
        };
        let hopper = members.iter().find(|m| m.role == "hopper").unwrap();
        if let Ok(argv) = std::fs::read(format!("/proc/{}/cmdline", hopper.pid)) {
            if then != "exit" {
                assert_eq!(
                    argv,
                    sibling.argv(),
                    "the job's hopper has the sibling's argv"
                );
            }
        }
        Nasty {
            oracle,
            submit: Some(submit),
            members,
            held,
        }
    }

    /// Waits (bounded) for the tree's submit client and returns its output.
    pub fn submit_output(&mut self) -> Output {
        output_within(self.submit.take().expect("submit already taken"), PATIENCE)
    }

    pub fn member(&self, role: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.role == role)
            .unwrap_or_else(|| panic!("no member {role}"))
    }

    /// Nothing of the tree is alive: the oracle FIFO reached EOF, every
    /// held pidfd reports an exit, no process carries the run's id; and the
    /// unrelated sibling is alive.
    pub fn assert_gone(&mut self, sibling: &Sibling, run_id: &str) {
        assert!(
            self.oracle.wait_eof(PATIENCE),
            "a tree member survived (the oracle FIFO has a writer left)"
        );
        let left = self.held.wait_all_exited(PATIENCE);
        assert!(left.is_empty(), "held members still alive: {left:?}");
        assert_eq!(
            run_processes(run_id),
            Vec::<i32>::new(),
            "processes of the run left"
        );
        sibling.assert_alive();
    }
}

/// Live processes whose environment says `REA_RUN_ID=run_id`: every job
/// process of the run inherits it. An oracle independent of the watchdog.
pub fn run_processes(run_id: &str) -> Vec<i32> {
    let needle = format!("REA_RUN_ID={run_id}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Polls `f` every 10 ms until it returns `Some`, at most `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) for a record matching `pred` in the log and returns it.
pub fn wait_record(log: &Path, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
    wait_for(PATIENCE, what, || {
        Log::<Event>::read(log).iter().find(|e| pred(e)).cloned()
    })
}

/// Waits (bounded) for a `job_spawned` record `pred` holds for.
pub fn wait_spawned(log: &Path, what: &str, pred: impl Fn(&JobSpawned) -> bool) -> JobSpawned {
    match wait_record(log, what, |e| matches!(e, Event::JobSpawned(j) if pred(j))) {
        Event::JobSpawned(j) => j,
        e => unreachable!("{e:?}"),
    }
}

pub fn is_kind(r: &Value, kind: &str) -> bool {
    r["kind"] == kind
}

/// A job's identity from its `job_spawned` record.
pub fn job_ident(j: &JobSpawned) -> Ident {
    Ident {
        pid: j.pid,
        start_time: j.start_time,
        uid: j.uid,
    }
}

/// Runs a client subcommand against the watchdog with a generous `--wait`.
pub fn client_wait(w: &Watchdog, sub: &str) -> Output {
    let child = w
        .client(sub, &["--wait", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    output_within(child, PATIENCE + Duration::from_secs(10))
}

pub fn client_bg(w: &Watchdog, sub: &str) -> Child {
    w.client(sub, &["--wait", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client")
}

/// The JSON line a client printed on stdout.
pub fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("client printed no JSON ({e}): {o:?}"))
}

/// The `stop_triggered` records, in order: (reason, first).
pub fn triggers(log: &Log) -> Vec<(StopReason, bool)> {
    all!(log, Event::StopTriggered)
        .iter()
        .map(|t| (t.reason, t.first))
        .collect()
}

/// Every pid a signal sweep targeted.
pub fn signalled_pids(log: &Log) -> Vec<i32> {
    all!(log, Event::SignalSweep)
        .iter()
        .flat_map(|s| s.targets.iter())
        .map(|t| t.pid)
        .collect()
}

/// The evidence of one stop: exactly one trigger that started it, one
/// `stop_completed`, exactly one receipt, last.
pub fn assert_one_stop(log: &Log, reason: StopReason) -> StopCompleted {
    let ks = log.kinds();
    assert_eq!(
        ks.iter().filter(|k| **k == "receipt").count(),
        1,
        "exactly one receipt: {ks:?}"
    );
    assert_eq!(ks.last().copied(), Some("receipt"));
    let firsts: Vec<_> = triggers(log).into_iter().filter(|t| t.1).collect();
    assert_eq!(firsts, vec![(reason, true)], "the first trigger");
    let done = all!(log, Event::StopCompleted);
    assert_eq!(done.len(), 1, "exactly one stop_completed");
    assert_eq!(done[0].reason, reason);
    done[0].clone()
}

/// docs/verdict.md for a stop with positive proof: the receipt is positive and
/// `rea-audit verify --staging DIR [--expect-head HEAD]` says
/// `delete_allowed` for this stop reason. Returns `stop_completed`'s data.
pub fn assert_positive_stop(w: &Watchdog, sibling: &Sibling, reason: StopReason) -> StopCompleted {
    let log = w.log();
    let done = assert_one_stop(&log, reason);
    assert_contained_as_asked(&log);
    assert_eq!(done.left, 0, "{done:?}");
    assert!(done.echild, "{done:?}");
    assert!(done.scan_empty, "{done:?}");
    let rc = log.receipt();
    assert_eq!(rc.outcome, Outcome::Stopped, "{rc:#?}");
    assert_eq!(rc.stop_reason, Some(reason), "{rc:#?}");
    assert!(rc.quiescent, "{rc:#?}");
    assert!(rc.no_live_or_waitable_descendants, "{rc:#?}");
    assert_eq!(rc.uncertain_mappings, 0, "{rc:#?}");
    assert!(rc.temp_root_removed, "{rc:#?}");
    assert!(
        !w.state_dir.join("tmp").exists(),
        "the temp root was removed"
    );
    assert!(
        !signalled_pids(&log).contains(&sibling.pid()),
        "a sweep targeted the unrelated sibling"
    );
    let staging = w.staging.to_str().unwrap().to_string();
    let mut args = vec!["--staging", staging.as_str()];
    let head = w.head();
    if let Some(h) = head.as_deref() {
        args.extend(["--expect-head", h]);
    }
    let (code, v) = w.verify(&args);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verdict"], "delete_allowed", "{v:#}");
    assert_eq!(v["stop_reason"], reason_str(reason), "{v:#}");
    assert_eq!(v["outcome"], "stopped", "{v:#}");
    done
}

/// SIGCONT went only where it was needed (issue 12): every pid in a TERM
/// sweep's `cont` is one of that part's targets and was `stopped` (the
/// tree's member that SIGSTOPs itself), and that member got it.
pub fn assert_cont_only_to_the_stopped(log: &Log, members: &[Member]) {
    let stopped = members.iter().find(|m| m.role == "stopped").unwrap();
    let mut got = false;
    for d in all!(log, Event::SignalSweep) {
        if d.stage == Stage::Term {
            assert!(!d.signals.contains(&Sig::CONT), "{d:?}");
        }
        for &pid in &d.cont {
            assert_eq!(d.stage, Stage::Term, "{d:?}");
            assert_eq!(pid, stopped.pid, "SIGCONT to a member never stopped: {d:?}");
            got = true;
        }
    }
    assert!(got, "the stopped member {} got no SIGCONT", stopped.pid);
}

/// tools/test's own cgroup (`REA_TEST_CGROUP`), where tests may make
/// groups of their own. Only an absolute path counts: an empty or relative
/// value would make a test's "group" a plain directory beside the tests
/// (an `escape-1/cgroup.procs` file once landed in the repository so).
pub fn test_cgroup() -> Option<std::path::PathBuf> {
    let p = std::path::PathBuf::from(std::env::var_os("REA_TEST_CGROUP")?);
    p.is_absolute().then_some(p)
}

/// The run was contained as this test pass asked (tools/test runs the stop
/// suites twice): under `REA_CONTAIN=none` the watchdog was asked for
/// `none` (unless the test pinned a mode) and ran so; `auto` gives
/// `cgroup` under tools/test's own group (`REA_TEST_CGROUP`) when
/// tools/test made one (not checked otherwise). A stopped cgroup run
/// killed its group once and removed it, empty.
pub fn assert_contained_as_asked(log: &Log) {
    let c = first!(log, Event::Containment);
    let pass = std::env::var("REA_CONTAIN").unwrap_or_default();
    let under = test_cgroup();
    let requested = c.requested;
    if pass == "none" {
        // The pass's REA_CONTAIN reached the watchdog (a test may still
        // pin a mode of its own with --contain).
        assert_ne!(
            requested,
            ContainRequest::Auto,
            "REA_CONTAIN=none did not reach the watchdog: {c:?}"
        );
    }
    match (requested, under) {
        (ContainRequest::None, _) => assert_eq!(c.mode, ContainMode::None, "{c:?}"),
        (ContainRequest::Cgroup, _) | (ContainRequest::Auto, Some(_)) => {
            assert_eq!(c.mode, ContainMode::Cgroup, "{c:?}");
            let path = c.group.as_ref().map_or("", |g| g.path.as_str());
            if let Some(root) = test_cgroup() {
                assert!(
                    std::path::Path::new(path).starts_with(&root),
                    "{path} not under {}",
                    root.display()
                );
            }
            let removed = first!(log, Event::GroupRemoved);
            assert!(!removed.populated, "{removed:?}");
            assert!(removed.removed, "{removed:?}");
            // cgroup.kill only after a frozen census proved every member
            // (docs/ownership.md): at most once. A group that did not
            // freeze in time is killed through pidfds instead.
            let kills = all!(log, Event::GroupKill).len();
            assert!(kills <= 1, "cgroup.kill at most once: {:?}", log.kinds());
        }
        _ => {}
    }
}

/// A stop reason as records and verdicts spell it (`deadline`, `root_lost`).
pub fn reason_str(reason: StopReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("a stop reason serialises as a string")
}

/// Reads one line from a child's stdout, at most `limit`.
pub fn read_line_within(
    r: &mut std::io::BufReader<ChildStdout>,
    limit: Duration,
) -> Option<String> {
    if r.buffer().is_empty() && !wait_readable(r.get_ref(), limit) {
        return None;
    }
    let mut l = String::new();
    r.read_line(&mut l).ok()?;
    (!l.is_empty()).then_some(l)
}
