//! Append rate of the audit writer with durability on (tools/bench/bench.py).
//!
//!     cargo run --release --example auditrate -- OUT.jsonl RECORDS SYNC_EVERY
//!
//! Appends RECORDS typical records (a request, a spawn, a reap, an exit,
//! in turn) with the library's `AuditWriter` and makes them durable with one
//! `fdatasync` every SYNC_EVERY records (1: `AuditWriter::record`, i.e. each
//! record durable before the next, as the watchdog does for acts). Prints one
//! JSON line: records, seconds, records per second, bytes.

use std::path::PathBuf;
use std::time::Instant;

use rea::audit::record::*;
use rea::audit::AuditWriter;
use rea::protocol::{Capture, Op};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(out), Some(n), Some(every)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: auditrate OUT.jsonl RECORDS SYNC_EVERY");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("RECORDS is a number");
    let every: u64 = every.parse().expect("SYNC_EVERY is a number");
    assert!(every >= 1, "SYNC_EVERY is at least 1");
    let out = PathBuf::from(out);
    let mut w = AuditWriter::create(&out, "rate-1").expect("create log");
    let caller = Ident {
        pid: 4000,
        start_time: 999_000,
        uid: 1000,
    };
    let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_string();
    let event = |i: u64| -> Event {
        let job = i / 4 + 1;
        let pid = 10_000 + (job % 20_000) as i32;
        match i % 4 {
            0 => Event::RequestReceived(RequestReceived {
                id: Some(format!("launcher-{job}")),
                op: Some(Op::Spawn),
                caller: Some(caller),
                bytes: 287,
            }),
            1 => Event::JobSpawned(JobSpawned {
                job,
                id: format!("launcher-{job}"),
                name: Some("launcher".into()),
                argv: vec!["/srv/stage/hopper/bin/Hopper".into(), "--headless".into()],
                pid,
                start_time: 1_000_000 + job,
                uid: 1000,
                ppid: 4242,
                sid: pid,
                caller: Some(caller),
                deadline_ms: Some(60_000),
                capture: Capture::Discard,
            }),
            2 => Event::Reaped(Reaped {
                processes: vec![ReapedProc {
                    pid: pid + 1,
                    start_time: Some(1_000_001 + job),
                    comm: Some("Hopper".into()),
                    status: Status::Code(0),
                }],
            }),
            _ => Event::JobExited(JobExited {
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
        }
    };
    let t = Instant::now();
    for i in 0..n {
        let ev = event(i);
        if every == 1 {
            w.record(&ev).expect("record");
        } else {
            w.append(&ev).expect("append");
            if (i + 1) % every == 0 {
                w.sync().expect("sync");
            }
        }
    }
    w.sync().expect("sync");
    let secs = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!(
        "{{\"records\":{n},\"sync_every\":{every},\"seconds\":{secs:.6},\"per_s\":{:.1},\"bytes\":{bytes}}}",
        n as f64 / secs
    );
}
