//! The stage entry by entry: the baseline at the watchdog's start and the
//! walk at close, compared to name every entry added, removed, changed or
//! replaced during the run (docs/stage.md, "Nothing changes during the
//! run").
//!
//! The verdict never rests on this comparison: it compares the two
//! inventory digests, which cover every entry however many there are. The
//! listing only says *which* entries differ, for people; it is bounded
//! ([`MAX_LISTED`] entries kept in memory, [`MAX_NAMED`] changes recorded).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kinds::stage::{Aspect, Change, StageChange, StagingChanged};

/// Entries kept per listing; past it the changes are not named (the
/// digests still decide). ~100 bytes each: a few MiB at most.
pub const MAX_LISTED: usize = 50_000;

/// Changes named in one `staging_changed` record; the rest are counted.
pub const MAX_NAMED: usize = 64;

/// One entry as the walk saw it: what its canonical line says.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the walked directory, escaped (`\xNN` for anything
    /// not printable ASCII).
    pub path: String,
    /// `file`, `dir`, `symlink`, `fifo`, `socket`, `char`, `block`,
    /// `mountpoint` or `other`.
    pub kind: String,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    /// A regular file's size; 0 for anything else.
    pub size: u64,
    pub links: u64,
    pub ino: u64,
    /// A symlink's target text; a regular file's SHA-256 when contents
    /// are hashed; empty otherwise.
    pub extra: String,
}

impl Entry {
    /// The canonical line the inventory digest is taken over:
    /// `kind TAB mode(octal) TAB uid TAB size TAB links TAB inode TAB path
    /// TAB extra NL`.
    pub fn line(&self) -> String {
        let Entry {
            path,
            kind,
            mode,
            uid,
            size,
            links,
            ino,
            extra,
        } = self;
        format!("{kind}\t{mode:o}\t{uid}\t{size}\t{links}\t{ino}\t{path}\t{extra}\n")
    }

    /// What differs between two sightings of the same path.
    fn aspects(&self, now: &Entry) -> Vec<Aspect> {
        let extra = match self.kind.as_str() {
            "symlink" => Aspect::Target,
            _ => Aspect::Content,
        };
        [
            (self.ino != now.ino, Aspect::Inode),
            (self.extra != now.extra, extra),
            (self.size != now.size, Aspect::Size),
            (self.mode != now.mode, Aspect::Mode),
            (self.uid != now.uid, Aspect::Owner),
            (self.links != now.links, Aspect::Links),
        ]
        .into_iter()
        .filter_map(|(differs, a)| differs.then_some(a))
        .collect()
    }
}

/// Every entry of one walk, in walk order, or as many as [`MAX_LISTED`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// Entries seen past [`MAX_LISTED`] (not kept).
    pub past_cap: u64,
}

impl Listing {
    pub fn push(&mut self, e: Entry) {
        if self.entries.len() < MAX_LISTED {
            self.entries.push(e);
        } else {
            self.past_cap += 1;
        }
    }

    fn by_path(&self) -> BTreeMap<&str, &Entry> {
        self.entries.iter().map(|e| (e.path.as_str(), e)).collect()
    }
}

/// The digest of a stage's content, of what was uploaded into it
/// (docs/stage.md, "The expected content"): SHA-256 over one line per
/// entry, `kind TAB path TAB extra NL`, in byte order of `path`, leaving
/// out the entries `skip` says are not uploaded (rea's own). Inodes,
/// owners, modes and link counts are left out on purpose: the controller
/// computes the same digest from its local files before the upload
/// (`rea-stage manifest --digest`). `None` for a listing cut at
/// [`MAX_LISTED`]: a digest of part of the stage would pin nothing.
pub fn content_digest(listing: &Listing, skip: impl Fn(&str) -> bool) -> Option<String> {
    use sha2::{Digest, Sha256};
    if listing.past_cap > 0 {
        return None;
    }
    let mut kept: Vec<&Entry> = listing.entries.iter().filter(|e| !skip(&e.path)).collect();
    kept.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let mut h = Sha256::new();
    for e in kept {
        h.update(format!("{}\t{}\t{}\n", e.kind, e.path, e.extra).as_bytes());
    }
    Some(crate::vocab::hex(&h.finalize()))
}

