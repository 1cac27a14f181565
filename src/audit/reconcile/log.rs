//! The log half of `rea-audit reconcile` (docs/containment.md): one bounded pass over
//! the complete lines of a log that may be sealed, unsealed or still
//! growing, collecting how far the chain holds and every process the
//! records name.
//!
//! The chain rule is checked here on its own (genesis, `prev`, `seq`, one
//! run, strict parse) to say *where* it first breaks; `verify` is still
//! run on the same file for the verdict. Records after a break are read
//! too (they may name processes worth checking), but each named process
//! carries the line that first named it, so a reader can tell which names
//! come from the verified part.

use crate::log::Kind as _;
use std::collections::BTreeMap;
use std::io;

use serde::Serialize;

use crate::audit::reader::{parse_line, read_lines, Piece};
use crate::kinds::watchdog::{
    Containment, Event, GroupRemoved, Ident, Proc, Receipt, RunStarted, StagingInventoried,
    StartRefused, Status, StopReason,
};
use crate::log::chain;
use crate::log::MAX_LINE;
use crate::vocab::bounded;

/// Distinct processes kept, at most (a fork storm's log names many; the
/// rest are counted, not kept).
pub const MAX_NAMED: usize = 4096;

/// Why the log names a process.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The root controller (`root_bound`).
    Root,
    /// A request's caller (`request_received`, `job_spawned`).
    Caller,
    /// A job's leader, the watchdog's own child (`job_spawned`).
    Job,
    /// A descendant a sweep bound and signalled (`signal_sweep`, `signal_failed`).
    Target,
    /// A descendant named as abandoned (`stop_triggered` for `abandoned`).
    Abandoned,
    /// A descendant whose identity could not be proven (`mapping_uncertain`,
    /// `stop_triggered` for `mapping_refused`).
    Uncertain,
    /// Named by another stop trigger.
    Trigger,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Root => "root",
            Role::Caller => "caller",
            Role::Job => "job",
            Role::Target => "target",
            Role::Abandoned => "abandoned",
            Role::Uncertain => "uncertain",
            Role::Trigger => "trigger",
        }
    }

    /// Part of the action (the watchdog's descendants), as opposed to the
    /// controller's side (the root, callers that may be its processes).
    pub fn is_action(self) -> bool {
        !matches!(self, Role::Root | Role::Caller)
    }
}

/// One process the log names, keyed by (pid, start time).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub pid: i32,
    pub start_time: u64,
    pub uid: Option<u32>,
    pub roles: Vec<Role>,
    pub comm: Option<String>,
    /// Jobs only: what was executed.
    pub argv: Option<Vec<String>>,
    pub job: Option<u64>,
    pub job_name: Option<String>,
    /// The parent the record names (a job's is the watchdog).
    pub ppid: Option<i32>,
    /// Jobs only: the caller that asked for it.
    pub requester: Option<Ident>,
    /// 1-based line of the first record naming it.
    pub first_line: u64,
    /// The log records it reaped (`job_exited`, `reaped`).
    pub reaped: bool,
    /// How it ended, when the log says.
    pub exit: Option<Status>,
}

/// Where the chain first fails.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Break {
    pub line: u64,
    /// A `verify` reason code (`prev_mismatch`, `malformed_json`, ...).
    pub code: String,
    pub detail: String,
}

/// What one pass over the log found.
#[derive(Clone, Debug, Default)]
pub struct LogScan {
    /// Complete lines.
    pub records: u64,
    /// Every line up to this one (1-based) parses and chains.
    pub intact_through: u64,
    /// SHA-256 of line `intact_through`: the last head the chain vouches for.
    pub intact_head: Option<String>,
    pub chain_break: Option<Break>,
    pub run: Option<String>,
    /// SHA-256 of the last complete line.
    pub head: Option<String>,
    /// Bytes after the last `\n` (a torn or in-flight last line).
    pub tail_bytes: u64,
    /// The last line is a receipt on an intact chain, with no tail.
    pub sealed: bool,
    pub receipt: Option<Receipt>,
    pub run_started: Option<RunStarted>,
    pub staging_inventoried: Option<StagingInventoried>,
    /// The first `containment` record (the third of every watchdog log).
    pub containment: Option<Containment>,
    /// The close's `group_removed` record.
    pub group_removed: Option<GroupRemoved>,
    pub first_stop: Option<StopReason>,
    pub stop_completed: bool,
    /// The `start_refused` record: nothing was launched.
    pub start_refused: Option<StartRefused>,
    pub named: Vec<Named>,
    /// Distinct processes named beyond [`MAX_NAMED`].
    pub named_dropped: u64,
    index: BTreeMap<(i32, u64), usize>,
    last_hash: Option<String>,
    receipt_last: bool,
}

