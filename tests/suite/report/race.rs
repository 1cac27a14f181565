//! The page shows the bytes verify judged, and nothing else (review of
//! issue 13, items 1, 2 and 12). A shim loaded into `rea-audit report`
//! (LD_PRELOAD, built here with the C compiler Rust links with) changes
//! the log at the worst moments a writer could choose: it renames another
//! file over the log's path the moment the report has opened it, or
//! rewrites or appends to the log in place when a descriptor open on it is
//! rewound for the next pass. Whatever the moment, the page is never green
//! for bytes verify did not read: it is the tampered verdict of what was
//! read, or a page that says the log changed, with exit status 3.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common;
use common::harness::*;
use common::logs::{build, read_lines, replace_once, write_lines, BuiltLog, LogOpts};

/// REA_SHIM_LOG names the log (its canonical path), REA_SHIM_WITH another
/// file, REA_SHIM_MODE what happens:
///   swap     right after the log path's first open returns, WITH is
///            renamed over it (the report reads through that descriptor
///            alone: the path then names another file);
///   rewrite  at the REA_SHIM_AT-th rewind (lseek to 0) of a descriptor
///            open on the log, WITH's bytes are written over the log in
///            place (same inode);
///   append   at that rewind, WITH's bytes are appended to the log;
///   link     at that rewind, WITH is made a hard link to the log (its
///            ctime moves, its bytes do not).
/// REA_SHIM_LOADED: a file created when the shim is loaded, so a test
/// knows it ran under it.
const SHIM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int opens, rewinds, fired;
static const char *env(const char *k) { const char *v = getenv(k); return v ? v : ""; }

__attribute__((constructor)) static void loaded(void) {
  const char *p = env("REA_SHIM_LOADED");
  if (*p) { FILE *f = fopen(p, "w"); if (f) fclose(f); }
}

static void copy(const char *from, const char *to, const char *how) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, how);
  char buf[65536]; size_t n;
  if (in && out) while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  if (in) fclose(in);
  if (out) fclose(out);
}

static void on_opened(const char *p) {
  if (!p || !*env("REA_SHIM_LOG") || strcmp(p, env("REA_SHIM_LOG"))) return;
  if (++opens == 1 && !strcmp(env("REA_SHIM_MODE"), "swap") && !fired++)
    rename(env("REA_SHIM_WITH"), p);
}

static void on_rewind(int fd, off_t o, int w) {
  char self_fd[64], to[4096];
  if (o != 0 || w != SEEK_SET || fired) return;
  snprintf(self_fd, sizeof self_fd, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(self_fd, to, sizeof to - 1);
  if (n < 0) return;
  to[n] = 0;
  if (strcmp(to, env("REA_SHIM_LOG")) || ++rewinds != atoi(env("REA_SHIM_AT"))) return;
  if (!strcmp(env("REA_SHIM_MODE"), "rewrite")) { fired = 1; copy(env("REA_SHIM_WITH"), to, "r+b"); }
  if (!strcmp(env("REA_SHIM_MODE"), "append")) { fired = 1; copy(env("REA_SHIM_WITH"), to, "ab"); }
  if (!strcmp(env("REA_SHIM_MODE"), "link")) { fired = 1; link(to, env("REA_SHIM_WITH")); }
}

#define MODE(f) int m = 0; if (f & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, f); m = va_arg(a, int); va_end(a); }
int open(const char *p, int f, ...) { MODE(f)
  int (*r)(const char *, int, ...) = dlsym(RTLD_NEXT, "open"); int fd = r(p, f, m); on_opened(p); return fd; }
int open64(const char *p, int f, ...) { MODE(f)
  int (*r)(const char *, int, ...) = dlsym(RTLD_NEXT, "open64"); int fd = r(p, f, m); on_opened(p); return fd; }
int openat(int d, const char *p, int f, ...) { MODE(f)
  int (*r)(int, const char *, int, ...) = dlsym(RTLD_NEXT, "openat"); int fd = r(d, p, f, m); on_opened(p); return fd; }
int openat64(int d, const char *p, int f, ...) { MODE(f)
  int (*r)(int, const char *, int, ...) = dlsym(RTLD_NEXT, "openat64"); int fd = r(d, p, f, m); on_opened(p); return fd; }
off_t lseek(int fd, off_t o, int w) { on_rewind(fd, o, w);
  off_t (*r)(int, off_t, int) = dlsym(RTLD_NEXT, "lseek"); return r(fd, o, w); }
off_t lseek64(int fd, off_t o, int w) { on_rewind(fd, o, w);
  off_t (*r)(int, off_t, int) = dlsym(RTLD_NEXT, "lseek64"); return r(fd, o, w); }
"#;

/// The shim, compiled once per test binary.
fn shim() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let src = dir.join(format!("report-race-shim-{}.c", std::process::id()));
        let so = dir.join(format!("report-race-shim-{}.so", std::process::id()));
        std::fs::write(&src, SHIM).unwrap();
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&src)
            .arg("-ldl")
            .output()
            .expect("cc, the C compiler the Rust toolchain links with");
        let _ = std::fs::remove_file(&src);
        assert!(out.status.success(), "building the shim: {out:?}");
        so
    })
}

