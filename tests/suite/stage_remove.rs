//! `rea-stage remove` (docs/stage.md, "One verified removal") after a real
//! watchdog run over a stage with a subdirectory: a clean stage is removed
//! entry by entry (each recorded) and `rea-audit verify FILE` says
//! `removed`; a pinned head that differs, a file added after close, a
//! process holding the stage, a run whose verdict is retain, and bad
//! arguments remove nothing (every byte compared before and after); an
//! entry swapped for a symlink to a directory outside while remove runs
//! (paused deterministically on a FIFO, the documented test hook) stops it
//! with nothing outside touched.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::harness::{output_within, s, Scratch, Watchdog, PATIENCE};
use common::schema::{compile, schema_errors};
use common::stage::{snapshot, verify_removal};
use serde_json::Value;

const PAUSE_UNLINK_ENV: &str = "REA_STAGE_PAUSE_BEFORE_UNLINK";
const ARMED: &str = ".rea-exec-started";

/// A sealed run (closed, positive) whose one job ran `script` with the
/// stage as `$1`, over a stage made by `rea-stage begin` (its receipt;
/// the watchdog arms it: `.rea-exec-started`) and uploaded:
/// `runtime.bin`, `lib/hopper.so` and `a/x.txt`.
fn sealed_run(script: &str) -> Watchdog {
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {
        // The harness made a plain staging dir; make it a rea-stage one.
        std::fs::remove_dir_all(&staging).unwrap();
        let out = Command::new(common::harness::stage_bin())
            .args(["begin", s(&staging), "--file", "runtime.bin"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::create_dir_all(staging.join("lib")).unwrap();
        std::fs::create_dir_all(staging.join("a")).unwrap();
        std::fs::write(staging.join("runtime.bin"), b"native runtime").unwrap();
        std::fs::write(staging.join("lib/hopper.so"), b"a library").unwrap();
        std::fs::write(staging.join("a/x.txt"), b"x").unwrap();
    });
    assert!(
        w.staging.join(ARMED).is_file(),
        "armed before the first spawn"
    );
    let out = w.submit(
        &["--name", "job"],
        &["/bin/sh", "-c", script, "sh", s(&w.staging)],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success(), "a clean close");
    w
}

fn clean_run() -> Watchdog {
    let w = sealed_run("cat \"$1/lib/hopper.so\" >/dev/null");
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "the run allows deletion: {v:#}");
    w
}

fn head(w: &Watchdog) -> String {
    w.head().expect("a sealed head")
}

fn remove_cmd(w: &Watchdog, head: &str, log: &Path) -> Command {
    let mut c = Command::new(common::harness::stage_bin());
    c.args(["remove", s(&w.staging), "--audit-log", s(&w.audit_log)])
        .args(["--expect-head", head, "--log", s(log)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// `rea-stage remove` → (exit code, its JSON line or null, stderr).
fn remove(w: &Watchdog, head: &str, log: &Path) -> (i32, Value, String) {
    let out = output_within(remove_cmd(w, head, log).spawn().unwrap(), PATIENCE);
    let line = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), line, err)
}

/// The removal log's records, each checked against remove-record.schema.json.
fn removal_records(log: &Path) -> Vec<Value> {
    let v = compile("remove-record");
    let recs = common::harness::records(log);
    for r in &recs {
        let errors = schema_errors(&v, r);
        assert!(
            errors.is_empty(),
            "remove-record.schema.json: {errors:?}\n{r}"
        );
    }
    recs
}

fn kinds(recs: &[Value]) -> Vec<&str> {
    recs.iter().map(|r| r["kind"].as_str().unwrap()).collect()
}

/// The paths of the `entry_removed` records, in order.
fn removed_paths(recs: &[Value]) -> Vec<String> {
    recs.iter()
        .filter(|r| r["kind"] == "entry_removed")
        .map(|r| r["data"]["path"].as_str().unwrap().to_string())
        .collect()
}

fn decision(recs: &[Value]) -> &Value {
    let last = recs.last().expect("a record");
    assert_eq!(last["kind"], "remove_decided", "{recs:#?}");
    &last["data"]
}

/// (code, name) of each reason of the decision.
fn reasons(d: &Value) -> Vec<(String, String)> {
    d["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let name = r["name"].as_str().unwrap_or_default().to_string();
            (r["code"].as_str().unwrap().to_string(), name)
        })
        .collect()
}

