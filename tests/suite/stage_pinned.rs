//! The expected content (docs/stage.md, "The expected content"): the
//! controller computes pins and a content digest from its local files
//! before the upload (`rea-stage manifest`), `rea-stage begin` writes the
//! pins into the receipt, and a real watchdog refuses to start on a stage
//! that is not exactly that (`stage_not_as_uploaded`, recorded as the log's
//! last record, nothing launched); a stage that is exactly that runs, and
//! `verify --expect-stage-digest` holds the run to what was uploaded.
//!
//! Oracles: the sealed or refused log itself, the verdict, and the
//! watchdog's own exit and stdout (no ready line: nothing could be asked
//! for, nothing was spawned).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use common::harness::*;
use common::stage::stage_cmd;

fn sha(bytes: &[u8]) -> String {
    rea::vocab::hex(&Sha256::digest(bytes))
}

/// What the harness's watchdog writes as the runtime (`Watchdog::start_with`).
const RUNTIME: &[u8] = b"native runtime";
const LIBRARY: &[u8] = b"a library";

/// The local files of an upload: `runtime.bin` and `hopper.so`, in
/// `SCRATCH/local`.
fn local_files(scratch: &Scratch) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch.path("local");
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("runtime.bin"), dir.join("hopper.so"));
    std::fs::write(&a, RUNTIME).unwrap();
    std::fs::write(&b, LIBRARY).unwrap();
    (a, b)
}

/// `manifest` (the pins, one argument per line) and `manifest --digest`.
fn manifest(files: &[&Path]) -> (Vec<String>, String) {
    let mut args = vec!["manifest"];
    args.extend(files.iter().map(|p| s(p)));
    let (code, out, err) = stage_cmd(&args, None);
    assert_eq!(code, 0, "{err}");
    let pins = out.lines().map(str::to_string).collect();
    args.insert(1, "--digest");
    let (code, out, err) = stage_cmd(&args, None);
    assert_eq!(code, 0, "{err}");
    (pins, out.trim().to_string())
}

/// `begin STAGE` with `pins`, then the upload of `hopper.so` (the
/// harness's watchdog writes `runtime.bin` itself).
fn begin_and_upload(scratch: &Scratch, pins: &[String]) {
    let staging = scratch.path("staging");
    let mut args = vec!["begin", s(&staging)];
    args.extend(pins.iter().map(String::as_str));
    let (code, out, err) = stage_cmd(&args, None);
    assert_eq!(code, 0, "begin: {err}");
    assert!(rea::vocab::is_digest(out.trim()), "{out}");
    std::fs::write(staging.join("hopper.so"), LIBRARY).unwrap();
}

