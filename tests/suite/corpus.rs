//! Issue 10, the bad-request corpus: every hostile request of
//! `tests/data/bad_requests.jsonl` (one a line; its first line documents
//! the fields and placeholders) sent into one long-running real watchdog.
//!
//! For each case, in order:
//! - the request is sent (framed RS … LF unless the case is about framing),
//!   then a well-formed probe (`spawn /bin/true`, id `good-N`) from the root,
//!   which must be accepted and exit 0: the watchdog still serves;
//! - the log's records between the previous probe and this one are exactly
//!   the case's refusal: `request_received` + `request_refused` with the
//!   expected reason when the case has a usable reply FIFO (and its one
//!   reply is `refused` with that reason), or one `requests_refused` record
//!   counting one refusal of that reason when it has none (the probe's
//!   `request_received` closes the burst);
//! - nothing was launched: no `job_spawned` names anything but a probe, and
//!   the marker file the hostile argv would create does not exist.
//!
//! The watchdog is closed at the end with a positive receipt whose counts
//! include every refusal.

use crate::common;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::harness::*;
use common::raw::*;
use common::typed::all;
use rea::kinds::watchdog::{Event, Outcome};
use rea::log::Kind as _;
use rea::process::identity::{read_stat, self_start_time};
use rea::process::pidfd::bind_unwaited_child;
use rea::protocol::RefusalReason;
use serde_json::Value;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/bad_requests.jsonl");

/// One line of the corpus.
struct Case {
    name: String,
    expect: String,
    quiet: bool,
    raw: bool,
    setup: String,
    fill: usize,
    send: String,
}

fn load() -> Vec<Case> {
    let text = std::fs::read_to_string(CORPUS).expect("read the corpus");
    let mut cases = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("corpus line {}: {e}", n + 1));
        let s = |k: &str| v[k].as_str().map(str::to_string);
        cases.push(Case {
            name: s("case").expect("case"),
            expect: s("expect").expect("expect"),
            quiet: v["quiet"].as_bool().unwrap_or(false),
            raw: s("frame").as_deref() == Some("raw"),
            setup: s("setup").unwrap_or_else(|| "fifo".into()),
            fill: v["fill"].as_u64().unwrap_or(0) as usize,
            send: s("send").expect("send"),
        });
    }
    cases
}

/// Identities the placeholders stand for.
struct Ids {
    me: String,
    parent: String,
    dead: String,
    zombie: String,
    /// The zombie itself, reaped when the test ends.
    zombie_child: Child,
}

impl Ids {
    fn new() -> Ids {
        let ppid = nix::unistd::getppid().as_raw();
        let pst = read_stat(ppid).expect("stat of the test's parent");
        let dead = common::reuse::dead_process();
        let z = Command::new("/bin/true")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn /bin/true");
        let zfd = bind_unwaited_child(&z).expect("bind own child");
        assert!(wait_readable(&zfd, PATIENCE), "/bin/true did not exit");
        let zst = read_stat(z.id() as i32).expect("a zombie's stat is readable");
        assert_eq!(zst.state, b'Z', "an exited, unreaped child is a zombie");
        Ids {
            me: me(),
            parent: caller(ppid, pst.start_time, uid()),
            dead: caller(dead.pid, dead.start_time, uid()),
            zombie: caller(zst.pid, zst.start_time, uid()),
            zombie_child: z,
        }
    }
}

impl Drop for Ids {
    fn drop(&mut self) {
        let _ = self.zombie_child.wait();
    }
}

