//! One test per row of the verdict table (docs/verdict.md): a log built with the
//! library writer for that row, `rea-audit verify --json`, and the exact
//! status, exit code and reasons.

use crate::common;

use std::fs;
use std::path::Path;

use common::harness::s;
use common::logs::{build, read_lines, replace_once, verify, write_lines, LogOpts};
use common::typed::{first, Log};
use rea::kinds::watchdog::{Event, Receipt, StopReason};

/// A staging directory as the controller would have it: an unpacked runtime.
fn staging_dir(root: &Path) -> std::path::PathBuf {
    let d = root.join("stage");
    fs::create_dir_all(d.join("hopper/bin")).unwrap();
    fs::write(d.join("hopper/bin/Hopper"), b"\x7fELF not really").unwrap();
    fs::write(d.join("hopper/README"), b"Hopper Disassembler\n").unwrap();
    d
}

// ---------------------------------------------------------------------------
// Row 1: closed, positive receipt -> delete_allowed.

#[test]
fn closed_with_positive_receipt_allows_deletion() {
    let log = build(&LogOpts::closed("closed-1"));
    let v = verify(&log.path, &[]);
    v.expect("delete_allowed", 0, &[]);
    assert_eq!(v.json["sealed"], true);
    assert_eq!(v.json["outcome"], "closed");
    assert_eq!(v.json["run"], "closed-1");
    assert_eq!(v.head(), Some(log.head.as_str()));
    assert_eq!(v.json["records"].as_u64(), Some(log.kinds.len() as u64));
    // Pinning the head the watchdog printed changes nothing.
    verify(
        &log.path,
        &["--expect-head", &log.head, "--expect-run", "closed-1"],
    )
    .expect("delete_allowed", 0, &[]);
}

#[test]
fn closed_with_staging_allows_deletion_of_that_stage() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::closed("closed-staged")
    });
    let v = verify(&log.path, &["--staging", s(&stage)]);
    v.expect("delete_allowed", 0, &[]);
    assert_eq!(
        v.json["staging"]["identity"]["path"],
        stage.display().to_string()
    );
    // A recorded stage must be checked, closed or stopped alike.
    verify(&log.path, &[]).expect("retain", 1, &[("staging_not_checked", None)]);
}

// ---------------------------------------------------------------------------
// Row 2: stopped for a reason that leaves the stage safe once the proof
// holds -> delete_allowed, but only for the exact stage.

fn stopped_allows_exact_stage_only(reason: StopReason) {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let run = format!("stopped-{}", reason.as_str().replace('_', "-"));
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::stopped(&run, reason)
    });
    assert!(log.receipt.as_ref().unwrap().is_positive());
    let v = verify(&log.path, &["--staging", s(&stage)]);
    v.expect("delete_allowed", 0, &[]);
    assert_eq!(v.json["outcome"], "stopped");
    assert_eq!(v.json["stop_reason"], reason.as_str());
    // Without --staging the verifier cannot say which stage is safe.
    verify(&log.path, &[]).expect("retain", 1, &[("staging_not_checked", None)]);
}

#[test]
fn stopped_for_deadline_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::Deadline);
}

#[test]
fn stopped_for_excess_output_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::ExcessOutput);
}

#[test]
fn stopped_for_abandoned_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::Abandoned);
}

#[test]
fn stopped_for_caller_lost_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::CallerLost);
}

#[test]
fn stopped_for_signal_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::Signal);
}

#[test]
fn stopped_for_stop_requested_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::StopRequested);
}

#[test]
fn stopped_for_close_while_running_allows_exact_stage() {
    stopped_allows_exact_stage_only(StopReason::CloseWhileRunning);
}

#[test]
fn stopped_without_recorded_staging_is_refused_a_staging_check() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts::stopped("no-stage", StopReason::Deadline));
    // No staging recorded and none asked about: allowed (nothing to keep).
    verify(&log.path, &[]).expect("delete_allowed", 0, &[]);
    // Asked about a stage this run never recorded: not this run's to allow.
    verify(&log.path, &["--staging", s(&stage)]).expect(
        "retain",
        1,
        &[("staging_not_recorded", None)],
    );
}

// ---------------------------------------------------------------------------
// Row 3: root_lost -> retain, even with a positive receipt.

