//! `rea-audit reconcile` (docs/containment.md) against real watchdogs and real
//! processes: a live watchdog mid-job is `running` and nothing is written;
//! a sealed log is `delete_allowed` like verify, and `review` once the stage
//! changed; a SIGKILLed watchdog (no containment) leaves a setsid survivor
//! that reconcile finds and leaves alone (with a cgroup, tests/suite/recover.rs:
//! the group's members, `running`); torn and tampered logs are `review`,
//! named. Every
//! `--json` report is validated against audit-schema/reconcile.schema.json.
//!
//! Run inside a private PID namespace: `tools/test reconcile::`. The
//! tests stop only what they started, through pidfds they hold (`Held`,
//! `Watchdog`), also when they fail.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::harness::*;
use common::schema::{assert_valid, compile};
use common::stop::*;
use nix::sys::signal::Signal;
use serde_json::Value;

fn reconcile_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| compile("reconcile"))
}

/// `rea-audit reconcile LOG --json ARGS` → (exit code, report), the report
/// validated against the schema; and the human report (same ARGS), which
/// must exit the same way.
fn reconcile(log: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(audit_bin())
        .arg("reconcile")
        .arg(log)
        .arg("--json")
        .args(args)
        .output()
        .expect("run rea-audit reconcile");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "reconcile printed no JSON ({e}): status {:?}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_valid(reconcile_validator(), &v, "reconcile --json");
    let code = out.status.code().unwrap_or(-1);
    assert_eq!(v["exit_code"], code, "{v:#}");
    let text = Command::new(audit_bin())
        .arg("reconcile")
        .arg(log)
        .args(args)
        .output()
        .expect("run rea-audit reconcile");
    assert_eq!(text.status.code(), Some(code));
    let text = String::from_utf8(text.stdout).expect("the human report is UTF-8");
    assert!(text.starts_with("root recovery review: "), "{text}");
    (code, v, text)
}

fn reason_list(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap().to_string())
        .collect()
}

/// The named process with this pid and start time.
fn named(v: &Value, pid: i32, start_time: u64) -> Option<&Value> {
    v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid && p["start_time"] == start_time)
}

/// Every file and directory below `dir` (not following links): path →
/// (type, mode, size, bytes for regular files). What "wrote nothing" is
/// checked against.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (String, u32, u64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let t = format!("{:?}", m.file_type());
            let bytes = if m.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            if m.is_dir() {
                todo.push(e.path());
            }
            out.insert(e.path(), (t, m.mode(), m.size(), bytes));
        }
    }
    out
}

fn args(w: &Watchdog) -> [&str; 4] {
    [
        "--staging",
        w.staging.to_str().unwrap(),
        "--state-dir",
        w.state_dir.to_str().unwrap(),
    ]
}