#[test]
fn manifest_prints_one_pin_per_file_and_the_content_digest() {
    let scratch = Scratch::new();
    let (a, b) = local_files(&scratch);
    let (pins, digest) = manifest(&[&a, &b]);
    assert_eq!(
        pins,
        vec![
            format!("--file=runtime.bin={}", sha(RUNTIME)),
            format!("--file=hopper.so={}", sha(LIBRARY)),
        ]
    );
    // One line per entry, `kind TAB name TAB sha256 NL`, in name order.
    let lines = format!(
        "file\thopper.so\t{}\nfile\truntime.bin\t{}\n",
        sha(LIBRARY),
        sha(RUNTIME)
    );
    assert_eq!(digest, sha(lines.as_bytes()));

    // What it refuses, printing nothing: a directory, a missing file, a
    // name begin would refuse, the same name twice.
    let reserved = scratch.path("local/.rea-before-transfer");
    std::fs::write(&reserved, b"x").unwrap();
    let other = scratch.path("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("runtime.bin"), b"y").unwrap();
    let dir = scratch.path("local");
    let missing = scratch.path("local/missing");
    let twice = other.join("runtime.bin");
    for (bad, why) in [
        (&dir, "not a regular file"),
        (&missing, "No such file"),
        (&reserved, "reserved"),
        (&twice, "declared twice"),
    ] {
        let (code, out, err) = stage_cmd(&["manifest", s(&a), s(bad)], None);
        assert_eq!((code, out.as_str()), (4, ""), "{bad:?}: {err}");
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

#[test]
fn begin_refuses_a_pin_that_is_not_a_sha256_and_creates_nothing() {
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    for bad in [
        "runtime.bin=".to_string(),
        "runtime.bin=xyz".to_string(),
        format!("runtime.bin={}", "a".repeat(63)),
        format!("runtime.bin={}g", "a".repeat(63)),
    ] {
        let (code, _, err) = stage_cmd(&["begin", s(&staging), "--file", &bad], None);
        assert_eq!(code, 4, "{bad}: {err}");
        assert!(err.contains("SHA-256"), "{bad}: {err}");
        assert!(!staging.exists(), "{bad}: nothing is created");
    }
}

#[test]
fn a_stage_as_pinned_runs_and_verify_holds_it_to_the_uploaded_digest() {
    require_pid_ns!("pinned stage");
    let scratch = Scratch::new();
    let (a, b) = local_files(&scratch);
    let (pins, digest) = manifest(&[&a, &b]);
    begin_and_upload(&scratch, &pins);
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {});
    let out = w.submit(
        &["--name", "install"],
        &[
            "/bin/sh",
            "-c",
            "cat \"$1/runtime.bin\" >/dev/null",
            "sh",
            s(&w.staging),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());

    let recs = w.records();
    let baseline = of_kind(&recs, "staging_baseline");
    assert_eq!(baseline.len(), 1, "{recs:#?}");
    assert_eq!(baseline[0]["data"]["pinned"], 2, "{:#}", baseline[0]);
    assert_eq!(baseline[0]["data"]["content"], digest.as_str());

    let (code, v) = w.verify(&["--staging", s(&w.staging), "--expect-stage-digest", &digest]);
    assert_eq!(
        (code, v["status"].as_str()),
        (0, Some("delete_allowed")),
        "{v:#}"
    );

    // Another upload's digest: kept, for that reason only.
    let other = sha(b"another upload");
    let (code, v) = w.verify(&["--staging", s(&w.staging), "--expect-stage-digest", &other]);
    assert_eq!((code, v["status"].as_str()), (1, Some("retain")), "{v:#}");
    assert_eq!(reason_codes(&v), vec!["stage_digest_mismatch"], "{v:#}");
    let detail = v["reasons"][0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&digest) && detail.contains(&other),
        "{detail}"
    );

    // Not a digest: a usage error, no verdict.
    let out = common::logs::rea_audit()
        .args(["verify", s(&w.audit_log), "--expect-stage-digest", "ABC"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--expect-stage-digest must be 64"), "{err}");
}

/// A watchdog over a stage that is not what the receipt pins: it exits
/// without a ready line (nothing could be asked for); the log ends in
/// `start_refused` naming `want`, with no baseline and no spawn, and
/// verify keeps the stage for that reason.
fn assert_refused(change: impl FnOnce(&Path), want: &str) {
    let scratch = Scratch::new();
    let (a, b) = local_files(&scratch);
    let (pins, _) = manifest(&[&a, &b]);
    begin_and_upload(&scratch, &pins);
    let staging = scratch.path("staging");
    std::fs::write(staging.join("runtime.bin"), RUNTIME).unwrap();
    change(&staging);
    let log = scratch.path("audit.jsonl");
    let child = run_command(
        Path::new(watchdog_bin()),
        &scratch.path("state"),
        &log,
        &staging,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn rea-watchdog");
    let out = output_within(child, PATIENCE);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(out.stdout.is_empty(), "no ready line: {out:?}");
    assert!(
        err.contains("stage_not_as_uploaded") && err.contains(want),
        "{err}"
    );

    let recs = records(&log);
    let last = recs.last().expect("the log was opened");
    assert_eq!(last["kind"], "start_refused", "{recs:#?}");
    assert_eq!(last["data"]["code"], "stage_not_as_uploaded");
    let detail = last["data"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(want), "{detail}");
    let kinds = kinds(&recs);
    for never in ["staging_baseline", "job_spawned", "receipt"] {
        assert!(!kinds.iter().any(|k| k == never), "{never}: {kinds:?}");
    }

    let (code, v) = verify_log(&log, &["--staging", s(&staging)]);
    assert_eq!((code, v["status"].as_str()), (1, Some("retain")), "{v:#}");
    assert_eq!(reason_codes(&v), vec!["stage_not_as_uploaded"], "{v:#}");
    assert_eq!(v["sealed"], false);
    let detail = v["reasons"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(want), "{detail}");

    // reconcile: nothing was launched, so nothing is lost or to recover;
    // a person reviews why the stage was refused.
    let (code, r, text) = common::recovery::reconcile(&log, &["--staging", s(&staging)]);
    assert_eq!((code, r["outcome"].as_str()), (6, Some("review")), "{r:#}");
    let codes: Vec<&str> = r["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["code"].as_str())
        .collect();
    assert_eq!(codes, ["start_refused"], "{r:#}");
    assert_eq!(r["log"]["start_refused"]["code"], "stage_not_as_uploaded");
    assert!(r["recover_command"].is_null(), "{r:#}");
    assert!(text.contains("nothing was launched"), "{text}");
}

#[test]
fn a_runtime_other_than_pinned_refuses_the_start_nothing_launched() {
    require_pid_ns!("pinned stage");
    assert_refused(
        |st| std::fs::write(st.join("runtime.bin"), b"tampered runtime").unwrap(),
        &format!(
            "runtime.bin has SHA-256 {}, pinned {}",
            sha(b"tampered runtime"),
            sha(RUNTIME)
        ),
    );
}

#[test]
fn an_undeclared_file_or_fifo_refuses_the_start() {
    require_pid_ns!("pinned stage");
    assert_refused(
        |st| std::fs::write(st.join("unexpected.txt"), b"x").unwrap(),
        "unexpected.txt (file) is not declared",
    );
    assert_refused(
        |st| nix::unistd::mkfifo(&st.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap(),
        "pipe (fifo) is not declared",
    );
}

#[test]
fn a_pinned_file_missing_or_replaced_by_a_symlink_refuses_the_start() {
    require_pid_ns!("pinned stage");
    assert_refused(
        |st| std::fs::remove_file(st.join("hopper.so")).unwrap(),
        "hopper.so is missing",
    );
    assert_refused(
        |st| {
            std::fs::remove_file(st.join("hopper.so")).unwrap();
            std::os::unix::fs::symlink("/etc/hostname", st.join("hopper.so")).unwrap();
        },
        "hopper.so is a symlink, not a regular file",
    );
}

/// The log is the proof of the refusal: a receipt appended after
/// `start_refused` (a forged "clean" ending) is tampering.
#[test]
fn a_receipt_after_start_refused_is_tampering() {
    require_pid_ns!("pinned stage");
    let scratch = Scratch::new();
    let (a, b) = local_files(&scratch);
    let (pins, _) = manifest(&[&a, &b]);
    begin_and_upload(&scratch, &pins);
    let staging = scratch.path("staging");
    std::fs::write(staging.join("runtime.bin"), b"tampered").unwrap();
    let log = scratch.path("audit.jsonl");
    let status = Command::new(watchdog_bin())
        .args(["run", "--state-dir", s(&scratch.path("state"))])
        .args(["--audit-log", s(&log), "--staging", s(&staging)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(125));
    let recs = records(&log);
    let run = recs[0]["run"].as_str().expect("run").to_string();
    // A positive receipt from a clean log the library writes, chained on
    // by a forger who knows the chain rule.
    let clean = common::logs::build(&common::logs::LogOpts::closed("run-clean.1"));
    let at = clean.line_of("receipt", 0) - 1;
    let receipt = common::logs::replace_once(
        &clean.lines()[at],
        "\"run\":\"run-clean.1\"",
        format!("\"run\":\"{run}\"").as_bytes(),
    );
    let mut lines = common::logs::read_lines(&log);
    lines.push(common::logs::with_seq(&receipt, lines.len() as u64));
    let n = lines.len();
    common::logs::rechain(&mut lines, &run, n - 1);
    common::logs::write_lines(&log, &lines);
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 3, "{v:#}");
    assert!(
        reason_codes(&v).iter().any(|c| c == "replay_mismatch"),
        "{v:#}"
    );
}
