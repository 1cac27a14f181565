//! The controller's whole flow over a real OpenSSH
//! server (`rea_client.ssh`), and every SSH fault ending in the seed's
//! decision, with an unrelated sibling alive on the "remote" side.
//!
//! Each test runs `fixtures/ssh_world.py` inside a network namespace of its
//! own (`unshare --net`): it brings `lo` up there, generates a host key and
//! a client key, starts `/usr/sbin/sshd -D` on 127.0.0.1:2222 (as its child,
//! dying with it), runs the flow through the real `ssh` and `scp`, stops
//! sshd and prints what happened as one JSON line. The namespace ends with
//! its last process; the keys, the stage and the logs are in the test's
//! Scratch, removed on drop; all of it runs inside tools/test's PID
//! namespace. Oracles: the harness's and the watchdog's pidfds (held by the
//! fixture, bound by pid and start time), the audit logs, exit statuses,
//! and what the remote harness itself recorded (signals, EOF on stdin,
//! failed writes to stdout) in a file outside the stage.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::harness::*;
use serde_json::Value;

const SSHD: &str = "/usr/sbin/sshd";

/// The stage's layout (rea_client.ssh.Plan.layout): `rea-dir` (docs/stage.md,
/// the default); `REA_SSH_LAYOUT=flat` runs the same scenarios with the
/// binaries at the stage's top and the state and log outside it, for a
/// build whose `rea-stage begin` takes plain names only.
fn layout() -> String {
    std::env::var("REA_SSH_LAYOUT").unwrap_or_else(|_| "rea-dir".into())
}

/// One run of the fixture: its JSON, the sibling (still held) and the scratch.
struct World {
    v: Value,
    sibling: Sibling,
    _scratch: Scratch,
}

fn world(scenario: &str) -> World {
    world_with(scenario, false)
}

/// `tty`: the harness's ssh gets a pty (`-tt`).
fn world_with(scenario: &str, tty: bool) -> World {
    assert!(
        Path::new(SSHD).exists(),
        "{SSHD} is missing: install openssh-server (tools/test and .ci/run do)"
    );
    let scratch = Scratch::new();
    let sibling = Sibling::start();
    let bin_dir = Path::new(watchdog_bin()).parent().unwrap().to_path_buf();
    // The install phase runs exactly the sibling's argv (REA_HOPPER_SLEEP
    // in its environment ends it): same name, same uid, not the action's.
    let install = serde_json::json!([python(), fixture("hopper.py")]).to_string();
    let child = Command::new("unshare")
        .args(["--net", "--"])
        .arg(python())
        .arg(fixture("ssh_world.py"))
        .arg("--dir")
        .arg(scratch.path("world"))
        .args(["--scenario", scenario, "--bin-dir"])
        .arg(&bin_dir)
        .arg("--fixtures")
        .arg(format!("{}/fixtures", env!("CARGO_MANIFEST_DIR")))
        .args(["--install-argv", &install])
        .args(["--layout", &layout()])
        .args(if tty { &["--tty"][..] } else { &[][..] })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare --net python3 fixtures/ssh_world.py");
    let out = output_within(child, PATIENCE * 5);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no JSON from ssh_world.py ({e}): {stdout}\n{stderr}"));
    assert!(
        out.status.success() && v.get("error").is_none(),
        "ssh_world.py {scenario}: {}\n{stdout}\n{stderr}",
        out.status
    );
    eprintln!("{scenario}: {}", serde_json::to_string_pretty(&v).unwrap());
    World {
        v,
        sibling,
        _scratch: scratch,
    }
}

impl World {
    fn outcome(&self) -> &Value {
        &self.v["outcome"]
    }

    fn decision(&self) -> &str {
        self.outcome()["decision"].as_str().unwrap_or("?")
    }

    /// The events the remote harness recorded, by name.
    fn saw(&self, event: &str) -> bool {
        self.events().iter().any(|e| e["event"] == event)
    }

    fn events(&self) -> Vec<Value> {
        self.v["events"].as_array().cloned().unwrap_or_default()
    }

