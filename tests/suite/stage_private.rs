//! The watchdog's own place in its stage (docs/stage.md, "The watchdog's
//! own place"): deployed as the seed deploys it, the binaries are in
//! `STAGE/.rea/bin/`, the state directory is `STAGE/.rea/state` and the log
//! `STAGE/.rea/audit.jsonl`. The binaries are upload files like any other;
//! the state directory and the log are left out of the stage's walks and
//! accounted for on their own: the state directory removed at close, the
//! log the very file the watchdog wrote.
//!
//! Oracles: the sealed log itself (typed), the verdict, `rea-stage
//! remove`'s own log and the tree left on disk.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::harness::*;
use common::stage::verify_removal;
use common::typed::Log;

/// A stage laid out as deployed: the three binaries copied into
/// `STAGE/.rea/bin/`. Returns (scratch, the in-stage watchdog, state dir, log).
fn laid_out() -> (Scratch, PathBuf, PathBuf, PathBuf) {
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    let bin = staging.join(".rea/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for b in [watchdog_bin(), audit_bin(), stage_bin()] {
        let name = Path::new(b).file_name().unwrap();
        std::fs::copy(b, bin.join(name)).unwrap();
    }
    let wd = bin.join("rea-watchdog");
    let (state, log) = (staging.join(".rea/state"), staging.join(".rea/audit.jsonl"));
    (scratch, wd, state, log)
}

fn start_in_stage() -> Watchdog {
    let (scratch, wd, state, log) = laid_out();
    Watchdog::start_laid_out(scratch, &wd, state, log, &[], |_| {})
}

/// `rea-stage remove` run from the stage's own `.rea/bin`, against a copy
/// of the sealed log fetched out of the stage (the one in it goes too).
fn remove_with_stage_binary(w: &Watchdog, head: &str) -> (i32, String, PathBuf) {
    let fetched = w.scratch.path("fetched.jsonl");
    std::fs::copy(&w.audit_log, &fetched).unwrap();
    let log = w.scratch.path("remove.jsonl");
    let child = Command::new(w.staging.join(".rea/bin/rea-stage"))
        .args(["remove", s(&w.staging), "--audit-log", s(&fetched)])
        .args(["--expect-head", head, "--log", s(&log)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rea-stage remove");
    let out = output_within(child, PATIENCE);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text, log)
}

#[test]
fn a_clean_run_from_the_stage_is_delete_allowed_and_removed_whole() {
    require_pid_ns!("watchdog in the stage");
    let mut w = start_in_stage();
    // A job that uses its temp root (inside the state directory, so inside
    // the stage) and reads the runtime.
    let script = "cat \"$1/runtime.bin\" >/dev/null && echo scratch > \"$TMPDIR/work\"";
    let out = w.submit(
        &["--name", "install"],
        &["/bin/sh", "-c", script, "sh", s(&w.staging)],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success(), "a positive receipt");
    let head = w.head().expect("sealed");

    let log: Log = Log::read(&w.audit_log);
    let rc = log.receipt();
    let private = rc
        .staging
        .as_ref()
        .and_then(|st| st.private.clone())
        .expect("the receipt names the watchdog's own files");
    assert_eq!(private.state_dir.as_deref(), Some(".rea/state"));
    assert_eq!(private.audit_log.as_deref(), Some(".rea/audit.jsonl"));
    let removed = private.state_dir_removed.expect("close says what it did");
    assert!(removed.removed, "{removed:?}");
    assert!(!w.staging.join(".rea/state").exists(), "removed at close");
    assert!(
        w.staging.join(".rea/audit.jsonl").is_file(),
        "the log stays"
    );

    let (code, v) = w.verify(&["--expect-head", &head, "--staging", s(&w.staging)]);
    assert_eq!(
        (code, v["status"].as_str()),
        (0, Some("delete_allowed")),
        "{v:#}"
    );

    let (code, text, rlog) = remove_with_stage_binary(&w, &head);
    assert_eq!(code, 0, "{text}");
    assert!(!w.staging.exists(), "the whole stage is gone: {text}");
    let (code, v) = verify_removal(&rlog);
    assert_eq!((code, v["result"].as_str()), (0, Some("removed")), "{v:#}");
}

#[test]
fn a_file_planted_beside_the_private_state_is_a_change_and_the_state_dir_back_is_caught() {
    require_pid_ns!("watchdog in the stage");
    let mut w = start_in_stage();
    // `.rea/` is not private as a whole: only the state directory and the
    // log are. A job writing beside them changes the stage.
    let script = "echo x > \"$1/.rea/planted\" && echo y > \"$1/.rea/state/replies/junk\"";
    let out = w.submit(
        &["--name", "plant"],
        &["/bin/sh", "-c", script, "sh", s(&w.staging)],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    w.wait(PATIENCE);
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!((code, v["status"].as_str()), (1, Some("retain")), "{v:#}");
    let details: Vec<String> = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["code"], r["detail"]))
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d.contains("stage_changed_during_run") && d.contains(".rea/planted")),
        "{details:#?}"
    );
    // What was written into the state directory went with it.
    assert!(!details.iter().any(|d| d.contains("junk")), "{details:#?}");
    assert!(!w.staging.join(".rea/state").exists());

    // After close: the state directory made again, then the log's path
    // holding another file. Each is `private_state_changed`, and neither
    // changes the stage's inventory (`.rea/`'s own line included: its link
    // count leaves the state directory out).
    std::fs::create_dir(w.staging.join(".rea/state")).unwrap();
    let (_, v) = w.verify(&["--staging", s(&w.staging)]);
    let codes = reason_codes(&v);
    assert!(
        codes.contains(&"private_state_changed".to_string()),
        "{v:#}"
    );
    assert!(!codes.contains(&"staging_mismatch".to_string()), "{v:#}");
    std::fs::remove_dir(w.staging.join(".rea/state")).unwrap();
    let kept = w.scratch.path("kept.jsonl");
    std::fs::rename(&w.audit_log, &kept).unwrap();
    std::fs::copy(&kept, &w.audit_log).unwrap(); // same bytes, another inode
    let (_, v) = verify_log(&kept, &["--staging", s(&w.staging)]);
    let codes = reason_codes(&v);
    assert!(
        codes.contains(&"private_state_changed".to_string()),
        "{v:#}"
    );
    assert!(!codes.contains(&"staging_mismatch".to_string()), "{v:#}");
}

