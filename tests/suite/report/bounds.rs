//! What a log verify accepts cannot crash the report, and what the page
//! links stays within the page (review of issue 13, items 3 and 10).

use crate::common;
use common::logs::{build, read_lines, rechain, replace_once, verify, write_lines, LogOpts};
use rea::kinds::watchdog::StopReason;

fn with_mono(line: &[u8], mono: u64) -> Vec<u8> {
    let s = std::str::from_utf8(line).unwrap();
    let i = s.find("\"mono_ns\":").unwrap() + "\"mono_ns\":".len();
    let end = i + s[i..].find(',').unwrap();
    format!("{}{mono}{}", &s[..i], &s[end..]).into_bytes()
}

/// mono_ns jumps to ~0.9 x 2^64 at the trigger and climbs towards 2^64:
/// never decreasing, so verify accepts it; the drawings' windows must not
/// wrap (it panicked, exit 101, and left an empty temporary file).
#[test]
fn a_clock_near_the_end_of_u64_is_drawn() {
    let log = build(&LogOpts::stopped("report-clock", StopReason::Deadline));
    let mut lines = read_lines(&log.path);
    let from = log.line_of("stop_triggered", 0) - 1;
    // The last record 10^15 ns short of 2^64, as in the reviewer's log.
    let base = u64::MAX / 10 * 9;
    let step = (u64::MAX - 1_000_000_000_000_000 - base) / (lines.len() - from - 1) as u64;
    for (k, i) in (from..lines.len()).enumerate() {
        lines[i] = with_mono(&lines[i], base + k as u64 * step);
    }
    rechain(&mut lines, &log.run, from + 1);
    let path = log.dir.path().join("clock.jsonl");
    write_lines(&path, &lines);
    let v = verify(&path, &[]);
    assert!(v.exit < 3, "verify accepts it: {:#}", v.json);
    let page = log.dir.path().join("clock.html");
    let out = super::report(&path, &page, &[]);
    assert_eq!(out.status.code(), Some(v.exit), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.ends_with("</html>\n"));
    assert!(
        html.contains("id=\"timeline-stop\""),
        "the close-up is drawn"
    );
    super::no_temp_left(log.dir.path());
}

/// Reasons at lines past the table's 5000 rows link nowhere (every link on
/// the page has its anchor); one inside the table still links to its row.
#[test]
fn a_reason_past_the_table_links_to_no_missing_row() {
    let dir = tempfile::tempdir().unwrap();
    let log = super::memory::busy_log(dir.path(), 3000, |_| "launcher".into());
    let mut lines = read_lines(&log);
    for i in [99, 7999] {
        lines[i] = replace_once(&lines[i], "\"pid\":", b"\"pid\": ");
    }
    write_lines(&log, &lines);
    let page = dir.path().join("busy.html");
    let out = super::report(&log, &page, &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    let banner = super::between(&html, "<div class=\"banner", "</div>");
    assert!(banner.contains("href=\"#line-100\""), "{banner}");
    assert!(banner.contains("line 8000"), "{banner}");
    for (i, _) in html.match_indices("href=\"#") {
        let rest = &html[i + 7..];
        let id = &rest[..rest.find('"').unwrap()];
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "a link to #{id}, which is not on the page"
        );
    }
}
