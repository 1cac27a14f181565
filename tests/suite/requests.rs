//! Issue 3, requests (docs/requests.md): every refusal a request can produce, sent
//! as raw bytes into a real watchdog's FIFO.
//!
//! Each check proves three things: the reason code (in the reply when the
//! request named a usable reply FIFO, and in the `request_refused` record
//! always), that nothing was launched (the refused argv would have created
//! a marker file; no `job_spawned` names it), and that the watchdog still
//! serves (a following good `submit` gets its own output back). Each test
//! ends with a close whose receipt must be positive and `rea-audit verify`
//! must allow deletion: a refusal changed nothing else.

use crate::common;

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::harness::*;
use common::raw::*;
use common::typed::{all, wait_for_log};
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use rea::kinds::watchdog::{Event, RequestRefused, StopReason};
use rea::protocol::RefusalReason;
use serde_json::Value;

const TOUCH: &str = "/usr/bin/touch";

/// A watchdog under test, the unrelated sibling, and the bookkeeping that
/// lets every refusal be checked the same way.
struct Bench {
    w: Watchdog,
    sibling: Sibling,
    /// Good jobs this test launched (each must show up as job_spawned).
    jobs: usize,
    served: u32,
    next_reply: u32,
}

impl Bench {
    fn new() -> Bench {
        Bench::with(&[])
    }

    fn with(extra: &[&str]) -> Bench {
        let sibling = Sibling::start();
        let w = Watchdog::start(extra);
        Bench {
            w,
            sibling,
            jobs: 0,
            served: 0,
            next_reply: 0,
        }
    }

    fn dir(&self) -> &Path {
        &self.w.state_dir
    }

    /// A path that only a refused request's argv would ever create.
    fn marker(&self, name: &str) -> String {
        self.w
            .scratch
            .path(&format!("marker-{name}"))
            .to_str()
            .unwrap()
            .to_string()
    }

    /// A fresh, valid reply FIFO in `replies/`.
    fn reply(&mut self) -> ReplyFifo {
        self.next_reply += 1;
        ReplyFifo::create(self.dir(), &format!("r{}", self.next_reply))
    }

    /// Every refusal recorded, in order: a `request_refused` record (an
    /// answered refusal), or one entry per refusal of a `requests_refused`
    /// burst (unanswerable ones; every burst here is shorter than its
    /// sample list, so its samples are all of it, and that is checked).
    fn refusals(&self) -> Vec<RequestRefused> {
        let mut out = Vec::new();
        for e in self.w.log().iter() {
            match e {
                Event::RequestRefused(r) => out.push(r.clone()),
                Event::RequestsRefused(r) => {
                    assert_eq!(
                        r.count,
                        r.first.len() as u64,
                        "a burst within its samples: {r:?}"
                    );
                    out.extend(r.first.iter().cloned());
                }
                _ => {}
            }
        }
        out
    }

    /// Sends one line that must be refused with `reason`: answered on
    /// `reply` when given (and the channel then closed), recorded exactly
    /// once, nothing launched, and the watchdog still serving. Returns the
    /// `request_refused` record.
    fn refuse(
        &mut self,
        line: &[u8],
        reply: Option<&mut ReplyFifo>,
        reason: &str,
    ) -> RequestRefused {
        let shown = String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned();
        let before = self.refusals().len();
        send(self.dir(), line);
        if let Some(r) = reply {
            let v = r.expect();
            assert_eq!(v["type"], "refused", "reply to {shown}: {v}");
            assert_eq!(v["reason"], reason, "reply to {shown}: {v}");
            assert!(r.closed_empty(), "a refusal is the last reply ({shown})");
        }
        // FIFO order: once the next request is served, this one was handled.
        self.still_serves();
        let recs = self.refusals();
        assert_eq!(
            recs.len(),
            before + 1,
            "exactly one refusal recorded for {shown}: {recs:#?}"
        );
        let rec = recs[before].clone();
        assert_eq!(rec.reason, refusal(reason), "record for {shown}: {rec:?}");
        self.nothing_launched();
        rec
    }

    /// Like [`refuse`] with a reply FIFO made for the request: `make` gets
    /// the FIFO's name and returns the request.
    fn refuse_answered(&mut self, reason: &str, make: impl FnOnce(&str) -> Req) -> RequestRefused {
        let mut r = self.reply();
        let req = make(&r.name.clone());
        let rec = self.refuse(&req.line(), Some(&mut r), reason);
        drop(r);
        rec
    }

