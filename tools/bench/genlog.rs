//! Writes a large, valid, sealed audit log with the library's writer, for
//! `rea-audit verify` throughput figures (tools/bench/bench.py).
//!
//!     cargo run --release --example genlog -- OUT.jsonl RECORDS
//!
//! The mix is a busy action: requests, spawns, exits, reaps and occasional
//! small sweeps, closed by a receipt whose counts agree with the records.
//! Appends are not fdatasync'ed one by one (one sync at the end): this
//! measures verification, not the disk.

use std::path::PathBuf;

use rea::audit::record::*;
use rea::audit::AuditWriter;
use rea::protocol::{Capture, Op};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(out), Some(n)) = (args.next(), args.next()) else {
        eprintln!("usage: genlog OUT.jsonl RECORDS");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("RECORDS is a number");
    let out = PathBuf::from(out);
    let mut w = AuditWriter::create(&out, "bench-1").expect("create log");
    let me = Ident {
        pid: 4242,
        start_time: 1_000_000,
        uid: 1000,
    };
    let mut counts = Counts {
        requests: 0,
        refused: 0,
        jobs: 0,
        signals: 0,
        reaped: 0,
    };
    let put = |w: &mut AuditWriter, ev: Event, counts: &mut Counts| {
        match &ev {
            Event::RequestReceived(_) => counts.requests += 1,
            Event::JobSpawned(_) => counts.jobs += 1,
            Event::JobExited(_) => counts.reaped += 1,
            Event::Reaped(r) => counts.reaped += r.processes.len() as u64,
            Event::SignalSweep(s) => counts.signals += (s.targets.len() * s.signals.len()) as u64,
            _ => {}
        }
        w.append(&ev).expect("append");
    };
    put(
        &mut w,
        Event::RunStarted(RunStarted {
            version: "bench".into(),
            mode: Mode::Run,
            watchdog: me,
            state_dir: "/run/rea/bench".into(),
            bounds: Bounds {
                action_deadline_ms: None,
                term_grace_ms: 500,
                kill_bound_ms: 3000,
                output_cap: Some(65536),
            },
            staging: None,
            pass_env: vec![],
        }),
        &mut counts,
    );
    put(
        &mut w,
        Event::RootBound(RootBound {
            root: Ident {
                pid: 4000,
                start_time: 999_000,
                uid: 1000,
            },
            comm: "python3".into(),
            source: RootSource::Parent,
        }),
        &mut counts,
    );
    let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_string();
    let mut job = 0u64;
    let mut i = 2u64;
    while i + 4 < n {
        job += 1;
        let pid = 10_000 + (job % 20_000) as i32;
        let caller = Ident {
            pid: 4000,
            start_time: 999_000,
            uid: 1000,
        };
        put(
            &mut w,
            Event::RequestReceived(RequestReceived {
                id: Some(format!("launcher-{job}")),
                op: Some(Op::Spawn),
                caller: Some(caller),
                bytes: 287,
            }),
            &mut counts,
        );
        put(
            &mut w,
            Event::JobSpawned(JobSpawned {
                job,
                id: format!("launcher-{job}"),
                name: Some("launcher".into()),
                argv: vec![
                    "/srv/stage/hopper/bin/Hopper".into(),
                    "--headless".into(),
                    format!("--session={job}"),
                ],
                pid,
                start_time: 1_000_000 + job,
                uid: 1000,
                ppid: me.pid,
                sid: pid,
                caller: Some(caller),
                deadline_ms: Some(60_000),
                capture: Capture::Discard,
            }),
            &mut counts,
        );
        put(
            &mut w,
            Event::Reaped(Reaped {
                processes: vec![ReapedProc {
                    pid: pid + 1,
                    start_time: Some(1_000_001 + job),
                    comm: Some("Hopper".into()),
                    status: Status::Code(0),
                }],
            }),
            &mut counts,
        );
        put(
            &mut w,
            Event::JobExited(JobExited {
                job,
                pid,
                start_time: 1_000_000 + job,
                status: Status::Code(0),
                duration_ms: 1234,
                stdout: StreamSummary {
                    bytes: 4096,
                    sha256: sha.clone(),
                },
                stderr: StreamSummary {
                    bytes: 0,
                    sha256: sha.clone(),
                },
                output_capped: false,
                stopped: false,
            }),
            &mut counts,
        );
        i += 4;
    }
    put(
        &mut w,
        Event::TempRootInventoried(TempRootInventoried {
            path: "/run/rea/bench/tmp".into(),
            inventory: Inventory {
                entries: 0,
                bytes: 0,
                digest: sha.clone(),
            },
            listing: vec![],
            truncated: false,
        }),
        &mut counts,
    );
    put(
        &mut w,
        Event::TempRootRemoved(TempRootRemoved {
            removed: true,
            detail: String::new(),
        }),
        &mut counts,
    );
    let receipt = Event::Receipt(Receipt {
        outcome: Outcome::Closed,
        stop_reason: None,
        quiescent: true,
        no_live_or_waitable_descendants: true,
        uncertain_mappings: 0,
        temp_root_removed: true,
        root_alive: true,
        counts,
        staging: None,
    });
    w.seal(&receipt).expect("seal");
    println!("{} {}", out.display(), w.head());
}
