//! One line of words per watchdog record, for `rea-audit show`'s timeline:
//! what the record says, never a judgement of it.

use super::people::word;
use crate::holders::HolderScan;
use crate::kinds::stage::{Change, StageChange};
use crate::kinds::watchdog::{
    AskEnd, AskEnded, Containment, Event, HoldersScanned, InnerAlarm, JobExited, JobSpawned, Proc,
    Reaped, Receipt, RequestReceived, RequestsRefused, RootBound, RunStarted, SignalReceived,
    SignalSweep, StagingBaseline, StagingChanged, StagingInventoried, StopTriggered, TempEntry,
    Unkillable,
};

/// Sockets, FIFOs, devices: named, since a runtime may still hold them.
fn specials(es: &[TempEntry], truncated: bool) -> String {
    let mut s: String = es
        .iter()
        .filter(|e| !matches!(e.kind.as_str(), "file" | "dir" | "symlink"))
        .map(|e| format!(", {} {}", e.kind, e.path))
        .collect();
    if truncated {
        s.push_str(", ...");
    }
    s
}

/// The first few of `ps`, then how many more: those of `ps` not shown
/// and `unnamed` the record only counts.
fn procs_and(ps: &[Proc], unnamed: u64) -> String {
    const SHOWN: usize = 8;
    let mut s: Vec<String> = ps
        .iter()
        .take(SHOWN)
        .map(|p| format!("{}({})", p.pid, p.comm))
        .collect();
    let more = ps.len().saturating_sub(SHOWN) as u64 + unnamed;
    if more > 0 {
        s.push(format!("+{more} more"));
    }
    s.join(" ")
}

/// One line of summary per record kind.
pub fn summary(ev: &Event) -> String {
    match ev {
        Event::RunStarted(r) => run_started(r),
        Event::RootBound(r) => root_bound(r),
        Event::StageArmed(a) => format!(
            "stage {} armed: {} (inode {}) before any spawn",
            a.path, a.marker, a.ino
        ),
        Event::RequestReceived(r) => request_received(r),
        Event::RequestRefused(r) => format!(
            "{} refused: {} ({})",
            r.id.as_deref().unwrap_or("?"),
            r.reason.as_str(),
            r.detail
        ),
        Event::RequestsRefused(r) => requests_refused(r),
        Event::JobSpawned(j) => job_spawned(j),
        Event::JobFailed(j) => format!(
            "job {} could not start: {} ({}){}",
            j.job,
            j.reason.as_str(),
            j.detail,
            ran(&j.program)
        ),
        Event::JobExited(j) => job_exited(j),
        Event::OutputCapped(o) => format!(
            "job {} output over {} bytes ({})",
            o.job,
            o.cap,
            word(&o.stream)
        ),
        Event::ReplyFailed(r) => format!("reply to {} failed: {}", r.id, r.detail),
        Event::StopTriggered(t) => stop_triggered(t),
        Event::SignalSweep(s) => signal_sweep(s),
        Event::AskEnded(a) => ask_ended(a),
        Event::SignalFailed(f) => format!("signal to {} failed: errno {}", f.target.pid, f.errno),
        Event::SignalReceived(s) => signal_received(s),
        Event::InnerAlarm(a) => inner_alarm(a),
        Event::Reaped(r) => reaped(r),
        Event::MappingUncertain(m) => format!(
            "pid {} ({}) uncertain: {} {}",
            m.process.pid,
            m.process.comm,
            word(&m.reason),
            m.detail
        ),
        Event::Unkillable(u) => unkillable(u),
        Event::ForeignMember(f) => format!(
            "pid {} ({}, uid {}) is in the action's group but not the action's: left alone; {}",
            f.process.pid, f.process.comm, f.process.uid, f.why
        ),
        Event::StopCompleted(s) => format!(
            "{} sweeps in {}ms, echild {}, scan empty {}, left {}",
            s.sweeps, s.elapsed_ms, s.echild, s.scan_empty, s.left
        ),
        Event::TempRootInventoried(t) => format!(
            "{}: {} entries, {} bytes{}",
            t.path,
            t.inventory.entries,
            t.inventory.bytes,
            specials(&t.listing, false)
        ),
        Event::TempRootRemoved(t) => format!("removed {} {}", t.removed, t.detail),
        Event::StagingInventoried(s) => staging_inventoried(s),
        Event::StagingBaseline(b) => staging_baseline(b),
        Event::StartRefused(r) => format!("the start was refused, nothing was launched: {}", r),
        Event::StagingChanged(c) => staging_changed(c),
        Event::HoldersScanned(HoldersScanned::Scanned(h)) => holders_scanned(h),
        Event::HoldersScanned(HoldersScanned::Failed { error }) => {
            format!("could not scan: {error}")
        }
        Event::Containment(c) => containment(c),
        Event::GroupKill(k) => format!(
            "cgroup.kill of group inode {} ({} members)",
            k.ino,
            k.total()
        ),
        Event::GroupKillFailed(k) => {
            format!(
                "cgroup.kill of inode {} failed: errno {} {}",
                k.ino, k.errno, k.detail
            )
        }
        Event::GroupRemoved(g) => format!(
            "group {} inode {}: populated {}, removed {} {}",
            g.group.path, g.group.ino, g.populated, g.removed, g.detail
        ),
        Event::Receipt(r) => receipt(r),
    }
}

