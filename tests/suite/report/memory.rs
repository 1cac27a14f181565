//! Memory is bounded by the line cap and the drawings' caps, never by the
//! log (review of issue 13, item 5): the askers of `show` (who asked for
//! a job, used by the timeline and the table) kept every job's full name
//! in a list searched from the start for each job.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use common::counted::{launcher_job, CountedLog};
use common::harness::*;
use rea::kinds::watchdog::*;

fn start(me: Ident) -> Event {
    Event::RunStarted(RunStarted {
        version: "test".into(),
        mode: Mode::Run,
        watchdog: me,
        state_dir: "/run/rea/busy".into(),
        bounds: Bounds {
            action_deadline_ms: None,
            term_grace_ms: 500,
            kill_bound_ms: 3000,
            output_cap: None,
            ask: Default::default(),
        },
        staging: None,
        pass_env: vec![],
        handover: None,
    })
}

/// A log of `jobs` launcher jobs (four records each, after run_started);
/// `name` gives a job its name.
pub(super) fn busy_log(dir: &Path, jobs: u64, name: impl Fn(u64) -> String) -> PathBuf {
    let path = dir.join("busy.jsonl");
    let mut log = CountedLog::create(&path, "busy-1", false);
    let me = Ident {
        pid: 4242,
        start_time: 1_000_000,
        uid: uid(),
    };
    let root = Ident {
        pid: 4000,
        start_time: 999_000,
        uid: uid(),
    };
    log.put(&start(me));
    for job in 1..=jobs {
        let mut evs = launcher_job(job, root, me.pid);
        if let Event::JobSpawned(j) = &mut evs[1] {
            j.name = Some(name(job));
        }
        for ev in &evs {
            log.put(ev);
        }
    }
    drop(log);
    path
}

/// `rea-audit report LOG -o OUT`: its exit status and its peak resident
/// set (KiB). A process's `ru_maxrss` keeps the high-water mark of the
/// memory it was forked with (and of a vfork parent's, at exec), so a
/// child of this test binary, which runs hundreds of tests at once,
/// would start at the test binary's own peak (42 MB seen in a full run).
/// A small Python forks it instead (its own copy, ~10 MB, is the floor)
/// and reports what `wait4` says of that child alone.
fn peak_rss(log: &Path, out: &Path) -> (i32, i64) {
    const WAIT: &str = "import os, sys\n\
        pid = os.fork()\n\
        if pid == 0:\n    os.execv(sys.argv[1], sys.argv[1:])\n\
        _, status, ru = os.wait4(pid, 0)\n\
        print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)";
    let out = Command::new(python())
        .args(["-c", WAIT, audit_bin(), "report"])
        .arg(log)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|w| w.parse::<i64>());
    match (it.next(), it.next()) {
        (Some(Ok(code)), Some(Ok(kib))) => (code as i32, kib),
        _ => panic!("no status and peak from the wait: {out:?}"),
    }
}

/// 100 jobs named with 500 KB each (a 50 MB log): the report held every
/// name in full, twice (the timeline's and the table's askers), 105 MB.
/// Memory is bounded by the line cap (1 MiB) and the drawings' caps.
#[test]
fn long_job_names_do_not_grow_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let log = busy_log(dir.path(), 100, |j| format!("{j}-{}", "n".repeat(500_000)));
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size > 50_000_000, "{size}");
    let (code, kib) = peak_rss(&log, &dir.path().join("busy.html"));
    assert!(code < 4, "{code}");
    eprintln!("report: peak RSS {kib} KiB for a {size}-byte log");
    assert!(
        kib < 40 * 1024,
        "peak RSS {kib} KiB for a {size}-byte log: bounded by the line cap, not the names"
    );
}
