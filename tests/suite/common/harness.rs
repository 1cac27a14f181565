//! Running the real binaries against real processes, and oracles that
//! timing cannot fool.
//!
//! - [`Watchdog`] starts `rea-watchdog run` with this test process as its
//!   root controller, in a private temp directory, and on drop stops it
//!   (SIGTERM through a pidfd, then SIGKILL) so a failing test leaves
//!   nothing behind.
//! - [`Oracle`] is a FIFO whose write end every member of a fixture tree
//!   inherits: it reaches EOF exactly when the last member is dead, and the
//!   members' reports give pidfds the test holds ([`Members`]).
//! - [`Sibling`] is the unrelated "Hopper": the same argv and uid as a
//!   job's process, started by the test outside the watchdog; it must be
//!   alive at the end of every test.
//!
//! Waits are on events (pidfds, pipe EOF, poll with a generous bound), never
//! on a sleep that hopes.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rea::kinds::watchdog::{Event, Ident};
use rea::process::pidfd::{bind_ident, bind_unwaited_child, BindError, VerifiedPidFd};
use serde_json::Value;

/// Bound for anything a test waits for: generous, for a loaded 2-core box.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The watchdog under test: this build's, or the one REA_WATCHDOG_UNDER_TEST
/// names (to see a new test fail against an older build first).
pub fn watchdog_bin() -> &'static str {
    static B: OnceLock<String> = OnceLock::new();
    B.get_or_init(|| {
        std::env::var("REA_WATCHDOG_UNDER_TEST")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rea-watchdog").to_string())
    })
}

pub fn audit_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rea-audit")
}

pub fn stage_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rea-stage")
}

pub fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The real python3 binary (not a shim), so a job's argv and the sibling's
/// are byte for byte the same.
pub fn python() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is needed for the fixtures");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// The inode of the initial PID namespace (the kernel's `PROC_PID_INIT_INO`).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// True inside a private PID namespace. `NSpid` lists one pid per level
/// *as seen from the /proc mount*: under `unshare --pid --fork --mount-proc`
/// (what tools/test uses) /proc belongs to the new namespace and shows one
/// level only, so the namespace is also compared with the initial one.
pub fn in_private_pid_ns() -> bool {
    use std::os::unix::fs::MetadataExt;
    let nested_view = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("NSpid:"))
                .map(|l| l.split_whitespace().count() > 2)
        })
        .unwrap_or(false);
    let not_initial = std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino() != PROC_PID_INIT_INO)
        .unwrap_or(false);
    nested_view || not_initial
}

/// True when `REA_REQUIRE_PIDNS=1`: `.ci/run` sets it, and `tools/test`
/// does when it made the namespace. Then a namespace-only test may not skip.
pub fn pid_ns_required() -> bool {
    std::env::var_os("REA_REQUIRE_PIDNS").is_some_and(|v| v == "1")
}

/// Skips (returns true, with a message) outside a private PID namespace.
/// Under `REA_REQUIRE_PIDNS=1` it panics instead, so a run that meant to
/// have the namespace cannot pass by skipping. Call it first, before the
/// test starts or signals anything.
pub fn skip_outside_pid_ns(what: &str) -> bool {
    pid_ns_skip(what, in_private_pid_ns(), pid_ns_required())
}

/// The decision of [`skip_outside_pid_ns`], given what it observed.
pub fn pid_ns_skip(what: &str, in_ns: bool, required: bool) -> bool {
    if in_ns {
        return false;
    }
    assert!(
        !required,
        "{what}: not in a private PID namespace, and REA_REQUIRE_PIDNS=1 forbids \
         skipping (run it through tools/test, which makes the namespace)"
    );
    eprintln!("SKIPPED {what}: needs a private PID namespace (run tools/test)");
    true
}

pub fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// Waits until `fd` is readable (or hung up), at most `limit`.
pub fn wait_readable(fd: &impl AsFd, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: fd.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n > 0 {
            return true;
        }
        if left.is_zero() {
            return false;
        }
    }
}

/// Sends a signal to a process this test started (its own unreaped child).
pub fn signal_child(child: &Child, sig: Signal) {
    let fd = bind_unwaited_child(child).expect("bind own child");
    fd.signal(sig).expect("signal own child");
}

