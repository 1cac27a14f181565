//! `rea-audit verify`: chain, structure, replay, then the verdict table.
//!
//! The log is streamed: each line is hashed, parsed strictly, checked
//! against the line before it and fed to the replay, then dropped. Memory
//! stays small whatever the log's length; a line longer than the cap is
//! hashed as it streams by (the next line's `prev` still needs its hash)
//! but never buffered whole.

use crate::log::Kind as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::reader::{open_log, OpenError};
use super::replay::Replay;
use super::rules;
use super::stage::held as stage_held;
use super::stage::private as stage_private;
use super::stage::run as stage_run;
use super::verdict::{Code, Reason, Status, Verdict};
use crate::bounded::Failure;
use crate::holders::HolderScan;
use crate::inventory;
use crate::kinds::watchdog::{Event, Outcome, Receipt, StagingInventoried, StopReason};
use crate::log::{Chain, MAX_LINE};

const BOM: &[u8] = b"\xef\xbb\xbf";
/// Reasons reported per log before the rest are summarised in one line.
const MAX_REASONS: usize = 64;
/// Read size; lines are cut out of it without copying.
const CHUNK: usize = 4 << 20;

#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    pub expect_head: Option<String>,
    pub expect_run: Option<String>,
    pub staging: Option<PathBuf>,
    /// The content digest the controller computed before the upload
    /// (`rea-stage manifest --digest`): the stage's baseline must have it.
    pub expect_stage_digest: Option<String>,
    /// The stage `staging` names, already opened by the caller (`rea-stage
    /// remove`): inventoried and scanned through this descriptor instead
    /// of opening `staging` again.
    pub staging_fd: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

/// Verifies the log at `path`. Never fails: an unreadable log is a verdict.
pub fn verify_file(path: &Path, opts: &VerifyOptions) -> Verdict {
    let name = path.display().to_string();
    let refused = |e: OpenError| {
        let mut v = Verdict::empty(&name);
        let code = match e {
            OpenError::Io(_) => Code::IoError,
            OpenError::NotRegular(_) => Code::NotARegularFile,
        };
        v.reasons.push(Reason::new(code, None, e.to_string()));
        v.finish()
    };
    match open_log(path) {
        Ok(f) => verify_reader(f, &name, opts),
        Err(e) => refused(e),
    }
}

/// Verifies the log read from `f` (already opened the way [`open_log`]
/// opens one), under the name `name`: what a caller that must judge
/// exactly the bytes it reads itself (`rea-audit report`) calls with its
/// own descriptor. Never fails: a read error is a verdict.
pub fn verify_reader<R: Read>(mut f: R, name: &str, opts: &VerifyOptions) -> Verdict {
    let io_error = |e: std::io::Error| {
        let mut v = Verdict::empty(name);
        let e = OpenError::Io(e);
        v.reasons
            .push(Reason::new(Code::IoError, None, e.to_string()));
        v.finish()
    };
    let mut c = Checker::new();
    let mut buf = vec![0u8; CHUNK];
    let mut filled = 0;
    loop {
        let n = match f.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return io_error(e),
        };
        if n == 0 {
            break;
        }
        let end = filled + n;
        let used = c.feed(&buf[..end]);
        buf.copy_within(used..end, 0);
        filled = end - used;
        if filled == buf.len() {
            // A line longer than the buffer: hash it as it streams by.
            c.feed_overlong(&buf[..filled]);
            filled = 0;
        }
    }
    c.finish(&buf[..filled], name, opts)
}

/// Verifies a log held in memory (tests, tools).
pub fn verify_bytes(data: &[u8], name: &str, opts: &VerifyOptions) -> Verdict {
    let mut c = Checker::new();
    let used = c.feed(data);
    c.finish(&data[used..], name, opts)
}

struct Reasons(Vec<Reason>, usize);