/// A watchdog whose private state is in the stage but not under `.rea/`,
/// or whose log would go with the state directory: refused before
/// anything is launched, the refusal recorded as the log's last record.
#[test]
fn private_state_out_of_place_is_refused_and_recorded() {
    require_pid_ns!("watchdog in the stage");
    for (state, log, want) in [
        ("state", ".rea/audit.jsonl", "not under .rea/"),
        (
            ".rea/state",
            ".rea/state/audit.jsonl",
            "inside the state directory",
        ),
    ] {
        let (scratch, wd, _, _) = laid_out();
        let staging = scratch.path("staging");
        std::fs::write(staging.join("runtime.bin"), b"native runtime").unwrap();
        // The state directory must exist before the log can be put in it.
        let state = staging.join(state);
        if log.starts_with(".rea/state/") {
            std::fs::create_dir_all(&state).unwrap();
        }
        let log = staging.join(log);
        let child = run_command(&wd, &state, &log, &staging)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rea-watchdog");
        let out = output_within(child, PATIENCE);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{want}: {err}");
        assert!(out.stdout.is_empty(), "no ready line: {out:?}");
        assert!(err.contains("stage_refused") && err.contains(want), "{err}");
        let logged: Log = Log::read(&log);
        assert_eq!(logged.kinds().last(), Some(&"start_refused"), "{want}");
        assert!(!logged.kinds().contains(&"job_spawned"));
        // It is retained, for that reason.
        let (code, v) = verify_log(&log, &[]);
        assert_eq!(
            (code, reason_codes(&v)),
            (1, vec!["stage_refused".to_string()])
        );
        drop(scratch);
    }
}
