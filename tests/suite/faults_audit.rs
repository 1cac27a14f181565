//! Issue 10, the reader's side: hostile or careless input to `rea-audit`
//! (arrays for objects, non-regular files, replay gaps, hangup, the staging
//! inventory, terminal escapes, sockets in the stage). Each case was seen
//! to fail on the code before the fix.
//!
//! Edits re-chain every later line (and renumber `seq`), the way a forger
//! who knows the chain rule would, so that only the check under test can
//! catch them: no pinned head is given.

use crate::common;

use std::fs;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::harness::output_within;
use common::logs::{
    build, rea_audit, rechain, replace_once, verify, with_seq, write_lines, BuiltLog, LogOpts,
};
use common::typed::{first, Log};
use rea::kinds::watchdog::{Event, StopReason};
use serde_json::Value;

type Lines = Vec<Vec<u8>>;

fn n(line: usize) -> Option<u64> {
    Some(line as u64)
}

/// Renumbers `seq` and re-chains every line from index `from` on; writes them.
fn forge(log: &BuiltLog, lines: &mut Lines, from: usize) {
    for (i, l) in lines.iter_mut().enumerate().skip(from) {
        *l = with_seq(l, i as u64);
    }
    rechain(lines, &log.run, from);
    write_lines(&log.path, lines);
}

fn mono_of(line: &[u8]) -> u64 {
    let v: Value = serde_json::from_slice(line).unwrap();
    v["mono_ns"].as_u64().unwrap()
}

/// The line with its `mono_ns` replaced.
fn with_mono(line: &[u8], mono: u64) -> Vec<u8> {
    let old = mono_of(line);
    replace_once(
        line,
        &format!("\"mono_ns\":{old},"),
        format!("\"mono_ns\":{mono},").as_bytes(),
    )
}

/// Runs a command with a wall-clock bound; a hang fails the test.
pub fn run_bounded(cmd: &mut Command, bound: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rea-audit");
    output_within(child, bound)
}

// ---------------------------------------------------------------------------
// 4. Arrays where the schema says object.

/// The receipt's `data` object as an array of its values, in field order.
fn receipt_data_as_array(line: &[u8]) -> Vec<u8> {
    let v: Value = serde_json::from_slice(line).unwrap();
    let d = &v["data"];
    let fields = [
        "outcome",
        "stop_reason",
        "quiescent",
        "no_live_or_waitable_descendants",
        "uncertain_mappings",
        "temp_root_removed",
        "root_alive",
        "counts",
        "staging",
    ];
    let arr: Vec<Value> = fields.iter().map(|f| d[*f].clone()).collect();
    let text = String::from_utf8(line.to_vec()).unwrap();
    let i = text.find(",\"data\":").unwrap() + 8;
    format!("{}{}}}", &text[..i], serde_json::to_string(&arr).unwrap()).into_bytes()
}

#[test]
fn a_receipt_whose_data_is_an_array_is_refused() {
    let log = build(&LogOpts::closed("arr-receipt"));
    let mut lines = log.lines();
    let k = lines.len();
    lines[k - 1] = receipt_data_as_array(&lines[k - 1]);
    write_lines(&log.path, &lines);
    let v = verify(&log.path, &[]);
    v.expect(
        "tampered",
        3,
        &[("malformed_json", n(k)), ("no_receipt", None)],
    );
}

#[test]
fn a_nested_object_written_as_an_array_is_refused() {
    let log = build(&LogOpts::closed("arr-counts"));
    let mut lines = log.lines();
    let k = lines.len();
    let v: Value = serde_json::from_slice(&lines[k - 1]).unwrap();
    let c = &v["data"]["counts"];
    let obj = format!(
        "{{\"requests\":{},\"refused\":{},\"jobs\":{},\"signals\":{},\"reaped\":{}}}",
        c["requests"], c["refused"], c["jobs"], c["signals"], c["reaped"]
    );
    let arr = format!(
        "[{},{},{},{},{}]",
        c["requests"], c["refused"], c["jobs"], c["signals"], c["reaped"]
    );
    lines[k - 1] = replace_once(&lines[k - 1], &obj, arr.as_bytes());
    write_lines(&log.path, &lines);
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("non_canonical", n(k))]);
}

#[test]
fn a_record_written_as_an_array_is_refused() {
    let log = build(&LogOpts::closed("arr-record"));
    let mut lines = log.lines();
    let k = log.line_of("request_received", 0);
    let v: Value = serde_json::from_slice(&lines[k - 1]).unwrap();
    let arr = Value::Array(
        ["v", "run", "seq", "ts", "mono_ns", "kind", "prev", "data"]
            .iter()
            .map(|f| v[*f].clone())
            .collect(),
    );
    lines[k - 1] = serde_json::to_vec(&arr).unwrap();
    // Re-chain the lines after it (the edited line keeps its prev).
    rechain(&mut lines, &log.run, k);
    write_lines(&log.path, &lines);
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("malformed_json", n(k))]);
}

