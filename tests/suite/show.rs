//! `rea-audit show` (docs/review.md, issue 13): verification first, plain words,
//! launchers named by who asked, control characters escaped, `--json`.
//! The golden log is a real exec run (a deadline stop with a nested
//! launcher and a staging directory), committed with the exact output.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::harness::audit_bin;
use common::schema::{schema_errors, show_validator, verdict_validator};
use serde_json::Value;

const GOLDEN_LOG: &str = "tests/data/show-golden.jsonl";
const GOLDEN_TEXT: &str = "tests/data/show-golden.txt";

fn show(args: &[&str], log: &Path) -> Output {
    Command::new(audit_bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("show")
        .args(args)
        .arg(log)
        .output()
        .unwrap()
}

fn manifest(p: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// The whole text, byte for byte: the header (log, verdict with verify's
/// exit status, run and start, head, reasons), a blank line, the timeline.
#[test]
fn the_golden_log_shows_exactly_as_committed() {
    let out = show(&[], Path::new(GOLDEN_LOG));
    assert_eq!(out.status.code(), Some(1), "verify says retain: {out:?}");
    let want = std::fs::read_to_string(manifest(GOLDEN_TEXT)).unwrap();
    let got = String::from_utf8(out.stdout).unwrap();
    if got != want {
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "line {}", i + 1);
        }
        assert_eq!(got.lines().count(), want.lines().count(), "{got}");
    }
    assert!(got.contains("(asked by pid 4 (a descendant))"), "{got}");
    assert!(got.contains("sweep 1 ASK: SIGTERM+SIGCONT"), "{got}");
    assert!(got.contains("stopped (deadline) quiescent true"), "{got}");
}

#[test]
fn json_is_the_verdict_and_every_line() {
    let out = show(&["--json"], Path::new(GOLDEN_LOG));
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema_errors(show_validator(), &v), Vec::<String>::new());
    assert_eq!(
        schema_errors(verdict_validator(), &v["verdict"]),
        Vec::<String>::new()
    );
    assert_eq!(v["verdict"]["verdict"], "retain");
    assert_eq!(v["started"], "2026-12-02T07:47:44.777145Z");
    let lines = v["lines"].as_array().unwrap();
    let log = std::fs::read_to_string(manifest(GOLDEN_LOG)).unwrap();
    assert_eq!(lines.len(), log.lines().count());
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["line"], i as u64 + 1);
        assert_eq!(l["seq"], i as u64);
    }
    assert_eq!(lines[5]["kind"], "job_spawned");
    assert!(lines[5]["text"]
        .as_str()
        .unwrap()
        .ends_with("(asked by pid 4 (a descendant))"));
}

/// An edited copy: said to be tampered on the second line, exit 3, and
/// still shown.
#[test]
fn a_tampered_log_says_so_first() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("edited.jsonl");
    let text = std::fs::read_to_string(manifest(GOLDEN_LOG)).unwrap();
    std::fs::write(&copy, text.replace("launcher-1", "launcher-9")).unwrap();
    let out = show(&[], &copy);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let got = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines[1],
        "verdict   retain: tampered (verify's exit status 3)"
    );
    assert!(lines[4].starts_with("reason    "), "{got}");
    assert!(got.contains("launcher-9"), "still shown: {got}");
}

/// Control characters never reach the terminal, in the header either (a
/// log path people did not choose).
#[test]
fn control_characters_in_the_header_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("evil\u{1b}[2J\u{7}.jsonl");
    std::fs::copy(manifest(GOLDEN_LOG), &copy).unwrap();
    let out = show(&[], &copy);
    let got = String::from_utf8(out.stdout).unwrap();
    for c in got.chars() {
        assert!(c == '\n' || !c.is_control(), "raw {c:?} in {got:?}");
    }
    assert!(
        got.lines()
            .next()
            .unwrap()
            .ends_with("evil\\x1b[2J\\x07.jsonl"),
        "{got}"
    );
}

/// A nested launcher is named by the job that asked for it, the first
/// phase by the controller (the root).
#[test]
fn launchers_are_named_by_the_job_that_asked() {
    use common::logs::{build, LogOpts};
    let log = build(&LogOpts {
        jobs: 3,
        ..LogOpts::closed("asked-by")
    });
    let out = show(&[], &log.path);
    let got = String::from_utf8(out.stdout).unwrap();
    let spawned: Vec<&str> = got
        .lines()
        .filter(|l| l.contains(" job_spawned "))
        .collect();
    assert_eq!(spawned.len(), 3, "{got}");
    assert!(spawned[0].ends_with("(asked by the controller)"), "{got}");
    for l in &spawned[1..] {
        assert!(l.ends_with("(asked by job 1 (install))"), "{l}");
    }
}

/// A launcher asked for from deep inside a job (a grandchild of its
/// leader, and an orphan of its session the watchdog adopted) is recorded
/// with that job (`caller_job`) and shown under it, not as "a pid".
#[test]
fn a_launcher_asked_from_deep_in_a_job_is_named_by_that_job() {
    use common::harness::{output_within, verify_log, watchdog_bin, PATIENCE};
    use common::typed::{all, Log};
    use rea::kinds::watchdog::Event;
    require_pid_ns!("launchers asked from deep in a job");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    // The leader runs a submit as its grandchild (through a shell), then
    // double-forks an orphan that waits until the watchdog adopted it and
    // submits too; the leader exits once the orphan is done (pipe EOF).
    let script = r#"
import os, subprocess, sys, time
wd = sys.argv[1]
subprocess.run(["/bin/sh", "-c", wd + " submit --name grandchild -- /bin/true"], check=True)
r, w = os.pipe()
if os.fork() == 0:
    middle = os.getpid()
    if os.fork() == 0:
        os.close(r)
        while os.getppid() == middle:
            time.sleep(0.001)
        subprocess.run([wd, "submit", "--name", "orphan", "--", "/bin/true"], check=True)
        os._exit(0)
    os._exit(0)
os.close(w)
os.wait()
os.read(r, 1)
"#;
    let child = Command::new(watchdog_bin())
        .args(["exec", "--audit-log"])
        .arg(&log)
        .args([
            "--",
            common::harness::python(),
            "-c",
            script,
            watchdog_bin(),
        ])
        .env("TMPDIR", dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let recs = Log::read(&log);
    let spawned = all!(recs, Event::JobSpawned);
    assert_eq!(spawned.len(), 3, "{recs:?}");
    // (No caller_job key at all: Log::read holds the line to the writer's
    // encoding, which leaves the key out when it is None.)
    assert!(spawned[0].caller_job.is_none(), "exec's own job");
    for d in &spawned[1..] {
        assert_eq!(d.caller_job, Some(1), "{d:?}");
        assert_ne!(
            d.caller.map(|c| c.pid),
            Some(spawned[0].pid),
            "not the leader: {d:?}"
        );
    }
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 0, "{v:#}");
    let got = String::from_utf8(show(&[], &log).stdout).unwrap();
    let named: Vec<&str> = got
        .lines()
        .filter(|l| l.contains(" job_spawned ") && l.contains("(asked by job 1 (exec))"))
        .collect();
    assert_eq!(named.len(), 2, "{got}");
}