#[test]
fn root_lost_retains_even_with_positive_receipt() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::stopped("root-lost", StopReason::RootLost)
    });
    let rc = log.receipt.as_ref().unwrap();
    assert!(rc.is_positive() && !rc.root_alive);
    verify(&log.path, &["--staging", s(&stage)]).expect("retain", 1, &[("root_lost", None)]);
    verify(&log.path, &[]).expect(
        "retain",
        1,
        &[("root_lost", None), ("staging_not_checked", None)],
    );
}

// ---------------------------------------------------------------------------
// Row 4: negative receipt, uncertain mapping, audit_failure -> retain.

#[test]
fn negative_receipt_not_quiescent_retains() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        proof: false,
        ..LogOpts::stopped("kill-bound", StopReason::Deadline)
    });
    assert!(!log.receipt.as_ref().unwrap().is_positive());
    verify(&log.path, &["--staging", s(&stage)]).expect("retain", 1, &[("not_quiescent", None)]);
}

#[test]
fn negative_receipt_temp_root_kept_retains() {
    let log = build(&LogOpts {
        temp_removed: false,
        ..LogOpts::closed("temp-kept")
    });
    verify(&log.path, &[]).expect("retain", 1, &[("temp_root_not_removed", None)]);
}

#[test]
fn uncertain_mapping_retains() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        uncertain: 1,
        ..LogOpts::stopped("unprovable", StopReason::MappingRefused)
    });
    assert_eq!(log.receipt.as_ref().unwrap().uncertain_mappings, 1);
    verify(&log.path, &["--staging", s(&stage)]).expect(
        "retain",
        1,
        &[("uncertain_mappings", None)],
    );
}

#[test]
fn uncertain_mapping_at_close_retains() {
    let log = build(&LogOpts {
        uncertain: 2,
        ..LogOpts::closed("close-unprovable")
    });
    verify(&log.path, &[]).expect("retain", 1, &[("uncertain_mappings", None)]);
}

#[test]
fn stopped_for_mapping_refused_retains_even_if_nothing_was_counted() {
    // mapping_refused is not among the stop reasons the table lets through.
    // A log whose stop says so but which counts no uncertain mapping (a
    // watchdog bug, or records removed) must still not allow deletion.
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        uncertain: 0,
        ..LogOpts::stopped("refused-uncounted", StopReason::MappingRefused)
    });
    assert!(log.receipt.as_ref().unwrap().is_positive());
    verify(&log.path, &["--staging", s(&stage)]).expect(
        "retain",
        1,
        &[("uncertain_mappings", None)],
    );
}

#[test]
fn receipt_hiding_an_uncertain_mapping_is_tampered() {
    let log = build(&LogOpts {
        uncertain: 1,
        tweak_receipt: Some(|r| r.uncertain_mappings = 0),
        ..LogOpts::stopped("hidden-uncertain", StopReason::Deadline)
    });
    verify(&log.path, &[]).expect("tampered", 3, &[("replay_mismatch", None)]);
}

#[test]
fn audit_failure_retains_even_with_positive_receipt() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::stopped("audit-failed", StopReason::AuditFailure)
    });
    assert!(log.receipt.as_ref().unwrap().is_positive());
    verify(&log.path, &["--staging", s(&stage)]).expect("retain", 1, &[("audit_failure", None)]);
}

// ---------------------------------------------------------------------------
// Row 5: no receipt, torn last line -> incomplete.

#[test]
fn watchdog_lost_no_receipt_is_incomplete() {
    let log = build(&LogOpts {
        seal: false,
        ..LogOpts::closed("lost")
    });
    assert_eq!(*log.kinds.last().unwrap(), "request_refused");
    let v = verify(&log.path, &[]);
    v.expect("incomplete", 2, &[("no_receipt", None)]);
    assert_eq!(v.json["sealed"], false);
    // Its head is still the head of what was written.
    assert_eq!(v.head(), Some(log.head.as_str()));
}

#[test]
fn torn_last_line_is_incomplete() {
    let log = build(&LogOpts::closed("torn"));
    let data = fs::read(&log.path).unwrap();
    let n = log.kinds.len() as u64;
    // The receipt's write stopped half way (power loss): no newline.
    let last_start = data[..data.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let cut = last_start + (data.len() - last_start) / 2;
    fs::write(&log.path, &data[..cut]).unwrap();
    let v = verify(&log.path, &[]);
    v.expect(
        "incomplete",
        2,
        &[("torn_line", Some(n)), ("no_receipt", None)],
    );
    assert_eq!(v.json["records"].as_u64(), Some(n - 1));
}

// ---------------------------------------------------------------------------
// Row 6: tampered -> 3.

#[test]
fn tampered_log_is_tampered_even_with_positive_receipt() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::stopped("edited", StopReason::Deadline)
    });
    let mut lines = read_lines(&log.path);
    let k = log.line_of("job_spawned", 0);
    lines[k - 1] = replace_once(
        &lines[k - 1],
        "/opt/hopper/install.sh",
        b"/opt/hopper/instal.sh",
    );
    write_lines(&log.path, &lines);
    verify(&log.path, &["--staging", s(&stage)]).expect(
        "tampered",
        3,
        &[("prev_mismatch", Some(k as u64 + 1))],
    );
}

