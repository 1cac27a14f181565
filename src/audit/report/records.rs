//! The table of records: seq, time since the first record, kind, and the
//! line `rea-audit show` prints for it (`show::each_line`, the same words,
//! launchers named by who asked), every line of the log, streamed. Capped
//! at [`MAX_ROWS`] rows of at most [`TEXT_KEPT`] characters, so a huge log
//! makes a page of bounded size; the rest is counted and said. Each row
//! has an anchor (`#line-N`), which the banner's reasons link to, and the
//! lines a reason names are flagged.

use std::cell::Cell;
use std::io::{self, Read, Write};

use super::html::{short, text};
use crate::audit::show::each_line;

pub const MAX_ROWS: u64 = 5000;
const TEXT_KEPT: usize = 1000;

/// A reader that says end of file once `stop` is set: the table reads no
/// further than its last row (what is left is read, and hashed, by the
/// pass itself), so a huge log is not parsed and summarised again only to
/// be counted.
struct Until<'a, R> {
    r: R,
    stop: &'a Cell<bool>,
}

impl<R: Read> Read for Until<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stop.get() {
            return Ok(0);
        }
        self.r.read(buf)
    }
}

/// Streams the table of the log read from `r` into `out`; `flagged` are
/// the line numbers the verdict's reasons name; `total` the rows the whole
/// log makes (its lines, and a torn last one), as the drawings' pass
/// counted them.
pub fn write_table<R: Read, W: Write>(
    r: R,
    out: &mut W,
    flagged: &[u64],
    total: u64,
) -> io::Result<()> {
    out.write_all(
        b"<table class=\"records\">\n<thead><tr><th>seq</th><th>ms</th><th>kind</th><th>what it says</th></tr></thead>\n<tbody>\n",
    )?;
    let mut failed: Option<io::Error> = None;
    let mut rows = 0u64;
    let stop = Cell::new(false);
    each_line(Until { r, stop: &stop }, |l| {
        if failed.is_some() || rows >= MAX_ROWS {
            stop.set(true);
            return;
        }
        rows += 1;
        let class = if flagged.contains(&l.line) {
            " class=\"flagged\""
        } else {
            ""
        };
        let row = match (l.seq, l.at_ms, &l.kind) {
            (Some(seq), Some(ms), Some(kind)) => format!(
                "<tr id=\"line-{}\"{class}><td class=\"num\">{seq}</td><td class=\"num\">{ms:.3}</td><td class=\"mono\">{}</td><td class=\"text\">{}</td></tr>\n",
                l.line,
                text(kind),
                short(&l.text, TEXT_KEPT)
            ),
            _ => format!(
                "<tr id=\"line-{}\"{class}><td class=\"num\">line {}</td><td></td><td></td><td class=\"text\">{}</td></tr>\n",
                l.line,
                l.line,
                short(&l.text, TEXT_KEPT)
            ),
        };
        if let Err(e) = out.write_all(row.as_bytes()) {
            failed = Some(e);
        }
        if rows >= MAX_ROWS {
            stop.set(true);
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    out.write_all(b"</tbody>\n</table>\n")?;
    if total > rows {
        writeln!(
            out,
            "<p class=\"note\">{} more line(s) not shown: the table keeps the first {MAX_ROWS}; \
<code>rea-audit show LOG</code> prints them all.</p>",
            total - rows
        )?;
    }
    if total == 0 {
        out.write_all(b"<p class=\"note\">The log has no line.</p>\n")?;
    }
    Ok(())
}
