//! The before-transfer receipt (`rea-stage begin`): proof, kept by the
//! controller as a SHA-256, of which directory was made for an upload and
//! which names the upload may leave in it.
//!
//! The file is one JSON object and a `\n`, written once, exclusively
//! (`O_CREAT|O_EXCL|O_NOFOLLOW` through the new directory's descriptor),
//! then fsynced with its directory. Its digest is over the file's exact
//! bytes, newline included.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};
use serde::{Deserialize, Serialize};

use super::path::{open_parent, Id, PathError};
use super::{sha256_hex, ARMED_NAME, DISCARDING_NAME, RECEIPT_NAME};

/// The receipt's `kind` and `version`.
pub const KIND: &str = "before_transfer";
pub const VERSION: u32 = 1;
/// At most this many declared names, each at most [`MAX_NAME`] bytes.
pub const MAX_FILES: usize = 64;
pub const MAX_NAME: usize = 255;
/// A receipt larger than this is not one `begin` wrote.
pub const MAX_RECEIPT: u64 = 64 << 10;

/// The stage as `begin` created it: the same identity (path, dev, inode,
/// uid, mode) the watchdog records for a staging directory.
pub use crate::kinds::watchdog::DirIdentity as StageId;

/// The receipt's content, field order as written.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BeforeTransfer {
    pub kind: String,
    pub version: u32,
    pub stage: StageId,
    /// The receipt file's own inode.
    pub receipt_ino: u64,
    /// The names the upload may create (plain names).
    pub files: Vec<String>,
    /// The content pinned for some of those names (`--file NAME=SHA256`):
    /// the watchdog refuses to start on a stage that does not match
    /// (docs/stage.md, "The expected content"). Absent when none is pinned,
    /// so a receipt without pins is byte for byte what it always was.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sha256: BTreeMap<String, String>,
    /// 32 random bytes, hex: two receipts never hash alike.
    pub nonce: String,
    /// RFC 3339 UTC.
    pub ts: String,
}

/// Why a declared name is refused (each its own message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadName {
    None,
    TooMany(usize),
    Empty,
    TooLong(String),
    Slash(String),
    Dot(String),
    Control(String),
    Reserved(String),
    Duplicate(String),
    /// `NAME=...` whose part after the last `=` is not a SHA-256.
    Pin(String),
    /// A pin in a receipt for a name the receipt does not declare.
    PinUndeclared(String),
}

impl std::fmt::Display for BadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadName::None => write!(f, "declare at least one --file NAME"),
            BadName::TooMany(n) => write!(f, "{n} names declared; at most {MAX_FILES}"),
            BadName::Empty => write!(f, "--file name is empty"),
            BadName::TooLong(n) => write!(f, "--file {n:?} is longer than {MAX_NAME} bytes"),
            BadName::Slash(n) => write!(f, "--file {n:?} contains `/`: only plain names"),
            BadName::Dot(n) => write!(f, "--file {n:?} is not a name (`.` or `..`)"),
            BadName::Control(n) => write!(f, "--file {n:?} contains a control character"),
            BadName::Reserved(n) => write!(f, "--file {n:?} is reserved for rea itself"),
            BadName::Duplicate(n) => write!(f, "--file {n:?} is declared twice"),
            BadName::Pin(n) => write!(
                f,
                "--file {n:?}: after the last `=` comes the file's SHA-256 (64 hex digits)"
            ),
            BadName::PinUndeclared(n) => {
                write!(f, "a hash is pinned for {n:?}, which is not declared")
            }
        }
    }
}