impl Reasons {
    fn push(&mut self, code: Code, line: Option<u64>, detail: impl Into<String>) {
        if self.0.len() < MAX_REASONS {
            self.0.push(Reason::new(code, line, detail));
        } else {
            self.1 += 1;
        }
    }
}

/// The streaming state of one verification.
struct Checker {
    rs: Reasons,
    /// The chain rule, line by line (lines, run, head).
    chain: Chain,
    bytes: u64,
    receipt_line: Option<u64>,
    /// The receipt, while it is the last line seen.
    last_receipt: Option<Receipt>,
    replay: Replay,
    /// A line over the cap is being hashed across reads.
    overlong: Option<(Sha256, u64)>,
    /// The file starts with a byte order mark: the rest is not looked at.
    bom: bool,
}

impl Checker {
    fn new() -> Checker {
        Checker {
            rs: Reasons(Vec::new(), 0),
            chain: Chain::default(),
            bytes: 0,
            receipt_line: None,
            last_receipt: None,
            replay: Replay::default(),
            overlong: None,
            bom: false,
        }
    }

    /// Whether the file starts with a byte order mark (recorded once, from
    /// the first bytes seen): not the writer's output at all, so nothing
    /// else is worth checking.
    fn starts_with_bom(&mut self, data: &[u8]) -> bool {
        if self.bytes == 0 && !self.bom && data.starts_with(BOM) {
            self.rs.push(
                Code::Bom,
                Some(1),
                "byte order mark: the writer never produces one",
            );
            self.bom = true;
        }
        self.bom
    }

    /// Checks every complete line in `data`; returns how many bytes it used.
    fn feed(&mut self, data: &[u8]) -> usize {
        if self.starts_with_bom(data) {
            self.bytes += data.len() as u64;
            return data.len();
        }
        let mut used = 0;
        while let Some(i) = memchr(b'\n', &data[used..]) {
            let line = &data[used..used + i];
            match self.overlong.take() {
                Some((mut h, len)) => {
                    h.update(line);
                    self.overlong_line(len + line.len() as u64, h.finalize().into());
                }
                None => self.line(line),
            }
            used += i + 1;
        }
        self.bytes += used as u64;
        used
    }

    /// The buffer is full of one line's bytes: hash them and move on.
    fn feed_overlong(&mut self, data: &[u8]) {
        let (mut h, len) = self.overlong.take().unwrap_or_else(|| (Sha256::new(), 0));
        h.update(data);
        self.overlong = Some((h, len + data.len() as u64));
        self.bytes += data.len() as u64;
    }

    fn overlong_line(&mut self, len: u64, hash: [u8; 32]) {
        let n = self.chain.overlong(hash);
        self.last_receipt = None;
        self.rs.push(
            Code::LineTooLong,
            Some(n),
            format!("{len} bytes; the cap is {MAX_LINE}"),
        );
    }

    /// Per-line checks: the chain rule ([`Chain::line`]), then this log's
    /// own: digests, the first record, the receipt's position.
    fn line(&mut self, line: &[u8]) {
        self.last_receipt = None;
        let rs = &mut self.rs;
        let (n, rec) = self.chain.line::<Event>(line, &mut |f| {
            rs.push(Code::from(f.fault), Some(f.line), f.detail)
        });
        let Some(rec) = rec else {
            return;
        };
        if let Some(d) = rules::bad_digest(&rec.event) {
            rs.push(
                Code::BadDigest,
                Some(n),
                format!("digest {d:?} is not 64 lowercase hex digits"),
            );
        }
        if n == 1 && !matches!(rec.event, Event::RunStarted(_)) {
            rs.push(
                Code::FirstNotRunStarted,
                Some(n),
                format!("first record is {}", rec.event.kind()),
            );
        }
        match (self.receipt_line, rec.event) {
            (Some(r), Event::Receipt(_)) => rs.push(
                Code::DuplicateReceipt,
                Some(n),
                format!("a second receipt (the first is on line {r})"),
            ),
            (Some(r), ev) => rs.push(
                Code::RecordAfterReceipt,
                Some(n),
                format!("{} after the receipt on line {r}", ev.kind()),
            ),
            (None, Event::Receipt(rc)) => {
                self.receipt_line = Some(n);
                self.last_receipt = Some(rc);
            }
            (None, ev) => self.replay.record(ev, n),
        }
    }

