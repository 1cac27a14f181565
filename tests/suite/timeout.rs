//! The `timeout` personality (docs/cli.md, issue 15): rea-watchdog
//! invoked as `timeout` (a symlink) or as `rea-watchdog timeout`, checked
//! for each behaviour coreutils' own `tests/timeout/` checks (our tests,
//! not theirs), and for what rea adds: escapees stopped, a log written.
//!
//! Run inside a private PID namespace: `tools/test timeout::`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::harness::*;
use common::typed::{all, first, Log};
use nix::sys::signal::Signal;
use rea::kinds::watchdog::{AskEnd, AskSpan, ContainMode, ContainRequest, Event, Sig, Stage};

/// A scratch directory holding `timeout`, a symlink to the watchdog, and
/// the logs (TMPDIR).
struct Timeout {
    scratch: Scratch,
    bin: PathBuf,
}

impl Timeout {
    fn new() -> Timeout {
        let scratch = Scratch::new();
        let bin = scratch.path("timeout");
        std::os::unix::fs::symlink(watchdog_bin(), &bin).unwrap();
        Timeout { scratch, bin }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("TMPDIR", self.scratch.dir.path())
            .env_remove("REA_AUDIT_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        output_within(self.command(args).spawn().unwrap(), PATIENCE)
    }

    fn code(&self, args: &[&str]) -> i32 {
        let out = self.run(args);
        out.status
            .code()
            .unwrap_or_else(|| panic!("{args:?}: {out:?}"))
    }

    /// Every log written so far is sealed and verifies `delete_allowed`.
    fn verify_all(&self) {
        for log in self.logs() {
            let (code, v) = verify_log(&log, &[]);
            assert_eq!(code, 0, "{v:#}");
        }
    }

    /// `timeout ARGS` whose command prints `ready` first: spawned, and that
    /// line read (the command runs from here on).
    fn spawn_ready(&self, args: &[&str]) -> std::process::Child {
        let mut child = self.command(args).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        child
    }

    /// Every log this personality wrote in TMPDIR.
    fn logs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.scratch.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with("rea-timeout-") && n.ends_with(".jsonl")
            })
            .collect();
        v.sort();
        v
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_commands_status_passes_through_and_a_log_is_written() {
    require_pid_ns!("timeout passthrough");
    let t = Timeout::new();
    assert_eq!(t.code(&["10", "sh", "-c", "exit 3"]), 3);
    let logs = t.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let (code, v) = verify_log(&logs[0], &[]);
    assert_eq!(code, 0, "{v:#}");
    match crate::common::typed::Log::<rea::kinds::watchdog::Event>::read(&logs[0]).at(1) {
        rea::kinds::watchdog::Event::RootBound(r) => assert_eq!(
            r.source,
            rea::kinds::watchdog::RootSource::Unwatched,
            "no root bound: {r:?}"
        ),
        e => panic!("the second record is not root_bound: {e:?}"),
    }
    // And as a subcommand.
    let out = Command::new(watchdog_bin())
        .args(["timeout", "10", "sh", "-c", "exit 4"])
        .env("TMPDIR", t.scratch.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}

/// timeout has coreutils' command line, so no --contain: REA_CONTAIN
/// picks the containment, as it sets exec's default (it used to be
/// ignored: always auto). A value that names no mode is timeout's own
/// failure (125), with nothing written or launched.
#[test]
fn rea_contain_picks_timeouts_containment() {
    require_pid_ns!("timeout REA_CONTAIN");
    let t = Timeout::new();
    let out = output_within(
        t.command(&["10", "true"])
            .env("REA_CONTAIN", "none")
            .spawn()
            .unwrap(),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let logs = t.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let recs = typed(&logs[0]);
    let c = first!(recs, Event::Containment);
    assert_eq!(
        (c.requested, c.mode),
        (ContainRequest::None, ContainMode::None),
        "{c:?}"
    );
    let marker = t.scratch.path("launched");
    let out = output_within(
        t.command(&["10", "touch", marker.to_str().unwrap()])
            .env("REA_CONTAIN", "cgroups")
            .spawn()
            .unwrap(),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        stderr(&out).contains("timeout: REA_CONTAIN: \"cgroups\" is not one of auto, cgroup, none"),
        "{out:?}"
    );
    assert!(!marker.exists());
    assert_eq!(t.logs().len(), 1, "no log for the refused run");
}

/// The command sees its name as typed, as execvp gives it under
/// coreutils' timeout (`cat`, not the path `PATH` found).
#[test]
fn the_command_sees_its_name_as_typed() {
    require_pid_ns!("timeout argv[0]");
    let t = Timeout::new();
    let out = t.run(&["10", "cat", "/proc/self/cmdline"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"cat\0/proc/self/cmdline\0", "{out:?}");
}

#[test]
fn a_time_out_is_124_and_preserve_status_keeps_the_commands() {
    require_pid_ns!("timeout 124");
    let t = Timeout::new();
    assert_eq!(t.code(&["0.1", "sleep", "60"]), 124);
    assert_eq!(
        t.code(&["--preserve-status", "0.1", "sleep", "60"]),
        128 + 15
    );
    t.verify_all();
}

#[test]
fn kill_when_needed_is_137() {
    require_pid_ns!("timeout 137");
    let t = Timeout::new();
    assert_eq!(t.code(&["-s", "KILL", "0.1", "sleep", "60"]), 137);
    let ignores = "trap '' TERM; sleep 60";
    assert_eq!(t.code(&["-k", "0.2", "0.1", "sh", "-c", ignores]), 137);
}

#[test]
fn verbose_names_each_signal_as_coreutils_does() {
    require_pid_ns!("timeout -v");
    let t = Timeout::new();
    let out = t.run(&["-v", "0.1", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(
        stderr(&out),
        "timeout: sending signal TERM to command 'sleep'\n"
    );
    let out = t.run(&[
        "-v",
        "-k",
        "0.2",
        "0.1",
        "sh",
        "-c",
        "trap '' TERM; sleep 60",
    ]);
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(
        stderr(&out),
        "timeout: sending signal TERM to command 'sh'\ntimeout: sending signal KILL to command 'sh'\n"
    );
}

/// `-v` to a stderr whose reader is gone: EPIPE is handled, not a death.
#[test]
fn verbose_to_a_closed_pipe_is_still_124() {
    require_pid_ns!("timeout -v closed pipe");
    let t = Timeout::new();
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let status = t
        .command(&["-v", "0.1", "sleep", "60"])
        .stderr(Stdio::from(w))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(124));
}

#[test]
fn bad_command_lines_are_125_with_coreutils_messages() {
    require_pid_ns!("timeout 125");
    let t = Timeout::new();
    for bad in ["invalid", " -0.1", " -1e-10000", "42D"] {
        let out = t.run(&[bad, "sleep", "0"]);
        assert_eq!(out.status.code(), Some(125), "{bad:?}");
        let want = format!(
            "timeout: invalid time interval '{bad}'\nTry 'timeout --help' for more information.\n"
        );
        assert_eq!(stderr(&out), want, "{bad:?}");
    }
    let out = t.run(&["--signal=invalid", "1", "sleep", "0"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).starts_with("timeout: 'invalid': invalid signal\n"),
        "{out:?}"
    );
    assert!(
        t.logs().is_empty(),
        "a refused command line launched nothing"
    );
}

#[test]
fn durations_as_coreutils_reads_them() {
    require_pid_ns!("timeout durations");
    let t = Timeout::new();
    let huge = [
        "1d",
        "2.34e+5d",
        "9223372036854775808",
        "1.18973149535723176502e+4932",
    ];
    for d in ["10.34", "9.999999999", "0"].iter().chain(&huge) {
        assert_eq!(t.code(&[d, "sleep", "0"]), 0, "{d}");
    }
    let start = Instant::now();
    assert_eq!(
        t.code(&["1e-10000", "sleep", "60"]),
        124,
        "an underflow times out at once"
    );
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn cannot_run_is_126_and_not_found_127() {
    require_pid_ns!("timeout 126 127");
    let t = Timeout::new();
    let out = t.run(&["10", "."]);
    assert_eq!(out.status.code(), Some(126));
    assert_eq!(
        stderr(&out),
        "timeout: failed to run command '.': Permission denied\n"
    );
    let out = t.run(&["10", "no_such"]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        stderr(&out),
        "timeout: failed to run command 'no_such': No such file or directory\n"
    );
}

/// A parent's `trap '' CHLD`, a parent's blocked SIGALRM: neither keeps
/// timeout from timing out or from seeing its command exit.
#[test]
fn ignored_sigchld_and_blocked_sigalrm_in_the_parent() {
    require_pid_ns!("timeout parent dispositions");
    let t = Timeout::new();
    for args in [
        &["10", "sh", "-c", "exit 6"][..],
        &["0.1", "sleep", "60"][..],
    ] {
        let mut c = t.command(args);
        // SAFETY: only signal(2) and sigprocmask(2) between fork and exec.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGALRM);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        let out = output_within(c.spawn().unwrap(), Duration::from_secs(30));
        let want = if args[0] == "10" { 6 } else { 124 };
        assert_eq!(out.status.code(), Some(want), "{args:?}: {out:?}");
    }
}

/// A child the shell started before it exec'd timeout (coreutils
/// Bug#9098): not waited for, not signalled; timeout ends with its command.
#[test]
fn a_pre_existing_child_is_neither_waited_for_nor_signalled() {
    require_pid_ns!("timeout pre-existing child");
    let t = Timeout::new();
    let script = format!(
        "sleep 600 </dev/null >/dev/null 2>&1 & echo $!; exec {} 60 true",
        t.bin.display()
    );
    let mut child = Command::new("/bin/sh")
        .args(["-c", &script])
        .env("TMPDIR", t.scratch.dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid: i32 = line.trim().parse().unwrap();
    let mut held = Held::default();
    held.add_pid("sleep", pid);
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(0));
    assert!(
        !held.get("sleep").has_exited(),
        "the pre-existing child was ended"
    );
}

/// `timeout -s ALRM 1 timeout -s USR1 10 sleep 20`: the outer one's ALRM
/// is the inner one's time-out now; both say 124, at once.
#[test]
fn cascaded_timeouts_are_124() {
    require_pid_ns!("timeout cascade");
    let t = Timeout::new();
    let inner = t.bin.to_str().unwrap().to_string();
    let start = Instant::now();
    let code = t.code(&[
        "-s", "ALRM", "0.5", &inner, "-s", "USR1", "30", "sleep", "60",
    ]);
    assert_eq!(code, 124);
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "the inner deadline ran out instead"
    );
}

/// `--foreground`: the command stays in the caller's process group, so a
/// signal to that group (USR1) reaches it directly.
#[test]
fn foreground_leaves_the_command_in_the_callers_group() {
    require_pid_ns!("timeout --foreground");
    let t = Timeout::new();
    let script = "import os, signal, sys, time\n\
                  signal.signal(signal.SIGUSR1, lambda *_: (print('usr1', flush=True), sys.exit(0)))\n\
                  print(os.getpgrp(), flush=True)\n\
                  time.sleep(60)";
    let mut c = t.command(&["--foreground", "30", python(), "-c", script]);
    c.process_group(0); // a group of its own, that the test may signal
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        child.id().to_string(),
        "the job's group is timeout's"
    );
    // To timeout, which forwards it (the test signals only what it
    // started, never a group): the command is in the group checked above.
    signal_child(&child, Signal::SIGUSR1);
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "usr1");
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(0));
}

/// timeout SIGKILLed: its command gets the `-s` signal as its
/// parent-death signal (here USR1, which it reports on a file).
#[test]
fn a_command_outliving_a_killed_timeout_gets_the_s_signal() {
    require_pid_ns!("timeout pdeathsig");
    let t = Timeout::new();
    let marker = t.scratch.path("got-usr1");
    let script = format!(
        "import signal, sys, time\n\
         def got(*_):\n    open({:?}, 'w').close(); sys.exit(0)\n\
         signal.signal(signal.SIGUSR1, got)\n\
         print('ready', flush=True)\n\
         time.sleep(60)",
        marker.to_str().unwrap()
    );
    let mut child = t
        .command(&["-s", "USR1", "30", python(), "-c", &script])
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    signal_child(&child, Signal::SIGKILL);
    wait_child(&mut child, PATIENCE);
    let until = Instant::now() + PATIENCE;
    while !marker.exists() {
        assert!(Instant::now() < until, "the command never got USR1");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What rea adds: an escapee (setsid) of the command is stopped too; the
/// status is still the command's own.
#[test]
fn an_escapee_is_stopped_and_the_status_is_the_commands() {
    require_pid_ns!("timeout escapee");
    let t = Timeout::new();
    let mut oracle = Oracle::new(&t.scratch, "oracle");
    let tree = fixture("tree.py");
    let args = [
        "30",
        python(),
        &tree,
        "--oracle",
        oracle.arg(),
        "--shape",
        "escapee",
        "--then",
        "exit",
    ];
    let child = t.command(&args).spawn().unwrap();
    let (members, _) = oracle.wait_ready(PATIENCE);
    let held = Held::bind_live(&members);
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(oracle.wait_eof(PATIENCE), "the escapee outlived timeout");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    let (code, v) = verify_log(&t.logs()[0], &[]);
    assert_eq!(code, 0, "{v:#}");
}

#[test]
fn as_pid_1_a_time_out_is_124() {
    require_pid_ns!("timeout as pid 1");
    let _ns = common::mounts::new_namespace(); // --mount-proc
    let t = Timeout::new();
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(&t.bin)
        .args(["0.1", "sleep", "60"])
        .env("TMPDIR", t.scratch.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
}

/// A log's records, typed.
fn typed(log: &std::path::Path) -> Log {
    Log::read(log)
}

/// coreutils' `-s0 -k1`: signal 0 is only a probe, so the command lives
/// until `-k` has passed and KILL ends it: 137, both lines under `-v`, and
/// the log says so (the ask with SIG0, ended by `kill_after`, then KILL
/// with no TERM sweep).
#[test]
fn signal_0_then_kill_after_is_137() {
    require_pid_ns!("timeout -s0 -k");
    let t = Timeout::new();
    let out = t.run(&["-v", "-s0", "-k", "0.5", "0.1", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_eq!(
        stderr(&out),
        "timeout: sending signal 0 to command 'sleep'\ntimeout: sending signal KILL to command 'sleep'\n"
    );
    let log = &t.logs()[0];
    let (code, v) = verify_log(log, &[]);
    assert_eq!(code, 0, "{v:#}");
    let recs = typed(log);
    let sweeps = all!(recs, Event::SignalSweep);
    let stages: Vec<Stage> = sweeps.iter().map(|s| s.stage).collect();
    assert_eq!(stages.first(), Some(&Stage::Ask), "{sweeps:#?}");
    assert!(!stages.contains(&Stage::Term), "{sweeps:#?}");
    assert!(stages.contains(&Stage::Kill), "{sweeps:#?}");
    assert_eq!(sweeps[0].signals, [Sig::from_number(0).unwrap(), Sig::CONT]);
    let ended = all!(recs, Event::AskEnded);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].reason, AskEnd::KillAfter);
    let started = first!(recs, Event::RunStarted);
    assert_eq!(started.bounds.ask, AskSpan::KillAfterMs(500));
}

/// Without `-k`, a command that takes its time over the signal is waited
/// for, however long (here it finishes 2 s after TERM, four times exec's
/// grace), and `--preserve-status` gives its own status.
#[test]
fn without_k_a_slow_command_is_waited_for() {
    require_pid_ns!("timeout without -k");
    let t = Timeout::new();
    // A shell, not Python: its trap is set within a millisecond or two of
    // the start, far inside the 0.5 s (Python's start-up on a loaded box
    // outlasted a 0.1 s timeout, and TERM killed it before its handler
    // was set: 143). The trap runs when the current `sleep 0.05` ends.
    let script = "trap 'sleep 2; exit 3' TERM; while :; do sleep 0.05; done";
    let out = t.run(&["--preserve-status", "0.5", "/bin/sh", "-c", script]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let log = &t.logs()[0];
    let (code, v) = verify_log(log, &[]);
    assert_eq!(code, 0, "{v:#}");
    // The leader's own exit ended the stop (an ask_ended says so, unless
    // nothing was left at all): no KILL, no TERM sweep.
    let recs = typed(log);
    for e in all!(recs, Event::AskEnded) {
        assert_eq!(e.reason, AskEnd::LeadersExited);
    }
    let sweeps = all!(recs, Event::SignalSweep);
    assert!(sweeps.iter().all(|s| s.stage == Stage::Ask), "{sweeps:#?}");
    assert_eq!(
        first!(recs, Event::RunStarted).bounds.ask,
        AskSpan::UntilExit
    );
}

/// `-s` takes any signal: a real-time one is the ask and spelled as
/// `-v` spells it; STOP (then CONT, as coreutils sends) leaves the
/// command running until `-k`.
#[test]
fn any_signal_may_be_the_s_signal() {
    require_pid_ns!("timeout -s any");
    let t = Timeout::new();
    let out = t.run(&["-v", "-s", "RTMIN+2", "0.1", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert_eq!(
        stderr(&out),
        "timeout: sending signal RTMIN+2 to command 'sleep'\n"
    );
    let log = &t.logs()[0];
    let (code, v) = verify_log(log, &[]);
    assert_eq!(code, 0, "{v:#}");
    let recs = typed(log);
    let ask = first!(recs, Event::SignalSweep);
    let rtmin2 = Sig::from_name("SIGRTMIN+2").unwrap();
    assert_eq!(ask.signals, [rtmin2, Sig::CONT]);
    assert_eq!(first!(recs, Event::JobSpawned).stop_signal, rtmin2);

    assert_eq!(
        t.code(&["-s", "STOP", "-k", "0.3", "0.1", "sleep", "60"]),
        137
    );
    t.verify_all();
}

/// A command that dies of a signal timeout did not send: timeout dies of
/// the same signal (its caller sees `WIFSIGNALED`, as with coreutils), with
/// no core file of its own; and so when timeout itself is TERMed and passes
/// that on. Its log is sealed first.
#[test]
fn a_commands_death_by_signal_is_timeouts_own() {
    use std::os::unix::process::ExitStatusExt;
    require_pid_ns!("timeout dies the same death");
    let t = Timeout::new();
    let out = t.run(&["30", "sh", "-c", "kill -USR1 $$"]);
    assert_eq!(out.status.signal(), Some(libc::SIGUSR1), "{out:?}");
    assert!(!out.status.core_dumped());
    let out = t.run(&["30", "sh", "-c", "kill -SEGV $$"]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    assert!(
        !out.status.core_dumped(),
        "timeout dumped a core of its own"
    );

    let script = "print('ready', flush=True)\nimport time\ntime.sleep(60)";
    let mut child = t.spawn_ready(&["30", python(), "-c", script]);
    signal_child(&child, Signal::SIGTERM);
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    t.verify_all();
}

/// Only a time-out asks for as long as the command needs: a TERM to
/// timeout with `-s 0` (a probe the command cannot act on) still stops it,
/// TERM reaching the command after half the grace, and timeout then dies
/// of the TERM its command died of.
#[test]
fn a_signal_to_timeout_stops_even_when_s_is_only_a_probe() {
    use std::os::unix::process::ExitStatusExt;
    require_pid_ns!("timeout -s 0 then TERM");
    let t = Timeout::new();
    let script = "print('ready', flush=True)\nimport time\ntime.sleep(60)";
    let mut child = t.spawn_ready(&["-s", "0", "30", python(), "-c", script]);
    signal_child(&child, Signal::SIGTERM);
    let status = wait_child(&mut child, PATIENCE);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let log = &t.logs()[0];
    let (code, v) = verify_log(log, &[]);
    assert_eq!(code, 0, "{v:#}");
    let recs = typed(log);
    assert_eq!(first!(recs, Event::AskEnded).reason, AskEnd::HalfGrace);
}

/// Under `--foreground` the job shares its caller's session: a process the
/// caller had started before (inherited, not the job's) that asks for a
/// launcher is not named as job 1's (`caller_job` absent), though its
/// session is the job's.
#[test]
fn an_inherited_process_asking_is_not_the_foreground_jobs() {
    require_pid_ns!("timeout --foreground, an inherited caller");
    let t = Timeout::new();
    let (dir_fifo, done_fifo) = (t.scratch.path("dir"), t.scratch.path("done"));
    for f in [&dir_fifo, &done_fifo] {
        nix::unistd::mkfifo(f.as_path(), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    // The inherited process learns the state directory from the job
    // through one FIFO, submits, and tells the job through the other.
    let inherited = format!(
        "import subprocess, sys\n\
         state = open({dir:?}).read().strip()\n\
         subprocess.run([{wd:?}, 'submit', '--state-dir', state, '--name', 'inherited', '--', '/bin/true'], check=True)\n\
         open({done:?}, 'w').write('done')",
        dir = dir_fifo.to_str().unwrap(),
        done = done_fifo.to_str().unwrap(),
        wd = watchdog_bin(),
    );
    let job = format!(
        "echo \"$REA_STATE_DIR\" > {dir}; cat {done} >/dev/null",
        dir = dir_fifo.display(),
        done = done_fifo.display()
    );
    let script = format!(
        "{py} -c \"$0\" & exec {bin} --foreground 30 /bin/sh -c \"$1\"",
        py = python(),
        bin = t.bin.display()
    );
    let out = output_within(
        Command::new("/bin/sh")
            .args(["-c", &script, &inherited, &job])
            .env("TMPDIR", t.scratch.dir.path())
            .env_remove("REA_AUDIT_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let log = &t.logs()[0];
    let recs = typed(log);
    let spawned = all!(recs, Event::JobSpawned);
    assert_eq!(spawned.len(), 2, "{spawned:#?}");
    assert_eq!(spawned[1].name.as_deref(), Some("inherited"));
    // (No caller_job key at all: Log::read holds the line to the writer's
    // encoding, which leaves the key out when it is None.)
    assert!(
        spawned[1].caller_job.is_none(),
        "an inherited process is not the job's: {:#?}",
        spawned[1]
    );
}
