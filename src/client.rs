//! The client side of the protocol: `submit`, `stop`, `close`.
//!
//! A client never hangs on a dead or missing watchdog: the state directory
//! must be ours (owner and mode), the request FIFO must have a reader (an
//! `O_NONBLOCK` open fails with ENXIO otherwise), and while waiting for a
//! reply the client also watches the watchdog's own pidfd (bound from
//! `ready.json`, start time checked).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{openat, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::stat::Mode;
use nix::unistd::mkfifoat;
use serde::Deserialize;

use crate::inventory::open_dir;
use crate::kinds::watchdog::Ident;
use crate::process::identity::self_start_time;
use crate::process::pidfd::{bind_ident, VerifiedPidFd};
use crate::protocol::{
    frame, Caller, Reply, Request, MAX_REQUEST, PROTOCOL_VERSION, READY, REPLIES, REQUESTS,
};
use crate::vocab::StopSignal;

/// The ready line (`ready.json` and the first line on `run`'s stdout).
#[derive(Deserialize, serde::Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    pub event: String,
    pub run_id: String,
    pub pid: i32,
    pub start_time: u64,
    pub uid: u32,
    pub state_dir: String,
    pub fifo: String,
    pub audit_log: String,
}

#[derive(Debug)]
pub struct ClientError(pub String);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn cerr(msg: impl Into<String>) -> ClientError {
    ClientError(msg.into())
}

/// A checked connection to one watchdog's state directory.
pub struct Session {
    pub dir: PathBuf,
    dir_fd: OwnedFd,
    pub ready: Ready,
    watchdog: VerifiedPidFd,
}

/// Removes the reply FIFO however the exchange ends.
struct ReplyFifo {
    dir: PathBuf,
    name: String,
    file: File,
    buf: Vec<u8>,
}

impl Drop for ReplyFifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(REPLIES).join(&self.name));
    }
}

/// One job to spawn through [`Session::submit`].
pub struct Submit {
    /// The program (an absolute path) and its arguments.
    pub argv: Vec<String>,
    pub deadline: Duration,
    /// SIGALRM to the job's leader at that instant (below the deadline;
    /// the runtime's own alarm, not a stop).
    pub inner_alarm: Option<Duration>,
    /// What the leader is asked to stop with when the action stops
    /// (`None`: the watchdog's default, TERM).
    pub stop_signal: Option<StopSignal>,
    pub capture: bool,
    pub name: Option<String>,
}