#[test]
fn live_watchdog_mid_job_is_running_and_nothing_is_written() {
    require_pid_ns!("reconcile of a live watchdog");
    let w = Watchdog::start(&[]);
    let submit = w.submit_bg(
        &["--name", "install", "--deadline", "200s"],
        &["/bin/sleep", "3600"],
    );
    let rec = wait_spawned(&w.audit_log, "job 1 spawned", |j| j.job == 1);
    let job = job_ident(&rec);
    let mut held = Held::default();
    held.add("job", job);
    let log_before = std::fs::read(&w.audit_log).unwrap();
    let stage_before = snapshot(&w.staging);
    let state_before = snapshot(&w.state_dir);

    let (code, v, text) = reconcile(&w.audit_log, &args(&w));

    assert_eq!(
        std::fs::read(&w.audit_log).unwrap(),
        log_before,
        "the log changed"
    );
    assert_eq!(snapshot(&w.staging), stage_before, "the stage changed");
    assert_eq!(
        snapshot(&w.state_dir),
        state_before,
        "the state dir changed"
    );
    assert!(!held.get("job").has_exited(), "the job died");
    assert_eq!(code, 5, "{v:#}");
    assert_eq!(v["outcome"], "running", "{v:#}");
    assert_eq!(v["watchdog"]["pid"], w.pid(), "{v:#}");
    assert_eq!(v["watchdog"]["liveness"]["state"], "alive", "{v:#}");
    assert_eq!(v["log"]["sealed"], false, "{v:#}");
    let p = named(&v, job.pid, job.start_time).expect("the job is named");
    assert_eq!(p["liveness"]["state"], "alive", "{p:#}");
    assert_eq!(p["roles"], serde_json::json!(["job"]), "{p:#}");
    assert_eq!(
        p["argv"],
        serde_json::json!(["/bin/sleep", "3600"]),
        "{p:#}"
    );
    assert_eq!(p["reaped"], false, "{p:#}");
    assert_eq!(v["stage"]["identity_matches"], true, "{v:#}");
    let checks = v["state_dir"]["checks"].as_array().unwrap();
    for c in ["same_path", "exists", "owner", "mode"] {
        assert!(
            checks.iter().any(|x| x["check"] == c && x["ok"] == true),
            "{c}: {checks:#?}"
        );
    }
    assert!(text.contains("RUNNING"), "{text}");
    assert!(
        text.contains(&format!("ls -l /proc/{}/exe", job.pid)),
        "{text}"
    );
    // With a cgroup (auto finds one here) the job is a live member of the
    // action's group, listed by pid and start time; the recovery command is
    // named, for once the watchdog is gone, but no group reason is given
    // while the watchdog owns its action.
    if v["containment"]["mode"] == "cgroup" {
        let g = &v["group"];
        assert_eq!(g["now"]["state"], "present", "{g:#}");
        assert!(
            g["members"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["pid"] == job.pid
                    && m["start_time"] == job.start_time
                    && m["alive"] == true),
            "{g:#}"
        );
        assert!(v["recover_command"].is_string(), "{v:#}");
        assert!(text.contains("once the watchdog is gone"), "{text}");
        assert!(
            !reason_list(&v).contains(&"group_members_alive".into()),
            "{v:#}"
        );
    }
    // The same log with its chain broken names the same live watchdog, but
    // nobody can trust it to be this action's: review, not "wait for it".
    let copy = w.scratch.path("tampered.jsonl");
    let mut lines: Vec<Vec<u8>> = log_before
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    let at = lines[1].iter().position(|&b| b == b'{').unwrap() + 1;
    lines[1].insert(at, b' ');
    std::fs::write(&copy, lines.concat()).unwrap();
    let (code, v, _) = reconcile(&copy, &[]);
    assert_eq!(code, 6, "{v:#}");
    assert_eq!(v["outcome"], "review", "{v:#}");
    assert!(reason_list(&v).contains(&"tampered".to_string()), "{v:#}");
    assert_eq!(v["watchdog"]["liveness"]["state"], "alive", "{v:#}");

    // Cleanup: the test's own stop (the watchdog stops the job), then close.
    let _ = w.stop();
    let _ = output_within(submit, PATIENCE);
    assert!(
        wait_readable(held.get("job"), PATIENCE),
        "the stop did not end the job"
    );
}