/// The mode, the watchdog, its bounds and stage.
fn run_started(r: &RunStarted) -> String {
    format!(
        "{} mode, watchdog pid {}, state {}, grace {}ms, kill bound {}ms{}",
        word(&r.mode),
        r.watchdog.pid,
        r.state_dir,
        r.bounds.term_grace_ms,
        r.bounds.kill_bound_ms,
        r.staging
            .as_ref()
            .map(|s| format!(", staging {}", s.path))
            .unwrap_or_default()
    )
}

/// How many requests were refused unanswered, by reason.
fn requests_refused(r: &RequestsRefused) -> String {
    format!(
        "{} unanswerable request(s) refused ({} bytes): {}",
        r.count,
        r.bytes,
        r.reasons
            .iter()
            .map(|(k, n)| format!("{} {n}", k.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A job's ids and its command.
fn job_spawned(j: &JobSpawned) -> String {
    format!(
        "job {} {} pid {} sid {} ppid {}: {}{}",
        j.job,
        j.name.as_deref().unwrap_or(&j.id),
        j.pid,
        j.sid,
        j.ppid,
        j.argv.join(" "),
        ran(&j.program)
    )
}

/// How a job ended and what it wrote.
fn job_exited(j: &JobExited) -> String {
    format!(
        "job {} pid {} {} after {}ms, out {}B err {}B{}",
        j.job,
        j.pid,
        j.status,
        j.duration_ms,
        j.stdout.bytes,
        j.stderr.bytes,
        if j.stopped { " (stopped)" } else { "" }
    )
}

/// Why the stop began (or was asked again), and whom it names.
fn stop_triggered(t: &StopTriggered) -> String {
    format!(
        "{}{}: {} {}{}",
        t.reason.as_str(),
        if t.first { "" } else { " (already stopping)" },
        t.detail,
        procs_and(&t.processes, t.more_processes.unwrap_or(0)),
        match t.priority {
            Some(p) => format!(" [stopping at priority {}]", word(&p)),
            None => String::new(),
        }
    )
}

/// Why the ask step ended, and how many leaders outlived it.
fn ask_ended(a: &AskEnded) -> String {
    format!(
        "ask step ended after {}ms ({}; {} leader(s) still alive): TERM to the rest",
        a.after_ms,
        match a.reason {
            AskEnd::LeadersExited => "every leader asked has exited",
            AskEnd::HalfGrace => "half the TERM grace passed",
            AskEnd::KillAfter => "timeout's -k duration passed (KILL follows)",
            AskEnd::AskFailed => "no leader alive could be sent its stop signal",
        },
        a.leaders_left
    )
}

/// A signal the watchdog got, and where it went.
fn signal_received(s: &SignalReceived) -> String {
    format!(
        "{} received{}{}",
        s.name,
        match s.count {
            1 => String::new(),
            n => format!(" {n} times"),
        },
        match (s.forwarded, s.to.as_slice()) {
            (false, _) => ": ignored (not a stop)".to_string(),
            (true, []) => ": no running leader to forward it to".to_string(),
            (true, to) => format!(
                ": forwarded to pid {}",
                to.iter()
                    .map(|i| i.pid.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    )
}

/// The first processes reaped, with their status.
fn reaped(r: &Reaped) -> String {
    format!(
        "reaped {}",
        r.processes
            .iter()
            .take(8)
            .map(|p| format!("{} ({})", p.pid, p.status))
            .collect::<Vec<_>>()
            .join(", ")
            + if r.processes.len() > 8 { ", ..." } else { "" }
    )
}

/// A holder scan's size, its answer and each finding.
fn holders_scanned(h: &HolderScan) -> String {
    let mut line = format!(
        "{} processes, {} mount namespaces in {} ms: {}",
        h.processes,
        h.mount_namespaces,
        h.elapsed_us / 1000,
        if h.held() { "HELD" } else { "not held" }
    );
    for f in crate::holders::text::findings(h) {
        line.push_str("; ");
        line.push_str(&f);
    }
    line
}

/// The receipt's outcome and counts.
fn receipt(r: &Receipt) -> String {
    format!(
        "{}{} quiescent {} uncertain {} temp removed {} root alive {} (jobs {}, signals {}, reaped {})",
        word(&r.outcome),
        r.stop_reason.map(|s| format!(" ({})", s.as_str())).unwrap_or_default(),
        r.quiescent,
        r.uncertain_mappings,
        r.temp_root_removed,
        r.root_alive,
        r.counts.jobs,
        r.counts.signals,
        r.counts.reaped
)
}

/// A sweep part: its stage, signals and targets.
fn signal_sweep(s: &SignalSweep) -> String {
    // A part with no target lists members passed over (already
    // signalled, gone, zombies) that did not fit the parts before.
    if s.targets.is_empty() {
        return format!(
            "sweep {} {} (part {}): nothing signalled; {} process(es) passed over",
            s.sweep,
            word(&s.stage).to_uppercase(),
            s.part,
            s.others.len()
        );
    }
    format!(
        "sweep {} {}: {} to {} process(es) {}",
        s.sweep,
        word(&s.stage).to_uppercase(),
        s.signals
            .iter()
            .map(|g| g.name())
            .collect::<Vec<_>>()
            .join("+"),
        s.targets.len(),
        procs_and(&s.targets, 0)
    )
}

/// The root process bound, and how it was chosen.
fn root_bound(r: &RootBound) -> String {
    match (r.root, &r.comm) {
        (Some(root), Some(comm)) => {
            format!(
                "root {} ({comm}), bound as the {}",
                root.pid,
                word(&r.source)
            )
        }
        _ => format!("no root bound ({})", word(&r.source)),
    }
}

/// A request's op, id and caller, as far as they parsed.
fn request_received(r: &RequestReceived) -> String {
    format!(
        "{} {} from {}",
        r.op.map(|o| word(&o)).unwrap_or_else(|| "?".into()),
        r.id.as_deref().unwrap_or("?"),
        r.caller
            .map(|c| c.pid.to_string())
            .unwrap_or_else(|| "?".into())
    )
}

/// The runtime's own alarm sent to a job.
fn inner_alarm(a: &InnerAlarm) -> String {
    format!(
        "inner alarm of job {}: SIGALRM to pid {} after {}ms{}",
        a.job,
        a.pid,
        a.after_ms,
        a.errno
            .map(|e| format!(" (failed: errno {e})"))
            .unwrap_or_default()
    )
}

/// A process the stop could not end or reap in time.
fn unkillable(u: &Unkillable) -> String {
    format!(
        "pid {} ({}) could not be ended or reaped in time: state {}{}; sealed without it",
        u.process.pid,
        u.process.comm,
        u.state,
        u.wchan
            .as_ref()
            .map(|w| format!(", waiting in {w}"))
            .unwrap_or_default()
    )
}

/// The stage's inventory and its special files.
fn staging_inventoried(s: &StagingInventoried) -> String {
    format!(
        "{}: {} entries, {} bytes, digest {}{}",
        s.identity.path,
        s.inventory.entries,
        s.inventory.bytes,
        s.inventory.digest,
        specials(&s.special, s.special_truncated)
    )
}

/// The stage at the start, what was uploaded, and whether pins held.
fn staging_baseline(b: &StagingBaseline) -> String {
    let pinned = match b.pinned {
        0 => String::new(),
        n => format!(", the {n} pinned hashes of the receipt matched"),
    };
    let content = match &b.content {
        Some(c) => format!("; content digest {c}"),
        None => "; too many entries for a content digest".to_string(),
    };
    format!(
        "baseline {}: {} entries, {} bytes, digest {}{}{content}{pinned}",
        b.identity.path,
        b.inventory.entries,
        b.inventory.bytes,
        b.inventory.digest,
        specials(&b.special, b.special_truncated)
    )
}

/// What changed in the stage during the run, entry by entry.
fn staging_changed(c: &StagingChanged) -> String {
    let mut parts: Vec<String> = c.changes.iter().map(stage_change).collect();
    if c.more > 0 {
        parts.push(format!("and {} more", c.more));
    }
    if let Some(why) = &c.unnamed {
        parts.push(why.clone());
    }
    format!(
        "the stage changed during the run (digest {} at start, {} at close): {}",
        c.baseline,
        c.now,
        parts.join("; ")
    )
}

/// One changed entry in words: `replaced bin (file -> symlink)`,
/// `changed lib.so: content, size`, `added x.sock (socket)`.
pub fn stage_change(e: &StageChange) -> String {
    let types = match (e.change, &e.was, &e.now) {
        (Change::Replaced, Some(w), Some(n)) if w != n => format!(" ({w} -> {n})"),
        (_, Some(w), None) | (_, None, Some(w)) | (Change::Replaced, Some(w), _) => {
            format!(" ({w})")
        }
        _ => String::new(),
    };
    let what: Vec<String> = e.what.iter().map(word).collect();
    let what = match what.is_empty() {
        true => String::new(),
        false => format!(": {}", what.join(", ")),
    };
    format!("{} {}{types}{what}", word(&e.change), e.path)
}

/// The containment mode and its group.
fn containment(c: &Containment) -> String {
    match &c.group {
        Some(g) => format!(
            "{} (asked {}): group {} inode {}",
            word(&c.mode),
            word(&c.requested),
            g.path,
            g.ino
        ),
        None => format!(
            "{} (asked {}) {}",
            word(&c.mode),
            word(&c.requested),
            c.detail
        ),
    }
}

/// The file a job ran when its argv[0] does not name it.
fn ran(program: &Option<String>) -> String {
    program
        .as_ref()
        .map_or(String::new(), |p| format!(" [ran {p}]"))
}