    fn finish(mut self, tail: &[u8], name: &str, opts: &VerifyOptions) -> Verdict {
        let mut v = Verdict::empty(name);
        let tail_len = tail.len() as u64 + self.overlong.as_ref().map_or(0, |(_, l)| *l);
        if self.bytes == 0 && tail.is_empty() {
            self.rs.push(
                Code::EmptyLog,
                None,
                "the log is empty: no record was ever made durable",
            );
            v.reasons = self.rs.0;
            return v.finish();
        }
        if self.starts_with_bom(tail) {
            v.reasons = self.rs.0;
            return v.finish();
        }
        let has_receipt = self.receipt_line.is_some();
        if tail_len > 0 {
            let line = Some(self.chain.lines() + 1);
            if has_receipt {
                // The watchdog writes nothing after its receipt, so these bytes
                // are not a write it failed to finish: someone else appended them.
                self.rs.push(
                    Code::RecordAfterReceipt,
                    line,
                    format!("{tail_len} bytes without a newline after the receipt (the watchdog never writes after it)"),
                );
            } else {
                self.rs.push(
                    Code::TornLine,
                    line,
                    format!(
                        "{tail_len} bytes after the last newline (a write that did not finish)"
                    ),
                );
            }
        }
        v.records = self.chain.lines();
        v.head = self.chain.head();
        v.run = self.chain.run().map(str::to_string);

        if let (Some(want), Some(run)) = (&opts.expect_run, &v.run) {
            if want != run {
                self.rs.push(
                    Code::ExpectRunMismatch,
                    None,
                    format!("log is of run {run}, expected {want}"),
                );
            }
        }
        if let Some(want) = &opts.expect_head {
            match &v.head {
                Some(h) if h == want => {}
                h => self.rs.push(
                    Code::HeadMismatch,
                    None,
                    format!(
                        "head is {}, pinned {want}",
                        h.as_deref().unwrap_or("(none)")
                    ),
                ),
            }
        }
        self.unsealed(has_receipt, tail_len);
        let receipt = self.last_receipt.take();
        v.sealed = receipt.is_some() && tail_len == 0;

        let tampered = self.rs.0.iter().any(|r| r.class == Status::Tampered);
        if let (Some(rc), false) = (&receipt, tampered) {
            for r in self.replay.finish(rc) {
                self.rs.push(r.code, r.line, r.detail);
            }
            v.outcome = Some(rc.outcome);
            v.stop_reason = rc.stop_reason;
            v.staging = rc.staging.clone();
            v.holders = judge(&self.replay, rc, opts, &mut self.rs);
        }
        if self.rs.1 > 0 {
            let more = self.rs.1;
            let code = self.rs.0[MAX_REASONS - 1].code;
            self.rs
                .0
                .push(Reason::new(code, None, format!("... and {more} more")));
        }
        v.reasons = self.rs.0;
        v.finish()
    }
}

