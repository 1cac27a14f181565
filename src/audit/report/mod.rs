//! `rea-audit report` (docs/review.md): one self-contained HTML page a reviewer
//! reads or prints, no external resource and no script.
//!
//! Verification comes first, by the verifier `verify` and `show` use, and
//! its verdict is the banner; a tampered log is still drawn, marked
//! untrusted throughout. Then the run, the timeline (inline SVG), the
//! process tree of the stop, the staging inventory, every record, and the
//! command that re-verifies. The log is read the way every command reads
//! one (`open_log`: `O_NONBLOCK`, a regular file or nothing), through that
//! one descriptor only (`source`): verify reads it, a second pass gathers
//! the drawings, a third streams the table, and the page is trusted only
//! when all three read the same bytes and the file did not change; else
//! the page says the log changed while read and nothing of it is drawn
//! (exit status 3). Memory is bounded by the line cap and the drawings'
//! caps, never by the log's size. The page is made whole before it goes
//! anywhere (`output`): renamed over the output, or copied to a stream.

mod html;
mod identity;
mod output;
mod quote;
mod records;
mod staging;
mod svg;
mod timeline;
mod tree;
mod verdict;

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::audit::passes;
use crate::audit::reader::{parse_line, read_lines, Piece};

use html::{esc, section, text};
use verdict::{Checked, LogKind};

/// Where the page goes.
#[derive(Clone, Debug)]
pub enum Output {
    Stdout,
    File(PathBuf),
}

#[derive(Clone, Debug)]
pub struct Options {
    pub log: PathBuf,
    pub staging: Option<PathBuf>,
    pub expect_head: Option<String>,
    pub output: Output,
}

/// Why no page was written, or not all of it (exit status 4, as verify's
/// error).
#[derive(Debug)]
pub enum Failure {
    /// The command line does not make sense (said before anything is read).
    Usage(String),
    /// The log could not be read: nothing to report on.
    Read(String),
    /// The page could not be written (nothing is left half-written).
    Write(String),
    /// A stream stopped taking the page part way (`-o - | head`): what it
    /// got is the page's beginning, cut short.
    Partial(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Read(m) | Failure::Write(m) => {
                write!(f, "{m} (no report written)")
            }
            Failure::Partial(m) => f.write_str(m),
        }
    }
}

/// Everything the drawings' pass gathers.
#[derive(Default)]
struct Facts {
    identity: identity::Identity,
    timeline: timeline::Timeline,
    tree: tree::Tree,
    staging: staging::Staging,
    /// The last complete line read (`None` after an overlong last line,
    /// which is never held whole): its hash is compared with verify's head.
    last: Option<Vec<u8>>,
    lines: u64,
    /// Bytes after the last newline (the table shows them as a row).
    torn: bool,
    /// The bytes verify read (every pass reads these, and no more).
    bytes: u64,
}

fn gather<R: Read>(r: R) -> io::Result<Facts> {
    let mut facts = Facts::default();
    let mut t0 = None;
    let tail = read_lines(r, |piece| {
        facts.lines += 1;
        let line = match piece {
            Piece::Line(l) => l,
            Piece::Overlong(_) => {
                facts.last = None;
                return;
            }
        };
        // A copy, not a hash: only the last line's is ever needed.
        let last = facts.last.get_or_insert_with(Vec::new);
        last.clear();
        last.extend_from_slice(line);
        let Ok(rec) = parse_line(line) else {
            return;
        };
        let at = rec.mono_ns.saturating_sub(*t0.get_or_insert(rec.mono_ns));
        facts.identity.note(&rec.run, &rec.ts, at, &rec.event);
        facts.timeline.note(at, &rec.event);
        facts.tree.note(&rec.event);
        facts.staging.note(&rec.event);
    })?;
    facts.torn = tail.is_some();
    Ok(facts)
}

/// Rows of the table (`#line-N` anchors exist for N up to this).
fn rows(facts: &Facts) -> u64 {
    (facts.lines + u64::from(facts.torn)).min(records::MAX_ROWS)
}

/// Whether the drawings' reading agrees with what verify said of its own:
/// its head and, for a log it did not find tampered, its count of lines.
/// (Both passes' bytes are compared in full by `source`; this is the
/// verdict's own word against them.) `Some(why)` when not.
fn disagrees(c: &Checked, facts: &Facts, verify_newlines: Option<u64>) -> Option<String> {
    let lines = Some(c.records());
    let mine = facts
        .last
        .as_ref()
        .map(|l| crate::vocab::hex(&Sha256::digest(l)));
    match (c.head(), mine.as_deref()) {
        (Some(v), Some(mine)) if v != mine => {
            return Some(format!(
                "verify's head {v}, the report's reading ends on {mine}"
            ))
        }
        (None, Some(_)) if lines == Some(0) => {
            return Some("verify read no line, the report did".into())
        }
        _ => {}
    }
    match (lines, verify_newlines) {
        (Some(n), Some(read)) if !c.tampered() && n != read => Some(format!(
            "verify counted {n} records in {read} lines it read"
        )),
        _ => None,
    }
}

