//! What the timeline draws, gathered in one pass over the records: a lane
//! per job from `job_spawned` to `job_exited`, who asked for it, and the
//! marks of the stop. Bounded whatever the log's size: at most
//! [`MAX_LANES`] lanes, [`MAX_LANE_MARKS`] marks a lane and
//! [`MAX_MARKS`] marks of the stop; what is left out is counted and said.
//! The drawing is `svg.rs`.

use std::collections::HashMap;

use crate::audit::people::cut;
pub(crate) use crate::audit::show::Asker;
use crate::audit::show::Askers;
use crate::kinds::watchdog::{Event, Stage};

pub const MAX_LANES: usize = 200;
pub const MAX_LANE_MARKS: usize = 32;
pub const MAX_MARKS: usize = 400;
/// Characters of a job's argv kept for its label's tooltip.
const ARGV_KEPT: usize = 300;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    InnerAlarm,
    Trigger {
        first: bool,
    },
    Sweep(Stage),
    /// A sweep reached this job's leader (on its lane).
    Signalled(Stage),
    AskEnded,
    GroupKill,
    StopCompleted,
    Receipt,
}

impl MarkKind {
    /// The class and `data-kind` the page and its tests know a mark by.
    pub fn name(self) -> &'static str {
        match self {
            MarkKind::InnerAlarm => "inner_alarm",
            MarkKind::Trigger { first: true } => "trigger",
            MarkKind::Trigger { first: false } => "trigger_later",
            MarkKind::Sweep(_) => "sweep",
            MarkKind::Signalled(_) => "signalled",
            MarkKind::AskEnded => "ask_ended",
            MarkKind::GroupKill => "group_kill",
            MarkKind::StopCompleted => "stop_completed",
            MarkKind::Receipt => "receipt",
        }
    }
}

/// A stage as its mark says it: the ask, TERM, KILL.
pub fn stage_word(s: Stage) -> &'static str {
    match s {
        Stage::Ask => "ask",
        Stage::Term => "TERM",
        Stage::Kill => "KILL",
    }
}

#[derive(Clone, Debug)]
pub struct Mark {
    /// Nanoseconds since the first record.
    pub at: u64,
    pub kind: MarkKind,
    /// Short text drawn beside the mark (unescaped).
    pub label: String,
    /// The mark's tooltip (unescaped).
    pub title: String,
    /// For a sweep: how many processes it signalled, its parts summed.
    pub count: u64,
}

#[derive(Clone, Debug)]
pub struct Lane {
    pub job: u64,
    pub name: String,
    pub argv: String,
    pub pid: i32,
    start_time: u64,
    pub asker: Asker,
    pub spawned: u64,
    /// When it exited, how, and whether during the stop.
    pub exited: Option<(u64, String, bool)>,
    pub marks: Vec<Mark>,
    pub marks_left_out: u64,
}

#[derive(Default)]
pub struct Timeline {
    pub lanes: Vec<Lane>,
    pub lanes_left_out: u64,
    by_job: HashMap<u64, usize>,
    pub marks: Vec<Mark>,
    pub marks_left_out: u64,
    sweeps: HashMap<u32, usize>,
    askers: Askers,
    /// The last record's time.
    pub end: u64,
    /// The first trigger's time: where the stop's close-up starts.
    pub stop_at: Option<u64>,
}

impl Timeline {
    fn mark(&mut self, m: Mark) -> Option<usize> {
        if self.marks.len() >= MAX_MARKS {
            self.marks_left_out += 1;
            return None;
        }
        self.marks.push(m);
        Some(self.marks.len() - 1)
    }

    fn lane_mark(&mut self, job: u64, m: Mark) {
        let Some(&i) = self.by_job.get(&job) else {
            return;
        };
        let lane = &mut self.lanes[i];
        if lane.marks.len() >= MAX_LANE_MARKS {
            lane.marks_left_out += 1;
        } else {
            lane.marks.push(m);
        }
    }

    /// Takes one record, `at` nanoseconds after the first.
    pub fn note(&mut self, at: u64, ev: &Event) {
        self.end = self.end.max(at);
        let m = |kind, label: String, title: String| Mark {
            at,
            kind,
            label,
            title,
            count: 0,
        };
        match ev {
            Event::JobSpawned(j) => self.lane(at, j),
            Event::JobExited(j) => {
                if let Some(&i) = self.by_job.get(&j.job) {
                    self.lanes[i]
                        .exited
                        .get_or_insert((at, j.status.to_string(), j.stopped));
                }
            }
            Event::InnerAlarm(a) => {
                let failed = a
                    .errno
                    .map(|e| format!(" (failed: errno {e})"))
                    .unwrap_or_default();
                let mk = m(
                    MarkKind::InnerAlarm,
                    "alarm".into(),
                    format!(
                        "inner alarm: SIGALRM to pid {} after {} ms{failed}",
                        a.pid, a.after_ms
                    ),
                );
                self.lane_mark(a.job, mk);
            }
            Event::StopTriggered(t) => {
                if t.first {
                    self.stop_at.get_or_insert(at);
                }
                self.mark(m(
                    MarkKind::Trigger { first: t.first },
                    t.reason.as_str().into(),
                    trigger_title(t),
                ));
            }
            Event::SignalSweep(s) => self.sweep(at, s),
            Event::AskEnded(a) => {
                let title = format!(
                    "ask step ended after {} ms, {} leader(s) still alive",
                    a.after_ms, a.leaders_left
                );
                self.mark(m(MarkKind::AskEnded, "ask ended".into(), title));
            }
            Event::GroupKill(k) => {
                let mut mk = m(
                    MarkKind::GroupKill,
                    format!("cgroup.kill {}", k.total()),
                    format!(
                        "cgroup.kill of group inode {} ({} members)",
                        k.ino,
                        k.total()
                    ),
                );
                mk.count = k.total();
                self.mark(mk);
            }
            Event::StopCompleted(s) => {
                let title = format!(
                    "stop completed: {} sweeps in {} ms, echild {}, scan empty {}, left {}",
                    s.sweeps, s.elapsed_ms, s.echild, s.scan_empty, s.left
                );
                self.mark(m(MarkKind::StopCompleted, "stop completed".into(), title));
            }
            Event::Receipt(r) => {
                let title = format!(
                    "receipt: {}, quiescent {}, uncertain {}",
                    serde_json::to_value(r.outcome)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    r.quiescent,
                    r.uncertain_mappings
                );
                self.mark(m(MarkKind::Receipt, "receipt".into(), title));
            }
            _ => {}
        }
        self.askers.note(ev);
    }