/// The case's bytes, placeholders filled in.
fn bytes_of(case: &Case, ids: &Ids, r: &str, marker: &str, used: &str) -> Vec<u8> {
    let start = self_start_time().unwrap();
    let many: String = ",\"\"".repeat(1023);
    let deep = format!("{}{}", "[".repeat(1800), "]".repeat(1800));
    let argv = js_array(&["/usr/bin/touch", marker]);
    // Longest names first: $RS before $R, $BADSTART before $START, ...
    let subs: Vec<(&str, String)> = vec![
        ("$RS", "\u{1e}".into()),
        ("$LF", "\n".into()),
        ("$R", r.into()),
        ("$USEDID", used.into()),
        ("$ID", r.into()),
        ("$MARKER", marker.into()),
        ("$MANY", many),
        ("$ME", ids.me.clone()),
        ("$ARGV", argv),
        ("$BADSTART", (start + 1).to_string()),
        ("$START", start.to_string()),
        ("$BADUID", (uid() + 1).to_string()),
        ("$UID", uid().to_string()),
        ("$PID", std::process::id().to_string()),
        ("$PARENT", ids.parent.clone()),
        ("$DEAD", ids.dead.clone()),
        ("$DEEP", deep),
        ("$ZOMBIE", ids.zombie.clone()),
        ("$FILL", "x".repeat(case.fill)),
    ];
    let mut s = case.send.clone();
    for (k, v) in &subs {
        s = s.replace(k, v);
    }
    // $Xhh: one raw byte (invalid UTF-8 included).
    let src = s.as_bytes();
    let mut out = Vec::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        if src[i..].starts_with(b"$X") && i + 4 <= src.len() {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(&src[i + 2..i + 4]).unwrap(), 16)
            {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(src[i]);
        i += 1;
    }
    assert!(
        !out.windows(2)
            .any(|w| w[0] == b'$' && w[1].is_ascii_uppercase()),
        "{}: a placeholder left unfilled: {}",
        case.name,
        String::from_utf8_lossy(&out)
    );
    if case.raw {
        out
    } else {
        framed(&out)
    }
}

/// What `replies/NAME` is for a case; returns a read end to keep open.
fn prepare_reply(w: &Watchdog, setup: &str, name: &str) -> Option<File> {
    let path = w.state_dir.join("replies").join(name);
    match setup {
        "fifo" => Some(fifo_with_reader(&path, 0o600)),
        "none" => None,
        "mode644" => Some(fifo_with_reader(&path, 0o644)),
        "mode660" => Some(fifo_with_reader(&path, 0o660)),
        "noreader" => {
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            None
        }
        "regular" => {
            std::fs::write(&path, b"").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            None
        }
        "dir" => {
            std::fs::create_dir(&path).unwrap();
            None
        }
        "symlink" => {
            // A valid FIFO elsewhere, with a reader, behind a symlink.
            let target = w.scratch.path(&format!("elsewhere-{name}"));
            let f = fifo_with_reader(&target, 0o600);
            std::os::unix::fs::symlink(&target, &path).unwrap();
            Some(f)
        }
        other => panic!("unknown setup {other}"),
    }
}

/// Reads every byte that reached a reply FIFO so far (non-blocking).
fn drain(f: &mut File) -> Vec<u8> {
    use std::io::Read;
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = f.read(&mut buf) {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    all
}

/// The root's good request: accepted, then exited 0.
fn probe(dir: &Path, n: usize) -> String {
    let id = format!("good-{n}");
    let req = Req::spawn(&id, &id, &["/bin/true"])
        .set("capture", &js("discard"))
        .set("deadline_ms", "30000");
    let replies = exchange(dir, &req);
    let types: Vec<&str> = replies
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["accepted", "exited"], "probe {id}: {replies:?}");
    assert_eq!(replies[1]["status"]["code"], 0, "{replies:?}");
    id
}

fn position_of_received(recs: &[Event], id: &str) -> usize {
    recs.iter()
        .position(|e| matches!(e, Event::RequestReceived(r) if r.id.as_deref() == Some(id)))
        .unwrap_or_else(|| panic!("no request_received for {id}"))
}