/// Removes nothing: exit 1, `refused`, the stage byte for byte as
/// `before`, and a log that verifies `refused` with those reasons; the
/// reasons are returned.
fn assert_refused(
    w: &Watchdog,
    head: &str,
    before: &BTreeMap<PathBuf, String>,
) -> Vec<(String, String)> {
    let log = w.scratch.path("remove.jsonl");
    let (code, line, err) = remove(w, head, &log);
    assert_eq!(code, 1, "{line} {err}");
    assert_eq!(line["outcome"], "refused", "{line}");
    assert_eq!(line["removed"], 0, "{line}");
    assert_eq!(
        &snapshot(&w.staging),
        before,
        "every entry kept, byte for byte"
    );
    let recs = removal_records(&log);
    assert!(!kinds(&recs).contains(&"remove_approved"), "{recs:#?}");
    assert!(!kinds(&recs).contains(&"entry_removed"), "{recs:#?}");
    let d = decision(&recs);
    assert_eq!(d["removed"], 0);
    assert_eq!(d["stage_removed"], false);
    let (vc, v) = verify_removal(&log);
    assert_eq!((vc, v["result"].as_str()), (1, Some("refused")), "{v:#}");
    assert_eq!(v["refusals"], d["reasons"], "{v:#}");
    reasons(d)
}

#[test]
fn a_clean_stage_after_a_real_run_is_removed_entry_by_entry() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let beside = w.scratch.path("beside");
    std::fs::create_dir_all(beside.join("sub")).unwrap();
    std::fs::write(beside.join("sub/keep"), b"unrelated").unwrap();
    let beside_before = snapshot(&beside);
    let audit_before = std::fs::read(&w.audit_log).unwrap();
    let log = w.scratch.path("remove.jsonl");
    let (code, line, err) = remove(&w, &head(&w), &log);
    assert_eq!(code, 0, "{line} {err}");
    assert_eq!(line["outcome"], "removed", "{line}");
    assert!(!w.staging.exists(), "the stage is gone");
    assert_eq!(
        snapshot(&beside),
        beside_before,
        "the directory beside it is untouched"
    );
    assert_eq!(std::fs::read(&w.audit_log).unwrap(), audit_before);
    let mode = std::fs::metadata(&log).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600, "the log is private");
    let recs = removal_records(&log);
    let k = kinds(&recs);
    assert_eq!(
        &k[..3],
        ["remove_started", "remove_checked", "remove_approved"]
    );
    assert_eq!(k.last(), Some(&"remove_decided"));
    // Deepest first, the watchdog's marker last, then the stage itself.
    let stage = std::path::absolute(&w.staging).unwrap();
    assert_eq!(
        removed_paths(&recs),
        [
            "a/x.txt",
            "lib/hopper.so",
            "a",
            "lib",
            "runtime.bin",
            ".rea-before-transfer",
            ARMED,
            s(&stage)
        ]
    );
    let checked = &recs[1]["data"];
    assert_eq!(checked["verdict"]["status"], "delete_allowed");
    assert_eq!(checked["verdict"]["head"], head(&w).as_str());
    assert_eq!(recs[2]["data"]["entries"], 7);
    let d = decision(&recs);
    assert_eq!(
        (d["removed"].as_u64(), d["stage_removed"].as_bool()),
        (Some(7), Some(true))
    );
    let (vc, v) = verify_removal(&log);
    assert_eq!((vc, v["result"].as_str()), (0, Some("removed")), "{v:#}");
    assert_eq!(v["removed"], 7);
    // show judges it with the removal log's verifier and says each record.
    let shown = Command::new(common::harness::audit_bin())
        .args(["show", s(&log)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(shown.status.code(), Some(0), "{text}");
    assert!(text.contains("removed File lib/hopper.so"), "{text}");
    assert!(text.contains("Removed"), "{text}");
}

#[test]
fn a_head_that_is_not_the_pinned_one_removes_nothing() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let before = snapshot(&w.staging);
    let r = assert_refused(&w, &"0".repeat(64), &before);
    assert!(
        r.contains(&("head_mismatch".into(), String::new())),
        "{r:?}"
    );
    assert!(
        r.contains(&("verdict".into(), "head_mismatch".into())),
        "{r:?}"
    );
}

