//! Ask first (docs/stop.md, issue 11): when an action stops, each
//! running job's leader is asked with its own `stop_signal` (and SIGCONT)
//! and nothing else is signalled, so the runtime can shut its own tree
//! down. Only when every leader has exited, or half the TERM grace has
//! passed, does SIGTERM go to the rest; KILL follows at the end of the
//! grace as before.
//!
//! Oracles: the audit log (what the watchdog says it signalled, with
//! `mono_ns`), the fixture's own log (what each child says it received),
//! and the oracle FIFO whose EOF proves every member dead.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Child;

use common::harness::*;
use common::stop::strs;
use common::typed::{all, first, Log};
use rea::kinds::watchdog::{AskEnd, Event, Sig, SignalSweep, Stage};

/// `fixtures/asked.py` as a job: a leader, `children` children, asked
/// with `signal`, doing `on_stop` (`cleanup` or `ignore`).
fn asked(oracle: &Oracle, log: &Path, signal: &str, on_stop: &str) -> Vec<String> {
    vec![
        python().to_string(),
        fixture("asked.py"),
        "--oracle".into(),
        oracle.arg().to_string(),
        "--log".into(),
        log.to_str().unwrap().to_string(),
        "--signal".into(),
        signal.into(),
        "--on-stop".into(),
        on_stop.into(),
        "--children".into(),
        "3".into(),
    ]
}

/// `asked.py` submitted as job `install` with `--stop-signal flag`, every
/// member reported on the oracle FIFO and held by a pidfd.
struct Runtime {
    oracle: Oracle,
    log: PathBuf,
    submit: Child,
    members: Vec<Member>,
    held: Held,
}

impl Runtime {
    fn start(w: &Watchdog, signal: &str, on_stop: &str, flag: &str) -> Runtime {
        let mut oracle = Oracle::new(&w.scratch, "oracle");
        let log = w.scratch.path("asked.log");
        let job = asked(&oracle, &log, signal, on_stop);
        let args = [
            "--name",
            "install",
            "--deadline",
            "200s",
            "--stop-signal",
            flag,
        ];
        let submit = w.submit_bg(&args, &strs(&job));
        let (members, _) = oracle.wait_ready(PATIENCE);
        let held = Held::bind_all(&members);
        Runtime {
            oracle,
            log,
            submit,
            members,
            held,
        }
    }

    fn leader(&self) -> &Member {
        self.members.iter().find(|m| m.role == "leader").unwrap()
    }
}

/// The `signal_sweep` records, in order.
fn sweeps(log: &Log) -> Vec<SignalSweep> {
    all!(log, Event::SignalSweep).into_iter().cloned().collect()
}

/// Milliseconds from the first `stop_triggered` to the first sweep of
/// `stage`.
fn since_trigger_ms(log: &Log, stage: Stage) -> u64 {
    let t0 =
        log.recs[log.position("stop_triggered", |e| matches!(e, Event::StopTriggered(_)))].mono_ns;
    let at = log.recs[log.position(
        &format!("{stage:?} sweep"),
        |e| matches!(e, Event::SignalSweep(s) if s.stage == stage),
    )]
    .mono_ns;
    (at - t0) / 1_000_000
}

fn pids(sweep: &SignalSweep) -> Vec<i32> {
    let mut v: Vec<i32> = sweep.targets.iter().map(|t| t.pid).collect();
    v.sort();
    v
}

#[test]
fn a_leader_that_cleans_up_when_asked_leaves_its_children_unsignalled() {
    require_pid_ns!("ask_cleanup");
    let sibling = Sibling::start();
    // A long grace: half of it (5 s) is far more than the cleanup takes,
    // so a TERM sweep here would be the watchdog's fault, not the load's.
    let mut w = Watchdog::start(&["--term-grace", "10s"]);
    let mut rt = Runtime::start(&w, "USR1", "cleanup", "USR1");
    let leader = rt.leader().pid;

    let stop = w.stop();
    assert!(stop.status.success(), "{stop:?}");
    assert!(rt.oracle.wait_eof(PATIENCE), "a member survived");
    assert!(rt.held.wait_all_exited(PATIENCE).is_empty());
    let out = output_within(rt.submit, PATIENCE);
    assert_eq!(out.status.code(), Some(124), "stopped: {out:?}");

    // The runtime's own account: every child finished, none was signalled.
    let told = std::fs::read_to_string(&rt.log).unwrap();
    let finished = told.lines().filter(|l| l.starts_with("finished ")).count();
    assert_eq!(finished, 3, "{told}");
    assert!(!told.contains("signal "), "a child was signalled: {told}");
    assert!(
        told.contains(&format!("leader finished {}", leader)),
        "{told}"
    );

    // The watchdog's account: one sweep, the ask, to the leader alone.
    let recs = w.log();
    let s = sweeps(&recs);
    assert_eq!(s.len(), 1, "only the ask: {s:#?}");
    assert_eq!(s[0].stage, Stage::Ask);
    assert_eq!(s[0].signals, [Sig::USR1, Sig::CONT]);
    assert_eq!(pids(&s[0]), vec![leader]);
    let spawned = first!(recs, Event::JobSpawned);
    assert_eq!(spawned.stop_signal, Sig::USR1, "{spawned:?}");

    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "receipt positive, delete_allowed: {v:#}");
    sibling.assert_alive();
}

