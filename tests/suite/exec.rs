//! `rea-watchdog exec` (docs/cli.md, issue 5 criterion 6): the watchdog and the
//! controller in one process, exiting like timeout(1): ARGV's status, 128+N
//! when ARGV was killed by signal N, 124 when the action was stopped, 130
//! for Ctrl-C (SIGINT to exec: a clean stop), 125 for its own failure,
//! 126/127 when ARGV cannot be executed or found. Each code is tested, and
//! each sealed log is verified.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::exec::Exec;
use common::harness::*;
use common::typed::{all, first, Log};
use nix::sys::signal::Signal;
use rea::kinds::watchdog::{Event, Status};
use rea::protocol::RefusalReason;
use serde_json::Value;

impl Exec {
    /// The log is sealed and `verify` says `code`; returns the verdict.
    fn verify(&self, code: i32) -> Value {
        let (got, v) = verify_log(&self.log, &[]);
        assert_eq!(got, code, "{v:#}");
        v
    }

    /// exec's private state directory is gone after it exits.
    fn assert_state_removed(&self) {
        let left: Vec<_> = std::fs::read_dir(self.scratch.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("rea-exec."))
            .collect();
        assert!(left.is_empty(), "state directory left: {left:?}");
    }
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `--json-status`'s file, checked against its schema.
fn json_status(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "{text:?}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let errors = common::schema::schema_errors(common::schema::exec_status_validator(), &v);
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
    v
}

/// The head exec printed on stderr (`rea-watchdog: sealed head HEX`).
fn printed_head(out: &Output) -> String {
    let err = stderr_of(out);
    let heads: Vec<&str> = err
        .lines()
        .filter_map(|l| l.strip_prefix("rea-watchdog: sealed head "))
        .collect();
    assert_eq!(heads.len(), 1, "{err}");
    heads[0].to_string()
}

fn exec_status(log: &Log) -> Status {
    first!(log, Event::JobExited).status
}

#[test]
fn exec_exit_0_when_argv_succeeds() {
    require_pid_ns!("exec_exit_0");
    let e = Exec::new();
    let out = e.run(&[], &["/bin/true"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    let v = e.verify(0);
    assert_eq!(v["outcome"], "closed");
    e.assert_state_removed();
}

#[test]
fn exec_exit_n_is_argvs_status_and_output_passes_through() {
    require_pid_ns!("exec_exit_n");
    let e = Exec::new();
    let argv = [
        python(),
        &fixture("launcher.py"),
        "--print",
        "to stdout",
        "--stderr",
        "to stderr",
        "--exit",
        "7",
    ];
    let out = e.run(&[], &argv);
    assert_eq!(code(&out), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to stdout\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to stderr\n"));
    // A non-zero exit is ARGV's business: the action itself closed clean.
    let v = e.verify(0);
    assert_eq!(v["outcome"], "closed");
    assert_eq!(exec_status(&e.typed()), Status::Code(7));
}

#[test]
fn exec_exit_128_plus_n_when_argv_is_killed_by_a_signal() {
    require_pid_ns!("exec_exit_128_plus_n");
    let e = Exec::new();
    // ARGV ends itself with SIGTERM, through a pidfd on itself.
    let script = "import os, signal; signal.pidfd_send_signal(os.pidfd_open(os.getpid()), \
                  signal.SIGTERM); import time; time.sleep(10)";
    let out = e.run(&[], &[python(), "-c", script]);
    assert_eq!(code(&out), Some(128 + 15), "{out:?}");
    e.verify(0);
    assert_eq!(exec_status(&e.typed()), Status::Signal(15));
}

#[test]
fn exec_exit_124_on_deadline() {
    require_pid_ns!("exec_exit_124_deadline");
    let e = Exec::new();
    let argv = [python(), &fixture("launcher.py"), "--sleep", "60"];
    let out = e.run(&["--deadline", "1s"], &argv);
    assert_eq!(code(&out), Some(124), "{out:?}");
    let v = e.verify(0);
    assert_eq!(v["stop_reason"], "deadline");
}

#[test]
fn exec_exit_124_when_argv_leaves_orphans() {
    require_pid_ns!("exec_exit_124_orphans");
    let e = Exec::new();
    let mut oracle = Oracle::new(&e.scratch, "oracle");
    let argv = [
        python(),
        &fixture("tree.py"),
        "--oracle",
        oracle.arg(),
        "--shape",
        "escapee",
        "--shape",
        "doublefork",
        "--shape",
        "termignore",
        "--then",
        "exit",
    ];
    let child = e.spawn(&[], &argv);
    let (members, _) = oracle.wait_ready(PATIENCE);
    // The root exits right after its ready line and the watchdog stops its
    // orphans at once: some may be gone before the test can bind them (the
    // oracle FIFO's EOF still covers every member).
    let orphans: Vec<Member> = members.into_iter().filter(|m| m.role != "root").collect();
    let held = Held::bind_live(&orphans);
    let out = output_within(child, PATIENCE);
    assert_eq!(code(&out), Some(124), "{out:?}");
    assert!(oracle.wait_eof(PATIENCE), "an orphan of ARGV survived exec");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    let v = e.verify(0);
    assert_eq!(v["stop_reason"], "abandoned");
}

/// This process's process group and session (fields 5 and 6 of stat).
fn pgrp_and_session(pid: i32) -> (i32, i32) {
    let data = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
    let close = data.iter().rposition(|&b| b == b')').unwrap();
    let rest = String::from_utf8_lossy(&data[close + 2..]).into_owned();
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

#[test]
fn exec_exit_130_on_sigint_is_a_clean_stop() {
    require_pid_ns!("exec_exit_130_sigint");
    let e = Exec::new();
    let mut oracle = Oracle::new(&e.scratch, "oracle");
    let argv = [
        python(),
        &fixture("tree.py"),
        "--oracle",
        oracle.arg(),
        "--shape",
        "termignore",
        "--shape",
        "chain:3",
    ];
    let child = e.spawn(&[], &argv);
    let (members, _) = oracle.wait_ready(PATIENCE);
    let held = Held::bind_all(&members);
    // exec stays in its caller's process group and session, so a terminal's
    // Ctrl-C reaches it; its job runs in a session of its own.
    let me = std::process::id() as i32;
    assert_eq!(pgrp_and_session(child.id() as i32), pgrp_and_session(me));
    let root = members.iter().find(|m| m.role == "root").unwrap();
    assert_eq!(
        pgrp_and_session(root.pid).1,
        root.pid,
        "the job is its own session"
    );
    // Ctrl-C, delivered to exec alone through its pidfd.
    signal_child(&child, Signal::SIGINT);
    let out = output_within(child, PATIENCE);
    assert_eq!(code(&out), Some(130), "{out:?}");
    assert!(oracle.wait_eof(PATIENCE), "a member survived Ctrl-C");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    let v = e.verify(0);
    assert_eq!(v["stop_reason"], "signal");
    let log = e.typed();
    let first = first!(log, Event::StopTriggered);
    assert!(first.detail.contains("SIGINT"), "{first:?}");
}

#[test]
fn exec_exit_125_on_its_own_failure_launches_nothing() {
    require_pid_ns!("exec_exit_125");
    let e = Exec::new();
    let marker = e.scratch.path("launched");
    let touch = ["/usr/bin/touch", marker.to_str().unwrap()];
    // The audit log exists already (one log per action).
    std::fs::write(&e.log, b"").unwrap();
    let out = e.run(&[], &touch);
    assert_eq!(code(&out), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(
        std::fs::read(&e.log).unwrap(),
        b"",
        "the old log is untouched"
    );
    // A staging directory that does not exist.
    let e2 = Exec::new();
    let out = e2.run(&["--staging", "/nonexistent/staging"], &touch);
    assert_eq!(code(&out), Some(125), "{out:?}");
    // A bad flag.
    let out = e2.run(&["--deadline", "soon"], &touch);
    assert_eq!(code(&out), Some(125), "{out:?}");
    assert!(!marker.exists(), "nothing may be launched");
    e2.assert_state_removed();
}

/// `unshare --pid --fork` without `--mount-proc`: the watchdog is pid 1
/// of a new namespace, but `/proc` is the old one's, where pid 1 and every
/// other number name other processes. It refuses to start, says how to
/// fix it, and creates and launches nothing (it used to bind the outer
/// namespace's pid 1 as its root and end in a bare 125, `spawn_failed`).
#[test]
fn exec_refuses_to_start_under_a_proc_of_another_pid_namespace() {
    require_pid_ns!("exec under a foreign /proc");
    let e = Exec::new();
    let marker = e.scratch.path("launched");
    let exec_in_new_ns = |unshare: &[&str]| {
        Command::new("unshare")
            .args(unshare)
            .arg(watchdog_bin())
            .args(["exec", "--contain", "none", "--audit-log"])
            .arg(&e.log)
            .args(["--", "/usr/bin/touch"])
            .arg(&marker)
            .output()
            .expect("unshare (util-linux)")
    };
    let out = exec_in_new_ns(&["--pid", "--fork"]);
    assert_eq!(code(&out), Some(125), "{out:?}");
    let err = stderr_of(&out);
    assert!(
        err.contains("/proc belongs to another PID namespace"),
        "{err}"
    );
    assert!(err.contains("--mount-proc"), "{err}");
    assert!(!marker.exists(), "nothing may be launched");
    assert!(!e.log.exists(), "nothing is created");
    // The control: the same with --mount-proc runs the command.
    let out = exec_in_new_ns(&["--pid", "--fork", "--mount-proc"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert!(marker.exists());
}

/// A command that cannot be started for a reason other than "not found"
/// or "not executable" (here: the fork refused, the user at its process
/// limit) gets a message naming the reason and the log, not a bare 125.
#[test]
fn exec_says_why_a_command_could_not_be_started() {
    require_pid_ns!("exec at the process limit");
    let e = Exec::new();
    std::fs::set_permissions(e.scratch.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = e.scratch.path("launched");
    // As nobody, whose limit of one process the watchdog itself uses up;
    // the shell is the root controller (the watchdog's parent, same uid).
    let script = format!(
        "prlimit --nproc=1 {} exec --contain none --audit-log {} -- /usr/bin/touch {}",
        watchdog_bin(),
        e.log.display(),
        marker.display()
    );
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(&script)
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(code(&out), Some(125), "{out:?}");
    let err = stderr_of(&out);
    let said = format!(
        "rea-watchdog: could not start command '/usr/bin/touch': spawn_failed (the audit log's \
         job_failed record has the detail: {})",
        e.log.display()
    );
    assert!(err.contains(&said), "{err}");
    assert!(!marker.exists(), "nothing was launched");
    let log = e.typed();
    let failed = all!(log, Event::JobFailed);
    assert_eq!(failed.len(), 1, "{log:#?}");
    assert_eq!(failed[0].reason, RefusalReason::SpawnFailed);
    assert_eq!(failed[0].errno, libc::EAGAIN);
}

/// A bare command name is found on `PATH`, and the program still sees the
/// name as typed for its argv[0] (as execvp gives it under timeout(1), so
/// `yes` says `yes: standard output: Broken pipe`); the record keeps what
/// it got as `argv` and says which file ran as `program`, and `show`
/// says it too. A name with a `/` runs as given, with no `program`.
#[test]
fn a_bare_command_keeps_its_typed_name_and_the_log_says_which_file_ran() {
    require_pid_ns!("exec argv[0]");
    let e = Exec::new();
    let out = e.run(&[], &["cat", "/proc/self/cmdline"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"cat\0/proc/self/cmdline\0", "{out:?}");
    let log = e.typed();
    let spawned = first!(log, Event::JobSpawned);
    assert_eq!(spawned.argv, ["cat", "/proc/self/cmdline"]);
    let program = spawned.program.clone().unwrap_or_default();
    assert!(
        program.starts_with('/') && program.ends_with("/cat"),
        "{spawned:?}"
    );
    e.verify(0);
    let shown = Command::new(audit_bin())
        .arg("show")
        .arg(&e.log)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!("cat /proc/self/cmdline [ran {program}]")),
        "{shown}"
    );

    let e = Exec::new();
    let out = e.run(&[], &[&program, "/proc/self/cmdline"]);
    assert_eq!(
        out.stdout,
        format!("{program}\0/proc/self/cmdline\0").as_bytes()
    );
    let log = e.typed();
    let spawned = first!(log, Event::JobSpawned);
    assert!(spawned.program.is_none(), "{spawned:?}");
}

#[test]
fn exec_exit_126_when_argv_cannot_be_executed() {
    require_pid_ns!("exec_exit_126");
    let e = Exec::new();
    let script = e.scratch.path("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = e.run(&[], &[script.to_str().unwrap()]);
    assert_eq!(code(&out), Some(126), "{out:?}");
    let said = format!(
        "rea-watchdog: failed to run command '{}': Permission denied\n",
        script.display()
    );
    assert!(stderr_of(&out).contains(&said), "{out:?}");
    let log = e.typed();
    let failed = all!(log, Event::JobFailed);
    assert_eq!(failed.len(), 1, "{log:#?}");
    assert_eq!(failed[0].reason, RefusalReason::NotExecutable);
    e.verify(0);
    // A directory cannot be executed either.
    let e2 = Exec::new();
    let out = e2.run(&[], &[e2.scratch.dir.path().to_str().unwrap()]);
    assert_eq!(code(&out), Some(126), "{out:?}");
}

#[test]
fn exec_exit_127_when_argv_is_not_found() {
    require_pid_ns!("exec_exit_127");
    let e = Exec::new();
    let json = e.scratch.path("status.json");
    let out = e.run(
        &["--json-status", json.to_str().unwrap()],
        &["/nonexistent/bin/runtime"],
    );
    assert_eq!(code(&out), Some(127), "{out:?}");
    let said = "rea-watchdog: failed to run command '/nonexistent/bin/runtime': No such file or directory\n";
    assert!(stderr_of(&out).contains(said), "{out:?}");
    let status = json_status(&json);
    assert_eq!(status["exit"], 127);
    assert_eq!(
        status["job"],
        serde_json::json!({"failed": {"reason": "not_found"}})
    );
    let log = e.typed();
    assert_eq!(
        first!(log, Event::JobFailed).reason,
        RefusalReason::NotFound
    );
    e.verify(0);
    let e2 = Exec::new();
    let out = e2.run(&[], &["rea-no-such-command"]);
    assert_eq!(code(&out), Some(127), "{out:?}");
}

#[test]
fn exec_serves_nested_submits_from_argv() {
    require_pid_ns!("exec_nested_submits");
    let e = Exec::new();
    let argv = [
        python(),
        &fixture("phase.py"),
        "--watchdog",
        watchdog_bin(),
        "--launchers",
        "2",
        "--",
        "--print",
        "nested",
    ];
    let out = e.run(&["--deadline", "60s"], &argv);
    assert_eq!(code(&out), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("launcher-1 exited 0") && text.contains("launcher-2 exited 0"));
    let log = e.typed();
    let names: Vec<Option<&str>> = all!(log, Event::JobSpawned)
        .iter()
        .map(|j| j.name.as_deref())
        .collect();
    assert_eq!(names, [None, Some("launcher-1"), Some("launcher-2")]);
    let v = e.verify(0);
    assert_eq!(v["outcome"], "closed");
}

#[test]
fn exec_without_audit_log_writes_a_private_one_and_says_where() {
    require_pid_ns!("exec_default_log");
    let scratch = Scratch::new();
    let out = Command::new(watchdog_bin())
        .args(["exec", "--", "/bin/true"])
        .env("TMPDIR", scratch.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let path = err
        .lines()
        .find_map(|l| l.strip_prefix("rea-watchdog: audit log "))
        .unwrap_or_else(|| panic!("no log path on stderr: {err}"));
    let path = Path::new(path.trim());
    assert!(path.starts_with(scratch.dir.path()), "{path:?}");
    let mode = std::fs::metadata(path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the log is private: {mode:o}");
    let (got, v) = verify_log(path, &[]);
    assert_eq!(got, 0, "{v:#}");
}

#[test]
fn exec_hopper_sibling_survives_its_stops() {
    require_pid_ns!("exec_hopper_sibling");
    let sibling = Sibling::start();
    let e = Exec::new();
    let mut oracle = Oracle::new(&e.scratch, "oracle");
    let argv = [
        python(),
        &fixture("tree.py"),
        "--oracle",
        oracle.arg(),
        "--shape",
        "hopper",
        "--shape",
        "escapee",
    ];
    let child = e.spawn(&["--deadline", "3s"], &argv);
    let (members, _) = oracle.wait_ready(PATIENCE);
    let hopper = members.iter().find(|m| m.role == "hopper").unwrap();
    assert_eq!(
        std::fs::read(format!("/proc/{}/cmdline", hopper.pid)).unwrap(),
        sibling.argv()
    );
    let out = output_within(child, PATIENCE);
    assert_eq!(code(&out), Some(124), "{out:?}");
    assert!(oracle.wait_eof(Duration::from_secs(30)));
    e.verify(0);
    sibling.assert_alive();
}

#[test]
fn a_nested_spawn_that_fails_is_refused_to_its_caller_and_the_action_goes_on() {
    require_pid_ns!("exec_nested_spawn_fails");
    // The job asks for a launcher that does not exist, then exits 0. Only
    // the requester hears of the failure: exec's own job is not stopped
    // and exec exits with the job's status (not 124, not 127).
    let e = Exec::new();
    let script = r#""$0" submit --deadline 5s -- /nonexistent/rea-launcher; echo "submit=$?""#;
    let out = e.run(&[], &["/bin/sh", "-c", script, watchdog_bin()]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("submit=127"), "{text}");
    let log = e.typed();
    let failed = all!(log, Event::JobFailed);
    assert_eq!(failed.len(), 1, "{log:#?}");
    assert_eq!(failed[0].reason, RefusalReason::NotFound);
    assert!(all!(log, Event::StopTriggered).is_empty(), "{log:#?}");
    assert_eq!(exec_status(&log), Status::Code(0));
    let v = e.verify(0);
    assert_eq!(v["outcome"], "closed");
}

/// exec prints the sealed head, and it is SHA-256 of the log's sealed last
/// line (what `verify --expect-head` pins); `--json-status` says the same
/// ending as one object that validates, for a job that exited and for a
/// deadline stop.
#[test]
fn exec_prints_the_sealed_head_and_writes_its_status() {
    use sha2::{Digest, Sha256};
    require_pid_ns!("exec sealed head");
    let e = Exec::new();
    let json = e.scratch.path("status.json");
    let out = e.run(
        &["--json-status", json.to_str().unwrap()],
        &["/bin/sh", "-c", "exit 3"],
    );
    assert_eq!(code(&out), Some(3), "{out:?}");
    let head = printed_head(&out);
    let text = std::fs::read_to_string(&e.log).unwrap();
    let last = text.lines().last().unwrap();
    let want: String = Sha256::digest(last.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(head, want);
    let (got, v) = verify_log(&e.log, &["--expect-head", &head]);
    assert_eq!(got, 0, "{v:#}");
    let status = json_status(&json);
    assert_eq!(status["head"], head.as_str());
    assert_eq!(status["exit"], 3);
    assert_eq!(status["outcome"], "closed");
    assert_eq!(status["quiescent"], true);
    assert_eq!(
        status["job"],
        serde_json::json!({"exited": {"status": {"code": 3}}})
    );
    assert_eq!(status["audit_log"], e.log.to_str().unwrap());
    assert_eq!(status["run"], e.records()[0]["run"]);

    let e = Exec::new();
    let json = e.scratch.path("status.json");
    let out = e.run(
        &["--deadline", "0.2", "--json-status", json.to_str().unwrap()],
        &["/bin/sleep", "60"],
    );
    assert_eq!(code(&out), Some(124), "{out:?}");
    let status = json_status(&json);
    assert_eq!(status["exit"], 124);
    assert_eq!(status["outcome"], "stopped");
    assert_eq!(status["stop_reason"], "deadline");
    assert_eq!(status["head"], printed_head(&out).as_str());
}

/// A `--json-status` that cannot be written is said on stderr; the exit
/// status is still ARGV's, and nothing half-written is left.
#[test]
fn exec_json_status_that_cannot_be_written_is_said() {
    require_pid_ns!("exec json-status unwritable");
    let e = Exec::new();
    let json = e.scratch.path("no-such-dir/status.json");
    let out = e.run(
        &["--json-status", json.to_str().unwrap()],
        &["/bin/sh", "-c", "exit 4"],
    );
    assert_eq!(code(&out), Some(4), "{out:?}");
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!(
            "rea-watchdog: cannot write --json-status {}: ",
            json.display()
        )),
        "{err}"
    );
    assert!(!json.exists());
    e.verify(0);
}
