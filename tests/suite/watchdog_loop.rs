//! Issue 3, the event loop end to end: a controller's install phase with
//! nested launchers, concurrent callers, output capture and caps, and the
//! watchdog outliving its controller's SIGKILL.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdout, Command, Output, Stdio};
use std::sync::Barrier;
use std::time::Duration;

use common::harness::*;
use common::raw::*;
use common::typed::{all, wait_for_log, Log};
use nix::sys::signal::Signal;
use rea::kinds::watchdog::{Event, Ident, Outcome, Status, StopReason, Stream};
use rea::process::pidfd::bind_ident;
use rea::protocol::Capture;
use serde_json::Value;
use sha2::{Digest, Sha256};

const CAP: usize = 65536;

/// flood.py's pattern: bytes 0..=255 repeating.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 256) as u8).collect()
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn flood(bytes: usize) -> Vec<String> {
    vec![
        python().to_string(),
        fixture("flood.py"),
        "--bytes".into(),
        bytes.to_string(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Closes `w`; the close reply must be positive, the watchdog exit 0, and
/// verify (pinned to the printed head, the run and the staging dir) must
/// allow deletion. Returns (close reply, verdict).
fn close_allowed(w: &mut Watchdog) -> (Value, Value) {
    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    let c: Value = serde_json::from_slice(&close.stdout).expect("close prints JSON");
    assert_eq!(c["positive"], true, "{c}");
    assert!(w.wait(PATIENCE).success());
    let head = w.head().expect("sealed line with a head");
    assert_eq!(c["head"], head.as_str());
    let run = w.run_id();
    let staging = w.staging.to_str().unwrap().to_string();
    let (code, v) = w.verify(&[
        "--staging",
        &staging,
        "--expect-head",
        &head,
        "--expect-run",
        &run,
    ]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verdict"], "delete_allowed", "{v:#}");
    (c, v)
}

// ----- an install phase with nested launchers ---------------------------------

fn install_phase(parallel: bool) {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut argv = vec![
        python().to_string(),
        fixture("phase.py"),
        "--watchdog".into(),
        watchdog_bin().into(),
        "--launchers".into(),
        "3".into(),
    ];
    if parallel {
        argv.push("--parallel".into());
    }
    let submit = w.submit_bg(
        &["--name", "install", "--deadline", "200s", "--capture"],
        &strs(&argv),
    );
    let submit_pid = submit.id() as i32;
    let out = output_within(submit, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "launcher-1 exited 0\nlauncher-2 exited 0\nlauncher-3 exited 0\n"
    );
    let (c, _) = close_allowed(&mut w);
    assert_eq!(c["outcome"], "closed");
    assert!(c["stop_reason"].is_null());

    let recs = w.log();
    let wd = w.pid();
    let spawned = all!(recs, Event::JobSpawned);
    assert_eq!(spawned.len(), 4, "{spawned:#?}");
    let phase = *spawned
        .iter()
        .find(|j| j.name.as_deref() == Some("install"))
        .expect("the phase's job");
    let caller_pid = |j: &rea::kinds::watchdog::JobSpawned| j.caller.map(|c| c.pid);
    // The phase: the watchdog's child in its own session, asked for by the
    // test's submit.
    assert_eq!(phase.ppid, wd, "{phase:?}");
    assert_eq!(phase.sid, phase.pid, "{phase:?}");
    assert_eq!(caller_pid(phase), Some(submit_pid), "{phase:?}");
    assert_eq!(phase.argv.get(1), Some(&fixture("phase.py")));
    let mut names = Vec::new();
    for l in spawned
        .iter()
        .filter(|j| j.name.as_deref() != Some("install"))
    {
        // Each launcher: the watchdog's child (a sibling of the phase, not
        // its child) in a session of its own.
        assert_eq!(l.ppid, wd, "the launcher's parent is the watchdog: {l:?}");
        assert_ne!(l.ppid, phase.pid, "{l:?}");
        assert_eq!(l.sid, l.pid, "its own session: {l:?}");
        assert_ne!(l.sid, phase.sid, "{l:?}");
        assert_eq!(l.argv.get(1), Some(&fixture("launcher.py")));
        // Its caller was the phase's nested `submit`, not the test.
        assert_ne!(caller_pid(l), Some(submit_pid), "{l:?}");
        assert_ne!(caller_pid(l), Some(phase.pid), "{l:?}");
        names.push(l.name.clone().expect("a launcher's name"));
    }
    names.sort();
    assert_eq!(names, ["launcher-1", "launcher-2", "launcher-3"]);
    let exited = all!(recs, Event::JobExited);
    assert_eq!(exited.len(), 4);
    for e in &exited {
        assert_eq!(e.status, Status::Code(0), "{e:?}");
        assert!(!e.stopped, "{e:?}");
    }
    // The phase exited last: its launchers were finished before it.
    assert_eq!(exited.last().unwrap().pid, phase.pid);
    let r = recs.receipt();
    assert_eq!(r.outcome, Outcome::Closed, "{r:?}");
    assert!(r.quiescent, "{r:?}");
    assert_eq!(r.counts.jobs, 4, "{r:?}");
    assert_eq!(r.counts.refused, 0, "{r:?}");
    assert!(all!(recs, Event::StopTriggered).is_empty());
    sibling.assert_alive();
}

#[test]
fn an_install_phase_with_three_nested_launchers() {
    install_phase(false);
}

#[test]
fn an_install_phase_with_three_parallel_launchers() {
    install_phase(true);
}

// ----- concurrent callers ----------------------------------------------------

#[test]
fn twenty_concurrent_submits_each_get_their_own_reply() {
    const N: usize = 20;
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let launcher = fixture("launcher.py");
    let go = Barrier::new(N);
    let results: Vec<(usize, Output)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let (w, go, launcher) = (&w, &go, &launcher);
                s.spawn(move || {
                    // Different lengths too, so a mixed-up reply cannot match.
                    let text = format!("caller-{i:02}-{}", "x".repeat(i * 97));
                    let err = format!("stderr-of-{i:02}");
                    go.wait();
                    let out = w.submit(
                        &[
                            "--capture",
                            "--deadline",
                            "300s",
                            "--name",
                            &format!("c{i}"),
                        ],
                        &[python(), launcher, "--print", &text, "--stderr", &err],
                    );
                    (i, out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, out) in &results {
        let text = format!("caller-{i:02}-{}\n", "x".repeat(i * 97));
        assert_eq!(out.status.code(), Some(0), "caller {i}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), text, "caller {i}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("stderr-of-{i:02}\n"),
            "caller {i}"
        );
    }
    close_allowed(&mut w);
    let recs = w.log();
    let spawned = all!(recs, Event::JobSpawned);
    assert_eq!(spawned.len(), N);
    let mut callers: Vec<i32> = spawned
        .iter()
        .map(|j| j.caller.expect("a caller").pid)
        .collect();
    callers.sort();
    callers.dedup();
    assert_eq!(callers.len(), N, "each job has its own caller");
    for j in &spawned {
        assert_eq!(j.ppid, w.pid());
        assert_eq!(j.sid, j.pid);
    }
    assert_eq!(all!(recs, Event::JobExited).len(), N);
    assert!(all!(recs, Event::RequestRefused).is_empty());
    assert!(all!(recs, Event::ReplyFailed).is_empty(), "{recs:#?}");
    sibling.assert_alive();
}

// ----- output ------------------------------------------------------------------

#[test]
fn captured_output_comes_back_byte_for_byte() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    // 10 KiB on stdout.
    let out = w.submit(&["--capture"], &strs(&flood(10240)));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout.len(), 10240);
    assert!(out.stdout == pattern(10240), "the captured bytes differ");
    assert!(out.stderr.is_empty(), "{out:?}");
    // 10 KiB on stderr.
    let mut argv = flood(10240);
    argv.extend(["--stream".into(), "stderr".into()]);
    let out = w.submit(&["--capture"], &strs(&argv));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty());
    assert!(out.stderr == pattern(10240), "the captured stderr differs");
    // Exactly the cap is not excess.
    let out = w.submit(&["--capture"], &strs(&flood(CAP)));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout == pattern(CAP), "the captured bytes differ");
    // The reply itself, raw: counts, digests and the bytes.
    let mut r = ReplyFifo::create(&w.state_dir, "raw-capture");
    send(
        &w.state_dir,
        &Req::spawn("raw-capture", &r.name, &strs(&flood(10240))).valid_line(),
    );
    assert_eq!(r.expect()["type"], "accepted");
    let done = r.expect();
    assert_eq!(done["type"], "exited", "{done}");
    assert_eq!(done["output_capped"], false);
    assert_eq!(done["stdout"]["bytes"], 10240);
    assert_eq!(done["stdout"]["sha256"], sha256_hex(&pattern(10240)));
    let got = rea::b64::decode(done["stdout"]["data_b64"].as_str().unwrap()).unwrap();
    assert!(got == pattern(10240));
    assert_eq!(done["stderr"]["bytes"], 0);
    assert_eq!(done["stderr"]["sha256"], sha256_hex(b""));
    drop(r);
    close_allowed(&mut w);
    let recs = w.log();
    let exited = all!(recs, Event::JobExited);
    assert_eq!(exited[0].stdout.bytes, 10240);
    assert_eq!(exited[0].stdout.sha256, sha256_hex(&pattern(10240)));
    assert_eq!(exited[1].stderr.sha256, sha256_hex(&pattern(10240)));
    assert_eq!(exited[2].stdout.bytes, CAP as u64);
    assert!(all!(recs, Event::OutputCapped).is_empty());
    // No record holds the raw output (only counts and digests).
    let log = std::fs::read_to_string(&w.audit_log).unwrap();
    assert!(!log.contains(&rea::b64::encode(&pattern(300))));
    sibling.assert_alive();
}

#[test]
fn discarded_output_keeps_only_counts_and_digests() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let out = w.submit(&[], &strs(&flood(10240)));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    let mut r = ReplyFifo::create(&w.state_dir, "raw-discard");
    send(
        &w.state_dir,
        &Req::spawn("raw-discard", &r.name, &strs(&flood(20000)))
            .set("capture", "\"discard\"")
            .valid_line(),
    );
    assert_eq!(r.expect()["type"], "accepted");
    let done = r.expect();
    assert_eq!(done["type"], "exited", "{done}");
    assert_eq!(done["stdout"]["bytes"], 20000);
    assert_eq!(done["stdout"]["sha256"], sha256_hex(&pattern(20000)));
    assert!(done["stdout"]["data_b64"].is_null(), "{done}");
    assert!(done["stderr"]["data_b64"].is_null(), "{done}");
    drop(r);
    close_allowed(&mut w);
    let recs = w.log();
    let exited = all!(recs, Event::JobExited);
    assert_eq!(exited[0].stdout.bytes, 10240);
    assert_eq!(exited[0].stdout.sha256, sha256_hex(&pattern(10240)));
    assert_eq!(exited[1].stdout.bytes, 20000);
    let spawned = all!(recs, Event::JobSpawned);
    assert_eq!(spawned[0].capture, Capture::Discard);
    sibling.assert_alive();
}

/// Runs one job that writes more than the cap: the action stops for
/// excess_output, submit exits 124 with at most the cap's bytes (a prefix
/// of what was written), the receipt is positive and verify allows
/// deletion of exactly this staging. Returns the records.
fn excess(argv: &[&str], capture: bool) -> (Output, Log) {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut args = vec!["--deadline", "200s"];
    if capture {
        args.push("--capture");
    }
    let out = w.submit(&args, argv);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("excess_output"),
        "{out:?}"
    );
    let (c, v) = close_allowed(&mut w);
    assert_eq!(c["outcome"], "stopped");
    assert_eq!(c["stop_reason"], "excess_output");
    assert_eq!(v["stop_reason"], "excess_output");
    let recs = w.log();
    let capped = all!(recs, Event::OutputCapped);
    assert_eq!(capped.len(), 1, "{capped:#?}");
    assert_eq!(capped[0].job, 1);
    assert_eq!(capped[0].cap, CAP as u64);
    let first = all!(recs, Event::StopTriggered)
        .into_iter()
        .find(|t| t.first)
        .cloned()
        .unwrap();
    assert_eq!(first.reason, StopReason::ExcessOutput, "{first:?}");
    assert_eq!(first.job, Some(1));
    let exited = all!(recs, Event::JobExited);
    assert!(exited[0].output_capped);
    assert!(exited[0].stopped);
    sibling.assert_alive();
    (out, recs)
}

#[test]
fn one_mib_is_excess_output() {
    let (out, recs) = excess(&strs(&flood(1 << 20)), true);
    assert_eq!(out.stdout.len(), CAP, "the cap's worth is kept");
    assert!(out.stdout == pattern(CAP), "kept bytes are the first ones");
    let exited = all!(recs, Event::JobExited);
    assert!(exited[0].stdout.bytes > CAP as u64);
}

#[test]
fn one_byte_over_the_cap_is_excess_output() {
    let (out, _) = excess(&strs(&flood(CAP + 1)), true);
    assert!(out.stdout == pattern(CAP));
}

/// A vmsplice flood refills the pipe as fast as it is read: a reader that
/// reads "until it would block" never gets there (636 MB were read past a
/// 64 KiB cap, and the first stop step came 547 ms late). At most the cap
/// plus one pipe buffer is read (docs/ownership.md, "Every promise has a
/// clock"), and the first TERM sweep follows the trigger at once.
#[test]
fn a_vmsplice_flood_is_cut_at_the_cap() {
    let (out, recs) = excess(&[python(), &fixture("splice_flood.py")], true);
    assert_eq!(out.stdout.len(), CAP, "the cap's worth is kept");
    let exited = all!(recs, Event::JobExited);
    let read = exited[0].stdout.bytes;
    assert!(
        read > CAP as u64 && read <= (CAP + 65536) as u64,
        "{read} bytes read against a cap of {CAP}"
    );
    let mono =
        |kind: &str| recs.recs[recs.position(kind, |e| rea::log::Kind::kind(e) == kind)].mono_ns;
    let late_ms = (mono("signal_sweep") - mono("stop_triggered")) / 1_000_000;
    assert!(late_ms < 250, "first sweep {late_ms} ms after the trigger");
}

#[test]
fn the_cap_counts_both_streams_together() {
    // 40000 bytes on each stream: each alone is under the cap, together over.
    let f = fixture("flood.py");
    let script = format!(
        "\"$0\" {f} --bytes 40000 && \"$0\" {f} --bytes 40000 --stream stderr && sleep 3600"
    );
    let (out, recs) = excess(&["/bin/sh", "-c", &script, python()], false);
    assert!(out.stdout.is_empty());
    let capped = all!(recs, Event::OutputCapped);
    assert_eq!(capped[0].stream, Stream::Stderr, "{capped:#?}");
}

// ----- replies never block the loop ------------------------------------------

#[test]
fn a_reply_bigger_than_the_pipe_waits_for_its_reader_without_blocking_the_loop() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    // The exited reply carries 64 KiB as base64 (about 87 KB of JSON):
    // more than the reply FIFO holds, so the watchdog must queue the rest.
    let mut r = ReplyFifo::create(&w.state_dir, "slow-reader");
    send(
        &w.state_dir,
        &Req::spawn("slow", &r.name, &strs(&flood(CAP))).valid_line(),
    );
    wait_for_log(&w.audit_log, "the flood's job_exited", |log| {
        !all!(log, Event::JobExited).is_empty()
    });
    // Nobody has read a byte of the reply yet; other callers are served.
    let out = w.submit(
        &["--capture"],
        &[python(), &fixture("launcher.py"), "--print", "meanwhile"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"meanwhile\n");
    assert_eq!(r.expect()["type"], "accepted");
    let done = r.expect();
    assert_eq!(done["type"], "exited");
    let got = rea::b64::decode(done["stdout"]["data_b64"].as_str().unwrap()).unwrap();
    assert!(got == pattern(CAP), "the queued reply arrived intact");
    assert!(r.closed_empty());
    drop(r);
    close_allowed(&mut w);
    assert!(all!(w.log(), Event::ReplyFailed).is_empty());
    sibling.assert_alive();
}

#[test]
fn a_caller_that_stops_reading_costs_only_its_own_reply() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut gate = Gate::new();
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let mut r = ReplyFifo::create(&w.state_dir, "gone-reader");
    // The job holds the gate open before it says it is ready.
    let script = "import os, sys\n\
                  g = os.open(sys.argv[1], os.O_RDONLY)\n\
                  o = os.open(sys.argv[2], os.O_WRONLY)\n\
                  os.write(o, b'{\"ready\": true, \"count\": 0}\\n')\n\
                  os.close(o)\n\
                  os.read(g, 1)\n";
    send(
        &w.state_dir,
        &Req::spawn(
            "gone",
            &r.name,
            &[python(), "-c", script, &gate.path, oracle.arg()],
        )
        .valid_line(),
    );
    assert_eq!(r.expect()["type"], "accepted");
    oracle.wait_ready(PATIENCE);
    // The caller goes away (closes and removes its FIFO), then the job ends.
    drop(r);
    gate.open();
    let recs = wait_for_log(&w.audit_log, "reply_failed", |log| {
        !all!(log, Event::ReplyFailed).is_empty()
    });
    let failed = all!(recs, Event::ReplyFailed);
    assert_eq!(failed[0].id, "gone", "{failed:#?}");
    assert_eq!(all!(recs, Event::JobExited)[0].status, Status::Code(0));
    // The watchdog lives on, serves, and the receipt is unaffected.
    let out = w.submit(&["--capture"], &[python(), &fixture("launcher.py")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    close_allowed(&mut w);
    sibling.assert_alive();
}

/// Context switches of a process so far (voluntary + involuntary).
fn switches(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .map(|l| l.split_whitespace().last().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn an_idle_watchdog_makes_no_wakeups() {
    // This one needs a window of time: it measures that nothing happens.
    let window = Duration::from_secs(2);
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let before = switches(w.pid());
    std::thread::sleep(window);
    let idle = switches(w.pid()) - before;
    assert!(
        idle <= 2,
        "{idle} context switches in {window:?} with nothing to do"
    );
    // With a job that sleeps (its deadline far away) it is just as quiet.
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let script = "import os, sys, time\n\
                  o = os.open(sys.argv[1], os.O_WRONLY)\n\
                  os.write(o, b'{\"ready\": true, \"count\": 0}\\n')\n\
                  os.close(o)\n\
                  time.sleep(3600)\n";
    let job = w.submit_bg(
        &["--name", "sleeper", "--deadline", "600s"],
        &[python(), "-c", script, oracle.arg()],
    );
    oracle.wait_ready(PATIENCE);
    // The job writes nothing to its own stdout/stderr: nothing to wake for.
    let before = switches(w.pid());
    std::thread::sleep(window);
    let busy = switches(w.pid()) - before;
    assert!(
        busy <= 2,
        "{busy} context switches in {window:?} while a job sleeps"
    );
    let close = w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert_eq!(output_within(job, PATIENCE).status.code(), Some(124));
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "close_while_running");
    sibling.assert_alive();
}

// ----- the controller dies -----------------------------------------------------

/// Kills the sacrificial controller if a failed test left it alive.
struct Controller(Option<std::process::Child>);

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            if c.try_wait().ok().flatten().is_none() {
                signal_child(&c, Signal::SIGKILL);
            }
            let _ = c.wait();
        }
    }
}

