//! The timeline drawn as inline SVG (no script, no external font or
//! image): an axis in milliseconds since the first record, the stop's own
//! lane (triggers, each sweep with how many processes it signalled, the
//! end of the ask, `cgroup.kill`, the stop's completion, the receipt) and
//! a lane per job, nested launchers indented under the job that asked for
//! them. Every text from the log goes through `html::text`; a mark's full
//! story is its `<title>` (a tooltip on screen, absent on paper).

use std::fmt::Write as _;

use super::html::{esc, short, text};
use super::timeline::{stage_word, Asker, Lane, Mark, MarkKind, Timeline};
use crate::kinds::watchdog::Stage;

const WIDTH: f64 = 1240.0;
const X0: f64 = 320.0;
const PLOT: f64 = 880.0;
const AXIS_H: f64 = 30.0;
const LANE_H: f64 = 24.0;
const ROW_H: f64 = 13.0;
const ROWS: usize = 4;
const INDENT: f64 = 14.0;
const MAX_DEPTH_DRAWN: usize = 8;

/// The part of the run a drawing shows, in nanoseconds since the first record.
#[derive(Clone, Copy)]
pub struct Window {
    pub from: u64,
    pub to: u64,
}

impl Window {
    /// The x of time `t`, kept inside the plot. Never panics: a window
    /// given backwards (`from` > `to`) is read as empty at `from`.
    fn x(&self, t: u64) -> f64 {
        let to = self.to.max(self.from);
        let span = (to - self.from).max(1) as f64;
        let t = t.max(self.from).min(to);
        X0 + (t - self.from) as f64 * PLOT / span
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Tick spacing: 1, 2 or 5 times a power of ten, at most about ten ticks.
fn tick_step(span_ms: f64) -> f64 {
    let rough = (span_ms / 10.0).max(1e-6);
    let p = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * p)
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{v:.decimals$} ms")
}

fn colour(k: MarkKind) -> &'static str {
    match k {
        MarkKind::InnerAlarm => "#d97706",
        MarkKind::Trigger { .. } => "#b3261e",
        MarkKind::Sweep(s) | MarkKind::Signalled(s) => match s {
            Stage::Ask => "#1f6fd1",
            Stage::Term => "#c96a00",
            Stage::Kill => "#8b1a1a",
        },
        MarkKind::AskEnded => "#6b6b6b",
        MarkKind::GroupKill => "#7b3fb5",
        MarkKind::StopCompleted => "#1b7f3b",
        MarkKind::Receipt => "#1d1d1f",
    }
}

/// The mark's shape centred at (x, y).
fn shape(k: MarkKind, x: f64, y: f64) -> String {
    let c = colour(k);
    match k {
        MarkKind::Trigger { first } => format!(
            "<path d=\"M{:.1} {:.1} l-6 -9 h12 z\" fill=\"{}\" stroke=\"{c}\" stroke-width=\"1.5\"/>",
            x,
            y + 4.0,
            if first { c } else { "#fff" }
        ),
        MarkKind::Sweep(_) => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4.5\" fill=\"{c}\"/>"),
        MarkKind::Signalled(_) => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"3\" height=\"16\" fill=\"{c}\"/>",
            x - 1.5,
            y - 8.0
        ),
        MarkKind::InnerAlarm => format!(
            "<path d=\"M{x:.1} {:.1} l6 6 l-6 6 l-6 -6 z\" fill=\"{c}\"/>",
            y - 6.0
        ),
        MarkKind::AskEnded => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"8\" height=\"8\" fill=\"#fff\" stroke=\"{c}\" stroke-width=\"2\" transform=\"rotate(45 {x:.1} {y:.1})\"/>",
            x - 4.0,
            y - 4.0
        ),
        MarkKind::GroupKill => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"9\" height=\"9\" fill=\"{c}\"/>",
            x - 4.5,
            y - 4.5
        ),
        MarkKind::StopCompleted => format!(
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"5\" fill=\"#fff\" stroke=\"{c}\" stroke-width=\"2.5\"/>"
        ),
        MarkKind::Receipt => format!(
            "<path d=\"M{x:.1} {:.1} l5 5 l-5 5 l-5 -5 z\" fill=\"{c}\"/><path d=\"M{x:.1} {:.1} v-8 h8 l-3 3 l3 3 h-8\" fill=\"{c}\"/>",
            y - 5.0,
            y - 5.0
        ),
    }
}

