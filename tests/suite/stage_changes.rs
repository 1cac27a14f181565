//! The stage is exactly what was uploaded (docs/stage.md, "Nothing changes
//! during the run"): a real watchdog takes the stage's baseline before its
//! first spawn; a job that changes the stage while it runs (overwrites the
//! runtime, adds a file, a FIFO or a socket, removes an entry, swaps a file
//! for a symlink or a hard link) leaves a stage that `verify --staging`
//! keeps, `stage_changed_during_run`, each entry named, and the log's own
//! `staging_changed` record names it too. A job that only reads the stage
//! leaves it `delete_allowed`.
//!
//! The oracle is the sealed log and the verdict; the job's exit status is
//! the proof that its change was made before close (submit waits for it).

use crate::common;

use serde_json::Value;

use common::harness::*;

/// One run over the stage as uploaded (`runtime.bin`, `lib/hopper.so`,
/// `keep.txt`): one job runs `sh -c SCRIPT sh STAGE` and must exit 0, then
/// close; the verdict of `verify --staging` and the sealed records.
fn run_with(script: &str) -> (Watchdog, i32, Value) {
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    std::fs::create_dir_all(staging.join("lib")).unwrap();
    std::fs::write(staging.join("lib/hopper.so"), b"a library").unwrap();
    std::fs::write(staging.join("keep.txt"), b"kept").unwrap();
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {});
    let out = w.submit(
        &["--name", "install"],
        &["/bin/sh", "-c", script, "sh", s(&w.staging)],
    );
    assert!(out.status.success(), "the job made its change: {out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success(), "a clean close is positive");
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    (w, code, v)
}

/// The details of the `stage_changed_during_run` reasons.
fn changes_named(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["code"] == "stage_changed_during_run")
        .map(|r| r["detail"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The change is kept (`retain`, only `stage_changed_during_run`), and
/// named exactly as `named` by both the verdict and the log.
fn assert_changed(script: &str, named: &[&str]) {
    let (w, code, v) = run_with(script);
    assert_eq!((code, v["status"].as_str()), (1, Some("retain")), "{v:#}");
    let codes = reason_codes(&v);
    assert!(
        codes.iter().all(|c| c == "stage_changed_during_run"),
        "{v:#}"
    );
    let want: Vec<String> = named
        .iter()
        .map(|n| format!("during the run: {n}"))
        .collect();
    assert_eq!(changes_named(&v), want, "{v:#}");
    let recs = w.records();
    let changed = of_kind(&recs, "staging_changed");
    assert_eq!(changed.len(), 1, "the log names the change itself");
    let baseline = of_kind(&recs, "staging_baseline");
    assert_eq!(baseline.len(), 1, "{recs:#?}");
    let at_close = of_kind(&recs, "staging_inventoried")[0];
    assert_eq!(
        changed[0]["data"]["baseline"],
        baseline[0]["data"]["inventory"]["digest"]
    );
    assert_eq!(
        changed[0]["data"]["now"],
        at_close["data"]["inventory"]["digest"]
    );
    // The show text says it in words.
    let shown = common::logs::rea_audit()
        .args(["show", s(&w.audit_log)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("the stage changed during the run"), "{text}");
}

#[test]
fn a_job_that_only_reads_the_stage_leaves_it_deletable() {
    require_pid_ns!("stage baseline");
    let (w, code, v) = run_with("cat \"$1/runtime.bin\" \"$1/lib/hopper.so\" >/dev/null");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["status"], "delete_allowed", "{v:#}");
    let recs = w.records();
    let spawned = recs
        .iter()
        .position(|r| r["kind"] == "job_spawned")
        .unwrap();
    let baseline = recs
        .iter()
        .position(|r| r["kind"] == "staging_baseline")
        .unwrap();
    assert!(
        baseline < spawned,
        "the baseline is taken before the first spawn"
    );
    assert!(of_kind(&recs, "staging_changed").is_empty());
}

#[test]
fn the_runtime_overwritten_during_the_run_is_kept() {
    require_pid_ns!("stage baseline");
    assert_changed(
        "printf 'patched runtime' > \"$1/runtime.bin\"",
        &["changed runtime.bin: content, size"],
    );
}

#[test]
fn the_runtime_rewritten_in_place_with_its_size_is_kept() {
    require_pid_ns!("stage baseline");
    // Same length, same inode: only the bytes differ.
    assert_changed(
        "printf 'native_runtime' | dd of=\"$1/runtime.bin\" conv=notrunc status=none",
        &["changed runtime.bin: content"],
    );
}

#[test]
fn a_file_added_during_the_run_is_kept() {
    require_pid_ns!("stage baseline");
    assert_changed(
        "echo surprise > \"$1/unexpected.txt\"",
        &["added unexpected.txt (file)"],
    );
}

#[test]
fn a_fifo_added_during_the_run_is_kept() {
    require_pid_ns!("stage baseline");
    assert_changed("mkfifo \"$1/lib/pipe\"", &["added lib/pipe (fifo)"]);
}

#[test]
fn a_socket_left_in_the_stage_is_kept() {
    require_pid_ns!("stage baseline");
    let script = format!(
        "{} -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \"$1/live.sock\"",
        python()
    );
    assert_changed(&script, &["added live.sock (socket)"]);
}

#[test]
fn an_entry_removed_during_the_run_is_kept() {
    require_pid_ns!("stage baseline");
    assert_changed("rm \"$1/keep.txt\"", &["removed keep.txt (file)"]);
}

#[test]
fn a_file_swapped_for_a_symlink_is_kept() {
    require_pid_ns!("stage baseline");
    assert_changed(
        "ln -sf /etc/hostname \"$1/lib/hopper.so\"",
        &["replaced lib/hopper.so (file -> symlink)"],
    );
}

#[test]
fn a_file_swapped_for_a_hard_link_of_the_same_bytes_is_kept() {
    require_pid_ns!("stage baseline");
    // A file outside the stage with the runtime's very bytes, hard-linked
    // over it: same content, size, mode and owner; another inode, two links.
    let script =
        "cp -p \"$1/runtime.bin\" \"$1/../twin\" && ln -f \"$1/../twin\" \"$1/runtime.bin\"";
    assert_changed(script, &["replaced runtime.bin (file): inode, links"]);
}
