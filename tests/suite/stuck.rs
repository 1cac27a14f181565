//! A stuck file system on or under the stage (issue 27): every verifier
//! answers within 10 s, and a watchdog whose stage goes stuck before close
//! still seals its receipt.
//!
//! The stuck mount is a real FUSE mount whose "server" never answers: the
//! test opens `/dev/fuse`, mounts it and never reads the INIT request, so
//! every lookup, stat or readdir that reaches the mount blocks in the
//! kernel (`fuse_get_req`, state D) until the connection is aborted. It is
//! made in a mount namespace private to the test's thread (and to the
//! processes it starts), so nothing else on the machine can walk into it;
//! the guard aborts the connection (closing the only `/dev/fuse`
//! descriptor: blocked lookups wake with ENOTCONN) and detaches the mount
//! whatever happens, failed assertion or not.
//!
//! Each command runs as a child with a bound (`output_within`: killed
//! through its pidfd past it, and the test fails), so code that hangs on
//! the mount fails these tests instead of hanging the suite.
//!
//! Run inside a private PID namespace, as root: `tools/test stuck::`.

use crate::common;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::mounts::private_mount_ns;
use common::typed::Log;
use rea::stage::decide::Code;
use rea::stage::log::{Outcome as DiscardOutcome, StageEvent};
use serde_json::Value;

/// What docs/guarantees.md allows a verifier on a stuck stage.
const ANSWER: Duration = Duration::from_secs(10);
/// The test's own bound on a command (past it: killed, the test fails).
const BOUND: Duration = Duration::from_secs(20);

/// A FUSE mount that never answers, on `target`, in this thread's mount
/// namespace ([`private_mount_ns`] first). Dropped: the connection is
/// aborted and the mount detached.
struct StuckMount {
    target: CString,
    fuse: Option<OwnedFd>,
}

impl StuckMount {
    fn on(target: &Path) -> StuckMount {
        // Mounted and never served: INIT is never read.
        let fuse = common::fuse::mount_fuse(target, "rea-stuck");
        let target = CString::new(target.as_os_str().as_bytes()).unwrap();
        StuckMount {
            target,
            fuse: Some(fuse),
        }
    }
}

