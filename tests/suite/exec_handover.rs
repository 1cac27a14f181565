//! `exec` as the caller's command (docs/cli.md): no signal ends the
//! watchdog (USR1, USR2, WINCH are forwarded to the job's leader, ALRM is
//! the deadline now); a caller's `trap '' CHLD` or a closed stderr do not
//! break it; the job gets the caller's environment, stdin, stdout, stderr
//! and ignored signals, so a tty, `| head` and a broken pipe behave as
//! without rea; `run` records and ignores the same signals.
//!
//! Run inside a private PID namespace: `tools/test exec_handover::`.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::exec::Exec;
use common::harness::*;
use common::typed::{all, Log};
use nix::sys::signal::Signal;
use rea::kinds::watchdog::{Event, Handover, RootSource, SignalReceived, StopReason};
use serde_json::Value;

impl Exec {
    fn verdict(&self) -> (i32, Value) {
        verify_log(&self.log, &[])
    }
}

/// Reads lines from a job's stdout until one equals `want`.
fn read_until(out: &mut BufReader<ChildStdout>, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read the job's stdout");
        assert!(n > 0, "stdout ended before {want:?}");
        if line.trim_end() == want {
            return;
        }
    }
}

fn signal_records(log: &Log, name: &str) -> Vec<SignalReceived> {
    all!(log, Event::SignalReceived)
        .into_iter()
        .filter(|r| r.name == name)
        .cloned()
        .collect()
}

/// The handover of the first record (`run_started`).
fn handover(log: &Log) -> Handover {
    match log.at(0) {
        Event::RunStarted(r) => r
            .handover
            .clone()
            .unwrap_or_else(|| panic!("{}: no handover in {r:?}", log.path.display())),
        e => panic!("{}: the first record is {e:?}", log.path.display()),
    }
}

/// A job that says `usr1` and `winch` when it gets them and exits 3 when
/// its stdin closes: the watchdog must be alive to forward both, and to
/// pass the 3 on.
#[test]
fn usr1_and_winch_to_exec_reach_the_job_and_the_watchdog_lives() {
    require_pid_ns!("exec signals");
    let e = Exec::new();
    // Python retries a read a handled signal interrupted (PEP 475).
    let script = "import signal, sys\n\
                  say = lambda w: (print(w, flush=True))\n\
                  signal.signal(signal.SIGUSR1, lambda *_: say('usr1'))\n\
                  signal.signal(signal.SIGWINCH, lambda *_: say('winch'))\n\
                  say('ready')\n\
                  sys.stdin.read()\n\
                  sys.exit(3)";
    let mut child = e
        .command(&[], &[python(), "-c", script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    read_until(&mut out, "ready");
    signal_child(&child, Signal::SIGUSR1);
    read_until(&mut out, "usr1");
    signal_child(&child, Signal::SIGWINCH);
    read_until(&mut out, "winch");
    drop(child.stdin.take()); // the job's stdin is ours: EOF ends it
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(3), "the job's status, passed on");
    let recs = e.typed();
    for name in ["SIGUSR1", "SIGWINCH"] {
        let got = signal_records(&recs, name);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        assert!(got[0].forwarded);
        assert_eq!(got[0].to.len(), 1, "{got:?}");
    }
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
}

/// USR2 kills the job's leader (its default action); its setsid
/// grandchild is an orphan of the action and is stopped: the oracle pipe
/// every member holds reaches EOF. The watchdog itself lives to seal.
#[test]
fn a_usr2_to_exec_never_leaves_a_grandchild_behind() {
    require_pid_ns!("exec usr2");
    let e = Exec::new();
    let mut oracle = Oracle::new(&e.scratch, "oracle");
    let tree = fixture("tree.py");
    let argv = [
        python(),
        &tree,
        "--oracle",
        oracle.arg(),
        "--shape",
        "escapee",
    ];
    let mut child = e.command(&[], &argv).spawn().unwrap();
    let (members, _) = oracle.wait_ready(PATIENCE);
    let held = Held::bind_live(&members);
    signal_child(&child, Signal::SIGUSR2);
    assert!(oracle.wait_eof(PATIENCE), "a member outlived the stop");
    let alive = held.wait_all_exited(PATIENCE);
    assert!(alive.is_empty(), "alive: {}", alive.len());
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(124), "orphans were stopped");
    let usr2 = signal_records(&e.typed(), "SIGUSR2");
    assert_eq!(usr2.len(), 1, "{usr2:?}");
    assert!(usr2[0].forwarded);
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
}

