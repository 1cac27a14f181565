//! Writes a large, valid, sealed audit log with the library's writer, for
//! `rea-audit verify` throughput figures (tools/bench/bench.py).
//!
//!     cargo run --release --example genlog -- OUT.jsonl RECORDS
//!
//! The mix is a busy action: requests, spawns, exits, reaps and occasional
//! small sweeps, closed by a receipt whose counts agree with the records:
//! counted by the library's one count rule (`Counts::add`) through the
//! writer the tests' log builder uses (tests/suite/common/counted.rs).
//! Appends are not fdatasync'ed one by one (one sync at the end): this
//! measures verification, not the disk.

use std::path::PathBuf;

use rea::kinds::watchdog::*;

#[path = "../../tests/suite/common/counted.rs"]
mod counted;

use counted::{launcher_job, CountedLog, SHA};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(out), Some(n)) = (args.next(), args.next()) else {
        eprintln!("usage: genlog OUT.jsonl RECORDS");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("RECORDS is a number");
    let out = PathBuf::from(out);
    // Appended, one sync at the seal: this measures verification, not the disk.
    let mut log = CountedLog::create(&out, "bench-1", false);
    let me = Ident {
        pid: 4242,
        start_time: 1_000_000,
        uid: 1000,
    };
    let root = Ident {
        pid: 4000,
        start_time: 999_000,
        uid: 1000,
    };
    log.put(&Event::RunStarted(RunStarted {
        version: "bench".into(),
        mode: Mode::Run,
        watchdog: me,
        state_dir: "/run/rea/bench".into(),
        bounds: Bounds {
            action_deadline_ms: None,
            term_grace_ms: 500,
            kill_bound_ms: 3000,
            output_cap: Some(65536),
            ask: Default::default(),
        },
        staging: None,
        pass_env: vec![],
        handover: None,
    }));
    log.put(&Event::RootBound(RootBound {
        root: Some(root),
        comm: Some("python3".into()),
        source: RootSource::Parent,
    }));
    let mut job = 0u64;
    let mut i = 2u64;
    while i + 4 < n {
        job += 1;
        for ev in &launcher_job(job, root, me.pid) {
            log.put(ev);
        }
        i += 4;
    }
    log.put(&Event::TempRootInventoried(TempRootInventoried {
        path: "/run/rea/bench/tmp".into(),
        inventory: Inventory {
            entries: 0,
            bytes: 0,
            digest: SHA.to_string(),
        },
        listing: vec![],
        truncated: false,
    }));
    log.put(&Event::TempRootRemoved(TempRootRemoved {
        removed: true,
        detail: String::new(),
    }));
    let receipt = Event::Receipt(Receipt {
        outcome: Outcome::Closed,
        stop_reason: None,
        quiescent: true,
        no_live_or_waitable_descendants: true,
        uncertain_mappings: 0,
        temp_root_removed: true,
        root_alive: true,
        counts: log.counts.clone(),
        staging: None,
    });
    log.w.seal(&receipt).expect("seal");
    println!("{} {}", out.display(), log.w.head());
}