/// Waits for a child with a bound; on timeout kills it and panics.
pub fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let fd = bind_unwaited_child(child).expect("bind own child");
    if !wait_readable(&fd, limit) {
        let _ = fd.signal(Signal::SIGKILL);
        let _ = child.wait();
        panic!("child {} did not exit within {limit:?}", child.id());
    }
    child.wait().expect("wait")
}

/// A private directory for one test: state dir, log, staging, FIFOs.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::Builder::new()
                .prefix("rea-test.")
                .tempdir()
                .expect("tempdir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

/// `PROGRAM run --state-dir STATE --audit-log LOG --staging STAGING` with
/// stdin from /dev/null; the caller says where its output goes.
pub fn run_command(program: &Path, state: &Path, log: &Path, staging: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.arg("run")
        .arg("--state-dir")
        .arg(state)
        .arg("--audit-log")
        .arg(log)
        .arg("--staging")
        .arg(staging)
        .stdin(Stdio::null());
    cmd
}

/// A running `rea-watchdog run` whose root controller is this test process.
pub struct Watchdog {
    pub child: Option<Child>,
    pub pidfd: VerifiedPidFd,
    pub ready: Value,
    pub scratch: Scratch,
    pub state_dir: PathBuf,
    pub audit_log: PathBuf,
    pub staging: PathBuf,
    stdout: BufReader<ChildStdout>,
    pub sealed: Option<Value>,
}

impl Watchdog {
    /// Starts a watchdog with a staging directory (one file in it) and
    /// `extra` flags; waits for the ready line.
    pub fn start(extra: &[&str]) -> Watchdog {
        Watchdog::start_in(Scratch::new(), None, extra)
    }

    /// Like [`Watchdog::start`], in a scratch directory the test prepared,
    /// with the audit log at `audit_log` (default `SCRATCH/audit.jsonl`).
    pub fn start_in(scratch: Scratch, audit_log: Option<PathBuf>, extra: &[&str]) -> Watchdog {
        Watchdog::start_with(scratch, audit_log, extra, |_| {})
    }

    /// Like [`Watchdog::start_in`], with `tune` applied to the command
    /// before it is spawned (an environment variable, a descriptor limit
    /// in `pre_exec`, a process group). The spawned process is the one held:
    /// when the watchdog detaches (docs/architecture.md) that is the shim.
    pub fn start_with(
        scratch: Scratch,
        audit_log: Option<PathBuf>,
        extra: &[&str],
        tune: impl FnOnce(&mut Command),
    ) -> Watchdog {
        let state_dir = scratch.path("state");
        let audit_log = audit_log.unwrap_or_else(|| scratch.path("audit.jsonl"));
        let program = Path::new(watchdog_bin());
        Watchdog::start_laid_out(scratch, program, state_dir, audit_log, extra, tune)
    }

    /// Like [`Watchdog::start_with`], running `program` as the watchdog
    /// with the state directory and log where the test says (the
    /// watchdog's own place in the stage: docs/stage.md).
    pub fn start_laid_out(
        scratch: Scratch,
        program: &Path,
        state_dir: PathBuf,
        audit_log: PathBuf,
        extra: &[&str],
        tune: impl FnOnce(&mut Command),
    ) -> Watchdog {
        // The stage as uploaded: what a test put in `scratch`'s "staging"
        // before the start (the watchdog's baseline), and the runtime.
        let staging = scratch.path("staging");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("runtime.bin"), b"native runtime").unwrap();
        let mut cmd = run_command(program, &state_dir, &audit_log, &staging);
        cmd.args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        tune(&mut cmd);
        let mut child = cmd.spawn().expect("spawn rea-watchdog run");
        let pidfd = bind_unwaited_child(&child).expect("bind watchdog");
        let stdout = child.stdout.take().unwrap();
        let mut w = Watchdog {
            child: Some(child),
            pidfd,
            ready: Value::Null,
            scratch,
            state_dir,
            audit_log,
            staging,
            stdout: BufReader::new(stdout),
            sealed: None,
        };
        let line = w
            .read_line(PATIENCE)
            .expect("watchdog printed no ready line");
        w.ready = serde_json::from_str(&line).expect("ready line is JSON");
        assert_eq!(w.ready["event"], "ready", "{line}");
        w
    }

    fn read_line(&mut self, limit: Duration) -> Option<String> {
        if !self.stdout.buffer().is_empty() {
            let mut l = String::new();
            self.stdout.read_line(&mut l).ok()?;
            return (!l.is_empty()).then_some(l);
        }
        if !wait_readable(self.stdout.get_ref(), limit) {
            return None;
        }
        let mut l = String::new();
        self.stdout.read_line(&mut l).ok()?;
        (!l.is_empty()).then_some(l)
    }

    pub fn pid(&self) -> i32 {
        self.pidfd.pid()
    }

    pub fn run_id(&self) -> String {
        self.ready["run_id"].as_str().unwrap().to_string()
    }

    /// `rea-watchdog SUB ARGS` against this watchdog's state directory.
    pub fn client(&self, sub: &str, args: &[&str]) -> Command {
        let mut c = Command::new(watchdog_bin());
        c.arg(sub).args(args).env("REA_STATE_DIR", &self.state_dir);
        c
    }

    /// Runs `submit ARGS -- ARGV` to completion (bounded).
    pub fn submit(&self, args: &[&str], argv: &[&str]) -> Output {
        let child = self
            .client("submit", args)
            .arg("--")
            .args(argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn submit");
        output_within(child, PATIENCE)
    }

    /// Starts `submit ARGS -- ARGV` in the background.
    pub fn submit_bg(&self, args: &[&str], argv: &[&str]) -> Child {
        self.client("submit", args)
            .arg("--")
            .args(argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn submit")
    }

    pub fn close(&self) -> Output {
        let child = self
            .client("close", &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        output_within(child, PATIENCE)
    }

    pub fn stop(&self) -> Output {
        let child = self
            .client("stop", &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        output_within(child, PATIENCE)
    }

    pub fn signal(&self, sig: Signal) {
        self.pidfd.signal(sig).expect("signal watchdog");
    }

    /// Waits for the watchdog to exit; returns its status and reads the
    /// sealed line (if it printed one).
    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("already waited");
        let status = wait_child(&mut child, limit);
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        self.sealed = rest
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"] == "sealed" || v["event"] == "unsealed");
        status
    }

    pub fn head(&self) -> Option<String> {
        self.sealed
            .as_ref()
            .and_then(|s| s["head"].as_str())
            .map(str::to_string)
    }

    /// Every record of the log, parsed (complete lines only).
    pub fn records(&self) -> Vec<Value> {
        records(&self.audit_log)
    }

    /// Every record of the log, typed ([`super::typed::Log::read`]: a
    /// complete line that is not a record fails the test).
    pub fn log(&self) -> super::typed::Log {
        super::typed::Log::read(&self.audit_log)
    }

    /// `rea-audit verify --json` with `args`; returns (exit code, verdict).
    pub fn verify(&self, args: &[&str]) -> (i32, Value) {
        verify_log(&self.audit_log, args)
    }
}

impl Drop for Watchdog {
    /// A watchdog left running by a failed test is stopped the way an
    /// operator would: SIGTERM (it stops its action), then SIGKILL.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(fd) = bind_unwaited_child(&child) {
                let _ = fd.signal(Signal::SIGTERM);
                if !wait_readable(&fd, Duration::from_secs(10)) {
                    let _ = fd.signal(Signal::SIGKILL);
                }
            }
            let _ = child.wait();
        }
        // A watchdog that was SIGKILLed (by the test, or above) leaves its
        // group behind: removed here, through the recorded inode.
        drop(GroupGuard::of(&self.audit_log));
    }
}

