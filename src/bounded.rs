//! File-system work with a deadline: a walk a stuck file system may block
//! runs in a forked helper process, never in the caller.
//!
//! Why a process: a path walk under a stuck mount (a FUSE server that never
//! answers, an NFS server gone) blocks in the kernel, in state D, and no
//! signal the caller could catch interrupts it. A *thread* blocked so would
//! keep its whole process from ever exiting (an exit waits for every thread
//! to leave the kernel): a watchdog could seal its receipt and still never
//! end, and its parent's wait with it. A *child process* can be left behind.
//! The caller reads the helper's answer (JSON) from a pipe with a deadline;
//! past it, it names the helper (pid, state, wait channel from
//! `/proc/PID/wchan`), sends it SIGKILL through its pidfd (a FUSE wait is
//! killable; others end when the file system answers), waits a moment for
//! it to go, and moves on without waiting longer. The helper has
//! `PR_SET_PDEATHSIG` SIGKILL, so it also dies when the caller exits.
//!
//! The helper is a plain `fork()`: rea-audit and rea-watchdog are
//! single-threaded, so the child's copy of every lock is consistent (in a
//! multi-threaded test binary glibc's fork keeps malloc usable in the
//! child, and the child does nothing but walk, allocate and write). Before
//! the work it puts `/dev/null` on 0-2 and closes every other descriptor
//! but its answer pipe and those the caller asks to keep: a helper blocked
//! for good must not hold a reply FIFO, the audit log or a caller's
//! stdout open (a reader waiting for EOF would wait with it). It ends
//! with `_exit`: no destructor of the parent's state runs twice.
//!
//! In the watchdog (a child subreaper with its own `P_ALL` reaper) the
//! helper is its child too: it is forked only before anything runs (the
//! stage's identity at start; blocked, the start is refused) or while
//! sealing, after the quiescence evidence was gathered, and is reaped here
//! through its own pidfd; the reaper does not run again after the receipt,
//! so a helper is never taken for a job's escapee or counted in the
//! receipt.
//!
//! Work that looks at processes (the holder scan) asks [`in_helper`]:
//! the process that forked the helper is the one asking, and is no more a
//! holder of what it asked about than the helper is.
//!
//! Once something blocked, later work on the same key (the same stage) in
//! this process is answered with the same [`Blocked`] at once: one
//! command (verify, then reconcile's own look) waits once, not once per
//! look.

use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::process::forked::{Fork, Forked};
use crate::process::pidfd::{bind_child, VerifiedPidFd};

/// How long a stage (or a temp root) may take to be read before it is
/// called unreadable.
pub const STAGE_DEADLINE: Duration = Duration::from_secs(5);

/// The slowest hashing rate a deadline allows for (a loaded machine, a
/// slow disk): 16 MiB/s, on top of [`STAGE_DEADLINE`].
const SLOWEST_BYTES_PER_SEC: u64 = 16 << 20;

/// How long walking and hashing a stage of `bytes` may take before it is
/// called unreadable.
pub fn hash_deadline(bytes: u64) -> Duration {
    STAGE_DEADLINE + Duration::from_secs(bytes / SLOWEST_BYTES_PER_SEC)
}

/// Set in a helper, before its work runs; never in the caller.
static IN_HELPER: AtomicBool = AtomicBool::new(false);

/// True in a helper's work: this process was forked by [`run`] for the
/// process that is its parent, which is waiting for the answer.
pub fn in_helper() -> bool {
    IN_HELPER.load(Ordering::Relaxed)
}

/// How long a helper sent SIGKILL is given to go before it is left behind.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// Largest answer read from a helper.
const MAX_ANSWER: usize = 64 << 20;

/// A helper that did not answer in time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// What it was doing ("the stage /srv/stage").
    pub what: String,
    pub pid: i32,
    /// Its state letter and wait channel when the deadline passed.
    pub state: String,
    pub wchan: String,
    pub limit: Duration,
    /// It ended after SIGKILL (false: still blocked when the caller moved on).
    pub ended: bool,
    /// Found blocked earlier in this process; no new helper was started.
    pub earlier: bool,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} could not be read within {} s: helper pid {} blocked (state {}, wait channel {}); {}",
            self.what,
            self.limit.as_secs(),
            self.pid,
            self.state,
            self.wchan,
            if self.ended {
                "it ended after SIGKILL"
            } else {
                "still blocked after SIGKILL: it holds what it was reading until the file system answers"
            }
        )?;
        if self.earlier {
            write!(f, " (found earlier; not read again)")?;
        }
        Ok(())
    }
}

/// Why the work gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// It did not finish within the deadline.
    Blocked(Blocked),
    /// It finished with an error (the work's own), or the helper failed.
    Failed(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Blocked(b) => b.fmt(f),
            Failure::Failed(e) => f.write_str(e),
        }
    }
}