fn mark_group(m: &Mark, x: f64, y: f64, label_at: Option<(f64, f64)>) -> String {
    let stage = match m.kind {
        MarkKind::Sweep(s) | MarkKind::Signalled(s) => {
            format!(" data-stage=\"{}\"", stage_word(s).to_lowercase())
        }
        _ => String::new(),
    };
    let mut s = format!(
        "<g class=\"mark {0}\" data-kind=\"{0}\"{stage} data-count=\"{1}\" data-ms=\"{2:.3}\"><title>{3} ms: {4}</title>{5}",
        m.kind.name(),
        m.count,
        ms(m.at),
        esc(&format!("{:.3}", ms(m.at))),
        text(&m.title),
        shape(m.kind, x, y)
    );
    if let Some((lx, ly)) = label_at {
        let _ = write!(
            s,
            "<text class=\"mark-label\" x=\"{lx:.1}\" y=\"{ly:.1}\" fill=\"{}\">{}</text>",
            colour(m.kind),
            text(&m.label)
        );
    }
    s.push_str("</g>\n");
    s
}

/// Greedy label rows: each label goes to the first row where it does not
/// overlap the one before it; none left: the label is not drawn (the mark
/// and its tooltip are).
fn label_rows(marks: &[(f64, &Mark)]) -> Vec<Option<usize>> {
    let mut ends = [f64::MIN; ROWS];
    marks
        .iter()
        .map(|(x, m)| {
            let w = m.label.chars().count() as f64 * 6.0 + 8.0;
            let row = (0..ROWS).find(|&r| ends[r] < *x)?;
            ends[row] = x + 6.0 + w;
            Some(row)
        })
        .collect()
}

fn lane_label(l: &Lane, depth: usize) -> String {
    let asked = match l.asker {
        Asker::Job(j) => format!("asked by job {j}"),
        Asker::Controller => "asked by the controller".into(),
        Asker::Descendant(pid) => {
            format!("asked by pid {pid} (a descendant; its job is not recorded)")
        }
        Asker::Unknown => "asker not recorded".into(),
    };
    let prefix = if depth > 0 { "\u{21b3} " } else { "" };
    format!(
        "<title>job {} {} pid {}, {asked}: {}</title><text class=\"lane-label\" x=\"{:.1}\" y=\"15\">{prefix}job {} {} \u{b7} pid {}{}</text>",
        l.job,
        text(&l.name),
        l.pid,
        text(&l.argv),
        8.0 + depth.min(MAX_DEPTH_DRAWN) as f64 * INDENT,
        l.job,
        short(&l.name, 28 - 2 * depth.min(MAX_DEPTH_DRAWN)),
        l.pid,
        match l.asker {
            Asker::Descendant(pid) if depth == 0 => format!(" (asked by pid {pid})"),
            Asker::Job(j) if depth == 0 => format!(" (asked by job {j})"),
            _ => String::new(),
        }
    )
}