// ---------------------------------------------------------------------------
// Row 7: --staging that is not the stage the receipt names -> retain.

#[test]
fn staging_of_another_directory_retains() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let other = t.path().join("other");
    fs::create_dir(&other).unwrap();
    // Same content, different directory: identity decides, not content.
    let twin = staging_dir(&other);
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::stopped("other-dir", StopReason::StopRequested)
    });
    verify(&log.path, &["--staging", s(&twin)]).expect("retain", 1, &[("staging_mismatch", None)]);
    // A path that does not exist cannot be the stage either.
    verify(&log.path, &["--staging", s(&t.path().join("gone"))]).expect(
        "retain",
        1,
        &[("staging_mismatch", None)],
    );
}

#[test]
fn staging_changed_after_the_receipt_retains() {
    let t = tempfile::tempdir().unwrap();
    let stage = staging_dir(t.path());
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::closed("changed")
    });
    verify(&log.path, &["--staging", s(&stage)]).expect("delete_allowed", 0, &[]);
    // Something wrote into the stage after the watchdog sealed the log.
    fs::write(stage.join("hopper/bin/dropped"), b"late").unwrap();
    verify(&log.path, &["--staging", s(&stage)]).expect("retain", 1, &[("staging_mismatch", None)]);
}

// ---------------------------------------------------------------------------
// The receipt must agree with a replay of the records.

/// A receipt changed before sealing (so the chain holds) and verified;
/// `also` are the verdict-table reasons the forged receipt itself earns.
fn replay_mismatch_with(run: &str, tweak: fn(&mut Receipt), also: &[(&str, Option<u64>)]) {
    let log = build(&LogOpts {
        tweak_receipt: Some(tweak),
        ..LogOpts::stopped(run, StopReason::Deadline)
    });
    let mut want = vec![("replay_mismatch", None)];
    want.extend_from_slice(also);
    verify(&log.path, &[]).expect("tampered", 3, &want);
}

fn replay_mismatch(run: &str, tweak: fn(&mut Receipt)) {
    replay_mismatch_with(run, tweak, &[]);
}

#[test]
fn receipt_counts_disagreeing_with_records_is_tampered() {
    replay_mismatch("more-signals", |r| r.counts.signals += 1);
    replay_mismatch("fewer-jobs", |r| r.counts.jobs -= 1);
    replay_mismatch("more-reaped", |r| r.counts.reaped += 1);
    replay_mismatch("fewer-requests", |r| r.counts.requests -= 1);
    replay_mismatch("no-refusals", |r| r.counts.refused = 0);
    replay_mismatch_with(
        "invented-uncertain",
        |r| r.uncertain_mappings += 1,
        &[("uncertain_mappings", None)],
    );
}

#[test]
fn receipt_with_another_stop_reason_is_tampered() {
    replay_mismatch("reason-swapped", |r| {
        r.stop_reason = Some(StopReason::StopRequested)
    });
    // A closed receipt over a stop: the stop records contradict it.
    let log = build(&LogOpts {
        tweak_receipt: Some(|r| {
            r.outcome = rea::kinds::watchdog::Outcome::Closed;
            r.stop_reason = None;
        }),
        ..LogOpts::stopped("claims-closed", StopReason::Deadline)
    });
    let trigger = log.line_of("stop_triggered", 0) as u64;
    verify(&log.path, &[]).expect(
        "tampered",
        3,
        &[
            ("stop_in_closed_log", Some(trigger)),
            ("replay_mismatch", None),
        ],
    );
}

// ---------------------------------------------------------------------------
// rea-audit show: a timeline, one line per record, in order.

