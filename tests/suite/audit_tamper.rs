//! Tampering with a sealed audit log, byte by byte, and the exact reason
//! `rea-audit verify --json` gives for it.
//!
//! The base log is a clean, closed action written with the library writer
//! (`common::logs::build`): `verify` says delete_allowed with no reason.
//! Every case edits it the way someone with write access to the file could
//! and asserts the whole list of (reason code, line) and the exit code.
//! Lines are 1-based; `seq` is 0-based, so line N carries seq N-1.
//!
//! How each edit is caught follows from the chain rule: a record is bound
//! to the one *before* it (its `prev`), so an edit of line K that still
//! parses is caught by line K+1's `prev`. The last line (the receipt) has no
//! successor: only a pinned head catches an edit there, and a forger who
//! re-chains every later `prev` is caught only by the pinned head too.

use crate::common;

use std::fs;
use std::process::Command;

use common::logs::{
    build, prev_of, rechain, replace_once, seq_of, verify, with_prev, with_seq, write_lines,
    BuiltLog, LogOpts, Verified,
};
use rea::audit::AuditWriter;
use rea::kinds::watchdog::{Event, InnerAlarm, RequestReceived, StopReason};
use rea::log::chain;
use rea::log::writer::MAX_LINE;
use rea::protocol::Op;

type Lines = Vec<Vec<u8>>;

fn base(run: &str) -> BuiltLog {
    let log = build(&LogOpts::closed(run));
    verify(&log.path, &[]).expect("delete_allowed", 0, &[]);
    log
}

/// Builds the base log, edits its lines with `edit`, writes them back and
/// verifies (with `args`).
fn tampered(
    run: &str,
    args: &[&str],
    edit: impl FnOnce(&BuiltLog, &mut Lines),
) -> (BuiltLog, Verified) {
    let log = base(run);
    let mut lines = log.lines();
    edit(&log, &mut lines);
    write_lines(&log.path, &lines);
    let v = verify(&log.path, args);
    (log, v)
}

fn n(line: usize) -> Option<u64> {
    Some(line as u64)
}

/// `code` on every line of `from..=to`.
fn each(code: &'static str, from: usize, to: usize) -> Vec<(&'static str, Option<u64>)> {
    (from..=to).map(|l| (code, n(l))).collect()
}

// ---------------------------------------------------------------------------
// Edits of a middle line that still parse: the next line's prev catches them.

#[test]
fn edit_of_a_data_field_breaks_the_next_prev() {
    let mut k = 0;
    let (_, v) = tampered("edit-data", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        lines[k - 1] = replace_once(&lines[k - 1], "/opt/hopper/install.sh", b"/tmp/payload.sh");
    });
    v.expect("tampered", 3, &[("prev_mismatch", n(k + 1))]);
}

