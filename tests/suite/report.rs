//! `rea-audit report` (docs/review.md, issue 13): one self-contained HTML page of
//! a real run, rendered in headless Chromium. The page is served from a
//! server in the test that is also Chromium's proxy for every URL
//! (loopback included), so any request the page made, relative or to
//! another host, would be seen there: each render must ask for exactly the
//! report and nothing else. A control page proves the setup sees a load.
//!
//! Chromium is required: where it is missing these tests fail (never
//! skip); `.ci/run` installs it.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::harness::*;
use common::typed::{all, first, Log};
use rea::kinds::watchdog::Event;

/// How Chromium is run: headless, as root (no sandbox), a fresh profile
/// each time, and every background service that would talk to a network
/// on its own turned off, so that what the server sees is the page's.
/// The last three were measured here (Chromium 156): without them the
/// browser itself asks the proxy for update.googleapis.com (the component
/// updater, which ignores --disable-component-update; an http update URL
/// stops it), accounts.google.com (sign-in; an http GAIA URL stops it)
/// and clients2.google.com (network time).
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--component-updater=url-source=http://127.0.0.1:1/",
    "--gaia-url=http://127.0.0.1:1/",
    // Chromium 148 (Debian 12's, on another machine of this CI) preconnects
    // to the default search engine at start-up
    // (`CONNECT www.google.com:443` at the proxy, before and after the
    // page's load): both the features and the search engine's base URL
    // must go, or one CONNECT is left. Only one --disable-features counts
    // (the last), so every feature is in this one.
    "--google-base-url=http://127.0.0.1:1/",
    "--disable-features=NetworkTimeServiceQuerying,SafeBrowsingHashPrefixRealTimeLookups,\
     PreconnectToSearch,PreconnectToSearchDesktop",
];

/// Chromium on PATH, or the test fails saying how to get it.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "headless Chromium is not installed (no `chromium` on PATH): the report tests render \
         the page in it and never skip. .ci/run installs it (apt-get install -y chromium)"
    );
}

/// An HTTP server on 127.0.0.1 that serves `page` as /report.html, 404
/// for anything else, and records every request line it receives
/// (connections that send none, Chromium's spare sockets, are not
/// requests). It stops by itself after two minutes at most.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn handle(mut s: TcpStream, page: &[u8], port: u16, seen: &Mutex<Vec<String>>) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or(&[]))
        .trim()
        .to_string();
    if line.is_empty() {
        return;
    }
    seen.lock().unwrap().push(line.clone());
    let target = line.split(' ').nth(1).unwrap_or("");
    let ours = [
        "/report.html".to_string(),
        format!("http://127.0.0.1:{port}/report.html"),
    ];
    let reply = if line.starts_with("GET ") && ours.iter().any(|o| o == target) {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            page.len()
        )
        .into_bytes();
        r.extend_from_slice(page);
        r
    } else {
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
    };
    let _ = s.write_all(&reply);
}