fn code_str(c: crate::audit::verdict::Code) -> String {
    c.as_str()
}

impl LogScan {
    fn broke(&mut self, line: u64, code: String, detail: String) {
        if self.chain_break.is_none() {
            self.chain_break = Some(Break { line, code, detail });
        }
    }

    fn name(&mut self, pid: i32, start_time: u64, role: Role, line: u64) -> Option<&mut Named> {
        let i = match self.index.get(&(pid, start_time)) {
            Some(&i) => i,
            None => {
                if self.named.len() >= MAX_NAMED {
                    self.named_dropped += 1;
                    return None;
                }
                self.named.push(Named {
                    pid,
                    start_time,
                    uid: None,
                    roles: Vec::new(),
                    comm: None,
                    argv: None,
                    job: None,
                    job_name: None,
                    ppid: None,
                    requester: None,
                    first_line: line,
                    reaped: false,
                    exit: None,
                });
                self.index.insert((pid, start_time), self.named.len() - 1);
                self.named.len() - 1
            }
        };
        let n = &mut self.named[i];
        if !n.roles.contains(&role) {
            n.roles.push(role);
            n.roles.sort();
        }
        Some(n)
    }

    fn ident(&mut self, id: Ident, role: Role, line: u64) {
        if let Some(n) = self.name(id.pid, id.start_time, role, line) {
            n.uid.get_or_insert(id.uid);
        }
    }

    fn proc(&mut self, p: &Proc, role: Role, line: u64) {
        if let Some(n) = self.name(p.pid, p.start_time, role, line) {
            n.uid.get_or_insert(p.uid);
            n.ppid.get_or_insert(p.ppid);
            n.comm.get_or_insert_with(|| p.comm.clone());
        }
    }

    fn reaped(&mut self, pid: i32, start_time: Option<u64>, status: Status) {
        for n in self.named.iter_mut().filter(|n| n.pid == pid) {
            if start_time.is_none_or(|s| s == n.start_time) {
                n.reaped = true;
                n.exit = Some(status);
            }
        }
    }

    /// Collects what one record names.
    fn event(&mut self, ev: Event, line: u64) {
        match ev {
            Event::RunStarted(r) if self.run_started.is_none() => self.run_started = Some(r),
            Event::RootBound(r) => {
                let Some(root) = r.root else { return };
                if let Some(n) = self.name(root.pid, root.start_time, Role::Root, line) {
                    n.uid.get_or_insert(root.uid);
                    if let Some(c) = r.comm {
                        n.comm.get_or_insert(c);
                    }
                }
            }
            Event::RequestReceived(r) => {
                if let Some(c) = r.caller {
                    self.ident(c, Role::Caller, line);
                }
            }
            Event::JobSpawned(j) => {
                if let Some(c) = j.caller {
                    self.ident(c, Role::Caller, line);
                }
                if let Some(n) = self.name(j.pid, j.start_time, Role::Job, line) {
                    n.uid.get_or_insert(j.uid);
                    n.ppid.get_or_insert(j.ppid);
                    n.job = Some(j.job);
                    n.job_name = j.name;
                    n.requester = j.caller;
                    n.argv = Some(bounded_argv(j.argv));
                }
            }
            Event::JobExited(j) => self.reaped(j.pid, Some(j.start_time), j.status),
            Event::Reaped(r) => {
                for p in r.processes {
                    self.reaped(p.pid, p.start_time, p.status);
                }
            }
            Event::SignalSweep(s) => {
                for p in &s.targets {
                    self.proc(p, Role::Target, line);
                }
            }
            Event::SignalFailed(s) => self.ident(s.target, Role::Target, line),
            Event::StopTriggered(t) => {
                if t.first && self.first_stop.is_none() {
                    self.first_stop = Some(t.reason);
                }
                let role = match t.reason {
                    StopReason::Abandoned => Role::Abandoned,
                    StopReason::MappingRefused => Role::Uncertain,
                    _ => Role::Trigger,
                };
                for p in &t.processes {
                    self.proc(p, role, line);
                }
            }
            Event::MappingUncertain(m) => self.proc(&m.process, Role::Uncertain, line),
            Event::StopCompleted(_) => self.stop_completed = true,
            Event::StagingInventoried(s) => self.staging_inventoried = Some(s),
            Event::Containment(c) if self.containment.is_none() => self.containment = Some(c),
            Event::GroupRemoved(g) => self.group_removed = Some(g),
            Event::StartRefused(s) => self.start_refused = Some(s),
            Event::Receipt(r) => {
                self.receipt = Some(r);
                self.receipt_last = true;
            }
            // Kinds that name no process (and any kind added later).
            _ => {}
        }
    }