/// The work's own error as it crosses from the helper to the caller: its
/// text, nothing else (the helper's answer is JSON on a pipe, `{"Ok": ...}`
/// or `{"Err": "..."}`; the string form keeps that wire as it was). It
/// becomes [`Failure::Failed`] in the caller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(transparent)]
pub struct WorkError(pub String);

impl fmt::Display for WorkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl WorkError {
    /// Any error the work met, as its text (`.map_err(WorkError::of)`).
    pub fn of(e: impl fmt::Display) -> WorkError {
        WorkError(e.to_string())
    }
}

impl From<String> for WorkError {
    fn from(s: String) -> WorkError {
        WorkError(s)
    }
}

impl From<&str> for WorkError {
    fn from(s: &str) -> WorkError {
        WorkError(s.to_string())
    }
}

impl From<io::Error> for WorkError {
    fn from(e: io::Error) -> WorkError {
        WorkError(e.to_string())
    }
}

impl From<nix::errno::Errno> for WorkError {
    fn from(e: nix::errno::Errno) -> WorkError {
        WorkError(e.to_string())
    }
}

/// Keys found blocked in this process, and how.
static BLOCKED: Mutex<Vec<(String, Blocked)>> = Mutex::new(Vec::new());

fn earlier(key: &str) -> Option<Blocked> {
    let known = BLOCKED.lock().unwrap_or_else(|e| e.into_inner());
    known.iter().find(|(k, _)| k == key).map(|(_, b)| Blocked {
        earlier: true,
        ..b.clone()
    })
}

/// Runs `work` in a helper process and returns its answer, or why there is
/// none within `limit`. `key` names what it reads (the stage's path): work
/// on a key found blocked earlier is not started again. `keep` are
/// descriptors the work uses (all others are closed in the helper).
pub fn run<T, F>(
    what: &str,
    key: &str,
    limit: Duration,
    keep: &[BorrowedFd<'_>],
    work: F,
) -> Result<T, Failure>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T, WorkError>,
{
    if let Some(b) = earlier(key) {
        return Err(Failure::Blocked(b));
    }
    let failed = |e: &dyn fmt::Display| Failure::Failed(format!("cannot start a helper: {e}"));
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| failed(&e))?;
    let parent = nix::unistd::getpid();
    let child = match Forked::fork().map_err(|e| failed(&e))? {
        Fork::Child => {
            drop(r);
            helper(parent, w, keep, work)
        }
        Fork::Parent(child) => child,
    };
    drop(w);
    let pid = child.pid();
    // A fresh, unreaped child: bound to a pidfd (to reap and to end it).
    let helper = bind_child(child).ok();
    let t0 = Instant::now();
    match read_answer(r, t0 + limit) {
        Ok(bytes) => {
            if let Some(h) = &helper {
                reap_soon(h, Duration::from_secs(1));
            }
            match serde_json::from_slice::<Result<T, WorkError>>(&bytes) {
                Ok(answer) => answer.map_err(|WorkError(e)| Failure::Failed(e)),
                Err(_) if bytes.is_empty() => Err(Failure::Failed(format!(
                    "{what}: the helper (pid {pid}) ended without an answer"
                ))),
                Err(e) => Err(Failure::Failed(format!(
                    "{what}: the helper's answer does not parse: {e}"
                ))),
            }
        }
        Err(None) => {
            let (state, wchan) = where_blocked(pid);
            let ended = helper.as_ref().is_some_and(|h| {
                let _ = h.signal(Signal::SIGKILL);
                reap_soon(h, KILL_GRACE)
            });
            let b = Blocked {
                what: what.to_string(),
                pid,
                state,
                wchan,
                limit,
                ended,
                earlier: false,
            };
            let mut known = BLOCKED.lock().unwrap_or_else(|e| e.into_inner());
            known.push((key.to_string(), b.clone()));
            Err(Failure::Blocked(b))
        }
        Err(Some(e)) => Err(Failure::Failed(format!(
            "{what}: reading the helper's answer: {e}"
        ))),
    }
}

/// The helper's whole life: never returns.
fn helper<T, F>(parent: nix::unistd::Pid, w: OwnedFd, keep: &[BorrowedFd<'_>], work: F) -> !
where
    T: Serialize,
    F: FnOnce() -> Result<T, WorkError>,
{
    // SAFETY: prctl(PR_SET_PDEATHSIG, SIGKILL) only sets a flag of this
    // process; the arguments are constants.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if nix::unistd::getppid() != parent {
        // The caller is already gone: nobody reads the answer.
        // SAFETY: _exit ends this process at once, running nothing.
        unsafe { libc::_exit(1) };
    }
    let mut kept: Vec<i32> = keep.iter().map(|fd| fd.as_raw_fd()).collect();
    kept.push(w.as_raw_fd());
    only_these(&mut kept);
    IN_HELPER.store(true, Ordering::Relaxed);
    let answer: Result<T, WorkError> =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(done) => done,
            Err(_) => Err(WorkError("the helper panicked".to_string())),
        };
    let bytes = serde_json::to_vec(&answer)
        .unwrap_or_else(|e| format!("{{\"Err\":\"cannot encode the answer: {e}\"}}").into_bytes());
    let mut f = std::fs::File::from(w);
    let _ = io::Write::write_all(&mut f, &bytes);
    // SAFETY: _exit ends this copy of the caller without running its
    // destructors or atexit handlers a second time.
    unsafe { libc::_exit(0) }
}

