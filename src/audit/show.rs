//! `rea-audit show`: the log as a timeline for people. Lines that do not
//! parse are shown as such; `show` never judges (that is `verify`'s job).
//! It streams (memory bounded by the line cap, whatever the log's size) and
//! every line it prints goes through [`people::escape`]: argv, comm, ids and
//! details are chosen by jobs and never reach the terminal raw.

use super::checked::Checked;
use super::people::{self, cut, word};
use super::reader::{parse_line, read_lines, Piece, Wire};
pub use super::summary::summary;
use crate::kinds::watchdog::{Event, Ident, JobSpawned};
use crate::log::Kind as _;
use crate::log::MAX_LINE;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};

/// One line of the timeline: the log's line number, and for a record its
/// seq, its time since the first record, its kind; `text` is unescaped
/// (the text form escapes it, JSON escapes by itself).
#[derive(serde::Serialize, Debug)]
pub struct ShowLine {
    pub line: u64,
    pub seq: Option<u64>,
    pub at_ms: Option<f64>,
    pub kind: Option<String>,
    pub text: String,
}

impl ShowLine {
    /// A line that is no record (unreadable, torn): its number and text.
    fn plain(line: u64, text: String) -> ShowLine {
        ShowLine {
            line,
            seq: None,
            at_ms: None,
            kind: None,
            text,
        }
    }
}

/// Characters of a job's name kept to name it as the one that asked for a
/// later job (its own record's line says it in full).
const ASKER_NAME_KEPT: usize = 64;
/// Running jobs remembered at once; a log with more (no watchdog writes
/// one) names the rest by number only.
const MAX_LEADERS: usize = 16_384;
/// Jobs remembered after their exit, for a `caller_job` that names one
/// (verify refuses such a log, but it is still shown).
const MAX_EXITED: usize = 64;

/// Who asked for each job, by the leaders seen so far: a nested launcher
/// is named by the job that asked for it. Bounded whatever the log's
/// size: running leaders by (pid, start time) and by job number (at most
/// [`MAX_LEADERS`]), names cut to [`ASKER_NAME_KEPT`] characters, a job
/// dropped at its exit but for the last [`MAX_EXITED`] names.
#[derive(Default)]
pub(crate) struct Askers {
    root: Option<Ident>,
    /// A running job's leader, by (pid, start time): its job number.
    leaders: HashMap<(i32, u64), u64>,
    /// A running job, by number: its leader and its name (cut).
    jobs: HashMap<u64, ((i32, u64), String)>,
    /// Jobs that exited, most recent last: number and name (cut).
    exited: VecDeque<(u64, String)>,
}

impl Askers {
    /// The job whose leader is `who`, among the running ones.
    fn job_led_by(&self, who: &Ident) -> Option<u64> {
        self.leaders.get(&(who.pid, who.start_time)).copied()
    }

    /// Whether `who` is the root controller.
    fn is_root(&self, who: &Ident) -> bool {
        self.root.is_some_and(|r| same(&r, who))
    }

    fn name_of(&self, job: u64) -> Option<&str> {
        match self.jobs.get(&job) {
            Some((_, name)) => Some(name),
            None => self
                .exited
                .iter()
                .rev()
                .find(|(n, _)| *n == job)
                .map(|(_, name)| name.as_str()),
        }
    }

    /// Who asked for `j`, told before `j` itself is noted: the job its
    /// caller belonged to as the watchdog recorded it at admission
    /// (`caller_job`, whoever in that job's tree asked); in a log without
    /// it, the job whose leader itself asked, the controller, or a
    /// descendant the log does not tie to a job.
    pub(crate) fn asker(&self, j: &JobSpawned) -> Asker {
        if let Some(n) = j.caller_job {
            return Asker::Job(n);
        }
        let Some(c) = j.caller else {
            return Asker::Unknown;
        };
        match self.job_led_by(&c) {
            Some(n) => Asker::Job(n),
            None if self.is_root(&c) => Asker::Controller,
            None => Asker::Descendant(c.pid),
        }
    }

