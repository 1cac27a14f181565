//! `rea-audit report` (SPEC 9): one self-contained HTML page a reviewer
//! reads or prints, no external resource and no script.
//!
//! Verification comes first, by the verifier `verify` and `show` use, and
//! its verdict is the banner; a tampered log is still drawn, marked
//! untrusted throughout. Then the run, the timeline (inline SVG), the
//! process tree of the stop, the staging inventory, every record, and the
//! command that re-verifies. The log is read the way every command reads
//! one (`open_log`: `O_NONBLOCK`, a regular file or nothing), in one
//! streamed pass for the drawings and a second over the same descriptor
//! for the table: memory is bounded by the line cap and the drawings'
//! caps, never by the log's size. The page goes to a temporary file beside
//! the output and is renamed over it only when whole.

mod html;
mod identity;
mod quote;
mod records;
mod staging;
mod svg;
mod timeline;
mod tree;
mod verdict;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::audit::reader::{open_log, parse_line, read_lines, Piece};

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

/// Why no page was written (exit status 4, as verify's error).
#[derive(Debug)]
pub enum Failure {
    /// The command line does not make sense (said before anything is read).
    Usage(String),
    /// The log could not be read: nothing to report on.
    Read(String),
    /// The page could not be written (nothing is left half-written).
    Write(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Read(m) | Failure::Write(m) => f.write_str(m),
        }
    }
}

/// Everything the first pass gathers.
#[derive(Default)]
struct Facts {
    identity: identity::Identity,
    timeline: timeline::Timeline,
    tree: tree::Tree,
    staging: staging::Staging,
    /// SHA-256 of the last complete line read (`None` after an overlong
    /// last line, which is never held whole).
    last_hash: Option<String>,
    lines: u64,
}

fn gather(f: &File) -> io::Result<Facts> {
    let mut facts = Facts::default();
    let mut t0 = None;
    read_lines(f, |piece| {
        facts.lines += 1;
        let line = match piece {
            Piece::Line(l) => l,
            Piece::Overlong(_) => {
                facts.last_hash = None;
                return;
            }
        };
        facts.last_hash = Some(crate::vocab::hex(&Sha256::digest(line)));
        let Ok(rec) = parse_line(line) else {
            return;
        };
        let at = rec.mono_ns.saturating_sub(*t0.get_or_insert(rec.mono_ns));
        facts.identity.note(&rec.run, &rec.ts, at, &rec.event);
        facts.timeline.note(at, &rec.event);
        facts.tree.note(&rec.event);
        facts.staging.note(&rec.event);
    })?;
    Ok(facts)
}

/// Whether the first pass read what verify read: the same number of
/// complete lines ending on the same head. `Some(why)` when not.
fn changed(c: &Checked, facts: &Facts) -> Option<String> {
    let lines = c.verdict["records"].as_u64();
    match (c.head(), facts.last_hash.as_deref()) {
        (Some(v), Some(mine)) if v != mine => Some(format!(
            "verify's head {v}, the report's reading ends on {mine}"
        )),
        (None, Some(_)) if lines == Some(0) => Some("verify read no line, the report did".into()),
        _ => None,
    }
}

fn not_watchdog(kind: LogKind) -> String {
    format!(
        "<p class=\"note\">A {} log: it records no job and no stop; its records are in the table below.</p>\n",
        if kind == LogKind::Discard { "discard" } else { "recovery" }
    )
}