    fn signals(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "signal")
            .map(|e| e["signal"].as_str().unwrap_or("?").to_string())
            .collect()
    }

    /// Both ended: the oracle is the fixture's pidfds.
    fn assert_all_ended(&self) {
        for who in ["harness", "watchdog"] {
            assert_eq!(
                self.v["ended"][who], true,
                "the {who} did not exit: {}",
                self.v
            );
        }
    }

    /// Nothing removed or discarded, the stage still there.
    fn assert_review_kept(&self) {
        assert_eq!(self.decision(), "review", "{}", self.v);
        assert!(self.outcome()["remove"].is_null(), "remove was sent");
        assert!(self.outcome()["discard"].is_null(), "discard was sent");
        assert_eq!(self.v["stage_exists"], true, "the stage is gone");
        let r = &self.outcome()["reconcile"];
        assert!(
            [0, 5, 6].contains(&r["exit_code"].as_i64().unwrap_or(-1)),
            "reconcile over a new connection did not answer: {r}"
        );
    }

    fn verify_now(&self) -> (i32, Value) {
        let stage = self.v["stage"].as_str().unwrap();
        verify_log(
            Path::new(self.v["audit_log"].as_str().unwrap()),
            &["--staging", stage],
        )
    }
}

#[test]
fn success_is_removed_by_rea_stage_remove() {
    require_pid_ns!("ssh::success_is_removed_by_rea_stage_remove");
    let w = world("success");
    let o = w.outcome();
    assert_eq!(
        o["verify_remote"]["verdict"], "delete_allowed",
        "remote verify --staging: {}",
        o["verify_remote"]
    );
    assert_eq!(w.decision(), "removed", "{}", w.v);
    assert_eq!(o["closed"]["exit_code"], 0);
    // The fetched log's head is the one the close printed, its chain intact.
    let head = o["head"].as_str().unwrap();
    let local = Path::new(o["local_log"].as_str().unwrap());
    let (code, v) = verify_log(local, &["--expect-head", head]);
    assert_eq!(v["head"], head, "{v}");
    assert_eq!(v["sealed"], true, "{v}");
    // The copy is away from its stage: kept for that one reason only.
    assert!(
        code == 0 || reason_codes(&v) == ["staging_not_checked"],
        "{v}"
    );
    assert_eq!(o["remove"]["exit"], 0, "{}", o["remove"]);
    assert_eq!(o["remove"]["stdout"]["outcome"], "removed");
    assert_eq!(o["remove"]["verify"]["result"], "removed");
    assert_eq!(w.v["stage_exists"], false, "0 left: the stage is gone");
    // The harness ended on the EOF the controller gave it; no signal.
    assert!(w.saw("stdin_eof"), "{:?}", w.events());
    assert!(w.signals().is_empty(), "{:?}", w.signals());
    w.assert_all_ended();
    w.sibling.assert_alive();
}

#[test]
fn a_cut_upload_is_discarded() {
    require_pid_ns!("ssh::a_cut_upload_is_discarded");
    let w = world("upload-cut");
    let o = w.outcome();
    let cut = w.v["cut_at_bytes"].as_u64().unwrap();
    assert!(cut > 0 && cut < 16 << 20, "cut at {cut} bytes");
    assert_ne!(o["upload_exit"], 0);
    assert_eq!(w.decision(), "discarded", "{}", w.v);
    assert_eq!(o["discard"]["exit"], 0, "{}", o["discard"]);
    assert_eq!(o["discard"]["verify"]["result"], "discarded");
    assert!(o["harness_exit"].is_null(), "the harness ran");
    assert_eq!(w.v["stage_exists"], false);
    w.sibling.assert_alive();
}