/// A closed log (verify: delete_allowed), its canonical path, and a copy
/// with one job's argv edited in place (same length, not re-chained).
struct Logs {
    log: BuiltLog,
    path: PathBuf,
    edited: PathBuf,
}

const EDIT: &str = "evil00";

fn logs(run: &str) -> Logs {
    with_edit(&LogOpts::closed(run))
}

/// The log `opts` describes, its canonical path, and a copy with one
/// job's argv edited in place (same length, not re-chained).
fn with_edit(opts: &LogOpts) -> Logs {
    let log = build(opts);
    let path = log.path.canonicalize().unwrap();
    let mut lines = read_lines(&path);
    let i = log.line_of("job_spawned", 0) - 1;
    lines[i] = replace_once(
        &lines[i],
        "/opt/hopper/",
        format!("/opt/{EDIT}/").as_bytes(),
    );
    let edited = path.with_file_name("edited.jsonl");
    write_lines(&edited, &lines);
    assert_eq!(
        std::fs::metadata(&edited).unwrap().len(),
        std::fs::metadata(&path).unwrap().len()
    );
    Logs { log, path, edited }
}

/// `rea-audit report LOG -o OUT` under the shim.
fn raced(log: &Path, out: &Path, mode: &str, with: &Path, at: u32) -> Output {
    let mut cmd = Command::new(audit_bin());
    cmd.arg("report").arg(log).arg("-o").arg(out);
    under_shim(cmd, log, &out.with_file_name("shim-loaded"), mode, with, at)
}

/// `cmd` (a `rea-audit` reading `log`) run under the shim.
fn under_shim(
    mut cmd: Command,
    log: &Path,
    loaded: &Path,
    mode: &str,
    with: &Path,
    at: u32,
) -> Output {
    let _ = std::fs::remove_file(loaded);
    let o = cmd
        .env("LD_PRELOAD", shim())
        .env("REA_SHIM_LOG", log)
        .env("REA_SHIM_MODE", mode)
        .env("REA_SHIM_WITH", with)
        .env("REA_SHIM_AT", at.to_string())
        .env("REA_SHIM_LOADED", loaded)
        .output()
        .unwrap();
    assert!(loaded.exists(), "the shim was not loaded: {o:?}");
    o
}

fn banner(html: &str) -> &str {
    super::between(html, "<div class=\"banner", "</div>")
}

/// The page says the log changed while read, draws nothing from it, and
/// the exit status is 3.
fn said_changed(out: &Output, page: &Path) {
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let html = std::fs::read_to_string(page).expect("a page that says so");
    let b = banner(&html);
    assert!(b.contains("LOG CHANGED WHILE READ"), "{b}");
    assert!(b.contains("banner bad"), "{b}");
    assert!(b.contains("data-status=\"log_changed\""), "{b}");
    assert!(b.contains("data-exit=\"3\""), "{b}");
    assert!(!html.contains("DELETE ALLOWED"), "{html}");
    assert!(!html.contains("delete_allowed\""), "{html}");
    assert!(
        !html.contains(EDIT),
        "nothing is drawn from the log: {html}"
    );
    assert!(!html.contains("<table class=\"records\">"), "{html}");
    super::no_temp_left(page.parent().unwrap());
}

#[test]
fn the_shim_alone_changes_nothing() {
    let l = logs("report-race-control");
    let page = l.log.dir.path().join("control.html");
    let out = raced(&l.path, &page, "none", &l.edited, 1);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(banner(&html).contains("DELETE ALLOWED"), "{html}");
}

/// The edited log is renamed over the good one the moment the report has
/// opened it: the report reads the good bytes through its descriptor and
/// verify finds them intact, yet the path the page names (and its
/// re-verify command re-reads) now holds other bytes. The page must not be
/// green for them: it says the log changed, and why.
#[test]
fn a_log_renamed_over_once_opened_is_never_drawn_as_verified() {
    let l = logs("report-race-swap");
    let page = l.log.dir.path().join("swap.html");
    let edited = std::fs::read(&l.edited).unwrap();
    let out = raced(&l.path, &page, "swap", &l.edited, 0);
    assert_eq!(
        std::fs::read(&l.path).unwrap(),
        edited,
        "the shim renamed the edited log over the path: {out:?}"
    );
    said_changed(&out, &page);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("its path now names another file"), "{html}");
}

