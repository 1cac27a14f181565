//! The log reader under arbitrary input (proptest) and a bounded mutation
//! fuzz of `rea-audit verify` over a real log built with the library
//! writer (`common::logs`): no panic, no hang (each run within 2 s), memory
//! bounded (run under `prlimit --as`), and never exit 0 with the
//! original's `--expect-head` unless the bytes are the original's.
//!
//! Short by default; `REA_FUZZ_LONG=1` runs the long mode (many more cases,
//! and the huge sweep with a million parts).

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::counted::CountedLog;
use common::harness::output_within;
use common::logs::{build, LogOpts};
use proptest::prelude::*;
use rea::audit::reader::parse_line;
use rea::audit::verify::{verify_bytes, VerifyOptions};
use rea::kinds::watchdog::{
    Bounds, Event, Ident, Mode, Outcome, Proc, Receipt, RootBound, RootSource, RunStarted, Sig,
    SignalSweep, Stage, StopCompleted, StopPriority, StopReason, StopTriggered, TempRootRemoved,
};
use rea::process::identity;

fn long() -> bool {
    std::env::var_os("REA_FUZZ_LONG").is_some_and(|v| !v.is_empty() && v != "0")
}

fn cases(short: u32, long_: u32) -> u32 {
    if long() {
        long_
    } else {
        short
    }
}

/// `rea-audit ARGS` with its address space capped at `as_mib`, at most 2 s
/// of CPU (`prlimit --cpu`: a spin is killed whatever the machine's load)
/// and a 60 s wall-clock bound: a hang fails the test; a loaded 2-core
/// machine does not. (10 s was exceeded once in a full `tools/test` run,
/// beside the crowd and zombie tests, whose watchdogs stop thousands of
/// processes at `SCHED_FIFO`; the same seed passes alone in under 3 s.)
fn audit_limited(as_mib: u64, args: &[&std::ffi::OsStr]) -> Output {
    let child = Command::new("prlimit")
        .arg(format!("--as={}", as_mib << 20))
        .arg("--cpu=2")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_rea-audit"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn prlimit rea-audit");
    output_within(child, Duration::from_secs(60))
}

// ---------------------------------------------------------------------------
// Arbitrary bytes never panic the reader, the verifier or the timeline.

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256, 20_000), ..ProptestConfig::default() })]

    #[test]
    fn parse_line_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_line(&bytes);
    }

    #[test]
    fn verify_and_show_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let v = verify_bytes(&bytes, "fuzz", &VerifyOptions::default());
        prop_assert_ne!(v.exit_code, 0, "random bytes are never a sealed log");
        let _ = rea::audit::show::timeline(&bytes);
    }

    #[test]
    fn json_shaped_garbage_never_panics(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("{".to_string()), Just("}".to_string()), Just("[".to_string()),
                Just("]".to_string()), Just(",".to_string()), Just(":".to_string()),
                Just("\"v\"".to_string()), Just("\"data\"".to_string()), Just("\"kind\"".to_string()),
                Just("\"receipt\"".to_string()), Just("1".to_string()), Just("1.0".to_string()),
                Just("null".to_string()), Just("\n".to_string()), Just("\"\\u0000\"".to_string()),
                "[a-z_]{1,8}".prop_map(|s| format!("\"{s}\"")),
            ],
            0..64,
        )
    ) {
        let text = parts.concat();
        let _ = parse_line(text.as_bytes());
        let _ = verify_bytes(text.as_bytes(), "fuzz", &VerifyOptions::default());
        let _ = rea::audit::show::timeline(text.as_bytes());
    }
}

// ---------------------------------------------------------------------------
// Mutation fuzz of the binary over a real log.

/// xorshift64*: reproducible from the seed printed on failure.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn line_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    spans
}

