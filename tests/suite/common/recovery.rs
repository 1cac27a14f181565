//! Support for the recovery tests (`tests/suite/recover.rs`): a watchdog lost
//! in cgroup mode with survivors in its group, a guard that always ends
//! and removes a group the test saw (through its *recorded* inode), and
//! running `reconcile`, `recover` and `verify` with every JSON they print
//! checked against its schema.

use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::OnceLock;

use nix::sys::signal::Signal;
use serde_json::Value;

use super::harness::*;
use super::schema::{assert_valid, compile};
use super::stop::*;

fn validator(name: &'static str) -> &'static jsonschema::Validator {
    static RECONCILE: OnceLock<jsonschema::Validator> = OnceLock::new();
    static RECORD: OnceLock<jsonschema::Validator> = OnceLock::new();
    static VERDICT: OnceLock<jsonschema::Validator> = OnceLock::new();
    let cell = match name {
        "reconcile" => &RECONCILE,
        "recovery-record" => &RECORD,
        _ => &VERDICT,
    };
    cell.get_or_init(|| compile(name))
}

pub use super::harness::GroupGuard;

/// The tree a lost watchdog leaves behind: a 3-deep chain under the job's
/// leader, three setsid escapees, and the "Hopper" (the sibling's argv).
pub const LOST_SHAPES: &[&str] = &["chain:3", "escapee", "escapee", "escapee", "hopper"];

/// A cgroup-mode watchdog SIGKILLed while its job's tree ran: the leader
/// died by PDEATHSIG, everything else survives in the group.
pub struct Lost {
    pub w: Watchdog,
    pub oracle: Oracle,
    pub members: Vec<Member>,
    /// Pidfds on every member (the leader is already gone); dropped, they
    /// SIGKILL whatever is left.
    pub held: Held,
    pub submit: Option<Child>,
    pub guard: GroupGuard,
    /// Members alive once the watchdog is gone (the leader is not).
    pub expected_survivors: usize,
}

impl Lost {
    /// Starts the watchdog (`--contain cgroup` plus `extra`), submits the
    /// tree, and (unless `kill` is false) SIGKILLs the watchdog.
    pub fn new(sibling: &Sibling, extra: &[&str], kill: bool) -> Lost {
        Lost::with(sibling, extra, &[], |_| {}, kill)
    }

    /// [`Lost::new`] with `more` shapes after [`LOST_SHAPES`] (one process
    /// each) and `tune` applied to the watchdog's command (its environment).
    pub fn with(
        sibling: &Sibling,
        extra: &[&str],
        more: &[&str],
        tune: impl FnOnce(&mut Command),
        kill: bool,
    ) -> Lost {
        let mut flags = vec!["--contain", "cgroup"];
        flags.extend_from_slice(extra);
        let w = Watchdog::start_with(Scratch::new(), None, &flags, tune);
        let guard = GroupGuard::of(&w.audit_log).expect("a cgroup-mode containment record");
        let mut oracle = Oracle::new(&w.scratch, "oracle");
        let mut argv = vec![
            python().to_string(),
            fixture("tree.py"),
            "--oracle".into(),
            oracle.arg().to_string(),
        ];
        for s in LOST_SHAPES.iter().chain(more) {
            argv.extend(["--shape".to_string(), s.to_string()]);
        }
        argv.extend(["--then".to_string(), "wait".to_string()]);
        let submit = w.submit_bg(&["--name", "install", "--deadline", "200s"], &strs(&argv));
        let (members, _) = oracle.wait_ready(PATIENCE);
        let held = Held::bind_all(&members);
        let hopper = members.iter().find(|m| m.role == "hopper").unwrap();
        let argv_now = std::fs::read(format!("/proc/{}/cmdline", hopper.pid)).unwrap();
        assert_eq!(
            argv_now,
            sibling.argv(),
            "the job's hopper has the sibling's argv"
        );
        wait_spawned(&w.audit_log, "job 1 spawned", |j| j.job == 1);
        let mut lost = Lost {
            w,
            oracle,
            members,
            held,
            submit: Some(submit),
            guard,
            expected_survivors: LOST_SHAPES.len() + 2 + more.len(),
        };
        if kill {
            lost.kill_watchdog();
        }
        lost
    }

    /// SIGKILL through the pidfd the test holds on the watchdog it started.
    pub fn kill_watchdog(&mut self) {
        self.w.signal(Signal::SIGKILL);
        let st = self.w.wait(PATIENCE);
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
        assert!(
            wait_readable(self.held.get("root"), PATIENCE),
            "the job's leader outlived the watchdog (PDEATHSIG)"
        );
        let alive = self.survivors().len();
        assert_eq!(alive, self.expected_survivors, "chain:3 is three processes");
    }

    /// The members still alive.
    pub fn survivors(&self) -> Vec<&Member> {
        self.held.alive()
    }

    pub fn staging(&self) -> String {
        self.w.staging.to_str().unwrap().to_string()
    }

    /// The submit client, which ends once its watchdog is gone.
    pub fn submit_output(&mut self) -> Output {
        output_within(self.submit.take().expect("submit taken"), PATIENCE)
    }
}

/// `rea-audit reconcile LOG --json ARGS` → (exit code, report), the report
/// validated against reconcile.schema.json; and the human report.
pub fn reconcile(log: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(audit_bin())
        .arg("reconcile")
        .arg(log)
        .arg("--json")
        .args(args)
        .output()
        .expect("run rea-audit reconcile");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "reconcile printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_valid(validator("reconcile"), &v, "reconcile --json");
    let code = out.status.code().unwrap_or(-1);
    assert_eq!(v["exit_code"], code, "{v:#}");
    let text = Command::new(audit_bin())
        .arg("reconcile")
        .arg(log)
        .args(args)
        .output()
        .expect("run rea-audit reconcile");
    assert_eq!(text.status.code(), Some(code));
    (code, v, String::from_utf8(text.stdout).unwrap())
}

/// What `rea-watchdog recover` did.
pub struct Recovered {
    pub code: i32,
    /// Its one JSON line on stdout.
    pub json: Value,
    pub stderr: String,
}

/// `rea-watchdog recover LOG --audit-log NEW [--staging DIR]` (bounded).
pub fn recover(log: &Path, new: &Path, staging: Option<&str>) -> Recovered {
    let mut c = Command::new(watchdog_bin());
    c.arg("recover").arg(log).arg("--audit-log").arg(new);
    if let Some(s) = staging {
        c.args(["--staging", s]);
    }
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rea-watchdog recover");
    let out = output_within(child, PATIENCE);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "recover printed no JSON line ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let code = out.status.code().unwrap_or(-1);
    assert_eq!(json["exit_code"], code, "{json:#}\n{stderr}");
    Recovered { code, json, stderr }
}

/// Every line of a recovery log, each checked against
/// recovery-record.schema.json.
pub fn recovery_records(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_valid(validator("recovery-record"), &v, "recovery record");
            v
        })
        .collect()
}

/// The recovery log, typed (every line is also checked against
/// recovery-record.schema.json, as [`recovery_records`] does).
pub fn recovery_log(log: &Path) -> super::typed::Log<rea::kinds::recovery::RecoveryEvent> {
    recovery_records(log);
    super::typed::Log::read(log)
}

/// `rea-audit verify NEW --json ARGS` for a recovery log → (exit code,
/// verdict), the verdict checked against recovery-verdict.schema.json and
/// every record against recovery-record.schema.json.
pub fn verify_recovery(log: &Path, args: &[&str]) -> (i32, Value) {
    recovery_records(log);
    let out = Command::new(audit_bin())
        .arg("verify")
        .arg(log)
        .arg("--json")
        .args(args)
        .output()
        .expect("run rea-audit verify");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_valid(validator("recovery-verdict"), &v, "recovery verdict");
    let code = out.status.code().unwrap_or(-1);
    assert_eq!(v["exit_code"], code, "{v:#}");
    (code, v)
}

/// The reason codes of a report, verdict or recover answer.
pub fn codes(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["code"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}
