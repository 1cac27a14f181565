//! The holder scan (issue 14) against real holders: a planted corpus of
//! processes, mounts and loop devices that hold a sealed run's stage, each
//! giving `retain` (`stage_held`) with the holder named, and
//! `delete_allowed` once it is gone. None of the holders is a descendant of
//! the watchdog, and none is ever signalled: each ends when the test closes
//! its stdin, and is checked alive (a held pidfd) after every verification.
//!
//! Run inside a private PID namespace: `tools/test holders::` (its
//! mount namespace is private too, so the mounts made here are seen by
//! nothing outside it; a loop device, which is global, is detached by its
//! guard whatever happens).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;

use common::harness::*;
use common::schema::{assert_valid, compile};
use common::typed::{all, first, Log};
use nix::sys::signal::Signal;
use rea::holders::HolderScan;
use rea::kinds::watchdog::{Event, HoldersScanned};
use rea::process::pidfd::{bind_unwaited_child, VerifiedPidFd};
use rea::stage::log::StageEvent;
use serde_json::Value;

fn holders_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| compile("holders"))
}

/// The close-time holder scan (the first `holders_scanned` record), which
/// must have scanned.
pub(crate) fn scanned(log: &Log) -> &HolderScan {
    match first!(log, Event::HoldersScanned) {
        HoldersScanned::Scanned(s) => s,
        failed => panic!("{}: the holder scan failed: {failed:?}", log.path.display()),
    }
}

/// A process holding something, started by the test (outside any action).
struct Planted {
    child: Child,
    pidfd: VerifiedPidFd,
    stdin: Option<ChildStdin>,
}