    /// A job's lane, opened at its spawn (while there is room for one).
    fn lane(&mut self, at: u64, j: &crate::kinds::watchdog::JobSpawned) {
        let asker = self.askers.asker(j);
        if self.lanes.len() >= MAX_LANES || self.by_job.contains_key(&j.job) {
            self.lanes_left_out += 1;
            return;
        }
        self.by_job.insert(j.job, self.lanes.len());
        self.lanes.push(Lane {
            job: j.job,
            name: cut(j.name.as_deref().unwrap_or(&j.id), 60),
            argv: cut(
                &match &j.program {
                    Some(p) => format!("{} [ran {p}]", j.argv.join(" ")),
                    None => j.argv.join(" "),
                },
                ARGV_KEPT,
            ),
            pid: j.pid,
            start_time: j.start_time,
            asker,
            spawned: at,
            exited: None,
            marks: Vec::new(),
            marks_left_out: 0,
        });
    }

    /// A sweep is one mark however many parts it was written in: its
    /// targets are summed, its time is its first part's.
    fn sweep(&mut self, at: u64, s: &crate::kinds::watchdog::SignalSweep) {
        let n = s.targets.len() as u64;
        let signals: Vec<String> = s.signals.iter().map(|g| g.name()).collect();
        match self.sweeps.get(&s.sweep) {
            Some(&i) => {
                let mk = &mut self.marks[i];
                mk.count += n;
                mk.label = format!("{} {}", stage_word(s.stage), mk.count);
                mk.title = format!(
                    "sweep {}: {} to {} process(es)",
                    s.sweep,
                    signals.join("+"),
                    mk.count
                );
            }
            None => {
                let mk = Mark {
                    at,
                    kind: MarkKind::Sweep(s.stage),
                    label: format!("{} {n}", stage_word(s.stage)),
                    title: format!(
                        "sweep {}: {} to {n} process(es)",
                        s.sweep,
                        signals.join("+")
                    ),
                    count: n,
                };
                if let Some(i) = self.mark(mk) {
                    self.sweeps.insert(s.sweep, i);
                }
            }
        }
        // The leaders among the targets get a tick on their own lane.
        let hit: Vec<u64> = self
            .lanes
            .iter()
            .filter(|l| {
                s.targets
                    .iter()
                    .any(|t| t.pid == l.pid && t.start_time == l.start_time)
            })
            .map(|l| l.job)
            .collect();
        for job in hit {
            let mk = Mark {
                at,
                kind: MarkKind::Signalled(s.stage),
                label: String::new(),
                title: format!(
                    "sweep {} {}: {}",
                    s.sweep,
                    stage_word(s.stage),
                    signals.join("+")
                ),
                count: 1,
            };
            self.lane_mark(job, mk);
        }
    }

    /// The lanes in drawing order with their depth: each job followed by
    /// the jobs it asked for (recursively), a job whose asker is not a
    /// drawn lane at the top. An asker must come before the job it asked
    /// for, so a hostile log cannot make a cycle.
    pub fn ordered(&self) -> Vec<(usize, usize)> {
        let parent = |l: &Lane| match l.asker {
            Asker::Job(j) if j < l.job => self.by_job.get(&j).copied(),
            _ => None,
        };
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.lanes.len()];
        let mut tops = Vec::new();
        for (i, l) in self.lanes.iter().enumerate() {
            match parent(l) {
                Some(p) if p != i => children[p].push(i),
                _ => tops.push(i),
            }
        }
        let mut out = Vec::with_capacity(self.lanes.len());
        let mut stack: Vec<(usize, usize)> = tops.into_iter().rev().map(|i| (i, 0)).collect();
        while let Some((i, depth)) = stack.pop() {
            out.push((i, depth));
            for &c in children[i].iter().rev() {
                stack.push((c, depth + 1));
            }
        }
        out
    }
}

/// A trigger mark's title: its reason, whether it began the stop, detail.
fn trigger_title(t: &crate::kinds::watchdog::StopTriggered) -> String {
    format!(
        "{}{}: {}",
        t.reason.as_str(),
        if t.first {
            " (the stop begins)"
        } else {
            " (already stopping)"
        },
        cut(&t.detail, 200)
    )
}