    /// A good submit: served, with exactly its own output back.
    fn still_serves(&mut self) {
        self.served += 1;
        self.jobs += 1;
        let text = format!("served-{}", self.served);
        let out = self.w.submit(
            &["--capture", "--deadline", "120s"],
            &[python(), &fixture("launcher.py"), "--print", &text],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "the watchdog stopped serving: {out:?}"
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{text}\n"));
    }

    /// No marker file exists and every job_spawned is a job the test meant.
    fn nothing_launched(&self) {
        let made: Vec<String> = std::fs::read_dir(self.w.scratch.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("marker-"))
            .collect();
        assert!(
            made.is_empty(),
            "a refused request launched something: {made:?}"
        );
        let log = self.w.log();
        let spawned = all!(log, Event::JobSpawned);
        for r in &spawned {
            assert!(
                !r.argv.iter().any(|a| a.contains("marker-")),
                "a refused argv was spawned: {r:?}"
            );
        }
        assert!(all!(log, Event::JobFailed).is_empty(), "{log:#?}");
        assert_eq!(
            spawned.len(),
            self.jobs,
            "job_spawned records: {spawned:#?}"
        );
    }

    /// Closes: the receipt must be positive and verify must allow deletion.
    /// Returns the verdict.
    fn finish(mut self) -> Value {
        let close = self.w.close();
        assert_eq!(close.status.code(), Some(0), "{close:?}");
        let c: Value = serde_json::from_slice(&close.stdout).expect("close prints JSON");
        assert_eq!(c["positive"], true, "{c}");
        assert!(self.w.wait(PATIENCE).success());
        assert_eq!(self.w.head().as_deref(), c["head"].as_str());
        let (code, v) = self
            .w
            .verify(&["--staging", self.w.staging.to_str().unwrap()]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["verdict"], "delete_allowed", "{v:#}");
        self.nothing_launched();
        let log = self.w.log();
        let r = log.receipt();
        assert_eq!(r.counts.jobs, self.jobs as u64, "{r:?}");
        self.sibling.assert_alive();
        v
    }
}

/// The spawn a refused request asks for: touch a marker.
/// A refusal reason as requests and records spell it (`bad_id`).
fn refusal(reason: &str) -> RefusalReason {
    serde_json::from_value(Value::from(reason))
        .unwrap_or_else(|e| panic!("{reason:?} is not a refusal reason: {e}"))
}

fn touch(id: &str, reply: &str, marker: &str) -> Req {
    Req::spawn(id, reply, &[TOUCH, marker])
}

// ----- what is accepted -------------------------------------------------------

#[test]
fn a_request_split_across_writes_is_still_one_request() {
    // The client writes a request in one write; the loop must still put a
    // line together from whatever pieces its reads return.
    let mut b = Bench::new();
    let mut r = b.reply();
    let line = Req::spawn(
        "split",
        &r.name,
        &[python(), &fixture("launcher.py"), "--print", "split"],
    )
    .valid_line();
    let (head, rest) = line.split_at(line.len() / 2);
    let (body, newline) = rest.split_at(rest.len() - 1);
    send(b.dir(), head);
    send(b.dir(), body);
    send(b.dir(), newline);
    b.jobs += 1;
    assert_eq!(r.expect()["type"], "accepted");
    let done = r.expect();
    assert_eq!(done["type"], "exited", "{done}");
    let out = rea::b64::decode(done["stdout"]["data_b64"].as_str().unwrap()).unwrap();
    assert_eq!(out, b"split\n");
    drop(r);
    b.still_serves();
    b.finish();
}

#[test]
fn the_largest_valid_fields_are_accepted() {
    let mut b = Bench::new();
    let id = "i".repeat(64);
    let name = "n".repeat(64);
    let mut r = ReplyFifo::create(b.dir(), &"r".repeat(64));
    // 1024 argv entries (the most), the longest id, name and reply name,
    // and the largest deadline there is (capped by nothing, it must not
    // overflow a clock).
    let argv: Vec<&str> = std::iter::once("/bin/true")
        .chain(std::iter::repeat_n("", 1023))
        .collect();
    let line = Req::spawn(&id, &r.name, &argv)
        .set("name", &js(&name))
        .set("deadline_ms", &u64::MAX.to_string())
        .set("capture", &js("discard"))
        .line();
    assert!(line.len() <= 4096);
    send(b.dir(), &line);
    b.jobs += 1;
    let acc = r.expect();
    assert_eq!(acc["type"], "accepted", "{acc}");
    assert_eq!(acc["id"], id.as_str());
    let done = r.expect();
    assert_eq!(done["type"], "exited", "{done}");
    assert_eq!(done["status"], serde_json::json!({"code": 0}), "{done}");
    drop(r);
    let log = b.w.log();
    let spawned = all!(log, Event::JobSpawned);
    assert_eq!(spawned[0].name.as_deref(), Some(name.as_str()));
    assert_eq!(spawned[0].argv.len(), 1024);
    b.still_serves();
    b.finish();
}

// ----- shape of the line ------------------------------------------------------

#[test]
fn malformed_lines_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("malformed");
    // A line cut short: nothing can be addressed, only recorded.
    let whole = touch("m1", "nobody", &m).text();
    let cut = framed(&whole.as_bytes()[..whole.len() - 12]);
    b.refuse(&cut, None, "malformed");
    // Not an object.
    let arr = format!("[{}]", js_array(&[TOUCH, &m]));
    b.refuse(&framed(arr.as_bytes()), None, "malformed");
    // Trailing garbage after the object.
    let trail = format!("{} x", touch("m3", "nobody", &m).text());
    b.refuse(&framed(trail.as_bytes()), None, "malformed");
    // A missing field: the address is readable, so the refusal is answered.
    b.refuse_answered("malformed", |r| touch("m5", r, &m).remove("caller"));
    b.refuse_answered("malformed", |r| touch("m6", r, &m).remove("v"));
    // stop/close carry no spawn fields.
    b.refuse_answered("malformed", |r| {
        Req::op("stop", "m7", r).set("argv", &js_array(&[TOUCH, &m]))
    });
    b.finish();
}