/// `/dev/null` on 0-2 and every descriptor but `kept` closed.
fn only_these(kept: &mut [i32]) {
    kept.sort_unstable();
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for n in 0..3 {
            if !kept.contains(&n) {
                // SAFETY: dup2 onto a standard descriptor of this process.
                unsafe { libc::dup2(null.as_raw_fd(), n) };
            }
        }
    }
    let mut next: u32 = 3;
    for &k in kept.iter().filter(|&&k| k >= 3) {
        let k = k as u32;
        if k > next {
            close_range(next, k - 1);
        }
        next = next.max(k + 1);
    }
    close_range(next, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: close_range(2) closes this process's descriptors in the
    // range; nothing in the helper uses them (it only walks from here).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if r != 0 {
        // An old kernel: one by one, up to the descriptor limit.
        let max = nix::unistd::sysconf(nix::unistd::SysconfVar::OPEN_MAX)
            .ok()
            .flatten()
            .unwrap_or(1024) as u32;
        for fd in first..=last.min(max) {
            // SAFETY: as above, one descriptor at a time.
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// Everything the helper wrote, until EOF; `Err(None)` at the deadline.
fn read_answer(r: OwnedFd, deadline: Instant) -> Result<Vec<u8>, Option<io::Error>> {
    let mut f = std::fs::File::from(r);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(None);
        }
        let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(f.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Some(e.into())),
        }
        match f.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) if out.len() + n > MAX_ANSWER => {
                return Err(Some(io::Error::other("the answer is too large")))
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Some(e)),
        }
    }
}

/// Waits up to `limit` for the helper to exit and reaps it; whether it did.
fn reap_soon(h: &VerifiedPidFd, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if h.has_exited() {
            return matches!(h.try_reap(), Ok(Some(_)));
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The helper's state letter and wait channel, as `/proc` says them.
fn where_blocked(pid: i32) -> (String, String) {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rfind(')')?;
            s[after + 1..].split_whitespace().next().map(str::to_string)
        })
        .unwrap_or_else(|| "?".to_string());
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        .ok()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty() && w != "0")
        .unwrap_or_else(|| "unknown".to_string());
    (state, wchan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_comes_back_and_an_error_too() {
        let got: Result<Vec<u64>, Failure> =
            run("numbers", "k1", STAGE_DEADLINE, &[], || Ok(vec![1, 2, 3]));
        assert_eq!(got, Ok(vec![1, 2, 3]));
        let got: Result<u8, Failure> = run("nothing", "k2", STAGE_DEADLINE, &[], || {
            Err("refused".into())
        });
        assert_eq!(got, Err(Failure::Failed("refused".to_string())));
    }

    /// The helper's error is a plain JSON string on the pipe, as it was
    /// before it had a type: `{"Err":"..."}` both ways.
    #[test]
    fn the_work_error_is_a_string_on_the_wire() {
        let err: Result<u8, WorkError> = Err(WorkError("refused".to_string()));
        let text = serde_json::to_string(&err).expect("encodes");
        assert_eq!(text, r#"{"Err":"refused"}"#);
        let back: Result<u8, WorkError> = serde_json::from_str(&text).expect("decodes");
        assert_eq!(back, err);
    }

    #[test]
    fn a_helper_past_its_deadline_is_named_ended_and_remembered() {
        let t0 = Instant::now();
        let got: Result<u8, Failure> =
            run("a sleeper", "k3", Duration::from_millis(200), &[], || {
                std::thread::sleep(Duration::from_secs(30));
                Ok(0)
            });
        assert!(t0.elapsed() < Duration::from_secs(5));
        let Err(Failure::Blocked(b)) = got else {
            panic!("{got:?}")
        };
        assert!(b.ended, "{b}");
        assert!(b.to_string().contains(&format!("helper pid {}", b.pid)));
        // The same key again: answered at once, not started again.
        let again: Result<u8, Failure> = run("a sleeper", "k3", STAGE_DEADLINE, &[], || Ok(1));
        assert!(matches!(again, Err(Failure::Blocked(b)) if b.earlier));
    }
}