#[test]
fn local_ssh_killed_mid_rehearsal_is_review_with_the_stage_kept() {
    require_pid_ns!("ssh::local_ssh_killed_mid_rehearsal_is_review_with_the_stage_kept");
    let w = world("ssh-kill");
    assert_eq!(w.outcome()["harness_exit"], -9, "{}", w.v);
    w.assert_review_kept();
    w.assert_all_ended();
    // Without a pty sshd signals nothing: the harness reads EOF on stdin,
    // and its next write (the rehearsal's end, 5 s on) fails: EPIPE.
    assert!(w.saw("stdin_eof"), "{:?}", w.events());
    assert!(w.saw("stdout_error"), "{:?}", w.events());
    assert!(!w.signals().contains(&"SIGHUP".into()), "{:?}", w.signals());
    w.sibling.assert_alive();
}

#[test]
fn local_ssh_killed_with_a_pty_hangs_up_the_harness() {
    require_pid_ns!("ssh::local_ssh_killed_with_a_pty_hangs_up_the_harness");
    let w = world_with("ssh-kill", true);
    assert_eq!(w.outcome()["harness_exit"], -9, "{}", w.v);
    w.assert_review_kept();
    w.assert_all_ended();
    // With a pty sshd closes its master: the kernel hangs up the harness
    // (SIGHUP to the session's leader); the watchdog, in a session of its
    // own, is not reached, and the action ends as the harness closes it.
    assert!(w.signals().contains(&"SIGHUP".into()), "{:?}", w.events());
    assert!(w.saw("closed"), "{:?}", w.events());
    w.sibling.assert_alive();
}

#[test]
fn a_network_cut_past_server_alive_is_review_with_the_stage_kept() {
    require_pid_ns!("ssh::a_network_cut_past_server_alive_is_review_with_the_stage_kept");
    let w = world("net-cut");
    assert_eq!(w.outcome()["harness_exit"], 255, "{}", w.v);
    let gave_up = w.v["ssh_gave_up_after_s"].as_f64().unwrap();
    assert!(gave_up >= 1.0, "ssh gave up after {gave_up} s");
    w.assert_review_kept();
    w.assert_all_ended();
    assert!(w.saw("stdin_eof"), "{:?}", w.events());
    assert!(!w.signals().contains(&"SIGHUP".into()), "{:?}", w.signals());
    w.sibling.assert_alive();
}

#[test]
fn the_remote_harness_killed_is_root_lost() {
    require_pid_ns!("ssh::the_remote_harness_killed_is_root_lost");
    let w = world("harness-kill");
    w.assert_review_kept();
    w.assert_all_ended();
    let (code, v) = w.verify_now();
    assert_eq!(code, 1, "{v}");
    assert!(reason_codes(&v).contains(&"root_lost".into()), "{v}");
    w.sibling.assert_alive();
}

#[test]
fn the_watchdog_killed_is_review() {
    require_pid_ns!("ssh::the_watchdog_killed_is_review");
    let w = world("watchdog-kill");
    w.assert_review_kept();
    assert_eq!(w.outcome()["harness_exit"], 3, "{}", w.v);
    assert!(w.saw("failed"), "{:?}", w.events());
    assert_eq!(w.outcome()["reconcile"]["outcome"], "review");
    w.assert_all_ended();
    w.sibling.assert_alive();
}

#[test]
fn remote_arguments_arrive_byte_for_byte_and_a_wrong_host_key_is_refused() {
    require_pid_ns!("ssh::remote_arguments_arrive_byte_for_byte_and_a_wrong_host_key_is_refused");
    let w = world("quoting");
    assert_eq!(w.v["exit"], 0, "{}", w.v);
    assert_eq!(w.v["back"], w.v["sent"], "shlex.quote through ssh and sh");
    let argv: Vec<&str> = w.v["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for opt in [
        "BatchMode=yes",
        "IdentitiesOnly=yes",
        "StrictHostKeyChecking=yes",
        "ServerAliveInterval=15",
        "ServerAliveCountMax=3",
        "ConnectTimeout=10",
    ] {
        assert!(argv.contains(&opt), "{opt} missing from {argv:?}");
    }
    assert_eq!(w.v["wrong_host_key_exit"], 255, "{}", w.v);
    assert!(
        w.v["wrong_host_key_stderr"]
            .as_str()
            .unwrap()
            .contains("Host key verification failed"),
        "{}",
        w.v
    );
    w.sibling.assert_alive();
}