/// Checks the declared names (pure): plain, bounded, not rea's, no twice.
pub fn check_names(names: &[String]) -> Result<(), BadName> {
    if names.is_empty() {
        return Err(BadName::None);
    }
    if names.len() > MAX_FILES {
        return Err(BadName::TooMany(names.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        let bad = if n.is_empty() {
            Some(BadName::Empty)
        } else if n.len() > MAX_NAME {
            Some(BadName::TooLong(crate::vocab::bounded(n)))
        } else if n.contains('/') {
            Some(BadName::Slash(n.clone()))
        } else if n == "." || n == ".." {
            Some(BadName::Dot(n.clone()))
        } else if n.chars().any(|c| c.is_control()) {
            Some(BadName::Control(n.escape_default().to_string()))
        } else if n == RECEIPT_NAME || n == ARMED_NAME || n == DISCARDING_NAME {
            Some(BadName::Reserved(n.clone()))
        } else if !seen.insert(n.as_str()) {
            Some(BadName::Duplicate(n.clone()))
        } else {
            None
        };
        if let Some(b) = bad {
            return Err(b);
        }
    }
    Ok(())
}

/// The declared names and the hashes pinned for some of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    pub files: Vec<String>,
    pub sha256: BTreeMap<String, String>,
}

/// Parses `--file` arguments: `NAME` declares a name, `NAME=SHA256` also
/// pins its content. A name holding `=` is split at its last `=`, so it can
/// only be declared with a pin.
pub fn declare(args: &[String]) -> Result<Declared, BadName> {
    let mut out = Declared::default();
    for a in args {
        match a.rsplit_once('=') {
            None => out.files.push(a.clone()),
            Some((name, hex)) => {
                let hex = hex.to_ascii_lowercase();
                if !crate::vocab::is_digest(&hex) {
                    return Err(BadName::Pin(crate::vocab::bounded(a)));
                }
                out.files.push(name.to_string());
                out.sha256.insert(name.to_string(), hex);
            }
        }
    }
    check_names(&out.files)?;
    Ok(out)
}

/// Why `begin` failed; nothing was created unless `created` says so.
#[derive(Debug)]
pub enum BeginError {
    Names(BadName),
    Path(PathError),
    /// DIR already exists (as anything).
    Exists(String),
    Io {
        what: String,
        err: io::Error,
    },
}

impl std::fmt::Display for BeginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BeginError::Names(b) => write!(f, "{b}"),
            BeginError::Path(p) => write!(f, "{p}"),
            BeginError::Exists(p) => write!(f, "{p} already exists; a stage is always new"),
            BeginError::Io { what, err } => write!(f, "{what}: {err}"),
        }
    }
}

/// 32 bytes from the kernel's CSPRNG (getrandom(2), the source of
/// `/dev/urandom`), hex. A system call, not a file: the root rea-stage
/// runs in may hold no `/dev/urandom` (docs/deploy.md).
pub fn nonce() -> io::Result<String> {
    let mut b = [0u8; 32];
    let mut got = 0;
    while got < b.len() {
        let rest = &mut b[got..];
        // SAFETY: getrandom writes at most rest.len() bytes into rest.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else {
            got += n as usize;
        }
    }
    Ok(crate::vocab::hex(&b))
}

/// Creates the file `name` in `dir` exclusively, never through a link.
pub fn create_exclusive(dir: BorrowedFd<'_>, name: &str) -> io::Result<std::fs::File> {
    let flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_EXCL
        | OFlag::O_NOFOLLOW
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd: OwnedFd = openat(dir, name, flags, Mode::from_bits_truncate(0o600))?;
    Ok(std::fs::File::from(fd))
}