/// One to three random edits: bit flips, inserted or deleted bytes, a line
/// swapped, duplicated or dropped, the file cut short.
fn mutate(orig: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = orig.to_vec();
    for _ in 0..1 + rng.below(3) {
        match rng.below(7) {
            0 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(d.len() + 1);
                let bytes = [b'\n', b' ', b'"', b'{', b'[', b'0', b'\\', 0xc3, 0x1e];
                let b = if rng.below(2) == 0 {
                    bytes[rng.below(bytes.len())]
                } else {
                    rng.next() as u8
                };
                d.insert(i, b);
            }
            2 if !d.is_empty() => {
                let i = rng.below(d.len());
                let n = 1 + rng.below(16.min(d.len() - i));
                d.drain(i..i + n);
            }
            3..=5 => {
                let spans = line_spans(&d);
                if spans.len() < 2 {
                    continue;
                }
                let a = rng.below(spans.len());
                let b = rng.below(spans.len());
                let mut lines: Vec<Vec<u8>> =
                    spans.iter().map(|&(s, e)| d[s..e].to_vec()).collect();
                let tail = d[spans.last().unwrap().1..].to_vec();
                match rng.below(3) {
                    0 => lines.swap(a, b),
                    1 => {
                        let l = lines[a].clone();
                        lines.insert(b, l);
                    }
                    _ => {
                        lines.remove(a);
                    }
                }
                d = lines.concat();
                d.extend(tail);
            }
            _ if !d.is_empty() => {
                let n = rng.below(d.len());
                d.truncate(n);
            }
            _ => {}
        }
    }
    d
}

#[test]
fn mutation_fuzz_of_verify() {
    let t = tempfile::tempdir().unwrap();
    let stage = t.path().join("stage");
    fs::create_dir_all(stage.join("bin")).unwrap();
    fs::write(stage.join("bin/tool"), b"#!/bin/sh\n").unwrap();
    let logs = [
        build(&LogOpts::closed("fuzz-closed")),
        build(&LogOpts {
            staging: Some(stage.clone()),
            ..LogOpts::stopped("fuzz-stopped", StopReason::Abandoned)
        }),
    ];
    let seed = std::env::var("REA_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_u64);
    let mut rng = Rng(seed | 1);
    let runs = cases(120, 5_000);
    let path = t.path().join("mutated.jsonl");
    // Unmutated, each is allowed: the fuzz starts from a log that verifies.
    for (i, log) in logs.iter().enumerate() {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "verify".as_ref(),
            log.path.as_os_str(),
            "--json".as_ref(),
            "--expect-head".as_ref(),
            log.head.as_ref(),
        ];
        if i == 1 {
            args.extend(["--staging".as_ref(), stage.as_os_str()]);
        }
        assert_eq!(audit_limited(256, &args).status.code(), Some(0));
    }
    for i in 0..runs {
        let log = &logs[i as usize % logs.len()];
        let orig = fs::read(&log.path).unwrap();
        let data = mutate(&orig, &mut rng);
        fs::write(&path, &data).unwrap();
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "verify".as_ref(),
            path.as_os_str(),
            "--json".as_ref(),
            "--expect-head".as_ref(),
            log.head.as_ref(),
        ];
        if i % 2 == 1 {
            args.extend(["--staging".as_ref(), stage.as_os_str()]);
        }
        let out = audit_limited(256, &args);
        let code = out.status.code();
        let what = format!(
            "seed {seed:#x} run {i}: {:?}",
            String::from_utf8_lossy(&data)
        );
        assert!(
            matches!(code, Some(0..=4)),
            "{what}: exit {:?}, stderr {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{what}: no verdict ({e})"));
        assert_eq!(v["exit_code"].as_i64(), code.map(i64::from), "{what}");
        if code == Some(0) {
            assert_eq!(
                data, orig,
                "{what}: exit 0 for bytes that are not the original's"
            );
        }
        // The timeline too: bounded, no panic.
        // It exits as verify of the same file with no options does.
        let shown = audit_limited(256, &["show".as_ref(), path.as_os_str()]);
        let plain = audit_limited(256, &["verify".as_ref(), path.as_os_str()]);
        assert_eq!(
            shown.status.code(),
            plain.status.code(),
            "{what}: show exits as verify {:?}",
            shown.status
        );
    }
}