/// The log is rewritten in place (same inode, same size) when the report
/// rewinds its descriptor: after verify's pass (1) and after the
/// drawings' pass (2, before the table).
#[test]
fn a_log_rewritten_in_place_while_read_is_never_drawn_as_verified() {
    for at in [1, 2] {
        let l = logs(&format!("report-race-rewrite-{at}"));
        let page = l.log.dir.path().join("rewrite.html");
        let out = raced(&l.path, &page, "rewrite", &l.edited, at);
        assert_eq!(
            std::fs::read(&l.path).unwrap(),
            std::fs::read(&l.edited).unwrap(),
            "the shim rewrote the log at rewind {at}: {out:?}"
        );
        said_changed(&out, &page);
    }
}

/// Records appended between two passes (review item 12).
#[test]
fn records_appended_while_read_are_never_drawn_as_verified() {
    for at in [1, 2] {
        let l = logs(&format!("report-race-append-{at}"));
        let lines = read_lines(&l.path);
        let more = l.path.with_file_name("more.jsonl");
        write_lines(&more, &lines[lines.len() - 1..]);
        let before = std::fs::metadata(&l.path).unwrap().len();
        let page = l.log.dir.path().join("append.html");
        let out = raced(&l.path, &page, "append", &more, at);
        assert!(
            std::fs::metadata(&l.path).unwrap().len() > before,
            "the shim appended at rewind {at}: {out:?}"
        );
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(!html.contains(EDIT));
        said_changed(&out, &page);
    }
}