#[test]
fn a_file_added_after_close_removes_nothing() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    std::fs::write(w.staging.join("lib/late.so"), b"added after the receipt").unwrap();
    let before = snapshot(&w.staging);
    let r = assert_refused(&w, &head(&w), &before);
    assert!(
        r.contains(&("verdict".into(), "staging_mismatch".into())),
        "{r:?}"
    );
    assert!(r.iter().any(|(c, _)| c == "stage_changed"), "{r:?}");
}

#[test]
fn a_process_holding_the_stage_removes_nothing() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let mut holder = Command::new("/bin/sleep")
        .arg("120")
        .current_dir(w.staging.join("lib"))
        .spawn()
        .unwrap();
    let before = snapshot(&w.staging);
    let r = assert_refused(&w, &head(&w), &before);
    // Our own child, through its handle's pidfd; reaped.
    common::harness::signal_child(&holder, nix::sys::signal::Signal::SIGKILL);
    common::harness::wait_child(&mut holder, PATIENCE);
    assert!(
        r.contains(&("verdict".into(), "stage_held".into())),
        "{r:?}"
    );
}

#[test]
fn a_run_whose_verdict_is_retain_removes_nothing() {
    require_pid_ns!("stage remove");
    // The job changes the stage during the run: sealed, intact, retain.
    let w = sealed_run("echo changed > \"$1/lib/hopper.so\"");
    let before = snapshot(&w.staging);
    let r = assert_refused(&w, &head(&w), &before);
    assert!(
        r.contains(&("verdict".into(), "stage_changed_during_run".into())),
        "{r:?}"
    );
}

