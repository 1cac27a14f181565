//! The audit-log writing the tests' log builder ([`super::logs`]) and the
//! bench examples (`tools/bench/genlog.rs`, `auditrate.rs`) share: the
//! library's `AuditWriter`, with the receipt's counts kept by the library's
//! one count rule (`Counts::add`, the rule the watchdog writes by and
//! `audit::replay` recounts by), and the record mix of one launcher job in
//! a busy action.
//!
//! The examples include this file by path
//! (`#[path = "../../tests/suite/common/counted.rs"] mod counted;`), so it uses
//! only `rea` and `std`.

use std::path::Path;

use rea::audit::AuditWriter;
use rea::kinds::watchdog::{
    Counts, Event, JobExited, JobSpawned, Reaped, ReapedProc, RequestReceived, StreamSummary,
};
use rea::vocab::{Capture, Ident, Op, Sig, Status};

/// An `AuditWriter` whose `counts` follow every record put through it.
pub struct CountedLog {
    pub w: AuditWriter,
    pub counts: Counts,
    /// true: each record durable before the next (`AuditWriter::record`,
    /// as the watchdog writes acts); false: appended, synced at the seal.
    durable: bool,
}

impl CountedLog {
    pub fn create(path: &Path, run: &str, durable: bool) -> CountedLog {
        CountedLog {
            w: AuditWriter::create(path, run).expect("create the audit log"),
            counts: Counts::default(),
            durable,
        }
    }

    /// Writes `ev` and counts it.
    pub fn put(&mut self, ev: &Event) {
        self.counts.add(ev);
        if self.durable {
            self.w.record(ev).expect("the audit writer records");
        } else {
            self.w.append(ev).expect("the audit writer appends");
        }
    }
}

/// A stream summary's digest (any valid sha256 hex will do for volume).
pub const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

/// Job `job` of a busy action, as the watchdog (`watchdog_pid`) records it
/// for a spawn asked by `caller`: request received, job spawned, one
/// double-forked child reaped, job exited 0.
pub fn launcher_job(job: u64, caller: Ident, watchdog_pid: i32) -> [Event; 4] {
    let pid = 10_000 + (job % 20_000) as i32;
    let start_time = 1_000_000 + job;
    let summary = |bytes| StreamSummary {
        bytes,
        sha256: SHA.to_string(),
    };
    [
        Event::RequestReceived(RequestReceived {
            id: Some(format!("launcher-{job}")),
            op: Some(Op::Spawn),
            caller: Some(caller),
            bytes: 287,
        }),
        Event::JobSpawned(JobSpawned {
            job,
            id: format!("launcher-{job}"),
            name: Some("launcher".into()),
            program: None,
            cwd: None,
            env: None,
            argv: vec![
                "/srv/stage/hopper/bin/Hopper".into(),
                "--headless".into(),
                format!("--session={job}"),
            ],
            pid,
            start_time,
            uid: caller.uid,
            ppid: watchdog_pid,
            sid: pid,
            caller: Some(caller),
            caller_job: None,
            deadline_ms: Some(60_000),
            inner_alarm_ms: None,
            capture: Capture::Discard,
            stop_signal: Sig::TERM,
        }),
        Event::Reaped(Reaped {
            processes: vec![ReapedProc {
                pid: pid + 1,
                start_time: Some(start_time + 1),
                comm: Some("Hopper".into()),
                status: Status::Code(0),
            }],
        }),
        Event::JobExited(JobExited {
            job,
            pid,
            start_time,
            status: Status::Code(0),
            duration_ms: 1234,
            stdout: summary(4096),
            stderr: summary(0),
            output_capped: false,
            stopped: false,
        }),
    ]
}
