//! Issue 12, first slice: kernel containment (docs/containment.md). A watchdog with
//! `--contain cgroup` places every job in its own group `rea-<run id>`;
//! a stop ends everything (the KILL stage writes `cgroup.kill`, recorded
//! first), the proof adds `populated 0`, the group is removed at close.
//! `auto` picks cgroup here and `none` where discovery finds no writable
//! cgroup2 (a missing directory, one that is not cgroup2, a read-only
//! cgroup2 mount); `--contain cgroup` there fails closed, nothing launched.
//!
//! Run inside a private PID namespace (`tools/test contain::`). Every
//! group a test sees is removed by a guard even when the test fails: it
//! re-opens the group by its *recorded* inode (a `rea-` name only), kills
//! it through `ActionGroup::kill` and removes it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::harness::*;
use common::stop::*;
use common::typed::{all, first, Log};
use rea::kinds::watchdog::{
    ContainMode, ContainRequest, Containment, Event, GroupIdentity, Stage, StopReason,
};
use serde_json::Value;

fn containment(log: &Log) -> Containment {
    let c = all!(log, Event::Containment);
    assert_eq!(c.len(), 1, "one containment record: {:?}", log.kinds());
    assert_eq!(log.kinds()[2], "containment", "the third record");
    c[0].clone()
}

/// The group a cgroup-mode containment record names.
fn group(c: &Containment) -> &GroupIdentity {
    c.group
        .as_ref()
        .unwrap_or_else(|| panic!("no group recorded: {c:?}"))
}

/// The group path `/proc/PID/cgroup` shows for pid (its `0::` line).
fn cgroup_of(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// `stop`, every member of `t` gone, `close`, the watchdog exits: a
/// positive stop for `stop_requested`.
fn stop_then_close(w: &mut Watchdog, t: &mut Nasty, sibling: &Sibling) {
    let stop = client_wait(w, "stop");
    assert!(stop.status.success(), "{stop:?}");
    t.assert_gone(sibling, &w.run_id());
    let close = client_wait(w, "close");
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    assert_positive_stop(w, sibling, StopReason::StopRequested);
}

#[test]
fn cgroup_mode_contains_the_tree_and_kills_it_through_the_group() {
    require_pid_ns!("contain");
    let sibling = Sibling::start();
    // A short grace: the tree ignores TERM in places, so KILL is needed. A
    // long kill bound: the group may take its time to freeze while what
    // TERM ended exits (up to 2 s; see src/watchdog/stop/kill.rs).
    let mut w = Watchdog::start(&[
        "--contain",
        "cgroup",
        "--term-grace",
        "200ms",
        "--kill-bound",
        "20s",
    ]);
    let _guard = GroupGuard::of(&w.audit_log);
    let c = containment(&w.log());
    assert_eq!(c.mode, ContainMode::Cgroup, "{c:?}");
    assert_eq!(c.requested, ContainRequest::Cgroup, "{c:?}");
    let gpath = PathBuf::from(&group(&c).path);
    let name = format!("rea-{}", w.run_id());
    assert_eq!(gpath.file_name().unwrap().to_str(), Some(name.as_str()));
    assert!(gpath.is_dir(), "the group exists while the action runs");
    // The watchdog itself stays outside the group.
    let own = cgroup_of(w.pid()).unwrap();
    assert!(!own.ends_with(&name), "the watchdog is in {own}");

    let mut t = Nasty::start(&w, &sibling, &[], "wait");
    let mut inside = 0;
    for m in &t.members {
        if let Some(cg) = cgroup_of(m.pid) {
            if !cg.is_empty() {
                assert!(
                    cg.ends_with(&format!("/{name}")),
                    "{} ({}) is in {cg}",
                    m.pid,
                    m.role
                );
                inside += 1;
            }
        }
    }
    assert!(inside >= 10, "only {inside} members read back in the group");
    assert!(!cgroup_of(sibling.pid()).unwrap().ends_with(&name));

    stop_then_close(&mut w, &mut t, &sibling);

    let log = w.log();
    let ks = log.kinds();
    let kill = all!(log, Event::GroupKill);
    assert_eq!(kill.len(), 1, "cgroup.kill written once: {ks:?}");
    assert_eq!(kill[0].ino, group(&c).ino);
    assert!(all!(log, Event::GroupKillFailed).is_empty(), "{ks:?}");
    // Recorded in the KILL stage: after the TERM sweeps, before any KILL sweep.
    let at = ks.iter().position(|k| *k == "group_kill").unwrap();
    let sweeps: Vec<(usize, Stage)> = log
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::SignalSweep(s) => Some((i, s.stage)),
            _ => None,
        })
        .collect();
    assert!(
        sweeps.iter().any(|(i, s)| *s == Stage::Term && *i < at),
        "{sweeps:?}"
    );
    assert!(
        sweeps.iter().all(|(i, s)| *s != Stage::Kill || *i > at),
        "{sweeps:?}"
    );
    let removed = all!(log, Event::GroupRemoved);
    assert_eq!(removed.len(), 1, "{ks:?}");
    let r = removed[0];
    assert!(!r.populated, "{r:?}");
    assert!(r.removed, "{r:?}");
    assert_eq!(Some(&r.group), c.group.as_ref());
    assert!(
        ks.iter().position(|k| *k == "group_removed") < ks.iter().position(|k| *k == "receipt")
    );
    assert!(!gpath.exists(), "the group directory is gone after close");
    sibling.assert_alive();
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");

    // The replay holds the group records to the containment record.
    let ino = group(&c).ino;
    let s = |x: &str| x.to_string();
    let cases = [
        (
            "group_kill",
            format!("\"ino\":{ino}"),
            format!("\"ino\":{}", ino + 1),
            "names group inode",
        ),
        (
            "group_removed",
            s("\"populated\":false"),
            s("\"populated\":true"),
            "says populated",
        ),
        (
            "containment",
            s("\"mode\":\"cgroup\""),
            s("\"mode\":\"none\""),
            "names a group",
        ),
    ];
    for (kind, from, to, why) in cases {
        let (code, v) = forge(&w, kind, &from, &to);
        assert_eq!(code, 3, "{kind} edited: {v:#}");
        assert!(v.to_string().contains(why), "{kind}: wants {why:?}: {v:#}");
    }
    let (code, v) = forge(&w, "group_removed", "", "");
    assert_eq!(code, 3, "group_removed dropped: {v:#}");
    assert!(v.to_string().contains("no group_removed"), "{v:#}");
}