#[test]
fn show_prints_one_line_per_record_in_order() {
    let log = build(&LogOpts::stopped("shown", StopReason::Abandoned));
    let out = common::logs::rea_audit()
        .arg("show")
        .arg(&log.path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Verification first: the header, a blank line, then the timeline.
    let (head, timeline) = text.split_once("\n\n").unwrap();
    let verdict = common::logs::rea_audit()
        .args(["verify", "--json"])
        .arg(&log.path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&verdict.stdout).unwrap();
    let head_lines: Vec<&str> = head.lines().collect();
    assert_eq!(head_lines[0], format!("log       {}", log.path.display()));
    assert_eq!(
        head_lines[1],
        "verdict   delete_allowed (verify's exit status 0)"
    );
    assert!(
        head_lines[2].starts_with(&format!(
            "run       {}, started 20",
            v["run"].as_str().unwrap()
        )),
        "{head}"
    );
    assert_eq!(
        head_lines[3],
        format!("head      {} (sealed)", v["head"].as_str().unwrap())
    );
    let lines: Vec<&str> = timeline.lines().collect();
    assert_eq!(lines.len(), log.kinds.len(), "{text}");
    for (i, (line, kind)) in lines.iter().zip(&log.kinds).enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], i.to_string(), "seq first: {line}");
        assert_eq!(cols[2], *kind, "kind third: {line}");
    }
    let find = |kind: &str| lines[log.line_of(kind, 0) - 1];
    assert!(find("stop_triggered").contains("abandoned"), "{text}");
    assert!(
        find("job_spawned").contains("/opt/hopper/install.sh"),
        "{text}"
    );
    assert!(find("receipt").contains("stopped (abandoned)"), "{text}");
    // Plain words, never Rust debug names.
    for debug in [
        "Run mode",
        "via Parent",
        "Stopped",
        " Term",
        " Kill:",
        "Some(",
    ] {
        assert!(!timeline.contains(debug), "{debug:?} in {timeline}");
    }
    // A torn tail is shown as such, not hidden.
    let mut data = fs::read(&log.path).unwrap();
    data.extend_from_slice(b"{\"v\":1,\"ru");
    fs::write(&log.path, data).unwrap();
    let out = common::logs::rea_audit()
        .arg("show")
        .arg(&log.path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .last()
            .unwrap()
            .contains("torn last line: 10 bytes"),
        "{text}"
    );
}

/// A TERM sweep's `cont` (issue 12: SIGCONT only to targets seen stopped)
/// is checked against the sweep: a pid that is not one of its targets, or
/// a `cont` on a KILL sweep, is a replay mismatch; a target's pid, with
/// the receipt counting that SIGCONT, verifies as before.
#[test]
fn a_sigcont_outside_a_term_sweeps_targets_is_tampered() {
    let run = "cont-check";
    let log = build(&LogOpts::stopped(run, StopReason::Deadline));
    let at = log.line_of("signal_sweep", 0) - 1;
    // The honest log, typed: the sweep's first target, its `others` as
    // the writer spells them (Log::read holds each line to that encoding),
    // and the receipt's count of signals.
    let honest = Log::read(&log.path);
    let sweep = first!(honest, Event::SignalSweep);
    let target = i64::from(sweep.targets[0].pid);
    let receipt_at = log.line_of("receipt", 0) - 1;
    let signals = honest.receipt().counts.signals;
    let with_cont = |pid: i64, stage: Option<&str>| {
        let mut lines = read_lines(&log.path);
        // After `others`, as the writer orders the fields.
        let others = format!(
            "\"others\":{}",
            serde_json::to_string(&sweep.others).unwrap()
        );
        let with = format!("{others},\"cont\":[{pid}]");
        let mut l = replace_once(&lines[at], &others, with.as_bytes());
        if let Some(s) = stage {
            l = replace_once(&l, "\"stage\":\"term\"", s.as_bytes());
        }
        lines[at] = l;
        let counted = format!("\"signals\":{}", signals + 1);
        lines[receipt_at] = replace_once(
            &lines[receipt_at],
            &format!("\"signals\":{signals}"),
            counted.as_bytes(),
        );
        common::logs::rechain(&mut lines, run, at);
        write_lines(&log.path, &lines);
    };
    let original = read_lines(&log.path);
    with_cont(target, None);
    let v = verify(&log.path, &[]);
    v.expect("delete_allowed", 0, &[]);
    write_lines(&log.path, &original);
    with_cont(999_999, None);
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("replay_mismatch", None)]);
    assert!(
        v.json.to_string().contains("sends SIGCONT to pid 999999"),
        "{}",
        v.json
    );
    write_lines(&log.path, &original);
    with_cont(target, Some("\"stage\":\"kill\""));
    verify(&log.path, &[]).expect("tampered", 3, &[("replay_mismatch", None)]);
}
