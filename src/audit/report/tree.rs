//! The process tree of the stop: every process the log names with its
//! parent (job leaders from `job_spawned`, sweep targets with their ppid,
//! the `others` links of a sweep's closure, reaped processes, uncertain
//! mappings, `cgroup.kill` members), each with what it was sent (the ask,
//! TERM, KILL, SIGCONT where `cont` names it) and how it ended. Nested
//! by the parent links under the watchdog; a parent the log does not name
//! puts its child at the top, said so. Bounded by [`MAX_NODES`]; parent
//! links from a hostile log may loop, and the walk visits each node once.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::html::text;
use super::timeline::stage_word;
use crate::audit::people::cut;
use crate::kinds::watchdog::{Event, Stage};

pub const MAX_NODES: usize = 2000;
/// Facts kept per process (signals, tags) before they are counted instead.
const MAX_FACTS: usize = 8;
/// Deeper than this, children are listed flat (a browser's nesting and a
/// page's width have limits; a hostile chain has none).
const MAX_NESTING: usize = 40;

#[derive(Default, Clone, Debug)]
struct Node {
    pid: i32,
    start_time: Option<u64>,
    ppid: Option<i32>,
    comm: Option<String>,
    job: Option<u64>,
    /// (class, text): what it was sent, and other facts.
    facts: Vec<(&'static str, String)>,
    facts_left_out: u64,
    ended: Option<String>,
}

#[derive(Default)]
pub struct Tree {
    watchdog: Option<i32>,
    nodes: Vec<Node>,
    by_pid: HashMap<i32, Vec<usize>>,
    pub left_out: u64,
    /// Signals sent, by stage (targets × sweeps).
    sent: [u64; 3],
}

fn stage_class(s: Stage) -> &'static str {
    match s {
        Stage::Ask => "ask",
        Stage::Term => "term",
        Stage::Kill => "kill",
    }
}

impl Tree {
    /// The node for (pid, start time): one with that start time, or one
    /// whose start time is not known yet (a link names only a pid).
    fn node(&mut self, pid: i32, start_time: Option<u64>) -> Option<&mut Node> {
        let found = self.by_pid.get(&pid).and_then(|ids| {
            ids.iter().rev().copied().find(|&i| {
                let n = &self.nodes[i];
                start_time.is_none() || n.start_time.is_none() || n.start_time == start_time
            })
        });
        let i = match found {
            Some(i) => i,
            None if self.nodes.len() >= MAX_NODES => {
                self.left_out += 1;
                return None;
            }
            None => {
                self.nodes.push(Node {
                    pid,
                    ..Node::default()
                });
                let i = self.nodes.len() - 1;
                self.by_pid.entry(pid).or_default().push(i);
                i
            }
        };
        let n = &mut self.nodes[i];
        if n.start_time.is_none() {
            n.start_time = start_time;
        }
        Some(n)
    }

    fn fact(n: &mut Node, class: &'static str, what: String) {
        if n.facts.len() < MAX_FACTS {
            n.facts.push((class, what));
        } else {
            n.facts_left_out += 1;
        }
    }