impl Checker {
    /// A log without a receipt: cut short or lost (`no_receipt`), unless
    /// it ends in `start_refused`, which is complete as it is; and a
    /// receipt after `start_refused`, which the watchdog never writes.
    fn unsealed(&mut self, has_receipt: bool, tail_len: u64) {
        let refused = self.replay.refused().is_some();
        if has_receipt && refused {
            self.rs.push(
                Code::ReplayMismatch,
                None,
                "a receipt after start_refused (the watchdog writes nothing after it)",
            );
        } else if refused && tail_len == 0 {
            for r in self.replay.finish_refused() {
                self.rs.push(r.code, r.line, r.detail);
            }
        } else if !has_receipt {
            self.rs.push(
                Code::NoReceipt,
                None,
                "no receipt: the watchdog did not finish (lost, killed, or the log was cut)",
            );
        }
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

/// The verdict table (docs/verdict.md) for an intact, sealed log; the holder scan
/// of `--staging`, when the stage given is the one sealed, unchanged.
///
/// The reasons come in a fixed order (the receipt's claims, the stop's
/// trigger, the stage at close, during the run, then against `--staging`):
/// a verdict's reasons list the same way for the same log.
fn judge(
    replay: &Replay,
    rc: &Receipt,
    opts: &VerifyOptions,
    rs: &mut Reasons,
) -> Option<HolderScan> {
    receipt_claims(replay, rc, rs);
    stop_trigger(replay, rc, rs);
    if let Some(why) = rc.staging.as_ref().and_then(|s| s.unreadable.as_ref()) {
        rs.push(Code::StageUnreadable, None, format!("at close: {why}"));
    }
    let want = opts.expect_stage_digest.as_deref();
    for (code, detail) in stage_run::during_run(replay, rc)
        .into_iter()
        .chain(stage_run::as_uploaded(replay, want))
        .chain(stage_private::at_close(replay, rc))
    {
        rs.push(code, None, detail);
    }
    against_staging(opts, rc, rs)
}

/// Whether the receipt says the action was stopped for `reason`.
fn stopped_for(rc: &Receipt, reason: StopReason) -> bool {
    rc.outcome == Outcome::Stopped && rc.stop_reason == Some(reason)
}

/// The reasons in what the receipt and the replay counted: a record not
/// made durable, descendants not proven gone or not proven the ones
/// scanned, foreign members left alone, processes that could not be ended,
/// the temp root left. Each one alone keeps the stage.
fn receipt_claims(replay: &Replay, rc: &Receipt, rs: &mut Reasons) {
    if stopped_for(rc, StopReason::AuditFailure) || replay.audit_failure_seen {
        rs.push(
            Code::AuditFailure,
            None,
            "a record could not be made durable during the action",
        );
    }
    if !rc.quiescent || !rc.no_live_or_waitable_descendants {
        rs.push(
            Code::NotQuiescent,
            None,
            "the receipt does not prove that no descendant is alive or waitable",
        );
    }
    if rc.uncertain_mappings > 0 {
        rs.push(
            Code::UncertainMappings,
            None,
            format!(
                "{} descendant(s) could not be proven to be the process scanned",
                rc.uncertain_mappings
            ),
        );
    }
    if replay.foreign > 0 {
        rs.push(
            Code::ForeignMember,
            None,
            format!(
                "{} process(es) the action did not start were in its group: left alive, never signalled",
                replay.foreign
            ),
        );
    }
    if replay.unkillable > 0 {
        let n = replay.unkillable;
        let what = format!("{n} process(es) could not be ended or reaped in time; sealed without");
        rs.push(Code::Unkillable, None, what);
    }
    if !rc.temp_root_removed {
        rs.push(
            Code::TempRootNotRemoved,
            None,
            "the private temp root was not removed",
        );
    }
}

/// The reasons in why the action stopped: a trigger that leaves the
/// controller's intent unknown (it died, or a hangup came) or says a
/// descendant could not be proven keeps the stage, whichever trigger came
/// first.
fn stop_trigger(replay: &Replay, rc: &Receipt, rs: &mut Reasons) {
    if stopped_for(rc, StopReason::MappingRefused) && rc.uncertain_mappings == 0 {
        // Not a reason the table lets through: the stop itself says a
        // descendant could not be proven, whatever the count claims.
        rs.push(
            Code::UncertainMappings,
            None,
            "the action stopped because a descendant could not be proven (mapping_refused)",
        );
    }
    // The controller may die after another trigger started the stop (say,
    // during the TERM grace): its root_lost is then a later trigger, and
    // its intent is just as unknown.
    let root_lost = stopped_for(rc, StopReason::RootLost) || replay.root_lost_seen;
    if root_lost {
        rs.push(
            Code::RootLost,
            None,
            "the controller died during the action; its intent is unknown, so keep the stage",
        );
    }
    // A hangup (an SSH session ending) neither proves the controller dead
    // nor says it wanted the stage gone: keep it, whichever trigger came first.
    if stopped_for(rc, StopReason::Hangup) || replay.hangup_seen {
        rs.push(
            Code::Hangup,
            None,
            "the watchdog got a hangup (SIGHUP): the controller's intent is unknown, so keep the stage",
        );
    }
}

/// The stage given with `--staging` against the one the receipt sealed.
/// A recorded stage not checked, or checked and not the same, keeps it.
/// The holder scan's result is returned only when the stage given is the
/// run's own (changed or not): `None` otherwise.
fn against_staging(opts: &VerifyOptions, rc: &Receipt, rs: &mut Reasons) -> Option<HolderScan> {
    match (&opts.staging, &rc.staging) {
        (Some(path), None) => rs.push(
            Code::StagingNotRecorded,
            None,
            format!("--staging {} given, but this run recorded no staging directory", path.display()),
        ),
        (Some(path), Some(sealed)) => return the_sealed_stage(opts, path, sealed, rs),
        // Closed or stopped alike, a recorded stage is checked or kept.
        (None, Some(_)) => rs.push(
            Code::StagingNotChecked,
            None,
            "the log recorded a staging directory: deletion is allowed only for that exact, unchanged stage; pass --staging DIR",
        ),
        (None, _) => {}
    }
    None
}

/// `path` looked at now against `sealed`, the stage the receipt recorded:
/// its identity, its inventory, and who holds it. Returns the holder scan
/// when `path` is that stage (`None` when it is another directory, could
/// not be inventoried, or its scan did not run).
/// Through the caller's descriptor when it gave one (`rea-stage remove`).
fn the_sealed_stage(
    opts: &VerifyOptions,
    path: &Path,
    sealed: &StagingInventoried,
    rs: &mut Reasons,
) -> Option<HolderScan> {
    use std::os::fd::AsFd;
    let opened = opts.staging_fd.as_deref().map(AsFd::as_fd);
    let private = sealed.private.as_ref();
    let bytes = sealed.inventory.bytes;
    match stage_held::look_at(path, opened, Some(&sealed.identity), private, bytes) {
        Ok(seen) if !inventory::same_dir(&seen.now.identity, &sealed.identity) => rs.push(
            Code::StagingMismatch,
            None,
            format!(
                "{} is not the staging directory of this run (dev/ino/uid/mode differ)",
                path.display()
            ),
        ),
        Ok(seen) => {
            let now = seen.now;
            if now.inventory != sealed.inventory || now.special != sealed.special {
                rs.push(
                    Code::StagingMismatch,
                    None,
                    format!(
                        "{} changed since the receipt (inventory differs)",
                        path.display()
                    ),
                );
            }
            for p in seen.private {
                rs.push(Code::PrivateStateChanged, None, p);
            }
            // The stage of this run, changed or not: who holds it now.
            let scan = seen.scan?;
            let (found, scan) = stage_held::found(scan);
            match found {
                Ok(found) => {
                    for f in found {
                        rs.push(Code::StageHeld, None, f);
                    }
                }
                Err(e) => rs.push(Code::HoldersNotScanned, None, e.to_string()),
            }
            return scan;
        }
        Err(Failure::Blocked(b)) => rs.push(Code::StageUnreadable, None, b.to_string()),
        Err(Failure::Failed(e)) => rs.push(
            Code::StagingMismatch,
            None,
            format!("cannot inventory {}: {e}", path.display()),
        ),
    }
    None
}