/// The write end of the pause FIFO, once `child` holds its read end (it
/// is paused there); fails, instead of waiting for ever, when `child`
/// exits first or does not get there within [`PATIENCE`]. No polling: a
/// thread blocks in the open, which returns when `child` opens the read
/// end, and says so on a pipe; this waits on that pipe and on `child`'s
/// pidfd together.
fn paused(fifo: &Path, child: &mut std::process::Child) -> std::fs::File {
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::fs::OpenOptionsExt;
    let pidfd = rea::process::pidfd::bind_unwaited_child(child).expect("bind own child");
    let (said, say) = nix::unistd::pipe().unwrap();
    let path = fifo.to_path_buf();
    let opener = std::thread::spawn(move || {
        let f = std::fs::OpenOptions::new().write(true).open(&path);
        drop(say); // EOF on `said`: the open returned
        f
    });
    let mut fds = [
        libc::pollfd {
            fd: said.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: pidfd.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = PATIENCE.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: two valid pollfds, their descriptors open for the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n > 0 && fds[0].revents != 0 {
        return opener.join().unwrap().expect("open the pause FIFO");
    }
    // Release the blocked open by opening the read end ourselves.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
    let _ = opener.join();
    match child.try_wait().unwrap() {
        Some(status) => panic!("remove exited ({status}) before it reached the pause hook"),
        None => panic!("remove never paused within {PATIENCE:?}"),
    }
}

#[test]
fn an_entry_swapped_for_a_symlink_outside_during_removal_stops_it() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let outside = w.scratch.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("hopper.so"), b"not the stage's").unwrap();
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    let outside_before = snapshot(&outside);
    let fifo = w.scratch.path("pause");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let log = w.scratch.path("remove.jsonl");
    let mut child = remove_cmd(&w, &head(&w), &log)
        .env(PAUSE_UNLINK_ENV, &fifo)
        .spawn()
        .unwrap();
    // Opens once remove opened the read end: approved, nothing removed yet.
    let mut release = paused(&fifo, &mut child);
    assert!(kinds(&removal_records(&log)).contains(&"remove_approved"));
    assert!(
        w.staging.join("a/x.txt").exists(),
        "nothing removed before the hook"
    );
    // lib is moved out and a symlink to the outside directory takes its name.
    let moved = w.scratch.path("lib-moved");
    std::fs::rename(w.staging.join("lib"), &moved).unwrap();
    std::os::unix::fs::symlink(&outside, w.staging.join("lib")).unwrap();
    std::io::Write::write_all(&mut release, b"x").unwrap();
    drop(release);
    let out = output_within(child, PATIENCE);
    let line: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(out.status.code(), Some(2), "{line} {out:?}");
    assert_eq!(line["outcome"], "stopped", "{line}");
    assert_eq!(
        snapshot(&outside),
        outside_before,
        "nothing outside is ever removed"
    );
    assert_eq!(
        std::fs::read(moved.join("hopper.so")).unwrap(),
        b"a library"
    );
    assert!(w.staging.join("lib").is_symlink(), "the rest is kept");
    assert!(w.staging.join("runtime.bin").exists());
    let recs = removal_records(&log);
    assert_eq!(
        removed_paths(&recs),
        ["a/x.txt"],
        "the log says what was removed"
    );
    let d = decision(&recs);
    assert_eq!(
        reasons(d)[0],
        ("concurrent_change".into(), "lib/hopper.so".into())
    );
    assert_eq!(
        (d["removed"].as_u64(), d["stage_removed"].as_bool()),
        (Some(1), Some(false))
    );
    let (vc, v) = verify_removal(&log);
    assert_eq!((vc, v["result"].as_str()), (5, Some("stopped")), "{v:#}");
}

#[test]
fn an_entry_added_during_removal_is_never_forced() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let fifo = w.scratch.path("pause");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let log = w.scratch.path("remove.jsonl");
    let mut child = remove_cmd(&w, &head(&w), &log)
        .env(PAUSE_UNLINK_ENV, &fifo)
        .spawn()
        .unwrap();
    let mut release = paused(&fifo, &mut child);
    std::fs::write(w.staging.join("lib/late.so"), b"written during removal").unwrap();
    std::io::Write::write_all(&mut release, b"x").unwrap();
    drop(release);
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        std::fs::read(w.staging.join("lib/late.so")).unwrap(),
        b"written during removal"
    );
    let recs = removal_records(&log);
    assert_eq!(removed_paths(&recs), ["a/x.txt", "lib/hopper.so", "a"]);
    let d = decision(&recs);
    assert_eq!(reasons(d), [("concurrent_change".into(), "lib".into())]);
    assert_eq!(verify_removal(&log).0, 5);
}

#[test]
fn bad_arguments_remove_nothing_and_create_no_log() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let before = snapshot(&w.staging);
    let h = head(&w);
    // FILE exists: never appended to.
    let exists = w.scratch.path("exists.jsonl");
    std::fs::write(&exists, b"someone else's\n").unwrap();
    let (code, line, err) = remove(&w, &h, &exists);
    assert_eq!((code, &line), (4, &Value::Null), "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&exists).unwrap(), b"someone else's\n");
    // FILE inside DIR.
    let inside = w.staging.join("remove.jsonl");
    let (code, _, err) = remove(&w, &h, &inside);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("inside the stage"), "{err}");
    assert!(!inside.exists());
    // A head that is not 64 lowercase hex digits.
    let log = w.scratch.path("remove.jsonl");
    for bad in ["xyz", &h.to_uppercase(), &h[1..]] {
        let (code, _, err) = remove(&w, bad, &log);
        assert_eq!(code, 4, "{bad}: {err}");
        assert!(!log.exists());
    }
    assert_eq!(snapshot(&w.staging), before, "nothing removed");
    // And then it removes.
    assert_eq!(remove(&w, &h, &log).0, 0);
    assert!(!w.staging.exists());
}