#[test]
fn invalid_utf8_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("utf8");
    // The bad bytes sit in argv, after the marker's name: a lossy decoder
    // would launch `touch marker-utf8\u{fffd}`.
    let line = touch("u1", "nobody", &format!("{m}@@")).line();
    let text = String::from_utf8(line).unwrap();
    let at = text.find("@@").unwrap();
    let mut bytes = text.as_bytes().to_vec();
    bytes[at] = 0xff;
    bytes[at + 1] = 0xfe;
    let rec = b.refuse(&bytes, None, "malformed");
    assert!(rec.detail.contains("UTF-8"), "{rec:?}");
    // An overlong encoding of '/' in the id.
    let mut bytes = touch("u2X", "nobody", &m).line();
    let at = bytes.windows(3).position(|w| w == b"u2X").unwrap();
    bytes.splice(at + 2..at + 3, [0xc0, 0xaf]);
    b.refuse(&bytes, None, "malformed");
    b.finish();
}

#[test]
fn oversize_lines_are_refused_and_the_limit_is_exact() {
    let mut b = Bench::new();
    let m = b.marker("oversize");
    let launcher = fixture("launcher.py");

    // Exactly 4096 bytes with the newline: the largest request, accepted.
    let mut r = b.reply();
    let base = Req::spawn("fit", &r.name, &[python(), &launcher, "--print", ""]);
    let pad = 4096 - base.line().len();
    let text = "x".repeat(pad);
    let fit = Req::spawn("fit", &r.name, &[python(), &launcher, "--print", &text]).valid_line();
    assert_eq!(fit.len(), 4096);
    send(b.dir(), &fit);
    b.jobs += 1;
    let acc = r.expect();
    assert_eq!(acc["type"], "accepted", "{acc}");
    let done = r.expect();
    assert_eq!(done["type"], "exited", "{done}");
    assert_eq!(done["status"], serde_json::json!({"code": 0}), "{done}");
    let out = rea::b64::decode(done["stdout"]["data_b64"].as_str().unwrap()).unwrap();
    assert_eq!(out, format!("{text}\n").into_bytes());
    drop(r);

    // One byte more: oversize, never parsed, so never answered either
    // (the name would be refused too, but the size is checked first).
    let mut r = b.reply();
    let base = touch("big", &r.name, &m).set("name", &js(""));
    let pad = 4097 - base.line().len();
    let over = base.set("name", &js(&"n".repeat(pad))).line();
    assert_eq!(over.len(), 4097);
    b.refuse(&over, None, "oversize");
    assert!(r.pending().is_empty(), "an oversize line was answered");
    drop(r);

    // A line far larger than the pipe buffer: refused once, skipped to its
    // newline, and the request right behind it (same write) is served.
    let mut r = b.reply();
    let huge = touch("huge", "nobody", &m)
        .set("name", &js(&"h".repeat(200_000)))
        .line();
    let next = Req::spawn(
        "after-huge",
        &r.name,
        &[python(), &launcher, "--print", "after"],
    );
    let mut stream = huge.clone();
    stream.extend_from_slice(&next.valid_line());
    let before = b.refusals().len();
    send_all(b.dir(), &stream);
    b.jobs += 1;
    let acc = r.expect();
    assert_eq!(acc["type"], "accepted", "{acc}");
    assert_eq!(r.expect()["type"], "exited");
    let recs = b.refusals();
    assert_eq!(recs.len(), before + 1, "{recs:#?}");
    assert_eq!(recs[before].reason, RefusalReason::Oversize);
    drop(r);
    b.still_serves();
    b.finish();
}