    /// [`Askers::asker`] in `show`'s words; `None` when not recorded.
    fn says(&self, a: &Asker) -> Option<String> {
        Some(match *a {
            Asker::Job(n) => match self.name_of(n) {
                Some(name) => format!("asked by job {n} ({name})"),
                None => format!("asked by job {n}"),
            },
            Asker::Controller => "asked by the controller".into(),
            Asker::Descendant(pid) => format!("asked by pid {pid} (a descendant)"),
            Asker::Unknown => return None,
        })
    }

    /// Keeps what later records need: the root, and the running jobs'
    /// leaders and names (bounded).
    pub(crate) fn note(&mut self, ev: &Event) {
        match ev {
            Event::RootBound(r) => self.root = r.root,
            Event::JobSpawned(j) => {
                let key = (j.pid, j.start_time);
                if self.jobs.len() < MAX_LEADERS && !self.jobs.contains_key(&j.job) {
                    let name = cut(j.name.as_deref().unwrap_or(&j.id), ASKER_NAME_KEPT);
                    self.leaders.entry(key).or_insert(j.job);
                    self.jobs.insert(j.job, (key, name));
                }
            }
            Event::JobExited(j) => {
                if let Some((key, name)) = self.jobs.remove(&j.job) {
                    if self.leaders.get(&key) == Some(&j.job) {
                        self.leaders.remove(&key);
                    }
                    if self.exited.len() >= MAX_EXITED {
                        self.exited.pop_front();
                    }
                    self.exited.push_back((j.job, name));
                }
            }
            _ => {}
        }
    }
}

/// Who asked for a job ([`Askers::asker`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Asker {
    Job(u64),
    Controller,
    Descendant(i32),
    Unknown,
}

fn same(a: &Ident, b: &Ident) -> bool {
    a.pid == b.pid && a.start_time == b.start_time
}

/// Reads the log from `r` and calls `each` with one [`ShowLine`] per line
/// (unreadable and torn lines included, said as such).
pub fn each_line<R: io::Read>(r: R, mut each: impl FnMut(ShowLine)) -> io::Result<()> {
    let mut t0 = None;
    let mut n = 0u64;
    let mut askers = Askers::default();
    let torn = read_lines(r, |piece| {
        n += 1;
        let plain = |text: String| ShowLine::plain(n, text);
        // A record of any log kind: its envelope, and what it says.
        let mut record = |seq: u64, mono_ns: u64, kind: String, text: String| {
            let us = mono_ns.saturating_sub(*t0.get_or_insert(mono_ns)) / 1000;
            ShowLine {
                line: n,
                seq: Some(seq),
                at_ms: Some(us as f64 / 1000.0),
                kind: Some(kind),
                text,
            }
        };
        let shown = match piece {
            Piece::Overlong(len) => plain(format!(
                "unreadable (line_too_long: {len} bytes; the cap is {MAX_LINE})"
            )),
            Piece::Line(line) => match parse_line(line) {
                Ok(rec) => {
                    let mut text = summary(&rec.event).trim_end().to_string();
                    if let Event::JobSpawned(j) = &rec.event {
                        if let Some(by) = askers.says(&askers.asker(j)) {
                            text = format!("{text} ({by})");
                        }
                    }
                    askers.note(&rec.event);
                    record(rec.seq, rec.mono_ns, rec.event.kind().to_string(), text)
                }
                // Not a watchdog's record: a discard log's or a recovery
                // log's (same envelope, their own kinds), or unreadable.
                Err(e) => match other_log_line(line) {
                    Some((w, text)) => record(w.seq, w.mono_ns, w.kind.into_owned(), text),
                    None => plain(format!("unreadable ({}: {})", word(&e.code), e.detail)),
                },
            },
        };
        each(shown);
    })?;
    if let Some(t) = torn {
        let text = format!("torn last line: {} bytes without a newline", t.len());
        each(ShowLine::plain(n + 1, text));
    }
    Ok(())
}

