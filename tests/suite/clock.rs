//! Every promise has a clock (docs/ownership.md, "A process is alive
//! while any of its threads lives"): `exec` returns within deadline + TERM
//! grace + kill bound + 2 s whatever the tree does.
//!
//! A thread-group leader whose main thread called `pthread_exit` shows
//! state `Z` in `/proc/PID/stat` while its other threads run. Taken for a
//! zombie, it was never signalled: `exec` never returned, and an escapee
//! of that shape was left alive with "left 0" in the log. The oracle FIFO
//! (inherited by every member) reaches EOF only when all of them are dead.
//!
//! Run inside a private PID namespace (`tools/test clock::`).

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;

/// `rea-watchdog exec --contain MODE --deadline D --term-grace G
/// --kill-bound K --audit-log LOG -- ARGV`, quiet, `TMPDIR` in `scratch`.
fn exec_cmd(scratch: &Scratch, log: &std::path::Path, bounds: [&str; 4], argv: &[&str]) -> Command {
    let [mode, deadline, grace, kill] = bounds;
    let mut c = Command::new(watchdog_bin());
    c.args(["exec", "--contain", mode, "--deadline", deadline])
        .args(["--term-grace", grace, "--kill-bound", kill, "--audit-log"])
        .arg(log)
        .arg("--")
        .args(argv)
        .env("TMPDIR", scratch.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// `exec --deadline 1s --term-grace 500ms --kill-bound 2s` of the fixture
/// in `mode`; returns (exit status, elapsed, log records).
fn exec_zombie_leader(mode: &str) {
    let scratch = Scratch::new();
    let log = scratch.path("audit.jsonl");
    let mut oracle = Oracle::new(&scratch, "oracle");
    let started = Instant::now();
    let mut child = exec_cmd(
        &scratch,
        &log,
        [mode, "1s", "500ms", "2s"],
        &[
            python(),
            &fixture("zombie_leader.py"),
            "--oracle",
            oracle.arg(),
            "--escape",
        ],
    )
    .spawn()
    .unwrap();
    let (members, _) = oracle.wait_ready(PATIENCE);
    assert_eq!(members.len(), 2, "{members:?}");
    let _held = Held::bind_all(&members); // SIGKILLed on drop if the test fails
    let status = wait_child(&mut child, PATIENCE);
    let took = started.elapsed();
    let bound = Duration::from_millis(1000 + 500 + 2000 + 2000);
    assert!(took < bound, "exec took {took:?}, over {bound:?}");
    assert!(
        oracle.wait_eof(PATIENCE),
        "a member of the zombie-leader shape is still alive"
    );
    assert_eq!(status.code(), Some(124), "a deadline stop: {status:?}");
    let recs = records(&log);
    let done = &of_kind(&recs, "stop_completed")[0]["data"];
    assert_eq!(done["left"], 0, "{done}");
    let signalled: Vec<i64> = of_kind(&recs, "signal_sweep")
        .iter()
        .flat_map(|s| s["data"]["targets"].as_array().unwrap().clone())
        .filter_map(|t| t["pid"].as_i64())
        .collect();
    for m in &members {
        assert!(
            signalled.contains(&(m.pid as i64)),
            "{} (pid {}) was never signalled: {signalled:?}",
            m.role,
            m.pid
        );
    }
    assert_eq!(receipt(&recs)["quiescent"], true);
    let (code, v) = verify_log(&log, &[]);
    assert_ne!(code, 3, "an honest log is never tampered: {v}");
}

#[test]
fn a_pthread_exit_leader_and_its_escapee_are_stopped_in_none_mode() {
    if !skip_outside_pid_ns("clock") {
        exec_zombie_leader("none");
    }
}

#[test]
fn a_pthread_exit_leader_and_its_escapee_are_stopped_in_auto_mode() {
    if !skip_outside_pid_ns("clock") {
        exec_zombie_leader("auto");
    }
}

/// A leader that switched its uid (none mode: no group to end it through,
/// and a process of another uid is never signalled) cannot be ended or
/// reaped: `exec` seals after its final wait anyway, records it
/// `unkillable` with its state, exits 125, and the log verifies as
/// retain, never tampered. The test ends the process itself afterwards,
/// through a pidfd bound to the identity the log names.
#[test]
fn exec_returns_on_a_leader_it_cannot_end() {
    if skip_outside_pid_ns("clock") {
        return;
    }
    let scratch = Scratch::new();
    let log = scratch.path("audit.jsonl");
    let script = "import os, time\nos.setgid(65534)\nos.setuid(65534)\ntime.sleep(1000)\n";
    let started = Instant::now();
    let mut child = exec_cmd(
        &scratch,
        &log,
        ["none", "1s", "500ms", "1s"],
        &[python(), "-c", script],
    )
    .spawn()
    .unwrap();
    let status = wait_child(&mut child, PATIENCE);
    let took = started.elapsed();
    let recs = records(&log);
    let mut held = Held::default();
    if let Some(j) = of_kind(&recs, "job_spawned").first() {
        let ident = rea::vocab::Ident {
            pid: j["data"]["pid"].as_i64().unwrap() as i32,
            start_time: j["data"]["start_time"].as_u64().unwrap(),
            uid: NOBODY,
        };
        held.add("leader", ident); // SIGKILLed when `held` drops
    }
    let bound = Duration::from_millis(1000 + 500 + 1000 + 2000);
    assert!(took < bound, "exec took {took:?}, over {bound:?}");
    assert_eq!(status.code(), Some(125), "{status:?}");
    let stuck = of_kind(&recs, "unkillable");
    assert_eq!(stuck.len(), 1, "one unkillable record: {:?}", kinds(&recs));
    assert_eq!(receipt(&recs)["quiescent"], false);
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 1, "retain, never tampered: {v}");
    assert!(reason_codes(&v).contains(&"unkillable".to_string()), "{v}");
}

/// A leader traced by a process outside the action: SIGKILL ends it, but
/// its exit is reported to the tracer first, and the watchdog cannot reap
/// it while the tracer neither waits nor detaches. `exec` seals after its
/// final wait anyway (unkillable recorded, 125, retain). The tracer is
/// the test's own child and ends when the test closes its stdin.
#[test]
fn exec_returns_on_a_leader_an_outside_tracer_holds() {
    if skip_outside_pid_ns("clock") {
        return;
    }
    let scratch = Scratch::new();
    let log = scratch.path("audit.jsonl");
    let started = Instant::now();
    let mut child = exec_cmd(
        &scratch,
        &log,
        ["none", "2s", "300ms", "1s"],
        &["/bin/sleep", "1000"],
    )
    .spawn()
    .unwrap();
    // The leader is exec's only child; the log names it.
    let until = Instant::now() + PATIENCE;
    let leader = loop {
        let recs = if log.exists() {
            records(&log)
        } else {
            Vec::new()
        };
        if let Some(j) = of_kind(&recs, "job_spawned").first() {
            break j["data"]["pid"].as_i64().unwrap() as i32;
        }
        assert!(Instant::now() < until, "exec never spawned its job");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut tracer = Command::new(python())
        .arg(fixture("tracer.py"))
        .arg(leader.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let seized = read_line_within(&mut tracer, PATIENCE);
    let status = wait_child(&mut child, PATIENCE);
    let took = started.elapsed();
    drop(tracer.stdin.take()); // the tracer exits, the tracee is released
    let _ = wait_child(&mut tracer, PATIENCE);
    assert_eq!(seized.trim(), "seized");
    let bound = Duration::from_millis(2000 + 300 + 1000 + 2000);
    assert!(took < bound, "exec took {took:?}, over {bound:?}");
    assert_eq!(status.code(), Some(125), "{status:?}");
    let recs = records(&log);
    let stuck = of_kind(&recs, "unkillable");
    assert_eq!(stuck.len(), 1, "one unkillable record: {:?}", kinds(&recs));
    assert_eq!(stuck[0]["data"]["process"]["pid"], leader);
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 1, "retain, never tampered: {v}");
    assert!(reason_codes(&v).contains(&"unkillable".to_string()), "{v}");
}

/// The first line `child` prints (bounded).
fn read_line_within(child: &mut std::process::Child, limit: Duration) -> String {
    use std::io::BufRead;
    let out = child.stdout.take().expect("piped stdout");
    assert!(wait_readable(&out, limit), "no line within {limit:?}");
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    line
}