/// `rea-stage begin`: mkdir 0700, write the receipt, return its digest.
pub fn begin(
    dir: &std::path::Path,
    declared: &Declared,
) -> Result<(String, BeforeTransfer), BeginError> {
    check_names(&declared.files).map_err(BeginError::Names)?;
    let parent = open_parent(dir).map_err(BeginError::Path)?;
    let shown = parent.path.display().to_string();
    let io_err = |what: &str| {
        let what = format!("{what} {shown}");
        move |err: io::Error| BeginError::Io { what, err }
    };
    let nonce = nonce().map_err(io_err("getting random bytes (getrandom) for"))?;
    match mkdirat(
        parent.fd.as_fd(),
        parent.name.as_c_str(),
        Mode::from_bits_truncate(0o700),
    ) {
        Ok(()) => {}
        Err(nix::errno::Errno::EEXIST) => return Err(BeginError::Exists(shown)),
        Err(e) => return Err(io_err("mkdir")(e.into())),
    }
    let stage = parent
        .open_stage()
        .map_err(io_err("opening the new stage"))?;
    let id = Id::of(stage.as_fd()).map_err(io_err("fstat"))?;
    let mut f =
        create_exclusive(stage.as_fd(), RECEIPT_NAME).map_err(io_err("creating the receipt in"))?;
    let own = Id::of(f.as_fd()).map_err(io_err("fstat the receipt in"))?;
    let receipt = BeforeTransfer {
        kind: KIND.into(),
        version: VERSION,
        stage: StageId {
            path: shown.clone(),
            dev: id.dev,
            ino: id.ino,
            uid: id.uid,
            mode: id.mode,
        },
        receipt_ino: own.ino,
        files: declared.files.clone(),
        sha256: declared.sha256.clone(),
        nonce,
        ts: crate::clock::rfc3339_now(),
    };
    let mut bytes = serde_json::to_vec(&receipt)
        .map_err(|e| io_err("encoding the receipt of")(io::Error::other(e)))?;
    bytes.push(b'\n');
    f.write_all(&bytes)
        .map_err(io_err("writing the receipt in"))?;
    f.sync_all().map_err(io_err("fsync the receipt in"))?;
    nix::unistd::fsync(&stage).map_err(|e| io_err("fsync")(e.into()))?;
    nix::unistd::fsync(&parent.fd).map_err(|e| io_err("fsync the parent of")(e.into()))?;
    Ok((sha256_hex(&bytes), receipt))
}

/// Why receipt bytes are not a receipt `begin` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceiptError {
    NoNewline,
    NotObject,
    /// Not the receipt's JSON (serde's message).
    Json(String),
    WrongKind {
        kind: String,
        version: u32,
    },
    /// Its names or pins break `begin`'s rules.
    Names(BadName),
    /// The error a discard log recorded, read back by its verifier.
    Recorded(String),
}

impl std::fmt::Display for ReceiptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReceiptError::NoNewline => write!(f, "the receipt does not end with a newline"),
            ReceiptError::NotObject => write!(f, "the receipt is not a JSON object"),
            ReceiptError::Json(e) | ReceiptError::Recorded(e) => f.write_str(e),
            ReceiptError::WrongKind { kind, version } => write!(
                f,
                "kind {kind:?} version {version} is not a before-transfer receipt"
            ),
            ReceiptError::Names(b) => write!(f, "{b}"),
        }
    }
}

/// Parses receipt bytes strictly: one object, then exactly one `\n`.
pub fn parse(bytes: &[u8]) -> Result<BeforeTransfer, ReceiptError> {
    let body = bytes.strip_suffix(b"\n").ok_or(ReceiptError::NoNewline)?;
    if !body.starts_with(b"{") {
        return Err(ReceiptError::NotObject);
    }
    let r: BeforeTransfer =
        serde_json::from_slice(body).map_err(|e| ReceiptError::Json(e.to_string()))?;
    if r.kind != KIND || r.version != VERSION {
        return Err(ReceiptError::WrongKind {
            kind: r.kind,
            version: r.version,
        });
    }
    check_names(&r.files).map_err(ReceiptError::Names)?;
    if let Some(n) = r.sha256.keys().find(|n| !r.files.contains(n)) {
        return Err(ReceiptError::Names(BadName::PinUndeclared(n.clone())));
    }
    if let Some(n) = r.sha256.iter().find(|(_, h)| !crate::vocab::is_digest(h)) {
        let shown = format!("{}={}", n.0, crate::vocab::bounded(n.1));
        return Err(ReceiptError::Names(BadName::Pin(shown)));
    }
    Ok(r)
}
