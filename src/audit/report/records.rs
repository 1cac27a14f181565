//! The table of records: seq, time since the first record, kind, and the
//! line `rea-audit show` prints for it (`show::each_line`, the same words,
//! launchers named by who asked), every line of the log, streamed. Capped
//! at [`MAX_ROWS`] rows of at most [`TEXT_KEPT`] characters, so a huge log
//! makes a page of bounded size; the rest is counted and said. Each row
//! has an anchor (`#line-N`), which the banner's reasons link to, and the
//! lines a reason names are flagged.

use std::io::{self, Read, Write};

use super::html::{short, text};
use crate::audit::show::each_line;

pub const MAX_ROWS: u64 = 5000;
const TEXT_KEPT: usize = 1000;

/// Streams the table of the log read from `r` into `out`; `flagged` are
/// the line numbers the verdict's reasons name.
pub fn write_table<R: Read, W: Write>(r: R, out: &mut W, flagged: &[u64]) -> io::Result<()> {
    out.write_all(
        b"<table class=\"records\">\n<thead><tr><th>seq</th><th>ms</th><th>kind</th><th>what it says</th></tr></thead>\n<tbody>\n",
    )?;
    let mut failed: Option<io::Error> = None;
    let mut rows = 0u64;
    let mut lines = 0u64;
    each_line(r, |l| {
        lines += 1;
        if failed.is_some() || rows >= MAX_ROWS {
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
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    out.write_all(b"</tbody>\n</table>\n")?;
    if lines > rows {
        writeln!(
            out,
            "<p class=\"note\">{} more line(s) not shown: the table keeps the first {MAX_ROWS}; \
<code>rea-audit show LOG</code> prints them all.</p>",
            lines - rows
        )?;
    }
    if lines == 0 {
        out.write_all(b"<p class=\"note\">The log has no line.</p>\n")?;
    }
    Ok(())
}
