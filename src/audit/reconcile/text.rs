//! The "root recovery review": what `rea-audit reconcile` prints for
//! people. Every line goes through [`people::escape`] (argv, comm, paths
//! and details may be chosen by jobs).

use std::fmt::Write;

use super::{Outcome, ProcPart, Report};
use crate::audit::people::{self, word};
use crate::kinds::watchdog::Outcome as RunOutcome;
use crate::process::alive::Liveness;

fn liveness(l: Liveness) -> &'static str {
    match l {
        Liveness::Alive => "ALIVE",
        Liveness::Gone => "gone",
        Liveness::Unknown => "UNKNOWN",
    }
}

fn process(s: &mut String, p: &ProcPart) {
    let n = &p.named;
    let roles: Vec<&str> = n.roles.iter().map(|r| r.as_str()).collect();
    let _ = write!(
        s,
        "  {:<7} pid {} start {} uid {}  {}",
        liveness(p.liveness.state),
        n.pid,
        n.start_time,
        n.uid.map_or("?".into(), |u| u.to_string()),
        roles.join("+")
    );
    if let Some(j) = n.job {
        let _ = write!(s, " {j}");
    }
    if let Some(name) = &n.job_name {
        let _ = write!(s, " {name:?}");
    }
    if let Some(c) = &n.comm {
        let _ = write!(s, " ({c})");
    }
    s.push('\n');
    if let Some(argv) = &n.argv {
        let _ = writeln!(s, "          argv: {}", argv.join(" "));
    }
    let mut rel = Vec::new();
    if let Some(pp) = n.ppid {
        rel.push(format!("parent {pp}"));
    }
    if let Some(q) = n.requester {
        rel.push(format!(
            "requested by pid {} (start {})",
            q.pid, q.start_time
        ));
    }
    rel.push(format!("first named on line {}", n.first_line));
    rel.push(match n.exit {
        Some(st) if n.reaped => format!("reaped according to the log ({})", st),
        _ => "not reaped according to the log".into(),
    });
    let _ = writeln!(s, "          {}", rel.join("; "));
    let _ = writeln!(s, "          now: {}", p.liveness.detail);
    if let Some(now) = &p.liveness.now {
        let _ = writeln!(
            s,
            "          now: comm {:?}, parent {}, session {}, state {}",
            now.comm, now.ppid, now.sid, now.state
        );
    }
    if let Some(c) = &p.check {
        let _ = writeln!(s, "          check: {c}");
    }
}

/// The whole report as text (escaped).
pub fn human(r: &Report) -> String {
    raw(r).lines().map(|l| people::escape(l) + "\n").collect()
}

fn raw(r: &Report) -> String {
    let mut s = String::new();
    let watchdog_alive = r
        .watchdog
        .as_ref()
        .is_some_and(|w| w.liveness.state == Liveness::Alive);
    let head = match r.outcome {
        Outcome::DeleteAllowed => "DELETE ALLOWED (sealed, verified, nothing named is alive)",
        Outcome::Running if watchdog_alive => {
            "RUNNING (the watchdog is alive: wait, or ask it to close)"
        }
        Outcome::Running => {
            "RUNNING (the action's cgroup has live members and no live watchdog: recover them)"
        }
        Outcome::Review => "REVIEW (a person must decide; nothing was changed)",
    };
    let _ = writeln!(s, "root recovery review: {head}  [exit {}]", r.exit_code);
    log_section(&mut s, r);
    places_section(&mut s, r);

    group(&mut s, r);
    processes_section(&mut s, r);
    reasons_section(&mut s, r, watchdog_alive);
    let _ = writeln!(
        s,
        "\nreconcile changed nothing: it signals, deletes and writes nothing. \
         Pids are as seen from this PID namespace."
    );
    s
}

/// The log: its run, chain, seal, stop, tail, head and verify's status.
fn log_section(s: &mut String, r: &Report) {
    let l = &r.log;
    let _ = writeln!(s, "\nlog       {}", l.path);
    if let Some(run) = &l.run {
        let _ = writeln!(s, "  run     {run}");
    }
    match &l.chain_break {
        None => {
            let _ = writeln!(s, "  chain   intact: {} records", l.records);
        }
        Some(b) => {
            let _ = writeln!(
                s,
                "  chain   intact through record {}; BREAKS at line {} ({}: {})",
                l.intact_through, b.line, b.code, b.detail
            );
        }
    }
    let seal = match (l.sealed, l.outcome) {
        (true, Some(RunOutcome::Closed)) => "sealed by a receipt (closed)".to_string(),
        (true, _) => format!(
            "sealed by a receipt (stopped: {})",
            l.stop_reason.map_or("?", |x| x.as_str())
        ),
        (false, _) => "NOT sealed: no receipt".to_string(),
    };
    let _ = writeln!(s, "  seal    {seal}");
    if let (false, Some(first)) = (l.sealed, l.first_stop) {
        let _ = writeln!(
            s,
            "  stop    started ({}), {}",
            first.as_str(),
            if l.stop_completed {
                "completed"
            } else {
                "not recorded as completed"
            }
        );
    }
    if l.torn_tail_bytes > 0 {
        let _ = writeln!(
            s,
            "  tail    {} bytes after the last newline",
            l.torn_tail_bytes
        );
    }
    if let Some(h) = &l.head {
        let _ = writeln!(s, "  head    {h}");
    }
    let _ = writeln!(
        s,
        "  verify  {} (exit {})",
        word(&r.verify.status),
        r.verify.exit_code
    );
}