    fn line(&mut self, bytes: &[u8]) {
        self.records += 1;
        let n = self.records;
        let hash = chain::line_hash(bytes);
        self.receipt_last = false;
        match parse_line(bytes) {
            Err(e) => self.broke(n, code_str(e.code), e.detail),
            Ok(rec) => {
                let run = self.run.get_or_insert_with(|| rec.run.to_string()).clone();
                let want_prev = if n == 1 {
                    Some(chain::genesis(&rec.run))
                } else {
                    self.last_hash.clone()
                };
                if rec.run != run.as_str() {
                    self.broke(
                        n,
                        "run_mismatch".into(),
                        format!("record of run {}", rec.run),
                    );
                } else if rec.seq != n - 1 {
                    self.broke(
                        n,
                        "seq_mismatch".into(),
                        format!("seq {} where {} belongs", rec.seq, n - 1),
                    );
                } else if want_prev.as_deref() != Some(&*rec.prev) {
                    self.broke(
                        n,
                        if n == 1 {
                            "genesis_mismatch"
                        } else {
                            "prev_mismatch"
                        }
                        .into(),
                        "prev is not the hash of the line before: the chain is broken here".into(),
                    );
                } else if n == 1 && !matches!(rec.event, Event::RunStarted(_)) {
                    self.broke(
                        n,
                        "first_not_run_started".into(),
                        format!("first record is {}", rec.event.kind()),
                    );
                } else if self.receipt.is_some() {
                    self.broke(
                        n,
                        "record_after_receipt".into(),
                        "a record after the receipt (the watchdog never writes after it)".into(),
                    );
                }
                self.event(rec.event, n);
            }
        }
        if self.chain_break.is_none() {
            self.intact_through = n;
            self.intact_head = Some(hash.clone());
        }
        self.last_hash = Some(hash);
    }

    fn overlong(&mut self, len: u64) {
        self.records += 1;
        self.receipt_last = false;
        self.last_hash = None;
        self.broke(
            self.records,
            "line_too_long".into(),
            format!("{len} bytes; the cap is {MAX_LINE}"),
        );
    }
}

/// Reads every complete line of `r` (memory bounded by the line cap).
pub fn scan<R: io::Read>(r: R) -> io::Result<LogScan> {
    let mut s = LogScan::default();
    let tail = read_lines(r, |p| match p {
        Piece::Line(l) => s.line(l),
        Piece::Overlong(len) => s.overlong(len),
    })?;
    s.tail_bytes = tail.map_or(0, |t| t.len() as u64);
    s.head = s.last_hash.clone();
    s.sealed = s.receipt_last && s.chain_break.is_none() && s.tail_bytes == 0;
    if s.tail_bytes > 0 && s.receipt.is_some() {
        // The watchdog never writes after its receipt: these bytes are
        // someone else's.
        let line = s.records + 1;
        s.broke(
            line,
            "record_after_receipt".into(),
            format!("{} bytes without a newline after the receipt", s.tail_bytes),
        );
    }
    Ok(s)
}

/// Arguments kept of a named process's argv, at most.
const ARGV_KEPT: usize = 16;

/// What reconcile keeps of an argv: the first [`ARGV_KEPT`] arguments,
/// each cut to a bounded length, and a last "(N more)" when cut. A log
/// can name thousands of processes with megabyte argvs (a record may be
/// 1 MiB); what is held and printed stays small whatever the log holds.
fn bounded_argv(argv: Vec<String>) -> Vec<String> {
    let n = argv.len();
    let mut kept: Vec<String> = argv
        .into_iter()
        .take(ARGV_KEPT)
        .map(|a| bounded(&a))
        .collect();
    if n > ARGV_KEPT {
        kept.push(format!("({} more)", n - ARGV_KEPT));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_breaks_the_chain_at_line_one() {
        let s = scan(&b"not json\n{\"v\":1"[..]).unwrap();
        assert_eq!(s.records, 1);
        assert_eq!(s.intact_through, 0);
        assert_eq!(s.chain_break.as_ref().unwrap().line, 1);
        assert_eq!(s.tail_bytes, 6);
        assert!(!s.sealed);
    }

    #[test]
    fn a_huge_argv_is_kept_bounded() {
        let argv: Vec<String> = (0..1000)
            .map(|i| format!("{i}{}", "x".repeat(1 << 20)))
            .collect();
        let kept = super::bounded_argv(argv);
        assert_eq!(kept.len(), super::ARGV_KEPT + 1);
        assert_eq!(kept.last().unwrap(), "(984 more)");
        let bytes: usize = kept.iter().map(String::len).sum();
        assert!(bytes < 8 * 1024, "{bytes} bytes kept");
        assert!(kept[0].starts_with("0xxx"));
    }
}