/// Removes the action's recorded group at the end of a test, whatever
/// happened: re-opened by its *recorded* inode (a `rea-` name only), killed
/// through `ActionGroup::kill` if it still has members, then removed. A
/// group recreated under the name (another inode) is never touched.
pub struct GroupGuard {
    pub path: PathBuf,
    pub ino: u64,
}

impl GroupGuard {
    /// The group the log's first `containment` record names, if any.
    /// Never panics (it runs on drop, after a SIGKILLed watchdog too): a
    /// line that is not a record is passed over.
    pub fn of(log: &Path) -> Option<GroupGuard> {
        let data = std::fs::read(log).ok()?;
        data.split(|&b| b == b'\n')
            .filter_map(|l| rea::log::read::parse_line::<Event>(l).ok())
            .find_map(|r| match r.event {
                Event::Containment(c) => Some(c.group),
                _ => None,
            })
            .flatten()
            .map(|g| GroupGuard {
                path: PathBuf::from(g.path),
                ino: g.ino,
            })
    }

    /// The recorded group still exists (same path, same inode).
    pub fn exists(&self) -> bool {
        rea::contain::group::ActionGroup::open_recorded(&self.path, self.ino).is_ok()
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Ok(g) = rea::contain::group::ActionGroup::open_recorded(&self.path, self.ino) {
            if g.populated().unwrap_or(true) {
                let _ = g.kill();
                let _ = g.wait_empty(Duration::from_secs(5));
            }
            let _ = g.remove();
        }
    }
}