/// The watchdog, the stage (and its holders), the state directory.
fn places_section(s: &mut String, r: &Report) {
    match &r.watchdog {
        Some(w) => {
            let _ = writeln!(
                s,
                "\nwatchdog  pid {} start {} uid {}: {} ({})",
                w.pid,
                w.start_time,
                w.uid,
                liveness(w.liveness.state),
                w.liveness.detail
            );
        }
        None => {
            let _ = writeln!(s, "\nwatchdog  unknown (no run_started)");
        }
    }
    let st = &r.stage;
    let _ = writeln!(
        s,
        "stage     {}: {}",
        st.given.as_deref().unwrap_or("(not given)"),
        st.detail
    );
    if let Some(now) = &st.now {
        let _ = writeln!(
            s,
            "          now {} entries, {} bytes, digest {}",
            now.inventory.entries, now.inventory.bytes, now.inventory.digest
        );
        for e in &now.special {
            let _ = writeln!(s, "          {} {}", e.kind, e.path);
        }
    }
    if let Some(h) = &r.holders {
        s.push_str(&crate::audit::verdict::holders_lines(h).replacen("  holders ", "holders  ", 1));
        for f in crate::holders::text::findings(h) {
            if !f.starts_with("not readable") {
                let _ = writeln!(s, "          {f}");
            }
        }
    }
    let sd = &r.state_dir;
    match &sd.given {
        None => {
            let _ = writeln!(
                s,
                "state dir {} (recorded; not checked: pass --state-dir)",
                sd.recorded.as_deref().unwrap_or("?")
            );
        }
        Some(g) => {
            let _ = writeln!(s, "state dir {g}");
            for c in &sd.checks {
                let mark = match c.ok {
                    Some(true) => "ok  ",
                    Some(false) => "DIFF",
                    None => "    ",
                };
                let _ = writeln!(s, "  {mark} {}: {}", c.check, c.detail);
            }
        }
    }
}

/// The processes the log names (what may be alive first), then those it
/// could not name but that carry the run's id.
fn processes_section(s: &mut String, r: &Report) {
    let alive = |p: &&ProcPart| p.liveness.state != Liveness::Gone;
    let _ = writeln!(
        s,
        "\nprocesses the log names: {} ({} may be alive)",
        r.processes.len(),
        r.processes.iter().filter(alive).count()
    );
    // What may be alive first: that is what a person acts on.
    for p in r.processes.iter().filter(alive) {
        process(s, p);
    }
    for p in r.processes.iter().filter(|p| !alive(p)) {
        process(s, p);
    }
    if r.processes_not_listed > 0 {
        let _ = writeln!(s, "  ... and {} more not listed", r.processes_not_listed);
    }
    let u = &r.unnamed;
    let _ = writeln!(s, "\nnot named by the log: {}", u.detail);
    if let Some(e) = &u.scan_error {
        let _ = writeln!(s, "  environment scan failed: {e}");
    }
    for p in &u.by_environment {
        let _ = writeln!(
            s,
            "  ALIVE   pid {} start {} uid {}  parent {} ({}) carries REA_RUN_ID",
            p.pid,
            p.start_time,
            p.uid.map_or("?".into(), |u| u.to_string()),
            p.ppid,
            p.comm
        );
        let _ = writeln!(s, "          argv: {}", p.argv.join(" "));
        let _ = writeln!(s, "          check: {}", p.check);
    }
    if u.by_environment.is_empty() && u.scan_error.is_none() {
        let _ = writeln!(s, "  no live process carries this run's REA_RUN_ID");
    }
}

/// The reasons with their checks, and the recovery command.
fn reasons_section(s: &mut String, r: &Report, watchdog_alive: bool) {
    if r.reasons.is_empty() {
        let _ = writeln!(s, "\nreasons: none");
    } else {
        let _ = writeln!(s, "\nreasons and what to check:");
        for x in &r.reasons {
            let code = word(&x.code);
            let _ = writeln!(s, "  - {code}: {}", x.detail);
            let _ = writeln!(s, "    check: {}", x.check);
        }
    }
    if let Some(cmd) = &r.recover_command {
        let when = if watchdog_alive {
            "once the watchdog is gone (it refuses while the watchdog lives)"
        } else {
            "to end what is left in the action's cgroup, with proof"
        };
        let _ = writeln!(s, "\nrecovery ({when}):\n  {cmd}");
        let _ = writeln!(
            s,
            "  (NEW: a log file that does not exist yet, outside the stage; then rea-audit verify NEW)"
        );
    }
}

/// The action's cgroup, when the log recorded one.
fn group(s: &mut String, r: &Report) {
    let Some(g) = &r.group else {
        if let Some(c) = &r.containment {
            let _ = writeln!(
                s,
                "group     none: the action ran without a cgroup ({}{})",
                word(&c.mode),
                if c.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.detail)
                }
            );
        }
        return;
    };
    let _ = writeln!(
        s,
        "group     {} (inode {}): {}",
        g.recorded.path, g.recorded.ino, g.detail
    );
    for m in &g.members {
        let m2 = &m.member;
        let foreign = if m.is_foreign() {
            let why: Vec<&str> = m.not_the_action.iter().map(|f| f.as_str()).collect();
            format!(", FOREIGN: not the action's: {}", why.join(", "))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  {:<7} pid {} start {}  member ({}){foreign}",
            if m2.alive { "ALIVE" } else { "gone" },
            m2.pid,
            m2.start_time.map_or("?".into(), |t| t.to_string()),
            m2.comm.as_deref().unwrap_or("?")
        );
        if let Some(c) = &m.check {
            let _ = writeln!(s, "          check: {c}");
        }
    }
    if g.members_not_listed > 0 {
        let _ = writeln!(
            s,
            "  ... and {} more members not listed",
            g.members_not_listed
        );
    }
    if g.members_not_visible > 0 {
        let _ = writeln!(
            s,
            "  ... and {} members outside this PID namespace (pid 0 in cgroup.procs)",
            g.members_not_visible
        );
    }
}