fn not_watchdog(kind: LogKind) -> String {
    format!(
        "<p class=\"note\">A {} log: it records no job and no stop; its records are in the table below.</p>\n",
        match kind {
            LogKind::Discard => "discard",
            LogKind::Removal => "removal",
            _ => "recovery",
        }
    )
}

/// The line under the title: which report, of which log, when.
fn made(opts: &Options) -> String {
    format!(
        "<p class=\"note\">rea-audit report {} of <code>{}</code>, made {} (UTC). The verdict below is <code>rea-audit verify</code>'s; everything else is what the log says.</p>\n",
        env!("CARGO_PKG_VERSION"),
        text(&opts.log.display().to_string()),
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// The page before the table: banner, run, timeline, tree, staging.
fn top(opts: &Options, c: &Checked, facts: &Facts) -> String {
    let untrusted = c.tampered();
    let run = c.run().or(facts.identity.run()).unwrap_or("unknown run");
    let mut s = html::head(
        &format!("rea report: {run}"),
        if untrusted { "untrusted" } else { "trusted" },
    );
    let log = opts.log.display().to_string();
    s.push_str(&made(opts));
    let cx = verdict::Context {
        pinned: opts.expect_head.is_some(),
        rows: rows(facts),
        judged_bytes: facts.bytes,
    };
    s.push_str(&verdict::banner(c, &cx));
    s.push_str(&section("run", "The run", untrusted));
    s.push_str(&facts.identity.render(c, &log));
    s.push_str("</section>\n");
    s.push_str(&section("timeline", "Timeline", untrusted));
    if c.kind() == LogKind::Watchdog {
        s.push_str(&timeline_section(&facts.timeline));
    } else {
        s.push_str(&not_watchdog(c.kind()));
    }
    s.push_str("</section>\n");
    s.push_str(&section("tree", "The process tree of the stop", untrusted));
    if c.kind() == LogKind::Watchdog {
        s.push_str(&facts.tree.render());
    } else {
        s.push_str(&not_watchdog(c.kind()));
    }
    s.push_str("</section>\n");
    s.push_str(&section("staging", "Staging directory", untrusted));
    s.push_str(&facts.staging.render());
    s.push_str("</section>\n");
    s.push_str(&section("records", "Records", untrusted));
    s
}

fn timeline_section(t: &timeline::Timeline) -> String {
    let mut s = String::from(
        "<p class=\"note\">Time is since the first record (its monotonic clock). A lane per job from its spawn to its exit; a launcher a job asked for is drawn under that job. Hover a mark for what it records.</p>\n",
    );
    let end = t.end.max(1_000_000);
    let whole = svg::Window {
        from: 0,
        to: end.saturating_add(end / 8),
    };
    s.push_str("<figure class=\"svgwrap\">\n");
    s.push_str(&svg::draw(t, whole, "timeline", "the whole run"));
    s.push_str("<figcaption class=\"note\">The whole run.</figcaption>\n</figure>\n");
    if let Some(at) = t.stop_at {
        let stop = t.end.saturating_sub(at);
        if stop.saturating_mul(3) < t.end {
            let pad = (stop / 20).max(100_000);
            let w = svg::Window {
                from: at.saturating_sub(pad),
                to: t
                    .end
                    .saturating_add(pad)
                    .saturating_add(stop.saturating_add(pad.saturating_mul(2)) / 8),
            };
            s.push_str("<figure class=\"svgwrap\">\n");
            s.push_str(&svg::draw(t, w, "timeline-stop", "the stop, close up"));
            let _ = writeln!(
                s,
                "<figcaption class=\"note\">The stop, close up: {:.3} ms from the first trigger to the last record.</figcaption>\n</figure>",
                stop as f64 / 1e6
            );
        }
    }
    s.push_str(&svg::legend());
    if t.lanes.is_empty() {
        s.push_str("<p class=\"note\">No job was spawned.</p>\n");
    }
    if t.lanes_left_out > 0 {
        let _ = writeln!(
            s,
            "<p class=\"note\">{} more job(s) not drawn: the timeline draws the first {}.</p>",
            t.lanes_left_out,
            timeline::MAX_LANES
        );
    }
    let lane_marks: u64 = t.lanes.iter().map(|l| l.marks_left_out).sum();
    if t.marks_left_out + lane_marks > 0 {
        let _ = writeln!(
            s,
            "<p class=\"note\">{} mark(s) not drawn (at most {} for the stop, {} a lane); the table lists every record.</p>",
            t.marks_left_out + lane_marks,
            timeline::MAX_MARKS,
            timeline::MAX_LANE_MARKS
        );
    }
    s
}

/// The section with the command that re-verifies (`head`: the one to
/// pin, when there is one to give).
fn reverify(opts: &Options, head: Option<&str>) -> String {
    let cmd = quote::command(&opts.log, head, opts.staging.as_deref());
    let mut s = section("reverify", "Verify it yourself", false);
    let _ = writeln!(s, "<pre id=\"reverify-command\">{}</pre>", esc(&cmd));
    s.push_str(
        "<p class=\"note\">Exit status 0 is delete_allowed (the stage may be deleted), 1 retain, \
2 incomplete, 3 tampered, 4 error. ",
    );
    if opts.expect_head.is_some() {
        s.push_str("The head is the one this report was asked to expect.");
    } else if head.is_some() {
        s.push_str(
            "The head is the log's own as read now: pin the head the watchdog printed when it \
sealed the log instead, where you have it; only a pinned head detects a log cut short and re-chained.",
        );
    } else {
        s.push_str(
            "Pin the head the watchdog printed when it sealed the log (--expect-head): only a \
pinned head detects a log cut short and re-chained.",
        );
    }
    s.push_str("</p>\n</section>\n");
    s
}

/// The whole page for a log that changed while it was read: the banner
/// that says so, and the command; nothing drawn from the log.
fn changed_page(opts: &Options, why: &str) -> String {
    let mut s = html::head("rea report: the log changed while read", "untrusted");
    s.push_str(&made(opts));
    s.push_str(&verdict::changed_banner(why));
    s.push_str(&reverify(opts, opts.expect_head.as_deref()));
    s.push_str(html::TAIL);
    s
}

/// The page from the banner to the end; the table is the log's third
/// pass. `Err`: the page (or the log) could not be written (or read).
fn write_page<W: Write>(
    out: &mut W,
    opts: &Options,
    c: &Checked,
    facts: &Facts,
    log: &mut passes::Log,
) -> Result<(), Failure> {
    let name = crate::audit::people::escape(&opts.log.display().to_string());
    let failed = |e: io::Error| Failure::Write(format!("the page: {e}"));
    out.write_all(top(opts, c, facts).as_bytes())
        .map_err(failed)?;
    let flagged: Vec<u64> = c.reasons().iter().filter_map(|r| r.line).take(64).collect();
    let total = facts.lines + u64::from(facts.torn);
    log.pass(|r| records::write_table(r, out, &flagged, total))
        .map_err(|e| Failure::Read(format!("{name}: {e}")))?
        .map_err(failed)?;
    out.write_all(b"</section>\n").map_err(failed)?;
    let head = opts.expect_head.as_deref().or(c.head());
    out.write_all(reverify(opts, head).as_bytes())
        .map_err(failed)?;
    out.write_all(html::TAIL.as_bytes()).map_err(failed)?;
    out.flush().map_err(failed)
}

/// Makes the report; `Ok` is verify's exit status for the log (3 when the
/// log changed while it was read).
pub fn run(opts: &Options) -> Result<i32, Failure> {
    if let Some(h) = &opts.expect_head {
        if !crate::log::chain::is_digest(h) {
            return Err(Failure::Usage(
                "--expect-head must be 64 lowercase hex digits".into(),
            ));
        }
    }
    let name = crate::audit::people::escape(&opts.log.display().to_string());
    let read_failed = |e: &dyn std::fmt::Display| Failure::Read(format!("{name}: {e}"));
    let mut log = passes::Log::open(&opts.log).map_err(|e| read_failed(&e))?;
    let target = output::Target::resolve(&opts.output, opts.staging.as_deref())?;
    target.refuse_log(log.meta())?;
    // Pass 1: verify, on this descriptor's bytes.
    let first = log.start().map_err(|e| read_failed(&e))?;
    let shown = opts.log.display().to_string();
    let c = log
        .pass(|r| {
            crate::audit::checked::check(
                r,
                &first,
                &shown,
                opts.staging.as_ref(),
                opts.expect_head.as_deref(),
            )
        })
        .map_err(|e| read_failed(&e))?
        .map_err(|e| Failure::Usage(e.to_string()))?;
    if c.exit_code() == 4 {
        let why: Vec<String> = c.reasons().into_iter().map(|r| r.detail).collect();
        return Err(Failure::Read(format!("{name}: {}", why.join("; "))));
    }
    // Pass 2: the drawings.
    let facts = log
        .pass(|r| gather(r))
        .map_err(|e| read_failed(&e))?
        .map_err(|e| read_failed(&e))?;
    let mut facts = facts;
    facts.bytes = log.first().map_or(0, |p| p.bytes);
    let verify_newlines = log.first().map(|p| p.newlines);
    // Unfinished: its watchdog may still be appending (see `passes`).
    let still_written = c.exit_code() == 2;
    let mut changed = log
        .changed(still_written)
        .or_else(|| disagrees(&c, &facts, verify_newlines));
    // No wider permissions than the log's own: the page tells what it tells.
    let mode = (log.meta().permissions().mode() & 0o666) | 0o600;
    let mut sink = output::Sink::new(target, mode)?;
    if changed.is_none() {
        // Pass 3: the table, inside the page.
        let mut out = io::BufWriter::new(sink.file());
        write_page(&mut out, opts, &c, &facts, &mut log)?;
        drop(out);
        changed = log.changed(still_written);
        if changed.is_some() {
            sink.restart()?;
        }
    }
    if let Some(why) = &changed {
        sink.file()
            .write_all(changed_page(opts, why).as_bytes())
            .map_err(|e| Failure::Write(format!("the page: {e}")))?;
    }
    sink.finish()?;
    Ok(if changed.is_some() { 3 } else { c.exit_code() })
}