impl Drop for StuckMount {
    fn drop(&mut self) {
        // The only /dev/fuse descriptor (O_CLOEXEC: no child kept one):
        // closing it aborts the connection, and every lookup blocked on
        // the mount returns ENOTCONN.
        drop(self.fuse.take());
        // SAFETY: a valid C string; a lazy unmount of this test's mount.
        unsafe { libc::umount2(self.target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Runs `cmd` (stdout and stderr piped) with the test's bound; returns
/// its output and how long it took.
fn timed(mut cmd: Command) -> (Output, Duration) {
    let t0 = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = output_within(child, BOUND);
    (out, t0.elapsed())
}

fn audit(args: &[&str]) -> (Output, Duration) {
    let mut c = Command::new(audit_bin());
    c.args(args);
    timed(c)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The pids of the helpers a reason names ("helper pid N").
fn helpers_named(s: &str) -> Vec<i32> {
    s.split("helper pid ")
        .skip(1)
        .filter_map(|t| t.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

/// Once the connection is aborted, every helper named exits (one still
/// blocked on the mount would stay in state D): each is bound to a pidfd
/// while it is still a rea helper, and the pidfd must poll readable (the
/// process exited) within the bound. A pid gone, or reused by something
/// other than a rea helper, before it was bound has exited already.
fn assert_gone(pids: &[i32]) {
    for &pid in pids {
        let stat =
            |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let before = stat(pid);
        if !before.contains("(rea-") {
            continue;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new
        // descriptor (owned below) or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if fd < 0 {
            continue; // exited (and reaped) since
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // Not a rea helper now: the pid was reused in between (that helper
        // had exited).
        if !stat(pid).contains("(rea-") {
            continue;
        }
        assert!(
            wait_readable(&fd, PATIENCE),
            "helper {pid} still there after the abort: {}",
            stat(pid)
        );
    }
}

/// A watchdog run with a stage (`sub/` in it), closed and sealed while
/// the stage was readable.
fn sealed_run() -> Watchdog {
    let scratch = Scratch::new();
    std::fs::create_dir_all(scratch.path("staging").join("sub")).unwrap();
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {});
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    w
}

/// Every verifier against a sealed run whose stage is stuck at `mount`
/// (the stage itself, or a directory in it).
fn verifiers_answer(w: &Watchdog, mount: &Path) {
    let log = s(&w.audit_log);
    let stage = s(&w.staging);
    let stuck = StuckMount::on(mount);
    let mut helpers = Vec::new();

    let (o, took) = audit(&["verify", log, "--json", "--staging", stage]);
    assert!(took < ANSWER, "verify took {took:?}: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    common::schema::assert_valid(common::schema::verdict_validator(), &v, "verdict");
    assert_eq!(o.status.code(), Some(1), "{v:#}");
    assert_eq!(v["verdict"], "retain", "{v:#}");
    assert!(
        reason_codes(&v).contains(&"stage_unreadable".to_string()),
        "{v:#}"
    );
    helpers.extend(helpers_named(&text(&o)));

    // A mount under the stage is met by the holder walk as a mount point
    // (it never enters it): held, the mount named. On the stage itself
    // nothing of the tree can be read: could not scan, and why.
    let (o, took) = audit(&["holders", stage]);
    assert!(took < ANSWER, "holders took {took:?}: {}", text(&o));
    if mount == w.staging {
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        assert!(text(&o).contains("stage_unreadable"), "{}", text(&o));
    } else {
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("fuse from rea-stuck"), "{}", text(&o));
    }
    helpers.extend(helpers_named(&text(&o)));

    let (o, took) = audit(&["reconcile", log, "--json", "--staging", stage]);
    assert!(took < ANSWER, "reconcile took {took:?}: {}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(o.status.code(), Some(6), "{r:#}");
    assert!(text(&o).contains("stage_unreadable"), "{r:#}");
    helpers.extend(helpers_named(&text(&o)));

    let page = w.scratch.path("report.html");
    let (o, took) = audit(&["report", log, "--staging", stage, "-o", s(&page)]);
    assert!(took < ANSWER, "report took {took:?}: {}", text(&o));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("stage_unreadable"),
        "the page names the reason"
    );

    assert!(!helpers.is_empty(), "the blocked helper is named");
    drop(stuck);
    assert_gone(&helpers);
}

#[test]
fn verifiers_answer_on_a_stuck_mount_under_the_stage() {
    let Some(_ns) = private_mount_ns("stuck mount under the stage") else {
        return;
    };
    let w = sealed_run();
    verifiers_answer(&w, &w.staging.join("sub"));
}

#[test]
fn verifiers_answer_on_a_stuck_mount_on_the_stage_itself() {
    let Some(_ns) = private_mount_ns("stuck mount on the stage") else {
        return;
    };
    let w = sealed_run();
    verifiers_answer(&w, &w.staging);
}

/// The stage goes stuck during the action: close still seals (the stage
/// recorded unreadable), and the honest log verifies as retain with
/// `stage_unreadable`, never tampered.
#[test]
fn a_watchdog_whose_stage_goes_stuck_seals_its_receipt() {
    let Some(_ns) = private_mount_ns("stuck stage at close") else {
        return;
    };
    let mut w = Watchdog::start(&[]);
    std::fs::create_dir(w.staging.join("sub")).unwrap();
    let stuck = StuckMount::on(&w.staging.join("sub"));
    let (close, took) = timed(w.client("close", &[]));
    assert!(close.status.success(), "{}", text(&close));
    assert!(took < ANSWER, "close took {took:?}");
    assert!(w.wait(PATIENCE).success());
    let log = w.log();
    // (A log not sealed by a receipt fails here, naming its kinds.)
    let rc = log.receipt();
    let unreadable = rc
        .staging
        .as_ref()
        .and_then(|s| s.unreadable.as_deref())
        .unwrap_or_default();
    assert!(unreadable.contains("helper pid"), "{rc:#?}");
    let helpers = helpers_named(unreadable);

    let (code, v) = w.verify(&[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["status"], "retain", "{v:#}");
    assert!(
        reason_codes(&v).contains(&"stage_unreadable".to_string()),
        "{v:#}"
    );
    drop(stuck);
    assert_gone(&helpers);
    // Readable again (the mount gone): still retain, for what close saw.
    let (code, v) = w.verify(&["--staging", s(&w.staging)]);
    assert_eq!(code, 1, "{v:#}");
    assert!(
        reason_codes(&v).contains(&"stage_unreadable".to_string()),
        "{v:#}"
    );
}

/// A watchdog asked to start on a stage that does not answer refuses
/// within the bound (`stage_unreadable`, exit 125) instead of hanging
/// before its log exists: no state directory, no log, nothing launched.
#[test]
fn a_watchdog_refuses_to_start_on_a_stuck_stage() {
    let Some(_ns) = private_mount_ns("stuck stage at start") else {
        return;
    };
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    std::fs::create_dir(&staging).unwrap();
    let (state, log) = (scratch.path("state"), scratch.path("audit.jsonl"));
    let stuck = StuckMount::on(&staging);
    let mut c = Command::new(watchdog_bin());
    c.args(["run", "--state-dir", s(&state), "--audit-log", s(&log)])
        .args(["--staging", s(&staging)]);
    let (o, took) = timed(c);
    assert!(took < ANSWER, "start took {took:?}: {}", text(&o));
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("stage_unreadable"), "{}", text(&o));
    assert!(o.stdout.is_empty(), "no ready line: {}", text(&o));
    assert!(!state.exists() && !log.exists(), "nothing made");
    let helpers = helpers_named(&text(&o));
    assert_eq!(
        helpers.len(),
        1,
        "the blocked helper is named: {}",
        text(&o)
    );
    drop(stuck);
    assert_gone(&helpers);
}

/// `rea-stage discard` of a stage that does not answer (the mount on the
/// stage itself, or on a directory in it) refuses within the bound,
/// `stage_unreadable`, recorded in its chained log, and touches nothing:
/// once the mount is gone, the stage is all there.
#[test]
fn a_discard_of_a_stuck_stage_is_refused_in_time() {
    let Some(_ns) = private_mount_ns("stuck stage at discard") else {
        return;
    };
    for on_stage in [true, false] {
        let scratch = Scratch::new();
        let dir = scratch.path("stage");
        let mut c = Command::new(stage_bin());
        c.args(["begin", s(&dir), "--file", "runtime.bin"]);
        let (o, _) = timed(c);
        assert!(o.status.success(), "begin: {}", text(&o));
        let hex = String::from_utf8_lossy(&o.stdout).trim().to_string();
        std::fs::create_dir(dir.join("sub")).unwrap();
        let before = std::fs::read_dir(&dir).unwrap().count();
        let target = if on_stage {
            dir.clone()
        } else {
            dir.join("sub")
        };
        let stuck = StuckMount::on(&target);
        let log = scratch.path("discard.jsonl");
        let mut c = Command::new(stage_bin());
        c.args(["discard", s(&dir), "--receipt-sha256", &hex])
            .args(["--audit-log", s(&log)]);
        let (o, took) = timed(c);
        let what = format!("on_stage={on_stage}: {}", text(&o));
        assert!(took < ANSWER, "discard took {took:?}: {what}");
        assert_eq!(o.status.code(), Some(1), "{what}");
        let typed = Log::<StageEvent>::read(&log);
        let decided = match typed.recs.last().map(|r| &r.event) {
            Some(StageEvent::Decided(d)) => d,
            _ => panic!("the last record is not discard_decided: {typed:#?}"),
        };
        assert_eq!(decided.outcome, DiscardOutcome::Refused, "{decided:#?}");
        let codes: Vec<Code> = decided.reasons.iter().map(|r| r.code).collect();
        assert_eq!(codes, [Code::StageUnreadable], "{decided:#?}");
        // The helper's name as the record's text gives it.
        let recs = records(&log);
        let last = recs.last().expect("a discard log");
        let helpers = helpers_named(&last.to_string());
        assert!(!helpers.is_empty(), "the blocked helper is named: {last:#}");
        let (o, _) = audit(&["verify", s(&log)]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "refused, never tampered: {}",
            text(&o)
        );
        drop(stuck);
        assert_gone(&helpers);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            before,
            "touched nothing"
        );
    }
}