impl Server {
    fn serve(page: Vec<u8>) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let page = Arc::new(page);
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(120);
            let mut handlers = Vec::new();
            while !stop2.load(Ordering::SeqCst) && Instant::now() < until {
                match l.accept() {
                    Ok((s, _)) if handlers.len() < 64 => {
                        let (page, seen) = (page.clone(), seen2.clone());
                        handlers.push(std::thread::spawn(move || handle(s, &page, port, &seen)));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => break,
                }
            }
            for h in handlers {
                let _ = h.join();
            }
        });
        Server {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the server and returns every request line it saw.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Loads `page` in Chromium through the server (`extra`: --dump-dom or
/// --screenshot=...); returns Chromium's output, the request lines the
/// server saw, and the page's URL.
fn browse(page: &[u8], extra: &[String]) -> (Output, Vec<String>, String) {
    let chromium = chromium();
    let server = Server::serve(page.to_vec());
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/report.html", server.port);
    let child = Command::new(chromium)
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--proxy-server=http://127.0.0.1:{}", server.port))
        .arg("--proxy-bypass-list=<-loopback>")
        .args(extra)
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let out = output_within(child, Duration::from_secs(90));
    let seen = server.finish();
    (out, seen, url)
}

/// Exactly one request, the report's, and through the proxy (the
/// absolute form a proxy is asked with): so the page's own loads would
/// have come here too, and there were none.
fn assert_only_the_report(seen: &[String], url: &str) {
    assert_eq!(
        seen,
        [format!("GET {url} HTTP/1.1")],
        "the page must make no request beyond its own load"
    );
}

/// The DOM Chromium built from `page` (and that it made no request).
fn dom(page: &[u8]) -> String {
    let (out, seen, url) = browse(page, &["--dump-dom".to_string()]);
    assert!(out.status.success(), "chromium --dump-dom: {out:?}");
    assert_only_the_report(&seen, &url);
    let dom = String::from_utf8(out.stdout).expect("the DOM is UTF-8");
    assert!(dom.contains("</html>"), "{dom}");
    dom
}

/// A screenshot of `page` at 1400x2400 in `png` (and no request).
fn screenshot(page: &[u8], png: &Path) {
    let shot = format!("--screenshot={}", png.display());
    let (out, seen, url) = browse(page, &[shot, "--window-size=1400,2400".to_string()]);
    assert!(out.status.success(), "chromium --screenshot: {out:?}");
    assert_only_the_report(&seen, &url);
    let data = std::fs::read(png).expect("the screenshot was written");
    assert!(data.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        data.len() > 30_000,
        "a near-empty screenshot: {} bytes",
        data.len()
    );
}

/// `rea-audit report LOG ARGS -o OUT`.
fn report(log: &Path, out: &Path, args: &[&str]) -> Output {
    Command::new(audit_bin())
        .arg("report")
        .arg(log)
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

/// A real exec run stopped by its deadline, with a staging directory.
struct Run {
    scratch: Scratch,
    log: PathBuf,
    stage: PathBuf,
    head: String,
}

/// `rea-watchdog exec --staging STAGE --deadline DEADLINE -- ARGV` with
/// its log at `audit.jsonl` in `scratch`.
fn stopped_run(scratch: Scratch, deadline: &str, argv: &[&str]) -> Run {
    let log = scratch.path("audit.jsonl");
    let stage = scratch.path("stage");
    std::fs::create_dir(&stage).unwrap();
    std::fs::write(stage.join("runtime.bin"), b"hopper").unwrap();
    let child = Command::new(watchdog_bin())
        .arg("exec")
        .arg("--audit-log")
        .arg(&log)
        .arg("--staging")
        .arg(&stage)
        .args(["--deadline", deadline, "--"])
        .args(argv)
        .env("TMPDIR", scratch.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(124), "a deadline stop: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let head = err
        .lines()
        .find_map(|l| l.strip_prefix("rea-watchdog: sealed head "))
        .unwrap_or_else(|| panic!("no sealed head: {err}"))
        .trim()
        .to_string();
    Run {
        scratch,
        log,
        stage,
        head,
    }
}

/// The phase of the real run: it asks for launcher-1 itself (in-process
/// client: the caller is the job's leader; an inner alarm after 1 s,
/// which the launcher ignores) and for launcher-2 through a
/// `rea-watchdog submit` child (the caller is in the job's tree), waits
/// until both are in the log, then sleeps into the deadline.
const PHASE: &str = r#"
import subprocess, sys, time
tools, log, watchdog = sys.argv[1:4]
sys.path.insert(0, tools)
import rea_client as rc
c = rc.Client.from_env()
c.spawn(["/bin/sh", "-c", "trap '' ALRM; exec sleep 60"], deadline=60, name="launcher-1",
        inner_alarm=1)
subprocess.Popen([watchdog, "submit", "--name", "launcher-2", "--", "/bin/sleep", "61"])
until = time.time() + 20
while time.time() < until and b'"name":"launcher-2"' not in open(log, "rb").read():
    time.sleep(0.02)
time.sleep(60)
"#;

fn nested_run() -> Run {
    let scratch = Scratch::new();
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools");
    let tools = tools.display().to_string();
    let log = scratch.path("audit.jsonl").display().to_string();
    let argv = [python(), "-c", PHASE, &tools, &log, watchdog_bin()];
    let run = stopped_run(scratch, "3s", &argv);
    let spawned: Vec<String> = all!(Log::read(&run.log), Event::JobSpawned)
        .iter()
        .map(|j| j.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        spawned,
        ["", "launcher-1", "launcher-2"],
        "both launchers before the deadline"
    );
    run
}

fn between<'a>(s: &'a str, from: &str, to: &str) -> &'a str {
    let i = s
        .find(from)
        .unwrap_or_else(|| panic!("no {from:?} in the page"));
    let rest = &s[i..];
    &rest[..rest.find(to).map(|j| j + to.len()).unwrap_or(rest.len())]
}

/// Job `n`'s lane: from its `<g>` to the next lane (or the drawing's end).
fn lane_of(svg: &str, n: u64) -> &str {
    let start = format!("<g class=\"lane\" data-job=\"{n}\"");
    let i = svg
        .find(&start)
        .unwrap_or_else(|| panic!("no lane for job {n}: {svg}"));
    let rest = &svg[i + start.len()..];
    let end = rest.find("<g class=\"lane\"").unwrap_or(rest.len());
    &svg[i..i + start.len() + end]
}

/// The text of an HTML-escaped string (the five characters the page escapes).
pub(super) fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// No temporary file (`*.tmp`) is left in `dir`: a page is written whole
/// or not at all.
pub(super) fn no_temp_left(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "a temporary file was left: {name}");
    }
}

