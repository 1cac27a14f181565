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
//! The other shapes here are leaders no signal ends in time: one that
//! switched uid, one an outside tracer holds, one in a FUSE read the
//! test's own server never answers (as root with `/dev/fuse`, in a mount
//! namespace private to the test's thread).
//!
//! Run inside a private PID namespace (`tools/test clock::`).

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::typed::{all, first, Log};
use rea::kinds::watchdog::Event;

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
    let recs = Log::read(&log);
    let done = first!(recs, Event::StopCompleted);
    assert_eq!(done.left, 0, "{done:?}");
    let signalled: Vec<i32> = all!(recs, Event::SignalSweep)
        .iter()
        .flat_map(|s| s.targets.iter().map(|t| t.pid))
        .collect();
    for m in &members {
        assert!(
            signalled.contains(&m.pid),
            "{} (pid {}) was never signalled: {signalled:?}",
            m.role,
            m.pid
        );
    }
    assert!(recs.receipt().quiescent);
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
    require_pid_ns!("clock");
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
    let recs = Log::read(&log);
    let mut held = Held::default();
    if let Some(j) = all!(recs, Event::JobSpawned).first() {
        let ident = rea::vocab::Ident {
            pid: j.pid,
            start_time: j.start_time,
            uid: NOBODY,
        };
        held.add("leader", ident); // SIGKILLed when `held` drops
    }
    let bound = Duration::from_millis(1000 + 500 + 1000 + 2000);
    assert!(took < bound, "exec took {took:?}, over {bound:?}");
    assert_eq!(status.code(), Some(125), "{status:?}");
    let stuck = all!(recs, Event::Unkillable);
    assert_eq!(stuck.len(), 1, "one unkillable record: {:?}", recs.kinds());
    assert!(!recs.receipt().quiescent);
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
    require_pid_ns!("clock");
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
            crate::common::typed::events(&log)
        } else {
            Vec::new()
        };
        if let Some(j) = all!(recs, Event::JobSpawned).first() {
            break j.pid;
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
    let recs = Log::read(&log);
    let stuck = all!(recs, Event::Unkillable);
    assert_eq!(stuck.len(), 1, "one unkillable record: {:?}", recs.kinds());
    assert_eq!(stuck[0].process.pid, leader);
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 1, "retain, never tampered: {v}");
    assert!(reason_codes(&v).contains(&"unkillable".to_string()), "{v}");
}

/// A leader stuck in a FUSE read whose server (a thread of this test,
/// outside the action, `common::fuse`) took the READ and never answers.
/// Once a fatal signal reaches it (the TERM), the reader waits
/// uninterruptibly (`request_wait_answer`, state D) and SIGKILL does not
/// end it until the server answers or the connection is aborted. In
/// `auto` mode (cgroup) the group cannot freeze either (a task in D never
/// reaches the freezer's trap): the KILL stage's freeze wait runs out, no
/// `cgroup.kill` is written (it would only send the same SIGKILL), and
/// the KILL sweep signals the leader through its pidfd. `exec` seals
/// after its final wait anyway: `unkillable` (state D, its wait channel),
/// 125, retain, never tampered, the group kept. Then the test aborts the
/// connection, and the leader, its SIGKILL pending, is gone.
fn exec_fuse_reader(mode: &str) {
    let Some(_ns) = common::mounts::private_mount_ns("clock: FUSE reader") else {
        return;
    };
    let scratch = Scratch::new();
    let log = scratch.path("audit.jsonl");
    let mnt = scratch.path("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // Dropped in reverse: `held` (SIGKILL, pending already), then `server`
    // (the abort that lets the leader die), then `group` (removed once
    // empty), whatever fails before.
    let group: Option<GroupGuard>;
    let server = common::fuse::FuseServer::on(&mnt);
    let held: Held;
    let file = mnt.join(common::fuse::FILE);
    let script = format!(
        "import os\nos.read(os.open({:?}, os.O_RDONLY), 4096)\n",
        file.to_str().unwrap()
    );
    let started = Instant::now();
    let mut child = exec_cmd(
        &scratch,
        &log,
        [mode, "1s", "500ms", "1s"],
        &[python(), "-S", "-c", &script],
    )
    .spawn()
    .unwrap();
    // The server holds the READ: the leader waits on it in the kernel.
    let exec_fd = rea::process::pidfd::bind_unwaited_child(&child).expect("bind exec");
    let taken = loop {
        if let Some(t) = server.read_taken(Duration::from_millis(50)) {
            break Some(t);
        }
        if exec_fd.has_exited() || started.elapsed() > PATIENCE {
            break server.read_taken(Duration::ZERO);
        }
    };
    let status = wait_child(&mut child, PATIENCE);
    let took = started.elapsed();
    eprintln!("exec --contain {mode}: {status:?} after {took:?}");
    group = GroupGuard::of(&log);
    let recs = Log::read(&log);
    // The leader, by the identity the log names (if it is still there):
    // SIGKILLed when `held` drops.
    let leader: Vec<Member> = all!(recs, Event::JobSpawned)
        .first()
        .map(|j| Member {
            pid: j.pid,
            start_time: j.start_time,
            role: "leader".into(),
        })
        .into_iter()
        .collect();
    held = Held::bind_live(&leader);
    let taken = taken.unwrap_or_else(|| panic!("no READ reached the server: {:?}", recs.kinds()));
    let leader = leader.first().expect("the log names the leader");
    assert_eq!(taken.pid, leader.pid, "the leader took the READ");
    let bound = Duration::from_millis(1000 + 500 + 1000 + 2000);
    assert!(took < bound, "exec took {took:?}, over {bound:?}");
    assert_eq!(status.code(), Some(125), "{status:?}: {:?}", recs.kinds());
    let stuck = all!(recs, Event::Unkillable);
    assert_eq!(stuck.len(), 1, "one unkillable record: {:?}", recs.kinds());
    let data = stuck[0];
    assert_eq!(data.process.pid, leader.pid, "{data:?}");
    assert_eq!(data.process.start_time, leader.start_time, "{data:?}");
    assert_eq!(data.state, "D", "{data:?}");
    assert_eq!(
        data.wchan.as_deref(),
        Some("request_wait_answer"),
        "{data:?}"
    );
    assert!(!recs.receipt().quiescent);
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 1, "retain, never tampered: {v}");
    assert!(reason_codes(&v).contains(&"unkillable".to_string()), "{v}");
    // exec returned without it: the leader is still there, in the read,
    // and so (cgroup mode) is its group, kept.
    assert_eq!(held.alive().len(), 1, "the leader outlived exec");
    if let Some(g) = &group {
        let kept = first!(recs, Event::GroupRemoved);
        assert!(kept.populated, "{kept:?}");
        assert!(!kept.removed, "{kept:?}");
        assert!(g.exists());
    }
    let seen = server.abort();
    let left = held.wait_all_exited(PATIENCE);
    assert!(left.is_empty(), "the leader survived the abort: {left:?}");
    eprintln!("exec --contain {mode}: after the abort, the leader is gone ({seen:?})");
    if let Some(g) = group {
        let path = g.path.clone();
        drop(g); // the leader gone, the group is empty: removed
        assert!(!path.exists(), "{path:?} is still there");
    }
}

#[test]
fn exec_returns_on_a_leader_stuck_in_a_fuse_read_in_none_mode() {
    exec_fuse_reader("none");
}

#[test]
fn exec_returns_on_a_leader_stuck_in_a_fuse_read_in_auto_mode() {
    exec_fuse_reader("auto");
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