#[test]
fn unknown_fields_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("unknown");
    b.refuse_answered("unknown_field", |r| touch("f1", r, &m).add("x", "1"));
    b.refuse_answered("unknown_field", |r| {
        touch("f2", r, &m).add("environ", r#"{"A":"1"}"#)
    });
    // Inside the caller object too.
    b.refuse_answered("unknown_field", |r| {
        let c = me().replace('}', r#","gid":0}"#);
        touch("f3", r, &m).set("caller", &c)
    });
    b.finish();
}

#[test]
fn duplicate_keys_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("dup");
    // The duplicate is the one that would launch: a last-wins parser would
    // touch the marker.
    b.refuse_answered("duplicate_key", |r| {
        Req::spawn("d1", r, &["/bin/true"]).add("argv", &js_array(&[TOUCH, &m]))
    });
    b.refuse_answered("duplicate_key", |r| {
        touch("d2", r, &m).add("deadline_ms", "5")
    });
    // Inside the caller object.
    b.refuse_answered("duplicate_key", |r| {
        let c = me().replace("{\"pid\"", "{\"pid\":1,\"pid\"");
        touch("d3", r, &m).set("caller", &c)
    });
    // A duplicate id or reply leaves nothing to address: recorded only.
    let line = touch("d4", "nobody", &m).add("id", &js("d5")).line();
    b.refuse(&line, None, "duplicate_key");
    b.finish();
}

#[test]
fn bad_version_and_op_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("vop");
    for v in ["2", "0", "\"1\"", "null", "1.0"] {
        b.refuse_answered("bad_version", |r| touch("v1", r, &m).set("v", v));
    }
    for op in ["\"run\"", "\"SPAWN\"", "5", "null"] {
        b.refuse_answered("bad_op", |r| touch("o1", r, &m).set("op", op));
    }
    b.finish();
}

#[test]
fn bad_ids_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("id");
    let long = js(&"i".repeat(65));
    for id in [
        "\"a b\"",
        "\"\"",
        "\"a/b\"",
        long.as_str(),
        "5",
        "null",
        "\"é\"",
    ] {
        // The reply FIFO is valid, so even a bad id is answered (id null).
        let rec = b.refuse_answered("bad_id", |r| touch("x", r, &m).set("id", id));
        assert!(rec.id.is_none(), "{rec:?}");
    }
    b.finish();
}

#[test]
fn bad_argv_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("argv");
    let many: Vec<&str> = std::iter::once(TOUCH)
        .chain(std::iter::repeat_n("", 1024))
        .collect();
    let cases = [
        "[]".to_string(),
        js(TOUCH),
        "[1]".to_string(),
        format!("[{},null]", js(TOUCH)),
        format!("[{},{}]", js(TOUCH), js(&format!("{m}\u{0}x"))),
        js_array(&many),
        "null".to_string(),
        "{}".to_string(),
        format!(r#"[{},"{m}\ud800"]"#, js(TOUCH)),
    ];
    for argv in &cases {
        b.refuse_answered("bad_argv", |r| touch("a1", r, &m).set("argv", argv));
    }
    b.refuse_answered("bad_argv", |r| touch("a2", r, &m).remove("argv"));
    b.finish();
}

#[test]
fn relative_argv0_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("rel");
    for argv0 in [
        "touch",
        "./touch",
        "usr/bin/touch",
        "../../usr/bin/touch",
        "",
    ] {
        b.refuse_answered("relative_argv0", |r| {
            touch("r1", r, &m).set("argv", &js_array(&[argv0, &m]))
        });
    }
    b.finish();
}

#[test]
fn bad_deadlines_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("deadline");
    for d in [
        "0",
        "1.5",
        "1000.0",
        "1e3",
        "-4",
        "-0",
        "null",
        "\"1000\"",
        "18446744073709551616",
        "[1000]",
    ] {
        b.refuse_answered("bad_deadline", |r| touch("t1", r, &m).set("deadline_ms", d));
    }
    b.refuse_answered("bad_deadline", |r| touch("t2", r, &m).remove("deadline_ms"));
    b.finish();
}

#[test]
fn bad_capture_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("capture");
    for c in [
        "\"keep\"",
        "\"CAPTURE\"",
        "null",
        "true",
        "1",
        "[\"capture\"]",
    ] {
        b.refuse_answered("bad_capture", |r| touch("c1", r, &m).set("capture", c));
    }
    b.refuse_answered("bad_capture", |r| touch("c2", r, &m).remove("capture"));
    b.finish();
}

#[test]
fn bad_names_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("name");
    let long = js(&"n".repeat(65));
    // (a lone surrogate escape is no string at all)
    for n in [
        "\"a/b\"",
        "\"\"",
        long.as_str(),
        "null",
        "5",
        "\"in stall\"",
        r#""a\ud800""#,
    ] {
        b.refuse_answered("bad_name", |r| touch("n1", r, &m).set("name", n));
    }
    b.finish();
}