/// A discard, removal or recovery log's record: its envelope and what it
/// says (`None`: neither).
fn other_log_line(line: &[u8]) -> Option<(Wire<'_>, String)> {
    let w: Wire = serde_json::from_slice(line).ok()?;
    let text = super::stage::log::show_line(&w)
        .or_else(|| super::stage::remove_log::show_line(&w))
        .or_else(|| super::recover::log::show_line(&w))?;
    Some((w, text))
}

/// Writes the timeline of the log read from `r` to `out`, one line per
/// log line, escaped for a terminal.
pub fn write_timeline<R: io::Read, W: Write>(r: R, out: &mut W) -> io::Result<()> {
    let mut failed: Option<io::Error> = None;
    each_line(r, |l| {
        if failed.is_some() {
            return;
        }
        let text = match (l.seq, l.at_ms, &l.kind) {
            (Some(seq), Some(ms), Some(kind)) => {
                format!("{seq:>5} {ms:>11.3}ms  {kind:<22} {}", l.text)
            }
            _ => format!("line {}: {}", l.line, l.text),
        };
        if let Err(e) = writeln!(out, "{}", people::escape(&text)) {
            failed = Some(e);
        }
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The whole timeline as text (for a log held in memory).
pub fn timeline(data: &[u8]) -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_timeline(data, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The first lines `show` prints, before the timeline: what verification
/// found (`verdict` is any of the three verifiers' `--json` objects: a
/// watchdog log's, a discard log's, a recovery log's), the run and when
/// it started (the first record's wall clock), the head, and the reasons.
/// Unescaped: the caller escapes them with the timeline.
pub fn header(log: &str, verdict: &Checked, started: Option<&str>) -> Vec<String> {
    const SHOWN: usize = 10;
    let decision = verdict.decision();
    let status = Some(verdict.status()).filter(|s| *s != decision);
    let mut out = vec![format!("log       {log}")];
    out.push(format!(
        "verdict   {decision}{} (verify's exit status {})",
        status.map(|s| format!(": {s}")).unwrap_or_default(),
        verdict.exit_code()
    ));
    out.push(format!(
        "run       {}{}",
        verdict.run().unwrap_or("unknown"),
        started
            .map(|t| format!(", started {t}"))
            .unwrap_or_default()
    ));
    let sealed = match verdict.sealed() {
        Some(true) => " (sealed)",
        Some(false) => " (not sealed)",
        None => "",
    };
    out.push(format!(
        "head      {}{sealed}",
        verdict.head().unwrap_or("none (no complete line)")
    ));
    let mut reasons: Vec<String> = Vec::new();
    for r in verdict.reasons() {
        let at = r.line.map(|l| format!(" at line {l}")).unwrap_or_default();
        reasons.push(format!("{}{at}: {}", r.code, r.detail));
    }
    let total = reasons.len();
    for (i, r) in reasons.into_iter().take(SHOWN).enumerate() {
        out.push(format!(
            "{} {r}",
            if i == 0 { "reason   " } else { "         " }
        ));
    }
    if total > SHOWN {
        out.push(format!(
            "          +{} more (rea-audit verify LOG --json)",
            total - SHOWN
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::summary;
    use crate::kinds::watchdog::{Event, Link, Sig, SignalSweep, Stage};

    /// A part that only lists members passed over says so, not "SIGKILL
    /// to 0 process(es)".
    #[test]
    fn a_part_with_no_target_says_nothing_was_signalled() {
        let part = |targets| {
            Event::SignalSweep(SignalSweep {
                sweep: 6,
                part: 3,
                stage: Stage::Kill,
                signals: vec![Sig::KILL],
                targets,
                others: (1..=5).map(|pid| Link { pid, ppid: 1 }).collect(),
                cont: Vec::new(),
            })
        };
        assert_eq!(
            summary(&part(Vec::new())),
            "sweep 6 KILL (part 3): nothing signalled; 5 process(es) passed over"
        );
    }
}