    pub fn note(&mut self, ev: &Event) {
        match ev {
            Event::RunStarted(r) => {
                self.watchdog.get_or_insert(r.watchdog.pid);
            }
            Event::JobSpawned(j) => self.spawned(j),
            Event::JobExited(j) => {
                if let Some(n) = self.node(j.pid, Some(j.start_time)) {
                    let stopped = if j.stopped { " during the stop" } else { "" };
                    n.ended = Some(format!("exited: {}{stopped}", j.status));
                }
            }
            Event::SignalSweep(s) => self.swept(s),
            Event::SignalFailed(f) => {
                if let Some(n) = self.node(f.target.pid, Some(f.target.start_time)) {
                    let what = format!("{} failed: errno {}", f.signal.name(), f.errno);
                    Self::fact(n, "bad", what);
                }
            }
            Event::StopTriggered(t) => {
                for p in &t.processes {
                    if let Some(n) = self.node(p.pid, Some(p.start_time)) {
                        n.ppid = Some(p.ppid);
                        n.comm = Some(cut(&p.comm, 40));
                        Self::fact(
                            n,
                            "bad",
                            format!("named by the trigger: {}", t.reason.as_str()),
                        );
                    }
                }
            }
            Event::Reaped(r) => {
                for p in &r.processes {
                    if let Some(n) = self.node(p.pid, p.start_time) {
                        if let Some(c) = &p.comm {
                            n.comm.get_or_insert_with(|| cut(c, 40));
                        }
                        n.ended = Some(format!("reaped: {}", p.status));
                    }
                }
            }
            Event::MappingUncertain(m) => {
                let p = &m.process;
                if let Some(n) = self.node(p.pid, Some(p.start_time)) {
                    n.ppid = Some(p.ppid);
                    n.comm = Some(cut(&p.comm, 40));
                    let reason = serde_json::to_value(m.reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    Self::fact(
                        n,
                        "bad",
                        format!("UNCERTAIN: {reason} {}", cut(&m.detail, 200)),
                    );
                }
            }
            Event::GroupKill(k) => {
                for &pid in k.members.iter().take(MAX_NODES) {
                    if let Some(n) = self.node(pid, None) {
                        Self::fact(n, "kill", "cgroup.kill".into());
                    }
                }
            }
            _ => {}
        }
    }

    /// A job's leader: its job number, name and command.
    fn spawned(&mut self, j: &crate::kinds::watchdog::JobSpawned) {
        let name = cut(j.name.as_deref().unwrap_or(&j.id), 60);
        let comm = j
            .argv
            .first()
            .map(|a| cut(a.rsplit('/').next().unwrap_or(a), 40));
        if let Some(n) = self.node(j.pid, Some(j.start_time)) {
            n.job = Some(j.job);
            n.ppid = Some(j.ppid);
            n.comm = n.comm.take().or(comm);
            Self::fact(n, "job", format!("job {} {name}", j.job));
        }
    }

    /// A sweep: what each target was sent, and the processes it only saw.
    fn swept(&mut self, s: &crate::kinds::watchdog::SignalSweep) {
        self.sent[s.stage as usize] += s.targets.len() as u64;
        let sigs: Vec<String> = s.signals.iter().map(|g| g.name()).collect();
        for t in &s.targets {
            if let Some(n) = self.node(t.pid, Some(t.start_time)) {
                n.ppid = Some(t.ppid);
                n.comm = Some(cut(&t.comm, 40));
                let what = format!(
                    "{} {} (sweep {})",
                    stage_word(s.stage),
                    sigs.join("+"),
                    s.sweep
                );
                Self::fact(n, stage_class(s.stage), what);
                if s.cont.contains(&t.pid) {
                    Self::fact(n, "cont", "SIGCONT (was stopped)".into());
                }
            }
        }
        for l in &s.others {
            if let Some(n) = self.node(l.pid, None) {
                n.ppid.get_or_insert(l.ppid);
                Self::fact(n, "tag", format!("in sweep {}, not signalled", s.sweep));
            }
        }
    }

    fn item(&self, i: usize) -> String {
        let n = &self.nodes[i];
        let mut s = format!("<code>pid {}</code>", n.pid);
        if let Some(c) = &n.comm {
            let _ = write!(s, " <b>{}</b>", text(c));
        }
        if let Some(st) = n.start_time {
            let _ = write!(s, " <span class=\"note\">start {st}</span>");
        }
        for (class, what) in &n.facts {
            let cls = match *class {
                "ask" | "term" | "kill" | "cont" => format!("sig {class}"),
                "bad" => "tag bad".into(),
                _ => "tag".into(),
            };
            let _ = write!(s, " <span class=\"{cls}\">{}</span>", text(what));
        }
        if n.facts_left_out > 0 {
            let _ = write!(s, " <span class=\"note\">+{} more</span>", n.facts_left_out);
        }
        if let Some(e) = &n.ended {
            let _ = write!(s, " \u{2014} {}", text(e));
        }
        s
    }

    /// The nested list, under the watchdog.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let [ask, term, kill] = self.sent;
        let _ = writeln!(
            out,
            "<p>Signalled: {ask} by the ask, {term} by TERM, {kill} by KILL; {} process(es) named in all.</p>",
            self.nodes.len()
        );
        if self.nodes.is_empty() {
            out.push_str("<p class=\"note\">The log names no process of the action.</p>\n");
            return out;
        }
        // A node's parent: the latest node with its ppid (not itself).
        let parent = |i: usize| -> Option<usize> {
            let pp = self.nodes[i].ppid?;
            self.by_pid
                .get(&pp)?
                .iter()
                .rev()
                .copied()
                .find(|&p| p != i)
        };
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        let mut under_watchdog = Vec::new();
        let mut orphans = Vec::new();
        for i in 0..self.nodes.len() {
            match (parent(i), self.nodes[i].ppid) {
                (Some(p), _) => children[p].push(i),
                (None, Some(pp)) if Some(pp) == self.watchdog => under_watchdog.push(i),
                _ => orphans.push(i),
            }
        }
        let mut seen = vec![false; self.nodes.len()];
        out.push_str("<ul class=\"tree\">\n");
        let _ = writeln!(
            out,
            "<li><b>watchdog</b> <code>pid {}</code>",
            self.watchdog.map_or("?".into(), |p| p.to_string())
        );
        self.walk(&mut out, &under_watchdog, &children, &mut seen);
        out.push_str("</li>\n");
        let mut rest: Vec<usize> = orphans;
        // Nodes only reachable through a loop of parent links.
        rest.extend((0..self.nodes.len()).filter(|&i| !seen[i] && parent(i).is_some()));
        for i in rest {
            if seen[i] {
                continue;
            }
            let why = match self.nodes[i].ppid {
                Some(pp) => format!("parent pid {pp}: not named in the log"),
                None => "parent not recorded".into(),
            };
            let _ = writeln!(out, "<li><span class=\"note\">{}</span>", text(&why));
            self.walk(&mut out, &[i], &children, &mut seen);
            out.push_str("</li>\n");
        }
        out.push_str("</ul>\n");
        if self.left_out > 0 {
            let _ = writeln!(
                out,
                "<p class=\"note\">{} more process fact(s) left out: the list keeps {MAX_NODES} processes.</p>",
                self.left_out
            );
        }
        out
    }

