//! A stranger drafted into the action's group (docs/ownership.md).
//!
//! Any process that may write the group's `cgroup.procs` (every root job)
//! can move an unrelated process *into* the action's group. Membership is
//! not ownership: the stranger is never signalled and never killed (no
//! `cgroup.kill` while it is there), it is recorded as a `foreign_member`,
//! and the proof fails (`retain`, reason `foreign_member`).
//!
//! The stranger is the test's unrelated sibling (`fixtures/hopper.py`,
//! started outside any watchdog). A job drafts it with `sh -c 'echo PID >
//! GROUP/cgroup.procs'`. Before the group guard removes the group, the
//! sibling is moved back to the group it came from ([`Drafted`]), so the
//! guard's kill can never reach it, even when the test fails.
//!
//! Run inside a private PID namespace, as root with a writable cgroup2
//! (`tools/test foreign::`).

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::stop::*;
use common::typed::{all, events, first, Log};
use rea::kinds::watchdog::{Event, ForeignMember};
use serde_json::Value;

/// The group `/proc/PID/cgroup` names for pid, relative to the mount.
fn cgroup_of(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// The sibling drafted into the action's group; on drop it is written
/// back into the group it was in before (its absolute path).
struct Drafted {
    pid: i32,
    home: PathBuf,
}

impl Drafted {
    /// Where `pid` lives now, as an absolute path, given the action's
    /// group `group` (absolute) and one of its members `member`.
    fn home_of(pid: i32, group: &str, member: i32) -> PathBuf {
        let rel = cgroup_of(member).expect("member's cgroup");
        let mount = group
            .strip_suffix(&rel)
            .expect("group path ends with its relative path");
        PathBuf::from(format!(
            "{mount}{}",
            cgroup_of(pid).expect("sibling's cgroup")
        ))
    }
}

impl Drop for Drafted {
    fn drop(&mut self) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), self.pid.to_string());
    }
}

/// The job that drafts `pid` into its own group, then sleeps: the action's
/// leader, a proven member.
fn drafting_job(pid: i32) -> Vec<String> {
    let script = format!(
        "g=$(sed -n 's/^0:://p' /proc/self/cgroup); \
         m=$(awk '$9 == \"cgroup2\" {{ print $5; exit }}' /proc/self/mountinfo); \
         echo {pid} > \"$m$g/cgroup.procs\" || exit 9; exec sleep 120"
    );
    vec!["/bin/sh".into(), "-c".into(), script]
}