/// `rea-audit show` reads the log through one descriptor too: records
/// appended after verify's pass, or another file renamed over the path
/// once opened, are never printed under verify's verdict as if it judged
/// them: exit status 3, and stderr says why.
#[test]
fn show_says_when_the_log_changed_while_read() {
    for (mode, at) in [("swap", 0), ("append", 1)] {
        let l = logs(&format!("show-race-{mode}"));
        let before = std::fs::read(&l.path).unwrap();
        let with = match mode {
            "append" => {
                let lines = read_lines(&l.path);
                let more = l.path.with_file_name("more.jsonl");
                write_lines(&more, &lines[lines.len() - 1..]);
                more
            }
            _ => l.edited.clone(),
        };
        let mut cmd = Command::new(audit_bin());
        cmd.arg("show").arg(&l.path);
        let loaded = l.log.dir.path().join("shim-loaded");
        let out = under_shim(cmd, &l.path, &loaded, mode, &with, at);
        assert_ne!(
            std::fs::read(&l.path).unwrap(),
            before,
            "the shim changed the log ({mode}): {out:?}"
        );
        assert_eq!(out.status.code(), Some(3), "{mode}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("the log changed while it was read"),
            "{mode}: {err}"
        );
        // --json says so in the document too, and stays valid.
        let fresh = logs(&format!("show-race-{mode}-json"));
        let with = match mode {
            "append" => with.clone(),
            _ => fresh.edited.clone(),
        };
        let mut cmd = Command::new(audit_bin());
        cmd.args(["show", "--json"]).arg(&fresh.path);
        let loaded = fresh.log.dir.path().join("shim-loaded");
        let out = under_shim(cmd, &fresh.path, &loaded, mode, &with, at);
        assert_eq!(out.status.code(), Some(3), "{mode} --json: {out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(doc["log_changed"].is_string(), "{mode}: {doc:#}");
        common::schema::assert_valid(common::schema::show_validator(), &doc, "show --json");
        // The control: the same show with nothing changing says delete_allowed.
        let good = build(&LogOpts::closed(&format!("show-race-{mode}-control")));
        let ok = Command::new(audit_bin())
            .arg("show")
            .arg(&good.path)
            .output()
            .unwrap();
        assert_eq!(ok.status.code(), Some(0), "{ok:?}");
        let ok = Command::new(audit_bin())
            .args(["show", "--json"])
            .arg(&good.path)
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
        assert!(doc.get("log_changed").is_none(), "{doc:#}");
    }
}

/// A hard link made to the log while it is read changes its ctime, not
/// its bytes: `show` and `report` still say what verify says (a backup
/// tool or an operator may link or chmod a log at any time).
#[test]
fn a_link_made_while_read_changes_nothing_shown() {
    let l = logs("race-link");
    let link = l.path.with_file_name("linked.jsonl");
    let page = l.log.dir.path().join("link.html");
    let out = raced(&l.path, &page, "link", &link, 1);
    assert!(link.exists(), "the shim made the link: {out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(banner(&std::fs::read_to_string(&page).unwrap()).contains("DELETE ALLOWED"));
    std::fs::remove_file(&link).unwrap();
    let mut cmd = Command::new(audit_bin());
    cmd.arg("show").arg(&l.path);
    let loaded = l.log.dir.path().join("shim-loaded");
    let out = under_shim(cmd, &l.path, &loaded, "link", &link, 1);
    assert!(link.exists(), "the shim made the link: {out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A log its watchdog is still writing (no receipt yet: verify says
/// incomplete, 2) whose last two records, real ones, land between verify's
/// pass and the next: the writer appending, not a change. `show` prints
/// what verify judged and says on stderr (and, with --json, in the
/// document) how much more there is now; `report` draws the judged bytes
/// and says so. Exit status 2 (verify's), never 3.
#[test]
fn a_log_still_written_may_grow_while_read() {
    let whole = build(&LogOpts {
        seal: false,
        ..LogOpts::closed("race-growing")
    });
    let path = whole.path.canonicalize().unwrap();
    let lines = read_lines(&path);
    let cut = lines.len() - 2;
    let more = path.with_file_name("more.jsonl");
    write_lines(&more, &lines[cut..]);
    let reset = || write_lines(&path, &lines[..cut]);
    let judged = {
        reset();
        std::fs::metadata(&path).unwrap().len()
    };
    let grew = |out: &Output| {
        assert_eq!(
            std::fs::read(&path).unwrap().len() as u64,
            judged + std::fs::metadata(&more).unwrap().len(),
            "the shim appended the last two records: {out:?}"
        );
    };
    let loaded = whole.dir.path().join("shim-loaded");

    let mut cmd = Command::new(audit_bin());
    cmd.arg("show").arg(&path);
    let out = under_shim(cmd, &path, &loaded, "append", &more, 1);
    grew(&out);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("still being written: it grew from {judged} to ")),
        "{err}"
    );
    assert!(!err.contains("changed while"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("incomplete"), "{text}");

    reset();
    let mut cmd = Command::new(audit_bin());
    cmd.args(["show", "--json"]).arg(&path);
    let out = under_shim(cmd, &path, &loaded, "append", &more, 1);
    grew(&out);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::assert_valid(common::schema::show_validator(), &doc, "show --json");
    assert!(doc.get("log_changed").is_none(), "{doc:#}");
    assert_eq!(doc["log_grew"]["judged_bytes"], judged, "{doc:#}");
    assert!(
        doc["log_grew"]["bytes_now"].as_u64().unwrap() > judged,
        "{doc:#}"
    );
    assert_eq!(
        doc["lines"].as_array().unwrap().len(),
        cut,
        "the lines verify judged, and only those: {doc:#}"
    );

    for at in [1, 2] {
        reset();
        let page = whole.dir.path().join(format!("growing-{at}.html"));
        let out = raced(&path, &page, "append", &more, at);
        grew(&out);
        assert_eq!(out.status.code(), Some(2), "rewind {at}: {out:?}");
        let html = std::fs::read_to_string(&page).unwrap();
        let b = banner(&html);
        assert!(b.contains("data-exit=\"2\""), "{b}");
        assert!(
            b.contains(&format!("This page shows its first {judged} bytes")),
            "{b}"
        );
        assert!(!html.contains("LOG CHANGED"), "{html}");
        assert!(html.contains("<table class=\"records\">"), "{html}");
    }
}

/// An unfinished log (no receipt: verify says incomplete) and its
/// edited copy ([`with_edit`]).
fn unfinished(run: &str) -> Logs {
    with_edit(&LogOpts {
        seal: false,
        ..LogOpts::closed(run)
    })
}

/// The leniency is for growth alone: an unfinished log rewritten in place
/// while read is a change (exit status 3), as a finished one is.
#[test]
fn a_log_still_written_rewritten_in_place_is_a_change() {
    let Logs {
        log: l,
        path,
        edited,
    } = unfinished("race-unfinished-show");
    let mut cmd = Command::new(audit_bin());
    cmd.arg("show").arg(&path);
    let out = under_shim(
        cmd,
        &path,
        &l.dir.path().join("shim-loaded"),
        "rewrite",
        &edited,
        1,
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&edited).unwrap()
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("changed while it was read"), "{err}");
    assert!(!err.contains("still being written"), "{err}");

    let Logs {
        log: l,
        path,
        edited,
    } = unfinished("race-unfinished-report");
    let page = l.dir.path().join("rewrite.html");
    let out = raced(&path, &page, "rewrite", &edited, 1);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&edited).unwrap()
    );
    said_changed(&out, &page);
}
