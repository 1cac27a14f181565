//! The expected content (docs/stage.md, "The expected content"): the
//! stage at the watchdog's start against the hashes the before-transfer
//! receipt pins, and `rea-stage manifest`, which computes those pins (and
//! the content digest) from local files before the upload.
//!
//! Both sides name entries the way the stage walk does
//! ([`crate::inventory::escape`]) and digest them with the one rule in
//! [`crate::inventory::listing::content_digest`], so what the controller
//! computed locally and what the watchdog saw in the stage compare byte for
//! byte.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::receipt::{check_names, BadName, BeforeTransfer};
use super::{ARMED_NAME, DISCARDING_NAME, RECEIPT_NAME};
use crate::inventory::listing::{content_digest, MAX_LISTED};
use crate::inventory::{escape, Entry, Listing};

/// Mismatches named in one refusal; the rest are counted.
pub const MAX_NAMED: usize = 64;

/// rea's own entries in a stage: never uploaded, left out of the content
/// digest and of the comparison with the pins.
pub fn is_rea_own(path: &str) -> bool {
    [RECEIPT_NAME, ARMED_NAME, DISCARDING_NAME].contains(&path)
}

/// The content digest of a stage's listing, rea's own entries left out.
pub fn uploaded_digest(listing: &Listing) -> Option<String> {
    content_digest(listing, is_rea_own)
}

/// Every way the stage (`listing`, its walk at the start) differs from
/// what `receipt` pins, for people, in path order; empty when it matches or
/// when the receipt pins nothing (an unpinned receipt only bounds the
/// names, which `rea-stage discard` checks). With pins the stage must hold
/// exactly the declared names, each a regular file, every pinned one
/// present with its hash; an unpinned declared name may be absent.
pub fn mismatches(receipt: &BeforeTransfer, listing: &Listing) -> Vec<String> {
    if receipt.sha256.is_empty() {
        return Vec::new();
    }
    if listing.past_cap > 0 {
        return vec![format!("the stage has more than {MAX_LISTED} entries")];
    }
    let declared: BTreeMap<String, &str> = receipt
        .files
        .iter()
        .map(|n| (escape(n.as_bytes()), n.as_str()))
        .collect();
    let mut out = Vec::new();
    let mut seen = BTreeMap::new();
    for e in &listing.entries {
        if e.path.contains('/') || is_rea_own(&e.path) {
            continue; // below a top-level entry, which is named itself
        }
        let Some(&name) = declared.get(&e.path) else {
            out.push(format!("{} ({}) is not declared", e.path, e.kind));
            continue;
        };
        seen.insert(name, e);
        if e.kind != "file" {
            out.push(format!("{} is a {}, not a regular file", e.path, e.kind));
        }
    }
    for (name, want) in &receipt.sha256 {
        match seen.get(name.as_str()) {
            None => out.push(format!("{} is missing", escape(name.as_bytes()))),
            Some(e) if e.kind == "file" && &e.extra != want => {
                out.push(format!("{} has SHA-256 {}, pinned {want}", e.path, e.extra))
            }
            Some(_) => {}
        }
    }
    out.sort();
    out
}

