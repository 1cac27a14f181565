//! `rea-stage` (docs/stage.md) with real files: begin, discard of untouched and
//! partial stages, every refusal with nothing removed (a full listing and
//! every byte compared before and after), a stage the real watchdog armed,
//! an entry added while discard runs (paused deterministically on a FIFO,
//! the documented test hook), and `rea-audit verify` on the discard logs.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::harness::{output_within, s, Scratch, Watchdog, PATIENCE};
use common::schema::{compile, schema_errors};
use common::stage::{snapshot, stage_cmd};
use common::typed::{all, Log};
use rea::kinds::watchdog::Event;
use rea::stage::decide::{EntryType, Refusal};
use rea::stage::log::{DiscardDecided, Outcome, Removed, StageEvent};
use serde_json::Value;

const FILES: [&str; 4] = ["runtime.bin", "install.sh", "config.json", "data.tar"];
const PAUSE_ENV: &str = "REA_STAGE_PAUSE_BEFORE_RMDIR";
const PAUSE_UNLINK_ENV: &str = "REA_STAGE_PAUSE_BEFORE_UNLINK";

fn stage_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rea-stage")
}

/// `rea-stage begin DIR --file ...` → the receipt's SHA-256.
fn begin(dir: &Path, files: &[&str]) -> String {
    let mut args = vec!["begin", s(dir)];
    for f in files {
        args.extend(["--file", f]);
    }
    let (code, out, err) = stage_cmd(&args, None);
    assert_eq!(code, 0, "begin failed: {err}");
    let h = out.trim().to_string();
    assert!(rea::vocab::is_digest(&h), "begin printed {out:?}");
    h
}

fn discard(dir: &Path, hex: &str, log: &Path) -> (i32, String, String) {
    stage_cmd(
        &[
            "discard",
            s(dir),
            "--receipt-sha256",
            hex,
            "--audit-log",
            s(log),
        ],
        None,
    )
}

/// A stage made by `begin` with all four files uploaded.
struct Fixture {
    scratch: Scratch,
    dir: PathBuf,
    hex: String,
    log: PathBuf,
}

impl Fixture {
    fn new(upload: &[&str]) -> Fixture {
        let scratch = Scratch::new();
        let dir = scratch.path("stage");
        let hex = begin(&dir, &FILES);
        for f in upload {
            std::fs::write(dir.join(f), format!("contents of {f}\n").repeat(100)).unwrap();
        }
        let log = scratch.path("discard.jsonl");
        Fixture {
            scratch,
            dir,
            hex,
            log,
        }
    }

    fn discard(&self) -> (i32, String, String) {
        discard(&self.dir, &self.hex, &self.log)
    }
}

/// The discard log's records, each checked against stage-record.schema.json.
fn stage_records(log: &Path) -> Vec<Value> {
    let v = compile("stage-record");
    let text = std::fs::read_to_string(log).unwrap();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let r: Value = serde_json::from_str(line).unwrap();
        let errors = schema_errors(&v, &r);
        assert!(errors.is_empty(), "line {}: {errors:?}\n{line}", i + 1);
        out.push(r);
    }
    out
}

