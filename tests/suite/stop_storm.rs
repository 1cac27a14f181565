//! Issue 4: a fork storm bounded to 2000 live processes, still forking
//! during the TERM grace, is contained within the kill bound with nothing
//! left.
//!
//! The storm must not share the machine with the other tests: 2000
//! processes polling every 5 ms starve everything beside them (run among
//! the suite's other tests, stop tests missed their 60 s bounds and the
//! storm its own). So it is ignored in the suite's concurrent run, and
//! `tools/test` runs it last, alone, once in each containment mode:
//! `tools/test -- --ignored stop_storm::`.

use crate::common;

use std::time::{Duration, Instant};

use common::harness::*;
use common::stop::*;
use common::typed::{all, first, Log};
use rea::kinds::watchdog::{ContainMode, Event, StopReason};

#[test]
#[ignore = "runs alone: tools/test runs it after the rest, in both modes"]
fn a_fork_storm_of_2000_is_contained_within_the_kill_bound() {
    let sibling = Sibling::start();
    // The default TERM grace (500 ms: the storm keeps forking through it).
    // The kill bound is generous: 2000 spinning processes on a loaded 2-core
    // box starve the watchdog (one sweep of 2000 took 8 s at load ~500),
    // and the test must not depend on the machine's load. Containment is
    // the proof (ECHILD, empty scan, 0 left) before the bound ran out;
    // elapsed_ms is printed for the report.
    let mut w = Watchdog::start(&["--kill-bound", "60s"]);
    let mut oracle = Oracle::new(&w.scratch, "storm");
    let submit = w.submit_bg(
        &["--name", "storm", "--deadline", "600s"],
        &[
            python(),
            &fixture("storm.py"),
            "--oracle",
            oracle.arg(),
            "--max",
            "2000",
        ],
    );
    // Building 2000 Python processes on a loaded 2-core box takes a while.
    let t0 = Instant::now();
    let (_, ready) = oracle.wait_ready(Duration::from_secs(300));
    assert_eq!(ready["count"], 2000, "{ready}");
    // Slots are taken just before each fork: wait until all 2000 exist.
    // At least, not exactly: the storm keeps forking replacements and the
    // count includes the submit client and the storm's root, so how many
    // exist at the moment of the scan is timing.
    let live = wait_for(
        Duration::from_secs(300),
        "2000 live storm processes",
        || {
            let n = descendant_count(w.pid());
            (n >= 2000).then_some(n)
        },
    );
    let built = t0.elapsed();
    let stop = client_wait(&w, "stop");
    eprintln!("{}", sweep_summary(&w.log()));
    assert!(stop.status.success(), "{stop:?}");
    assert_eq!(json_out(&stop)["quiescent"], true, "{stop:?}");
    assert!(
        oracle.wait_eof(PATIENCE),
        "a storm process survived the stop"
    );
    assert_eq!(run_processes(&w.run_id()), Vec::<i32>::new());
    let out = output_within(submit, PATIENCE);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let close = client_wait(&w, "close");
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let done = assert_positive_stop(&w, &sibling, StopReason::StopRequested);
    let log = w.log();
    let sweeps = all!(log, Event::SignalSweep);
    let targets: usize = sweeps.iter().map(|s| s.targets.len()).sum();
    let reaped: usize = all!(log, Event::Reaped)
        .iter()
        .map(|r| r.processes.len())
        .sum();
    let rc = log.receipt();
    // Figures for the report (not a timed assertion: the proof is `left`
    // 0 with ECHILD and an empty scan before the kill bound ran out).
    eprintln!(
        "STORM: {live} live descendants after {:.1}s; stop took \
         elapsed_ms={} in {} sweep(s) ({} records, {targets} targets), {reaped} orphans reaped, \
         signals={} (receipt counts)",
        built.as_secs_f64(),
        done.elapsed_ms,
        done.sweeps,
        sweeps.len(),
        rc.counts.signals,
    );
    // cgroup mode (docs/containment.md): the TERM sweep ends at the grace and
    // cgroup.kill goes out at once. BENCHMARKS.md holds the strict figure
    // (issue 12 asks <= 100 ms past the grace; on 2 CPUs the storm's own
    // exits take longer, see its notes); here a bound a loaded 2-core box
    // cannot miss, which the 6 s of a TERM sweep starved past the grace
    // (before the cut) and the 4 s of an unfrozen one do.
    let past = done.elapsed_ms.saturating_sub(GRACE_MS);
    let contained = first!(log, Event::Containment).mode;
    eprintln!("STORM: mode {contained:?}: stop done {past} ms past the {GRACE_MS} ms grace");
    if contained == ContainMode::Cgroup {
        assert_eq!(all!(log, Event::GroupKill).len(), 1);
        assert!(past <= 1500, "stop done {past} ms past the grace");
    }
    sibling.assert_alive();
}

/// The default TERM grace.
const GRACE_MS: u64 = 500;

fn descendant_count(pid: i32) -> usize {
    rea::process::scan::descendants(pid)
        .map(|v| v.len())
        .unwrap_or(0)
}

/// One line per signal sweep (time since the trigger, stage, targets,
/// closure members not signalled) and the stop_completed record.
fn sweep_summary(log: &Log) -> String {
    let t0 = log
        .recs
        .iter()
        .find(|r| matches!(r.event, Event::StopTriggered(_)))
        .map_or(0, |r| r.mono_ns);
    let mut out = String::from("STORM sweeps:\n");
    for r in &log.recs {
        let ms = r.mono_ns.saturating_sub(t0) / 1_000_000;
        match &r.event {
            Event::SignalSweep(d) => out.push_str(&format!(
                "  +{ms}ms sweep {} part {} {:?} targets={} others={}\n",
                d.sweep,
                d.part,
                d.stage,
                d.targets.len(),
                d.others.len(),
            )),
            Event::MappingUncertain(d) => out.push_str(&format!("  +{ms}ms uncertain {d:?}\n")),
            Event::SignalFailed(d) => out.push_str(&format!("  +{ms}ms signal_failed {d:?}\n")),
            Event::GroupKill(d) => out.push_str(&format!(
                "  +{ms}ms group_kill ({} members)\n",
                d.members.len()
            )),
            Event::StopCompleted(d) => out.push_str(&format!("  +{ms}ms completed {d:?}\n")),
            _ => {}
        }
    }
    out
}