/// Each sweep of the log: (stage, processes signalled, its parts summed).
fn sweeps(log: &Log) -> Vec<(String, u64)> {
    let mut out: Vec<(u32, String, u64)> = Vec::new();
    for d in all!(log, Event::SignalSweep) {
        let n = d.targets.len() as u64;
        match out.iter_mut().find(|s| s.0 == d.sweep) {
            Some(s) => s.2 += n,
            None => {
                // The stage as the record (and the page) spells it.
                let stage = serde_json::to_value(d.stage).unwrap();
                out.push((d.sweep, stage.as_str().unwrap().to_string(), n))
            }
        }
    }
    out.into_iter().map(|(_, st, n)| (st, n)).collect()
}

#[test]
fn a_real_stopped_run_is_drawn_and_loads_nothing() {
    require_pid_ns!("report_real_run");
    let _ = chromium();
    let run = nested_run();
    let page = run.scratch.path("report.html");
    let stage = run.stage.display().to_string();
    let out = report(&run.log, &page, &["--staging", &stage]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "delete_allowed for the exact stage: {out:?}"
    );
    let html = std::fs::read(&page).unwrap();
    let d = dom(&html);

    let banner = between(&d, "<div class=\"banner", "</div>");
    assert!(
        banner.contains("data-status=\"delete_allowed\""),
        "{banner}"
    );
    assert!(banner.contains("DELETE ALLOWED"), "{banner}");

    // One lane per job in the whole-run drawing, named, the launchers
    // under job 1 (launcher-2 asked from job 1's tree, not its leader).
    let svg = between(&d, "<svg class=\"timeline\" id=\"timeline\"", "</svg>");
    let recs = Log::read(&run.log);
    let jobs = all!(recs, Event::JobSpawned);
    assert_eq!(
        svg.matches("<g class=\"lane\"").count(),
        jobs.len(),
        "{svg}"
    );
    for j in &jobs {
        let n = j.job;
        let name = j.name.as_deref().unwrap_or("exec");
        let lane = lane_of(svg, n);
        assert!(lane.contains(&format!("job {n} {name}")), "{lane}");
        let depth = if n == 1 { 0 } else { 1 };
        assert!(lane.contains(&format!("data-depth=\"{depth}\"")), "{lane}");
        assert!(lane.contains("(stopped)"), "ended by the stop: {lane}");
        // The sweep that reached its leader is ticked on its lane.
        assert!(lane.contains("data-kind=\"signalled\""), "{lane}");
    }
    // launcher-1's inner alarm, on its own lane and only there.
    assert_eq!(all!(recs, Event::InnerAlarm).len(), 1);
    assert!(
        lane_of(svg, 2).contains("data-kind=\"inner_alarm\""),
        "{svg}"
    );
    assert_eq!(svg.matches("data-kind=\"inner_alarm\"").count(), 1);
    // Each sweep once, with its stage and how many it signalled.
    let want = sweeps(&recs);
    // The ask reaches the three leaders; whether a TERM sweep follows
    // depends on whether launcher-2's submit client outlived the ask.
    assert_eq!(want.first(), Some(&("ask".to_string(), 3)), "{want:?}");
    for (stage, n) in &want {
        let mark = format!("data-kind=\"sweep\" data-stage=\"{stage}\" data-count=\"{n}\"");
        assert_eq!(svg.matches(&mark).count(), 1, "{mark} in {svg}");
    }
    assert_eq!(svg.matches("data-kind=\"sweep\"").count(), want.len());
    assert_eq!(svg.matches("data-kind=\"receipt\"").count(), 1, "{svg}");
    assert_eq!(svg.matches("data-kind=\"trigger\"").count(), 1, "{svg}");
    // The close-up of the stop exists too (the stop is a sliver of 3 s).
    assert!(d.contains("id=\"timeline-stop\""));

    // The tree names every process signalled; the staging its digest.
    let tree = between(&d, "<section id=\"tree\"", "</section>");
    for r in all!(recs, Event::SignalSweep) {
        for t in &r.targets {
            assert!(tree.contains(&format!("pid {}", t.pid)), "{tree}");
        }
    }
    let inv = &first!(recs, Event::StagingInventoried).inventory.digest;
    assert!(d.contains(inv.as_str()), "the staging digest");
    let rows = between(&d, "<table class=\"records\">", "</table>");
    assert_eq!(rows.matches("<tr id=\"line-").count(), recs.len());

    // The command re-verifies, with the sealed head and the stage.
    let cmd = unescape(between(&d, "<pre id=\"reverify-command\">", "</pre>"));
    let cmd = cmd
        .trim_start_matches("<pre id=\"reverify-command\">")
        .trim_end_matches("</pre>");
    assert!(
        cmd.contains(&format!("--expect-head {}", run.head)),
        "{cmd}"
    );
    let bin = Path::new(audit_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let again = Command::new("sh")
        .args(["-c", cmd])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{cmd}: {again:?}");

    screenshot(&html, &run.scratch.path("report.png"));
}

#[test]
fn a_tampered_copy_is_drawn_untrusted_in_red() {
    require_pid_ns!("report_tampered");
    let _ = chromium();
    let run = nested_run();
    // One byte of one record's data: launcher-1 becomes launcher-9.
    let text = std::fs::read_to_string(&run.log).unwrap();
    assert_eq!(text.matches("\"name\":\"launcher-1\"").count(), 1);
    let edited = run.scratch.path("edited.jsonl");
    std::fs::write(
        &edited,
        text.replace("\"name\":\"launcher-1\"", "\"name\":\"launcher-9\""),
    )
    .unwrap();
    let page = run.scratch.path("edited.html");
    let out = report(&edited, &page, &[]);
    assert_eq!(out.status.code(), Some(3), "tampered: {out:?}");
    let html = std::fs::read(&page).expect("the page is written for a tampered log too");
    let d = dom(&html);
    let banner = between(&d, "<div class=\"banner", "</div>");
    assert!(banner.contains("banner bad"), "{banner}");
    assert!(banner.contains("data-status=\"tampered\""), "{banner}");
    assert!(banner.contains("UNTRUSTED"), "{banner}");
    let (_, v) = verify_log(&edited, &[]);
    for r in v["reasons"].as_array().unwrap() {
        let code = r["code"].as_str().unwrap();
        assert!(
            banner.contains(&format!("<code>{code}</code>")),
            "{code} in {banner}"
        );
        if let Some(l) = r["line"].as_u64() {
            assert!(
                banner.contains(&format!("line {l}</a>")),
                "line {l} in {banner}"
            );
        }
    }
    assert!(d.contains("<body class=\"untrusted\">"));
    assert!(
        d.matches("class=\"untrusted-note\"").count() >= 4,
        "every section says so"
    );
    // Still drawn: the lanes, the edited name as the file has it.
    let svg = between(&d, "<svg class=\"timeline\" id=\"timeline\"", "</svg>");
    assert_eq!(svg.matches("<g class=\"lane\"").count(), 3, "{svg}");
    assert!(svg.contains("launcher-9"), "{svg}");
    screenshot(&html, &run.scratch.path("edited.png"));
}

#[test]
fn hostile_strings_from_the_log_are_shown_not_obeyed() {
    require_pid_ns!("report_hostile");
    let _ = chromium();
    // The job's argv carries markup and a terminal escape; a child names
    // itself (comm) with markup and is signalled by the TERM sweep.
    let script = r#"
import ctypes, os, time
if os.fork() == 0:
    ctypes.CDLL(None).prctl(15, b'"><img src=y>', 0, 0, 0)
    time.sleep(60)
time.sleep(60)
"#;
    let run = stopped_run(
        Scratch::new(),
        "2s",
        &[
            python(),
            "-c",
            script,
            "<script>alert(1)</script>",
            "\"><img src=x onerror=alert(2)>",
            "\u{1b}]0;owned\u{7}\u{1b}[2J",
        ],
    );
    let comms: Vec<String> = all!(Log::read(&run.log), Event::SignalSweep)
        .iter()
        .flat_map(|r| r.targets.iter())
        .map(|t| t.comm.clone())
        .collect();
    assert!(comms.iter().any(|c| c == "\"><img src=y>"), "{comms:?}");
    let page = run.scratch.path("report.html");
    let stage = run.stage.display().to_string();
    let out = report(&run.log, &page, &["--staging", &stage]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    for raw in ["<script", "<img", "\u{1b}", "\u{7}"] {
        assert!(!html.to_lowercase().contains(raw), "{raw:?} in the file");
    }
    // An <img> that got through would have asked the server for /x or /y.
    let d = dom(html.as_bytes());
    let lower = d.to_lowercase();
    assert!(!lower.contains("<script"), "a script element in the DOM");
    assert!(!lower.contains("<img"), "an img element in the DOM");
    assert!(!d.contains('\u{1b}'), "a raw ESC in the DOM");
    // The text is there, literally, as text.
    assert!(d.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{d}");
    assert!(
        d.contains("\"&gt;&lt;img src=x onerror=alert(2)&gt;"),
        "{d}"
    );
    assert!(d.contains("\\x1b]0;owned\\x07\\x1b[2J"), "{d}");
    let tree = between(&d, "<section id=\"tree\"", "</section>");
    assert!(tree.contains("<b>\"&gt;&lt;img src=y&gt;</b>"), "{tree}");
}

/// The control: a page that does load things is seen loading them, so
/// the assertion above is not true of any page.
#[test]
fn the_server_sees_what_a_page_loads() {
    require_pid_ns!("report_control");
    let page = b"<!DOCTYPE html><html><body><img src=\"/local.png\"><img src=\"http://rea-probe.invalid/far.png\"></body></html>";
    let (out, seen, _) = browse(page, &["--dump-dom".to_string()]);
    assert!(out.status.success(), "{out:?}");
    assert!(seen.iter().any(|l| l.contains("/local.png")), "{seen:?}");
    assert!(
        seen.iter().any(|l| l.contains("rea-probe.invalid")),
        "{seen:?}"
    );
}

#[test]
fn what_is_not_a_log_writes_no_page() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    for log in ["/dev/null", "/nonexistent/audit.jsonl"] {
        let out = report(Path::new(log), &page, &[]);
        assert_eq!(out.status.code(), Some(4), "{log}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no report written"));
    }
    let dirlog = dir.path();
    assert_eq!(report(dirlog, &page, &[]).status.code(), Some(4));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "nothing written, nothing half-written: {left:?}"
    );
}