fn lane(l: &Lane, depth: usize, w: Window, y: f64) -> String {
    let mut s = format!(
        "<g class=\"lane\" data-job=\"{}\" data-depth=\"{depth}\" transform=\"translate(0 {y:.1})\">\n{}\n",
        l.job,
        lane_label(l, depth)
    );
    let end = l.exited.as_ref().map(|e| e.0).unwrap_or(w.to);
    if end >= w.from && l.spawned <= w.to {
        let (x1, x2) = (w.x(l.spawned), w.x(end).max(w.x(l.spawned) + 2.0));
        let (fill, stroke, dash) = match &l.exited {
            None => ("#e8e8e8", "#888", " stroke-dasharray=\"4 3\""),
            Some((_, st, true)) if st != "exit 0" => ("#f5d9b8", "#c96a00", ""),
            Some((_, st, _)) if st == "exit 0" => ("#cfe8d6", "#1b7f3b", ""),
            Some(_) => ("#f3c6c3", "#b3261e", ""),
        };
        let _ = writeln!(
            s,
            "<rect class=\"bar\" x=\"{x1:.1}\" y=\"6\" width=\"{:.1}\" height=\"12\" rx=\"2\" fill=\"{fill}\" stroke=\"{stroke}\"{dash}/>",
            x2 - x1
        );
        let what = match &l.exited {
            Some((_, st, stopped)) => format!("{st}{}", if *stopped { " (stopped)" } else { "" }),
            None => "no exit recorded".into(),
        };
        let (tx, anchor) = if x2 > X0 + PLOT - 130.0 {
            (x2 - 4.0, "end")
        } else {
            (x2 + 5.0, "start")
        };
        let _ = writeln!(
            s,
            "<text class=\"lane-label exit\" x=\"{tx:.1}\" y=\"16\" text-anchor=\"{anchor}\">{}</text>",
            text(&what)
        );
    }
    for m in l.marks.iter().filter(|m| m.at >= w.from && m.at <= w.to) {
        s.push_str(&mark_group(m, w.x(m.at), 12.0, None));
    }
    s.push_str("</g>\n");
    s
}

/// One drawing of `t` over `w`; `id` names the `<svg>`.
pub fn draw(t: &Timeline, w: Window, id: &str, caption: &str) -> String {
    let order = t.ordered();
    let stop_h = ROWS as f64 * ROW_H + 18.0;
    let lanes_y = AXIS_H + stop_h;
    let height = lanes_y + order.len() as f64 * LANE_H + 8.0;
    let mut s = format!(
        "<svg class=\"timeline\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" role=\"img\" aria-label=\"{}\">\n",
        esc(id),
        esc(caption)
    );
    // Alternate lane backgrounds, then the axis and its grid.
    for (n, _) in order.iter().enumerate() {
        if n % 2 == 0 {
            let _ = writeln!(
                s,
                "<rect x=\"0\" y=\"{:.1}\" width=\"{WIDTH}\" height=\"{LANE_H}\" fill=\"#f6f7f8\"/>",
                lanes_y + n as f64 * LANE_H
            );
        }
    }
    let span_ms = ms(w.to.saturating_sub(w.from)).max(1e-6);
    let step = tick_step(span_ms);
    let first = (ms(w.from) / step).ceil() * step;
    s.push_str("<g class=\"axis\">\n");
    let _ = writeln!(
        s,
        "<line x1=\"{X0}\" y1=\"{AXIS_H}\" x2=\"{}\" y2=\"{AXIS_H}\" stroke=\"#888\"/>",
        X0 + PLOT
    );
    let mut v = first;
    let mut n = 0;
    while v <= ms(w.to) + step * 1e-9 && n < 40 {
        let x = X0 + (v - ms(w.from)) * PLOT / span_ms;
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{height:.1}\" stroke=\"#e3e5e8\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            AXIS_H - 4.0,
            AXIS_H - 9.0,
            tick_label(v, step)
        );
        v += step;
        n += 1;
    }
    s.push_str("</g>\n");
    // The stop's lane: its marks, labels in rows, a guide down the lanes.
    let _ = writeln!(
        s,
        "<g class=\"stop-lane\" transform=\"translate(0 {AXIS_H})\"><text class=\"lane-label\" x=\"8\" y=\"16\">the stop</text>"
    );
    let shown: Vec<(f64, &Mark)> = t
        .marks
        .iter()
        .filter(|m| m.at >= w.from && m.at <= w.to)
        .map(|m| (w.x(m.at), m))
        .collect();
    let rows = label_rows(&shown);
    let base = stop_h - 9.0;
    for ((x, m), row) in shown.iter().zip(rows) {
        if matches!(
            m.kind,
            MarkKind::Sweep(_) | MarkKind::Trigger { first: true }
        ) {
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{base:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-opacity=\".35\" stroke-dasharray=\"3 3\"/>",
                height - AXIS_H,
                colour(m.kind)
            );
        }
        let label = row.map(|r| (x + 6.0, base - 4.0 - r as f64 * ROW_H));
        s.push_str(&mark_group(m, *x, base, label));
    }
    s.push_str("</g>\n");
    for (n, &(i, depth)) in order.iter().enumerate() {
        s.push_str(&lane(&t.lanes[i], depth, w, lanes_y + n as f64 * LANE_H));
    }
    s.push_str("</svg>\n");
    s
}