#[test]
fn the_help_names_removes_exit_codes() {
    let out = Command::new(common::harness::stage_bin())
        .args(["remove", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "Exit codes (remove):",
        "2  stopped",
        "concurrent_change",
        "--expect-head",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// A refused removal's log made to claim `removed` (the reasons dropped,
/// re-chained: every hash holds) does not verify: the decision is run
/// again on the recorded verdict. Cut before its decision it is incomplete.
#[test]
fn a_forged_removed_decision_is_tampered_and_a_cut_log_incomplete() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let log = w.scratch.path("remove.jsonl");
    assert_eq!(remove(&w, &"0".repeat(64), &log).0, 1);
    let run = removal_records(&log)[0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    let mut lines = common::logs::read_lines(&log);
    let last = String::from_utf8(lines.pop().unwrap()).unwrap();
    let (a, b) = (
        last.find("\"reasons\":[").unwrap(),
        last.find("],\"removed\"").unwrap(),
    );
    let forged = format!("{}\"reasons\":[{}", &last[..a], &last[b..])
        .replace("\"outcome\":\"refused\"", "\"outcome\":\"removed\"");
    assert_ne!(forged, last);
    lines.push(forged.into_bytes());
    common::logs::rechain(&mut lines, &run, 0);
    let path = w.scratch.path("forged.jsonl");
    common::logs::write_lines(&path, &lines);
    let (code, v) = verify_removal(&path);
    assert_eq!((code, v["result"].as_str()), (3, Some("tampered")), "{v:#}");
    assert!(v.to_string().contains("decision_mismatch"), "{v:#}");
    lines.pop();
    let cut = w.scratch.path("cut.jsonl");
    common::logs::write_lines(&cut, &lines);
    let (code, v) = verify_removal(&cut);
    assert_eq!(
        (code, v["result"].as_str()),
        (2, Some("incomplete")),
        "{v:#}"
    );
}

/// DIR named through a symlink is never followed: refused
/// (`stage_unreachable`), nothing removed; a stage replaced by another
/// directory at its name is refused too (`identity_mismatch`).
#[test]
fn a_symlinked_or_replaced_stage_removes_nothing() {
    require_pid_ns!("stage remove");
    let w = clean_run();
    let before = snapshot(&w.staging);
    let alias = w.scratch.path("alias");
    std::os::unix::fs::symlink(&w.staging, &alias).unwrap();
    let log = w.scratch.path("via-link.jsonl");
    let out = Command::new(common::harness::stage_bin())
        .args(["remove", s(&alias), "--audit-log", s(&w.audit_log)])
        .args(["--expect-head", &head(&w), "--log", s(&log)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(snapshot(&w.staging), before);
    let d = decision(&removal_records(&log)).clone();
    assert_eq!(reasons(&d), [("stage_unreachable".into(), String::new())]);
    assert_eq!(verify_removal(&log).1["result"], "refused");
    // The stage moved aside, an empty directory in its place.
    let aside = w.scratch.path("staging-aside");
    std::fs::rename(&w.staging, &aside).unwrap();
    std::fs::create_dir(&w.staging).unwrap();
    let r = assert_refused(&w, &head(&w), &snapshot(&w.staging));
    assert!(r.iter().any(|(c, _)| c == "identity_mismatch"), "{r:?}");
    assert_eq!(
        snapshot(&aside).len(),
        before.len(),
        "the real stage is whole"
    );
}