/// The log of `w` with the first `kind` record edited (`from` → `to`), or
/// dropped (`from` empty), re-chained as a forger would; verify's answer.
fn forge(w: &Watchdog, kind: &str, from: &str, to: &str) -> (i32, Value) {
    let mut lines = common::logs::read_lines(&w.audit_log);
    let tag = format!("\"kind\":\"{kind}\"");
    let at = lines
        .iter()
        .position(|l| String::from_utf8_lossy(l).contains(&tag))
        .unwrap_or_else(|| panic!("no {kind} record"));
    if from.is_empty() {
        lines.remove(at);
        for (i, l) in lines.iter_mut().enumerate() {
            *l = common::logs::with_seq(l, i as u64);
        }
        common::logs::rechain(&mut lines, &w.run_id(), 0);
    } else {
        lines[at] = common::logs::replace_once(&lines[at], from, to.as_bytes());
        common::logs::rechain(&mut lines, &w.run_id(), at);
    }
    let forged = w.scratch.path(&format!("forged-{kind}.jsonl"));
    common::logs::write_lines(&forged, &lines);
    let out = Command::new(audit_bin())
        .arg("verify")
        .arg(&forged)
        .arg("--json")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn auto_picks_cgroup_here_and_removes_the_group_at_close() {
    require_pid_ns!("contain");
    // Explicit: REA_CONTAIN (tools/test's none pass) must not decide here.
    let mut w = Watchdog::start(&["--contain", "auto"]);
    let _guard = GroupGuard::of(&w.audit_log);
    let c = containment(&w.log());
    assert_eq!(c.requested, ContainRequest::Auto, "{c:?}");
    assert_eq!(c.mode, ContainMode::Cgroup, "{c:?}");
    let gpath = PathBuf::from(&group(&c).path);
    let out = w.submit(&["--capture"], &["/bin/cat", "/proc/self/cgroup"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l == format!("0::/rea-{}", w.run_id())
            || l.ends_with(&format!("/rea-{}", w.run_id()))),
        "{text}"
    );
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let log = w.log();
    assert!(log.receipt().quiescent);
    assert!(first!(log, Event::GroupRemoved).removed);
    assert!(all!(log, Event::GroupKill).is_empty(), "no stop, no kill");
    assert!(!gpath.exists());
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verdict"], "delete_allowed", "{v:#}");
}

/// A watchdog with discovery pointed at `root`: `auto` must choose none.
fn auto_is_none_at(root: &Path, why: &str) {
    let mut w = Watchdog::start(&["--contain", "auto", "--cgroup-root", root.to_str().unwrap()]);
    let _guard = GroupGuard::of(&w.audit_log);
    let c = containment(&w.log());
    assert_eq!(c.requested, ContainRequest::Auto, "{c:?}");
    assert_eq!(c.mode, ContainMode::None, "{c:?}");
    assert!(c.group.is_none(), "{c:?}");
    assert!(c.detail.contains(why), "{c:?}");
    let out = w.submit(&[], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    assert!(all!(w.log(), Event::GroupRemoved).is_empty());
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
}

/// `rea-watchdog run --contain cgroup` with discovery at `root`: exit 125,
/// a clear message, no log, no state directory, nothing launched.
fn cgroup_fails_closed_at(root: &Path, scratch: &Scratch) {
    let (state, log) = (scratch.path("state-refused"), scratch.path("refused.jsonl"));
    let out = Command::new(watchdog_bin())
        .args(["run", "--contain", "cgroup", "--cgroup-root"])
        .arg(root)
        .arg("--state-dir")
        .arg(&state)
        .arg("--audit-log")
        .arg(&log)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--contain cgroup"), "{err}");
    assert!(!log.exists() && !state.exists(), "nothing made: {err}");
    let marker = scratch.path("launched");
    let out = Command::new(watchdog_bin())
        .args(["exec", "--contain", "cgroup", "--cgroup-root"])
        .arg(root)
        .arg("--audit-log")
        .arg(scratch.path("exec-refused.jsonl"))
        .arg("--")
        .arg("/bin/touch")
        .arg(&marker)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(!marker.exists(), "exec launched ARGV without its group");
    assert!(!scratch.path("exec-refused.jsonl").exists());
}

#[test]
fn without_a_writable_cgroup2_auto_is_none_and_cgroup_fails_closed() {
    require_pid_ns!("contain");
    let scratch = Scratch::new();
    let missing = scratch.path("no-such-mount");
    auto_is_none_at(&missing, "no-such-mount");
    cgroup_fails_closed_at(&missing, &scratch);
    let plain = scratch.path("plain-dir");
    std::fs::create_dir(&plain).unwrap();
    auto_is_none_at(&plain, "not a cgroup2 mount");
    cgroup_fails_closed_at(&plain, &scratch);
}

/// A read-only cgroup2 mount (the same hierarchy, mounted again `ro` in
/// the test's private mount namespace, which tools/test makes).
#[test]
fn a_read_only_cgroup2_mount_is_not_writable() {
    require_pid_ns!("contain");
    let scratch = Scratch::new();
    let ro = scratch.path("ro-cgroup2");
    std::fs::create_dir(&ro).unwrap();
    let st = Command::new("mount")
        .args(["-t", "cgroup2", "-o", "ro,nosuid,nodev,noexec", "none"])
        .arg(&ro)
        .status();
    if !matches!(st, Ok(s) if s.success()) {
        eprintln!("SKIPPED read-only cgroup2: cannot mount one here ({st:?})");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(ro.clone());
    auto_is_none_at(&ro, "read-only");
    cgroup_fails_closed_at(&ro, &scratch);
}

#[test]
fn none_stops_the_tree_as_before_with_no_group() {
    require_pid_ns!("contain");
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&["--contain", "none"]);
    let c = containment(&w.log());
    assert_eq!(c.mode, ContainMode::None, "{c:?}");
    assert_eq!(c.requested, ContainRequest::None, "{c:?}");
    let mut t = Nasty::start(&w, &sibling, &[], "wait");
    let own = cgroup_of(w.pid()).unwrap();
    let leader = t.member("root");
    assert_eq!(cgroup_of(leader.pid).unwrap(), own, "no group in none mode");
    stop_then_close(&mut w, &mut t, &sibling);
    let recs = w.records();
    for k in ["group_kill", "group_kill_failed", "group_removed"] {
        assert!(of_kind(&recs, k).is_empty(), "{k} in none mode");
    }
}

/// A start that fails after its group was made (here: the stage is
/// already armed, found only after the log is open) removes the group:
/// only a group with members outlives its watchdog. The watchdog runs in
/// a group of the test's own (`leak-<pid>`), so no other test's groups are
/// counted; that group is removed at the end, even when the test fails.
#[test]
fn a_start_refused_after_the_group_was_made_leaves_no_group() {
    require_pid_ns!("contain");
    let own = cgroup_of(std::process::id() as i32).unwrap();
    let mount = rea::contain::discover::discover(None).expect("a writable cgroup2 here");
    let holder = mount.own.join(format!("leak-{}", std::process::id()));
    std::fs::create_dir(&holder).unwrap();
    struct Rmdir(PathBuf);
    impl Drop for Rmdir {
        fn drop(&mut self) {
            // Only empty directories: rmdir never kills.
            for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _rm = Rmdir(holder.clone());
    let scratch = Scratch::new();
    let stage = scratch.path("stage");
    std::fs::create_dir(&stage).unwrap();
    std::fs::write(stage.join(rea::stage::RECEIPT_NAME), b"{}\n").unwrap();
    std::fs::write(stage.join(rea::stage::ARMED_NAME), b"an earlier run\n").unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("echo 0 > \"$0/cgroup.procs\" && exec \"$@\"")
        .arg(&holder)
        .arg(watchdog_bin())
        .args(["run", "--contain", "cgroup", "--staging"])
        .arg(&stage)
        .arg("--state-dir")
        .arg(scratch.path("state"))
        .arg("--audit-log")
        .arg(scratch.path("audit.jsonl"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already armed"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&holder)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "groups left behind: {left:?} ({own})");
}

/// A descendant that leaves the action's group (a privileged job can write
/// another group's `cgroup.procs`) is not in `cgroup.procs` any more, yet
/// it is still the action's: the stop finds it through the `/proc` closure
/// once the group is empty and ends it, the receipt is positive, and the
/// group it moved to (the test's own) is never killed.
#[test]
fn a_descendant_that_left_the_group_is_still_stopped() {
    require_pid_ns!("contain");
    let Some(parent) = test_cgroup() else {
        assert!(
            !pid_ns_required(),
            "tools/test made no cgroup (REA_TEST_CGROUP unset or not absolute)"
        );
        eprintln!("SKIP: no test cgroup (run through tools/test as root)");
        return;
    };
    // The group the member moves to: the test's, removed (rmdir, never a
    // kill) when the test ends, once its one member is dead.
    struct Escape(PathBuf);
    impl Drop for Escape {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let escape = Escape(parent.join(format!("escape-{}", std::process::id())));
    std::fs::create_dir(&escape.0).unwrap();
    let sibling = Sibling::start();
    let mut w = Watchdog::start_with(
        Scratch::new(),
        None,
        &[
            "--contain",
            "cgroup",
            "--term-grace",
            "200ms",
            "--pass-env",
            "REA_TREE_ESCAPE_CGROUP",
        ],
        |cmd| {
            cmd.env("REA_TREE_ESCAPE_CGROUP", &escape.0);
        },
    );
    let _guard = GroupGuard::of(&w.audit_log);
    let mut t = Nasty::start(&w, &sibling, &["leavegroup"], "wait");
    let left = t
        .members
        .iter()
        .find(|m| m.role == "leavegroup")
        .unwrap()
        .pid;
    let name = escape.0.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        cgroup_of(left).unwrap().ends_with(&name),
        "it moved to {name}"
    );

    stop_then_close(&mut w, &mut t, &sibling);
    // It was not among the group's members when cgroup.kill went out, and a
    // KILL sweep (bound by the scan) ended it.
    let log = w.log();
    let kill = all!(log, Event::GroupKill);
    assert_eq!(kill.len(), 1);
    assert!(!kill[0].members.contains(&left));
    assert!(
        signalled_pids(&log).contains(&left),
        "no sweep targeted the member that left"
    );
    assert!(escape.0.is_dir(), "the group it moved to is untouched");
}