#[test]
fn edit_of_prev_breaks_that_line_and_the_next() {
    let mut k = 0;
    let (_, v) = tampered("edit-prev", &[], |log, lines| {
        k = log.line_of("job_exited", 0);
        let forged = chain::line_hash(b"not the line before");
        lines[k - 1] = with_prev(&lines[k - 1], &forged);
    });
    v.expect(
        "tampered",
        3,
        &[("prev_mismatch", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn edit_of_seq_is_a_seq_mismatch_and_breaks_the_next_prev() {
    let mut k = 0;
    let (_, v) = tampered("edit-seq", &[], |log, lines| {
        k = log.line_of("request_refused", 0);
        assert_eq!(seq_of(&lines[k - 1]), k as u64 - 1);
        lines[k - 1] = with_seq(&lines[k - 1], 41);
    });
    v.expect(
        "tampered",
        3,
        &[("seq_mismatch", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn whitespace_change_breaks_the_next_prev() {
    let mut k = 0;
    let (_, v) = tampered("whitespace", &[], |log, lines| {
        k = log.line_of("root_bound", 0);
        // Still the same JSON value; not the same bytes.
        lines[k - 1] = replace_once(&lines[k - 1], ",\"seq\":", b", \"seq\":");
    });
    // The line itself is not the writer's encoding (`non_canonical`), and the chain
    // notices the bytes changed.
    v.expect(
        "tampered",
        3,
        &[("non_canonical", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn key_order_change_breaks_the_next_prev() {
    let mut k = 0;
    let (_, v) = tampered("key-order", &[], |log, lines| {
        k = log.line_of("job_spawned", 1);
        lines[k - 1] = replace_once(
            &lines[k - 1],
            "{\"v\":1,\"run\":\"key-order\",",
            b"{\"run\":\"key-order\",\"v\":1,",
        );
    });
    v.expect(
        "tampered",
        3,
        &[("non_canonical", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn unicode_escape_of_the_same_character_breaks_the_next_prev() {
    let mut k = 0;
    let (_, v) = tampered("u-escape", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        // "\u006a" is "j": the record means the same, the bytes differ.
        lines[k - 1] = replace_once(
            &lines[k - 1],
            "\"kind\":\"job_spawned\"",
            b"\"kind\":\"\\u006aob_spawned\"",
        );
    });
    v.expect(
        "tampered",
        3,
        &[("non_canonical", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

// ---------------------------------------------------------------------------
// Lines removed, moved or repeated.

#[test]
fn deleting_the_first_line_loses_genesis_and_run_started() {
    let mut last = 0;
    let (_, v) = tampered("del-first", &[], |_, lines| {
        lines.remove(0);
        last = lines.len();
    });
    // Line 1 is now root_bound (seq 1): its seq, its prev (the hash of the
    // deleted line, not the genesis) and its kind are all wrong; every later
    // line is one seq ahead, but their prevs still chain.
    let mut want = vec![
        ("seq_mismatch", n(1)),
        ("genesis_mismatch", n(1)),
        ("first_not_run_started", n(1)),
    ];
    want.extend(each("seq_mismatch", 2, last));
    v.expect("tampered", 3, &want);
}

#[test]
fn deleting_a_middle_line_is_a_seq_gap_and_a_broken_prev() {
    let mut k = 0;
    let mut last = 0;
    let (_, v) = tampered("del-middle", &[], |log, lines| {
        k = log.line_of("job_exited", 0);
        lines.remove(k - 1);
        last = lines.len();
    });
    let mut want = vec![("seq_mismatch", n(k)), ("prev_mismatch", n(k))];
    want.extend(each("seq_mismatch", k + 1, last));
    v.expect("tampered", 3, &want);
}

#[test]
fn deleting_the_last_line_is_an_unsealed_log_unless_the_head_is_pinned() {
    // Without a pin, a log cut before its receipt is exactly what a lost
    // watchdog leaves: incomplete, not provably tampered (the documented limit).
    let (log, v) = tampered("del-last", &[], |_, lines| {
        lines.pop();
    });
    v.expect("incomplete", 2, &[("no_receipt", None)]);
    assert_eq!(v.json["sealed"], false);
    // The pinned head tells them apart.
    verify(&log.path, &["--expect-head", &log.head]).expect(
        "tampered",
        3,
        &[("head_mismatch", None), ("no_receipt", None)],
    );
}

#[test]
fn dropping_the_receipt_and_the_stop_with_a_pinned_head_is_tampered() {
    // Cut back to where the jobs were still running, a clean line boundary.
    let mut keep = 0;
    let (log, v) = tampered("drop-receipt", &[], |log, lines| {
        keep = log.line_of("job_exited", 0) - 1;
        lines.truncate(keep);
    });
    v.expect("incomplete", 2, &[("no_receipt", None)]);
    assert_eq!(v.json["records"].as_u64(), Some(keep as u64));
    verify(
        &log.path,
        &["--expect-head", &log.head, "--expect-run", "drop-receipt"],
    )
    .expect(
        "tampered",
        3,
        &[("head_mismatch", None), ("no_receipt", None)],
    );
}

#[test]
fn swapping_two_lines_breaks_both_and_the_next_prev() {
    let mut k = 0;
    let (_, v) = tampered("reorder", &[], |log, lines| {
        // The two job_exited records: a plausible order either way.
        k = log.line_of("job_exited", 0);
        assert_eq!(log.line_of("job_exited", 1), k + 1);
        lines.swap(k - 1, k);
    });
    v.expect(
        "tampered",
        3,
        &[
            ("seq_mismatch", n(k)),
            ("prev_mismatch", n(k)),
            // The earlier record now comes second: its clock goes back.
            ("mono_regressed", n(k + 1)),
            ("seq_mismatch", n(k + 1)),
            ("prev_mismatch", n(k + 1)),
            ("prev_mismatch", n(k + 2)),
        ],
    );
}

#[test]
fn duplicating_a_line_repeats_a_seq_and_breaks_its_prev() {
    let mut k = 0;
    let mut last = 0;
    let (_, v) = tampered("dup-line", &[], |log, lines| {
        k = log.line_of("job_spawned", 1);
        let copy = lines[k - 1].clone();
        lines.insert(k, copy);
        last = lines.len();
    });
    // The copy (line k+1) repeats seq k-1 and chains to line k-1, not to
    // line k. The line after it chains to an identical line, so its prev
    // holds; from there on every seq is one behind.
    let mut want = vec![("seq_mismatch", n(k + 1)), ("prev_mismatch", n(k + 1))];
    want.extend(each("seq_mismatch", k + 2, last));
    v.expect("tampered", 3, &want);
}

#[test]
fn seq_gap_with_the_chain_recomputed_is_caught_by_seq_alone() {
    let mut k = 0;
    let mut last = 0;
    let (_, v) = tampered("seq-gap", &[], |log, lines| {
        k = log.line_of("job_exited", 0);
        last = lines.len();
        for line in lines.iter_mut().skip(k - 1) {
            let s = seq_of(line);
            *line = with_seq(line, s + 1);
        }
        rechain(lines, "seq-gap", k);
    });
    v.expect("tampered", 3, &each("seq_mismatch", k, last));
}

// ---------------------------------------------------------------------------
// The receipt: exactly one, and last.

#[test]
fn a_second_receipt_is_tampered() {
    let first = build(&LogOpts::closed("two-receipts"));
    let rc = first.receipt.clone().unwrap();
    let log = build(&LogOpts {
        after_receipt: vec![Event::Receipt(rc)],
        ..LogOpts::closed("two-receipts")
    });
    let last = log.kinds.len();
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("duplicate_receipt", n(last))]);
    // The chain itself holds: the writer appended it.
    assert_eq!(v.head(), Some(log.head.as_str()));
}

#[test]
fn a_record_after_the_receipt_is_tampered() {
    let log = build(&LogOpts {
        after_receipt: vec![Event::RequestReceived(RequestReceived {
            id: Some("late".into()),
            op: Some(Op::Spawn),
            caller: None,
            bytes: 200,
        })],
        ..LogOpts::closed("after-receipt")
    });
    let last = log.kinds.len();
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("record_after_receipt", n(last))]);
    assert_eq!(v.json["sealed"], false);
}

#[test]
fn an_inner_alarm_for_a_job_that_never_ran_is_a_replay_mismatch() {
    let log = build(&LogOpts {
        while_running: vec![Event::InnerAlarm(InnerAlarm {
            job: 99,
            pid: 4242,
            start_time: 7,
            after_ms: 180_000,
            errno: None,
        })],
        ..LogOpts::closed("alarm-no-job")
    });
    assert!(
        log.line_of("inner_alarm", 0) > 2,
        "written inside the action"
    );
    let v = verify(&log.path, &[]);
    assert_eq!((v.status(), v.exit), ("tampered", 3), "{:#}", v.json);
    let named = v.json["reasons"].as_array().unwrap().iter().any(|r| {
        r["code"] == "replay_mismatch"
            && r["detail"]
                .as_str()
                .is_some_and(|d| d.contains("inner alarm for job 99"))
    });
    assert!(named, "{:#}", v.json);
}

/// The ask step's replay rules (docs/stop.md): an ask goes only to a
/// running job's leader, with its recorded stop signal, and no TERM or
/// KILL sweep comes while asking. A TERM sweep re-labelled `ask` (and
/// re-chained, so the chain alone passes) breaks both.
#[test]
fn a_term_sweep_relabelled_as_an_ask_is_a_replay_mismatch() {
    let run = "ask-forged";
    let log = build(&LogOpts::stopped(run, StopReason::StopRequested));
    let mut lines = log.lines();
    let k = log.line_of("signal_sweep", 0);
    lines[k - 1] = replace_once(&lines[k - 1], "\"stage\":\"term\"", b"\"stage\":\"ask\"");
    rechain(&mut lines, run, k);
    write_lines(&log.path, &lines);
    let v = verify(&log.path, &[]);
    assert_eq!((v.status(), v.exit), ("tampered", 3), "{:#}", v.json);
    let said = |needle: &str| {
        v.json["reasons"].as_array().unwrap().iter().any(|r| {
            r["code"] == "replay_mismatch"
                && r["detail"].as_str().is_some_and(|d| d.contains(needle))
        })
    };
    assert!(
        said("not a running job's leader and its stop signal"),
        "{:#}",
        v.json
    );
    assert!(said("during the ask step"), "{:#}", v.json);
}

#[test]
fn truncation_mid_line_is_a_torn_line() {
    let log = base("torn-mid");
    let data = fs::read(&log.path).unwrap();
    let k = log.line_of("job_exited", 0);
    // Byte offset of the start of line k, then half of it.
    let start = data
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(k - 2)
        .unwrap()
        .0
        + 1;
    let len = data[start..].iter().position(|&b| b == b'\n').unwrap();
    fs::write(&log.path, &data[..start + len / 2]).unwrap();
    let v = verify(&log.path, &[]);
    v.expect(
        "incomplete",
        2,
        &[("torn_line", n(k)), ("no_receipt", None)],
    );
    assert_eq!(v.json["records"].as_u64(), Some(k as u64 - 1));
}

// ---------------------------------------------------------------------------
// Genesis and other runs.

#[test]
fn wrong_genesis_with_the_chain_recomputed() {
    let (_, v) = tampered("bad-genesis", &[], |_, lines| {
        let g = chain::line_hash(b"rea-audit/v0 genesis\nbad-genesis");
        lines[0] = with_prev(&lines[0], &g);
        rechain(lines, "unused", 1);
    });
    v.expect("tampered", 3, &[("genesis_mismatch", n(1))]);
}

#[test]
fn genesis_of_another_run_with_the_chain_recomputed() {
    let (_, v) = tampered("mine", &[], |_, lines| {
        assert_eq!(prev_of(&lines[0]), chain::genesis("mine"));
        lines[0] = with_prev(&lines[0], &chain::genesis("theirs"));
        rechain(lines, "unused", 1);
    });
    v.expect("tampered", 3, &[("genesis_mismatch", n(1))]);
}

#[test]
fn a_line_spliced_in_from_another_run() {
    let other = base("splice-b");
    let theirs = other.lines();
    let mut k = 0;
    let (_, v) = tampered("splice-a", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        assert_eq!(other.kinds[k - 1], "job_spawned");
        lines[k - 1] = theirs[k - 1].clone();
    });
    // The same seq and kind, another run (built earlier, so its clock is
    // behind): the run check speaks on that line, and the next line's prev
    // does not match it.
    v.expect(
        "tampered",
        3,
        &[
            ("mono_regressed", n(k)),
            ("run_mismatch", n(k)),
            ("prev_mismatch", n(k + 1)),
        ],
    );
}

#[test]
fn a_line_spliced_in_from_another_run_and_rechained() {
    let other = base("splice-d");
    let theirs = other.lines();
    let mut k = 0;
    let (_, v) = tampered("splice-c", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        lines[k - 1] = theirs[k - 1].clone();
        rechain(lines, "unused", k - 1);
    });
    v.expect(
        "tampered",
        3,
        &[("mono_regressed", n(k)), ("run_mismatch", n(k))],
    );
}

#[test]
fn another_runs_whole_log_with_expect_run() {
    let theirs = base("their-run");
    // Intact on its own...
    verify(&theirs.path, &[]).expect("delete_allowed", 0, &[]);
    // ...but not the run this controller started.
    let v = verify(&theirs.path, &["--expect-run", "my-run"]);
    v.expect("tampered", 3, &[("expect_run_mismatch", None)]);
    assert_eq!(v.json["run"], "their-run");
    // Nor the head it pinned.
    let mine = base("my-run");
    verify(&theirs.path, &["--expect-head", &mine.head]).expect(
        "tampered",
        3,
        &[("head_mismatch", None)],
    );
}

// ---------------------------------------------------------------------------
// Strict reading: lines the writer could never have produced.

#[test]
fn a_duplicate_key_is_refused() {
    let mut k = 0;
    let (_, v) = tampered("dup-key", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        // serde_json::Value would keep the last "pid"; the typed reader refuses.
        lines[k - 1] = replace_once(&lines[k - 1], "\"pid\":", b"\"pid\":1,\"pid\":");
    });
    v.expect(
        "tampered",
        3,
        &[("duplicate_key", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn a_duplicate_envelope_key_is_refused() {
    let (_, v) = tampered("dup-env", &[], |_, lines| {
        lines[1] = replace_once(&lines[1], "{\"v\":1,", b"{\"v\":1,\"v\":1,");
    });
    v.expect(
        "tampered",
        3,
        &[("duplicate_key", n(2)), ("prev_mismatch", n(3))],
    );
}

#[test]
fn an_unknown_field_is_refused() {
    let mut k = 0;
    let (_, v) = tampered("unknown-field", &[], |log, lines| {
        k = log.line_of("job_exited", 1);
        lines[k - 1] = replace_once(&lines[k - 1], "\"data\":{", b"\"data\":{\"note\":\"ok\",");
    });
    v.expect(
        "tampered",
        3,
        &[("unknown_field", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn a_float_is_refused() {
    let mut k = 0;
    let (_, v) = tampered("float", &[], |log, lines| {
        k = log.line_of("job_exited", 0);
        lines[k - 1] = replace_once(
            &lines[k - 1],
            "\"duration_ms\":1210,",
            b"\"duration_ms\":1210.0,",
        );
    });
    v.expect(
        "tampered",
        3,
        &[("float", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn a_float_in_the_envelope_is_refused() {
    let (_, v) = tampered("float-env", &[], |_, lines| {
        let line = &lines[2];
        let i = line.windows(10).position(|w| w == b"\"mono_ns\":").unwrap() + 10;
        let end = i + line[i..].iter().position(|&b| b == b',').unwrap();
        let mut out = line[..end].to_vec();
        out.extend_from_slice(b"e0");
        out.extend_from_slice(&line[end..]);
        lines[2] = out;
    });
    v.expect("tampered", 3, &[("float", n(3)), ("prev_mismatch", n(4))]);
}

#[test]
fn invalid_utf8_is_refused() {
    let mut k = 0;
    let (_, v) = tampered("bad-utf8", &[], |log, lines| {
        k = log.line_of("job_spawned", 1);
        // The "ü" of the launcher's --session argument, its lead byte broken.
        lines[k - 1] = replace_once(&lines[k - 1], "ü", b"\xff\xbc");
    });
    v.expect(
        "tampered",
        3,
        &[("invalid_utf8", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn crlf_line_endings_are_refused_on_every_line() {
    let mut last = 0;
    let (_, v) = tampered("crlf", &[], |_, lines| {
        for l in lines.iter_mut() {
            l.push(b'\r');
        }
        last = lines.len();
    });
    // No line is a record any more, so there is no receipt either.
    let mut want = each("carriage_return", 1, last);
    want.push(("no_receipt", None));
    v.expect("tampered", 3, &want);
}

#[test]
fn a_byte_order_mark_is_refused() {
    let (_, v) = tampered("bom", &[], |_, lines| {
        let mut l = b"\xef\xbb\xbf".to_vec();
        l.extend_from_slice(&lines[0]);
        lines[0] = l;
    });
    v.expect("tampered", 3, &[("bom", n(1))]);
}

#[test]
fn an_empty_file_is_incomplete() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("empty.jsonl");
    // What a watchdog killed between creating the log and its first record leaves.
    drop(AuditWriter::create(&path, "empty").unwrap());
    let v = verify(&path, &[]);
    v.expect("incomplete", 2, &[("empty_log", None)]);
    assert_eq!(v.json["records"].as_u64(), Some(0));
    assert!(v.json["head"].is_null());
}

#[test]
fn an_oversize_line_is_refused() {
    let mut k = 0;
    let (_, v) = tampered("oversize", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        // Valid JSON (whitespace), one byte over the cap.
        let pad = MAX_LINE + 1 - lines[k - 1].len();
        let mut l = b"{".to_vec();
        l.extend(vec![b' '; pad]);
        l.extend_from_slice(&lines[k - 1][1..]);
        assert_eq!(l.len(), MAX_LINE + 1);
        lines[k - 1] = l;
    });
    v.expect(
        "tampered",
        3,
        &[("line_too_long", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn a_line_of_exactly_the_cap_is_read() {
    let mut k = 0;
    let (_, v) = tampered("at-cap", &[], |log, lines| {
        k = log.line_of("job_spawned", 0);
        let pad = MAX_LINE - lines[k - 1].len();
        let mut l = b"{".to_vec();
        l.extend(vec![b' '; pad]);
        l.extend_from_slice(&lines[k - 1][1..]);
        lines[k - 1] = l;
    });
    // Read as a record (not line_too_long); padded, it is not the writer's
    // encoding, and the chain notices the bytes changed.
    v.expect(
        "tampered",
        3,
        &[("non_canonical", n(k)), ("prev_mismatch", n(k + 1))],
    );
}

#[test]
fn other_unreadable_lines() {
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "\"kind\":\"job_spawned\"",
            b"\"kind\":\"job_respawned\"",
            "unknown_kind",
        ),
        ("{\"v\":1,", b"{\"v\":2,", "bad_version"),
        ("\"seq\":3,", b"\"seq\":\"3\",", "bad_field"),
        ("Z\",\"mono_ns\"", b"+00:00\",\"mono_ns\"", "bad_timestamp"),
        (
            "\"stop_signal\":\"SIGUSR1\"}}",
            b"\"stop_signal\":\"SIGUSR1\"}",
            "malformed_json",
        ),
    ];
    for (i, (from, to, code)) in cases.into_iter().enumerate() {
        let run = format!("unreadable-{i}");
        let mut k = 0;
        let (_, v) = tampered(&run, &[], |log, lines| {
            k = log.line_of("job_spawned", 0);
            assert_eq!(k, 4, "the seq edit assumes job 1 is line 4");
            lines[k - 1] = replace_once(&lines[k - 1], from, to);
        });
        v.expect("tampered", 3, &[(code, n(k)), ("prev_mismatch", n(k + 1))]);
    }
}

// ---------------------------------------------------------------------------
// Forge and re-chain: the documented limit, and the pinned head that closes it.

#[test]
fn forged_argv_rechained_passes_without_a_pin_and_fails_with_one() {
    let log = base("forge-argv");
    let mut lines = log.lines();
    let k = log.line_of("job_spawned", 0);
    lines[k - 1] = replace_once(
        &lines[k - 1],
        "/opt/hopper/install.sh",
        b"/opt/hopper/innocent.sh",
    );
    let forged_head = rechain(&mut lines, "forge-argv", k);
    write_lines(&log.path, &lines);

    // The chain alone cannot tell: this is the documented limit.
    let v = verify(&log.path, &[]);
    v.expect("delete_allowed", 0, &[]);
    assert_eq!(v.head(), Some(forged_head.as_str()));
    assert_ne!(forged_head, log.head);
    // The head the watchdog printed at seal time can.
    verify(&log.path, &["--expect-head", &log.head]).expect(
        "tampered",
        3,
        &[("head_mismatch", None)],
    );
}

#[test]
fn forged_positive_receipt_rechained_passes_without_a_pin_and_fails_with_one() {
    // The kill bound ran out with one process left: a negative receipt.
    let log = build(&LogOpts {
        proof: false,
        ..LogOpts::stopped("forge-receipt", StopReason::Deadline)
    });
    verify(&log.path, &[]).expect("retain", 1, &[("not_quiescent", None)]);

    // Rewrite the stop's result and the receipt to claim the proof held, and
    // re-chain everything after the first edit.
    let mut lines = log.lines();
    let sc = log.line_of("stop_completed", 0);
    lines[sc - 1] = replace_once(
        &lines[sc - 1],
        "\"echild\":false,\"scan_empty\":false,\"left\":1",
        b"\"echild\":true,\"scan_empty\":true,\"left\":0",
    );
    let last = lines.len();
    lines[last - 1] = replace_once(
        &lines[last - 1],
        "\"quiescent\":false,\"no_live_or_waitable_descendants\":false",
        b"\"quiescent\":true,\"no_live_or_waitable_descendants\":true",
    );
    rechain(&mut lines, "forge-receipt", sc);
    write_lines(&log.path, &lines);

    verify(&log.path, &[]).expect("delete_allowed", 0, &[]);
    verify(&log.path, &["--expect-head", &log.head]).expect(
        "tampered",
        3,
        &[("head_mismatch", None)],
    );
}

#[test]
fn receipt_flipped_alone_contradicts_the_stop_record() {
    // Only the last line edited (no re-chain needed after it): the receipt
    // now claims a proof the stop_completed record says did not hold.
    let log = build(&LogOpts {
        proof: false,
        ..LogOpts::stopped("flip-receipt", StopReason::Deadline)
    });
    let mut lines = log.lines();
    let last = lines.len();
    lines[last - 1] = replace_once(
        &lines[last - 1],
        "\"quiescent\":false,\"no_live_or_waitable_descendants\":false",
        b"\"quiescent\":true,\"no_live_or_waitable_descendants\":true",
    );
    write_lines(&log.path, &lines);
    verify(&log.path, &[]).expect("tampered", 3, &[("replay_mismatch", None)]);
}

#[test]
fn receipt_staging_edited_alone_to_match_a_changed_stage() {
    let t = tempfile::tempdir().unwrap();
    let stage = t.path().join("stage");
    fs::create_dir(&stage).unwrap();
    fs::write(stage.join("Hopper"), b"binary").unwrap();
    let log = build(&LogOpts {
        staging: Some(stage.clone()),
        ..LogOpts::closed("restage")
    });
    let sealed = log
        .receipt
        .as_ref()
        .unwrap()
        .staging
        .clone()
        .unwrap()
        .inventory;
    // Something is planted in the stage after the seal, and the receipt (the
    // last line, which no later prev protects) is edited to match it.
    fs::write(stage.join("planted"), b"keep me").unwrap();
    let now = rea::inventory::inventory(&stage).unwrap();
    let mut lines = log.lines();
    let last = lines.len();
    let old = format!(
        "\"inventory\":{{\"entries\":{},\"bytes\":{},\"digest\":\"{}\"}}",
        sealed.entries, sealed.bytes, sealed.digest
    );
    let new = format!(
        "\"inventory\":{{\"entries\":{},\"bytes\":{},\"digest\":\"{}\"}}",
        now.entries, now.bytes, now.digest
    );
    lines[last - 1] = replace_once(&lines[last - 1], &old, new.as_bytes());
    write_lines(&log.path, &lines);
    // The staging_inventoried record still holds what the watchdog saw, and
    // the edited receipt is no longer the baseline without a
    // staging_changed naming it: two mismatches.
    verify(&log.path, &["--staging", stage.to_str().unwrap()]).expect(
        "tampered",
        3,
        &[
            ("replay_mismatch", None),
            ("replay_mismatch", None),
            ("stage_changed_during_run", None),
        ],
    );
}

#[test]
fn bytes_appended_after_the_receipt_are_not_a_torn_write() {
    let log = base("appended");
    let last = log.kinds.len();
    let mut data = fs::read(&log.path).unwrap();
    data.extend_from_slice(b"{\"v\":1,\"run\":\"appended\",\"seq\":");
    fs::write(&log.path, data).unwrap();
    // The watchdog never writes after its receipt, so this is not a write
    // it failed to finish (torn_line, incomplete): someone appended it.
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("record_after_receipt", n(last + 1))]);
    assert_eq!(v.json["sealed"], false);
}

// ---------------------------------------------------------------------------
// Could not look.

#[test]
fn a_missing_log_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    let v = verify(&t.path().join("no-such.jsonl"), &[]);
    v.expect("error", 4, &[("io_error", None)]);
}

#[test]
fn a_malformed_pin_is_a_usage_error() {
    let log = base("bad-pin");
    let upper = log.head.to_uppercase();
    let out = common::logs::rea_audit()
        .args([
            "verify",
            log.path.to_str().unwrap(),
            "--json",
            "--expect-head",
            &upper,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--expect-head"));
}

// ---------------------------------------------------------------------------
// The chain rule, checked by an independent implementation.

const PY_CHAIN: &str = r#"
import hashlib, sys
path, run = sys.argv[1], sys.argv[2]
data = open(path, 'rb').read()
assert data.endswith(b'\n'), 'torn'
prev = hashlib.sha256(b'rea-audit/v1 genesis\n' + run.encode()).hexdigest()
for i, line in enumerate(data[:-1].split(b'\n')):
    assert line.split(b'"prev":"', 1)[1][:64].decode() == prev, ('prev', i)
    assert line.split(b'"seq":', 1)[1].split(b',', 1)[0] == str(i).encode(), ('seq', i)
    prev = hashlib.sha256(line).hexdigest()
print(prev)
"#;

fn python_head(log: &BuiltLog) -> String {
    let out = Command::new("python3")
        .args(["-c", PY_CHAIN])
        .arg(&log.path)
        .arg(&log.run)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python chain check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn python_recomputes_the_same_chain_and_head() {
    let t = tempfile::tempdir().unwrap();
    let stage = t.path().join("stage");
    fs::create_dir(&stage).unwrap();
    fs::write(stage.join("payload"), b"x").unwrap();
    for log in [
        build(&LogOpts::closed("py-closed")),
        build(&LogOpts {
            staging: Some(stage.clone()),
            uncertain: 1,
            ..LogOpts::stopped("py.stopped_1", StopReason::Abandoned)
        }),
    ] {
        let py = python_head(&log);
        assert_eq!(py, log.head, "Python's head is AuditWriter::head()");
        let v = verify(&log.path, &[]);
        assert_eq!(v.head(), Some(py.as_str()), "and the verifier's head");
    }
    // And Python notices a broken chain: it is a real check, not an echo.
    let log = base("py-broken");
    let mut lines = log.lines();
    lines[3] = replace_once(&lines[3], "install.sh", b"instal.sh");
    write_lines(&log.path, &lines);
    let out = Command::new("python3")
        .args(["-c", PY_CHAIN])
        .arg(&log.path)
        .arg(&log.run)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("('prev', 4)"));
}

// ---------------------------------------------------------------------------
// caller_job: the job a nested launcher's caller belongs to.

/// Job 2's `caller_job`, re-chained: naming job 1 (running, whose leader
/// asked) verifies; naming a job that never ran is a replay mismatch.
#[test]
fn a_caller_job_must_name_a_running_job() {
    let with_caller_job = |run: &str, job: &str| {
        let log = build(&LogOpts {
            jobs: 3,
            ..LogOpts::closed(run)
        });
        let mut lines = log.lines();
        let k = log.line_of("job_spawned", 1);
        let to = format!(",\"caller_job\":{job},\"deadline_ms\"");
        lines[k - 1] = replace_once(&lines[k - 1], ",\"deadline_ms\"", to.as_bytes());
        rechain(&mut lines, "unused", k - 1);
        write_lines(&log.path, &lines);
        (k, verify(&log.path, &[]))
    };
    let (_, v) = with_caller_job("caller-job-1", "1");
    v.expect("delete_allowed", 0, &[]);
    let (k, v) = with_caller_job("caller-job-9", "9");
    v.expect("tampered", 3, &[("replay_mismatch", None)]);
    assert!(
        v.json.to_string().contains("names job 9 as its caller's"),
        "line {k}: {}",
        v.json
    );
}

/// Job 3 was asked for by job 1's leader; naming job 2 (running too) as
/// its caller's job moves the launcher under the wrong job: tampered.
#[test]
fn a_caller_job_must_be_the_job_its_caller_leads() {
    let log = build(&LogOpts {
        jobs: 3,
        ..LogOpts::closed("caller-job-led")
    });
    let mut lines = log.lines();
    let k = log.line_of("job_spawned", 2);
    lines[k - 1] = replace_once(
        &lines[k - 1],
        ",\"deadline_ms\"",
        b",\"caller_job\":2,\"deadline_ms\"",
    );
    rechain(&mut lines, "unused", k - 1);
    write_lines(&log.path, &lines);
    let v = verify(&log.path, &[]);
    v.expect("tampered", 3, &[("replay_mismatch", None)]);
    assert!(
        v.json.to_string().contains("its caller leads another job"),
        "{}",
        v.json
    );
}