#[test]
fn sealed_log_is_delete_allowed_and_a_changed_stage_is_review() {
    require_pid_ns!("reconcile of a sealed log");
    let mut w = Watchdog::start(&[]);
    let out = w.submit(&["--name", "install"], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let staging = w.staging.to_str().unwrap().to_string();
    let (vcode, verdict) = w.verify(&["--staging", &staging]);
    assert_eq!(vcode, 0, "{verdict:#}");

    let (code, v, text) = reconcile(&w.audit_log, &["--staging", &staging]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["outcome"], "delete_allowed", "{v:#}");
    assert_eq!(v["verify"]["verdict"], verdict["verdict"], "{v:#}");
    assert_eq!(v["log"]["sealed"], true, "{v:#}");
    assert_eq!(v["log"]["head"], verdict["head"], "{v:#}");
    assert_eq!(v["watchdog"]["liveness"]["state"], "gone", "{v:#}");
    assert_eq!(v["stage"]["content_matches"], true, "{v:#}");
    assert!(text.contains("DELETE ALLOWED"), "{text}");
    if v["containment"]["mode"] == "cgroup" {
        // Removed at close, as the log says: gone, and no reason for it.
        assert_eq!(v["group"]["now"]["state"], "gone", "{v:#}");
        assert_eq!(v["group"]["removed_at_close"], true, "{v:#}");
        assert!(v["recover_command"].is_null(), "{v:#}");
    }

    // Without --staging the recorded stage is not checked: review.
    let (code, v, _) = reconcile(&w.audit_log, &[]);
    assert_eq!(code, 6, "{v:#}");
    assert!(
        reason_list(&v).contains(&"stage_not_checked".into()),
        "{v:#}"
    );

    // The stage changed after the seal: review, naming the stage.
    std::fs::write(w.staging.join("runtime.bin"), b"native runtimf").unwrap();
    let (code, v, text) = reconcile(&w.audit_log, &["--staging", &staging]);
    assert_eq!(code, 6, "{v:#}");
    assert_eq!(v["outcome"], "review", "{v:#}");
    assert!(reason_list(&v).contains(&"stage_differs".into()), "{v:#}");
    assert_eq!(v["stage"]["content_matches"], false, "{v:#}");
    assert!(text.contains("stage_differs"), "{text}");
}

#[test]
fn lost_watchdog_leaves_a_setsid_survivor_for_review() {
    require_pid_ns!("reconcile after a watchdog SIGKILL");
    // Without containment (with a cgroup the survivor is a live member of
    // the action's group: running, and recover's business; tests/suite/recover.rs).
    let mut w = Watchdog::start(&["--contain", "none"]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let argv = vec![
        python().to_string(),
        fixture("tree.py"),
        "--oracle".into(),
        oracle.arg().to_string(),
        "--shape".into(),
        "escapee".into(),
        "--then".into(),
        "wait".into(),
    ];
    let submit = w.submit_bg(&["--name", "install", "--deadline", "200s"], &strs(&argv));
    let (members, _) = oracle.wait_ready(PATIENCE);
    // Pidfds the test holds on both: dropped (even by a failing assert),
    // they SIGKILL whatever is still alive.
    let held = Held::bind_all(&members);
    let leader = members.iter().find(|m| m.role == "root").unwrap().clone();
    let escapee = members
        .iter()
        .find(|m| m.role == "escapee")
        .unwrap()
        .clone();
    let rec = wait_spawned(&w.audit_log, "job 1 spawned", |j| j.job == 1);
    assert_eq!(job_ident(&rec).pid, leader.pid);
    // SIGKILL through the pidfd the test opened on the watchdog it started.
    w.signal(Signal::SIGKILL);
    let st = w.wait(PATIENCE);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
    assert!(
        wait_readable(held.get("root"), PATIENCE),
        "the job leader outlived the watchdog (PDEATHSIG)"
    );
    assert!(
        !held.get("escapee").has_exited(),
        "the escapee died too early"
    );
    let log_before = std::fs::read(&w.audit_log).unwrap();

    let (code, v, text) = reconcile(&w.audit_log, &args(&w));

    assert_eq!(std::fs::read(&w.audit_log).unwrap(), log_before);
    assert!(
        !held.get("escapee").has_exited(),
        "reconcile touched the survivor"
    );
    assert_eq!(code, 6, "{v:#}");
    assert_eq!(v["outcome"], "review", "{v:#}");
    let rs = reason_list(&v);
    for want in ["watchdog_lost", "no_receipt", "run_processes_alive"] {
        assert!(rs.contains(&want.to_string()), "{want}: {v:#}");
    }
    assert_eq!(v["watchdog"]["liveness"]["state"], "gone", "{v:#}");
    assert_eq!(v["containment"]["mode"], "none", "{v:#}");
    assert!(
        v["group"].is_null() && v["recover_command"].is_null(),
        "{v:#}"
    );
    assert!(text.contains("group     none"), "{text}");
    assert!(!text.contains("rea-watchdog recover"), "{text}");
    let p = named(&v, leader.pid, leader.start_time).expect("the job leader is named");
    assert_eq!(p["liveness"]["state"], "gone", "{p:#}");
    assert_eq!(p["argv"], serde_json::json!(argv), "{p:#}");
    assert_eq!(p["reaped"], false, "{p:#}");
    // No record names the grandchild; the report says unnamed ones may
    // exist, and the environment scan finds it.
    assert!(
        named(&v, escapee.pid, escapee.start_time).is_none(),
        "{v:#}"
    );
    assert_eq!(v["unnamed"]["may_exist"], true, "{v:#}");
    let found = v["unnamed"]["by_environment"].as_array().unwrap();
    assert!(
        found
            .iter()
            .any(|p| p["pid"] == escapee.pid && p["start_time"] == escapee.start_time),
        "{v:#}"
    );
    assert!(text.contains("watchdog_lost"), "{text}");
    assert!(
        text.contains(&format!("ls -l /proc/{}/exe", escapee.pid)),
        "{text}"
    );
    // The test's own cleanup: the survivor it started, through its pidfd.
    assert_eq!(held.kill_alive(), 1);
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    assert!(oracle.wait_eof(PATIENCE));
    let out = output_within(submit, PATIENCE);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
}

#[test]
fn torn_and_tampered_logs_are_review() {
    require_pid_ns!("reconcile of torn and tampered logs");
    let mut w = Watchdog::start(&[]);
    let out = w.submit(&["--name", "install"], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let data = std::fs::read(&w.audit_log).unwrap();
    let staging = w.staging.to_str().unwrap().to_string();

    // Cut in the middle of the receipt line.
    let last_nl = data[..data.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap();
    let cut = last_nl + 1 + (data.len() - last_nl) / 2;
    let torn = w.scratch.path("torn.jsonl");
    std::fs::write(&torn, &data[..cut]).unwrap();
    let (code, v, text) = reconcile(&torn, &["--staging", &staging]);
    assert_eq!(code, 6, "{v:#}");
    let rs = reason_list(&v);
    assert!(rs.contains(&"torn_tail".into()), "{v:#}");
    assert!(!rs.contains(&"tampered".into()), "{v:#}");
    assert_eq!(
        v["log"]["torn_tail_bytes"],
        (cut - last_nl - 1) as u64,
        "{v:#}"
    );
    assert_eq!(v["log"]["sealed"], false, "{v:#}");
    assert!(text.contains("torn tail"), "{text}");

    // One edited byte in line 2 (a digit of its mono_ns): the chain breaks
    // at line 3, and the report says so.
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let mut edited = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let mut l = l.to_vec();
        if i == 1 {
            let at = l.windows(10).position(|x| x == b"\"mono_ns\":").unwrap() + 10;
            l[at] = if l[at] == b'1' { b'2' } else { b'1' };
        }
        edited.extend_from_slice(&l);
        if i + 1 < lines.len() {
            edited.push(b'\n');
        }
    }
    let tampered = w.scratch.path("tampered.jsonl");
    std::fs::write(&tampered, &edited).unwrap();
    let (code, v, text) = reconcile(&tampered, &["--staging", &staging]);
    assert_eq!(code, 6, "{v:#}");
    assert!(reason_list(&v).contains(&"tampered".into()), "{v:#}");
    assert_eq!(v["log"]["chain_break"]["line"], 3, "{v:#}");
    assert_eq!(v["log"]["intact_through"], 2, "{v:#}");
    assert_eq!(v["verify"]["status"], "tampered", "{v:#}");
    assert!(text.contains("BREAKS at line 3"), "{text}");
}
