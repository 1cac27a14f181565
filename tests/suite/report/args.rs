//! Where the page goes, and what its banner says of an unpinned head
//! (review of issue 13, items 4, 8, 9 and 11).

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use common::harness::*;
use common::logs::{build, verify, LogOpts};

/// Everything written to the FIFO at `path` until its writer closes it
/// (or, when nobody ever opens it for writing, until `done` has been set
/// for two seconds).
fn drain_fifo(path: &Path, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<u8>> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let mut got = Vec::new();
        let mut quiet_since: Option<Instant> = None;
        let mut buf = [0u8; 65536];
        loop {
            match f.read(&mut buf) {
                Ok(0) if !got.is_empty() => return got,
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => {
                    if done.load(Ordering::SeqCst) {
                        let since = *quiet_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(2) {
                            return got;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    })
}

/// An existing FIFO, a character device, or a link to this process's
/// standard output is written to, never replaced by a regular file (as
/// root, `-o /dev/null` renamed a file over /dev/null).
#[test]
fn an_existing_fifo_device_or_stream_is_written_to_not_replaced() {
    let log = build(&LogOpts::closed("report-out-special"));
    let dir = log.dir.path();

    let fifo = dir.join("page.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = drain_fifo(&fifo, done.clone());
    let out = super::report(&log.path, &fifo, &[]);
    done.store(true, Ordering::SeqCst);
    let got = reader.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
        "the FIFO is still a FIFO"
    );
    let page = String::from_utf8(got).unwrap();
    assert!(
        page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"),
        "the page went through the FIFO: {page:?}"
    );

    // A link to /proc/self/fd/1: the report's own standard output.
    let link = dir.join("stdout-link");
    std::os::unix::fs::symlink("/proc/self/fd/1", &link).unwrap();
    let out = super::report(&log.path, &link, &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"));

    // A private null device, where this test may make one (root).
    let null = dir.join("null");
    let dev = nix::sys::stat::makedev(1, 3);
    let made = nix::sys::stat::mknod(
        &null,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        dev,
    );
    // Root may always (tools/test and CI run as root); elsewhere the case
    // is not run, and says so, rather than passing on nothing.
    let root = nix::unistd::geteuid().is_root();
    assert!(made.is_ok() || !root, "mknod as root: {made:?}");
    if made.is_err() {
        eprintln!("SKIP (not root): the null-device case");
    }
    if made.is_ok() {
        let out = super::report(&log.path, &null, &[]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let t = std::fs::metadata(&null).unwrap().file_type();
        assert!(t.is_char_device(), "the device is still a device");
    }
    super::no_temp_left(dir);
}

/// `-o` inside the stage being verified is a usage error, and nothing is
/// written there: the page would change the stage verify just checked.
#[test]
fn the_page_is_never_written_into_the_stage() {
    let t = tempfile::tempdir().unwrap();
    let stage = t.path().join("stage");
    std::fs::create_dir_all(stage.join("hopper/bin")).unwrap();
    std::fs::write(stage.join("hopper/bin/Hopper"), b"\x7fELF not really").unwrap();
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::closed("report-in-stage")
    });
    let listing = || -> Vec<String> {
        let mut v: Vec<String> = walk(&stage);
        v.sort();
        v
    };
    let before = listing();
    let s = stage.to_str().unwrap();
    for out in [stage.join("report.html"), stage.join("hopper/report.html")] {
        let r = super::report(&log.path, &out, &["--staging", s]);
        assert_eq!(r.status.code(), Some(4), "{r:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("staging"), "{err}");
        assert_eq!(listing(), before, "nothing written into the stage");
    }
    // Beside the stage is fine.
    let r = super::report(&log.path, &t.path().join("report.html"), &["--staging", s]);
    assert_eq!(r.status.code(), Some(0), "{r:?}");
}

fn walk(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        out.push(p.display().to_string());
        if p.is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

/// A green banner without a pinned head says, in the banner, what only a
/// pinned head would catch; with the head pinned it does not.
#[test]
fn an_unpinned_head_is_said_in_the_banner() {
    let log = build(&LogOpts::closed("report-pin"));
    let page = log.dir.path().join("page.html");
    let out = super::report(&log.path, &page, &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    let banner = super::between(&html, "<div class=\"banner", "</div>");
    assert!(banner.contains("DELETE ALLOWED"), "{banner}");
    assert!(
        banner.contains(
            "head not pinned (--expect-head): a log cut short and re-chained would look the same"
        ),
        "{banner}"
    );
    let head = verify(&log.path, &[]).head().unwrap().to_string();
    let out = super::report(&log.path, &page, &["--expect-head", &head]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    let banner = super::between(&html, "<div class=\"banner", "</div>");
    assert!(!banner.contains("head not pinned"), "{banner}");
}

/// `-o -` into a reader that stops early (`| head`): the message says the
/// page was cut short on standard output, not that no report was written.
#[test]
fn a_page_cut_short_on_standard_output_is_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let log = super::memory::busy_log(dir.path(), 2000, |_| "launcher".into());
    let mut child = Command::new(audit_bin())
        .arg("report")
        .arg(&log)
        .args(["-o", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 4096];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = output_within(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("no report written"), "{err}");
    assert!(
        err.contains("standard output") && err.contains("cut short"),
        "{err}"
    );
}
