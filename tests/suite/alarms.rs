//! Inner alarms (docs/requests.md, issue 11): `inner_alarm_ms` / `submit
//! --inner-alarm`, SIGALRM to the job's leader through its pidfd at that
//! instant, recorded (`inner_alarm`), never a stop trigger. What happens
//! next is the runtime's business: a job without a handler dies of it, one
//! with a handler carries on, one that ignores it runs into its deadline.

use crate::common;

use common::harness::*;
use common::typed::{all, first, Log};
use rea::kinds::watchdog::{Event, InnerAlarm, Status, StopReason};
use rea::protocol::RefusalReason;

fn alarmed(on_alarm: &str) -> Vec<String> {
    vec![
        python().to_string(),
        fixture("alarmed.py"),
        "--on-alarm".into(),
        on_alarm.into(),
        "--sleep".into(),
        "60".into(),
    ]
}

fn argv(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The log's `inner_alarm` records.
fn alarms(log: &Log) -> Vec<InnerAlarm> {
    all!(log, Event::InnerAlarm).into_iter().cloned().collect()
}

/// Closes, waits, and checks the receipt is positive.
fn close_positive(w: &mut Watchdog) {
    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(w.wait(PATIENCE).success());
}

#[test]
fn a_job_without_a_handler_dies_of_its_inner_alarm_and_nothing_stops() {
    require_pid_ns!("inner_alarm_die");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let job = alarmed("die");
    let out = w.submit(
        &["--deadline", "60s", "--inner-alarm", "300ms"],
        &argv(&job),
    );
    // Killed by signal 14: the shell convention 128 + 14, not 124 (stopped).
    assert_eq!(out.status.code(), Some(128 + 14), "{out:?}");
    let recs = w.log();
    let a = alarms(&recs);
    assert_eq!(a.len(), 1, "{recs:#?}");
    let spawned = first!(recs, Event::JobSpawned);
    assert_eq!(a[0].job, spawned.job);
    assert_eq!(a[0].pid, spawned.pid);
    assert_eq!(a[0].start_time, spawned.start_time);
    assert_eq!(a[0].errno, None);
    let after = a[0].after_ms;
    assert!((300..60_000).contains(&after), "alarm after {after} ms");
    let exited = first!(recs, Event::JobExited);
    assert_eq!(exited.status, Status::Signal(14), "{exited:?}");
    assert!(!exited.stopped);
    assert!(
        all!(recs, Event::StopTriggered).is_empty(),
        "an alarm is no stop"
    );
    close_positive(&mut w);
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    sibling.assert_alive();
}

#[test]
fn a_job_that_handles_its_inner_alarm_carries_on() {
    require_pid_ns!("inner_alarm_handle");
    let mut w = Watchdog::start(&[]);
    let job = alarmed("handle");
    let out = w.submit(
        &["--capture", "--deadline", "60s", "--inner-alarm", "300ms"],
        &argv(&job),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alarm\n");
    let recs = w.log();
    assert_eq!(alarms(&recs).len(), 1, "{recs:#?}");
    assert!(all!(recs, Event::StopTriggered).is_empty());
    close_positive(&mut w);
}

#[test]
fn a_job_that_ignores_its_inner_alarm_runs_into_its_deadline() {
    require_pid_ns!("inner_alarm_ignore");
    let mut w = Watchdog::start(&[]);
    let job = alarmed("ignore");
    let out = w.submit(
        &["--deadline", "1500ms", "--inner-alarm", "300ms"],
        &argv(&job),
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "stopped at its deadline: {out:?}"
    );
    let recs = w.log();
    let kinds: Vec<&str> = recs
        .kinds()
        .into_iter()
        .filter(|k| matches!(*k, "inner_alarm" | "stop_triggered"))
        .collect();
    assert_eq!(
        kinds,
        ["inner_alarm", "stop_triggered"],
        "the alarm, then the deadline"
    );
    let t = first!(recs, Event::StopTriggered);
    assert_eq!(t.reason, StopReason::Deadline, "{t:?}");
    close_positive(&mut w);
}

#[test]
fn an_inner_alarm_not_below_the_deadline_is_refused_and_launches_nothing() {
    require_pid_ns!("inner_alarm_refused");
    let mut w = Watchdog::start(&[]);
    let job = alarmed("die");
    for alarm in ["2s", "1s"] {
        let out = w.submit(&["--deadline", "1s", "--inner-alarm", alarm], &argv(&job));
        assert_eq!(out.status.code(), Some(125), "refused: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bad_inner_alarm"),
            "{out:?}"
        );
    }
    let recs = w.log();
    let reasons: Vec<RefusalReason> = all!(recs, Event::RequestRefused)
        .iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(
        reasons,
        [RefusalReason::BadInnerAlarm, RefusalReason::BadInnerAlarm]
    );
    assert!(all!(recs, Event::JobSpawned).is_empty());
    close_positive(&mut w);
}

#[test]
fn an_armed_alarm_that_never_goes_off_is_recorded_at_the_spawn() {
    require_pid_ns!("inner_alarm_armed");
    let mut w = Watchdog::start(&[]);
    let armed = w.submit(
        &["--deadline", "240s", "--inner-alarm", "180s"],
        &["/bin/true"],
    );
    assert_eq!(armed.status.code(), Some(0), "{armed:?}");
    let plain = w.submit(&["--deadline", "60s"], &["/bin/true"]);
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    let recs = w.log();
    let spawned = all!(recs, Event::JobSpawned);
    assert_eq!(spawned.len(), 2, "{recs:#?}");
    // The 180 s alarm left a trace though it never went off; a job with
    // none says nothing of one (the line has no such key: `Log::read`
    // holds every line to the writer's encoding, which leaves it out).
    assert_eq!(spawned[0].inner_alarm_ms, Some(180_000), "{recs:#?}");
    assert!(spawned[1].inner_alarm_ms.is_none());
    assert!(alarms(&recs).is_empty(), "{recs:#?}");
    close_positive(&mut w);
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
}
