//! Talking to a watchdog without the client: raw request lines written
//! straight into `STATE_DIR/requests`, replies read from reply FIFOs the
//! test creates itself, and a [`Gate`] a job can wait on. Every test that
//! writes request bytes by hand does it through [`send`], [`send_all`] or
//! [`exchange`] here.
//!
//! A request is built field by field as raw JSON fragments ([`Req`]), so a
//! test can write exactly the bytes it means: duplicate keys, wrong types,
//! unknown fields, explicit nulls. The caller is this test process (its pid,
//! start time and uid), which is the root controller of a harness
//! [`Watchdog`](super::harness::Watchdog).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use rea::kinds::watchdog::Ident;
use serde_json::Value;

use super::harness::{records, PATIENCE};
use super::schema::{assert_reply_matches_schema, assert_request_matches_schema};

/// A JSON string literal for `s`.
pub fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A JSON array of strings.
pub fn js_array(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap()
}

/// This process's identity as the `caller` object.
pub fn me() -> String {
    caller(
        std::process::id() as i32,
        rea::process::identity::self_start_time().expect("own start time"),
        nix::unistd::getuid().as_raw(),
    )
}

pub fn caller(pid: i32, start_time: u64, uid: u32) -> String {
    format!(r#"{{"pid":{pid},"start_time":{start_time},"uid":{uid}}}"#)
}

/// One request as ordered `key: raw JSON` pairs; duplicates are kept.
#[derive(Clone, Debug)]
pub struct Req {
    fields: Vec<(String, String)>,
}

impl Req {
    /// A well-formed spawn from this process: capture, 60 s deadline.
    pub fn spawn(id: &str, reply: &str, argv: &[&str]) -> Req {
        Req {
            fields: vec![
                ("v".into(), "1".into()),
                ("op".into(), js("spawn")),
                ("id".into(), js(id)),
                ("caller".into(), me()),
                ("reply".into(), js(reply)),
                ("argv".into(), js_array(argv)),
                ("deadline_ms".into(), "60000".into()),
                ("capture".into(), js("capture")),
            ],
        }
    }

    /// A well-formed `stop` or `close` from this process.
    pub fn op(op: &str, id: &str, reply: &str) -> Req {
        Req {
            fields: vec![
                ("v".into(), "1".into()),
                ("op".into(), js(op)),
                ("id".into(), js(id)),
                ("caller".into(), me()),
                ("reply".into(), js(reply)),
            ],
        }
    }

    /// Replaces the first `key` (or appends it) with a raw JSON value.
    pub fn set(mut self, key: &str, raw: &str) -> Req {
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(f) => f.1 = raw.to_string(),
            None => self.fields.push((key.into(), raw.into())),
        }
        self
    }

    /// Appends `key` even if present (a duplicate key).
    pub fn add(mut self, key: &str, raw: &str) -> Req {
        self.fields.push((key.into(), raw.into()));
        self
    }

    /// The same request claimed by another caller (`ident`, maybe stale).
    pub fn caller(self, ident: Ident) -> Req {
        self.set("caller", &caller(ident.pid, ident.start_time, ident.uid))
    }

    /// The raw JSON of the first `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn remove(mut self, key: &str) -> Req {
        self.fields.retain(|(k, _)| k != key);
        self
    }

    /// The request without its newline.
    pub fn text(&self) -> String {
        let body: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| format!("{}:{v}", js(k)))
            .collect();
        format!("{{{}}}", body.join(","))
    }

    /// The request as an RFC 7464 text (RS, JSON, LF), checked against the
    /// request schema first (only for requests the test means to be valid).
    pub fn valid_line(&self) -> Vec<u8> {
        let t = self.text();
        assert_request_matches_schema(&t);
        framed(t.as_bytes())
    }

    /// The request as an RFC 7464 text, unchecked.
    pub fn line(&self) -> Vec<u8> {
        framed(self.text().as_bytes())
    }
}

/// RS (0x1E), `json`, LF: one text as every writer must send it (docs/requests.md).
pub fn framed(json: &[u8]) -> Vec<u8> {
    let mut v = vec![0x1e];
    v.extend_from_slice(json);
    v.push(b'\n');
    v
}

/// Writes `bytes` to `STATE_DIR/requests` in one non-blocking write
/// (at most PIPE_BUF bytes are never interleaved with another writer's).
pub fn send(state_dir: &Path, bytes: &[u8]) {
    let fd = nix::fcntl::open(
        &state_dir.join("requests"),
        OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .expect("open the request FIFO (is the watchdog reading it?)");
    let mut f = File::from(fd);
    let n = f.write(bytes).expect("write the request");
    assert_eq!(n, bytes.len(), "short write on the request FIFO");
}

/// Writes `bytes` to the request FIFO blocking until all are taken (for
/// lines larger than the pipe buffer; the watchdog reads as it goes).
pub fn send_all(state_dir: &Path, bytes: &[u8]) {
    let fd = nix::fcntl::open(
        &state_dir.join("requests"),
        OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .expect("open the request FIFO");
    File::from(fd).write_all(bytes).expect("write the request");
}

/// One whole exchange: creates the reply FIFO the request names, sends the
/// (schema-checked) request line, and returns every reply until the
/// watchdog closes the channel (each schema-checked; bounded by PATIENCE).
pub fn exchange(state_dir: &Path, req: &Req) -> Vec<Value> {
    let name: String = serde_json::from_str(req.get("reply").expect("the request names a reply"))
        .expect("reply is a JSON string");
    let mut reply = ReplyFifo::create(state_dir, &name);
    send(state_dir, &req.valid_line());
    reply.until_closed()
}

/// A reply FIFO this test created in `STATE_DIR/replies/` and reads.
pub struct ReplyFifo {
    pub name: String,
    pub path: PathBuf,
    file: File,
    buf: Vec<u8>,
}

/// Makes a FIFO at `path` with exactly `mode` (umask undone) and opens
/// its read end non-blocking (so the watchdog's writer open succeeds).
pub fn fifo_with_reader(path: &Path, mode: u32) -> File {
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)).expect("mkfifo");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    let fd = nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .expect("open fifo for reading");
    File::from(fd)
}

