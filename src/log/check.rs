//! The chain rule checked line by line, whatever the log's kind
//! (docs/audit-log.md): each line parses strictly into a record of the
//! kind, is byte for byte the writer's encoding of it, and continues the
//! chain (`seq` counts from 0, one `run`, `prev` is the hash of the line
//! before, the first `prev` is the genesis hash of the run, `mono_ns` never
//! goes back).
//!
//! Each verifier feeds its lines to one [`Chain`] and adds only its kind's
//! own rules (which records may follow which, the verdict), naming the
//! [`Fault`]s in its own reason codes.

use sha2::{Digest, Sha256};

use super::read::{parse_line, Fault, Record};
use super::writer::{encode, Line};
use super::{chain, Kind};

/// A fault of one line: which, on which line (from 1), and what exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub fault: Fault,
    pub line: u64,
    pub detail: String,
}

/// What one line's checks need from the lines before it.
#[derive(Default)]
pub struct Chain {
    /// Complete lines seen (overlong ones too).
    lines: u64,
    /// The run of the first record that parsed.
    run: Option<String>,
    /// The hash of the last line seen: the head so far.
    head: Option<[u8; 32]>,
    /// `mono_ns` of the last record that parsed.
    mono: Option<u64>,
    /// The writer's encoding of the current line (reused between lines).
    scratch: Vec<u8>,
}

impl Chain {
    /// Complete lines seen.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The run of the log: that of its first record that parsed.
    pub fn run(&self) -> Option<&str> {
        self.run.as_deref()
    }

    /// The hash of the last line seen (hex), `None` before any.
    pub fn head(&self) -> Option<String> {
        self.head.map(|h| chain::hex(&h))
    }

    /// A line over the cap, hashed as it streamed by (never buffered
    /// whole): counted, and the next line's `prev` must be its hash.
    /// Returns its line number.
    pub fn overlong(&mut self, hash: [u8; 32]) -> u64 {
        self.lines += 1;
        self.head = Some(hash);
        self.lines
    }

    /// A line over the cap whose bytes were not hashed: counted; the next
    /// line cannot continue the chain. Returns its line number.
    pub fn skipped(&mut self) -> u64 {
        self.lines += 1;
        self.head = None;
        self.lines
    }

    /// Checks one complete line (without its `\n`): every fault goes to
    /// `found`. Returns the line's number and, when it parsed, its record,
    /// whatever else is wrong with it (a record that does not continue the
    /// chain is still the kind's to look at).
    pub fn line<'l, K: Kind>(
        &mut self,
        bytes: &'l [u8],
        found: &mut impl FnMut(Found),
    ) -> (u64, Option<Record<'l, K>>) {
        self.lines += 1;
        let n = self.lines;
        let prev_line = self.head.replace(Sha256::digest(bytes).into());
        let mut push = |fault, detail: String| {
            found(Found {
                fault,
                line: n,
                detail,
            })
        };
        let rec = match parse_line::<K>(bytes) {
            Ok(rec) => rec,
            Err(e) => {
                push(e.fault, e.detail);
                return (n, None);
            }
        };
        if rec.v == K::VERSION {
            // (Another version is reported as such; nothing to compare with.)
            self.scratch.clear();
            let l = Line {
                run: &rec.run,
                seq: rec.seq,
                ts: &rec.ts,
                mono_ns: rec.mono_ns,
                prev: &rec.prev,
            };
            if !(encode(&l, &rec.event, &mut self.scratch).is_ok() && self.scratch == bytes) {
                push(
                    Fault::NonCanonical,
                    "not byte for byte the writer's encoding of this record (spacing, key spelling or order, escapes, an array for an object)".into(),
                );
            }
        }
        if let Some(m) = self.mono.filter(|m| rec.mono_ns < *m) {
            let d = format!(
                "mono_ns {} is before the previous record's {m}",
                rec.mono_ns
            );
            push(Fault::MonoRegressed, d);
        }
        self.mono = Some(rec.mono_ns);
        if rec.v != K::VERSION {
            push(Fault::BadVersion, format!("v is {}", rec.v));
        }
        if rec.seq != n - 1 {
            push(
                Fault::SeqMismatch,
                format!("seq {} where {} belongs", rec.seq, n - 1),
            );
        }
        let run = self.run.get_or_insert_with(|| rec.run.to_string());
        if n == 1 {
            if rec.prev != chain::genesis(&rec.run) {
                let d = "prev of the first record is not the genesis hash of its run";
                push(Fault::GenesisMismatch, d.into());
            }
        } else if rec.run != run.as_str() {
            let d = format!("record of run {} in a log of run {run}", rec.run);
            push(Fault::RunMismatch, d);
        } else if prev_line.map(|h| chain::hex(&h)).as_deref() != Some(&*rec.prev) {
            let d = "prev is not the hash of the line before: the chain is broken here";
            push(Fault::PrevMismatch, d.into());
        }
        (n, Some(rec))
    }
}