/// Collects a child's output with a bound (kills it on timeout and panics).
pub fn output_within(mut child: Child, limit: Duration) -> Output {
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    let status = wait_child(&mut child, limit);
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

pub fn records(log: &Path) -> Vec<Value> {
    let data = std::fs::read(log).unwrap_or_default();
    data.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

pub fn kinds(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The records of one kind.
pub fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// `rea-audit verify LOG --json ARGS` → (exit code, verdict). The verdict
/// is also checked against audit-schema/verdict.schema.json and every
/// record against record.schema.json.
pub fn verify_log(log: &Path, args: &[&str]) -> (i32, Value) {
    super::schema::assert_log_matches_schema(log);
    let out = Command::new(audit_bin())
        .arg("verify")
        .arg(log)
        .arg("--json")
        .args(args)
        .output()
        .expect("run rea-audit");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    super::schema::assert_verdict_matches_schema(&v);
    (out.status.code().unwrap_or(-1), v)
}

/// The reason codes of a verdict.
pub fn reason_codes(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["code"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// One reported member of a fixture tree.
#[derive(Clone, Debug)]
pub struct Member {
    pub pid: i32,
    pub start_time: u64,
    pub role: String,
}

/// The test's read end of a fixture's oracle FIFO.
pub struct Oracle {
    pub path: PathBuf,
    file: File,
    buf: Vec<u8>,
}

/// Creates the FIFO `name` (0600) in `scratch` and opens its read end,
/// non-blocking, so that a writer started afterwards can open it.
pub fn fifo_reader(scratch: &Scratch, name: &str) -> (PathBuf, File) {
    let path = scratch.path(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let fd = nix::fcntl::open(
        &path,
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .expect("open the FIFO's read end");
    (path, File::from(fd))
}

impl Oracle {
    /// Creates the FIFO and opens its read end (before the fixture starts,
    /// so the fixture's blocking open for writing succeeds).
    pub fn new(scratch: &Scratch, name: &str) -> Oracle {
        let (path, file) = fifo_reader(scratch, name);
        Oracle {
            path,
            file,
            buf: Vec::new(),
        }
    }

    pub fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }

    /// Reads member reports until the fixture's ready line. Panics after `limit`.
    pub fn wait_ready(&mut self, limit: Duration) -> (Vec<Member>, Value) {
        let until = Instant::now() + limit;
        let mut members = Vec::new();
        loop {
            while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let v: Value = serde_json::from_slice(&line).expect("oracle line is JSON");
                if v["ready"] == true {
                    return (members, v);
                }
                members.push(Member {
                    pid: v["pid"].as_i64().unwrap() as i32,
                    start_time: v["start_time"].as_u64().unwrap(),
                    role: v["role"].as_str().unwrap().to_string(),
                });
            }
            let left = until.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "fixture not ready within {limit:?}; got {} members",
                members.len()
            );
            wait_readable(&self.file, left);
            let mut chunk = [0u8; 65536];
            match self.file.read(&mut chunk) {
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("oracle read: {e}"),
            }
        }
    }

    /// True when every holder of the write end is gone (EOF) within `limit`.
    /// Only meaningful after a writer existed (after `wait_ready`).
    pub fn wait_eof(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            let mut chunk = [0u8; 65536];
            match self.file.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("oracle read: {e}"),
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            wait_readable(&self.file, left);
        }
    }
}

/// The uid `tree.py --shape setuid` switches to.
pub const NOBODY: u32 = 65534;

/// Pidfds the test holds; every process still alive when this is dropped is
/// SIGKILLed through its pidfd, so a failing test leaves nothing behind.
#[derive(Default)]
pub struct Held {
    pub fds: Vec<(Member, VerifiedPidFd)>,
}

impl Held {
    /// Binds every member (the `setuid` one with its new uid). Members that
    /// are already gone are skipped; anything else that cannot be bound
    /// fails the test.
    pub fn bind_live(members: &[Member]) -> Held {
        let mut h = Held::default();
        for m in members {
            let uid = if m.role == "setuid" { NOBODY } else { uid() };
            let ident = Ident {
                pid: m.pid,
                start_time: m.start_time,
                uid,
            };
            match bind_ident(ident) {
                Ok(fd) => h.fds.push((m.clone(), fd)),
                Err(BindError::Gone) => {}
                Err(e) => panic!("cannot bind member {m:?}: {e:?}"),
            }
        }
        h
    }

    /// Binds every member; all must still be alive.
    pub fn bind_all(members: &[Member]) -> Held {
        let h = Held::bind_live(members);
        assert_eq!(
            h.fds.len(),
            members.len(),
            "a tree member died before the test could bind it"
        );
        h
    }

    /// Adds a process named by an identity (a job leader from the log).
    pub fn add(&mut self, role: &str, ident: Ident) -> &VerifiedPidFd {
        let fd =
            bind_ident(ident).unwrap_or_else(|e| panic!("cannot bind {role} {ident:?}: {e:?}"));
        let m = Member {
            pid: ident.pid,
            start_time: ident.start_time,
            role: role.to_string(),
        };
        self.fds.push((m, fd));
        &self.fds.last().unwrap().1
    }

    /// Adds a live process by pid alone: its start time is read now, its
    /// uid is this test's (a process the test saw start, by its report).
    pub fn add_pid(&mut self, role: &str, pid: i32) -> &VerifiedPidFd {
        let start_time = rea::process::identity::read_stat(pid)
            .unwrap_or_else(|e| panic!("{role} pid {pid}: {e}"))
            .start_time;
        self.add(
            role,
            Ident {
                pid,
                start_time,
                uid: uid(),
            },
        )
    }

    pub fn get(&self, role: &str) -> &VerifiedPidFd {
        &self
            .fds
            .iter()
            .find(|(m, _)| m.role == role)
            .unwrap_or_else(|| panic!("no held member {role}"))
            .1
    }

    pub fn alive(&self) -> Vec<&Member> {
        self.fds
            .iter()
            .filter(|(_, fd)| !fd.has_exited())
            .map(|(m, _)| m)
            .collect()
    }

    /// Waits (bounded) until every held process has exited; returns the
    /// survivors.
    pub fn wait_all_exited(&self, limit: Duration) -> Vec<&Member> {
        let until = Instant::now() + limit;
        for (_, fd) in &self.fds {
            wait_readable(fd, until.saturating_duration_since(Instant::now()));
        }
        self.alive()
    }

    /// SIGKILLs every held process still alive (the test's own cleanup).
    pub fn kill_alive(&self) -> usize {
        let mut n = 0;
        for (_, fd) in &self.fds {
            if !fd.has_exited() {
                let _ = fd.signal(Signal::SIGKILL);
                n += 1;
            }
        }
        n
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.kill_alive();
    }
}

/// The unrelated "Hopper": `python3 fixtures/hopper.py`, the exact argv a
/// tree's `hopper` member runs, started by the test outside any watchdog.
pub struct Sibling {
    child: Option<Child>,
    pidfd: VerifiedPidFd,
}

impl Sibling {
    pub fn start() -> Sibling {
        let child = Command::new(python())
            .arg(fixture("hopper.py"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start sibling");
        let pidfd = bind_unwaited_child(&child).expect("bind sibling");
        Sibling {
            child: Some(child),
            pidfd,
        }
    }

    pub fn pid(&self) -> i32 {
        self.pidfd.pid()
    }

    pub fn argv(&self) -> Vec<u8> {
        std::fs::read(format!("/proc/{}/cmdline", self.pid())).unwrap_or_default()
    }

    pub fn assert_alive(&self) {
        assert!(
            !self.pidfd.has_exited(),
            "the unrelated sibling (pid {}) was killed",
            self.pid()
        );
    }
}

impl Drop for Sibling {
    fn drop(&mut self) {
        let _ = self.pidfd.signal(Signal::SIGKILL);
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}

/// A path as the `&str` an argument list wants (the suite's paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