/// `rea-audit verify LOG --json` → (exit code, verdict).
fn verify(log: &Path) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_rea-audit"))
        .args(["verify", s(log), "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let errors = schema_errors(&compile("stage-verdict"), &v);
    assert!(
        errors.is_empty(),
        "stage-verdict.schema.json: {errors:?}\n{v:#}"
    );
    assert_eq!(v["exit_code"], out.status.code().unwrap_or(-1));
    (out.status.code().unwrap_or(-1), v)
}

/// The discard log, typed (each line also checked against
/// stage-record.schema.json, as [`stage_records`] does).
fn stage_log(log: &Path) -> Log<StageEvent> {
    stage_records(log);
    Log::read(log)
}

fn kinds(recs: &[Value]) -> Vec<&str> {
    recs.iter().map(|r| r["kind"].as_str().unwrap()).collect()
}

/// The decision: the discard log's last record, `discard_decided`.
fn decision(log: &Log<StageEvent>) -> DiscardDecided {
    match log.recs.last().map(|r| &r.event) {
        Some(StageEvent::Decided(d)) => d.clone(),
        _ => panic!(
            "{}: the last record is not discard_decided: {:?}",
            log.path.display(),
            log.kinds()
        ),
    }
}

/// A refusal code as records spell it (`undeclared_entry`).
fn code_name(r: &Refusal) -> String {
    let v = serde_json::to_value(r.code).unwrap();
    v.as_str().unwrap().to_string()
}

fn codes(d: &DiscardDecided) -> Vec<String> {
    d.reasons.iter().map(code_name).collect()
}

/// A discard that must succeed: exit 0, the directory gone, the log verifies.
fn assert_discarded(f: &Fixture, files_left: usize) {
    let (code, out, err) = f.discard();
    assert_eq!(code, 0, "{out}{err}");
    assert!(!f.dir.exists(), "the stage must be gone");
    let log = stage_log(&f.log);
    let d = decision(&log);
    assert_eq!(d.outcome, Outcome::Discarded);
    assert_eq!(d.removed, (files_left + 2) as u64);
    assert!(d.stage_removed);
    let removed = all!(log, StageEvent::Removed);
    assert_eq!(
        removed.len(),
        files_left + 3,
        "every entry, the receipt, the marker, the stage"
    );
    assert_eq!(
        removed[files_left].what,
        Removed::Receipt,
        "the receipt after the uploads"
    );
    assert_eq!(removed[files_left + 1].what, Removed::Marker);
    assert_eq!(removed[files_left + 1].name, ".rea-discarding");
    assert_eq!(removed[files_left + 2].what, Removed::Stage);
    let (vc, v) = verify(&f.log);
    assert_eq!((vc, v["result"].as_str()), (0, Some("discarded")), "{v:#}");
    assert_eq!(
        v["head"],
        serde_json::from_str::<Value>(&out).unwrap()["head"]
    );
}

/// A discard that must be refused for `code`: exit 1, nothing changed.
fn assert_refused(f: &Fixture, code: &str) -> DiscardDecided {
    let before = snapshot(f.scratch.dir.path());
    let (exit, out, err) = f.discard();
    let mut after = snapshot(f.scratch.dir.path());
    after.remove(&f.log);
    assert_eq!(before, after, "a refused discard must not change a byte");
    assert_eq!(exit, 1, "{out}{err}");
    let log = stage_log(&f.log);
    let d = decision(&log);
    assert_eq!(d.outcome, Outcome::Refused);
    assert_eq!(d.removed, 0);
    assert!(codes(&d).contains(&code.to_string()), "want {code}: {d:#?}");
    assert!(!log.kinds().contains(&"discard_approved"));
    let (vc, v) = verify(&f.log);
    assert_eq!((vc, v["result"].as_str()), (1, Some("refused")), "{v:#}");
    let refusals: Vec<&str> = v["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert!(refusals.contains(&code), "{v:#}");
    d
}

fn refusal<'a>(d: &'a DiscardDecided, code: &str) -> &'a Refusal {
    d.reasons
        .iter()
        .find(|r| code_name(r) == code)
        .unwrap_or_else(|| panic!("no refusal {code}: {d:#?}"))
}

// ------------------------------------------------------------ discarded

#[test]
fn untouched_stage_with_all_four_files_is_discarded() {
    let f = Fixture::new(&FILES);
    let recs = {
        assert_discarded(&f, 4);
        stage_records(&f.log)
    };
    assert_eq!(
        kinds(&recs),
        [
            "discard_started",
            "stage_inventoried",
            "discard_approved",
            "removed",
            "removed",
            "removed",
            "removed",
            "removed",
            "removed",
            "removed",
            "discard_decided"
        ]
    );
    let typed = stage_log(&f.log);
    let inv = match typed.at(1) {
        StageEvent::Inventoried(i) => i,
        e => panic!("the second record is not stage_inventoried: {e:?}"),
    };
    assert_eq!(inv.entries.len(), 5);
    for e in &inv.entries {
        assert_eq!(e.kind, EntryType::File);
        if e.name == ".rea-before-transfer" {
            assert_eq!(e.sha256.as_deref(), Some(f.hex.as_str()));
        } else {
            assert_eq!(e.sha256, None, "uploads are never read");
        }
    }
    let files: Vec<&str> = inv
        .receipt
        .as_ref()
        .expect("the receipt read")
        .files
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(files, FILES);
}

/// `rea-audit show` reads a discard log as it reads a watchdog's: each
/// record's seq, time since the first and kind in their own columns (and
/// members of `--json`), the run's start time in the header; not every
/// line as "line N:" with nulls in the document.
#[test]
fn show_gives_a_discard_logs_records_their_seq_time_and_kind() {
    let f = Fixture::new(&FILES);
    assert_discarded(&f, 4);
    let recs = stage_records(&f.log);
    let out = Command::new(env!("CARGO_BIN_EXE_rea-audit"))
        .args(["show", "--json", s(&f.log)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::assert_valid(common::schema::show_validator(), &doc, "show --json");
    assert_eq!(doc["started"], recs[0]["ts"], "{doc:#}");
    let lines = doc["lines"].as_array().unwrap();
    assert_eq!(lines.len(), recs.len(), "{doc:#}");
    for (l, r) in lines.iter().zip(&recs) {
        assert_eq!(l["seq"], r["seq"], "{l}");
        assert_eq!(l["kind"], r["kind"], "{l}");
        assert!(l["at_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{l}");
        let seq_and_kind = format!("{:>5} {}", r["seq"], r["kind"].as_str().unwrap());
        assert!(
            !l["text"].as_str().unwrap().contains(&seq_and_kind),
            "seq and kind in their members, not in the text: {l}"
        );
    }
    assert!(
        lines[lines.len() - 1]["text"]
            .as_str()
            .unwrap()
            .contains("Discarded"),
        "{doc:#}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rea-audit"))
        .args(["show", s(&f.log)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("line 1:"), "{text}");
    assert!(
        text.contains(&format!(", started {}", recs[0]["ts"].as_str().unwrap())),
        "{text}"
    );
    let first = text
        .lines()
        .find(|l| l.contains("discard_started"))
        .unwrap();
    assert!(
        first.trim_start().starts_with("0 ") && first.contains("ms  discard_started"),
        "{first}"
    );
}

#[test]
fn a_partial_upload_two_of_four_is_discarded() {
    let f = Fixture::new(&FILES[..2]);
    assert_discarded(&f, 2);
}

#[test]
fn a_truncated_upload_is_discarded() {
    let f = Fixture::new(&FILES[..3]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(f.dir.join(FILES[2]))
        .unwrap();
    file.set_len(7).unwrap();
    drop(file);
    assert_discarded(&f, 3);
}

// ------------------------------------------------------------ refused

#[test]
fn a_huge_sparse_upload_is_discarded_without_being_read() {
    let f = Fixture::new(&FILES[..1]);
    let big = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(f.dir.join("data.tar"))
        .unwrap();
    big.set_len(1 << 40).unwrap(); // 1 TiB, sparse
    drop(big);
    let t = std::time::Instant::now();
    let child = Command::new(stage_bin())
        .args(["discard", s(&f.dir), "--receipt-sha256", &f.hex])
        .args(["--audit-log", s(&f.log)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    assert!(!f.dir.exists());
    assert_eq!(verify(&f.log).0, 0);
}

#[test]
fn a_receipt_padded_past_the_cap_is_refused_without_being_read() {
    let f = Fixture::new(&FILES);
    let receipt = std::fs::OpenOptions::new()
        .write(true)
        .open(f.dir.join(".rea-before-transfer"))
        .unwrap();
    receipt.set_len(1 << 40).unwrap(); // padded (sparse) to 1 TiB
    drop(receipt);
    let t = std::time::Instant::now();
    let d = assert_refused(&f, "receipt_too_large");
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(codes(&d), ["receipt_too_large"]);
}

#[test]
fn a_stage_full_of_hostile_names_is_refused_within_the_line_cap() {
    use std::os::unix::ffi::OsStrExt;
    let f = Fixture::new(&[]);
    // 255 symlinks, each a 250-byte name of bytes escaped as \xNN (4x).
    for i in 0..255u32 {
        let mut name = format!("{i:03}").into_bytes();
        name.resize(250, 0xff);
        let p = f.dir.join(std::ffi::OsStr::from_bytes(&name));
        std::os::unix::fs::symlink("/nowhere", p).unwrap();
    }
    let d = assert_refused(&f, "undeclared_entry");
    let reasons = &d.reasons;
    assert_eq!(reasons.len(), 65, "64 refusals and one summary");
    let last = reasons.last().unwrap();
    assert_eq!(code_name(last), "more_refusals");
    assert!(last.detail.starts_with("446 more"), "{last:?}");
    for r in reasons {
        let detail = &r.detail;
        assert!(!detail.contains("\\xff"), "no name in a detail: {detail}");
    }
}

#[test]
fn an_audit_log_inside_the_stage_is_refused_before_anything() {
    let f = Fixture::new(&FILES);
    std::fs::create_dir(f.scratch.path("elsewhere")).unwrap();
    let via_link = f.scratch.path("elsewhere/link");
    std::os::unix::fs::symlink(&f.dir, &via_link).unwrap();
    let mut before = snapshot(f.scratch.dir.path());
    // A declared name, an undeclared one, and the stage reached via a link.
    for log in [
        f.dir.join("data.tar"),
        f.dir.join("discard.jsonl"),
        via_link.join("x.jsonl"),
    ] {
        if log.starts_with(&f.dir) && log.ends_with("data.tar") {
            std::fs::remove_file(&log).unwrap();
            before = snapshot(f.scratch.dir.path());
        }
        let (code, out, err) = discard(&f.dir, &f.hex, &log);
        assert_eq!(code, 4, "{}: {out}{err}", log.display());
        assert!(err.contains("inside the stage"), "{err}");
        assert_eq!(snapshot(f.scratch.dir.path()), before, "nothing changed");
    }
}

#[test]
fn the_help_says_exit_2_covers_io_errors_during_removal() {
    let (code, out, _) = stage_cmd(&["discard", "--help"], None);
    assert_eq!(code, 0);
    let two = out
        .lines()
        .find(|l| l.trim_start().starts_with("2 "))
        .unwrap();
    assert!(two.contains("stopped"), "{two}");
    assert!(
        out.contains("an I/O error during removal (io_error)"),
        "{out}"
    );
}

#[test]
fn an_extra_file_is_refused() {
    let f = Fixture::new(&FILES);
    std::fs::write(f.dir.join("payload.so"), b"not declared").unwrap();
    let d = assert_refused(&f, "undeclared_entry");
    assert_eq!(
        refusal(&d, "undeclared_entry").name.as_deref(),
        Some("payload.so")
    );
}

#[test]
fn a_directory_is_refused() {
    let f = Fixture::new(&FILES[..1]);
    std::fs::create_dir(f.dir.join(FILES[1])).unwrap();
    std::fs::write(f.dir.join(FILES[1]).join("inner"), b"x").unwrap();
    let d = assert_refused(&f, "not_regular");
    assert_eq!(refusal(&d, "not_regular").kind, Some(EntryType::Directory));
}

#[test]
fn a_symlink_is_refused() {
    let f = Fixture::new(&FILES[..1]);
    let outside = f.scratch.path("precious");
    std::fs::write(&outside, b"outside the stage").unwrap();
    std::os::unix::fs::symlink(&outside, f.dir.join(FILES[1])).unwrap();
    let d = assert_refused(&f, "not_regular");
    assert_eq!(refusal(&d, "not_regular").kind, Some(EntryType::Symlink));
}

#[test]
fn a_hard_linked_file_is_refused() {
    let f = Fixture::new(&FILES[..2]);
    std::fs::hard_link(f.dir.join(FILES[1]), f.scratch.path("elsewhere")).unwrap();
    let d = assert_refused(&f, "hard_linked");
    assert_eq!(refusal(&d, "hard_linked").name.as_deref(), Some(FILES[1]));
}

#[test]
fn a_fifo_is_refused() {
    let f = Fixture::new(&FILES[..1]);
    nix::unistd::mkfifo(
        &f.dir.join(FILES[1]),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let d = assert_refused(&f, "not_regular");
    assert_eq!(refusal(&d, "not_regular").kind, Some(EntryType::Fifo));
}

#[test]
fn a_socket_is_refused() {
    let f = Fixture::new(&FILES[..1]);
    let _l = std::os::unix::net::UnixListener::bind(f.dir.join(FILES[1])).unwrap();
    let d = assert_refused(&f, "not_regular");
    assert_eq!(refusal(&d, "not_regular").kind, Some(EntryType::Socket));
}

#[test]
fn a_file_of_another_uid_is_refused() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("SKIPPED a_file_of_another_uid_is_refused: needs root to chown");
        return;
    }
    let f = Fixture::new(&FILES[..2]);
    std::os::unix::fs::chown(f.dir.join(FILES[1]), Some(12345), None).unwrap();
    let d = assert_refused(&f, "foreign_uid");
    assert_eq!(refusal(&d, "foreign_uid").name.as_deref(), Some(FILES[1]));
}

#[test]
fn a_wrong_receipt_hash_is_refused() {
    let mut f = Fixture::new(&FILES);
    f.hex = rea::stage::sha256_hex(b"another receipt");
    assert_refused(&f, "receipt_hash_mismatch");
}

#[test]
fn an_edited_receipt_is_refused() {
    let f = Fixture::new(&FILES);
    let r = f.dir.join(".rea-before-transfer");
    let text = std::fs::read_to_string(&r).unwrap();
    let edited = text.replace("\"data.tar\"", "\"data.taz\"");
    assert_ne!(text, edited);
    // Same inode, same length: only the bytes differ.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&r)
        .and_then(|mut w| std::io::Write::write_all(&mut w, edited.as_bytes()))
        .unwrap();
    assert_refused(&f, "receipt_hash_mismatch");
}

#[test]
fn a_stage_replaced_by_begin_anew_is_refused() {
    let f = Fixture::new(&FILES);
    std::fs::rename(&f.dir, f.scratch.path("away")).unwrap();
    let _new = begin(&f.dir, &FILES);
    for n in FILES {
        std::fs::write(f.dir.join(n), b"replaced").unwrap();
    }
    assert_refused(&f, "receipt_hash_mismatch");
}

#[test]
fn a_stage_replaced_by_another_directory_with_the_receipt_copied_is_refused() {
    let f = Fixture::new(&FILES);
    let away = f.scratch.path("away");
    std::fs::rename(&f.dir, &away).unwrap();
    std::fs::create_dir(&f.dir).unwrap();
    std::fs::set_permissions(&f.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let name = ".rea-before-transfer";
    std::fs::copy(away.join(name), f.dir.join(name)).unwrap();
    let d = assert_refused(&f, "identity_mismatch");
    assert!(
        codes(&d).contains(&"receipt_inode_mismatch".to_string()),
        "{d:#?}"
    );
}

#[test]
fn a_stage_armed_the_way_the_watchdog_arms_it_is_refused() {
    let f = Fixture::new(&FILES);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode_0600()
        .open(f.dir.join(".rea-exec-started"))
        .and_then(|mut w| std::io::Write::write_all(&mut w, b"run-1\n"))
        .unwrap();
    assert_refused(&f, "armed");
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

#[test]
fn a_missing_stage_and_a_symlinked_stage_are_refused() {
    let scratch = Scratch::new();
    let log = scratch.path("l1.jsonl");
    let hex = rea::stage::sha256_hex(b"x");
    let (code, _, _) = discard(&scratch.path("nowhere"), &hex, &log);
    assert_eq!(code, 1);
    assert_eq!(codes(&decision(&stage_log(&log))), ["stage_unreachable"]);
    assert_eq!(verify(&log).0, 1);

    let real = scratch.path("real");
    let hex = begin(&real, &FILES);
    let link = scratch.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let log = scratch.path("l2.jsonl");
    let (code, _, _) = discard(&link, &hex, &log);
    assert_eq!(code, 1);
    assert_eq!(codes(&decision(&stage_log(&log))), ["stage_unreachable"]);
    assert!(real.join(".rea-before-transfer").exists());
}

// ------------------------------------------------------------ concurrent change

#[test]
fn an_entry_added_while_discard_runs_is_never_forced() {
    let f = Fixture::new(&FILES);
    let fifo = f.scratch.path("pause");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let child = Command::new(stage_bin())
        .args([
            "discard",
            s(&f.dir),
            "--receipt-sha256",
            &f.hex,
            "--audit-log",
            s(&f.log),
        ])
        .env(PAUSE_ENV, &fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the write end blocks until discard has opened the read end:
    // it is then paused right before its final rmdir.
    let mut release = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let late = f.dir.join("late-arrival");
    std::fs::write(&late, b"uploaded while discarding").unwrap();
    std::io::Write::write_all(&mut release, b"x").unwrap();
    drop(release);
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(std::fs::read(&late).unwrap(), b"uploaded while discarding");
    assert!(f.dir.is_dir(), "the stage is kept");
    let log = stage_log(&f.log);
    let d = decision(&log);
    assert_eq!(d.outcome, Outcome::Refused);
    assert_eq!(codes(&d), ["concurrent_change"]);
    assert!(!d.stage_removed);
    assert!(refusal(&d, "concurrent_change")
        .detail
        .contains("late-arrival"));
    let (vc, v) = verify(&f.log);
    assert_eq!((vc, v["result"].as_str()), (1, Some("refused")), "{v:#}");
}

#[test]
fn the_pause_hook_alone_changes_nothing() {
    let f = Fixture::new(&FILES[..1]);
    let fifo = f.scratch.path("pause");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let child = Command::new(stage_bin())
        .args([
            "discard",
            s(&f.dir),
            "--receipt-sha256",
            &f.hex,
            "--audit-log",
            s(&f.log),
        ])
        .env(PAUSE_ENV, &fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut release = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    std::io::Write::write_all(&mut release, b"x").unwrap();
    drop(release);
    assert_eq!(output_within(child, PATIENCE).status.code(), Some(0));
    assert!(!f.dir.exists());
    assert_eq!(verify(&f.log).0, 0);
}

// ------------------------------------------------------------ the interlock with arming

/// A discard of `f` paused on the before-unlink hook: it has created
/// `.rea-discarding` and not yet looked for `.rea-exec-started`. The
/// returned writer releases it.
fn discard_paused_before_unlink(f: &Fixture) -> (std::process::Child, std::fs::File) {
    let fifo = f.scratch.path("pause-unlink");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let child = Command::new(stage_bin())
        .args([
            "discard",
            s(&f.dir),
            "--receipt-sha256",
            &f.hex,
            "--audit-log",
            s(&f.log),
        ])
        .env(PAUSE_UNLINK_ENV, &fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Blocks until discard opened the read end: it is paused.
    let release = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    (child, release)
}

#[test]
fn a_watchdog_arming_while_discard_is_about_to_unlink_refuses_to_start() {
    require_pid_ns!("a_watchdog_arming_while_discard_is_about_to_unlink_refuses_to_start");
    let f = Fixture::new(&FILES);
    let (child, mut release) = discard_paused_before_unlink(&f);
    assert!(f.dir.join(".rea-discarding").is_file());
    let audit = f.scratch.path("audit.jsonl");
    let run = Command::new(common::harness::watchdog_bin())
        .args(["run", "--state-dir", s(&f.scratch.path("state"))])
        .args(["--audit-log", s(&audit)])
        .args(["--staging", s(&f.dir)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(run, PATIENCE);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("discard is removing this stage"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ready"));
    assert!(
        !f.dir.join(".rea-exec-started").exists(),
        "its marker is undone"
    );
    if audit.exists() {
        let recs = common::harness::records(&audit);
        assert!(
            recs.iter()
                .all(|r| r["kind"] != "job_spawned" && r["kind"] != "stage_armed"),
            "{recs:?}"
        );
    }
    std::io::Write::write_all(&mut release, b"x").unwrap();
    drop(release);
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!f.dir.exists(), "the stage is gone");
    let (vc, v) = verify(&f.log);
    assert_eq!((vc, v["result"].as_str()), (0, Some("discarded")), "{v:#}");
}

#[test]
fn a_stage_armed_after_the_listing_is_refused_and_every_file_kept() {
    let f = Fixture::new(&FILES);
    let (child, mut release) = discard_paused_before_unlink(&f);
    // A watchdog that created its marker before it saw ours (both then
    // back off; here only discard's side is under test).
    std::fs::write(f.dir.join(".rea-exec-started"), b"run-1\n").unwrap();
    let mut before = snapshot(&f.dir);
    before.remove(&f.dir.join(".rea-discarding"));
    std::io::Write::write_all(&mut release, b"x").unwrap();
    drop(release);
    let out = output_within(child, PATIENCE);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(snapshot(&f.dir), before, "every file kept, byte for byte");
    assert!(
        !f.dir.join(".rea-discarding").exists(),
        "its marker is undone"
    );
    let log = stage_log(&f.log);
    assert!(!log.kinds().contains(&"discard_approved"));
    assert!(!log.kinds().contains(&"removed"));
    let d = decision(&log);
    assert_eq!(codes(&d), ["armed"]);
    assert_eq!(d.removed, 0);
    let (vc, v) = verify(&f.log);
    assert_eq!((vc, v["result"].as_str()), (1, Some("refused")), "{v:#}");
}

#[test]
fn begin_refuses_the_marker_names() {
    let scratch = Scratch::new();
    for name in [
        ".rea-discarding",
        ".rea-exec-started",
        ".rea-before-transfer",
    ] {
        let (code, _, err) = stage_cmd(&["begin", s(&scratch.path("st")), "--file", name], None);
        assert_eq!(code, 4, "{name}: {err}");
        assert!(err.contains("reserved"), "{err}");
        assert!(!scratch.path("st").exists());
    }
}

// ------------------------------------------------------------ begin refusals

#[test]
fn begin_refuses_an_existing_dir_a_symlinked_parent_and_bad_names() {
    let scratch = Scratch::new();
    let exists = scratch.path("exists");
    std::fs::create_dir(&exists).unwrap();
    let (code, _, err) = stage_cmd(&["begin", s(&exists), "--file", "a"], None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_dir(&exists).unwrap().count(), 0);

    let real = scratch.path("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, scratch.path("via")).unwrap();
    let through = scratch.path("via").join("stage");
    let (code, _, err) = stage_cmd(&["begin", s(&through), "--file", "a"], None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not a real directory"), "{err}");
    assert_eq!(
        std::fs::read_dir(&real).unwrap().count(),
        0,
        "nothing created"
    );

    let long = "n".repeat(256);
    let bad: [(&[&str], &str); 8] = [
        (&["a/b"], "contains `/`"),
        (&["."], "not a name"),
        (&[".."], "not a name"),
        (&[""], "empty"),
        (&[".rea-before-transfer"], "reserved"),
        (&[".rea-exec-started"], "reserved"),
        (&["a", "a"], "declared twice"),
        (&[&long], "longer than 255"),
    ];
    for (names, want) in bad {
        let dir = scratch.path("bad");
        let mut args = vec!["begin", s(&dir)];
        for n in names {
            args.extend(["--file", n]);
        }
        let (code, _, err) = stage_cmd(&args, None);
        assert_eq!(code, 4, "{names:?}: {err}");
        assert!(err.contains(want), "{names:?}: {err}");
        assert!(!dir.exists(), "{names:?}: nothing may be created");
    }
    let dir = scratch.path("ctl");
    let (code, _, _) = stage_cmd(&["begin", s(&dir), "--file", "a\nb"], None);
    assert_eq!(code, 4);
    assert!(!dir.exists());
}

#[test]
fn begin_makes_a_private_stage_and_a_receipt_naming_itself() {
    let scratch = Scratch::new();
    let dir = scratch.path("stage");
    let hex = begin(&dir, &FILES);
    let m = std::fs::symlink_metadata(&dir).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o700);
    let r = dir.join(".rea-before-transfer");
    let bytes = std::fs::read(&r).unwrap();
    assert_eq!(rea::stage::sha256_hex(&bytes), hex);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["kind"], "before_transfer");
    assert_eq!(v["stage"]["ino"], m.ino());
    assert_eq!(v["stage"]["dev"], m.dev());
    assert_eq!(v["receipt_ino"], std::fs::metadata(&r).unwrap().ino());
    assert_eq!(v["files"], serde_json::json!(FILES));
    assert_eq!(v["nonce"].as_str().unwrap().len(), 64);
    // Two receipts never hash alike (the nonce).
    assert_ne!(begin(&scratch.path("other"), &FILES), hex);
}

// ------------------------------------------------------------ the log

#[test]
fn a_log_that_exists_is_never_appended_to() {
    let f = Fixture::new(&FILES);
    std::fs::write(&f.log, b"earlier\n").unwrap();
    let (code, _, err) = f.discard();
    assert_eq!(code, 4, "{err}");
    assert_eq!(std::fs::read(&f.log).unwrap(), b"earlier\n");
    assert!(f.dir.join(FILES[0]).exists());
}

#[test]
fn a_tampered_discard_log_verifies_as_tampered_and_a_torn_one_as_incomplete() {
    let f = Fixture::new(&FILES);
    std::fs::write(f.dir.join("extra"), b"x").unwrap();
    assert_eq!(f.discard().0, 1);
    let text = std::fs::read_to_string(&f.log).unwrap();
    let dir = f.scratch.path("t");
    std::fs::create_dir(&dir).unwrap();
    let check = |name: &str, body: &str, want: (i32, &str)| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let (code, v) = verify(&p);
        assert_eq!((code, v["result"].as_str().unwrap()), want, "{name}: {v:#}");
        v
    };
    // Hide the extra file from the inventory: the chain breaks after it.
    let hidden = text.replace(",{\"name\":\"extra\"", ",{\"name\":\"extrb\"");
    assert_ne!(hidden, text);
    let v = check("edited", &hidden, (3, "tampered"));
    assert!(v.to_string().contains("prev_mismatch"), "{v:#}");
    // The decision turned around (last line: the chain cannot see it).
    let flipped = text.replace("\"outcome\":\"refused\"", "\"outcome\":\"discarded\"");
    let v = check("flipped", &flipped, (3, "tampered"));
    assert!(v.to_string().contains("decision_mismatch"), "{v:#}");
    let lines: Vec<&str> = text.lines().collect();
    check(
        "cut",
        &format!("{}\n", lines[..2].join("\n")),
        (2, "incomplete"),
    );
    check("torn", &text[..text.len() - 5], (2, "incomplete"));
    let swapped = format!("{}\n{}\n{}\n", lines[1], lines[0], lines[2]);
    check("swapped", &swapped, (3, "tampered"));
    check(
        "appended",
        &format!("{text}{}\n", lines[2]),
        (3, "tampered"),
    );
    check("intact", &text, (1, "refused"));
    let show = Command::new(env!("CARGO_BIN_EXE_rea-audit"))
        .args(["show", s(&f.log)])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("Refused undeclared_entry"), "{show}");
    assert!(!show.contains("unreadable"), "{show}");
}

#[test]
fn a_rechained_discard_log_that_disagrees_with_itself_is_tampered() {
    let f = Fixture::new(&FILES[..2]);
    assert_eq!(f.discard().0, 0);
    let mut lines = common::logs::read_lines(&f.log);
    let run = stage_records(&f.log)[0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    // A forger who knows the chain rule: one removal's inode changed, the
    // chain recomputed. Only the decision check can see it.
    let k = lines
        .iter()
        .position(|l| l.windows(9).any(|w| w == b"\"removed\""))
        .unwrap();
    let r: Value = serde_json::from_slice(&lines[k]).unwrap();
    let ino = r["data"]["ino"].as_u64().unwrap();
    lines[k] = common::logs::replace_once(
        &lines[k],
        &format!("\"ino\":{ino}}}"),
        format!("\"ino\":{}}}", ino + 1).as_bytes(),
    );
    common::logs::rechain(&mut lines, &run, 0);
    let forged = f.scratch.path("forged.jsonl");
    common::logs::write_lines(&forged, &lines);
    let (code, v) = verify(&forged);
    assert_eq!((code, v["result"].as_str()), (3, Some("tampered")), "{v:#}");
    assert!(v.to_string().contains("decision_mismatch"), "{v:#}");
}

// ------------------------------------------------------------ the watchdog arms it

#[test]
fn the_real_watchdog_arms_the_stage_before_its_first_spawn() {
    require_pid_ns!("the_real_watchdog_arms_the_stage_before_its_first_spawn");
    let scratch = Scratch::new();
    let staging = scratch.path("staging");
    let hex = std::cell::RefCell::new(String::new());
    let mut w = Watchdog::start_with(scratch, None, &[], |_| {
        // The harness made a plain staging dir; make it a rea-stage one.
        std::fs::remove_dir_all(&staging).unwrap();
        *hex.borrow_mut() = begin(&staging, &["runtime.bin"]);
        std::fs::write(staging.join("runtime.bin"), b"native runtime").unwrap();
    });
    let hex = hex.into_inner();
    let marker = staging.join(".rea-exec-started");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        format!("{}\n", w.run_id()),
        "armed by the time the watchdog is ready"
    );
    let out = w.submit(&[], &["/bin/true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(w.close().status.success());
    assert!(w.wait(PATIENCE).success());
    let log = w.log();
    let k = log.kinds();
    // The start records (the third is containment, docs/containment.md), then arming.
    assert_eq!(
        &k[..4],
        ["run_started", "root_bound", "containment", "stage_armed"]
    );
    let first_spawn = k.iter().position(|k| *k == "job_spawned").unwrap();
    assert!(first_spawn > 3);
    match log.at(3) {
        Event::StageArmed(a) => assert_eq!(a.ino, std::fs::metadata(&marker).unwrap().ino()),
        e => panic!("the fourth record is not stage_armed: {e:?}"),
    }
    let (code, v) = w.verify(&["--staging", s(&staging)]);
    assert_eq!(code, 0, "an armed stage's log still verifies: {v:#}");

    // A forger moving stage_armed after the first spawn (re-chained, seq
    // renumbered) is caught by the replay: arming comes before any spawn.
    let mut lines = common::logs::read_lines(&w.audit_log);
    let armed = lines.remove(3);
    // ... with a mono_ns between its new neighbours'.
    let mono = |l: &[u8]| serde_json::from_slice::<Value>(l).unwrap()["mono_ns"].clone();
    let (was, now) = (mono(&armed), mono(&lines[first_spawn - 1]));
    let armed = common::logs::replace_once(
        &armed,
        &format!("\"mono_ns\":{was},"),
        format!("\"mono_ns\":{now},").as_bytes(),
    );
    lines.insert(first_spawn, armed);
    for (i, l) in lines.iter_mut().enumerate() {
        *l = common::logs::with_seq(l, i as u64);
    }
    common::logs::rechain(&mut lines, &w.run_id(), 0);
    let forged = w.scratch.path("forged.jsonl");
    common::logs::write_lines(&forged, &lines);
    let (code, v) = common::harness::verify_log(&forged, &["--staging", s(&staging)]);
    assert_eq!(code, 3, "{v:#}");
    assert!(v.to_string().contains("stage_armed"), "{v:#}");

    // From now on, discard refuses and removes nothing.
    let log = w.scratch.path("discard.jsonl");
    let before = snapshot(&staging);
    let (code, _, err) = discard(&staging, &hex, &log);
    assert_eq!(code, 1, "{err}");
    assert_eq!(snapshot(&staging), before);
    assert_eq!(codes(&decision(&stage_log(&log))), ["armed"]);
    assert_eq!(verify(&log).1["result"], "refused");

    // A second run on the armed stage refuses to start.
    let again = Command::new(common::harness::watchdog_bin())
        .args(["run", "--state-dir", s(&w.scratch.path("state2"))])
        .args(["--audit-log", s(&w.scratch.path("audit2.jsonl"))])
        .args(["--staging", s(&staging)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(again, PATIENCE);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("already armed"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ready"));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        format!("{}\n", w.run_id())
    );
}

// ------------------------------------------------------------ the pure decision

mod decision {
    use rea::stage::decide::{decide, plan, Code, DirId, Entry, EntryType, Facts};
    use rea::stage::receipt::{BeforeTransfer, StageId};

    const UID: u32 = 1000;
    const HEX: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn entry(name: &str, kind: EntryType, ino: u64) -> Entry {
        Entry {
            name: name.into(),
            kind,
            size: 10,
            uid: UID,
            nlink: 1,
            dev: 7,
            ino,
            sha256: (kind == EntryType::File).then(|| "b".repeat(64)),
        }
    }

    fn facts() -> Facts {
        let mut receipt = entry(".rea-before-transfer", EntryType::File, 2);
        receipt.sha256 = Some(HEX.into());
        Facts {
            uid: UID,
            expected: HEX.into(),
            stage: DirId {
                dev: 7,
                ino: 1,
                uid: UID,
                mode: 0o40700,
            },
            entries: vec![
                receipt,
                entry("a", EntryType::File, 3),
                entry("b", EntryType::File, 4),
            ],
            truncated: false,
            changed: vec![],
            receipt: Some(Ok(BeforeTransfer {
                kind: "before_transfer".into(),
                version: 1,
                stage: StageId {
                    path: "/s".into(),
                    dev: 7,
                    ino: 1,
                    uid: UID,
                    mode: 0o40700,
                },
                receipt_ino: 2,
                files: vec!["a".into(), "b".into(), "c".into()],
                sha256: Default::default(),
                nonce: "0".repeat(64),
                ts: "2026-12-01T00:00:00Z".into(),
            })),
            holders: Some(Ok(vec![])),
        }
    }

    fn codes(f: &Facts) -> Vec<Code> {
        decide(f).into_iter().map(|r| r.code).collect()
    }

    #[test]
    fn an_untouched_stage_is_accepted_with_the_receipt_last() {
        let f = facts();
        assert!(decide(&f).is_empty());
        assert_eq!(
            plan(&f),
            ["a", "b", ".rea-before-transfer", ".rea-discarding"]
        );
    }

    #[test]
    fn each_fact_that_breaks_the_rule_has_its_own_code() {
        type Breaker = Box<dyn Fn(&mut Facts)>;
        let cases: Vec<(Code, Breaker)> = vec![
            (
                Code::ReceiptHashMismatch,
                Box::new(|f| f.expected = "c".repeat(64)),
            ),
            (
                Code::ReceiptMissing,
                Box::new(|f| {
                    f.entries.remove(0);
                }),
            ),
            (
                Code::ReceiptInvalid,
                Box::new(|f| {
                    f.receipt = Some(Err(rea::stage::receipt::ReceiptError::Json("bad".into())))
                }),
            ),
            (
                Code::StageHeld,
                Box::new(|f| f.holders = Some(Ok(vec!["pid 42 (scp, ...): cwd /s".into()]))),
            ),
            (
                Code::HoldersNotScanned,
                Box::new(|f| {
                    f.holders = Some(Err(rea::kinds::held::ScanFailed(
                        "Permission denied".into(),
                    )))
                }),
            ),
            (
                Code::ReceiptTooLarge,
                Box::new(|f| {
                    f.entries[0].size = rea::stage::receipt::MAX_RECEIPT + 1;
                    f.entries[0].sha256 = None;
                    f.receipt = None;
                }),
            ),
            (
                Code::ReceiptNotRegular,
                Box::new(|f| f.entries[0].kind = EntryType::Symlink),
            ),
            (
                Code::ReceiptInodeMismatch,
                Box::new(|f| f.entries[0].ino = 99),
            ),
            (Code::IdentityMismatch, Box::new(|f| f.stage.ino = 98)),
            (
                Code::Armed,
                Box::new(|f| {
                    f.entries
                        .push(entry(".rea-exec-started", EntryType::File, 9))
                }),
            ),
            (
                Code::UndeclaredEntry,
                Box::new(|f| f.entries.push(entry("z", EntryType::File, 9))),
            ),
            (
                Code::NotRegular,
                Box::new(|f| f.entries[1].kind = EntryType::Fifo),
            ),
            (Code::HardLinked, Box::new(|f| f.entries[1].nlink = 2)),
            (Code::ForeignUid, Box::new(|f| f.entries[2].uid = 12345)),
            (Code::OtherFilesystem, Box::new(|f| f.entries[2].dev = 8)),
            (Code::TooManyEntries, Box::new(|f| f.truncated = true)),
            (
                Code::ConcurrentChange,
                Box::new(|f| f.changed.push("a".into())),
            ),
        ];
        for (want, break_it) in cases {
            let mut f = facts();
            break_it(&mut f);
            let got = codes(&f);
            assert_eq!(got, [want], "{want:?}");
        }
    }

    #[test]
    fn an_untrusted_receipt_names_no_upload_and_other_checks_still_run() {
        let mut f = facts();
        f.expected = "c".repeat(64);
        f.entries[1].kind = EntryType::Directory;
        let got = codes(&f);
        assert_eq!(got, [Code::ReceiptHashMismatch, Code::NotRegular]);
    }

    #[test]
    fn a_non_ascii_declared_name_matches_its_escaped_entry() {
        let mut f = facts();
        if let Some(Ok(r)) = f.receipt.as_mut() {
            r.files.push("Grüße".into());
        }
        f.entries.push(entry(
            &rea::stage::decide::escape_name("Grüße".as_bytes()),
            EntryType::File,
            9,
        ));
        assert!(decide(&f).is_empty());
        f.entries
            .push(entry("Gr\\xc3\\xbc\\xc3\\x9fe2", EntryType::File, 10));
        assert_eq!(codes(&f), [Code::UndeclaredEntry]);
    }
}