// ---------------------------------------------------------------------------
// 5. Non-regular files: a usage error at once, never a read.

fn refuses_at_once(path: &Path, what: &str) {
    for sub in ["verify", "show"] {
        let out = run_bounded(rea_audit().arg(sub).arg(path), Duration::from_secs(5));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{sub} {what}: {stderr}");
        assert!(
            stderr.contains("not a regular file") && stderr.contains(what),
            "{sub} {what}: {stderr}"
        );
    }
    // --json still prints a verdict object naming the reason.
    let out = run_bounded(
        rea_audit().arg("verify").arg(path).arg("--json"),
        Duration::from_secs(5),
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("a verdict");
    assert_eq!(v["status"], "error");
    assert_eq!(v["reasons"][0]["code"], "not_a_regular_file");
}

#[test]
fn dev_zero_is_refused_at_once() {
    refuses_at_once(Path::new("/dev/zero"), "character device");
}

#[test]
fn a_fifo_is_refused_without_blocking_in_open() {
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("log.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    refuses_at_once(&fifo, "FIFO");
}

#[test]
fn a_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    refuses_at_once(t.path(), "directory");
}

// ---------------------------------------------------------------------------
// 6. Replay gaps: what a consistent writer always produces.

#[test]
fn a_stopped_receipt_without_its_stop_completed() {
    let log = build(&LogOpts::stopped("gap-completed", StopReason::Deadline));
    let mut lines = log.lines();
    let k = log.line_of("stop_completed", 0);
    lines.remove(k - 1);
    forge(&log, &mut lines, k - 1);
    verify(&log.path, &[]).expect("tampered", 3, &[("stop_not_completed", None)]);
}

#[test]
fn a_stop_trigger_inside_a_closed_log() {
    let stopped = build(&LogOpts::stopped("gap-closed", StopReason::Signal));
    let trigger = stopped.lines()[stopped.line_of("stop_triggered", 0) - 1].clone();
    let trigger = replace_once(&trigger, "\"first\":true", b"\"first\":false");
    let log = build(&LogOpts::closed("gap-closed"));
    let mut lines = log.lines();
    let k = log.line_of("job_exited", 0);
    let trigger = with_mono(&trigger, mono_of(&lines[k - 2]));
    lines.insert(k - 1, trigger);
    forge(&log, &mut lines, k - 1);
    verify(&log.path, &[]).expect("tampered", 3, &[("stop_in_closed_log", n(k))]);
}

#[test]
fn a_sweep_before_any_trigger() {
    let log = build(&LogOpts::stopped("gap-sweep", StopReason::Deadline));
    let mut lines = log.lines();
    let t = log.line_of("stop_triggered", 0);
    let s = log.line_of("signal_sweep", 0);
    let sweep = lines.remove(s - 1);
    let sweep = with_mono(&sweep, mono_of(&lines[t - 1]));
    lines.insert(t - 1, sweep);
    forge(&log, &mut lines, t - 1);
    verify(&log.path, &[]).expect("tampered", 3, &[("sweep_without_trigger", n(t))]);
}

fn one_line_edit(run: &str, kind: &str, from: &str, to: &str) -> (BuiltLog, usize) {
    let log = build(&LogOpts::closed(run));
    let mut lines = log.lines();
    let k = log.line_of(kind, 0);
    lines[k - 1] = replace_once(&lines[k - 1], from, to.as_bytes());
    forge(&log, &mut lines, k);
    (log, k)
}

#[test]
fn whitespace_inside_the_envelope() {
    let (log, k) = one_line_edit("gap-ws", "job_exited", "\"seq\":", "\"seq\": ");
    verify(&log.path, &[]).expect("tampered", 3, &[("non_canonical", n(k))]);
}

#[test]
fn an_escaped_key() {
    let (log, k) = one_line_edit("gap-esc", "job_exited", "\"kind\":", "\"\\u006bind\":");
    verify(&log.path, &[]).expect("tampered", 3, &[("non_canonical", n(k))]);
}

#[test]
fn an_escaped_key_inside_data() {
    let (log, k) = one_line_edit(
        "gap-esc2",
        "job_exited",
        "\"duration_ms\":",
        "\"duration\\u005fms\":",
    );
    verify(&log.path, &[]).expect("tampered", 3, &[("non_canonical", n(k))]);
}

fn other_uid(log: &BuiltLog) -> String {
    (log.watchdog.uid + 1).to_string()
}

#[test]
fn a_job_of_another_uid() {
    let base = build(&LogOpts::closed("gap-uid"));
    let uid = format!("\"uid\":{}", base.watchdog.uid);
    let to = format!("\"uid\":{}", other_uid(&base));
    drop(base);
    let (log, k) = one_line_edit("gap-uid", "job_spawned", &uid, &to);
    verify(&log.path, &[]).expect("tampered", 3, &[("foreign_uid", n(k))]);
}

#[test]
fn a_root_of_another_uid() {
    let base = build(&LogOpts::closed("gap-root-uid"));
    let uid = format!("\"uid\":{}", base.watchdog.uid);
    let to = format!("\"uid\":{}", other_uid(&base));
    drop(base);
    let (log, k) = one_line_edit("gap-root-uid", "root_bound", &uid, &to);
    verify(&log.path, &[]).expect("tampered", 3, &[("foreign_uid", n(k))]);
}

#[test]
fn a_job_leader_outside_its_own_session() {
    let log = build(&LogOpts::closed("gap-sid"));
    let mut lines = log.lines();
    let k = log.line_of("job_spawned", 0);
    let v: Value = serde_json::from_slice(&lines[k - 1]).unwrap();
    let sid = v["data"]["sid"].as_i64().unwrap();
    lines[k - 1] = replace_once(
        &lines[k - 1],
        &format!("\"sid\":{sid}"),
        format!("\"sid\":{}", sid + 1).as_bytes(),
    );
    forge(&log, &mut lines, k);
    verify(&log.path, &[]).expect("tampered", 3, &[("leader_not_session", n(k))]);
}

#[test]
fn a_decreasing_mono_ns() {
    let log = build(&LogOpts::closed("gap-mono"));
    let mut lines = log.lines();
    let k = log.line_of("job_exited", 0);
    let v: Value = serde_json::from_slice(&lines[k - 1]).unwrap();
    let mono = v["mono_ns"].as_u64().unwrap();
    lines[k - 1] = replace_once(
        &lines[k - 1],
        &format!("\"mono_ns\":{mono}"),
        b"\"mono_ns\":1",
    );
    forge(&log, &mut lines, k);
    verify(&log.path, &[]).expect("tampered", 3, &[("mono_regressed", n(k))]);
}

#[test]
fn a_digest_that_is_not_lowercase_hex() {
    let log = build(&LogOpts::closed("gap-hex"));
    let mut lines = log.lines();
    let k = log.line_of("job_exited", 0);
    let v: Value = serde_json::from_slice(&lines[k - 1]).unwrap();
    let sha = v["data"]["stdout"]["sha256"].as_str().unwrap().to_string();
    lines[k - 1] = replace_once(&lines[k - 1], &sha, sha.to_uppercase().as_bytes());
    forge(&log, &mut lines, k);
    verify(&log.path, &[]).expect("tampered", 3, &[("bad_digest", n(k))]);
    // Too short is just as bad.
    let mut lines = log.lines();
    let up = sha.to_uppercase();
    lines[k - 1] = replace_once(&lines[k - 1], &up, &sha.as_bytes()[..40]);
    forge(&log, &mut lines, k);
    verify(&log.path, &[]).expect("tampered", 3, &[("bad_digest", n(k))]);
}

// ---------------------------------------------------------------------------
// 7. A hangup retains, like root_lost.

fn stage(root: &Path) -> PathBuf {
    let d = root.join("stage");
    fs::create_dir_all(d.join("hopper/bin")).unwrap();
    fs::write(d.join("hopper/bin/Hopper"), b"#!/bin/sh\necho hopper\n").unwrap();
    fs::write(d.join("hopper/license.txt"), b"licensed to: me\n").unwrap();
    d
}

#[test]
fn stopped_for_hangup_retains_even_with_positive_receipt() {
    let t = tempfile::tempdir().unwrap();
    let st = stage(t.path());
    let log = build(&LogOpts {
        staging: Some(st.clone()),
        ..LogOpts::stopped("hup", StopReason::Hangup)
    });
    let v = verify(&log.path, &["--staging", st.to_str().unwrap()]);
    v.expect("retain", 1, &[("hangup", None)]);
}

// ---------------------------------------------------------------------------
// 8. The staging inventory covers contents, and is not optional.

#[test]
fn a_file_rewritten_in_place_with_its_mtime_restored_changes_the_digest() {
    let t = tempfile::tempdir().unwrap();
    let st = stage(t.path());
    let f = st.join("hopper/license.txt");
    let mtime = fs::metadata(&f).unwrap().modified().unwrap();
    let before = rea::inventory::inventory(&st).unwrap();
    fs::write(&f, b"licensed to: XY\n").unwrap();
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(fs::metadata(&f).unwrap().modified().unwrap(), mtime);
    let after = rea::inventory::inventory(&st).unwrap();
    assert_eq!((before.entries, before.bytes), (after.entries, after.bytes));
    assert_ne!(
        before.digest, after.digest,
        "contents must be in the digest"
    );
}

#[test]
fn a_stage_rewritten_in_place_after_the_receipt_retains() {
    let t = tempfile::tempdir().unwrap();
    let st = stage(t.path());
    let log = build(&LogOpts {
        staging: Some(st.clone()),
        ..LogOpts::closed("rewritten")
    });
    let f = st.join("hopper/bin/Hopper");
    let mtime = fs::metadata(&f).unwrap().modified().unwrap();
    fs::write(&f, b"#!/bin/sh\nrm -rf ~/xx\n").unwrap();
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let v = verify(&log.path, &["--staging", st.to_str().unwrap()]);
    v.expect("retain", 1, &[("staging_mismatch", None)]);
}

#[test]
fn a_closed_log_with_a_stage_needs_staging() {
    let t = tempfile::tempdir().unwrap();
    let st = stage(t.path());
    let log = build(&LogOpts {
        staging: Some(st.clone()),
        ..LogOpts::closed("closed-unchecked")
    });
    verify(&log.path, &[]).expect("retain", 1, &[("staging_not_checked", None)]);
    verify(&log.path, &["--staging", st.to_str().unwrap()]).expect("delete_allowed", 0, &[]);
}

// ---------------------------------------------------------------------------
// 9. `show` escapes controls for people.

#[test]
fn show_escapes_terminal_controls() {
    let log = build(&LogOpts::closed("escapes"));
    let mut lines = log.lines();
    let k = log.line_of("job_spawned", 0);
    // OSC title, clear screen, DEL, and C1 CSI (U+009B, raw in JSON).
    lines[k - 1] = replace_once(
        &lines[k - 1],
        "/opt/hopper/install.sh",
        "\\u001b]0;pwned\\u0007\\u001b[2J\\u007f\u{9b}31m".as_bytes(),
    );
    lines[k - 1] = replace_once(&lines[k - 1], "\"install\"", b"\"in\\u001bstall\"");
    write_lines(&log.path, &lines);
    let out = run_bounded(
        rea_audit().arg("show").arg(&log.path),
        Duration::from_secs(5),
    );
    // Edited, so tampered: show says so first and exits as verify does.
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(text.starts_with("log "), "{text}");
    assert!(text.contains("\nverdict   retain: tampered"), "{text}");
    for c in text.chars() {
        let control = (c < ' ' && c != '\n') || ('\u{7f}'..='\u{9f}').contains(&c);
        assert!(!control, "raw control {c:?} printed: {text:?}");
    }
    let timeline: Vec<&str> = text.lines().skip_while(|l| !l.is_empty()).skip(1).collect();
    let line = timeline[k - 1];
    assert!(
        line.contains("\\x1b]0;pwned\\x07\\x1b[2J\\x7f\\u{9b}31m"),
        "{line}"
    );
    assert!(line.contains("in\\x1bstall"), "{line}");
}

// ---------------------------------------------------------------------------
// 10. Sockets (and FIFOs) in the stage are named.

#[test]
fn sockets_and_fifos_in_the_stage_are_named() {
    let t = tempfile::tempdir().unwrap();
    let st = stage(t.path());
    // Bound, then closed: the socket file stays with no socket behind it.
    // A live listener would hold the stage (holders_sockets::).
    drop(UnixListener::bind(st.join("hopper/agent.sock")).unwrap());
    nix::unistd::mkfifo(
        &st.join("hopper/events"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let log = build(&LogOpts {
        staging: Some(st.clone()),
        ..LogOpts::closed("sockets")
    });
    let honest = Log::read(&log.path);
    let special = &first!(honest, Event::StagingInventoried).special;
    let named: Vec<(&str, &str)> = special
        .iter()
        .map(|e| (e.path.as_str(), e.kind.as_str()))
        .collect();
    assert_eq!(
        named,
        [("hopper/agent.sock", "socket"), ("hopper/events", "fifo")]
    );
    let v = verify(&log.path, &["--staging", st.to_str().unwrap()]);
    v.expect("delete_allowed", 0, &[]);
    let human = run_bounded(
        rea_audit()
            .arg("verify")
            .arg(&log.path)
            .arg("--staging")
            .arg(&st),
        Duration::from_secs(5),
    );
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("socket hopper/agent.sock"), "{text}");
    let shown = run_bounded(
        rea_audit().arg("show").arg(&log.path),
        Duration::from_secs(5),
    );
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("socket hopper/agent.sock"), "{text}");
    assert!(text.contains("fifo hopper/events"), "{text}");
}