impl Session {
    /// Checks the state directory and binds the watchdog, or says exactly
    /// why not (missing, foreign, stale).
    pub fn open(dir: &Path) -> Result<Session, ClientError> {
        let uid = nix::unistd::geteuid().as_raw();
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| cerr(format!("state directory {}: {e}", dir.display())))?;
        if !meta.file_type().is_dir() {
            return Err(cerr(format!(
                "state directory {} is not a directory",
                dir.display()
            )));
        }
        if meta.uid() != uid {
            return Err(cerr(format!(
                "state directory {} belongs to uid {}, not to us ({uid}): refusing a foreign watchdog",
                dir.display(),
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(cerr(format!(
                "state directory {} has mode {:o}; a watchdog's is 0700",
                dir.display(),
                meta.mode() & 0o777
            )));
        }
        let dir_fd =
            open_dir(dir).map_err(|e| cerr(format!("state directory {}: {e}", dir.display())))?;
        let fifo_meta = std::fs::symlink_metadata(dir.join(REQUESTS)).map_err(|e| {
            cerr(format!(
                "{}: no request FIFO ({e}): not a watchdog state directory",
                dir.display()
            ))
        })?;
        if !fifo_meta.file_type().is_fifo() || fifo_meta.uid() != uid {
            return Err(cerr(format!(
                "{}/requests is not a FIFO of ours",
                dir.display()
            )));
        }
        let text = std::fs::read_to_string(dir.join(READY)).map_err(|e| {
            cerr(format!(
                "{}: no ready.json ({e}): the watchdog never started here",
                dir.display()
            ))
        })?;
        let ready: Ready = serde_json::from_str(text.trim()).map_err(|e| {
            cerr(format!(
                "{}/ready.json is not a ready line: {e}",
                dir.display()
            ))
        })?;
        let watchdog = bind_ident(Ident {
            pid: ready.pid,
            start_time: ready.start_time,
            uid: ready.uid,
        })
        .map_err(|_| {
            cerr(format!(
                "stale state directory {}: watchdog pid {} (run {}) is gone",
                dir.display(),
                ready.pid,
                ready.run_id
            ))
        })?;
        Ok(Session {
            dir: dir.to_path_buf(),
            dir_fd,
            ready,
            watchdog,
        })
    }

    /// Sends one request as this process; returns the channel to read replies from.
    fn send(&self, req: &Request) -> Result<ReplyFifo, ClientError> {
        let replies = openat(
            &self.dir_fd,
            REPLIES,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| cerr(format!("{}/replies: {e}", self.dir.display())))?;
        mkfifoat(
            &replies,
            req.reply.as_str(),
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| cerr(format!("cannot create reply FIFO: {e}")))?;
        let _ = nix::sys::stat::fchmodat(
            &replies,
            req.reply.as_str(),
            Mode::from_bits_truncate(0o600),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        );
        let rfd = openat(
            &replies,
            req.reply.as_str(),
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| cerr(format!("cannot open reply FIFO: {e}")))?;
        let fifo = ReplyFifo {
            dir: self.dir.clone(),
            name: req.reply.clone(),
            file: File::from(rfd),
            buf: Vec::new(),
        };
        let json = serde_json::to_vec(req).map_err(|e| cerr(e.to_string()))?;
        let line = frame(&json); // RFC 7464: RS, JSON, LF
        if line.len() > MAX_REQUEST {
            return Err(cerr(format!(
                "request is {} bytes; the protocol's cap is {MAX_REQUEST} (argv too long?)",
                line.len()
            )));
        }
        let wfd = openat(
            &self.dir_fd,
            REQUESTS,
            OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ENXIO => cerr(format!(
                "stale state directory {}: no watchdog is reading its request FIFO",
                self.dir.display()
            )),
            e => cerr(format!("{}/requests: {e}", self.dir.display())),
        })?;
        let mut w = File::from(wfd);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            // One write of at most PIPE_BUF bytes: all or nothing, never interleaved.
            match w.write(&line) {
                Ok(n) if n == line.len() => break,
                Ok(_) => return Err(cerr("short write on the request FIFO")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < until => {
                    if self.watchdog.has_exited() {
                        return Err(cerr("the watchdog exited"));
                    }
                    wait_fd(w.as_fd(), PollFlags::POLLOUT, 20);
                }
                Err(e) => return Err(cerr(format!("writing the request: {e}"))),
            }
        }
        Ok(fifo)
    }

    /// Reads the next reply line; `limit` bounds the wait (None: until the
    /// watchdog answers or exits).
    fn next(&self, fifo: &mut ReplyFifo, limit: Option<Duration>) -> Result<Reply, ClientError> {
        let until = limit.map(|l| Instant::now() + l);
        loop {
            if let Some(i) = fifo.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = fifo.buf.drain(..=i).collect();
                let text = std::str::from_utf8(&line[..i])
                    .map_err(|e| cerr(format!("reply is not UTF-8: {e}")))?;
                return Reply::parse(text).map_err(|e| cerr(format!("unreadable reply: {e}")));
            }
            let mut chunk = [0u8; 65536];
            match fifo.file.read(&mut chunk) {
                Ok(0) => {
                    // No writer (yet, or any more): wait for data or the watchdog's end.
                }
                Ok(n) => {
                    fifo.buf.extend_from_slice(&chunk[..n]);
                    continue;
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(cerr(format!("reading the reply: {e}"))),
            }
            if self.watchdog.has_exited() {
                // It may have written its last words just before exiting.
                let mut rest = Vec::new();
                let _ = fifo.file.read_to_end(&mut rest);
                if rest.is_empty() {
                    return Err(cerr(format!(
                        "the watchdog (pid {}) exited before answering",
                        self.ready.pid
                    )));
                }
                fifo.buf.extend_from_slice(&rest);
                continue;
            }
            let wait = match until {
                Some(u) => {
                    let left = u.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(cerr("no reply in time"));
                    }
                    left.min(Duration::from_millis(500))
                }
                None => Duration::from_millis(500),
            };
            // Wake on reply data or on the watchdog's exit, whichever first.
            let mut fds = [
                PollFd::new(fifo.file.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.watchdog.as_fd(), PollFlags::POLLIN),
            ];
            // An error (EINTR) is a wake-up like any other: the loop re-checks.
            let _ = poll(
                &mut fds,
                PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX),
            );
            let fifo_ev = fds[0].revents().unwrap_or(PollFlags::empty());
            // A FIFO reports POLLHUP only after a writer came and went: the
            // watchdog closed this channel and nothing more will arrive.
            if fifo_ev.contains(PollFlags::POLLHUP) && !fifo_ev.contains(PollFlags::POLLIN) {
                let mut rest = Vec::new();
                let _ = fifo.file.read_to_end(&mut rest);
                if rest.is_empty() && self.watchdog.has_exited() {
                    return Err(cerr(format!(
                        "the watchdog (pid {}) exited before answering",
                        self.ready.pid
                    )));
                }
                if rest.is_empty() {
                    return Err(cerr(
                        "the watchdog closed the reply channel without an answer",
                    ));
                }
                fifo.buf.extend_from_slice(&rest);
            }
        }
    }

    fn request(&self, op: crate::protocol::Op, tag: &str) -> Result<Request, ClientError> {
        let me = std::process::id() as i32;
        let start_time = self_start_time().map_err(|e| cerr(format!("/proc/self/stat: {e}")))?;
        let nonce = crate::clock::mono_ns() % 1_000_000_000_000;
        let id = format!("{tag}-{me}-{nonce}");
        Ok(Request {
            v: PROTOCOL_VERSION,
            op,
            id: id.clone(),
            caller: Caller {
                pid: me,
                start_time,
                uid: nix::unistd::geteuid().as_raw(),
            },
            reply: id,
            argv: None,
            deadline_ms: None,
            capture: None,
            name: None,
            inner_alarm_ms: None,
            stop_signal: None,
            cwd: None,
            env: None,
            stdin: None,
        })
    }

    /// Spawn: returns every reply in order (accepted/refused, then the
    /// result).
    pub fn submit(&self, job: Submit) -> Result<Vec<Reply>, ClientError> {
        let tag = job.name.as_deref().unwrap_or("job");
        let mut req = self.request(crate::protocol::Op::Spawn, tag)?;
        req.argv = Some(job.argv);
        req.deadline_ms = Some(job.deadline.as_millis().max(1) as u64);
        req.inner_alarm_ms = job.inner_alarm.map(|a| a.as_millis().max(1) as u64);
        req.stop_signal = job.stop_signal;
        req.capture = Some(if job.capture {
            crate::protocol::Capture::Capture
        } else {
            crate::protocol::Capture::Discard
        });
        req.name = job.name;
        let mut fifo = self.send(&req)?;
        let first = self.next(&mut fifo, Some(Duration::from_secs(30)))?;
        if !matches!(first, Reply::Accepted { .. }) {
            return Ok(vec![first]);
        }
        let last = self.next(&mut fifo, None)?;
        Ok(vec![first, last])
    }

    /// Stop: waits for the stop procedure to finish (bounded by `wait`).
    pub fn stop(&self, wait: Duration) -> Result<Reply, ClientError> {
        let req = self.request(crate::protocol::Op::Stop, "stop")?;
        let mut fifo = self.send(&req)?;
        self.next(&mut fifo, Some(wait))
    }

    /// Close: waits for the receipt (bounded by `wait`).
    pub fn close(&self, wait: Duration) -> Result<Reply, ClientError> {
        let req = self.request(crate::protocol::Op::Close, "close")?;
        let mut fifo = self.send(&req)?;
        self.next(&mut fifo, Some(wait))
    }
}

/// Waits (at most `ms`) for `events` on `fd`; the caller re-checks why.
fn wait_fd(fd: BorrowedFd<'_>, events: PollFlags, ms: u16) {
    let _ = poll(&mut [PollFd::new(fd, events)], ms);
}

/// Resolves a command like execvp would, to the absolute path sent in argv[0].
pub fn resolve_program(prog: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        return std::path::absolute(prog).ok();
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| executable(p))
        .and_then(|p| std::path::absolute(p).ok())
}