#[test]
fn the_page_is_never_written_over_the_log() {
    use common::logs::{build, LogOpts};
    let log = build(&LogOpts::closed("report-over"));
    let before = std::fs::read(&log.path).unwrap();
    let out = report(&log.path, &log.path, &[]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(
        std::fs::read(&log.path).unwrap(),
        before,
        "the log is untouched"
    );
    // -o - is standard output; the exit status is verify's.
    let out = report(&log.path, Path::new("-"), &[]);
    let (code, _) = verify_log(&log.path, &[]);
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"));
    assert!(page.contains(
        "content=\"default-src &#39;none&#39;; style-src &#39;unsafe-inline&#39;; img-src data:"
    ));
    assert!(page.contains("<link rel=\"icon\" href=\"data:,\">"));
    assert!(page.contains("@media print"));
    let bad = report(&log.path, Path::new("-"), &["--expect-head", "abc"]);
    assert_eq!(
        bad.status.code(),
        Some(4),
        "a malformed head is a usage error"
    );
}

/// A log of 12 000 records makes a page of bounded size: the table keeps
/// its first 5000 rows, the timeline its first 200 lanes, and both say so.
#[test]
fn a_huge_log_makes_a_bounded_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = memory::busy_log(dir.path(), 3000, |job| format!("launcher-{job}"));
    let out = dir.path().join("huge.html");
    let r = report(&path, &out, &[]);
    let (code, _) = verify_log(&path, &[]);
    assert!(code != 4 && r.status.code() == Some(code), "{r:?}");
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.len() < 4 << 20, "{} bytes", page.len());
    assert_eq!(page.matches("<tr id=\"line-").count(), 5000);
    assert!(
        page.contains("7001 more line(s) not shown"),
        "12001 lines in all"
    );
    let svg = between(&page, "<svg class=\"timeline\" id=\"timeline\"", "</svg>");
    assert_eq!(svg.matches("<g class=\"lane\"").count(), 200);
    assert!(page.contains("2800 more job(s) not drawn"));
}

mod args;
mod bounds;
mod command;
mod memory;
mod race;
