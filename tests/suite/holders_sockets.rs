//! The holder scan finds unix sockets bound in the stage (issue 29; the
//! code is src/holders/sockets.rs, docs/stage.md "The holder scan"): a
//! process listening on a socket file of a sealed run's stage holds it,
//! named with the socket, whichever mount namespace it bound it from (the
//! match is by the file's device and inode); a socket file with nothing
//! behind it holds nothing.
//!
//! Each listener is `fixtures/sock_listener.py`, started by the test
//! outside any watchdog, reporting on an oracle FIFO, ended by the test
//! through its pidfd (and SIGKILLed through it by [`Held`]'s guard when a
//! test fails). Run inside a private PID namespace: `tools/test
//! holders_sockets::`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::harness::*;
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::holders::{scanned, verify_stage};

/// A listener started by the test, bound through its pidfd.
struct Listener {
    child: Child,
    held: Held,
    /// What it reported when ready (the path it bound, its file's dev/ino).
    ready: Value,
}

impl Listener {
    /// `sock_listener.py FLAGS PATH`, waited for until its ready line;
    /// `oracle` names the FIFO in `scratch`.
    fn start(scratch: &Scratch, oracle: &str, flags: &[&str], path: &Path) -> Self {
        let mut o = Oracle::new(scratch, oracle);
        let child = Command::new(python())
            .arg(fixture("sock_listener.py"))
            .args(["--oracle", o.arg()])
            .args(flags)
            .arg(path)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the listener");
        let (members, ready) = o.wait_ready(PATIENCE);
        assert_eq!(members.len(), 1, "{members:?}");
        let mut held = Held::default();
        if !flags.contains(&"--exit") {
            held.add_pid("listener", members[0].pid);
        }
        let mut l = Listener { child, held, ready };
        l.ready["pid"] = members[0].pid.into();
        l
    }

    fn pid(&self) -> i32 {
        self.ready["pid"].as_i64().unwrap() as i32
    }

    fn assert_alive(&self) {
        assert!(
            self.held.alive().len() == 1,
            "listener pid {} died: something signalled it",
            self.pid()
        );
    }

    /// Ends it through its pidfd (SIGTERM) and reaps it.
    fn end(mut self) {
        let _ = self.held.get("listener").signal(Signal::SIGTERM);
        let st = wait_child(&mut self.child, PATIENCE);
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(libc::SIGTERM),
            "{st:?}"
        );
    }

    /// Waits for a `--exit` listener to exit 0 on its own.
    fn exited(mut self) {
        let st = wait_child(&mut self.child, PATIENCE);
        assert!(st.success(), "{st:?}");
    }
}