/// ALRM to exec is its deadline, now (as timeout(1) treats it).
#[test]
fn alrm_to_exec_is_the_deadline_now() {
    require_pid_ns!("exec alrm");
    let e = Exec::new();
    let mut child = e
        .command(&[], &["/bin/sh", "-c", "echo ready; exec sleep 120"])
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    read_until(&mut out, "ready");
    signal_child(&child, Signal::SIGALRM);
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(124));
    let recs = e.typed();
    let t = all!(recs, Event::StopTriggered);
    assert_eq!(t[0].reason, StopReason::Deadline, "{t:?}");
    assert!(t[0].detail.contains("SIGALRM"), "{t:?}");
}

/// A parent that ignores SIGCHLD (inherited across exec) must not make
/// the watchdog's children reap themselves and the watchdog wait for ever.
#[test]
fn a_parent_ignoring_sigchld_does_not_hang_exec() {
    require_pid_ns!("exec sigchld");
    let e = Exec::new();
    let mut c = e.command(&[], &["/bin/sh", "-c", "exit 7"]);
    // SAFETY: only signal(2) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = output_within(c.spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
}

/// stderr a pipe whose reader is gone: the watchdog's own line (the log's
/// path, printed when --audit-log is not given) fails with EPIPE, and
/// that is no reason to panic before the job runs.
#[test]
fn a_closed_stderr_is_no_reason_to_fail() {
    require_pid_ns!("exec closed stderr");
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    drop(r);
    let script = format!("echo > {}; exit 4", marker.display());
    let out = Command::new(watchdog_bin())
        .args(["exec", "--", "/bin/sh", "-c", &script])
        .env("TMPDIR", scratch.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(w))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(marker.exists(), "the job never ran");
    let log = std::fs::read_dir(scratch.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".jsonl"))
        .expect("exec's own log in TMPDIR");
    let (code, v) = verify_log(&log, &[]);
    assert_eq!(code, 0, "{v:#}");
}

#[test]
fn the_callers_environment_reaches_the_job_unless_minimal() {
    require_pid_ns!("exec env");
    for (args, want) in [(&[][..], "bar"), (&["--env", "minimal"][..], "")] {
        let e = Exec::new();
        let mut c = e.command(args, &["/bin/sh", "-c", "printf %s \"$REA_TEST_FOO\""]);
        let out = output_within(c.env("REA_TEST_FOO", "bar").spawn().unwrap(), PATIENCE);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{args:?}");
        let h = handover(&e.typed());
        assert_eq!(h.env_inherited, args.is_empty(), "{h:?}");
    }
}

#[test]
fn the_callers_stdin_is_the_jobs() {
    require_pid_ns!("exec stdin");
    let e = Exec::new();
    let mut child = e
        .command(&[], &["/bin/cat"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello through rea\n").unwrap();
    drop(stdin);
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"hello through rea\n");
}

/// `rea-watchdog exec -- yes | head -1`: once the reader is gone, `yes`
/// dies of SIGPIPE at once (exit 141), not at a deadline.
#[test]
fn a_reader_that_leaves_ends_the_job_by_sigpipe() {
    require_pid_ns!("exec sigpipe");
    let e = Exec::new();
    let start = Instant::now();
    let mut child = e
        .command(&["--deadline", "100s"], &["/usr/bin/yes"])
        .spawn()
        .unwrap();
    let mut first = [0u8; 2];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"y\n");
    // The read end is dropped with the ChildStdout above.
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(128 + libc::SIGPIPE), "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(90),
        "ran into its deadline"
    );
}

/// A caller that ignores SIGPIPE hands that on (as timeout(1) does):
/// `yes` sees EPIPE, says `Broken pipe` and exits 1.
#[test]
fn a_caller_ignoring_sigpipe_gets_broken_pipe_from_the_job() {
    require_pid_ns!("exec sigpipe ignored");
    let e = Exec::new();
    let mut c = e.command(&["--deadline", "100s"], &["/usr/bin/yes"]);
    // SAFETY: only signal(2) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let mut first = [0u8; 2];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Broken pipe"), "{err}");
    let kept = handover(&e.typed()).kept_ignored;
    assert!(kept.contains(&libc::SIGPIPE), "{kept:?}");
}