/// The legend, as HTML with a small SVG per shape.
pub fn legend() -> String {
    let items = [
        (
            MarkKind::Trigger { first: true },
            "trigger: the stop begins",
        ),
        (
            MarkKind::Trigger { first: false },
            "later trigger (already stopping)",
        ),
        (
            MarkKind::Sweep(Stage::Ask),
            "ask sweep (leaders, their stop signal), count",
        ),
        (MarkKind::Sweep(Stage::Term), "TERM sweep, count"),
        (MarkKind::Sweep(Stage::Kill), "KILL sweep, count"),
        (
            MarkKind::Signalled(Stage::Ask),
            "a sweep reached this job's leader",
        ),
        (MarkKind::AskEnded, "ask step ended"),
        (MarkKind::GroupKill, "cgroup.kill, members"),
        (MarkKind::StopCompleted, "stop completed"),
        (MarkKind::Receipt, "receipt (the log is sealed)"),
        (MarkKind::InnerAlarm, "inner alarm (SIGALRM to a leader)"),
    ];
    let mut s = String::from("<ul class=\"legend\">\n");
    for (k, what) in items {
        let _ = writeln!(
            s,
            "<li><svg width=\"18\" height=\"18\" viewBox=\"0 0 18 18\">{}</svg>{}</li>",
            shape(k, 9.0, 10.0),
            esc(what)
        );
    }
    for (fill, stroke, what) in [
        ("#cfe8d6", "#1b7f3b", "job: exit 0"),
        ("#f5d9b8", "#c96a00", "job ended by the stop"),
        ("#f3c6c3", "#b3261e", "job: other exit"),
        ("#e8e8e8", "#888", "job: no exit recorded"),
    ] {
        let _ = writeln!(
            s,
            "<li><svg width=\"26\" height=\"14\" viewBox=\"0 0 26 14\"><rect x=\"1\" y=\"1\" width=\"24\" height=\"12\" rx=\"2\" fill=\"{fill}\" stroke=\"{stroke}\"/></svg>{}</li>",
            esc(what)
        );
    }
    s.push_str("</ul>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_near_the_end_of_u64_or_backwards_does_not_panic() {
        let w = Window {
            from: u64::MAX - 10,
            to: 5,
        };
        assert_eq!(w.x(0), X0);
        assert_eq!(w.x(u64::MAX), X0);
        let w = Window {
            from: u64::MAX - 10,
            to: u64::MAX,
        };
        assert_eq!(w.x(u64::MAX), X0 + PLOT);
        assert_eq!(w.x(0), X0);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1511.0), 200.0);
        assert_eq!(tick_step(10.0), 1.0);
        assert!((tick_step(0.3) - 0.05).abs() < 1e-12);
        assert_eq!(tick_label(0.05, 0.05), "0.05 ms");
        assert_eq!(tick_label(400.0, 200.0), "400 ms");
    }
}
