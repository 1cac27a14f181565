//! `rea-watchdog recover` (docs/containment.md, "Recover") against real
//! watchdogs and real processes, in cgroup mode (`--contain cgroup`).
//!
//! A watchdog SIGKILLed while its job's tree runs (a 3-deep chain, three
//! setsid escapees and the "Hopper", the unrelated sibling's argv) leaves
//! them in its group: `reconcile` names them (running, exit 5); `recover`
//! ends them (proven by the pidfds the test holds and the oracle FIFO's
//! EOF) and leaves the sibling alone; `verify NEW` says delete_allowed and
//! LOG's own verdict stays retain. Each refusal kills nothing (the
//! survivors' pidfds say so) and names its code on stderr and in NEW.
//!
//! Run inside a private PID namespace: `tools/test recover::`. Every
//! group a test sees is ended and removed by a guard that re-opens it by
//! its recorded inode, and every process by the pidfds the test holds,
//! also when a test fails.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::harness::*;
use common::logs::rechain;
use common::recovery::*;
use common::stop::*;
use common::typed::first;
use nix::sys::signal::Signal;
use rea::contain::group::ActionGroup;
use rea::kinds::group::RunIdSeen;
use rea::kinds::recovery::{RecoveryEvent, RecoveryStarted};
use serde_json::Value;

/// The recovery log's first record, `recovery_started`.
fn first_record(new: &Path) -> RecoveryStarted {
    match recovery_log(new).at(0) {
        RecoveryEvent::Started(s) => s.clone(),
        e => panic!("{}: the first record is {e:?}", new.display()),
    }
}

/// Every survivor is still alive: the refusal killed nothing.
fn assert_nothing_killed(l: &Lost, what: &str) {
    let alive = l.survivors().len();
    assert_eq!(alive, LOST_SHAPES.len() + 2, "{what} killed something");
    assert!(l.guard.exists(), "{what}: the group is still there");
}

/// A refusal as it must look: exit 2, the code on stderr and in stdout's
/// answer, recorded in NEW (verify: retain, exit 1, result refused, the
/// code a reason) when `recorded`.
fn assert_refused(r: &Recovered, new: &Path, code: &str, recorded: bool) {
    assert_eq!(r.code, 2, "{:#}\n{}", r.json, r.stderr);
    assert_eq!(r.json["outcome"], "refused", "{:#}", r.json);
    assert_eq!(codes(&r.json), vec![code.to_string()], "{:#}", r.json);
    assert!(
        r.stderr.contains(&format!("recover refused ({code})")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("nothing was killed"), "{}", r.stderr);
    assert_eq!(r.json["killed"], false);
    assert_eq!(r.json["recorded"], recorded, "{:#}", r.json);
    if !recorded {
        return;
    }
    let (vcode, v) = verify_recovery(new, &[]);
    assert_eq!(vcode, 1, "{v:#}");
    assert_eq!(v["verdict"], "retain", "{v:#}");
    assert_eq!(v["result"], "refused", "{v:#}");
    assert!(codes(&v).contains(&code.to_string()), "{v:#}");
    let kinds: Vec<String> = recovery_records(new)
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["recovery_started", "recovery_checked", "recovery_decided"],
        "a refusal records no act"
    );
}