/// The page before the table: banner, run, timeline, tree, staging.
fn top(opts: &Options, c: &Checked, facts: &Facts) -> String {
    let untrusted = c.tampered() || changed(c, facts).is_some();
    let run = c.run().or(facts.identity.run()).unwrap_or("unknown run");
    let mut s = html::head(
        &format!("rea report: {run}"),
        if untrusted { "untrusted" } else { "trusted" },
    );
    let log = opts.log.display().to_string();
    let _ = writeln!(
        s,
        "<p class=\"note\">rea-audit report {} of <code>{}</code>, made {} (UTC). The verdict below is <code>rea-audit verify</code>'s; everything else is what the log says.</p>",
        env!("CARGO_PKG_VERSION"),
        text(&log),
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
    );
    s.push_str(&verdict::banner(c, changed(c, facts).as_deref()));
    s.push_str(&section("run", "The run", untrusted));
    s.push_str(&facts.identity.render(c, &log));
    s.push_str("</section>\n");
    s.push_str(&section("timeline", "Timeline", untrusted));
    if c.kind == LogKind::Watchdog {
        s.push_str(&timeline_section(&facts.timeline));
    } else {
        s.push_str(&not_watchdog(c.kind));
    }
    s.push_str("</section>\n");
    s.push_str(&section("tree", "The process tree of the stop", untrusted));
    if c.kind == LogKind::Watchdog {
        s.push_str(&facts.tree.render());
    } else {
        s.push_str(&not_watchdog(c.kind));
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
        to: end + end / 8,
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
                to: t.end + pad + (stop + 2 * pad) / 8,
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

/// The end of the page: the command that re-verifies.
fn bottom(opts: &Options, c: &Checked) -> String {
    let head = opts.expect_head.as_deref().or(c.head());
    let cmd = quote::command(&opts.log, head, opts.staging.as_deref());
    let mut s = String::from("</section>\n");
    s.push_str(&section("reverify", "Verify it yourself", false));
    let _ = writeln!(s, "<pre id=\"reverify-command\">{}</pre>", esc(&cmd));
    s.push_str(
        "<p class=\"note\">Exit status 0 is delete_allowed (the stage may be deleted), 1 retain, \
2 incomplete, 3 tampered, 4 error. ",
    );
    if opts.expect_head.is_some() {
        s.push_str("The head is the one this report was asked to expect.");
    } else {
        s.push_str(
            "The head is the log's own as read now: pin the head the watchdog printed when it \
sealed the log instead, where you have it; only a pinned head detects a log cut short and re-chained.",
        );
    }
    s.push_str("</p>\n</section>\n");
    s.push_str(html::TAIL);
    s
}

fn write_page<W: Write>(
    out: &mut W,
    opts: &Options,
    c: &Checked,
    facts: &Facts,
    f: &File,
) -> io::Result<()> {
    out.write_all(top(opts, c, facts).as_bytes())?;
    let flagged: Vec<u64> = c.reasons().iter().filter_map(|r| r.1).take(64).collect();
    let mut f = f;
    f.rewind()?;
    records::write_table(f, out, &flagged)?;
    out.write_all(bottom(opts, c).as_bytes())?;
    out.flush()
}

/// A temporary file beside `out`, private to this run of the command.
fn temp_beside(out: &Path, mode: u32) -> Result<(PathBuf, File), Failure> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| Failure::Write(format!("{}: {e}", tmp.display())))?;
    Ok((tmp, f))
}

/// Makes the report; `Ok` is verify's exit status for the log.
pub fn run(opts: &Options) -> Result<i32, Failure> {
    if let Some(h) = &opts.expect_head {
        if !crate::audit::chain::is_digest(h) {
            return Err(Failure::Usage(
                "--expect-head must be 64 lowercase hex digits".into(),
            ));
        }
    }
    let name = crate::audit::people::escape(&opts.log.display().to_string());
    let f = open_log(&opts.log).map_err(|e| Failure::Read(format!("{name}: {e}")))?;
    let log_meta = f
        .metadata()
        .map_err(|e| Failure::Read(format!("{name}: {e}")))?;
    if let Output::File(out) = &opts.output {
        // Renaming over the log would destroy the evidence.
        if let Ok(m) = std::fs::metadata(out) {
            if m.dev() == log_meta.dev() && m.ino() == log_meta.ino() {
                return Err(Failure::Usage(
                    "-o names the log itself: the report is written beside it, never over it"
                        .into(),
                ));
            }
            if m.is_dir() {
                return Err(Failure::Usage(format!(
                    "-o {}: is a directory",
                    crate::audit::people::escape(&out.display().to_string())
                )));
            }
        }
    }
    let c = verdict::check(
        &opts.log,
        opts.staging.as_ref(),
        opts.expect_head.as_deref(),
    )
    .map_err(Failure::Usage)?;
    if c.exit_code() == 4 {
        let why: Vec<String> = c.reasons().into_iter().map(|r| r.2).collect();
        return Err(Failure::Read(format!("{name}: {}", why.join("; "))));
    }
    let facts = gather(&f).map_err(|e| Failure::Read(format!("{name}: {e}")))?;
    let code = c.exit_code();
    match &opts.output {
        Output::Stdout => {
            let stdout = io::stdout();
            let mut out = io::BufWriter::new(stdout.lock());
            write_page(&mut out, opts, &c, &facts, &f)
                .map_err(|e| Failure::Write(format!("standard output: {e}")))?;
        }
        Output::File(path) => {
            // No wider permissions than the log's own: the page tells what it tells.
            let mode = (log_meta.permissions().mode() & 0o666) | 0o600;
            let (tmp, file) = temp_beside(path, mode)?;
            let mut out = io::BufWriter::new(file);
            let done = write_page(&mut out, opts, &c, &facts, &f)
                .and_then(|()| out.into_inner().map_err(|e| e.into_error()))
                .and_then(|file| file.sync_all())
                .and_then(|()| std::fs::rename(&tmp, path));
            if let Err(e) = done {
                let _ = std::fs::remove_file(&tmp);
                return Err(Failure::Write(format!(
                    "{}: {e}",
                    crate::audit::people::escape(&path.display().to_string())
                )));
            }
        }
    }
    Ok(code)
}