    /// Writes `tops` and their descendants as nested lists, each node once.
    fn walk(&self, out: &mut String, tops: &[usize], children: &[Vec<usize>], seen: &mut [bool]) {
        enum Step {
            Open(usize, usize),
            Close,
        }
        let mut stack: Vec<Step> = tops.iter().rev().map(|&i| Step::Open(i, 0)).collect();
        out.push_str("<ul>\n");
        while let Some(step) = stack.pop() {
            match step {
                Step::Close => out.push_str("</ul></li>\n"),
                Step::Open(i, depth) => {
                    if seen[i] {
                        continue;
                    }
                    seen[i] = true;
                    let _ = write!(out, "<li>{}", self.item(i));
                    let kids: Vec<usize> =
                        children[i].iter().copied().filter(|&c| !seen[c]).collect();
                    if kids.is_empty() {
                        out.push_str("</li>\n");
                    } else if depth >= MAX_NESTING {
                        out.push_str("</li>\n");
                        stack.extend(kids.into_iter().rev().map(|c| Step::Open(c, depth)));
                    } else {
                        out.push_str("\n<ul>\n");
                        stack.push(Step::Close);
                        stack.extend(kids.into_iter().rev().map(|c| Step::Open(c, depth + 1)));
                    }
                }
            }
        }
        out.push_str("</ul>\n");
    }
}