/// Under `script` (a pty), the job's stdin and stdout are the terminal.
#[test]
fn a_terminal_stays_a_terminal() {
    require_pid_ns!("exec tty");
    let scratch = Scratch::new();
    let inner = format!(
        "{} exec --audit-log {} -- /bin/sh -c 'test -t 0 && test -t 1 && echo TTY-OK'",
        watchdog_bin(),
        scratch.path("audit.jsonl").display()
    );
    let child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env("TMPDIR", scratch.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, PATIENCE);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TTY-OK"), "{out:?}");
}

/// A flood of USR1 at the exec watchdog: each one is passed on, and the
/// log gains at most about one record a second for them.
#[test]
fn a_signal_flood_is_one_record_a_second() {
    require_pid_ns!("exec signal flood");
    let e = Exec::new();
    let script = "import signal, sys\n\
                  signal.signal(signal.SIGUSR1, lambda *_: None)\n\
                  print('ready', flush=True)\n\
                  sys.stdin.read()";
    let mut child = e
        .command(&[], &[python(), "-c", script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    read_until(&mut out, "ready");
    let start = Instant::now();
    for _ in 0..5000 {
        signal_child(&child, Signal::SIGUSR1);
    }
    let secs = start.elapsed().as_secs();
    drop(child.stdin.take());
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(0));
    let usr1 = signal_records(&e.typed(), "SIGUSR1");
    let count: u64 = usr1.iter().map(|r| r.count).sum();
    assert!((1..=5000).contains(&count), "{count}");
    assert!(
        usr1.len() as u64 <= secs + 3,
        "{} records in {secs}s",
        usr1.len()
    );
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
}

/// Under run, USR1 to the watchdog is recorded and ignored: the action
/// goes on (a job still runs, the close is positive).
#[test]
fn run_records_and_ignores_other_signals() {
    require_pid_ns!("run signals");
    let mut w = Watchdog::start(&[]);
    w.signal(Signal::SIGUSR1);
    let out = w.submit(&["--name", "after"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let closed = w.close();
    assert_eq!(closed.status.code(), Some(0), "{closed:?}");
    w.wait(PATIENCE);
    let usr1 = signal_records(&w.log(), "SIGUSR1");
    assert_eq!(usr1.len(), 1, "{usr1:?}");
    assert!(!usr1[0].forwarded);
    assert!(usr1[0].to.is_empty(), "{usr1:?}");
}

/// `sleep & exec rea-watchdog exec -- job` (a sidecar): the sleep is the
/// watchdog's child but not its own: recorded as inherited, never
/// signalled, still alive after exec exited with the job's status.
#[test]
fn a_child_present_before_exec_is_inherited_and_never_touched() {
    require_pid_ns!("exec inherited child");
    let e = Exec::new();
    let script = format!(
        "sleep 600 </dev/null >/dev/null 2>&1 & echo $!; exec {} exec --audit-log {} -- /bin/sh -c 'read -r _; exit 5'",
        watchdog_bin(),
        e.log.display()
    );
    let mut child = Command::new("/bin/sh")
        .args(["-c", &script])
        .env("TMPDIR", e.scratch.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: i32 = line.trim().parse().unwrap();
    let mut held = Held::default();
    held.add_pid("sidecar", pid);
    // The log exists once the watchdog started: then the job may end.
    let until = Instant::now() + PATIENCE;
    while !e.log.exists() {
        assert!(Instant::now() < until, "exec never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(5), "the job's status, not a stop");
    assert!(
        !held.get("sidecar").has_exited(),
        "the inherited sleep was ended"
    );
    let recs = e.typed();
    let h = handover(&recs);
    assert_eq!(h.inherited_total, 1, "{h:?}");
    assert_eq!(h.inherited.first().map(|p| p.pid), Some(pid), "{h:?}");
    assert!(
        all!(recs, Event::SignalSweep).is_empty() && all!(recs, Event::StopTriggered).is_empty(),
        "{:?}",
        recs.kinds()
    );
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
    // `held` SIGKILLs the sleep through its pidfd when dropped.
}

/// `unshare --pid --fork rea-watchdog exec -- ARGV`: exec as a PID
/// namespace's init. No root to bind (recorded as `init`); the job's
/// status passes through; 100 orphans the job leaves to exit are reaped.
#[test]
fn as_pid_1_exec_passes_the_status_on_and_reaps_orphans() {
    require_pid_ns!("exec as pid 1");
    let _ns = common::mounts::new_namespace(); // --mount-proc
    let e = Exec::new();
    let job = "for i in $(seq 100); do (sleep 0.01 &); done; sleep 0.5; exit 3";
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(watchdog_bin())
        .args(["exec", "--audit-log"])
        .arg(&e.log)
        .args(["--", "/bin/sh", "-c", job])
        .env("TMPDIR", e.scratch.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let recs = e.typed();
    let root = match recs.at(1) {
        Event::RootBound(r) => r,
        e => panic!("the second record is not root_bound: {e:?}"),
    };
    assert_eq!(root.source, RootSource::Init, "{root:?}");
    assert_eq!(root.root, None, "{root:?}");
    let reaped: usize = all!(recs, Event::Reaped)
        .iter()
        .map(|r| r.processes.len())
        .sum();
    assert!(reaped >= 100, "{reaped} orphans reaped");
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
}

/// As PID 1, signals still reach the watchdog (blocked, so the kernel does
/// not drop them for an init without a handler): USR1 is forwarded and the
/// watchdog lives; TERM then stops the job, whose status (dead of TERM)
/// is exec's.
#[test]
fn as_pid_1_usr1_is_forwarded_and_term_stops() {
    require_pid_ns!("exec as pid 1, signals");
    let _ns = common::mounts::new_namespace(); // --mount-proc
    let e = Exec::new();
    let script = "import signal, sys, time\n\
                  signal.signal(signal.SIGUSR1, lambda *_: print('usr1', flush=True))\n\
                  print('ready', flush=True)\n\
                  time.sleep(600)";
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(watchdog_bin())
        .args(["exec", "--audit-log"])
        .arg(&e.log)
        .args(["--", python(), "-c", script])
        .env("TMPDIR", e.scratch.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    read_until(&mut out, "ready");
    // The watchdog is unshare's one child (pid 1 inside, another here).
    let kids =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
            .unwrap();
    let wpid: i32 = kids.split_whitespace().next().unwrap().parse().unwrap();
    let mut held = Held::default();
    let wd = held.add_pid("watchdog", wpid);
    wd.signal(Signal::SIGUSR1).unwrap();
    read_until(&mut out, "usr1");
    assert!(!wd.has_exited(), "USR1 ended the watchdog");
    wd.signal(Signal::SIGTERM).unwrap();
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    let (code, v) = e.verdict();
    assert_eq!(code, 0, "{v:#}");
}

/// glibc's own 32 and 33 (left out of every sigfillset mask) do not end
/// the watchdog, and a real-time signal is forwarded like any other.
#[test]
fn signals_32_33_spare_the_watchdog_and_real_time_ones_are_forwarded() {
    require_pid_ns!("exec 32 33 rt");
    let e = Exec::new();
    let script = "import signal, sys\n\
                  rt = signal.SIGRTMIN + 2\n\
                  signal.signal(rt, lambda *_: print('rt', flush=True))\n\
                  print('ready', flush=True)\n\
                  sys.stdin.read()\n\
                  sys.exit(9)";
    let mut child = e
        .command(&[], &[python(), "-c", script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let wd = rea::process::pidfd::bind_unwaited_child(&child).unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    read_until(&mut out, "ready");
    wd.signal_number(32).unwrap();
    wd.signal_number(33).unwrap();
    wd.signal_number(libc::SIGRTMIN() + 2).unwrap();
    read_until(&mut out, "rt");
    assert!(!wd.has_exited(), "the watchdog died");
    drop(child.stdin.take());
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(9), "{status:?}");
    let rt = signal_records(&e.typed(), &format!("SIG{}", libc::SIGRTMIN() + 2));
    assert_eq!(rt.len(), 1, "{rt:?}");
    assert!(rt[0].forwarded);
}
