//! The command on the page that re-verifies the log pastes as it is, from
//! any directory (review of issue 13, item 6): it named the log as given
//! (a relative path) and a name starting with `-` was taken for an option.

use std::path::Path;
use std::process::Command;

use crate::common;
use common::harness::*;
use common::logs::{build, LogOpts};

/// The re-verify command on the page.
fn command(html: &str) -> String {
    let pre = super::between(html, "<pre id=\"reverify-command\">", "</pre>");
    super::unescape(
        pre.trim_start_matches("<pre id=\"reverify-command\">")
            .trim_end_matches("</pre>"),
    )
}

/// The command pastes as it is, from any directory: the log's absolute
/// path, after `--` (a name starting with `-` is not an option).
#[test]
fn the_reverify_command_works_from_anywhere() {
    let log = build(&LogOpts::closed("report-dash"));
    let dir = log.dir.path();
    std::fs::copy(&log.path, dir.join("-d.jsonl")).unwrap();
    let out = Command::new(audit_bin())
        .current_dir(dir)
        .args(["report", "-o", "page.html", "--", "-d.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let cmd = command(&std::fs::read_to_string(dir.join("page.html")).unwrap());
    assert!(cmd.contains(" -- /"), "an absolute path after --: {cmd}");
    let bin = Path::new(audit_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let again = Command::new("sh")
        .args(["-c", &cmd])
        .current_dir("/")
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{cmd}: {again:?}");
}
