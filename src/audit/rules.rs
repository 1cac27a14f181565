//! What the watchdog's writer always produces, beyond the chain rule
//! ([`crate::log::check`] checks that each line is byte for byte the
//! writer's encoding of its record): every digest a record carries is
//! lowercase hex of the right length.

use crate::kinds::watchdog::Event;
use crate::vocab::is_digest;

/// Every SHA-256 digest a record carries (not `prev`, checked on read).
pub fn digests(ev: &Event) -> Vec<&str> {
    match ev {
        Event::JobExited(j) => vec![&j.stdout.sha256, &j.stderr.sha256],
        Event::TempRootInventoried(t) => vec![&t.inventory.digest],
        Event::StagingInventoried(s) => vec![&s.inventory.digest],
        Event::StagingBaseline(b) => std::iter::once(b.inventory.digest.as_str())
            .chain(b.content.as_deref())
            .collect(),
        Event::StagingChanged(c) => vec![&c.baseline, &c.now],
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
