//! The acceptance suite (issue 5): the fixture cases of docs/testing.md run
//! end to end through the real binaries, the Python client and the
//! demonstration controller, with real Python descendants, inside the
//! private PID namespace `tools/test` creates.
//!
//! 1. the five `tools/rehearse.py` scenarios
//! 2. an unrelated "Hopper" (same argv, same uid) survives every outcome
//! 3. missing or stale ownership metadata fails closed
//! 4. cleanup is idempotent; a stale (reused-pid) caller identity is refused
//! 5. discarded stderr never reaches the log, the receipt or the replies
//! 7. a job run through bubblewrap is stopped cleanly (timeout, controller SIGKILL)
//! 8. the README's demo command works in a fresh clone (`#[ignore]`: a cargo build)
//!
//! (6, `rea-watchdog exec`'s exit codes, is tests/suite/exec.rs.)
//!
//! Oracles: a FIFO every fixture process holds open (EOF exactly when the
//! last one is dead), pidfds the test holds, and the audit log checked by
//! `rea-audit verify` and the JSON Schemas.

use crate::common;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::raw::{exchange, js, Req};
use common::reuse::{dead_process, force_pid_reuse};
use common::stop::wait_for;
use common::typed::{all, Log};
use nix::sys::signal::Signal;
use rea::kinds::watchdog::{
    ContainMode, Event, Ident, Outcome, Receipt, Stage, Status, StopReason,
};
use rea::process::identity::Stat;
use rea::process::pidfd::{bind_ident, VerifiedPidFd};
use rea::protocol::RefusalReason;
use serde_json::{json, Value};

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn tool(name: &str) -> String {
    format!("{}/tools/{name}", repo())
}

/// An oracle FIFO read to EOF, keeping every line the fixtures wrote
/// (`{"pid", "start_time", "role"}` per process; tree.py adds a ready line).
struct Reports {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    lines: Vec<Value>,
}

impl Reports {
    fn new(scratch: &Scratch, name: &str) -> Reports {
        let (path, file) = fifo_reader(scratch, name);
        Reports {
            path,
            file,
            buf: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn arg(&self) -> &str {
        s(&self.path)
    }

    /// Reads what is there; true at EOF (no writer holds the FIFO now).
    fn pump(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        loop {
            match self.file.read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = self.buf.drain(..=i).collect();
                        self.lines
                            .push(serde_json::from_slice(&line).expect("oracle line is JSON"));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) => panic!("oracle read: {e}"),
            }
        }
    }

    /// True when every writer is gone within `limit`. Meaningful only once
    /// the expected writers reported (see `count`).
    fn wait_eof(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.pump() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            wait_readable(&self.file, left.min(Duration::from_millis(200)));
        }
    }

    fn count(&self, role: &str) -> usize {
        self.lines.iter().filter(|l| l["role"] == role).count()
    }

    fn members(&self, role: &str) -> Vec<Ident> {
        self.lines
            .iter()
            .filter(|l| l["role"] == role)
            .map(|l| Ident {
                pid: l["pid"].as_i64().unwrap() as i32,
                start_time: l["start_time"].as_u64().unwrap(),
                uid: uid(),
            })
            .collect()
    }
}

/// Asserts the log is sealed by one receipt, and every job spawned was reaped.
fn assert_sealed_and_reaped(records: &Log) {
    let ks = records.kinds();
    assert_eq!(
        ks.iter().filter(|k| **k == "receipt").count(),
        1,
        "exactly one receipt: {ks:?}"
    );
    assert_eq!(ks.last().copied(), Some("receipt"), "{ks:?}");
    let spawned: Vec<u64> = all!(records, Event::JobSpawned)
        .iter()
        .map(|d| d.job)
        .collect();
    let exited: Vec<u64> = all!(records, Event::JobExited)
        .iter()
        .map(|d| d.job)
        .collect();
    for j in &spawned {
        assert!(exited.contains(j), "job {j} was never reaped: {ks:?}");
    }
}

// ----- 1. the five rehearse scenarios ---------------------------------------

struct Rehearsal {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    report: Value,
    oracle: Reports,
    #[allow(dead_code)]
    scratch: Scratch,
}

impl Rehearsal {
    fn log(&self) -> PathBuf {
        PathBuf::from(
            self.report["audit_log"]
                .as_str()
                .expect("report names the log"),
        )
    }

    fn staging(&self) -> PathBuf {
        PathBuf::from(self.report["staging"].as_str().unwrap())
    }

    fn explain(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}--- report\n{:#}",
            self.code, self.stdout, self.stderr, self.report
        )
    }
}