/// `rea-audit holders DIR [--json]` → (exit code, stdout).
fn holders(dir: &Path, json: bool) -> (i32, String) {
    let mut c = Command::new(audit_bin());
    c.arg("holders").arg(dir);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The socket holds of holder `pid` in scan `scan` (panics when it is not
/// named as a holder).
fn socket_holds(scan: &Value, pid: i32) -> Vec<Value> {
    let h = scan["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} is not named as a holder: {scan:#}"));
    h["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["how"] == "socket")
        .cloned()
        .collect()
}

/// A watchdog run, closed, whose stage got what `plant` puts there before
/// the watchdog started (the stage as uploaded, with an outside listener
/// bound in it): the sockets are part of the stage the baseline and the
/// receipt inventory alike, so only their holders can make it `retain`.
fn sealed_with<T>(plant: impl FnOnce(&Scratch, &Path) -> T) -> (Watchdog, T) {
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    std::fs::create_dir(&staging).unwrap();
    let planted = plant(&scratch, &staging);
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {});
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    (w, planted)
}

/// The holders the watchdog's own scan at close named (pids).
fn named_at_close(w: &Watchdog) -> Vec<i64> {
    scanned(&w.log())
        .holders
        .iter()
        .map(|h| i64::from(h.pid))
        .collect()
}

/// Once the sockets' processes are gone, the stage as the run left it
/// (socket files and all) is `delete_allowed`.
fn assert_allowed(w: &Watchdog) {
    let (code, v) = verify_stage(w);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verdict"], "delete_allowed", "{v:#}");
}

/// (a) A listener outside the action on `STAGE/live.sock` (bound while
/// the run went on), with a connection it accepted: the watchdog's scan at
/// close names it, `rea-audit holders` says held and names it (the socket
/// path in the stage, listening and connected), `verify --staging`
/// retains with `stage_held` naming it; ended, the same stage (its socket
/// file still there) is `delete_allowed`.
#[test]
fn a_listener_on_a_socket_in_the_stage_holds_it_until_it_ends() {
    require_pid_ns!("socket holders");
    let (w, l) = sealed_with(|scratch, staging| {
        let sock = staging.join("live.sock");
        Listener::start(scratch, "oracle", &["--connect"], &sock)
    });
    let sock = w.staging.join("live.sock");
    assert!(named_at_close(&w).contains(&i64::from(l.pid())));
    let (code, text) = holders(&w.staging, false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("HELD"), "{text}");
    let named = format!("unix socket {} (stream, listening;", sock.display());
    assert!(text.contains(&format!("pid {} ", l.pid())), "{text}");
    assert!(text.contains(&named), "{text}");
    assert!(
        text.contains(&format!(
            "unix socket {} (stream, connected;",
            sock.display()
        )),
        "the accepted connection shares the listener's file: {text}"
    );
    let (code, json) = holders(&w.staging, true);
    assert_eq!(code, 1, "{json}");
    let scan: Value = serde_json::from_str(&json).unwrap();
    let holds = socket_holds(&scan, l.pid());
    assert_eq!(
        holds.len(),
        2,
        "the listener and the accepted one: {scan:#}"
    );
    for h in &holds {
        assert_eq!(h["what"], s(&sock), "{h:#}");
        assert_eq!(h["socket"]["bound_as"], s(&sock), "{h:#}");
        assert_eq!(h["socket"]["kind"], "stream", "{h:#}");
    }
    let states: Vec<&str> = holds
        .iter()
        .map(|h| h["socket"]["state"].as_str().unwrap())
        .collect();
    assert!(
        states.contains(&"listening") && states.contains(&"connected"),
        "{states:?}"
    );

    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["verdict"], "retain", "{v:#}");
    assert_eq!(reason_codes(&v), ["stage_held"], "{v:#}");
    let held = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"] == "stage_held")
        .unwrap_or_else(|| panic!("no stage_held: {v:#}"));
    let detail = held.to_string();
    assert!(detail.contains(&format!("pid {} ", l.pid())), "{detail}");
    assert!(detail.contains(&named), "{detail}");
    assert_eq!(socket_holds(&v["holders"], l.pid()).len(), 2, "{v:#}");

    l.assert_alive();
    l.end();
    let (code, text) = holders(&w.staging, false);
    assert_eq!(code, 0, "the listener is gone: {text}");
    assert!(sock.exists(), "its socket file stays");
    assert_allowed(&w);
}

/// (b) The stage reached through a bind mount at another path, in a mount
/// namespace of the listener's own: the path it bound names nothing here,
/// yet the socket is found by its file's device and inode and named by
/// the stage's path, with the path it was bound as. The bind mount is of
/// the stage's parent, so it holds no stage entry itself: the listener is
/// the only holder.
#[test]
fn a_socket_bound_from_another_mount_namespace_is_found_by_dev_and_inode() {
    require_pid_ns!("socket holders (mount namespaces)");
    let _ns = common::mounts::new_namespace();
    let (w, (l, bound_as)) = sealed_with(|scratch, staging| {
        let parent = staging.parent().unwrap().to_path_buf();
        let name = staging.file_name().unwrap().to_owned();
        let elsewhere: PathBuf = scratch.path("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let bound_as = elsewhere.join(name).join("live.sock");
        let script = "mount --bind \"$1\" \"$2\" && exec \"$3\" \"$4\" --oracle \"$5\" \"$6\"";
        let mut o = Oracle::new(scratch, "oracle");
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(script)
            .arg("sh")
            .arg(&parent)
            .arg(&elsewhere)
            .arg(python())
            .arg(fixture("sock_listener.py"))
            .arg(o.arg())
            .arg(&bound_as)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the listener in its own mount namespace");
        let (members, ready) = o.wait_ready(PATIENCE);
        let mut held = Held::default();
        held.add_pid("listener", members[0].pid);
        let ready = serde_json::json!({ "pid": members[0].pid, "as": ready });
        (Listener { child, held, ready }, bound_as)
    });
    assert!(
        std::fs::symlink_metadata(&bound_as).is_err(),
        "{} must not exist in this mount namespace",
        bound_as.display()
    );
    let sock = w.staging.join("live.sock");
    assert!(named_at_close(&w).contains(&i64::from(l.pid())));
    let (code, v) = verify_stage(&w);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(reason_codes(&v), ["stage_held"], "{v:#}");
    assert_eq!(v["holders"]["mounts_total"], 0, "{v:#}");
    assert_eq!(v["holders"]["holders_total"], 1, "{v:#}");
    let holds = socket_holds(&v["holders"], l.pid());
    assert_eq!(holds.len(), 1, "{v:#}");
    assert_eq!(holds[0]["what"], s(&sock), "{v:#}");
    assert_eq!(holds[0]["socket"]["bound_as"], s(&bound_as), "{v:#}");
    assert_eq!(holds[0]["socket"]["state"], "listening", "{v:#}");
    let (code, text) = holders(&w.staging, false);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("bound as {}", bound_as.display())),
        "{text}"
    );
    l.assert_alive();
    l.end();
    assert_allowed(&w);
}

/// (c) A socket file whose process is gone holds nothing, beside a live
/// one that does: only the live one is named, and the dead one is not
/// named as unreadable either; with the live one gone, not held, and the
/// stage with both socket files `delete_allowed`.
#[test]
fn a_socket_file_with_no_socket_behind_it_is_not_a_holder() {
    require_pid_ns!("socket holders");
    let (w, l) = sealed_with(|scratch, staging| {
        let dead = staging.join("dead.sock");
        Listener::start(scratch, "oracle-dead", &["--exit"], &dead).exited();
        Listener::start(scratch, "oracle", &[], &staging.join("live.sock"))
    });
    let sock = w.staging.join("live.sock");
    assert_eq!(named_at_close(&w), [i64::from(l.pid())]);
    let (code, json) = holders(&w.staging, true);
    assert_eq!(code, 1, "{json}");
    let scan: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(scan["holders_total"], 1, "{scan:#}");
    let holds = socket_holds(&scan, l.pid());
    assert_eq!(holds.len(), 1, "{scan:#}");
    assert_eq!(holds[0]["what"], s(&sock), "{scan:#}");
    assert!(!json.contains("dead.sock"), "{scan:#}");
    l.end();
    let (code, text) = holders(&w.staging, false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("not held"), "{text}");
    assert!(!text.contains("dead.sock"), "{text}");
    assert!(w.staging.join("dead.sock").exists() && sock.exists());
    assert_allowed(&w);
}
