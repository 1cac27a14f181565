//! Append rate of the audit writer with durability on (tools/bench/bench.py).
//!
//!     cargo run --release --example auditrate -- OUT.jsonl RECORDS SYNC_EVERY
//!
//! Appends RECORDS typical records (a request, a spawn, a reap, an exit,
//! in turn: the launcher job of tests/suite/common/counted.rs, which genlog
//! writes too) with the library's `AuditWriter` and makes them durable with one
//! `fdatasync` every SYNC_EVERY records (1: `AuditWriter::record`, i.e. each
//! record durable before the next, as the watchdog does for acts). Prints one
//! JSON line: records, seconds, records per second, bytes.

use std::path::PathBuf;
use std::time::Instant;

use rea::audit::AuditWriter;
use rea::kinds::watchdog::*;

// Only the record mix: this measures the writer itself, nothing counted.
#[allow(dead_code)]
#[path = "../../tests/suite/common/counted.rs"]
mod counted;

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
    // Each record is built inside the timed loop, as the watchdog builds
    // its own: one launcher job (four records) at a time.
    let mut jobs = (1u64..).flat_map(|job| counted::launcher_job(job, caller, 4242));
    let t = Instant::now();
    for i in 0..n {
        let ev = jobs.next().expect("an endless mix");
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