/// Runs `python3 tools/rehearse.py SCENARIO` with this build's binaries (no
/// cargo), a work directory in a scratch dir, a JSON report and an oracle
/// FIFO every fixture process of the demo holds.
fn rehearse(scenario: &str, extra: &[&str]) -> Rehearsal {
    let scratch = Scratch::new();
    let mut oracle = Reports::new(&scratch, "oracle");
    let work = scratch.path("work");
    let report = scratch.path("report.json");
    let child = Command::new(python())
        .arg(tool("rehearse.py"))
        .arg(scenario)
        .args(["--watchdog", watchdog_bin(), "--audit", audit_bin()])
        .args(["--stage", stage_bin()])
        .args(["--work-dir", s(&work), "--report", s(&report)])
        .args(["--oracle", oracle.arg()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tools/rehearse.py");
    let out = output_within(child, Duration::from_secs(240));
    let report: Value = std::fs::read(&report)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    oracle.pump();
    Rehearsal {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        report,
        oracle,
        scratch,
    }
}

/// Every fixture process the demo started is dead (oracle EOF) and exactly
/// the expected ones reported (so EOF means something). Exact: each
/// scenario starts a fixed set (a stop refuses every later spawn), and each
/// fixture reports once.
fn assert_all_fixtures_gone(r: &mut Rehearsal, phases: usize, launchers: usize) {
    assert!(
        r.oracle.wait_eof(PATIENCE),
        "a fixture process of the demo is still alive: {:?}\n{}",
        r.oracle.lines,
        r.explain()
    );
    assert!(
        r.oracle.count("phase") == phases && r.oracle.count("launcher") == launchers,
        "expected {phases} phase(s) and {launchers} launcher(s) to report: {:?}",
        r.oracle.lines
    );
}

/// Every process any `signal_sweep` of the log targeted, once each.
fn swept(log: &Path) -> BTreeSet<(i64, u64)> {
    all!(Log::read(log), Event::SignalSweep)
        .iter()
        .flat_map(|d| d.targets.iter())
        .map(|t| (i64::from(t.pid), t.start_time))
        .collect()
}

/// Every process an ask sweep (docs/stop.md) of the log targeted.
fn asked(log: &Path) -> BTreeSet<(i64, u64)> {
    all!(Log::read(log), Event::SignalSweep)
        .iter()
        .filter(|d| d.stage == Stage::Ask)
        .flat_map(|d| d.targets.iter())
        .map(|t| (i64::from(t.pid), t.start_time))
        .collect()
}

/// The leaders of the jobs still running when the stop began: spawned,
/// and not exited before the first stop_triggered.
fn running_leaders(log: &Path) -> BTreeSet<(i64, u64)> {
    let mut running = BTreeSet::new();
    for e in Log::read(log).iter() {
        match e {
            Event::JobSpawned(j) => _ = running.insert((i64::from(j.pid), j.start_time)),
            Event::JobExited(j) => _ = running.remove(&(i64::from(j.pid), j.start_time)),
            Event::StopTriggered(_) => break,
            _ => {}
        }
    }
    running
}

/// The receipt's counts agree with the records by the library's one count
/// rule (`Counts::add`), recounted here from the parsed log.
fn assert_counts_recount(log: &Path, receipt: &Receipt) {
    let mut counts = rea::kinds::watchdog::Counts::default();
    for line in std::fs::read(log).unwrap().split(|&b| b == b'\n') {
        if !line.is_empty() {
            let rec = rea::audit::reader::parse_line(line).expect("a record");
            counts.add(&rec.event);
        }
    }
    assert_eq!(receipt.counts, counts, "receipt counts vs the records");
}

/// A log that recorded a stage is delete_allowed only for the exact stage
/// (docs/verdict.md): rehearse's own verify had `--staging` (and then deleted it),
/// so verifying again without it leaves exactly one reason, and the pinned
/// head holds.
fn assert_only_staging_unchecked(r: &Rehearsal) {
    let head = r.report["head"].as_str().unwrap().to_string();
    let (code, v) = verify_log(&r.log(), &["--expect-head", &head]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(reason_codes(&v), ["staging_not_checked"], "{v:#}");
}

#[test]
fn rehearse_success_three_launchers_delete_allowed() {
    require_pid_ns!("rehearse_success");
    let sibling = Sibling::start();
    let mut r = rehearse("success", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert!(
        r.stdout.contains("OK: success reached delete_allowed"),
        "{}",
        r.explain()
    );
    assert_eq!(r.report["verdict"], "delete_allowed", "{}", r.explain());
    assert_eq!(r.report["staging_deleted"], true);
    assert!(
        !r.staging().exists(),
        "staging must be deleted on delete_allowed"
    );
    // Deleted by rea-stage remove, whose own log verifies as removed.
    assert_eq!(r.report["remove_exit"], 0, "{}", r.explain());
    assert_eq!(r.report["remove_result"], "removed", "{}", r.explain());
    let removal = std::path::PathBuf::from(r.report["remove_log"].as_str().unwrap());
    let out = std::process::Command::new(audit_bin())
        .arg("verify")
        .arg(&removal)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // install + 3 nested launchers report as launchers, the rehearsal as phase.
    assert_all_fixtures_gone(&mut r, 1, 4);

    let records = Log::read(&r.log());
    assert_sealed_and_reaped(&records);
    let spawned = all!(records, Event::JobSpawned);
    let names: Vec<&str> = spawned
        .iter()
        .map(|d| d.name.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "install",
            "rehearsal",
            "launcher-1",
            "launcher-2",
            "launcher-3"
        ]
    );
    // Phase bounds are the controller's request deadlines (docs/requests.md).
    let deadline = |i: usize| spawned[i].deadline_ms.unwrap();
    assert!(deadline(0) > 190_000 && deadline(0) <= 200_000);
    assert!(deadline(1) > 250_000 && deadline(1) <= 260_000);
    assert!((2..5).all(|i| deadline(i) > 50_000 && deadline(i) <= 60_000));
    // The launchers were asked for from inside the phase, not by the root.
    let root = match records.at(1) {
        Event::RootBound(b) => b.root,
        e => panic!("the second record is not root_bound: {e:?}"),
    };
    assert!((2..5).all(|i| spawned[i].caller.is_some() && spawned[i].caller != root));
    for d in all!(records, Event::JobExited) {
        assert_eq!(d.status, Status::Code(0), "{d:?}");
        assert!(!d.stopped);
    }
    let receipt = records.receipt();
    assert_eq!(receipt.outcome, Outcome::Closed);
    assert!(receipt.quiescent);
    assert_eq!(receipt.counts.signals, 0);
    // rehearse verified with --staging before deleting the stage; without
    // it the verdict cannot be delete_allowed (docs/verdict.md).
    assert_only_staging_unchecked(&r);
    sibling.assert_alive();
}

#[test]
fn rehearse_timeout_stops_phase_and_nested_launcher() {
    require_pid_ns!("rehearse_timeout");
    let sibling = Sibling::start();
    let mut r = rehearse("timeout", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "delete_allowed", "{}", r.explain());
    assert_eq!(r.report["stop_reason"], "deadline");
    assert!(!r.staging().exists());
    assert_all_fixtures_gone(&mut r, 1, 2);

    let records = Log::read(&r.log());
    assert_sealed_and_reaped(&records);
    let first = all!(records, Event::StopTriggered)
        .into_iter()
        .find(|d| d.first)
        .unwrap();
    assert_eq!(first.reason, StopReason::Deadline);
    // The job that passed its deadline is the nested launcher.
    let late = first.job.unwrap();
    let spawned = all!(records, Event::JobSpawned);
    let late_job = spawned.iter().find(|d| d.job == late).unwrap();
    assert_eq!(late_job.name.as_deref(), Some("launcher-1"));
    // Phase and launcher were signalled and reaped, as were the phase's
    // own descendants (the submit client).
    let targets = swept(&r.log());
    for who in ["phase", "launcher"] {
        for m in r.oracle.members(who) {
            if who == "launcher" && spawned[0].pid == m.pid {
                continue; // the install launcher had exited long before
            }
            assert!(
                targets.contains(&(m.pid as i64, m.start_time)),
                "{who} pid {} not signalled",
                m.pid
            );
        }
    }
    // Distinct processes, not sweep targets: one still dying when the TERM
    // grace ends is swept again with SIGKILL (timing). The ask goes to the
    // two running leaders (phase, launcher); the phase's submit client is
    // TERMed after it unless it already exited on its own, answered
    // "stopped" when its launcher died (timing too).
    assert_eq!(asked(&r.log()), running_leaders(&r.log()), "the ask");
    assert!(
        (2..=3).contains(&targets.len()),
        "phase, launcher, perhaps its submit client: {targets:?}"
    );
    let receipt = records.receipt();
    assert!(receipt.quiescent, "{receipt:#?}");
    assert!(receipt.no_live_or_waitable_descendants);
    assert_only_staging_unchecked(&r);
    sibling.assert_alive();
}

#[test]
fn rehearse_escape_setsid_escapee_is_abandoned_and_stopped() {
    require_pid_ns!("rehearse_escape");
    let sibling = Sibling::start();
    let mut r = rehearse("escape", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "delete_allowed", "{}", r.explain());
    assert_eq!(r.report["stop_reason"], "abandoned");
    assert!(!r.staging().exists());
    assert_all_fixtures_gone(&mut r, 1, 2);
    assert_eq!(r.oracle.count("escapee"), 1, "{:?}", r.oracle.lines);

    let records = Log::read(&r.log());
    assert_sealed_and_reaped(&records);
    let escapee = r.oracle.members("escapee")[0];
    let first = all!(records, Event::StopTriggered)
        .into_iter()
        .find(|d| d.first)
        .unwrap();
    assert_eq!(first.reason, StopReason::Abandoned);
    let named: Vec<(i64, u64)> = first
        .processes
        .iter()
        .map(|p| (i64::from(p.pid), p.start_time))
        .collect();
    assert!(
        named.contains(&(escapee.pid as i64, escapee.start_time)),
        "the escapee {escapee:?} is named as abandoned: {first:#?}"
    );
    // The nested phase-to-runner request was served before the stop.
    let spawned = all!(records, Event::JobSpawned);
    assert!(spawned
        .iter()
        .any(|d| d.name.as_deref() == Some("launcher-1")));
    assert_only_staging_unchecked(&r);
    sibling.assert_alive();
}

#[test]
fn rehearse_controller_kill_watchdog_stops_reaps_and_retains() {
    require_pid_ns!("rehearse_controller_kill");
    let sibling = Sibling::start();
    let mut r = rehearse("controller-kill", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "retain", "{}", r.explain());
    assert!(r.staging().exists(), "staging must be kept");
    // Phase and three running launchers (+ install's) were all stopped.
    assert_all_fixtures_gone(&mut r, 1, 4);

    let records = Log::read(&r.log());
    assert_sealed_and_reaped(&records);
    let receipt = records.receipt();
    assert_eq!(
        receipt.stop_reason,
        Some(StopReason::RootLost),
        "{receipt:#?}"
    );
    assert!(!receipt.root_alive);
    assert!(receipt.quiescent, "positive proof: {receipt:#?}");
    assert!(receipt.no_live_or_waitable_descendants);
    // The rehearsal and three launchers are the running jobs: the ask step
    // goes to exactly their leaders. The rehearsal's three submit clients
    // are TERMed after it unless they already exited on their own (each
    // ends once its launcher's "stopped" reply arrives): timing, like the
    // signal count, which is held to the records instead.
    let leaders = running_leaders(&r.log());
    assert_eq!(
        asked(&r.log()),
        leaders,
        "the ask went to the running leaders"
    );
    let targets = swept(&r.log());
    assert!(
        targets.is_superset(&leaders) && targets.len() <= 7,
        "{targets:?}"
    );
    assert_counts_recount(&r.log(), receipt);
    assert_eq!(receipt.counts.jobs, 5, "{receipt:#?}");
    let exited = all!(records, Event::JobExited);
    assert_eq!(
        exited.iter().filter(|d| d.stopped).count(),
        4,
        "rehearsal + 3 launchers stopped: {exited:#?}"
    );
    // What the launchers left in the private temp root is listed, then removed.
    let tmp = all!(records, Event::TempRootInventoried);
    assert_eq!(tmp[0].inventory.entries, 3, "{tmp:#?}");
    assert!(receipt.temp_root_removed);
    let staging = r.staging();
    let (code, v) = verify_log(&r.log(), &["--staging", s(&staging)]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["verdict"], "retain");
    assert!(reason_codes(&v).contains(&"root_lost".to_string()), "{v:#}");
    sibling.assert_alive();
}

#[test]
fn rehearse_watchdog_loss_no_receipt_retained() {
    require_pid_ns!("rehearse_watchdog_loss");
    let sibling = Sibling::start();
    let mut r = rehearse("watchdog-loss", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "retain", "{}", r.explain());
    assert_eq!(r.report["status"], "incomplete");
    assert!(r.staging().exists(), "staging must be kept");
    // The watchdog's direct children died by PDEATHSIG.
    assert_all_fixtures_gone(&mut r, 1, 4);

    let records = records(&r.log());
    assert!(of_kind(&records, "receipt").is_empty(), "no receipt");
    let staging = r.staging();
    let (code, v) = verify_log(&r.log(), &["--staging", s(&staging)]);
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(v["verdict"], "retain");
    assert!(
        reason_codes(&v).contains(&"no_receipt".to_string()),
        "{v:#}"
    );
    sibling.assert_alive();
}

/// Upload failure proven before any exec (docs/stage.md; the six outcomes'
/// fifth row): `rea-stage begin` declared four files, two arrived, and
/// `rea-stage discard` removed the untouched stage, recording it in its own
/// log.
#[test]
fn rehearse_upload_failed_discards_the_untouched_stage() {
    require_pid_ns!("rehearse_upload_failed");
    let sibling = Sibling::start();
    let r = rehearse("upload-failed", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "discarded", "{}", r.explain());
    assert_eq!(r.report["staging_deleted"], true);
    assert!(!r.staging().exists(), "rea-stage removed the stage");
    // The discard log has kinds of its own (stage-record.schema.json) and
    // verify prints a stage verdict for it (stage-verdict.schema.json).
    let stage_records = common::schema::compile("stage-record");
    for line in std::fs::read_to_string(r.log()).unwrap().lines() {
        let rec: Value = serde_json::from_str(line).unwrap();
        let errors = common::schema::schema_errors(&stage_records, &rec);
        assert!(errors.is_empty(), "{errors:?}\n{line}");
    }
    let out = Command::new(audit_bin())
        .args(["verify", "--json"])
        .arg(r.log())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = common::schema::schema_errors(&common::schema::compile("stage-verdict"), &v);
    assert!(errors.is_empty(), "{errors:?}\n{v:#}");
    assert_eq!(
        (out.status.code(), &v["result"]),
        (Some(0), &json!("discarded")),
        "{v:#}"
    );
    sibling.assert_alive();
}

/// The SSH response was lost (docs/containment.md; the sixth outcome): the
/// process holding the rehearsal's reply channel is killed, the watchdog runs
/// on; a fresh controller reconciles (`running`, read-only) and decides
/// review: no retry, no cleanup, no close, the stage kept, the review packet
/// written. Only then does the demo, as the person, close the action so
/// that nothing it started is left; the stage still stays.
#[test]
fn rehearse_response_lost_reconciles_and_decides_review() {
    require_pid_ns!("rehearse_response_lost");
    let sibling = Sibling::start();
    let mut r = rehearse("response-lost", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    let found = &r.report["reconcile"];
    assert_eq!(found["reconcile"], "running", "{}", r.explain());
    assert_eq!(found["reconcile_exit"], 5);
    assert_eq!(found["decision"], "review", "{found:#}");
    let packet = found["packet"]
        .as_str()
        .expect("the review packet was written");
    let page = std::fs::read_to_string(packet).unwrap();
    assert!(
        page.contains("<html") || page.contains("<!DOCTYPE"),
        "{packet}"
    );
    assert_eq!(found["close_exit"], 0, "the person's close: {found:#}");
    assert_eq!(r.report["watchdog_exit"], 0);
    assert_eq!(r.report["staging_deleted"], false);
    assert!(r.staging().exists(), "the stage is kept on review");
    assert_all_fixtures_gone(&mut r, 1, 4);
    let recs = Log::read(&r.log());
    // The response that could not be delivered is in the log; the stop is
    // the person's close, after the decision.
    assert!(!all!(recs, Event::ReplyFailed).is_empty(), "{recs:#?}");
    let first = all!(recs, Event::StopTriggered)[0];
    assert_eq!(first.reason, StopReason::CloseWhileRunning, "{first:?}");
    sibling.assert_alive();
}

/// As above, with the watchdog SIGKILLed too: `review`, naming what may be
/// alive (the phase's setsid escapee, which no record names, by the run's
/// id in its environment); with a cgroup, `running` (the escapee is a live
/// member of the action's group) and the recovery command named; verify
/// says retain and the stage stays.
#[test]
fn rehearse_response_and_watchdog_lost_is_a_review() {
    require_pid_ns!("rehearse_response_and_watchdog_lost");
    let sibling = Sibling::start();
    let mut r = rehearse("response-and-watchdog-lost", &[]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    let found = &r.report["reconcile"];
    let codes: Vec<&str> = found["codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(codes.contains(&"watchdog_lost"), "{codes:?}");
    // With a cgroup (auto finds one here) the escapee is a live member of
    // the action's group: the action still runs, and the report names
    // `rea-watchdog recover`; without one, a person reviews.
    let contained = all!(Log::read(&r.log()), Event::Containment)
        .first()
        .is_some_and(|c| c.mode == ContainMode::Cgroup);
    if contained {
        assert_eq!(found["reconcile"], "running", "{}", r.explain());
        assert_eq!(found["reconcile_exit"], 5);
        assert!(codes.contains(&"group_members_alive"), "{codes:?}");
        assert_eq!(found["watchdog_alive"], false, "{found:#}");
        assert!(
            found["recover_command"]
                .as_str()
                .is_some_and(|c| c.starts_with("rea-watchdog recover ")),
            "{found:#}"
        );
        let escapee = i64::from(r.oracle.members("escapee")[0].pid);
        assert!(
            found["group_alive"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_i64() == Some(escapee)),
            "the escapee is a live member: {found:#}"
        );
        assert!(found["close"].is_null(), "nothing to close: {found:#}");
    } else {
        assert_eq!(found["reconcile"], "review", "{}", r.explain());
        assert_eq!(found["reconcile_exit"], 6);
    }
    let escapee = i64::from(r.oracle.members("escapee")[0].pid);
    let named = found["unnamed"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["pid"].as_i64() == Some(escapee));
    assert!(named, "the escapee is named: {found:#}");
    assert_eq!(r.report["verdict"], "retain");
    assert_eq!(r.report["staging_deleted"], false);
    assert!(r.staging().exists(), "staging must be kept");
    // The demo ends what came back to it only after the review.
    assert_all_fixtures_gone(&mut r, 1, 4);
    sibling.assert_alive();
}

// ----- 2. the unrelated Hopper survives every outcome ------------------------

/// The job's pid once the log shows it spawned (bounded).
fn spawned_pid(w: &Watchdog, name: &str) -> i32 {
    wait_for(
        PATIENCE,
        &format!("job {name}'s job_spawned record"),
        || {
            all!(w.log(), Event::JobSpawned)
                .into_iter()
                .find(|d| d.name.as_deref() == Some(name))
                .map(|d| d.pid)
        },
    )
}

fn hopper_tree(oracle: &Oracle, extra: &[&'static str]) -> Vec<String> {
    let mut v = vec![
        python().to_string(),
        fixture("tree.py"),
        "--oracle".into(),
        oracle.arg().into(),
        "--shape".into(),
        "hopper".into(),
    ];
    for e in extra {
        v.push(e.to_string());
    }
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The job's hopper really has the sibling's argv.
fn assert_same_argv(members: &[Member], sibling: &Sibling) {
    let hopper = members.iter().find(|m| m.role == "hopper").unwrap();
    assert_eq!(
        std::fs::read(format!("/proc/{}/cmdline", hopper.pid)).unwrap(),
        sibling.argv(),
        "the job's hopper and the sibling have the same argv"
    );
}

#[test]
fn hopper_sibling_survives_success() {
    require_pid_ns!("hopper_sibling_survives_success");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    // env(1) execs python with exactly the sibling's argv; the variable
    // makes this one end by itself after 3 s.
    let argv = [
        "/usr/bin/env",
        "REA_HOPPER_SLEEP=3",
        python(),
        &fixture("hopper.py"),
    ];
    let submit = w.submit_bg(&["--name", "hopper"], &argv);
    let pid = spawned_pid(&w, "hopper");
    let until = Instant::now() + PATIENCE;
    while std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default() != sibling.argv() {
        assert!(
            Instant::now() < until,
            "the job never ran the sibling's argv"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = output_within(submit, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["outcome"], "closed");
    sibling.assert_alive();
}

#[test]
fn hopper_sibling_survives_cancellation() {
    require_pid_ns!("hopper_sibling_survives_cancellation");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let tree = hopper_tree(&oracle, &["--shape", "escapee", "--shape", "doublefork"]);
    let submit = w.submit_bg(&["--name", "install", "--deadline", "200s"], &strs(&tree));
    let (members, _) = oracle.wait_ready(PATIENCE);
    assert_same_argv(&members, &sibling);
    // The operator cancels the action: SIGTERM to the watchdog.
    w.signal(Signal::SIGTERM);
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived");
    assert_eq!(output_within(submit, PATIENCE).status.code(), Some(124));
    assert!(
        w.wait(PATIENCE).success(),
        "positive receipt after a signal"
    );
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "signal");
    sibling.assert_alive();
}

#[test]
fn hopper_sibling_survives_timeout() {
    require_pid_ns!("hopper_sibling_survives_timeout");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let tree = hopper_tree(&oracle, &["--shape", "termignore", "--shape", "doublefork"]);
    let submit = w.submit_bg(&["--name", "rehearsal", "--deadline", "3s"], &strs(&tree));
    let (members, _) = oracle.wait_ready(PATIENCE);
    assert_same_argv(&members, &sibling);
    assert_eq!(output_within(submit, PATIENCE).status.code(), Some(124));
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "deadline");
    sibling.assert_alive();
}

#[test]
fn hopper_sibling_survives_verifier_failure() {
    require_pid_ns!("hopper_sibling_survives_verifier_failure");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    // (No setsid shapes: an escapee is abandoned as soon as any job ends.)
    let tree = hopper_tree(&oracle, &["--shape", "termignore", "--shape", "chain:3"]);
    let runtime = w.submit_bg(&["--name", "runtime", "--deadline", "200s"], &strs(&tree));
    let (members, _) = oracle.wait_ready(PATIENCE);
    assert_same_argv(&members, &sibling);
    // The verifier: a phase whose three launchers exit 3.
    let phase = [
        python(),
        &fixture("phase.py"),
        "--watchdog",
        watchdog_bin(),
        "--launchers",
        "3",
        "--",
        "--exit",
        "3",
    ];
    let out = w.submit(&["--name", "verify", "--deadline", "60s"], &phase);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // The controller gives up: close while the runtime still runs.
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived");
    assert_eq!(output_within(runtime, PATIENCE).status.code(), Some(124));
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "close_while_running");
    let log = w.log();
    let exited = all!(log, Event::JobExited);
    assert_eq!(
        exited
            .iter()
            .filter(|d| d.status == Status::Code(3))
            .count(),
        4,
        "three launchers and their phase exited 3: {exited:#?}"
    );
    sibling.assert_alive();
}

#[test]
fn hopper_sibling_survives_forced_cleanup() {
    require_pid_ns!("hopper_sibling_survives_forced_cleanup");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let tree = hopper_tree(
        &oracle,
        &[
            "--shape",
            "doublefork",
            "--shape",
            "stopped",
            "--shape",
            "termfork",
        ],
    );
    let submit = w.submit_bg(&["--name", "rehearsal", "--deadline", "260s"], &strs(&tree));
    let (members, _) = oracle.wait_ready(PATIENCE);
    assert_same_argv(&members, &sibling);
    let held = Held::bind_all(&members);
    let stop = w.stop();
    assert!(stop.status.success(), "{stop:?}");
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    assert_eq!(output_within(submit, PATIENCE).status.code(), Some(124));
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "stop_requested");
    sibling.assert_alive();
}

/// A controller that is not the test: `python3 -c` with tools/rea_client/
/// starts a watchdog (its root is this controller), prints the ready line
/// and submits one job, so the test can SIGKILL it mid-job.
struct Controller {
    child: Child,
    stdout: BufReader<ChildStdout>,
    ready: Value,
    watchdog: VerifiedPidFd,
    log: PathBuf,
    staging: PathBuf,
}

const CONTROLLER: &str = r#"
import json, sys
a = json.loads(sys.argv[1])
sys.path.insert(0, a["tools"])
import rea_client as rc
wd = rc.Watchdog.start(a["bin"], state_dir=a["state"], audit_log=a["log"], staging=a["staging"])
print(json.dumps(wd.ready), flush=True)
r = wd.submit(a["argv"], deadline=a["deadline"], name="install")
print(json.dumps({"ended": r.outcome}), flush=True)
"#;

impl Controller {
    fn start(scratch: &Scratch, argv: &[String], deadline_s: u64) -> Controller {
        let staging = scratch.path("staging");
        std::fs::create_dir(&staging).unwrap();
        std::fs::write(staging.join("runtime.bin"), b"native runtime").unwrap();
        let log = scratch.path("audit.jsonl");
        let args = json!({
            "tools": format!("{}/tools", repo()),
            "bin": watchdog_bin(),
            "state": scratch.path("state"),
            "log": log,
            "staging": staging,
            "argv": argv,
            "deadline": deadline_s,
        });
        let mut child = Command::new(python())
            .args(["-c", CONTROLLER, &args.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the controller");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        assert!(
            wait_readable(stdout.get_ref(), PATIENCE),
            "the controller printed nothing"
        );
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let ready: Value = serde_json::from_str(&line).expect("a ready line");
        let watchdog = bind_ident(Ident {
            pid: ready["pid"].as_i64().unwrap() as i32,
            start_time: ready["start_time"].as_u64().unwrap(),
            uid: uid(),
        })
        .expect("bind the watchdog");
        Controller {
            child,
            stdout,
            ready,
            watchdog,
            log,
            staging,
        }
    }

    /// SIGKILL through the pidfd of our own child, then reap it.
    fn kill(&mut self) {
        signal_child(&self.child, Signal::SIGKILL);
        let _ = self.child.wait();
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        assert!(rest.is_empty(), "the controller finished its job: {rest}");
    }

    /// The watchdog reacts to its root's death and exits by itself.
    fn wait_watchdog(&self) {
        assert!(
            wait_readable(&self.watchdog, PATIENCE),
            "the watchdog (pid {}) did not finish after its controller died",
            self.ready["pid"]
        );
    }

    /// The log is sealed, stopped for root_lost with a positive proof, and
    /// the verdict is retain.
    fn assert_root_lost_evidence(&self) {
        let records = Log::read(&self.log);
        assert_sealed_and_reaped(&records);
        let receipt = records.receipt();
        assert_eq!(
            receipt.stop_reason,
            Some(StopReason::RootLost),
            "{receipt:#?}"
        );
        assert!(receipt.quiescent, "{receipt:#?}");
        assert_eq!(receipt.uncertain_mappings, 0);
        let (code, v) = verify_log(&self.log, &["--staging", s(&self.staging)]);
        assert_eq!(code, 1, "{v:#}");
        assert!(reason_codes(&v).contains(&"root_lost".to_string()), "{v:#}");
    }
}

#[test]
fn hopper_sibling_survives_controller_death() {
    require_pid_ns!("hopper_sibling_survives_controller_death");
    let sibling = Sibling::start();
    let scratch = Scratch::new();
    let mut oracle = Oracle::new(&scratch, "oracle");
    let tree = hopper_tree(&oracle, &["--shape", "escapee", "--shape", "doublefork"]);
    let mut ctl = Controller::start(&scratch, &tree, 200);
    let (members, _) = oracle.wait_ready(PATIENCE);
    assert_same_argv(&members, &sibling);
    ctl.kill();
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived");
    ctl.wait_watchdog();
    ctl.assert_root_lost_evidence();
    sibling.assert_alive();
}

// ----- 3. missing or stale ownership metadata fails closed -------------------

/// A quick, complete action (one job) whose log stays for verify tests.
fn finished_action() -> Watchdog {
    let mut w = Watchdog::start(&[]);
    let out = w.submit(&["--name", "install"], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    w
}

#[test]
fn verify_fails_closed_on_missing_foreign_or_moved_metadata() {
    require_pid_ns!("verify_fails_closed");
    let a = finished_action();
    let b = finished_action();
    let head_a = a.head().unwrap();
    let head_b = b.head().unwrap();
    let staging_a = s(&a.staging).to_string();
    // Positive control: A's own log, head, run and staging.
    let (code, v) = a.verify(&[
        "--expect-head",
        &head_a,
        "--expect-run",
        &a.run_id(),
        "--staging",
        &staging_a,
    ]);
    assert_eq!(code, 0, "{v:#}");

    // A missing log: error (4), never delete_allowed.
    let missing = a.scratch.path("no-such-log.jsonl");
    let out = Command::new(audit_bin())
        .arg("verify")
        .arg(&missing)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::assert_verdict_matches_schema(&v);
    assert_eq!(v["verdict"], "retain");

    // Another run's log: the controller expected B but was handed A.
    let (code, v) = a.verify(&["--expect-run", &b.run_id()]);
    assert_eq!(code, 3, "{v:#}");
    assert_eq!(v["verdict"], "retain");
    assert!(reason_codes(&v).contains(&"expect_run_mismatch".to_string()));
    let (code, v) = a.verify(&["--expect-head", &head_b]);
    assert_eq!(code, 3, "{v:#}");
    assert!(reason_codes(&v).contains(&"head_mismatch".to_string()));

    // A staging directory that is not the one the receipt names.
    let (code, v) = a.verify(&["--expect-head", &head_a, "--staging", s(&b.staging)]);
    assert_eq!(code, 1, "{v:#}");
    assert!(reason_codes(&v).contains(&"staging_mismatch".to_string()));
    // Same path, same content, but a new directory (another identity).
    std::fs::rename(&a.staging, a.scratch.path("staging.old")).unwrap();
    std::fs::create_dir(&a.staging).unwrap();
    std::fs::write(a.staging.join("runtime.bin"), b"native runtime").unwrap();
    let (code, v) = a.verify(&["--expect-head", &head_a, "--staging", &staging_a]);
    assert_eq!(code, 1, "{v:#}");
    assert!(reason_codes(&v).contains(&"staging_mismatch".to_string()));
    // Staging gone altogether.
    std::fs::remove_dir_all(&a.staging).unwrap();
    let (code, v) = a.verify(&["--expect-head", &head_a, "--staging", &staging_a]);
    assert_ne!(code, 0, "{v:#}");
    assert_eq!(v["verdict"], "retain");
}

/// Runs a client subcommand against `state_dir`; it must fail fast with 125.
fn client_fails(state_dir: &Path, sub: &str, extra: &[&str]) -> String {
    let t = Instant::now();
    let child = Command::new(watchdog_bin())
        .arg(sub)
        .arg("--state-dir")
        .arg(state_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(125), "{sub}: {out:?}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "{sub} took {:?}",
        t.elapsed()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn clients_fail_closed_on_stale_or_foreign_state_dirs() {
    require_pid_ns!("clients_fail_closed");
    let sibling = Sibling::start();
    let w = finished_action();
    let marker = w.scratch.path("launched");
    let touch = ["--", "/usr/bin/touch", s(&marker)];

    // The watchdog of this state directory has exited.
    let err = client_fails(&w.state_dir, "submit", &touch);
    assert!(err.contains("stale"), "{err}");
    assert!(client_fails(&w.state_dir, "close", &[]).contains("stale"));
    assert!(client_fails(&w.state_dir, "stop", &[]).contains("stale"));

    // Missing.
    let err = client_fails(&w.scratch.path("nowhere"), "submit", &touch);
    assert!(err.contains("nowhere"), "{err}");

    // A forged ready.json naming a live process that is not a watchdog:
    // with a wrong start time (pid reused) and with the right one (no reader).
    let fake = w.scratch.path("fake");
    std::fs::create_dir(&fake).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::mkfifo(
        &fake.join("requests"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::create_dir(fake.join("replies")).unwrap();
    let st = rea::process::identity::read_stat(sibling.pid()).unwrap();
    let forge = |start_time: u64| {
        let ready = json!({
            "event": "ready", "run_id": "forged", "pid": sibling.pid(),
            "start_time": start_time, "uid": uid(), "state_dir": fake,
            "fifo": fake.join("requests"), "audit_log": w.scratch.path("forged.jsonl"),
        });
        std::fs::write(fake.join("ready.json"), format!("{ready}\n")).unwrap();
    };
    forge(st.start_time + 1);
    let err = client_fails(&fake, "submit", &touch);
    assert!(err.contains("stale"), "{err}");
    forge(st.start_time);
    let err = client_fails(&fake, "submit", &touch);
    assert!(err.contains("no watchdog is reading"), "{err}");
    assert!(client_fails(&fake, "close", &[]).contains("no watchdog is reading"));

    // Foreign mode.
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = client_fails(&fake, "submit", &touch);
    assert!(err.contains("mode"), "{err}");

    // The Python client refuses the same directories, with the same reasons.
    let probe = format!(
        "import sys; sys.path.insert(0, {tools:?}); import rea_client as rc\n\
         for d in sys.argv[1:]:\n\
         \x20   try:\n\
         \x20       c = rc.Client(d); c.submit(['/usr/bin/touch', {marker:?}], 5)\n\
         \x20       print('ACCEPTED', d)\n\
         \x20   except rc.StaleStateDir as e:\n\
         \x20       print('stale:', e)\n",
        tools = format!("{}/tools", repo()),
        marker = s(&marker),
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o700)).unwrap();
    let child = Command::new(python())
        .args(["-c", &probe, s(&w.state_dir), s(&fake)])
        .arg(w.scratch.path("nowhere"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, PATIENCE);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text.matches("stale:").count(), 3, "{text}");
    assert!(!text.contains("ACCEPTED"), "{text}");

    assert!(!marker.exists(), "a refused client launched something");
    sibling.assert_alive();
}

/// The Python client's deletion rule (the README's first outcome): the watchdog's
/// waited exit 0 *and* delete_allowed, never one alone; and its stop
/// signal spellings (the CLI's, numbers, names) with KILL refused.
#[test]
fn python_client_deletes_only_on_exit_0_and_delete_allowed() {
    let probe = format!(
        "import signal, sys; sys.path.insert(0, {tools:?}); import rea_client as rc\n\
         def v(verdict, code):\n\
         \x20   x = rc.Verdict(verdict=verdict); x.exit_code = code; return x\n\
         def r(code):\n\
         \x20   return rc.Receipt('closed', None, True, 'h', 'log', exit_code=code)\n\
         print(rc.may_delete(r(0), v('delete_allowed', 0)),\n\
         \x20     rc.may_delete(r(1), v('delete_allowed', 0)),\n\
         \x20     rc.may_delete(r(None), v('delete_allowed', 0)),\n\
         \x20     rc.may_delete(r(0), v('retain', 1)),\n\
         \x20     rc.may_delete(None, v('delete_allowed', 0)),\n\
         \x20     rc.may_delete(r(0), None))\n\
         print(rc._stop_signal('usr1'), rc._stop_signal('SIGHUP'), rc._stop_signal(signal.SIGINT))\n\
         for bad in ('KILL', 9, 'STOP', ''):\n\
         \x20   try:\n\
         \x20       rc._stop_signal(bad); print('ACCEPTED', bad)\n\
         \x20   except ValueError:\n\
         \x20       print('refused')\n",
        tools = format!("{}/tools", repo()),
    );
    let out = Command::new(python())
        .args(["-c", &probe])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "True False False False False False", "{text}");
    assert_eq!(lines[1], "USR1 HUP INT", "{text}");
    assert_eq!(&lines[2..], ["refused"; 4], "{text}");
}

// ----- 4. idempotent cleanup; stale caller identities -----------------------

#[test]
fn cleanup_is_idempotent_one_receipt() {
    require_pid_ns!("cleanup_is_idempotent");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let tree = hopper_tree(&oracle, &["--shape", "escapee", "--shape", "termignore"]);
    let submit = w.submit_bg(&["--name", "install", "--deadline", "200s"], &strs(&tree));
    oracle.wait_ready(PATIENCE);
    for _ in 0..2 {
        let stop = w.stop();
        assert!(stop.status.success(), "{stop:?}");
        let v: Value = serde_json::from_slice(&stop.stdout).unwrap();
        assert_eq!(v["quiescent"], true);
        assert_eq!(v["reason"], "stop_requested");
    }
    assert!(oracle.wait_eof(PATIENCE));
    assert_eq!(output_within(submit, PATIENCE).status.code(), Some(124));
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    // A second close finds no watchdog: an error, and nothing is written.
    let before = std::fs::read(&w.audit_log).unwrap();
    let err = client_fails(&w.state_dir, "close", &[]);
    assert!(err.contains("stale"), "{err}");
    let err = client_fails(&w.state_dir, "stop", &[]);
    assert!(err.contains("stale"), "{err}");
    assert_eq!(std::fs::read(&w.audit_log).unwrap(), before);

    let records = w.log();
    assert_sealed_and_reaped(&records);
    let triggers = all!(records, Event::StopTriggered);
    assert_eq!(triggers.len(), 2, "{triggers:#?}");
    assert!(triggers[0].first);
    assert!(!triggers[1].first, "the second stop only adds a record");
    assert_eq!(all!(records, Event::StopCompleted).len(), 1);
    let (code, v) = w.verify(&[
        "--expect-head",
        &w.head().unwrap(),
        "--staging",
        s(&w.staging),
    ]);
    assert_eq!(code, 0, "{v:#}");
    sibling.assert_alive();
}

#[test]
fn stale_caller_identity_is_refused_even_after_pid_reuse() {
    require_pid_ns!("stale_caller_identity_is_refused");
    let mut w = Watchdog::start(&[]);
    let marker = w.scratch.path("launched");
    let touch = ["/usr/bin/touch", s(&marker)];
    let spawn = |id: &str, caller: Ident| {
        Req::spawn(id, id, &touch)
            .caller(caller)
            .set("deadline_ms", "10000")
            .set("capture", &js("discard"))
    };
    let ident = |st: &Stat| Ident {
        pid: st.pid,
        start_time: st.start_time,
        uid: uid(),
    };
    let refused = |req: &Req, reason: &str| {
        let replies = exchange(&w.state_dir, req);
        assert_eq!(
            replies.len(),
            1,
            "one refusal, then the channel closes: {replies:?}"
        );
        assert_eq!(replies[0]["type"], "refused", "{replies:?}");
        assert_eq!(replies[0]["reason"], reason, "{replies:?}");
    };

    // A caller that was a descendant of the root, and is gone.
    let dead = ident(&dead_process());
    refused(&spawn("dead-caller", dead), "caller_not_alive");

    // A pid reused by a new process: the old identity still names the dead
    // one, so it is refused and the new process is not touched.
    let r = force_pid_reuse();
    let stale = r.stale_ident();
    refused(&spawn("reused-spawn", stale), "caller_mismatch");
    refused(
        &Req::op("stop", "reused-stop", "reused-stop").caller(stale),
        "caller_mismatch",
    );
    assert!(
        !r.fd.has_exited(),
        "the process that reused the pid was hit"
    );
    drop(r);

    // A live process of ours claimed with a wrong start time.
    let me = Ident {
        pid: std::process::id() as i32,
        start_time: rea::process::identity::self_start_time().unwrap() + 1,
        uid: uid(),
    };
    refused(&spawn("wrong-start", me), "caller_mismatch");

    // Nothing was launched or stopped: the action still serves, then closes clean.
    assert!(!marker.exists());
    let out = w.submit(&["--name", "install"], &["/bin/true"]);
    assert!(out.status.success(), "the action still runs: {out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let records = w.log();
    let reasons: Vec<RefusalReason> = all!(records, Event::RequestRefused)
        .iter()
        .map(|d| d.reason)
        .collect();
    assert_eq!(
        reasons,
        [
            RefusalReason::CallerNotAlive,
            RefusalReason::CallerMismatch,
            RefusalReason::CallerMismatch,
            RefusalReason::CallerMismatch
        ],
        "the four refusals, in order"
    );
    assert_eq!(all!(records, Event::JobSpawned).len(), 1);
    assert!(all!(records, Event::StopTriggered).is_empty());
    let head = w.head().unwrap();
    let (code, v) = w.verify(&["--expect-head", &head, "--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["outcome"], "closed");
}

// ----- 5. discarded stderr stays out of every artifact -----------------------

/// Forms of the secret to look for: raw, and base64 at the three alignments
/// (inner part, without the ragged edges).
fn secret_forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut v = vec![secret.to_vec()];
    for pad in 0..3 {
        let mut d = vec![b'x'; pad];
        d.extend_from_slice(secret);
        let e = rea::b64::encode(&d);
        v.push(e.as_bytes()[4..e.len() - 8].to_vec());
    }
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every regular file under `dir` (not following symlinks), except `skip`.
fn files_under(dir: &Path, skip: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            files_under(&p, skip, out);
        } else if t.is_file() && p != skip {
            out.push(p);
        }
    }
}

#[test]
fn discarded_stderr_never_reaches_log_receipt_or_replies() {
    require_pid_ns!("discarded_stderr");
    let mut w = Watchdog::start(&[]);
    let secret = format!(
        "REA-SECRET-{:x}-{}",
        rea::clock::mono_ns(),
        std::process::id()
    );
    // The secret is in a file, not in argv (argv is recorded by design).
    let secret_file = w.scratch.path("secret.txt");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let launcher = fixture("launcher.py");
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();

    // A job that exits, and one stopped by its deadline mid-sleep, both in
    // discard mode (the default of submit).
    let argv = [
        python(),
        &launcher,
        "--print",
        "public line",
        "--stderr-file",
        s(&secret_file),
    ];
    let out = w.submit(&["--name", "install"], &argv);
    assert!(out.status.success(), "{out:?}");
    outputs.push(("submit 1 stdout".into(), out.stdout));
    outputs.push(("submit 1 stderr".into(), out.stderr));
    let mut argv2 = argv.to_vec();
    argv2.extend(["--sleep", "60"]);
    let mut w2 = Watchdog::start(&[]);
    let out = w2.submit(&["--name", "rehearsal", "--deadline", "2s"], &argv2);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    outputs.push(("submit 2 stdout".into(), out.stdout));
    outputs.push(("submit 2 stderr".into(), out.stderr));

    for (n, wd) in [&mut w, &mut w2].into_iter().enumerate() {
        let close = wd.close();
        assert!(close.status.success(), "{close:?}");
        outputs.push((format!("close {n} stdout"), close.stdout));
        assert!(wd.wait(PATIENCE).success());
        outputs.push((format!("run {n} ready line"), wd.ready.to_string().into()));
        outputs.push((
            format!("run {n} sealed line"),
            wd.sealed.as_ref().unwrap().to_string().into(),
        ));
        let (code, v) = wd.verify(&["--staging", s(&wd.staging)]);
        assert_eq!(code, 0, "{v:#}");
        outputs.push((format!("verify {n}"), v.to_string().into()));
        let show = Command::new(audit_bin())
            .arg("show")
            .arg(&wd.audit_log)
            .output()
            .unwrap();
        outputs.push((format!("show {n}"), show.stdout));
    }

    // The watchdog did read the stderr: counted and digested, not kept.
    let log = w.log();
    let exited = all!(log, Event::JobExited);
    let expect = format!("{secret}\n");
    assert_eq!(exited[0].stderr.bytes, expect.len() as u64);
    assert_eq!(
        exited[0].stderr.sha256,
        rea::log::chain::line_hash(expect.as_bytes())
    );
    let log2 = w2.log();
    let exited2 = all!(log2, Event::JobExited);
    assert_eq!(exited2[0].stderr.bytes, expect.len() as u64);

    // Every file either action produced: logs, state directories (ready.json,
    // what is left of replies/), staging. And every line printed.
    let mut files = Vec::new();
    for wd in [&w, &w2] {
        files_under(wd.scratch.dir.path(), &secret_file, &mut files);
    }
    assert!(files.iter().any(|f| f.ends_with("audit.jsonl")));
    assert!(files.iter().any(|f| f.ends_with("ready.json")));
    for form in secret_forms(secret.as_bytes()) {
        for f in &files {
            let data = std::fs::read(f).unwrap();
            assert!(
                !contains(&data, &form),
                "{} holds the discarded stderr ({})",
                f.display(),
                String::from_utf8_lossy(&form)
            );
        }
        for (what, data) in &outputs {
            assert!(
                !contains(data, &form),
                "{what} holds the discarded stderr: {}",
                String::from_utf8_lossy(data)
            );
        }
    }
    // Positive control: the search does find what is meant to be there.
    let log = std::fs::read(&w.audit_log).unwrap();
    assert!(contains(&log, b"public line"), "argv is recorded");
}

// ----- 7. a job through bubblewrap -------------------------------------------

/// The bubblewrap prefix, if bwrap exists and can run here.
fn bwrap() -> Option<Vec<String>> {
    let prefix = ["bwrap", "--dev-bind", "/", "/", "--die-with-parent", "--"];
    let path = rea::client::resolve_program("bwrap");
    let Some(path) = path else {
        eprintln!(
            "SKIPPED bubblewrap test: bwrap is not installed \
             (apt-get install bubblewrap; .ci/run installs it)"
        );
        return None;
    };
    let ok = Command::new(&path)
        .args(&prefix[1..])
        .arg("/bin/true")
        .stderr(Stdio::piped())
        .output()
        .map(|o| {
            if !o.status.success() {
                eprintln!(
                    "SKIPPED bubblewrap test: bwrap cannot run here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
            o.status.success()
        })
        .unwrap_or(false);
    ok.then(|| {
        let mut v = vec![path.to_string_lossy().into_owned()];
        v.extend(prefix[1..].iter().map(|s| s.to_string()));
        v
    })
}

fn bwrapped_tree(prefix: &[String], oracle: &Oracle) -> Vec<String> {
    let mut v = prefix.to_vec();
    v.extend(hopper_tree(
        oracle,
        &[
            "--shape",
            "escapee",
            "--shape",
            "doublefork",
            "--shape",
            "termignore",
            "--shape",
            "chain:5",
        ],
    ));
    v
}

#[test]
fn bwrap_job_stopped_cleanly_on_timeout() {
    require_pid_ns!("bwrap_job_stopped_on_timeout");
    let _ns = common::mounts::new_namespace(); // bwrap
    let Some(prefix) = bwrap() else { return };
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let argv = bwrapped_tree(&prefix, &oracle);
    let submit = w.submit_bg(&["--name", "rehearsal", "--deadline", "4s"], &strs(&argv));
    let (members, _) = oracle.wait_ready(PATIENCE);
    let held = Held::bind_all(&members);
    assert_same_argv(&members, &sibling);
    assert_eq!(output_within(submit, PATIENCE).status.code(), Some(124));
    assert!(oracle.wait_eof(PATIENCE), "a process inside bwrap survived");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let records = w.log();
    assert_sealed_and_reaped(&records);
    assert!(all!(records, Event::JobSpawned)[0].argv[0].ends_with("bwrap"));
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "deadline");
    sibling.assert_alive();
}

#[test]
fn bwrap_job_stopped_cleanly_on_controller_sigkill() {
    require_pid_ns!("bwrap_job_stopped_on_controller_sigkill");
    let _ns = common::mounts::new_namespace(); // bwrap
    let Some(prefix) = bwrap() else { return };
    let sibling = Sibling::start();
    let scratch = Scratch::new();
    let mut oracle = Oracle::new(&scratch, "oracle");
    let argv = bwrapped_tree(&prefix, &oracle);
    let mut ctl = Controller::start(&scratch, &argv, 200);
    let (members, _) = oracle.wait_ready(PATIENCE);
    let held = Held::bind_all(&members);
    ctl.kill();
    assert!(oracle.wait_eof(PATIENCE), "a process inside bwrap survived");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    ctl.wait_watchdog();
    ctl.assert_root_lost_evidence();
    sibling.assert_alive();
}

#[test]
fn rehearse_through_bwrap_timeout_and_controller_kill() {
    require_pid_ns!("rehearse_through_bwrap");
    let _ns = common::mounts::new_namespace(); // bwrap
    let Some(prefix) = bwrap() else { return };
    let wrap = prefix.join(" ");
    let mut r = rehearse("timeout", &["--wrap", &wrap]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "delete_allowed");
    assert_all_fixtures_gone(&mut r, 1, 2);
    let mut r = rehearse("controller-kill", &["--wrap", &wrap]);
    assert_eq!(r.code, Some(0), "{}", r.explain());
    assert_eq!(r.report["verdict"], "retain");
    assert_eq!(r.report["receipt"]["quiescent"], true);
    assert_all_fixtures_gone(&mut r, 1, 4);
}

// ----- 8. the README's commands in a fresh clone -----------------------------

/// `git clone` this repository and run the README's demo command there,
/// with no binaries built: `python3 tools/rehearse.py` must build them with
/// cargo from the clone's sources and pass the success scenario. The build
/// goes to a persistent target directory next to this build's (only the
/// first run compiles the dependencies; the crate itself is compiled every
/// time, from the clone), which is still too heavy to run beside the
/// process tests: run it on its own with
/// `tools/test -- --ignored fresh_clone`. `tools/test`
/// itself is not run from a test (it would run this suite recursively);
/// .ci/run runs it in a clean clone.
#[test]
#[ignore = "builds the crate in a fresh clone; run alone (see its doc comment)"]
fn fresh_clone_readme_demo_command_works() {
    require_pid_ns!("fresh_clone");
    // The release dir of this build is TARGET/release/rea-watchdog.
    let target = Path::new(watchdog_bin())
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("fresh-clone");
    let clone = target.join("clone");
    let _ = std::fs::remove_dir_all(&clone);
    std::fs::create_dir_all(&target).unwrap();
    for bin in ["rea-watchdog", "rea-audit"] {
        let _ = std::fs::remove_file(target.join("release").join(bin));
    }
    let out = Command::new("git")
        .args(["clone", "--quiet", "--no-hardlinks", repo()])
        .arg(&clone)
        .output()
        .expect("git");
    assert!(out.status.success(), "git clone: {out:?}");
    let started = std::time::SystemTime::now();
    let child = Command::new("python3")
        .arg("tools/rehearse.py")
        .current_dir(&clone)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("REA_WATCHDOG")
        .env_remove("REA_AUDIT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(3600));
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    assert!(
        text.contains("OK: success reached delete_allowed"),
        "{text}"
    );
    assert!(err.contains("building rea"), "it built the binaries: {err}");
    let built = std::fs::metadata(target.join("release/rea-watchdog"))
        .and_then(|m| m.modified())
        .unwrap();
    assert!(built >= started, "the binary was built by this run");
    let test = clone.join("tools/test");
    let mode = std::fs::metadata(&test).unwrap().permissions().mode();
    assert!(mode & 0o111 != 0, "tools/test is executable in a clone");
    let syntax = Command::new("bash").arg("-n").arg(&test).status().unwrap();
    assert!(syntax.success());
    let status = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&clone)
        .output()
        .unwrap();
    assert!(
        status.stdout.is_empty(),
        "the demo leaves the clone clean: {}",
        String::from_utf8_lossy(&status.stdout)
    );
    let _ = std::fs::remove_dir_all(&clone);
}
