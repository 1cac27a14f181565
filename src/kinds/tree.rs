//! Directory trees as records name them: a directory's identity, the
//! digest of a tree's listing, one entry named for people. The bottom of
//! the record kinds: it imports none of them.

use serde::{Deserialize, Serialize};

/// What a directory was when it was first seen; compared again by `verify`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirIdentity {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub mode: u32,
}

/// A digest of a directory tree's listing (see `inventory`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    pub entries: u64,
    pub bytes: u64,
    pub digest: String,
}

/// One entry of a tree, named for people.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TempEntry {
    pub path: String,
    pub kind: String,
    pub size: u64,
}
