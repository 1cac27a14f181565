//! What a consistent writer always produces, checked line by line
//! (docs/audit-log.md, "Reading a log strictly"): the line is byte for
//! byte the writer's encoding of the record it parses to (key spelling,
//! order, no whitespace, no needless escapes, no array where an object
//! belongs), and every digest is lowercase hex of the right length.

use super::reader::Record;
use super::record::{Event, RECORD_VERSION};
use super::writer::{encode, Line};
use crate::vocab::is_digest;

/// Whether `line` is exactly what the writer emits for `rec`. `scratch`
/// is reused between lines (it holds at most one line).
pub fn is_canonical(line: &[u8], rec: &Record<'_>, scratch: &mut Vec<u8>) -> bool {
    if rec.v != RECORD_VERSION {
        return true; // reported as bad_version; nothing to compare with
    }
    scratch.clear();
    let l = Line {
        run: &rec.run,
        seq: rec.seq,
        ts: &rec.ts,
        mono_ns: rec.mono_ns,
        prev: &rec.prev,
    };
    encode(&l, &rec.event, scratch).is_ok() && scratch.as_slice() == line
}

/// Every SHA-256 digest a record carries (not `prev`, checked on read).
pub fn digests(ev: &Event) -> Vec<&str> {
    match ev {
        Event::JobExited(j) => vec![&j.stdout.sha256, &j.stderr.sha256],
        Event::TempRootInventoried(t) => vec![&t.inventory.digest],
        Event::StagingInventoried(s) => vec![&s.inventory.digest],
        Event::Receipt(r) => r
            .staging
            .iter()
            .map(|s| s.inventory.digest.as_str())
            .collect(),
        _ => Vec::new(),
    }
}

/// The first digest of `ev` that is not 64 lowercase hex digits.
pub fn bad_digest(ev: &Event) -> Option<String> {
    digests(ev)
        .into_iter()
        .find(|d| !is_digest(d))
        .map(crate::vocab::bounded)
}