// ---------------------------------------------------------------------------
// One huge sweep: verify holds the closure's pids, not its parts.

fn me() -> Ident {
    Ident {
        pid: std::process::id() as i32,
        start_time: identity::self_start_time().unwrap(),
        uid: nix::unistd::getuid().as_raw(),
    }
}

/// A stopped action whose one SIGTERM sweep has `parts` parts of `per`
/// targets each (all children of the watchdog), proved quiescent.
fn huge_sweep_log(path: &Path, parts: u32, per: u32) -> String {
    let me = me();
    let ppid = nix::unistd::getppid().as_raw();
    let mut log = CountedLog::create(path, "huge-sweep", false);
    log.put(&Event::RunStarted(RunStarted {
        version: env!("CARGO_PKG_VERSION").into(),
        mode: Mode::Run,
        watchdog: me,
        state_dir: "/run/rea/huge".into(),
        bounds: Bounds {
            action_deadline_ms: None,
            term_grace_ms: 500,
            kill_bound_ms: 3_000,
            output_cap: None,
            ask: Default::default(),
        },
        staging: None,
        pass_env: Vec::new(),
        handover: None,
    }));
    log.put(&Event::RootBound(RootBound {
        root: Some(Ident {
            pid: ppid,
            start_time: 1,
            uid: me.uid,
        }),
        comm: Some("controller".into()),
        source: RootSource::Parent,
    }));
    log.put(&Event::StopTriggered(StopTriggered {
        reason: StopReason::Signal,
        first: true,
        detail: "SIGTERM".into(),
        job: None,
        processes: Vec::new(),
        more_processes: None,
        priority: Some(StopPriority::Unchanged),
    }));
    let mut pid = 100_000;
    for part in 0..parts {
        let mut targets = Vec::with_capacity(per as usize);
        while targets.len() < per as usize {
            pid += 1;
            if pid == me.pid || pid == ppid {
                continue;
            }
            targets.push(Proc {
                pid,
                ppid: me.pid,
                start_time: 7,
                uid: me.uid,
                comm: "w".into(),
            });
        }
        log.put(&Event::SignalSweep(SignalSweep {
            sweep: 1,
            part,
            stage: Stage::Term,
            signals: vec![Sig::TERM],
            targets,
            others: Vec::new(),
            cont: Vec::new(),
        }));
    }
    log.put(&Event::StopCompleted(StopCompleted {
        reason: StopReason::Signal,
        sweeps: 1,
        elapsed_ms: 900,
        echild: true,
        scan_empty: true,
        left: 0,
        foreign: None,
    }));
    log.put(&Event::TempRootRemoved(TempRootRemoved {
        removed: true,
        detail: String::new(),
    }));
    let receipt = Receipt {
        outcome: Outcome::Stopped,
        stop_reason: Some(StopReason::Signal),
        quiescent: true,
        no_live_or_waitable_descendants: true,
        uncertain_mappings: 0,
        temp_root_removed: true,
        root_alive: true,
        counts: log.counts.clone(),
        staging: None,
    };
    log.w.seal(&Event::Receipt(receipt)).unwrap();
    log.w.head().to_string()
}

#[test]
fn one_huge_sweep_verifies_in_bounded_memory() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("huge.jsonl");
    // ~80 MB of sweep parts; the long mode writes a million small parts.
    let (parts, per) = if long() {
        (1_000_000, 1)
    } else {
        (1_000, 1_200)
    };
    let head = huge_sweep_log(&path, parts, per);
    let size = fs::metadata(&path).unwrap().len();
    assert!(
        size > 64 << 20,
        "the log must be larger than the limit: {size}"
    );
    let child = Command::new("prlimit")
        .arg(format!("--as={}", 64u64 << 20))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_rea-audit"))
        .arg("verify")
        .arg(&path)
        .args(["--json", "--expect-head", &head])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(if long() { 600 } else { 60 }));
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify of a {size}-byte log in 64 MiB: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