#[test]
fn a_lost_watchdog_is_recovered_through_its_group() {
    require_pid_ns!("recover after a watchdog SIGKILL");
    let sibling = Sibling::start();
    let mut l = Lost::new(&sibling, &[], true);
    let staging = l.staging();
    let log = l.w.audit_log.clone();
    let log_before = std::fs::read(&log).unwrap();

    // reconcile names the survivors: the action still runs in its group.
    let (code, v, text) = reconcile(&log, &["--staging", &staging]);
    assert_eq!(code, 5, "{v:#}");
    assert_eq!(v["outcome"], "running", "{v:#}");
    let rs = codes(&v);
    for want in ["group_members_alive", "watchdog_lost", "no_receipt"] {
        assert!(rs.contains(&want.to_string()), "{want}: {v:#}");
    }
    let g = &v["group"];
    assert_eq!(g["now"]["state"], "present", "{g:#}");
    assert_eq!(g["recorded"]["ino"], l.guard.ino, "{g:#}");
    assert_eq!(g["populated"], true, "{g:#}");
    for m in l.survivors() {
        let listed =
            g["members"].as_array().unwrap().iter().any(|x| {
                x["pid"] == m.pid && x["start_time"] == m.start_time && x["alive"] == true
            });
        assert!(listed, "{} ({}) not listed: {g:#}", m.pid, m.role);
    }
    assert!(!g["members"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["pid"] == sibling.pid()));
    let cmd = v["recover_command"].as_str().unwrap();
    assert!(cmd.starts_with("rea-watchdog recover "), "{cmd}");
    assert!(cmd.contains("--audit-log NEW --staging "), "{cmd}");
    assert!(text.contains("RUNNING"), "{text}");
    assert!(text.contains(cmd), "the human report names {cmd}:\n{text}");
    assert!(text.contains("group_members_alive"), "{text}");
    assert_eq!(
        l.survivors().len(),
        LOST_SHAPES.len() + 2,
        "reconcile killed"
    );

    // recover ends them all, and only them.
    let new = l.w.scratch.path("recovery.jsonl");
    let r = recover(&log, &new, Some(&staging));
    assert_eq!(r.code, 0, "{:#}\n{}", r.json, r.stderr);
    assert_eq!(r.json["outcome"], "recovered", "{:#}", r.json);
    assert_eq!(r.json["killed"], true);
    assert_eq!(r.json["recorded"], true);
    assert!(r.stderr.contains("recovered run"), "{}", r.stderr);
    let left = l.held.wait_all_exited(PATIENCE);
    assert!(left.is_empty(), "survivors after recover: {left:?}");
    assert!(
        l.oracle.wait_eof(PATIENCE),
        "a tree member still holds the oracle"
    );
    assert_eq!(run_processes(&l.w.run_id()), Vec::<i32>::new());
    sibling.assert_alive();
    assert!(!l.guard.path.exists(), "the group directory is removed");
    assert_eq!(std::fs::read(&log).unwrap(), log_before, "LOG was written");

    // NEW names LOG's run and its last intact seq and head.
    let recs = recovery_log(&new);
    let first = first_record(&new);
    assert_eq!(
        first.log_run.as_deref(),
        Some(l.w.run_id().as_str()),
        "{first:#?}"
    );
    let lines = common::logs::read_lines(&log);
    assert_eq!(
        first.log_intact_seq,
        Some(lines.len() as u64 - 1),
        "{first:#?}"
    );
    let head = rea::log::chain::line_hash(lines.last().unwrap());
    assert_eq!(
        first.log_intact_head.as_deref(),
        Some(head.as_str()),
        "{first:#?}"
    );
    assert_eq!(r.json["log_intact_head"], head.as_str());
    let members = first!(recs, RecoveryEvent::Members);
    for m in l.members.iter().filter(|m| m.role != "root") {
        let named = members
            .members
            .iter()
            .any(|x| x.pid == m.pid && x.start_time == Some(m.start_time));
        assert!(
            named,
            "{} not recorded before the kill: {members:#?}",
            m.role
        );
    }
    let killed = first!(recs, RecoveryEvent::Killed);
    assert_eq!(killed.populated, Some(false), "{killed:#?}");

    // verify NEW: delete_allowed for the exact stage; without --staging
    // the stage is not cleared; LOG itself stays retain.
    let (code, v) = verify_recovery(&new, &["--staging", &staging]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verdict"], "delete_allowed", "{v:#}");
    assert_eq!(v["result"], "recovered", "{v:#}");
    assert_eq!(v["recovered_run"], l.w.run_id().as_str());
    assert_eq!(v["head"], r.json["head"]);
    let (code, v) = verify_recovery(&new, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert!(codes(&v).contains(&"staging_not_checked".into()), "{v:#}");
    let (code, v) = l.w.verify(&["--staging", &staging]);
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(v["verdict"], "retain", "{v:#}");
    let out = Command::new(audit_bin())
        .arg("show")
        .arg(&new)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "show exits as verify: {out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("recovery_decided"));
    let out = Command::new(audit_bin())
        .args(["show", "--json"])
        .arg(&new)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["started"].is_string(), "{doc:#}");
    for l in doc["lines"].as_array().unwrap() {
        assert!(
            l["seq"].is_u64() && l["kind"].is_string(),
            "a record, seq and kind: {l}"
        );
    }

    // Afterwards the group is gone: reconcile says so (review), and a
    // second recover refuses, killing nothing.
    let (code, v, _) = reconcile(&log, &["--staging", &staging]);
    assert_eq!(code, 6, "{v:#}");
    assert_eq!(v["group"]["now"]["state"], "gone", "{v:#}");
    assert!(codes(&v).contains(&"group_gone".into()), "{v:#}");
    let again = l.w.scratch.path("again.jsonl");
    let r = recover(&log, &again, Some(&staging));
    assert_refused(&r, &again, "group_gone", true);
    let out = l.submit_output();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    sibling.assert_alive();
}

#[test]
fn a_live_watchdog_is_refused_and_nothing_is_killed() {
    require_pid_ns!("recover with the watchdog alive");
    let sibling = Sibling::start();
    let mut l = Lost::new(&sibling, &[], false);
    let staging = l.staging();
    let alive_before = l.held.alive().len();
    assert_eq!(alive_before, LOST_SHAPES.len() + 3, "the leader lives too");
    let new = l.w.scratch.path("recovery.jsonl");
    let r = recover(&l.w.audit_log, &new, Some(&staging));
    assert_refused(&r, &new, "watchdog_alive", true);
    assert_eq!(
        l.held.alive().len(),
        alive_before,
        "recover killed something"
    );
    let first = first_record(&new);
    assert!(!first.log_sealed, "{first:#?}");

    // The same log with one byte edited: the chain is checked first.
    let copy = l.w.scratch.path("edited.jsonl");
    let mut lines = common::logs::read_lines(&l.w.audit_log);
    lines[1] = common::logs::replace_once(&lines[1], "\"seq\":1", b"\"seq\":7");
    common::logs::write_lines(&copy, &lines);
    let new2 = l.w.scratch.path("recovery-2.jsonl");
    let r = recover(&copy, &new2, Some(&staging));
    assert_refused(&r, &new2, "log_tampered", true);
    assert_eq!(l.held.alive().len(), alive_before);

    // The test's own clean-up: the watchdog stops what it owns.
    let stop = client_wait(&l.w, "stop");
    assert!(stop.status.success(), "{stop:?}");
    assert!(l.held.wait_all_exited(PATIENCE).is_empty());
    assert!(l.oracle.wait_eof(PATIENCE));
    assert!(client_wait(&l.w, "close").status.success());
    sibling.assert_alive();
}

#[test]
fn a_recreated_group_is_refused_and_its_sentinel_lives() {
    require_pid_ns!("recover of a recreated group");
    let sibling = Sibling::start();
    let l = Lost::new(&sibling, &[], true);
    // The test ends the original group through its recorded inode and
    // removes it, then makes the same name again with a process of its own.
    let g = ActionGroup::open_recorded(&l.guard.path, l.guard.ino).unwrap();
    g.kill().unwrap();
    assert!(g.wait_empty(PATIENCE).unwrap());
    assert!(l.held.wait_all_exited(PATIENCE).is_empty());
    g.remove().map_err(|(_, e)| e).unwrap();
    std::fs::create_dir(&l.guard.path).unwrap();
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(&l.guard.path).unwrap().ino();
    assert_ne!(ino, l.guard.ino);
    let _new_group = GroupGuard {
        path: l.guard.path.clone(),
        ino,
    };
    let sentinel = Sentinel::start(&l.guard.path);

    let (code, v, text) = reconcile(&l.w.audit_log, &[]);
    assert_eq!(code, 6, "{v:#}");
    assert_eq!(v["group"]["now"]["state"], "recreated", "{v:#}");
    assert_eq!(v["group"]["now"]["ino_now"], ino, "{v:#}");
    assert!(codes(&v).contains(&"group_recreated".into()), "{v:#}");
    assert!(text.contains("RECREATED"), "{text}");
    assert!(v["group"]["members"].as_array().unwrap().is_empty());

    let new = l.w.scratch.path("recovery.jsonl");
    let r = recover(&l.w.audit_log, &new, Some(&l.staging()));
    assert_refused(&r, &new, "group_recreated", true);
    assert!(!sentinel.fd.has_exited(), "recover killed the sentinel");
    let checked = match recovery_log(&new).at(1) {
        RecoveryEvent::Checked(c) => c.clone(),
        e => panic!("the second record is not recovery_checked: {e:?}"),
    };
    assert_eq!(
        checked.group.as_ref().and_then(|g| g.ino_now),
        Some(ino),
        "{checked:#?}"
    );
    sibling.assert_alive();
}

/// A process of the test's own, placed in a group by writing its pid to
/// the group's `cgroup.procs`; SIGKILLed through its pidfd on drop.
struct Sentinel {
    child: Option<std::process::Child>,
    fd: rea::process::pidfd::VerifiedPidFd,
}

impl Sentinel {
    fn start(group: &Path) -> Sentinel {
        let child = Command::new("/bin/sleep").arg("3600").spawn().unwrap();
        let fd = rea::process::pidfd::bind_unwaited_child(&child).unwrap();
        let s = Sentinel {
            child: Some(child),
            fd,
        };
        std::fs::write(group.join("cgroup.procs"), s.fd.pid().to_string()).unwrap();
        s
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.fd.signal(Signal::SIGKILL);
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}

#[test]
fn a_tampered_log_is_refused_and_nothing_is_killed() {
    require_pid_ns!("recover of a tampered log");
    let sibling = Sibling::start();
    let l = Lost::new(&sibling, &[], true);
    // One byte of line 2 edited (a digit of its mono_ns): line 3's prev
    // no longer matches.
    let mut lines = common::logs::read_lines(&l.w.audit_log);
    let at = lines[1]
        .windows(10)
        .position(|x| x == b"\"mono_ns\":")
        .unwrap()
        + 10;
    lines[1][at] = if lines[1][at] == b'1' { b'2' } else { b'1' };
    let edited = l.w.scratch.path("edited.jsonl");
    common::logs::write_lines(&edited, &lines);
    let new = l.w.scratch.path("recovery.jsonl");
    let r = recover(&edited, &new, Some(&l.staging()));
    assert_refused(&r, &new, "log_tampered", true);
    assert_nothing_killed(&l, "a tampered log");
    let first = first_record(&new);
    assert_eq!(first.log_intact_seq, Some(1), "{first:#?}");
    assert!(
        first
            .log_tampered
            .as_deref()
            .is_some_and(|t| t.contains("line 3")),
        "{first:#?}"
    );
    sibling.assert_alive();
}

/// A cgroup-mode watchdog SIGKILLed with no job: its group is empty.
fn lost_without_jobs(extra: &[&str]) -> (Watchdog, Option<GroupGuard>) {
    let mut w = Watchdog::start(extra);
    let guard = GroupGuard::of(&w.audit_log);
    w.signal(Signal::SIGKILL);
    w.wait(PATIENCE);
    (w, guard)
}

#[test]
fn an_empty_group_is_recovered_and_the_recovery_log_is_tamper_evident() {
    require_pid_ns!("recover of an empty group");
    let (w, guard) = lost_without_jobs(&["--contain", "cgroup"]);
    let guard = guard.unwrap();
    let staging = w.staging.to_str().unwrap().to_string();
    let new = w.scratch.path("recovery.jsonl");
    let r = recover(&w.audit_log, &new, None);
    assert_eq!(r.code, 0, "{:#}\n{}", r.json, r.stderr);
    assert!(!guard.path.exists());
    // Without --staging the stage LOG recorded is the one inventoried.
    let (code, v) = verify_recovery(&new, &["--staging", &staging]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["staging"]["identity"]["path"], staging.as_str(), "{v:#}");
    let (code, v) = verify_recovery(&new, &["--expect-head", r.json["head"].as_str().unwrap()]);
    assert_eq!(code, 1, "pinned, but the stage not checked: {v:#}");

    // The stage changed since the recovery: retain.
    std::fs::write(w.staging.join("runtime.bin"), b"native runtimf").unwrap();
    let (code, v) = verify_recovery(&new, &["--staging", &staging]);
    assert_eq!(code, 1, "{v:#}");
    assert!(codes(&v).contains(&"staging_mismatch".into()), "{v:#}");

    // One byte edited: tampered.
    let mut lines = common::logs::read_lines(&new);
    let edited = w.scratch.path("edited-recovery.jsonl");
    let mut bad = lines.clone();
    bad[2] = common::logs::replace_once(&bad[2], "\"members\":[]", b"\"members\":[ ]");
    common::logs::write_lines(&edited, &bad);
    let out = Command::new(audit_bin())
        .args(["verify", "--json"])
        .arg(&edited)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A forged decision, re-chained: the facts say the group was still
    // populated, the decision says recovered.
    let killed = lines
        .iter()
        .position(|l| l.windows(17).any(|x| x == b"\"recovery_killed\""))
        .unwrap();
    lines[killed] =
        common::logs::replace_once(&lines[killed], "\"populated\":false", b"\"populated\":true");
    let run_id = recovery_records(&new)[0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    rechain(&mut lines, &run_id, killed);
    let forged = w.scratch.path("forged-recovery.jsonl");
    common::logs::write_lines(&forged, &lines);
    let (code, v) = verify_recovery(&forged, &[]);
    assert_eq!(code, 3, "{v:#}");
    assert!(codes(&v).contains(&"decision_mismatch".into()), "{v:#}");
    // The forged chain is valid: only the pinned head tells it apart.
    let (code, v) = verify_recovery(
        &forged,
        &["--expect-head", r.json["head"].as_str().unwrap()],
    );
    assert_eq!(code, 3, "{v:#}");
    assert!(codes(&v).contains(&"head_mismatch".into()), "{v:#}");
}

#[test]
fn refusals_without_a_tree_sealed_none_new_exists_new_in_stage() {
    require_pid_ns!("recover refusals");
    // A sealed log: nothing to recover.
    let mut w = Watchdog::start(&["--contain", "cgroup"]);
    let _group = GroupGuard::of(&w.audit_log);
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let new = w.scratch.path("recovery.jsonl");
    let r = recover(&w.audit_log, &new, None);
    assert_refused(&r, &new, "log_sealed", true);
    assert!(r.stderr.contains("nothing to recover"), "{}", r.stderr);

    // none mode: recovery needs containment; reconcile is named.
    let (w, guard) = lost_without_jobs(&["--contain", "none"]);
    assert!(guard.is_none());
    let new = w.scratch.path("recovery.jsonl");
    let r = recover(&w.audit_log, &new, None);
    assert_refused(&r, &new, "no_group", true);
    assert!(
        r.stderr.contains("recovery needs containment"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("rea-audit reconcile"), "{}", r.stderr);

    // NEW exists: refused, NEW untouched, nothing recorded.
    let (w, guard) = lost_without_jobs(&["--contain", "cgroup"]);
    let guard = guard.unwrap();
    let new = w.scratch.path("exists.jsonl");
    std::fs::write(&new, b"keep me\n").unwrap();
    let r = recover(&w.audit_log, &new, None);
    assert_refused(&r, &new, "new_log_exists", false);
    assert_eq!(std::fs::read(&new).unwrap(), b"keep me\n");
    assert!(guard.exists(), "the group was touched");

    // NEW inside the stage (the one LOG recorded, or --staging): refused,
    // not created.
    let inside = w.staging.join("recovery.jsonl");
    let r = recover(&w.audit_log, &inside, None);
    assert_refused(&r, &inside, "new_log_in_stage", false);
    assert!(!inside.exists());
    let r = recover(&w.audit_log, &inside, Some(w.staging.to_str().unwrap()));
    assert_refused(&r, &inside, "new_log_in_stage", false);
    assert!(guard.exists());
    // --staging naming another directory: NEW inside the stage LOG
    // recorded is refused all the same.
    let other = w.scratch.path("other-stage");
    std::fs::create_dir(&other).unwrap();
    let r = recover(&w.audit_log, &inside, Some(other.to_str().unwrap()));
    assert_refused(&r, &inside, "new_log_in_stage", false);
    assert!(!inside.exists());
    assert!(guard.exists());

    // The group gone (the test removed it): refused.
    ActionGroup::open_recorded(&guard.path, guard.ino)
        .unwrap()
        .remove()
        .map_err(|(_, e)| e)
        .unwrap();
    let new = w.scratch.path("recovery.jsonl");
    let r = recover(&w.audit_log, &new, None);
    assert_refused(&r, &new, "group_gone", true);

    // A missing LOG is recorded as unreadable; a bad command line is 125.
    let new = w.scratch.path("recovery-missing.jsonl");
    let r = recover(&w.scratch.path("no-such.jsonl"), &new, None);
    assert_refused(&r, &new, "log_unreadable", true);
    let out = Command::new(watchdog_bin())
        .args(["recover", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let out = Command::new(watchdog_bin())
        .args(["recover", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for want in [
        "Example:",
        "rea-watchdog recover",
        "watchdog_alive",
        "2 refused",
    ] {
        assert!(help.contains(want), "{want}: {help}");
    }
}

/// Puts a process back into a group (`cgroup.procs` of `home`) on drop:
/// the sibling a test drafted into the action's group goes home before the
/// group's guard ends that group, whatever happened.
struct SendHome {
    pid: i32,
    home: std::path::PathBuf,
}

impl Drop for SendHome {
    fn drop(&mut self) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), self.pid.to_string());
    }
}

/// Membership is not ownership: a job (root) writes the unrelated
/// sibling's pid into the action's `cgroup.procs`, then the watchdog is
/// SIGKILLed. `recover` must refuse (`foreign_member`, exit 2), kill
/// nothing (every member of the action and the sibling still alive), and
/// name the sibling in NEW and on stdout; `verify NEW` re-derives the
/// refusal. The sibling started before the run and has no `REA_RUN_ID`.
#[test]
fn a_drafted_stranger_is_refused_and_nothing_is_killed() {
    require_pid_ns!("recover with a stranger drafted into the group");
    let Some(home) = test_cgroup() else {
        assert!(
            !pid_ns_required(),
            "tools/test made no cgroup (REA_TEST_CGROUP unset or not absolute)"
        );
        eprintln!("SKIP: no test cgroup (run through tools/test as root)");
        return;
    };
    let sibling = Sibling::start();
    let pid = sibling.pid();
    let mut l = Lost::with(
        &sibling,
        &["--pass-env", "REA_TREE_DRAFT_PID"],
        &["draft"],
        |cmd| {
            cmd.env("REA_TREE_DRAFT_PID", pid.to_string());
        },
        false,
    );
    // Declared after the group's guard: dropped (sent home) before it.
    let _home = SendHome {
        pid,
        home: home.clone(),
    };
    let g = ActionGroup::open_recorded(&l.guard.path, l.guard.ino).unwrap();
    assert!(
        g.members().unwrap().contains(&pid),
        "the draft job put the sibling in the action's group"
    );
    l.kill_watchdog();

    // reconcile labels the sibling foreign and every survivor the
    // action's; the outcome is as without it (running, exit 5).
    let (code, v, text) = reconcile(&l.w.audit_log, &["--staging", &l.staging()]);
    assert_eq!(code, 5, "{v:#}");
    let listed = v["group"]["members"].as_array().unwrap();
    let sib = listed.iter().find(|x| x["pid"] == pid).unwrap();
    assert_eq!(sib["role"], "foreign", "{sib:#}");
    assert!(sib["not_the_action"]
        .as_array()
        .unwrap()
        .contains(&"no_run_id".into()));
    for mb in l.survivors() {
        let x = listed.iter().find(|x| x["pid"] == mb.pid).unwrap();
        assert_eq!(x["role"], "action", "{} {x:#}", mb.role);
    }
    assert!(
        text.lines().any(
            |t| t.contains(&format!("pid {pid} ")) && t.contains("FOREIGN: not the action's: ")
        ),
        "{text}"
    );
    assert!(
        text.contains("refuses while they are in the group"),
        "{text}"
    );

    let new = l.w.scratch.path("recovery.jsonl");
    let r = recover(&l.w.audit_log, &new, Some(&l.staging()));
    assert_eq!(r.code, 2, "{:#}\n{}", r.json, r.stderr);
    sibling.assert_alive();
    assert_eq!(
        l.survivors().len(),
        l.expected_survivors,
        "recover killed a member"
    );
    assert!(l.guard.exists(), "the group is still there");
    assert_eq!(r.json["outcome"], "refused", "{:#}", r.json);
    assert_eq!(codes(&r.json), vec!["foreign_member".to_string()]);
    assert_eq!(r.json["killed"], false);
    assert_eq!(r.json["recorded"], true);
    let foreign = r.json["foreign_members"].as_array().unwrap();
    assert_eq!(foreign.len(), 1, "{:#}", r.json);
    assert_eq!(foreign[0]["pid"], pid);
    // No REA_RUN_ID; started before the watchdog too, unless both began
    // within the same clock tick (start times are in ticks, 10 ms here).
    let failed = foreign[0]["failed"].as_array().unwrap();
    let wd_start = first_record(&new)
        .watchdog
        .expect("the watchdog's identity")
        .start_time;
    let before = foreign[0]["start_time"].as_u64().unwrap() < wd_start;
    let mut want = vec![Value::from("no_run_id")];
    if before {
        want.insert(0, "started_before_run".into());
    }
    assert_eq!(failed, &want, "{:#}", r.json);
    assert!(
        r.stderr.contains("recover refused (foreign_member)")
            && r.stderr.contains(&format!("pid {pid}"))
            && r.stderr.contains("nothing was killed"),
        "{}",
        r.stderr
    );

    // NEW: the frozen census, the sibling named foreign, refused.
    let recs = recovery_log(&new);
    let kinds = recs.kinds();
    assert_eq!(
        kinds,
        [
            "recovery_started",
            "recovery_checked",
            "recovery_members",
            "recovery_decided"
        ]
    );
    let m = match recs.at(2) {
        RecoveryEvent::Members(m) => m,
        e => panic!("the third record is not recovery_members: {e:?}"),
    };
    assert!(m.freeze.frozen, "{m:#?}");
    let named = m
        .members
        .iter()
        .find(|x| x.pid == pid)
        .unwrap_or_else(|| panic!("the sibling is not in the census: {m:#?}"));
    assert_eq!(named.run_id, RunIdSeen::Missing, "{named:#?}");
    for mb in l.survivors() {
        let x = m
            .members
            .iter()
            .find(|x| x.pid == mb.pid)
            .unwrap_or_else(|| panic!("{} not in the census: {m:#?}", mb.role));
        assert_eq!(x.run_id, RunIdSeen::Carried, "{} ({x:#?})", mb.role);
    }
    let (vcode, v) = verify_recovery(&new, &[]);
    assert_eq!(vcode, 1, "{v:#}");
    assert_eq!(v["result"], "refused", "{v:#}");
    assert!(codes(&v).contains(&"foreign_member".into()), "{v:#}");
    let detail = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "foreign_member")
        .unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains(&format!("pid {pid}")), "{detail}");
    // Thawed: the members run again (a frozen group reports frozen 0).
    let events = std::fs::read_to_string(l.guard.path.join("cgroup.events")).unwrap();
    assert!(events.contains("frozen 0"), "{events}");

    // A forged decision, re-chained: recovered with the stranger named.
    let mut lines = common::logs::read_lines(&new);
    let last = lines.len() - 1;
    let forged_dec = br#"{"outcome":"recovered","reasons":[]}"#;
    let at = lines[last]
        .windows(7)
        .position(|x| x == b"\"data\":")
        .unwrap()
        + 7;
    lines[last].truncate(at);
    lines[last].extend_from_slice(forged_dec);
    lines[last].push(b'}');
    let run_id = recovery_records(&new)[0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    rechain(&mut lines, &run_id, last);
    let forged = l.w.scratch.path("forged.jsonl");
    common::logs::write_lines(&forged, &lines);
    let (code, v) = verify_recovery(&forged, &[]);
    assert_eq!(code, 3, "{v:#}");
    assert!(codes(&v).contains(&"decision_mismatch".into()), "{v:#}");

    // The sibling goes home; the rest is the guard's (the action's own).
    std::fs::write(home.join("cgroup.procs"), pid.to_string()).unwrap();
    assert!(!g.members().unwrap().contains(&pid));
    sibling.assert_alive();
}