#[test]
fn a_leader_that_ignores_its_stop_signal_gets_term_to_the_rest_at_half_the_grace() {
    require_pid_ns!("ask_ignore");
    let sibling = Sibling::start();
    let (grace_ms, kill_ms) = (2000u64, 3000u64);
    let mut w = Watchdog::start(&["--term-grace", "2s", "--kill-bound", "3s"]);
    let mut rt = Runtime::start(&w, "USR2", "ignore", "usr2");
    let leader = rt.leader().pid;
    let children: Vec<i32> = {
        let mut v: Vec<i32> = rt
            .members
            .iter()
            .filter(|m| m.role == "child")
            .map(|m| m.pid)
            .collect();
        v.sort();
        v
    };

    let stop = w.stop();
    assert!(stop.status.success(), "{stop:?}");
    assert!(rt.oracle.wait_eof(PATIENCE), "a member survived");
    assert!(rt.held.wait_all_exited(PATIENCE).is_empty());
    assert_eq!(output_within(rt.submit, PATIENCE).status.code(), Some(124));

    let recs = w.log();
    let s = sweeps(&recs);
    // 1. the ask, to the leader alone, with its own signal;
    assert_eq!(s[0].stage, Stage::Ask, "{s:#?}");
    assert_eq!(s[0].signals, [Sig::USR2, Sig::CONT]);
    assert_eq!(pids(&s[0]), vec![leader]);
    // 2. the ask ends at half the grace, the leader still alive;
    let ended = all!(recs, Event::AskEnded);
    assert_eq!(ended.len(), 1, "{recs:#?}");
    let e = ended[0];
    assert_eq!(e.reason, AskEnd::HalfGrace, "{e:?}");
    assert_eq!(e.leaders_left, 1, "{e:?}");
    assert!(e.after_ms >= grace_ms / 2, "{e:?}");
    // 3. then TERM to everything alive: the children and the leader;
    let term: Vec<&SignalSweep> = s.iter().filter(|x| x.stage == Stage::Term).collect();
    assert!(!term.is_empty(), "{s:#?}");
    assert!(
        since_trigger_ms(&recs, Stage::Term) >= grace_ms / 2,
        "TERM went out before half the grace"
    );
    let mut termed: Vec<i32> = term.iter().flat_map(|x| pids(x)).collect();
    termed.sort();
    let mut want = children.clone();
    want.push(leader);
    want.sort();
    assert_eq!(termed, want, "TERM to the children and the leader");
    // ... which the children saw (and nothing before it);
    let told = std::fs::read_to_string(&rt.log).unwrap();
    assert_eq!(
        told.lines()
            .filter(|l| l.starts_with("signal SIGTERM "))
            .count(),
        3,
        "{told}"
    );
    assert!(!told.contains("finished"), "{told}");
    // 4. KILL for the leader, which ignores TERM, after the grace;
    let kill_rec = s
        .iter()
        .find(|x| x.stage == Stage::Kill)
        .expect("a KILL sweep");
    assert_eq!(pids(kill_rec), vec![leader]);
    assert!(since_trigger_ms(&recs, Stage::Kill) >= grace_ms);
    // 5. all of it within the grace and the kill bound.
    let done = first!(recs, Event::StopCompleted);
    assert!(done.elapsed_ms <= grace_ms + kill_ms, "{done:?}");
    assert_eq!(done.left, 0);

    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    sibling.assert_alive();

    // 6. The replay knows how this ask could end: re-chained copies that
    // say it ended by timeout's -k, or at half the grace too early, are
    // tampered with (a stop for a request asks for half the grace).
    let run = w.run_id();
    let lines = common::logs::read_lines(&w.audit_log);
    let at = lines
        .iter()
        .position(|l| String::from_utf8_lossy(l).contains("\"kind\":\"ask_ended\""))
        .unwrap();
    let after = format!("\"after_ms\":{}", e.after_ms);
    for (from, to, says) in [
        (
            "\"reason\":\"half_grace\"",
            "\"reason\":\"kill_after\"".to_string(),
            "whose ask lasts half the grace",
        ),
        (
            after.as_str(),
            "\"after_ms\":5".to_string(),
            "before half the 2000 ms grace",
        ),
    ] {
        let mut forged = lines.clone();
        forged[at] = common::logs::replace_once(&forged[at], from, to.as_bytes());
        common::logs::rechain(&mut forged, &run, at);
        let copy = w.audit_log.with_file_name("forged.jsonl");
        common::logs::write_lines(&copy, &forged);
        let v = common::logs::verify(&copy, &[]);
        assert_eq!(v.exit, 3, "{to}: {:#}", v.json);
        let said = v.json["reasons"].as_array().unwrap().iter().any(|r| {
            r["code"] == "replay_mismatch" && r["detail"].as_str().is_some_and(|d| d.contains(says))
        });
        assert!(said, "{to}: {:#}", v.json);
    }
}

