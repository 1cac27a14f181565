//! Issue 3, client commands (docs/cli.md) and durations on the command line.
//!
//! A missing, stale or foreign state directory makes `submit`, `stop` and
//! `close` fail with a clear message and exit 125, fast (never a hang), and
//! launch nothing. Durations are parsed like timeout(1); a bad one is a
//! usage error (125) that reaches no watchdog.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::typed::all;
use rea::kinds::watchdog::Event;
use serde_json::Value;

const TOUCH: &str = "/usr/bin/touch";
/// "Well under a second", with room for a loaded machine.
const FAST: Duration = Duration::from_secs(5);

fn run_client(state_dir: &Path, sub: &str, args: &[&str], argv: &[&str]) -> (Output, Duration) {
    let mut c = Command::new(watchdog_bin());
    c.arg(sub).arg("--state-dir").arg(state_dir).args(args);
    if !argv.is_empty() {
        c.arg("--").args(argv);
    }
    let t = Instant::now();
    let child = c
        .env_remove("REA_STATE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, PATIENCE);
    (out, t.elapsed())
}

/// `submit`, `stop` and `close` against `dir` all fail fast with 125 and a
/// message containing every one of `says`; the submit's marker is never made.
fn all_refuse(dir: &Path, marker: &Path, says: &[&str]) {
    let m = marker.to_str().unwrap();
    for (sub, argv) in [
        ("submit", vec![TOUCH, m]),
        ("stop", vec![]),
        ("close", vec![]),
    ] {
        let (out, took) = run_client(dir, sub, &[], &argv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{sub} on {}: {out:?}",
            dir.display()
        );
        assert!(took < FAST, "{sub} took {took:?}");
        assert!(out.stdout.is_empty(), "{sub}: {out:?}");
        for s in says {
            assert!(err.contains(s), "{sub}: {err:?} should mention {s:?}");
        }
        assert!(err.starts_with("rea-watchdog: "), "{err}");
        assert!(!marker.exists(), "{sub} launched something");
    }
}

fn ready_json(dir: &Path, pid: i32, start_time: u64) -> String {
    serde_json::json!({
        "event": "ready", "run_id": "fake", "pid": pid, "start_time": start_time,
        "uid": 0, "state_dir": dir, "fifo": dir.join("requests"),
        "audit_log": dir.join("audit.jsonl"),
    })
    .to_string()
}

#[test]
fn missing_or_empty_state_dirs_fail_fast() {
    let s = Scratch::new();
    let marker = s.path("marker");
    let missing = s.path("nope");
    all_refuse(
        &missing,
        &marker,
        &[missing.to_str().unwrap(), "No such file"],
    );
    // A directory of ours that no watchdog ever used.
    let empty = s.path("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::set_permissions(&empty, PermissionsExt::from_mode(0o700)).unwrap();
    all_refuse(&empty, &marker, &["no request FIFO"]);
    // A file where the directory should be.
    let file = s.path("file");
    std::fs::write(&file, "").unwrap();
    all_refuse(&file, &marker, &["not a directory"]);
    // No state dir at all (neither flag nor REA_STATE_DIR): a usage error.
    let out = Command::new(watchdog_bin())
        .args(["submit", "--", TOUCH, marker.to_str().unwrap()])
        .env_remove("REA_STATE_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--state-dir"));
    assert!(!marker.exists());
}

#[test]
fn a_closed_watchdogs_state_dir_is_stale() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let before = std::fs::read(&w.audit_log).unwrap();
    let marker = w.scratch.path("marker");
    // The FIFO and ready.json are still there; the watchdog is gone.
    assert!(w.state_dir.join("requests").exists());
    all_refuse(&w.state_dir, &marker, &["stale", "gone"]);
    // The sealed log was not touched, and no reply FIFO was left behind.
    assert_eq!(std::fs::read(&w.audit_log).unwrap(), before);
    assert_eq!(
        std::fs::read_dir(w.state_dir.join("replies"))
            .unwrap()
            .count(),
        0
    );
    sibling.assert_alive();
}

#[test]
fn a_fifo_nobody_reads_is_stale() {
    // ready.json names a live process (this test) that never reads the FIFO.
    let s = Scratch::new();
    let dir = s.path("state");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o700)).unwrap();
    nix::unistd::mkfifo(
        &dir.join("requests"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::create_dir(dir.join("replies")).unwrap();
    let me = std::process::id() as i32;
    let st = rea::process::identity::self_start_time().unwrap();
    std::fs::write(dir.join("ready.json"), ready_json(&dir, me, st)).unwrap();
    let marker = s.path("marker");
    all_refuse(&dir, &marker, &["stale", "no watchdog is reading"]);
    assert_eq!(std::fs::read_dir(dir.join("replies")).unwrap().count(), 0);
    // ready.json naming a pid whose start time differs: stale as well.
    std::fs::write(dir.join("ready.json"), ready_json(&dir, me, st + 1)).unwrap();
    all_refuse(&dir, &marker, &["stale"]);
}

#[test]
fn a_foreign_state_dir_is_refused() {
    // A live watchdog whose directory looks foreign: no client talks to it.
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let marker = w.scratch.path("marker");
    let dir = w.state_dir.clone();
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    let root = Some(nix::unistd::Uid::from_raw(0));

    nix::unistd::chown(&dir, nobody, None).unwrap();
    all_refuse(&dir, &marker, &["uid 65534", "foreign"]);
    nix::unistd::chown(&dir, root, None).unwrap();

    for mode in [0o755, 0o750, 0o701] {
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(mode)).unwrap();
        all_refuse(&dir, &marker, &[&format!("mode {mode:o}")]);
    }
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o700)).unwrap();

    nix::unistd::chown(&dir.join("requests"), nobody, None).unwrap();
    all_refuse(&dir, &marker, &["requests is not a FIFO of ours"]);
    nix::unistd::chown(&dir.join("requests"), root, None).unwrap();

    // A symlink to the real directory is not the directory.
    let link = w.scratch.path("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    all_refuse(&link, &marker, &["not a directory"]);

    // None of it reached the watchdog; it still serves and closes cleanly.
    let recs = w.records();
    assert!(of_kind(&recs, "request_received").is_empty(), "{recs:#?}");
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let recs = w.records();
    assert!(of_kind(&recs, "job_spawned").is_empty());
    assert_eq!(
        of_kind(&recs, "request_received").len(),
        1,
        "only the close"
    );
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    sibling.assert_alive();
}