/// `mismatches` as one bounded sentence.
pub fn describe(found: &[String]) -> String {
    let mut s = found
        .iter()
        .take(MAX_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if found.len() > MAX_NAMED {
        s.push_str(&format!("; and {} more", found.len() - MAX_NAMED));
    }
    format!("the stage is not what the receipt pins: {s}")
}

/// What `rea-stage manifest` prints: one `--file=NAME=SHA256` argument per
/// local file, and the content digest of a stage holding exactly them.
#[derive(Debug, PartialEq, Eq)]
pub struct Manifest {
    pub args: Vec<String>,
    pub digest: String,
}

/// Why a manifest could not be made; nothing is printed.
#[derive(Debug)]
pub enum ManifestError {
    /// The file's name is not one `begin` accepts.
    Name(BadName),
    /// The last component is missing or not UTF-8.
    NoName(PathBuf),
    /// Not a regular file (after following links: the upload copies
    /// content).
    NotFile(PathBuf),
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManifestError::Name(b) => write!(f, "{b}"),
            ManifestError::NoName(p) => {
                write!(f, "{}: no file name, or not UTF-8", p.display())
            }
            ManifestError::NotFile(p) => write!(f, "{}: not a regular file", p.display()),
            ManifestError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

fn file_sha256(path: &Path) -> Result<String, ManifestError> {
    let io = |e| ManifestError::Io(path.to_path_buf(), e);
    let mut f = std::fs::File::open(path).map_err(io)?;
    if !f.metadata().map_err(io)?.is_file() {
        return Err(ManifestError::NotFile(path.to_path_buf()));
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(crate::vocab::hex(&h.finalize()))
}

/// The manifest of `paths`, each uploaded as its last component.
pub fn manifest(paths: &[PathBuf]) -> Result<Manifest, ManifestError> {
    let mut names = Vec::new();
    for p in paths {
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| ManifestError::NoName(p.clone()))?;
        names.push(name.to_string());
    }
    check_names(&names).map_err(ManifestError::Name)?;
    let mut listing = Listing::default();
    let mut args = Vec::new();
    for (p, name) in paths.iter().zip(&names) {
        let sha = file_sha256(p)?;
        args.push(format!("--file={name}={sha}"));
        listing.push(Entry {
            path: escape(name.as_bytes()),
            kind: "file".into(),
            mode: 0,
            uid: 0,
            size: 0,
            links: 0,
            ino: 0,
            extra: sha,
        });
    }
    let digest = uploaded_digest(&listing).unwrap_or_default();
    Ok(Manifest { args, digest })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: &str, extra: &str) -> Entry {
        Entry {
            path: path.into(),
            kind: kind.into(),
            mode: 0o644,
            uid: 0,
            size: 1,
            links: 1,
            ino: 7,
            extra: extra.into(),
        }
    }

    fn receipt(files: &[&str], pins: &[(&str, &str)]) -> BeforeTransfer {
        BeforeTransfer {
            kind: super::super::receipt::KIND.into(),
            version: super::super::receipt::VERSION,
            stage: crate::kinds::watchdog::DirIdentity {
                path: "/s".into(),
                dev: 1,
                ino: 2,
                uid: 0,
                mode: 0o40700,
            },
            receipt_ino: 3,
            files: files.iter().map(|s| s.to_string()).collect(),
            sha256: pins
                .iter()
                .map(|(n, h)| (n.to_string(), h.to_string()))
                .collect(),
            nonce: "0".repeat(64),
            ts: "t".into(),
        }
    }

    fn listing(entries: &[Entry]) -> Listing {
        Listing {
            entries: entries.to_vec(),
            past_cap: 0,
        }
    }

    #[test]
    fn a_stage_as_pinned_matches_and_rea_own_entries_do_not_count() {
        let a = "a".repeat(64);
        let r = receipt(&["run.bin", "opt"], &[("run.bin", &a)]);
        let l = listing(&[
            entry(RECEIPT_NAME, "file", "x"),
            entry(ARMED_NAME, "file", "y"),
            entry("run.bin", "file", &a),
        ]);
        assert_eq!(mismatches(&r, &l), Vec::<String>::new());
    }

    #[test]
    fn every_difference_is_named() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let r = receipt(
            &["run.bin", "lib", "gone"],
            &[("run.bin", &a), ("gone", &b)],
        );
        let l = listing(&[
            entry("run.bin", "file", &b),
            entry("lib", "dir", ""),
            entry("lib/x", "file", &a),
            entry("extra.txt", "file", &a),
            entry("pipe", "fifo", ""),
        ]);
        assert_eq!(
            mismatches(&r, &l),
            vec![
                "extra.txt (file) is not declared".to_string(),
                "gone is missing".to_string(),
                "lib is a dir, not a regular file".to_string(),
                "pipe (fifo) is not declared".to_string(),
                format!("run.bin has SHA-256 {b}, pinned {a}"),
            ]
        );
    }

    #[test]
    fn without_pins_nothing_is_compared() {
        let r = receipt(&["run.bin"], &[]);
        let l = listing(&[entry("other", "fifo", "")]);
        assert!(mismatches(&r, &l).is_empty());
    }

    #[test]
    fn the_content_digest_ignores_inodes_owners_and_rea_own_entries() {
        let a = "a".repeat(64);
        let mut one = entry("run.bin", "file", &a);
        let l1 = listing(&[one.clone(), entry(RECEIPT_NAME, "file", "r")]);
        one.ino = 99;
        one.uid = 1000;
        one.mode = 0o755;
        let l2 = listing(&[one]);
        assert_eq!(uploaded_digest(&l1), uploaded_digest(&l2));
        let l3 = listing(&[entry("run.bin", "file", &"b".repeat(64))]);
        assert_ne!(uploaded_digest(&l1), uploaded_digest(&l3));
    }
}