/// Waits (bounded) until `pid` is in `group` (relative).
fn wait_drafted(pid: i32, rel: &str) {
    let until = Instant::now() + PATIENCE;
    while cgroup_of(pid).as_deref() != Some(rel) {
        assert!(
            Instant::now() < until,
            "pid {pid} was never drafted into {rel}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The `foreign_member` records, and a check that none of the log's
/// signals or kills could have reached `pid`.
fn assert_never_touched(log: &Log, pid: i32) -> Vec<ForeignMember> {
    for s in all!(log, Event::SignalSweep) {
        for t in &s.targets {
            assert_ne!(t.pid, pid, "the stranger was signalled: {s:?}");
        }
    }
    let kills = all!(log, Event::GroupKill);
    assert!(
        kills.is_empty(),
        "cgroup.kill with a stranger in the group: {kills:?}"
    );
    let foreign: Vec<ForeignMember> = all!(log, Event::ForeignMember)
        .into_iter()
        .cloned()
        .collect();
    assert!(
        foreign.iter().any(|f| f.process.pid == pid),
        "no foreign_member names pid {pid}: {:?}",
        log.kinds()
    );
    foreign
}

fn assert_retained_for_foreign(log: &std::path::Path) {
    let (code, v) = verify_log(log, &[]);
    assert_eq!(code, 1, "verify: {v}");
    assert_eq!(v["verdict"], "retain", "{v}");
    let codes = reason_codes(&v);
    assert!(codes.iter().any(|c| c == "foreign_member"), "{codes:?}");
}

fn need_cgroup() -> bool {
    if skip_outside_pid_ns("foreign") {
        return false;
    }
    if test_cgroup().is_none() {
        assert!(!pid_ns_required(), "tools/test made no cgroup");
        eprintln!("SKIP: no test cgroup (run through tools/test as root)");
        return false;
    }
    true
}

/// One run flow: a watchdog in cgroup mode with `grace`, a job drafts the
/// sibling, a stop, a close. The sibling lives; the log says why it was
/// left; verify says retain.
fn drafted_then_stopped(grace: &str) {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&["--contain", "cgroup", "--term-grace", grace]);
    let _guard = GroupGuard::of(&w.audit_log).expect("a group was recorded");
    let log = w.log();
    let group = first!(log, Event::Containment)
        .group
        .as_ref()
        .expect("a group was recorded")
        .path
        .clone();
    let job = w.submit_bg(
        &["--name", "drafter", "--deadline", "200s"],
        &strs(&drafting_job(sibling.pid())),
    );
    // The leader is the job's only process; wait for it, then for the draft.
    let until = Instant::now() + PATIENCE;
    let leader = loop {
        let spawned = all!(w.log(), Event::JobSpawned).first().map(|j| j.pid);
        if let Some(p) = spawned {
            break p;
        }
        assert!(Instant::now() < until, "the job never spawned");
        std::thread::sleep(Duration::from_millis(5));
    };
    let _drafted = Drafted {
        pid: sibling.pid(),
        home: Drafted::home_of(sibling.pid(), &group, leader),
    };
    wait_drafted(sibling.pid(), &cgroup_of(leader).expect("leader's cgroup"));

    let stop = client_wait(&w, "stop");
    let close = client_wait(&w, "close");
    assert!(w.wait(PATIENCE).code().is_some(), "the watchdog exited");
    let _ = output_within(job, PATIENCE);
    sibling.assert_alive();
    assert_never_touched(&w.log(), sibling.pid());
    assert!(!stop.status.success(), "stop says not quiescent: {stop:?}");
    assert_eq!(
        close.status.code(),
        Some(1),
        "close says not positive: {close:?}"
    );
    let closed: Value = serde_json::from_slice(&close.stdout).expect("close prints JSON");
    assert_eq!(closed["positive"], false, "{closed}");
    assert_retained_for_foreign(&w.audit_log);
}

#[test]
fn a_drafted_stranger_survives_a_stop_and_retains_the_stage() {
    if need_cgroup() {
        drafted_then_stopped("200ms");
    }
}

/// With no grace the KILL stage comes first, where `cgroup.kill` used to
/// go out at once: twenty runs, never a stranger killed, never allowed.
#[test]
fn a_drafted_stranger_survives_a_kill_first_stop_twenty_times() {
    if need_cgroup() {
        for _ in 0..20 {
            drafted_then_stopped("0");
        }
    }
}

/// `exec` with a deadline: the stranger lives, exec returns within its
/// bounds, the log says retain for the stranger.
#[test]
fn exec_leaves_a_drafted_stranger_alive_and_retains() {
    if !need_cgroup() {
        return;
    }
    let sibling = Sibling::start();
    let scratch = Scratch::new();
    let log = scratch.path("audit.jsonl");
    let started = Instant::now();
    let mut child = Command::new(watchdog_bin())
        .args([
            "exec",
            "--contain",
            "cgroup",
            "--deadline",
            "2s",
            "--term-grace",
            "200ms",
        ])
        .args(["--kill-bound", "2s", "--audit-log"])
        .arg(&log)
        .arg("--")
        .args(drafting_job(sibling.pid()))
        .env("TMPDIR", scratch.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The group's path is in the log's containment record; draft happens
    // inside the job. Wait for the draft to move the sibling back later.
    let until = Instant::now() + PATIENCE;
    let (group, leader) = loop {
        let recs = if log.exists() {
            events(&log)
        } else {
            Vec::new()
        };
        let g = all!(recs, Event::Containment)
            .first()
            .map(|c| c.group.as_ref().expect("a group was recorded").path.clone());
        let l = all!(recs, Event::JobSpawned).first().map(|j| j.pid);
        if let (Some(g), Some(l)) = (g, l) {
            break (g, l);
        }
        assert!(Instant::now() < until, "exec never spawned its job");
        std::thread::sleep(Duration::from_millis(5));
    };
    let home = Drafted::home_of(sibling.pid(), &group, leader);
    let _guard = GroupGuard::of(&log);
    let _drafted = Drafted {
        pid: sibling.pid(),
        home,
    };
    let status = wait_child(&mut child, PATIENCE);
    let took = started.elapsed();
    sibling.assert_alive();
    assert!(took < Duration::from_secs(2 + 2 + 8), "exec took {took:?}");
    assert_eq!(status.code(), Some(125), "the proof failed: {status:?}");
    assert_never_touched(&Log::read(&log), sibling.pid());
    assert_retained_for_foreign(&log);
}