impl Planted {
    /// Starts `cmd` (stdin and stdout piped) and waits for its `ready`
    /// line, or (`ready_line` false) only for its exec (a program that
    /// prints nothing, such as a copy of cat).
    fn start(mut cmd: Command, ready_line: bool) -> Planted {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start holder");
        let pidfd = bind_unwaited_child(&child).expect("bind holder");
        let stdin = child.stdin.take();
        if ready_line {
            let out = child.stdout.take().unwrap();
            assert!(wait_readable(&out, PATIENCE), "holder never said ready");
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line).unwrap();
            assert!(line.starts_with("ready "), "holder said {line:?}");
        }
        Planted {
            child,
            pidfd,
            stdin,
        }
    }

    fn holder(how: &str, path: &Path) -> Planted {
        let mut c = Command::new(python());
        c.arg(fixture("holder.py")).arg(how).arg(path);
        Planted::start(c, true)
    }

    fn pid(&self) -> i32 {
        self.pidfd.pid()
    }

    fn assert_alive(&self) {
        assert!(
            !self.pidfd.has_exited(),
            "holder pid {} died: something signalled it",
            self.pid()
        );
    }

    /// Closes its stdin and waits for it to exit 0 on its own.
    fn release(mut self) {
        drop(self.stdin.take());
        let st = wait_child(&mut self.child, PATIENCE);
        assert!(st.success(), "holder {} ended {st:?}", self.pidfd.pid());
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.pidfd.signal(Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// A mount made by the test, unmounted by its guard.
struct Mounted(PathBuf);

impl Mounted {
    fn new(args: &[&str], target: &Path) -> Mounted {
        let st = Command::new("mount")
            .args(args)
            .arg(target)
            .status()
            .unwrap();
        assert!(st.success(), "mount {args:?} {}", target.display());
        Mounted(target.to_path_buf())
    }

    fn release(self) {}
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A loop device bound by the test to a file, detached by its guard.
struct Looped(String);

impl Looped {
    fn new(file: &Path) -> Looped {
        let out = Command::new("losetup")
            .args(["--find", "--show", "--read-only"])
            .arg(file)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        Looped(String::from_utf8(out.stdout).unwrap().trim().to_string())
    }

    fn release(self) {}
}

impl Drop for Looped {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// A watchdog run over a stage uploaded with a subdirectory and a 1 MiB
/// image, closed: a sealed log that is `delete_allowed` for the stage as it is.
fn sealed_run() -> Watchdog {
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    std::fs::create_dir_all(staging.join("sub")).unwrap();
    std::fs::write(staging.join("sub/lib.so"), b"not really a library").unwrap();
    std::fs::write(staging.join("disk.img"), vec![0u8; 1 << 20]).unwrap();
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {});
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 0, "a clean sealed run must be delete_allowed: {v:#}");
    assert_eq!(v["holders"]["holders_total"], 0, "{v:#}");
    w
}

/// `verify --staging` → (exit code, verdict), with the verdict's holder
/// scan validated against the schema.
pub(crate) fn verify_stage(w: &Watchdog) -> (i32, Value) {
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_valid(
        holders_validator(),
        &v["holders"],
        "the verdict's holder scan",
    );
    (code, v)
}

/// The stage is held by `pid` (`how`), named in a `stage_held` reason.
fn assert_held_by(v: &Value, pid: i32, how: &str) {
    assert_eq!(v["verdict"], "retain", "{v:#}");
    assert!(reason_codes(v).contains(&"stage_held".to_string()), "{v:#}");
    let holder = v["holders"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not named as a holder: {v:#}"));
    assert!(
        holder["holds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["how"] == how),
        "pid {pid} not named as holding by {how}: {holder:#}"
    );
    let named = v["reasons"].as_array().unwrap().iter().any(|r| {
        r["code"] == "stage_held"
            && r["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("pid {pid} "))
    });
    assert!(named, "no stage_held reason names pid {pid}: {v:#}");
}

fn assert_mount_held(v: &Value, how: &str) {
    assert_eq!(v["verdict"], "retain", "{v:#}");
    assert!(reason_codes(v).contains(&"stage_held".to_string()), "{v:#}");
    let ms = v["holders"]["mounts"].as_array().unwrap();
    assert!(
        ms.iter().any(|m| m["how"] == how),
        "no mount held by {how}: {v:#}"
    );
}

fn assert_allowed(w: &Watchdog) {
    let (code, v) = verify_stage(w);
    assert_eq!(code, 0, "once the holder is gone: delete_allowed: {v:#}");
    assert_eq!(v["holders"]["holders_total"], 0, "{v:#}");
    assert_eq!(v["holders"]["mounts_total"], 0, "{v:#}");
    assert_eq!(v["holders"]["loops_total"], 0, "{v:#}");
}

/// Plants `how` on `path` of a sealed run's stage: retain naming the
/// holder, alive; released: delete_allowed.
fn corpus_case(how: &str, rel: &str, expect: &str) {
    require_pid_ns!("holder corpus");
    let w = sealed_run();
    let p = Planted::holder(how, &w.staging.join(rel));
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_held_by(&v, p.pid(), expect);
    p.assert_alive();
    p.release();
    assert_allowed(&w);
}

#[test]
fn an_fd_open_for_reading_holds_the_stage() {
    corpus_case("fd-read", "runtime.bin", "fd");
}

#[test]
fn an_fd_open_for_writing_holds_the_stage() {
    corpus_case("fd-write", "sub/lib.so", "fd");
}

#[test]
fn an_o_path_fd_holds_the_stage() {
    corpus_case("fd-path", "runtime.bin", "fd");
}

#[test]
fn a_directory_fd_holds_the_stage() {
    corpus_case("fd-dir", "sub", "fd");
}

#[test]
fn a_cwd_inside_holds_the_stage() {
    corpus_case("cwd", "sub", "cwd");
}

#[test]
fn a_chroot_into_it_holds_the_stage() {
    corpus_case("chroot", "sub", "root");
}

#[test]
fn a_mapping_whose_fd_was_closed_holds_the_stage() {
    corpus_case("map", "disk.img", "mapping");
}

#[test]
fn the_access_of_each_fd_is_named() {
    require_pid_ns!("holder corpus");
    let w = sealed_run();
    let planted: Vec<(Planted, &str)> = [
        ("fd-read", "read"),
        ("fd-write", "write"),
        ("fd-path", "path"),
    ]
    .into_iter()
    .map(|(how, access)| (Planted::holder(how, &w.staging.join("runtime.bin")), access))
    .collect();
    let (_, v) = verify_stage(&w);
    for (p, access) in &planted {
        let h = v["holders"]["holders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["pid"] == p.pid())
            .unwrap_or_else(|| panic!("pid {} not named: {v:#}", p.pid()));
        assert_eq!(h["holds"][0]["access"], *access, "{h:#}");
        assert!(
            h["holds"][0]["what"]
                .as_str()
                .unwrap()
                .ends_with("/runtime.bin"),
            "{h:#}"
        );
    }
    for (p, _) in planted {
        p.assert_alive();
        p.release();
    }
    assert_allowed(&w);
}

/// A running program whose executable is in the stage, then unlinked
/// from it (before the run is sealed, so the inventory agrees): the
/// close-time scan and verification both name it; its exe is `deleted`.
#[test]
fn a_program_run_from_the_stage_and_unlinked_holds_it() {
    require_pid_ns!("holder corpus");
    let mut w = Watchdog::start(&[]);
    let prog = w.staging.join("runtime-cat");
    std::fs::copy("/bin/cat", &prog).unwrap();
    let p = Planted::start(Command::new(&prog), false);
    std::fs::remove_file(&prog).unwrap();
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let log = w.log();
    let scanned = scanned(&log);
    assert!(
        scanned.holders.iter().any(|h| h.pid == p.pid()),
        "the close-time scan did not name pid {}: {scanned:#?}",
        p.pid()
    );
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_held_by(&v, p.pid(), "exe");
    let h = v["holders"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["pid"] == p.pid())
        .unwrap()
        .clone();
    let exe = h["holds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["how"] == "exe")
        .unwrap();
    assert_eq!(exe["deleted"], true, "{h:#}");
    p.assert_alive();
    p.release();
    assert_allowed(&w);
}

#[test]
fn a_bind_mount_of_a_stage_directory_elsewhere_holds_it() {
    require_pid_ns!("holder corpus (mounts)");
    let _serial = common::mounts::mounting();
    let w = sealed_run();
    let elsewhere = w.scratch.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let m = Mounted::new(&["--bind", s(&w.staging.join("sub"))], &elsewhere);
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_mount_held(&v, "source");
    m.release();
    assert_allowed(&w);
}

/// A mount on top of a stage subdirectory: the stage changed too (the
/// inventory sees a mount point), and is held.
#[test]
fn a_mount_on_a_stage_subdirectory_holds_it() {
    require_pid_ns!("holder corpus (mounts)");
    let _serial = common::mounts::mounting();
    let w = sealed_run();
    let m = Mounted::new(&["-t", "tmpfs", "rea-test-holders"], &w.staging.join("sub"));
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_mount_held(&v, "mount_point");
    assert!(
        reason_codes(&v).contains(&"staging_mismatch".to_string()),
        "{v:#}"
    );
    m.release();
    assert_allowed(&w);
}

#[test]
fn a_loop_device_backed_by_a_stage_file_holds_it() {
    require_pid_ns!("holder corpus (loop devices)");
    let w = sealed_run();
    let l = Looped::new(&w.staging.join("disk.img"));
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    let loops = v["holders"]["loops"].as_array().unwrap();
    let dev = l.0.trim_start_matches("/dev/");
    assert!(
        loops.iter().any(|x| x["device"] == dev),
        "{dev} not named: {v:#}"
    );
    assert!(
        reason_codes(&v).contains(&"stage_held".to_string()),
        "{v:#}"
    );
    l.release();
    assert_allowed(&w);
}

/// A bind mount made inside another mount namespace (`unshare --mount`),
/// by a process that holds nothing else: only that namespace's mounts
/// show it.
#[test]
fn a_mount_in_another_mount_namespace_holds_it() {
    require_pid_ns!("holder corpus (mount namespaces)");
    let _serial = common::mounts::mounting();
    let w = sealed_run();
    let elsewhere = w.scratch.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--"])
        .arg(python())
        .arg(fixture("holder.py"))
        .arg("bind-in-own-ns")
        .arg(w.staging.join("sub"))
        .arg(&elsewhere);
    let p = Planted::start(c, true);
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_mount_held(&v, "source");
    let m = &v["holders"]["mounts"][0];
    assert_eq!(m["seen_by"], p.pid(), "{v:#}");
    assert!(
        v["holders"]["mount_namespaces"].as_u64().unwrap() >= 2,
        "{v:#}"
    );
    p.assert_alive();
    p.release();
    assert_allowed(&w);
}

/// A holder that is not a descendant of the watchdog, started while the
/// action runs: the watchdog's scan at close names it (its receipt still
/// positive: the tree is quiescent), verification retains, the holder is
/// never touched; gone, the same log is delete_allowed.
#[test]
fn a_holder_outside_the_action_is_named_at_close_and_at_verification() {
    require_pid_ns!("holder corpus");
    let mut w = Watchdog::start(&[]);
    let out = w.submit(&["--name", "install"], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    let p = Planted::holder("fd-read", &w.staging.join("runtime.bin"));
    assert!(w.close().status.success());
    assert!(
        w.wait(PATIENCE).success(),
        "the watchdog's exit is the tree's, not the stage's"
    );
    let log = w.log();
    let rc = log.receipt();
    assert!(rc.quiescent, "{rc:#?}");
    let scanned = scanned(&log);
    assert_valid(
        holders_validator(),
        &serde_json::to_value(scanned).unwrap(),
        "the holders_scanned record",
    );
    let held: Vec<u64> = scanned.roots.iter().map(|r| r.held).collect();
    assert_eq!(held.first(), Some(&1), "{scanned:#?}");
    assert_eq!(held.get(1), Some(&0), "the temp root: {scanned:#?}");
    assert!(
        scanned.holders.iter().any(|h| h.pid == p.pid()),
        "{scanned:#?}"
    );
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_held_by(&v, p.pid(), "fd");
    p.assert_alive();
    p.release();
    assert_allowed(&w);
}

/// The temp root held at close by a process outside the action: kept
/// (temp_root_removed false, saying why), so the run is retain.
#[test]
fn a_held_temp_root_is_kept_and_the_run_retained() {
    require_pid_ns!("holder corpus");
    let mut w = Watchdog::start(&[]);
    let p = Planted::holder("cwd", &w.state_dir.join("tmp"));
    let close = w.close();
    let reply = String::from_utf8_lossy(&close.stdout);
    assert!(
        reply.contains("\"positive\":false"),
        "a kept temp root is no positive close: {reply}"
    );
    assert!(
        !w.wait(PATIENCE).success(),
        "the watchdog exits non-zero without a positive receipt"
    );
    let log = w.log();
    let removed = all!(log, Event::TempRootRemoved);
    let last = removed.last().unwrap();
    assert!(!last.removed, "{last:#?}");
    assert!(last.detail.contains("held"), "{last:#?}");
    assert!(w.state_dir.join("tmp").is_dir());
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert!(
        reason_codes(&v).contains(&"temp_root_not_removed".to_string()),
        "{v:#}"
    );
    p.assert_alive();
    p.release();
}

/// No false holder: a process holding another directory with the same
/// name (and the same file names) elsewhere is not a holder.
#[test]
fn a_directory_of_the_same_name_elsewhere_is_not_the_stage() {
    require_pid_ns!("holder corpus");
    let w = sealed_run();
    let twin = w.scratch.path("elsewhere/staging");
    std::fs::create_dir_all(twin.join("sub")).unwrap();
    std::fs::write(twin.join("runtime.bin"), b"native runtime").unwrap();
    let a = Planted::holder("cwd", &twin.join("sub"));
    let b = Planted::holder("fd-read", &twin.join("runtime.bin"));
    assert_allowed(&w);
    a.release();
    b.release();
}

/// `rea-audit holders DIR`: read-only, exit 1 when held and 0 when not,
/// `--json` valid; as an unprivileged user, the processes it cannot read
/// are named (and the answer does not claim them).
#[test]
fn the_holders_command_names_holders_and_what_it_cannot_read() {
    require_pid_ns!("holders command");
    let dir = tempfile::Builder::new()
        .prefix("rea-test-holders.")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let run = |args: &[&str], json: bool| {
        let mut c = Command::new(audit_bin());
        c.arg("holders").arg(dir.path());
        if json {
            c.arg("--json");
        }
        let out = c.args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = run(&[], false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("not held"), "{text}");
    let p = Planted::holder("fd-read", &dir.path().join("f"));
    let (code, text) = run(&[], false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains(&format!("pid {} ", p.pid())), "{text}");
    let (code, json) = run(&[], true);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_valid(holders_validator(), &v, "rea-audit holders --json");
    assert_eq!(v["holders"][0]["pid"], p.pid(), "{v:#}");
    // As nobody: a root-owned holder cannot be read; it is named as such.
    // In a PID namespace of its own, holding only that holder, bash and the
    // scan: the list of unreadable processes stops at 32, and other tests'
    // processes (with lower pids) pushed this one off it in a CI run.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    const AS_NOBODY: &str = r#"
        coproc H { exec python3 "$1" fd-read "$2"; }
        read -r _ready hpid <&"${H[0]}"
        echo "holder $hpid" >&2
        setpriv --reuid 65534 --regid 65534 --clear-groups -- "$3" holders "$4" --json
        status=$?
        eval "exec ${H[1]}>&-"
        wait "$H_PID"
        echo "holder exit $?" >&2
        exit $status
    "#;
    let out = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
            "bash",
            "-c",
            AS_NOBODY,
            "_",
        ])
        .arg(fixture("holder.py"))
        .arg(dir.path().join("f"))
        .arg(audit_bin())
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let err = String::from_utf8_lossy(&out.stderr);
    let hpid: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("holder ")?.parse().ok())
        .unwrap_or_else(|| panic!("no holder pid: {err}"));
    let unreadable = v["unreadable"].as_array().unwrap();
    assert!(
        unreadable.iter().any(|u| u["pid"] == hpid),
        "the holder this user cannot read is not named: {v:#}"
    );
    assert_eq!(out.status.code(), Some(0), "{v:#} {err}");
    assert!(
        err.contains("holder exit 0"),
        "the scan must leave it alone: {err}"
    );
    p.assert_alive();
    p.release();
    let (code, text) = run(&["/nonexistent-rea-dir"], false);
    assert_eq!(code, 4, "{text}");
}

/// After a lost watchdog, the recovery's verdict scans the stage too: held,
/// retain (stage_held); released, delete_allowed.
#[test]
fn a_recovered_stage_that_is_held_is_retained() {
    require_pid_ns!("recover of a held stage");
    let mut w = Watchdog::start(&["--contain", "cgroup"]);
    let guard = GroupGuard::of(&w.audit_log).expect("a cgroup-mode run records its group");
    w.signal(Signal::SIGKILL);
    w.wait(PATIENCE);
    let new = w.scratch.path("recovery.jsonl");
    let r = common::recovery::recover(&w.audit_log, &new, None);
    assert_eq!(r.code, 0, "{:#}\n{}", r.json, r.stderr);
    assert!(!guard.path.exists());
    let staging = s(&w.staging).to_string();
    let p = Planted::holder("cwd", &w.staging);
    let (code, v) = common::recovery::verify_recovery(&new, &["--staging", &staging]);
    assert_eq!(code, 1, "{v:#}");
    assert!(
        common::recovery::codes(&v).contains(&"stage_held".into()),
        "{v:#}"
    );
    assert_eq!(v["holders"]["holders"][0]["pid"], p.pid(), "{v:#}");
    p.assert_alive();
    p.release();
    let (code, v) = common::recovery::verify_recovery(&new, &["--staging", &staging]);
    assert_eq!(code, 0, "{v:#}");
}

/// `reconcile --staging` lists the holders too: review (exit 6) with
/// stage_held, the holder in the report and its text; released: 0.
#[test]
fn reconcile_names_the_holders_of_the_stage() {
    require_pid_ns!("reconcile of a held stage");
    let w = sealed_run();
    let staging = s(&w.staging).to_string();
    let p = Planted::holder("fd-dir", &w.staging);
    let (code, v, text) = common::recovery::reconcile(&w.audit_log, &["--staging", &staging]);
    assert_eq!(code, 6, "{v:#}");
    let codes: Vec<&str> = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["stage_held"],
        "one reason, not one from verify as well: {v:#}"
    );
    assert_eq!(v["holders"]["holders"][0]["pid"], p.pid(), "{v:#}");
    assert!(text.contains(&format!("pid {} ", p.pid())), "{text}");
    p.assert_alive();
    p.release();
    let (code, v, _) = common::recovery::reconcile(&w.audit_log, &["--staging", &staging]);
    assert_eq!(code, 0, "{v:#}");
}

/// `rea-stage discard` scans the stage before removing anything: a held
/// stage (a process whose cwd is in it, not started by any watchdog) is
/// refused (stage_held, the holder named, nothing removed, the discard log
/// verifies as refused); released, the same stage is discarded.
#[test]
fn a_held_stage_is_not_discarded() {
    require_pid_ns!("discard of a held stage");
    let scratch = Scratch::new();
    let dir = scratch.path("stage");
    let out = Command::new(stage_bin())
        .arg("begin")
        .arg(&dir)
        .args(["--file", "runtime.bin"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let hex = String::from_utf8(out.stdout).unwrap().trim().to_string();
    std::fs::write(dir.join("runtime.bin"), b"native runtime").unwrap();
    let discard = |log: &Path| {
        let out = Command::new(stage_bin())
            .arg("discard")
            .arg(&dir)
            .args(["--receipt-sha256", &hex, "--audit-log"])
            .arg(log)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let p = Planted::holder("cwd", &dir);
    let log = scratch.path("discard-1.jsonl");
    let (code, out) = discard(&log);
    assert_eq!(code, 1, "{out}");
    assert!(
        dir.join("runtime.bin").exists(),
        "a refused discard removes nothing"
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["reasons"], serde_json::json!(["stage_held"]), "{v:#}");
    let discard_log = Log::<StageEvent>::read(&log);
    let decided = first!(discard_log, StageEvent::Decided);
    let held = &decided.reasons;
    assert_eq!(held.len(), 1, "{decided:#?}");
    let detail = &held[0].detail;
    assert!(
        detail.contains(&format!("pid {} ", p.pid())),
        "{decided:#?}"
    );
    let out = Command::new(audit_bin())
        .arg("verify")
        .arg(&log)
        .arg("--json")
        .output()
        .unwrap();
    let vv: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (out.status.code(), vv["result"].as_str()),
        (Some(1), Some("refused")),
        "the replay agrees: {vv:#}"
    );
    let codes: Vec<&str> = vv["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"stage_held"), "{vv:#}");
    p.assert_alive();
    p.release();
    let (code, out) = discard(&scratch.path("discard-2.jsonl"));
    assert_eq!(code, 0, "{out}");
    assert!(!dir.exists());
}

/// The main thread has exited while another runs on: `/proc/PID/fd`,
/// `cwd` and `maps` read as empty, the live thread's do not.
#[test]
fn a_holder_whose_main_thread_exited_still_holds_the_stage() {
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("skipped: the fixture's SYS_exit number is x86_64's");
        return;
    }
    corpus_case("fd-main-exits", "runtime.bin", "fd");
}

/// A bind mount of another directory of the same filesystem onto a stage
/// subdirectory: a mount on the stage (held), but not walked into, so what
/// is held through it elsewhere is not taken for the stage.
#[test]
fn a_same_filesystem_bind_mount_in_the_stage_is_not_walked_into() {
    require_pid_ns!("holder corpus (mounts)");
    let _serial = common::mounts::mounting();
    let w = sealed_run();
    let other = w.scratch.path("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("g"), b"not the stage's").unwrap();
    let entries_before = {
        let (_, v) = verify_stage(&w);
        v["holders"]["roots"][0]["entries"].as_u64().unwrap()
    };
    let m = Mounted::new(&["--bind", s(&other)], &w.staging.join("sub"));
    let p = Planted::holder("fd-read", &other.join("g"));
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_mount_held(&v, "mount_point");
    let named = v["holders"]["holders"].as_array().unwrap();
    assert!(
        named.iter().all(|h| h["pid"] != p.pid()),
        "a file of the other directory is not the stage's: {v:#}"
    );
    // The mount point is one entry (its root); sub/lib.so is hidden by it.
    let entries = v["holders"]["roots"][0]["entries"].as_u64().unwrap();
    assert_eq!(entries, entries_before - 1, "{v:#}");
    p.release();
    m.release();
    assert_allowed(&w);
}

/// A stage that is itself the root of a mount (its own tmpfs) is not held
/// by that mount, however its path is spelled (a trailing slash here).
#[test]
fn a_stage_that_is_a_mount_root_is_not_held_by_its_own_mount() {
    require_pid_ns!("holder corpus (mounts)");
    let _serial = common::mounts::mounting();
    let scratch = Scratch::new();
    let dir = scratch.path("own-tmpfs");
    std::fs::create_dir(&dir).unwrap();
    let m = Mounted::new(&["-t", "tmpfs", "rea-test-holders"], &dir);
    std::fs::write(dir.join("f"), b"x").unwrap();
    let slashed = format!("{}/", s(&dir));
    let out = Command::new(audit_bin())
        .args(["holders", &slashed, "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    assert_eq!(v["mounts_total"], 0, "{v:#}");
    std::fs::remove_file(dir.join("f")).unwrap();
    m.release();
}

/// A /proc mounted with `hidepid=invisible` lists only what the reader may
/// see: the scan says so, by name, rather than answering for processes it
/// was never shown (a private mount namespace; the test's /proc untouched).
#[test]
fn a_proc_that_hides_processes_is_named_as_not_readable() {
    require_pid_ns!("holders under hidepid");
    let _serial = common::mounts::mounting();
    let dir = tempfile::Builder::new()
        .prefix("rea-test-holders.")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let script = format!(
        "mount -t proc -o hidepid=invisible proc /proc && exec setpriv --reuid 65534 --regid 65534 --clear-groups -- {} holders {} --json",
        audit_bin(),
        s(dir.path())
    );
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let hidden = v["unreadable"].as_array().unwrap().iter().any(|u| {
        u["what"] == "/proc" && u["error"].as_str().unwrap().contains("hidepid=invisible")
    });
    assert!(hidden, "{v:#}");
}