/// The deadline a job was spawned with, from its job_spawned record.
fn spawned_deadline(w: &Watchdog, nth: usize) -> u64 {
    let log = w.log();
    let s = all!(log, Event::JobSpawned);
    s[nth].deadline_ms.expect("a deadline")
}

#[test]
fn durations_are_read_like_timeout() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    for (i, (d, ms)) in [
        ("2m", 120_000),
        ("10", 10_000),
        ("1.5s", 1_500),
        ("90s", 90_000),
    ]
    .into_iter()
    .enumerate()
    {
        let out = w.submit(&["--deadline", d], &["true"]);
        assert_eq!(out.status.code(), Some(0), "--deadline {d}: {out:?}");
        assert_eq!(spawned_deadline(&w, i), ms, "--deadline {d}");
    }
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    drop(w);
    // Sub-second ones, each on its own watchdog: a loaded machine may let
    // `true` outlive half a second, which is then a deadline stop (124),
    // but the deadline was accepted and recorded either way.
    for d in ["0.5", "500ms", ".5"] {
        let mut w = Watchdog::start(&[]);
        let out = w.submit(&["--deadline", d], &["true"]);
        assert!(
            matches!(out.status.code(), Some(0 | 124)),
            "--deadline {d}: {out:?}"
        );
        assert_eq!(spawned_deadline(&w, 0), 500, "--deadline {d}");
        let close = w.close();
        assert!(close.status.success(), "{close:?}");
        assert!(w.wait(PATIENCE).success());
    }
    sibling.assert_alive();
}

#[test]
fn bad_durations_are_usage_errors() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let marker = w.scratch.path("marker");
    let m = marker.to_str().unwrap();
    let check = |args: Vec<String>, says: &[&str]| {
        let t = Instant::now();
        let out = output_within(
            w.client(&args[0], &[])
                .args(&args[1..])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            PATIENCE,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {out:?}");
        assert!(t.elapsed() < FAST);
        for word in says {
            assert!(
                err.contains(word),
                "{args:?}: {err} should mention {word:?}"
            );
        }
        assert!(!marker.exists());
    };
    for bad in [
        "-1", "abc", "1x", "0", "", "1.2.3", "5 s", "1e3", "-0.5", "ms", ".",
    ] {
        let form = format!("--deadline={bad}");
        let negative: &[&str] = if bad.starts_with('-') {
            &["--deadline", "negative"]
        } else {
            &["--deadline"]
        };
        check(
            vec!["submit".into(), form, "--".into(), TOUCH.into(), m.into()],
            negative,
        );
    }
    // Separated from its flag, `-1` is still the flag's value (not taken
    // for an option), so the message is about the duration.
    check(
        vec![
            "submit".into(),
            "--deadline".into(),
            "-1".into(),
            "--".into(),
            TOUCH.into(),
            m.into(),
        ],
        &["--deadline", "negative"],
    );
    for (sub, flag) in [("stop", "--wait"), ("close", "--wait")] {
        check(vec![sub.into(), format!("{flag}=abc")], &[flag]);
        check(
            vec![sub.into(), flag.into(), "-2".into()],
            &[flag, "negative"],
        );
    }
    // Nothing reached the watchdog.
    let recs = w.records();
    assert!(of_kind(&recs, "request_received").is_empty(), "{recs:#?}");
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());

    // `run` refuses bad bounds before it creates anything.
    let s = Scratch::new();
    for (flag, bad) in [
        ("--term-grace", "abc"),
        ("--kill-bound", "1x"),
        ("--action-deadline", "0"),
        ("--action-deadline", "-1"),
        ("--output-cap", "lots"),
    ] {
        let out = Command::new(watchdog_bin())
            .arg("run")
            .arg("--state-dir")
            .arg(s.path("state"))
            .arg("--audit-log")
            .arg(s.path("audit.jsonl"))
            .arg(format!("{flag}={bad}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{flag}={bad}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(flag));
        assert!(!s.path("state").exists() && !s.path("audit.jsonl").exists());
    }
    sibling.assert_alive();
}

#[test]
fn submit_resolves_argv0_through_path() {
    // `submit -- true` sends /usr/bin/true (or wherever PATH finds it): the
    // watchdog only ever gets an absolute argv[0].
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let out = w.submit(&[], &["true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = w.submit(&[], &["no-such-program-here"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    let log = w.log();
    let s = all!(log, Event::JobSpawned);
    assert_eq!(s.len(), 1);
    let argv0 = s[0].argv[0].as_str();
    assert!(
        argv0.starts_with('/') && argv0.ends_with("/true"),
        "{argv0}"
    );
    assert_eq!(all!(log, Event::RequestReceived).len(), 1);
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    let v: Value = serde_json::from_slice(&close.stdout).unwrap();
    assert_eq!(v["positive"], true);
    assert!(w.wait(PATIENCE).success());
    sibling.assert_alive();
}