impl ReplyFifo {
    /// `replies/NAME`, 0600, ours, with a reader: what the protocol wants.
    pub fn create(state_dir: &Path, name: &str) -> ReplyFifo {
        let path = state_dir.join("replies").join(name);
        let file = fifo_with_reader(&path, 0o600);
        ReplyFifo {
            name: name.to_string(),
            path,
            file,
            buf: Vec::new(),
        }
    }

    /// The next reply line (schema-checked, parsed); `None` when the
    /// watchdog closed the channel first or nothing came within `limit`.
    pub fn next(&mut self, limit: Duration) -> Option<Value> {
        let line = self.next_line(limit)?;
        assert_reply_matches_schema(&line);
        Some(serde_json::from_str(&line).unwrap())
    }

    /// The next reply, which must come within PATIENCE.
    pub fn expect(&mut self) -> Value {
        self.next(PATIENCE)
            .unwrap_or_else(|| panic!("no reply on {} within {PATIENCE:?}", self.name))
    }

    /// Every reply until the watchdog closes the channel; fails the test
    /// if it is still open after PATIENCE.
    pub fn until_closed(&mut self) -> Vec<Value> {
        let mut all = Vec::new();
        loop {
            match self.read_line(PATIENCE) {
                Ok(line) => {
                    assert_reply_matches_schema(&line);
                    all.push(serde_json::from_str(&line).unwrap());
                }
                Err(Ended::Closed) => {
                    assert!(
                        self.buf.is_empty(),
                        "{}: a torn reply before the close: {:?}",
                        self.name,
                        String::from_utf8_lossy(&self.buf)
                    );
                    return all;
                }
                Err(Ended::TimedOut) => panic!(
                    "{} still open after {PATIENCE:?}; replies so far: {all:?}",
                    self.name
                ),
            }
        }
    }

    fn next_line(&mut self, limit: Duration) -> Option<String> {
        self.read_line(limit).ok()
    }

    fn read_line(&mut self, limit: Duration) -> Result<String, Ended> {
        let until = Instant::now() + limit;
        let mut had_eof_after_hup = false;
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(String::from_utf8(line).expect("reply is UTF-8"));
            }
            let mut chunk = [0u8; 65536];
            match self.file.read(&mut chunk) {
                Ok(0) => {
                    if had_eof_after_hup {
                        return Err(Ended::Closed); // the writer came and went
                    }
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("reading {}: {e}", self.name),
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Ended::TimedOut);
            }
            // POLLHUP only appears after a writer has connected and left;
            // then one more read drains what it wrote before the verdict.
            if poll_in(&self.file, left) & libc::POLLHUP != 0 {
                had_eof_after_hup = true;
            }
        }
    }

    /// True when the watchdog closed the channel with nothing more (bounded).
    pub fn closed_empty(&mut self) -> bool {
        self.next_line(PATIENCE).is_none() && self.buf.is_empty()
    }

    /// Bytes that arrived so far, without waiting.
    pub fn pending(&mut self) -> Vec<u8> {
        let mut chunk = [0u8; 65536];
        loop {
            match self.file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => break,
            }
        }
        self.buf.clone()
    }
}

/// Why [`ReplyFifo`] has no further line.
enum Ended {
    /// The watchdog wrote, then closed its end.
    Closed,
    TimedOut,
}

impl Drop for ReplyFifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// poll(POLLIN) on one fd; returns revents (0 on timeout).
fn poll_in(f: &File, limit: Duration) -> libc::c_short {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n > 0 {
        p.revents
    } else {
        0
    }
}

/// A gate a job waits on: a pipe whose write end only this test holds
/// (close-on-exec, so no other child inherits it). The job opens the read
/// end through `/proc/<test pid>/fd/N` and reads: it blocks until the test
/// opens the gate (drops the write end), or the test dies.
pub struct Gate {
    read: Option<OwnedFd>,
    write: Option<OwnedFd>,
    pub path: String,
}

impl Gate {
    pub fn new() -> Gate {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("pipe2");
        let path = format!("/proc/{}/fd/{}", std::process::id(), r.as_raw_fd());
        Gate {
            read: Some(r),
            write: Some(w),
            path,
        }
    }

    /// Lets the job go (EOF on its read).
    pub fn open(&mut self) {
        self.read.take();
        self.write.take();
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

/// Polls the audit log (bounded, every 10 ms) until `pred` holds for its
/// records; returns them. Only for records no reply announces.
pub fn wait_for_records(log: &Path, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let until = Instant::now() + PATIENCE;
    loop {
        let recs = records(log);
        if pred(&recs) {
            return recs;
        }
        assert!(
            Instant::now() < until,
            "the audit log never showed {what} within {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