/// The `staging_changed` record for a stage whose digest at close
/// (`now_digest`) differs from its baseline's: each entry added, removed,
/// replaced (another type or another inode at the path) or changed (same
/// inode; content, target, size, mode, owner or link count differ), in
/// path order, the first [`MAX_NAMED`] named and the rest counted. When
/// either listing was cut at [`MAX_LISTED`], the entries are not compared
/// (a partial comparison would name false changes) and `unnamed` says why.
pub fn compare(
    baseline: &Listing,
    baseline_digest: &str,
    now: &Listing,
    now_digest: &str,
) -> StagingChanged {
    let mut out = StagingChanged {
        baseline: baseline_digest.to_string(),
        now: now_digest.to_string(),
        changes: Vec::new(),
        more: 0,
        unnamed: None,
    };
    if baseline.past_cap > 0 || now.past_cap > 0 {
        out.unnamed = Some(format!(
            "the stage has more than {MAX_LISTED} entries: its changes are not named"
        ));
        return out;
    }
    let (before, after) = (baseline.by_path(), now.by_path());
    let mut paths: Vec<&str> = before.keys().chain(after.keys()).copied().collect();
    paths.sort_unstable();
    paths.dedup();
    for path in paths {
        let change = match (before.get(path), after.get(path)) {
            (Some(b), None) => Some((Change::Removed, Some(b), None, Vec::new())),
            (None, Some(a)) => Some((Change::Added, None, Some(a), Vec::new())),
            (Some(b), Some(a)) if b.kind != a.kind => {
                Some((Change::Replaced, Some(b), Some(a), Vec::new()))
            }
            (Some(b), Some(a)) => match b.aspects(a) {
                w if w.is_empty() => None,
                w if w.contains(&Aspect::Inode) => Some((Change::Replaced, Some(b), Some(a), w)),
                w => Some((Change::Changed, Some(b), Some(a), w)),
            },
            (None, None) => None,
        };
        let Some((change, was, then, what)) = change else {
            continue;
        };
        if out.changes.len() == MAX_NAMED {
            out.more += 1;
            continue;
        }
        out.changes.push(StageChange {
            path: path.to_string(),
            change,
            was: was.map(|e| e.kind.clone()),
            now: then.map(|e| e.kind.clone()),
            what,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, ino: u64, sha: &str) -> Entry {
        Entry {
            path: path.into(),
            kind: "file".into(),
            mode: 0o644,
            uid: 0,
            size: 3,
            links: 1,
            ino,
            extra: sha.into(),
        }
    }

    fn listing(entries: Vec<Entry>) -> Listing {
        Listing {
            entries,
            past_cap: 0,
        }
    }

    #[test]
    fn each_kind_of_change_is_named_in_path_order() {
        let before = listing(vec![
            file("bin", 10, "aa"),
            file("gone", 11, "bb"),
            file("link-me", 12, "cc"),
            file("lib", 13, "dd"),
        ]);
        let mut swapped = file("link-me", 99, "cc");
        swapped.links = 2;
        let mut sym = file("lib", 14, "../elsewhere");
        sym.kind = "symlink".into();
        let after = listing(vec![
            file("bin", 10, "ee"),
            swapped,
            sym,
            file("new", 15, "ff"),
        ]);
        let c = compare(&before, "d0", &after, "d1");
        let got: Vec<(&str, Change, Vec<Aspect>)> = c
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.change, c.what.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("bin", Change::Changed, vec![Aspect::Content]),
                ("gone", Change::Removed, vec![]),
                ("lib", Change::Replaced, vec![]),
                (
                    "link-me",
                    Change::Replaced,
                    vec![Aspect::Inode, Aspect::Links]
                ),
                ("new", Change::Added, vec![]),
            ]
        );
        assert_eq!(c.changes[2].now.as_deref(), Some("symlink"));
        assert_eq!((c.more, c.unnamed), (0, None));
    }

    #[test]
    fn past_the_cap_changes_are_counted_and_past_the_listing_not_named() {
        let before = listing(vec![]);
        let after = listing(
            (0..100)
                .map(|i| file(&format!("f{i:03}"), i, "x"))
                .collect(),
        );
        let c = compare(&before, "a", &after, "b");
        assert_eq!(
            (c.changes.len(), c.more),
            (MAX_NAMED, 100 - MAX_NAMED as u64)
        );
        let cut = Listing {
            entries: vec![],
            past_cap: 1,
        };
        let c = compare(&cut, "a", &after, "b");
        assert!(c.changes.is_empty() && c.unnamed.is_some(), "{c:?}");
    }

    #[test]
    fn the_line_carries_every_compared_field() {
        let e = file("a\\x0a", 7, "sha");
        assert_eq!(e.line(), "file\t644\t0\t3\t1\t7\ta\\x0a\tsha\n");
    }
}
