//! What a schedule starts and watches besides the watchdog: each job's
//! oracle FIFO, the clients (`submit`, `stop`, `close`), the outside
//! tracer, the group `leave` jobs move to.

use std::fs::File;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::harness::*;
use nix::sys::signal::Signal;
use rea::process::pidfd::{bind_unwaited_child, VerifiedPidFd};
use serde_json::Value;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A job's oracle FIFO: the read end, and what its processes reported.
pub struct Fifo {
    pub path: String,
    file: File,
    buf: Vec<u8>,
    /// Some writer wrote (so EOF means every holder is gone).
    heard: bool,
    pub notes: Vec<String>,
}

impl Fifo {
    pub fn new(scratch: &Scratch, name: &str) -> Fifo {
        let (path, file) = fifo_reader(scratch, name);
        Fifo {
            path: path.to_str().unwrap().to_string(),
            file,
            buf: Vec::new(),
            heard: false,
            notes: Vec::new(),
        }
    }

    /// Reads what is there; true at EOF (no writer now).
    fn pump(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        loop {
            match self.file.read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => {
                    self.heard = true;
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) => panic!("oracle read: {e}"),
            }
        }
    }

    /// The members reported up to the ready line; `None` when the job is
    /// gone first (EOF after a writer, or `gone` says its client exited).
    pub fn ready(&mut self, gone: &VerifiedPidFd) -> Option<Vec<Member>> {
        let until = Instant::now() + PATIENCE;
        let mut members = Vec::new();
        loop {
            let eof = self.pump();
            while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let v: Value = serde_json::from_slice(&line).expect("oracle line is JSON");
                if v["ready"] == true {
                    return Some(members);
                }
                if let Some(d) = v["detail"].as_str() {
                    self.notes.push(d.to_string());
                }
                members.push(Member {
                    pid: v["pid"].as_i64().unwrap() as i32,
                    start_time: v["start_time"].as_u64().unwrap(),
                    role: v["role"].as_str().unwrap_or("?").to_string(),
                });
            }
            if eof && (self.heard || gone.has_exited()) {
                return None;
            }
            assert!(Instant::now() < until, "no ready line within {PATIENCE:?}");
            if eof {
                std::thread::sleep(ms(5)); // no writer yet: poll would not wait
            } else {
                wait_readable(&self.file, ms(50));
            }
        }
    }

    /// EOF within `limit`: every process that held the write end is dead.
    pub fn gone(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.pump() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            wait_readable(&self.file, left);
        }
    }
}

/// A client the test started (`submit`, `stop`, `close`, the tracer).
pub struct Client {
    what: String,
    /// The plan's job, for a `submit`.
    pub job: Option<usize>,
    child: Option<Child>,
    pub fd: VerifiedPidFd,
    /// Its exit code, once waited for.
    code: Option<Option<i32>>,
}

impl Client {
    pub fn new(what: String, job: Option<usize>, child: Child) -> Client {
        let fd = bind_unwaited_child(&child).expect("bind own child");
        Client {
            what,
            job,
            child: Some(child),
            fd,
            code: None,
        }
    }

    /// Waits for it (bounded); says how it exited.
    pub fn finish(&mut self) -> String {
        if let Some(child) = self.child.take() {
            self.code = Some(output_within(child, PATIENCE).status.code());
        }
        format!("{} -> {:?}", self.what, self.code.flatten())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = self.fd.signal(Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

/// The outside tracer (`fixtures/tracer.py`): seizes a member and never
/// waits for it, so the member's exit cannot be reaped by the watchdog
/// until the tracer lets go (its stdin closed: it exits).
pub struct Tracer {
    child: Option<Child>,
    /// The member's role, and whether the tracer said "seized" (the
    /// member was still there).
    pub role: String,
    pub seized: bool,
}

/// Roles of tree members that live until a signal ends them.
pub const LASTING: &[&str] = &[
    "escapee",
    "daemon",
    "termignore",
    "stopped",
    "termfork",
    "chain0",
    "zombie-parent",
    "hopper",
    "graceful",
    "leavegroup",
];

impl Tracer {
    pub fn seize(pid: i32, role: &str) -> Tracer {
        let mut child = Command::new(python())
            .arg(fixture("tracer.py"))
            .arg(pid.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tracer");
        // "seized\n", or EOF (the member died first): either way it is
        // set. Its stdout stays open (a write to a closed pipe would end it).
        let mut line = Vec::new();
        let out = child.stdout.as_mut().unwrap();
        let until = Instant::now() + PATIENCE;
        let mut b = [0u8; 16];
        while !line.ends_with(b"\n") && wait_readable(out, until - Instant::now()) {
            match out.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => line.extend_from_slice(&b[..n]),
            }
        }
        Tracer {
            child: Some(child),
            role: role.to_string(),
            seized: line == b"seized\n",
        }
    }

    pub fn release(&mut self) {
        if let Some(mut c) = self.child.take() {
            drop(c.stdin.take());
            wait_child(&mut c, PATIENCE);
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            drop(c.stdin.take());
            let _ = c.wait();
        }
    }
}

/// The group `leave` jobs move to (the test's, under tools/test's):
/// removed at the end, once its members are dead (rmdir, never a kill).
pub struct Escape(pub Option<std::path::PathBuf>);

impl Drop for Escape {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let until = Instant::now() + Duration::from_secs(10);
            while std::fs::remove_dir(p).is_err() && p.exists() && Instant::now() < until {
                std::thread::sleep(ms(20));
            }
        }
    }
}

/// Waits until the log has a record of `kind` or the watchdog exited, at
/// most `limit`: a step of the schedule, never a check.
pub fn await_record(w: &Watchdog, kind: &str, limit: Duration) {
    let until = Instant::now() + limit;
    while of_kind(&w.records(), kind).is_empty() && !w.pidfd.has_exited() && Instant::now() < until
    {
        std::thread::sleep(ms(10));
    }
}
