//! Forced PID reuse: a pid that named one process of the test (now dead and
//! reaped) and now names another, for tests of the binding step and of the
//! caller check. Only inside a private PID namespace (`tools/test`): it
//! writes `/proc/sys/kernel/ns_last_pid`, which steers the namespace's next
//! fork, and every test must first call `skip_outside_pid_ns`.

use std::process::{Child, Command, Stdio};

use nix::sys::signal::Signal;
use rea::kinds::watchdog::Ident;
use rea::process::identity::{read_stat, Stat};
use rea::process::pidfd::{bind_unwaited_child, VerifiedPidFd};

use super::harness::{uid, PATIENCE};
use super::stop::wait_for;

/// A pid that named one process (`stale`, dead and reaped) and now names a
/// newcomer the test holds; the newcomer is SIGKILLed on drop.
pub struct Reused {
    pub stale: Stat,
    pub newcomer: Child,
    pub fd: VerifiedPidFd,
}

impl Reused {
    /// The dead process's identity as a caller would claim it.
    pub fn stale_ident(&self) -> Ident {
        Ident {
            pid: self.stale.pid,
            start_time: self.stale.start_time,
            uid: uid(),
        }
    }
}

impl Drop for Reused {
    fn drop(&mut self) {
        let _ = self.fd.signal(Signal::SIGKILL);
        let _ = self.newcomer.wait();
    }
}

/// Clock ticks since boot, the clock of `/proc/PID/stat`'s start time.
pub fn clock_ticks_now() -> u64 {
    // /proc/uptime counts boot time in centiseconds.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let up = std::fs::read_to_string("/proc/uptime").unwrap();
    let (s, cs) = up
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('.')
        .unwrap();
    (s.parse::<u64>().unwrap() * 100 + cs.parse::<u64>().unwrap()) * hz / 100
}

/// `sleep 3600`, this test's child, bound before anything can reap it.
fn spawn_sleeper() -> (Child, VerifiedPidFd) {
    let c = Command::new("/bin/sleep")
        .arg("3600")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let fd = bind_unwaited_child(&c).expect("bind own child");
    (c, fd)
}

/// The identity of a process that lived and is now dead and reaped: a child
/// of the test, kept alive until a clock tick passed (so a process that
/// takes its pid later has another start time), then SIGKILLed and reaped.
pub fn dead_process() -> Stat {
    let (mut victim, vfd) = spawn_sleeper();
    let stale = read_stat(victim.id() as i32).expect("stat of own child");
    wait_for(PATIENCE, "a clock tick", || {
        (clock_ticks_now() > stale.start_time + 1).then_some(())
    });
    vfd.signal(Signal::SIGKILL).expect("signal own child");
    victim.wait().expect("reap own child");
    stale
}

/// Makes a new process take a freed pid: a [`dead_process`], then pid-1
/// written to `ns_last_pid` and a fork. Other tests fork in the same
/// namespace, so whoever else gets the pid first makes it try again (with
/// a new victim); fails the test if it never works.
pub fn force_pid_reuse() -> Reused {
    for attempt in 1..=2000 {
        let stale = dead_process();
        let pid = stale.pid;
        std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1))
            .expect("write ns_last_pid (needs a private PID namespace we own)");
        let (mut newcomer, fd) = spawn_sleeper();
        if newcomer.id() as i32 == pid {
            let now = read_stat(pid).expect("stat of own child");
            if now.start_time != stale.start_time {
                eprintln!(
                    "pid {pid} reused after {attempt} attempt(s): start time {} -> {}",
                    stale.start_time, now.start_time
                );
                return Reused {
                    stale,
                    newcomer,
                    fd,
                };
            }
        }
        fd.signal(Signal::SIGKILL).expect("signal own child");
        newcomer.wait().expect("reap own child");
    }
    panic!("could not make a new process take a freed pid");
}