#[test]
fn bad_caller_shapes_are_refused() {
    let mut b = Bench::new();
    let m = b.marker("callershape");
    let st = rea::process::identity::self_start_time().unwrap();
    let me_pid = std::process::id();
    for c in [
        format!(r#"{{"pid":"{me_pid}","start_time":{st},"uid":0}}"#),
        format!(r#"{{"pid":0,"start_time":{st},"uid":0}}"#),
        format!(r#"{{"pid":-1,"start_time":{st},"uid":0}}"#),
        format!(r#"{{"pid":{me_pid},"uid":0}}"#),
        format!(r#"{{"pid":{me_pid},"start_time":-1,"uid":0}}"#),
        format!(r#"{{"pid":{me_pid},"start_time":{st},"uid":-1}}"#),
        "\"me\"".to_string(),
        "null".to_string(),
    ] {
        b.refuse_answered("bad_caller", |r| touch("b1", r, &m).set("caller", &c));
    }
    b.finish();
}

// ----- the reply FIFO ---------------------------------------------------------

#[test]
fn bad_reply_fifos_are_refused_and_never_written() {
    let mut b = Bench::new();
    let m = b.marker("reply");
    let replies = b.dir().join("replies");

    // Names that are paths: refused before anything is opened.
    for name in ["a/b", "../requests", "..", ".", "", "/tmp/x"] {
        let rec = b.refuse(&touch("p1", name, &m).line(), None, "bad_reply");
        assert_eq!(rec.id.as_deref(), Some("p1"), "{rec:?}");
    }

    // A symlink in replies/ to a FIFO (with a reader) elsewhere.
    let target = b.w.scratch.path("elsewhere.fifo");
    let mut target_r = fifo_with_reader(&target, 0o600);
    std::os::unix::fs::symlink(&target, replies.join("link")).unwrap();
    b.refuse(&touch("s1", "link", &m).line(), None, "bad_reply");
    assert!(
        read_now(&mut target_r).is_empty(),
        "written through a symlink"
    );

    // A regular file.
    std::fs::write(replies.join("file"), b"").unwrap();
    std::fs::set_permissions(
        replies.join("file"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    b.refuse(&touch("s2", "file", &m).line(), None, "bad_reply");
    assert_eq!(std::fs::read(replies.join("file")).unwrap(), b"");

    // A directory.
    std::fs::create_dir(replies.join("dir")).unwrap();
    b.refuse(&touch("s3", "dir", &m).line(), None, "bad_reply");

    // A FIFO owned by another uid.
    let mut foreign = fifo_with_reader(&replies.join("foreign"), 0o600);
    nix::unistd::chown(
        &replies.join("foreign"),
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    )
    .unwrap();
    let rec = b.refuse(&touch("s4", "foreign", &m).line(), None, "bad_reply");
    assert!(rec.detail.contains("65534"), "{rec:?}");
    assert!(read_now(&mut foreign).is_empty());

    // Wrong modes.
    for (i, mode) in [0o644, 0o660, 0o606, 0o700, 0o400].into_iter().enumerate() {
        let name = format!("mode{i}");
        let mut f = fifo_with_reader(&replies.join(&name), mode);
        b.refuse(&touch("s5", &name, &m).line(), None, "bad_reply");
        assert!(read_now(&mut f).is_empty(), "written to a {mode:o} FIFO");
    }

    // A FIFO nobody reads.
    let lonely = replies.join("lonely");
    nix::unistd::mkfifo(&lonely, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::set_permissions(&lonely, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let rec = b.refuse(&touch("s6", "lonely", &m).line(), None, "bad_reply");
    assert!(rec.detail.contains("reading"), "{rec:?}");

    // A reply FIFO that does not exist.
    b.refuse(&touch("s7", "missing", &m).line(), None, "bad_reply");
    b.finish();
}

/// Whatever a non-blocking read end holds right now.
fn read_now(f: &mut File) -> Vec<u8> {
    let mut v = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = f.read(&mut chunk) {
        if n == 0 {
            break;
        }
        v.extend_from_slice(&chunk[..n]);
    }
    v
}

// ----- who asks ---------------------------------------------------------------

#[test]
fn a_dead_caller_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("dead");
    // A child that exited but is not reaped yet (a zombie) is not alive.
    let mut child = Command::new("/bin/true").spawn().unwrap();
    let fd = rea::process::pidfd::bind_unwaited_child(&child).unwrap();
    let st = fd.proc().start_time;
    assert!(wait_readable(&fd, PATIENCE));
    let zombie = caller(child.id() as i32, st, 0);
    b.refuse_answered("caller_not_alive", |r| {
        touch("z1", r, &m).set("caller", &zombie)
    });
    // Reaped: the pid names nothing now.
    child.wait().unwrap();
    b.refuse_answered("caller_not_alive", |r| {
        touch("z2", r, &m).set("caller", &zombie)
    });
    // A pid beyond pid_max.
    let never = caller(i32::MAX, st, 0);
    b.refuse_answered("caller_not_alive", |r| {
        touch("z3", r, &m).set("caller", &never)
    });
    // A dead caller cannot stop or close the action either.
    b.refuse_answered("caller_not_alive", |r| {
        Req::op("stop", "z4", r).set("caller", &zombie)
    });
    b.refuse_answered("caller_not_alive", |r| {
        Req::op("close", "z5", r).set("caller", &zombie)
    });
    assert!(of_kind(&b.w.records(), "stop_triggered").is_empty());
    b.finish();
}

/// A child running as uid 65534 (told apart from root by its uid only).
struct Nobody {
    child: std::process::Child,
}

impl Nobody {
    fn start() -> Nobody {
        let mut child = Command::new("/usr/bin/setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(["/bin/sh", "-c", "echo ready; exec /bin/sleep 3600"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv");
        // The uid switch happened before `ready` was printed.
        let mut out = child.stdout.take().unwrap();
        assert!(wait_readable(&out.as_fd(), PATIENCE));
        let mut buf = [0u8; 6];
        out.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ready\n");
        Nobody { child }
    }
}

impl Drop for Nobody {
    fn drop(&mut self) {
        signal_child(&self.child, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

#[test]
fn a_caller_who_is_not_who_it_claims_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("mismatch");
    let pid = std::process::id() as i32;
    let st = rea::process::identity::self_start_time().unwrap();
    // Our own pid with another start time (a reused pid).
    let c = caller(pid, st + 1, 0);
    b.refuse_answered("caller_mismatch", |r| touch("k1", r, &m).set("caller", &c));
    let c = caller(pid, st.saturating_sub(1), 0);
    b.refuse_answered("caller_mismatch", |r| touch("k2", r, &m).set("caller", &c));
    // Our own pid claiming another uid (not the watchdog's).
    let c = caller(pid, st, 65534);
    b.refuse_answered("caller_mismatch", |r| touch("k3", r, &m).set("caller", &c));
    // A real process of uid 65534, claimed as uid 0 (its start time is right).
    let nobody = Nobody::start();
    let npid = nobody.child.id() as i32;
    let nst = rea::process::identity::read_stat(npid).unwrap().start_time;
    let c = caller(npid, nst, 0);
    b.refuse_answered("caller_mismatch", |r| touch("k4", r, &m).set("caller", &c));
    // ... and claimed as what it is.
    let c = caller(npid, nst, 65534);
    b.refuse_answered("caller_mismatch", |r| touch("k5", r, &m).set("caller", &c));
    drop(nobody);
    b.finish();
}

#[test]
fn a_caller_outside_the_tree_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("notowned");
    // The process at the top of this PID namespace (or the system's init):
    // alive, right start time and uid, descendant of neither.
    let init = rea::process::identity::read_stat(1).unwrap();
    let uid = rea::process::identity::read_uids(1).unwrap().real;
    if uid == 0 {
        let c = caller(1, init.start_time, 0);
        b.refuse_answered("caller_not_owned", |r| touch("w1", r, &m).set("caller", &c));
        // Nor may it stop the action.
        b.refuse_answered("caller_not_owned", |r| {
            Req::op("stop", "w2", r).set("caller", &c)
        });
        assert!(of_kind(&b.w.records(), "stop_triggered").is_empty());
    }
    b.finish();
}

/// Reads a pipe to EOF, at most `limit`.
fn read_to_eof(fd: OwnedFd, limit: Duration) -> Vec<u8> {
    let mut f = File::from(fd);
    let until = std::time::Instant::now() + limit;
    let mut v = Vec::new();
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        assert!(wait_readable(&f, left), "no EOF within {limit:?}");
        let mut chunk = [0u8; 4096];
        match f.read(&mut chunk).unwrap() {
            0 => return v,
            n => v.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn a_double_forked_submit_is_not_owned() {
    require_pid_ns!("a_double_forked_submit_is_not_owned");
    let mut b = Bench::new();
    let m = b.marker("orphan");
    let err = b.w.scratch.path("orphan.err");
    let code = b.w.scratch.path("orphan.code");
    // sh starts a subshell in the background and exits; the subshell (an
    // orphan, now a child of the namespace's init) waits at a gate on its
    // stdin, then runs `rea-watchdog submit` as a non-descendant.
    let (gate_r, gate_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
    let (done_r, done_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
    let script = r#"( read _; "$0" submit --state-dir "$1" -- /usr/bin/touch "$2" 2>"$3"; echo $? >"$4" ) &"#;
    let mut sh = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg(watchdog_bin())
        .arg(&b.w.state_dir)
        .arg(&m)
        .arg(&err)
        .arg(&code)
        .stdin(Stdio::from(gate_r))
        .stdout(Stdio::from(done_w))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Once sh is reaped, the subshell has been reparented away from us.
    assert!(wait_child(&mut sh, PATIENCE).success());
    drop(gate_w);
    read_to_eof(done_r, PATIENCE);
    let code = std::fs::read_to_string(&code).unwrap();
    let err = std::fs::read_to_string(&err).unwrap();
    assert_eq!(code.trim(), "125", "{err}");
    assert!(err.contains("caller_not_owned"), "{err}");
    b.still_serves();
    let recs = b.refusals();
    assert_eq!(recs.len(), 1, "{recs:#?}");
    assert_eq!(recs[0].reason, RefusalReason::CallerNotOwned);
    assert!(!Path::new(&m).exists());
    b.nothing_launched();
    b.finish();
}

// ----- the action's state -----------------------------------------------------

#[test]
fn a_reused_id_is_refused() {
    let mut b = Bench::new();
    let m = b.marker("dupid");
    let mut r = b.reply();
    let first = Req::spawn(
        "same",
        &r.name,
        &[python(), &fixture("launcher.py"), "--print", "first"],
    );
    send(b.dir(), &first.valid_line());
    b.jobs += 1;
    assert_eq!(r.expect()["type"], "accepted");
    assert_eq!(r.expect()["type"], "exited");
    drop(r);
    b.refuse_answered("duplicate_id", |r| touch("same", r, &m));
    // A stop or close under a used id does nothing at all.
    b.refuse_answered("duplicate_id", |r| Req::op("stop", "same", r));
    b.refuse_answered("duplicate_id", |r| Req::op("close", "same", r));
    assert!(of_kind(&b.w.records(), "stop_triggered").is_empty());
    b.finish();
}

#[test]
fn after_a_stop_spawns_are_aborted() {
    let mut b = Bench::new();
    let m = b.marker("aborted");
    let stop = b.w.stop();
    assert_eq!(stop.status.code(), Some(0), "{stop:?}");
    let mut r = b.reply();
    send(b.dir(), &touch("late", &r.name, &m).valid_line());
    let v = r.expect();
    assert_eq!(v["type"], "refused");
    assert_eq!(v["reason"], "aborted", "{v}");
    drop(r);
    let out = b.w.submit(&[], &[TOUCH, &m]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("aborted"),
        "{out:?}"
    );
    let reasons: Vec<RefusalReason> = b.refusals().iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        vec![RefusalReason::Aborted, RefusalReason::Aborted]
    );
    b.nothing_launched();
    let v = b.finish();
    assert_eq!(v["stop_reason"], "stop_requested");
}

#[test]
fn while_closing_requests_are_refused_closed() {
    // A job that ignores SIGTERM and waits at a gate keeps the close in its
    // TERM grace for as long as the test wants: the race is deterministic.
    let mut b = Bench::with(&["--term-grace", "600s"]);
    let m = b.marker("closed");
    let mut gate = Gate::new();
    let mut oracle = Oracle::new(&b.w.scratch, "oracle");
    let script = "import os, signal, sys\n\
                  signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
                  g = os.open(sys.argv[1], os.O_RDONLY)\n\
                  o = os.open(sys.argv[2], os.O_WRONLY)\n\
                  os.write(o, b'{\"ready\": true, \"count\": 0}\\n')\n\
                  os.close(o)\n\
                  os.read(g, 1)\n";
    let job = b.w.submit_bg(
        &["--name", "slow", "--deadline", "600s"],
        &[python(), "-c", script, &gate.path, oracle.arg()],
    );
    b.jobs += 1;
    oracle.wait_ready(PATIENCE);
    let close =
        b.w.client("close", &["--wait", "600s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    wait_for_log(&b.w.audit_log, "close_while_running", |log| {
        all!(log, Event::StopTriggered)
            .iter()
            .any(|t| t.reason == StopReason::CloseWhileRunning)
    });
    let mut r = b.reply();
    send(b.dir(), &touch("during", &r.name, &m).valid_line());
    let v = r.expect();
    assert_eq!(v["type"], "refused");
    assert_eq!(v["reason"], "closed", "{v}");
    drop(r);
    let out = b.w.submit(&[], &[TOUCH, &m]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("closed"),
        "{out:?}"
    );
    // Still in the grace: the gate holds the job.
    let recs = b.w.records();
    assert!(of_kind(&recs, "stop_completed").is_empty(), "{recs:#?}");
    gate.open();
    let job = output_within(job, PATIENCE);
    assert_eq!(job.status.code(), Some(124), "{job:?}");
    let close = output_within(close, PATIENCE);
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(b.w.wait(PATIENCE).success());
    let reasons: Vec<RefusalReason> = b.refusals().iter().map(|r| r.reason).collect();
    assert_eq!(reasons, vec![RefusalReason::Closed, RefusalReason::Closed]);
    b.nothing_launched();
    let (code, v) = b.w.verify(&["--staging", b.w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "close_while_running");
    b.sibling.assert_alive();
}

#[test]
fn a_spawn_in_the_same_write_as_close_is_refused_closed() {
    // Both lines in one write: the watchdog reads them in one go, the close
    // first, so the spawn always meets a closing action.
    let mut b = Bench::new();
    let m = b.marker("samewrite");
    let mut oracle = Oracle::new(&b.w.scratch, "oracle");
    let script = "import os, sys, time\n\
                  o = os.open(sys.argv[1], os.O_WRONLY)\n\
                  os.write(o, b'{\"ready\": true, \"count\": 0}\\n')\n\
                  os.close(o)\n\
                  time.sleep(3600)\n";
    let job = b.w.submit_bg(
        &["--name", "long", "--deadline", "600s"],
        &[python(), "-c", script, oracle.arg()],
    );
    b.jobs += 1;
    oracle.wait_ready(PATIENCE);
    let mut rc = b.reply();
    let mut rs = b.reply();
    let mut both = Req::op("close", "c", &rc.name).valid_line();
    both.extend_from_slice(&touch("s", &rs.name, &m).valid_line());
    send(b.dir(), &both);
    let v = rs.expect();
    assert_eq!(v["reason"], "closed", "{v}");
    let c = rc.expect();
    assert_eq!(c["type"], "closed", "{c}");
    assert_eq!(c["positive"], true, "{c}");
    assert_eq!(c["stop_reason"], "close_while_running", "{c}");
    assert_eq!(output_within(job, PATIENCE).status.code(), Some(124));
    assert!(b.w.wait(PATIENCE).success());
    b.nothing_launched();
    let (code, v) = b.w.verify(&["--staging", b.w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    b.sibling.assert_alive();
}

// ----- programs that cannot run ---------------------------------------------

/// A spawn the watchdog accepts but exec refuses: `submit` exits like
/// timeout(1) (127 not found, 126 cannot execute); the reply is refused
/// with the reason, a `job_failed` record holds it, nothing runs.
fn exec_fails(b: &mut Bench, argv0: &str, exit: i32, reason: &str) {
    let m = b.marker("exec");
    let before = of_kind(&b.w.records(), "job_failed").len();
    let out = b.w.submit(&[], &[argv0, &m]);
    assert_eq!(out.status.code(), Some(exit), "{argv0}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(reason), "{argv0}: {err}");
    let log = b.w.log();
    let failed = all!(log, Event::JobFailed);
    assert_eq!(failed.len(), before + 1, "{log:#?}");
    assert_eq!(failed[before].reason, refusal(reason));
    assert_eq!(failed[before].argv.first().map(String::as_str), Some(argv0));
    assert!(all!(log, Event::JobSpawned)
        .iter()
        .all(|r| !r.argv.iter().any(|a| a.contains("marker-"))));
    assert!(!Path::new(&m).exists());
}

#[test]
fn not_found_and_not_executable_exit_127_and_126() {
    let mut b = Bench::new();
    let scratch = b.w.scratch.dir.path().to_path_buf();
    exec_fails(&mut b, "/nonexistent/program", 127, "not_found");
    exec_fails(
        &mut b,
        &format!("{}/missing", scratch.display()),
        127,
        "not_found",
    );
    // A file without any execute bit.
    let plain: PathBuf = scratch.join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\ntouch \"$1\"\n").unwrap();
    std::fs::set_permissions(&plain, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    exec_fails(&mut b, plain.to_str().unwrap(), 126, "not_executable");
    // Executable bits but no format exec knows: execve says ENOEXEC, and
    // no shell may step in (execvp would run it with /bin/sh).
    let junk = scratch.join("junk.bin");
    std::fs::write(&junk, b"\x00\x01\x02 this is not a program\n").unwrap();
    std::fs::set_permissions(&junk, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    exec_fails(&mut b, junk.to_str().unwrap(), 126, "not_executable");
    // A script without `#!` that a shell would run: it would touch the marker.
    let script = scratch.join("noshebang");
    std::fs::write(&script, "touch \"$1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    exec_fails(&mut b, script.to_str().unwrap(), 126, "not_executable");
    // A directory.
    exec_fails(&mut b, scratch.to_str().unwrap(), 126, "not_executable");
    b.still_serves();
    // job_failed is not a spawned job: the bench's own check would trip on
    // it, so check the receipt directly.
    let close = b.w.close();
    assert_eq!(close.status.code(), Some(0), "{close:?}");
    assert!(b.w.wait(PATIENCE).success());
    let (code, v) = b.w.verify(&["--staging", b.w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    b.sibling.assert_alive();
}