/// Two jobs asked with different signals: one record part per signal,
/// each leader with its own; a leader's exit alone does not end the ask
/// while the other leader runs.
#[test]
fn each_leader_is_asked_with_its_own_signal() {
    require_pid_ns!("ask_two");
    let mut w = Watchdog::start(&["--term-grace", "10s"]);
    let mut o1 = Oracle::new(&w.scratch, "o1");
    let mut o2 = Oracle::new(&w.scratch, "o2");
    let log = w.scratch.path("asked.log");
    let j1 = asked(&o1, &log, "HUP", "cleanup");
    let j2 = asked(&o2, &log, "TERM", "cleanup");
    let s1 = w.submit_bg(
        &["--deadline", "200s", "--stop-signal", "SIGHUP"],
        &strs(&j1),
    );
    let s2 = w.submit_bg(&["--deadline", "200s"], &strs(&j2));
    let (m1, _) = o1.wait_ready(PATIENCE);
    let (m2, _) = o2.wait_ready(PATIENCE);
    let stop = w.stop();
    assert!(stop.status.success(), "{stop:?}");
    assert!(o1.wait_eof(PATIENCE) && o2.wait_eof(PATIENCE));
    output_within(s1, PATIENCE);
    output_within(s2, PATIENCE);
    let told = std::fs::read_to_string(&log).unwrap();
    assert!(!told.contains("signal "), "{told}");
    assert_eq!(
        told.lines().filter(|l| l.starts_with("finished ")).count(),
        6
    );

    let s = sweeps(&w.log());
    assert!(s.iter().all(|x| x.stage == Stage::Ask), "{s:#?}");
    let leader = |m: &[Member]| m.iter().find(|x| x.role == "leader").unwrap().pid;
    let by_signal = |sig: Sig| -> Vec<i32> {
        s.iter()
            .filter(|x| x.signals.first() == Some(&sig))
            .flat_map(pids)
            .collect()
    };
    assert_eq!(by_signal(Sig::HUP), vec![leader(&m1)]);
    assert_eq!(by_signal(Sig::TERM), vec![leader(&m2)]);
    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(w.wait(PATIENCE).success());
}

#[test]
fn a_stop_signal_outside_the_list_is_a_usage_error_and_launches_nothing() {
    require_pid_ns!("ask_refused");
    let mut w = Watchdog::start(&[]);
    // The CLI refuses KILL and STOP itself (usage error 125, nothing sent).
    for sig in ["KILL", "STOP", "9", ""] {
        let out = w.submit(&["--stop-signal", sig], &["/bin/true"]);
        assert_eq!(out.status.code(), Some(125), "usage error: {sig}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("TERM, INT, HUP, QUIT, USR1, USR2"), "{err}");
    }
    // (The watchdog's own refusals, bad_stop_signal, are in the corpus:
    // tests/data/bad_requests.jsonl.)
    assert!(of_kind(&w.records(), "job_spawned").is_empty());
    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(w.wait(PATIENCE).success());
}