fn read_line_within(r: &mut BufReader<ChildStdout>, limit: Duration) -> String {
    if r.buffer().is_empty() {
        assert!(
            wait_readable(r.get_ref(), limit),
            "no line within {limit:?}"
        );
    }
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert!(!l.is_empty(), "EOF instead of a line");
    l
}

#[test]
fn the_watchdog_outlives_its_controllers_sigkill() {
    require_pid_ns!("the_watchdog_outlives_its_controllers_sigkill");
    let sibling = Sibling::start();
    let s = Scratch::new();
    let staging = s.path("staging");
    std::fs::create_dir(&staging).unwrap();
    std::fs::write(staging.join("runtime.bin"), b"native runtime").unwrap();
    let log = s.path("audit.jsonl");
    let mut oracle = Oracle::new(&s, "oracle");
    let child = Command::new(python())
        .arg(fixture("controller.py"))
        .arg("--watchdog")
        .arg(watchdog_bin())
        .arg("--")
        .arg("--state-dir")
        .arg(s.path("state"))
        .arg("--audit-log")
        .arg(&log)
        .arg("--staging")
        .arg(&staging)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ctl = Controller(Some(child));
    let mut commands = ctl.0.as_mut().unwrap().stdin.take().unwrap();
    let mut lines = BufReader::new(ctl.0.as_mut().unwrap().stdout.take().unwrap());
    let ready: Value = serde_json::from_str(&read_line_within(&mut lines, PATIENCE)).unwrap();
    assert_eq!(ready["event"], "ready", "{ready}");
    let tree = serde_json::json!([
        python(),
        fixture("tree.py"),
        "--oracle",
        oracle.arg(),
        "--shape",
        "escapee",
        "--shape",
        "doublefork",
        "--shape",
        "termignore",
        "--shape",
        "chain:5",
        "--shape",
        "hopper",
    ]);
    let submit =
        serde_json::json!({"op": "submit", "argv": tree, "name": "install", "deadline": "200s"});
    writeln!(commands, "{submit}").unwrap();
    let submitted: Value = serde_json::from_str(&read_line_within(&mut lines, PATIENCE)).unwrap();
    assert_eq!(submitted["event"], "submitted", "{submitted}");
    let wd = bind_ident(Ident {
        pid: ready["pid"].as_i64().unwrap() as i32,
        start_time: ready["start_time"].as_u64().unwrap(),
        uid: ready["uid"].as_u64().unwrap() as u32,
    })
    .expect("bind the watchdog");
    let (members, r) = oracle.wait_ready(PATIENCE);
    assert_eq!(members.len() as u64, r["count"].as_u64().unwrap());
    let held = Held::bind_all(&members);
    let hopper = members.iter().find(|m| m.role == "hopper").unwrap();
    assert_eq!(
        std::fs::read(format!("/proc/{}/cmdline", hopper.pid)).unwrap(),
        sibling.argv()
    );

    // SIGKILL the controller (our own child, through its pidfd).
    let mut c = ctl.0.take().unwrap();
    signal_child(&c, Signal::SIGKILL);
    let status = wait_child(&mut c, PATIENCE);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );

    // The watchdog notices, stops the whole job tree, seals and exits.
    assert!(wait_readable(&wd, PATIENCE), "the watchdog never finished");
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    let recs = Log::read(&log);
    let first = all!(recs, Event::StopTriggered)
        .into_iter()
        .find(|t| t.first)
        .cloned()
        .expect("a stop");
    assert_eq!(first.reason, StopReason::RootLost, "{first:?}");
    let r = recs.receipt();
    assert_eq!(r.outcome, Outcome::Stopped, "{r:?}");
    assert_eq!(r.stop_reason, Some(StopReason::RootLost), "{r:?}");
    assert!(!r.root_alive, "{r:?}");
    assert!(r.quiescent, "the cleanup itself succeeded: {r:?}");
    // ... and the verdict is retain: the controller died.
    let (code, v) = verify_log(&log, &["--staging", staging.to_str().unwrap()]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["verdict"], "retain", "{v:#}");
    assert!(reason_codes(&v).iter().any(|c| c == "root_lost"), "{v:#}");
    assert!(
        staging.join("runtime.bin").exists(),
        "staging is never deleted"
    );
    sibling.assert_alive();
}