#[test]
fn every_hostile_request_is_refused_with_its_exact_reason() {
    let cases = load();
    assert!(cases.len() >= 60, "the corpus has {} cases", cases.len());
    let mut seen = std::collections::HashSet::new();
    for c in &cases {
        assert!(seen.insert(c.name.clone()), "case {} twice", c.name);
    }

    let ids = Ids::new();
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let dir = w.state_dir.clone();
    let used = probe(&dir, 0);
    let mut probes = vec![used.clone()];
    let mut failures = Vec::new();

    for (i, case) in cases.iter().enumerate() {
        let r = format!("c{i}");
        let marker = w.scratch.path(&format!("marker-{i}"));
        let marker = marker.to_str().unwrap().to_string();
        let mut reader = prepare_reply(&w, &case.setup, &r);
        let bytes = bytes_of(case, &ids, &r, &marker, &used);
        let before = w.log().len();
        if bytes.len() > 4096 {
            send_all(&dir, &bytes);
        } else {
            send(&dir, &bytes);
        }
        let good = probe(&dir, i + 1);
        probes.push(good.clone());

        let recs: Vec<Event> = w.log().recs.into_iter().map(|r| r.event).collect();
        let after = &recs[before..];
        let end = position_of_received(after, &good);
        let mine = &after[..end];
        let got_kinds: Vec<&str> = mine.iter().map(|e| e.kind()).collect();
        // The expected reason as records spell it (a name no reason has
        // matches nothing).
        let expect: Option<RefusalReason> =
            serde_json::from_value(Value::from(case.expect.as_str())).ok();
        let mut problems = Vec::new();
        if case.quiet {
            let ok = matches!(mine, [Event::RequestsRefused(b)]
                if b.count == 1
                    && expect.is_some_and(|want| b.reasons.len() == 1 && b.reasons.get(&want) == Some(&1)));
            if !ok {
                problems.push(format!("records {:?}", mine));
            }
            if let Some(f) = reader.as_mut() {
                let got = drain(f);
                if !got.is_empty() {
                    problems.push(format!(
                        "a quiet refusal wrote a reply: {:?}",
                        String::from_utf8_lossy(&got)
                    ));
                }
            }
        } else {
            let ok = got_kinds == ["request_received", "request_refused"]
                && matches!(&mine[1], Event::RequestRefused(r) if Some(r.reason) == expect);
            if !ok {
                problems.push(format!("records {:?}", mine));
            }
            match reader.as_mut() {
                Some(f) => {
                    let got = drain(f);
                    let lines: Vec<Value> = got
                        .split(|&b| b == b'\n')
                        .filter(|l| !l.is_empty())
                        .map(|l| serde_json::from_slice(l).expect("reply is JSON"))
                        .collect();
                    for l in &lines {
                        common::schema::assert_reply_matches_schema(&l.to_string());
                    }
                    let ok = lines.len() == 1
                        && lines[0]["type"] == "refused"
                        && lines[0]["reason"] == case.expect.as_str();
                    if !ok {
                        problems.push(format!("replies {lines:?}"));
                    }
                }
                None => problems.push("an answered case needs setup fifo".into()),
            }
        }
        if mine.iter().any(|e| matches!(e, Event::JobSpawned(_))) || Path::new(&marker).exists() {
            problems.push("something was launched".into());
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{} (expected {}{}): {}",
                case.name,
                if case.quiet { "quiet " } else { "" },
                case.expect,
                problems.join("; ")
            ));
        }
        drop(reader);
        let p = w.state_dir.join("replies").join(&r);
        if p.is_dir() {
            let _ = std::fs::remove_dir(&p);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }

    // Nothing but the probes was ever launched.
    let spawned: Vec<String> = all!(w.log(), Event::JobSpawned)
        .iter()
        .map(|j| j.id.clone())
        .collect();
    assert_eq!(spawned, probes, "only the probes were launched");

    let out = w.close();
    assert!(out.status.success(), "close: {out:?}");
    let status = w.wait(PATIENCE);
    assert!(status.success(), "the watchdog's exit: {status:?}");
    let log = w.log();
    let rc = log.receipt();
    assert_eq!(rc.outcome, Outcome::Closed, "{rc:#?}");
    assert!(rc.quiescent, "{rc:#?}");
    assert_eq!(rc.counts.jobs, probes.len() as u64, "{rc:#?}");
    // Every case is a refusal counted by the receipt (plus none other).
    assert_eq!(rc.counts.refused, cases.len() as u64, "{rc:#?}");
    sibling.assert_alive();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
