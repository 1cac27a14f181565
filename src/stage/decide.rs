//! The discard decision (docs/stage.md), a pure function over what was seen.
//!
//! `rea-stage discard` calls [`decide`] on the listing it took through the
//! stage's descriptor; `rea-audit verify` calls it again on the same facts
//! as the log recorded them, so a log claiming `discarded` for a stage the
//! rule refuses does not verify. An empty answer is the only "yes".

use serde::{Deserialize, Serialize};

use super::receipt::{BeforeTransfer, ReceiptError, MAX_RECEIPT};
use super::{ARMED_NAME, DISCARDING_NAME, RECEIPT_NAME};
use crate::kinds::held::ScanFailed;

/// What an entry of the stage is (`fstatat`, no link followed).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EntryType {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Other,
}

impl EntryType {
    pub fn of_mode(mode: u32) -> EntryType {
        match mode & libc::S_IFMT {
            libc::S_IFREG => EntryType::File,
            libc::S_IFDIR => EntryType::Directory,
            libc::S_IFLNK => EntryType::Symlink,
            libc::S_IFIFO => EntryType::Fifo,
            libc::S_IFSOCK => EntryType::Socket,
            libc::S_IFCHR => EntryType::CharDevice,
            libc::S_IFBLK => EntryType::BlockDevice,
            _ => EntryType::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EntryType::File => "regular file",
            EntryType::Directory => "directory",
            EntryType::Symlink => "symlink",
            EntryType::Fifo => "FIFO",
            EntryType::Socket => "socket",
            EntryType::CharDevice => "character device",
            EntryType::BlockDevice => "block device",
            EntryType::Other => "special file",
        }
    }
}

/// One entry of the stage as inventoried.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The name's bytes, printable ASCII kept, anything else and `\` as `\xNN`.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: EntryType,
    pub size: u64,
    pub uid: u32,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
    /// SHA-256 of the receipt's bytes; `null` for every other entry (an
    /// upload is never read) and for a receipt over the size cap.
    pub sha256: Option<String>,
}

/// The stage directory's identity through its descriptor.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirId {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub mode: u32,
}

/// Everything the decision looks at.
#[derive(Clone, Debug)]
pub struct Facts {
    /// Our uid: every entry must have it.
    pub uid: u32,
    /// The controller's `--receipt-sha256`.
    pub expected: String,
    pub stage: DirId,
    pub entries: Vec<Entry>,
    /// More entries than the listing keeps.
    pub truncated: bool,
    /// Entries that changed while they were inventoried.
    pub changed: Vec<String>,
    /// The receipt's content, parsed (`None`: not read; too large or not a file).
    pub receipt: Option<Result<BeforeTransfer, ReceiptError>>,
    /// The holder scan: each holder, mount and loop device named (empty:
    /// not held), or why it could not run (`None`: not scanned, in a log
    /// written before the discard scanned).
    pub holders: Option<Result<Vec<String>, ScanFailed>>,
}

/// Every refusal has its own code.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// DIR (or its parent) cannot be opened without following a symlink.
    StageUnreachable,
    /// DIR (or a mount under it) did not answer within 5 s: a file system
    /// that is stuck (a FUSE or NFS server gone). Nothing is touched.
    StageUnreadable,
    ReceiptMissing,
    ReceiptNotRegular,
    ReceiptTooLarge,
    ReceiptHashMismatch,
    ReceiptInvalid,
    ReceiptInodeMismatch,
    /// The directory is not the one the receipt was made in.
    IdentityMismatch,
    /// `.rea-exec-started` exists: a watchdog has run (or is running) here.
    Armed,
    /// `.rea-discarding` exists: another discard is under way (or stopped).
    DiscardInProgress,
    UndeclaredEntry,
    NotRegular,
    HardLinked,
    ForeignUid,
    OtherFilesystem,
    TooManyEntries,
    /// Something changed between the listing and the removal.
    ConcurrentChange,
    /// A process, mount or loop device holds the stage (the holder scan).
    StageHeld,
    /// The stage could not be scanned for holders.
    HoldersNotScanned,
    IoError,
    /// Stands for the refusals past [`MAX_REFUSALS`] (how many, which codes).
    MoreRefusals,
}

impl Code {
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Refusal {
    pub code: Code,
    /// The entry it is about, if one.
    pub name: Option<String>,
    /// What the entry is, for `not_regular` (and `undeclared_entry`).
    #[serde(rename = "type")]
    pub kind: Option<EntryType>,
    pub detail: String,
}

impl Refusal {
    pub fn new(code: Code, name: Option<&str>, detail: impl Into<String>) -> Refusal {
        Refusal {
            code,
            name: name.map(crate::vocab::bounded),
            kind: None,
            detail: detail.into(),
        }
    }
}

/// Bytes spelled the way [`Entry::name`] is.
pub fn escape_name(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// The receipt, if it can be trusted: the refusals otherwise.
fn trusted<'a>(f: &'a Facts, out: &mut Vec<Refusal>) -> Option<&'a BeforeTransfer> {
    let name = Some(RECEIPT_NAME);
    let Some(e) = f.entries.iter().find(|e| e.name == RECEIPT_NAME) else {
        out.push(Refusal::new(
            Code::ReceiptMissing,
            name,
            "no before-transfer receipt in the stage",
        ));
        return None;
    };
    if e.kind != EntryType::File {
        let mut r = Refusal::new(
            Code::ReceiptNotRegular,
            name,
            format!("the receipt is a {}", e.kind.as_str()),
        );
        r.kind = Some(e.kind);
        out.push(r);
        return None;
    }
    if e.size > MAX_RECEIPT {
        let d = format!(
            "the receipt is {} bytes, larger than any rea-stage writes (it was not read)",
            e.size
        );
        out.push(Refusal::new(Code::ReceiptTooLarge, name, d));
        return None;
    }
    if e.sha256.as_deref() != Some(f.expected.as_str()) {
        let seen = e.sha256.as_deref().unwrap_or("(unread)");
        out.push(Refusal::new(
            Code::ReceiptHashMismatch,
            name,
            format!("the receipt hashes to {seen}, not {}", f.expected),
        ));
        return None;
    }
    let r = match &f.receipt {
        None => {
            out.push(Refusal::new(
                Code::ReceiptInvalid,
                name,
                "the receipt was not read",
            ));
            return None;
        }
        Some(Err(why)) => {
            out.push(Refusal::new(Code::ReceiptInvalid, name, why.to_string()));
            return None;
        }
        Some(Ok(r)) => r,
    };
    if r.receipt_ino != e.ino || e.dev != f.stage.dev {
        let d = format!(
            "the receipt names inode {}, the file is inode {}",
            r.receipt_ino, e.ino
        );
        out.push(Refusal::new(Code::ReceiptInodeMismatch, name, d));
    }
    let want = (r.stage.dev, r.stage.ino, r.stage.uid);
    if want != (f.stage.dev, f.stage.ino, f.stage.uid) {
        out.push(Refusal::new(
            Code::IdentityMismatch,
            None,
            format!(
                "the stage is dev {} inode {} uid {}; the receipt was made for dev {} inode {} uid {}",
                f.stage.dev, f.stage.ino, f.stage.uid, want.0, want.1, want.2
            ),
        ));
    }
    Some(r)
}

/// Why the stage may not be discarded; empty when it may.
///
/// The refusals come in a fixed order (the receipt, the holders, the
/// stage's owner, each entry in listing order, then the listing itself),
/// so the verifier's run of this function on the recorded facts gives the
/// very list the discard recorded.
pub fn decide(f: &Facts) -> Vec<Refusal> {
    let mut out = Vec::new();
    let receipt = trusted(f, &mut out);
    held(f, &mut out);
    if f.stage.uid != f.uid {
        let d = format!(
            "the stage belongs to uid {}, not ours ({})",
            f.stage.uid, f.uid
        );
        out.push(Refusal::new(Code::ForeignUid, None, d));
    }
    for e in &f.entries {
        entry(f, receipt, e, &mut out);
    }
    listing(f, &mut out);
    bound(out)
}

/// The holder scan's refusals: one `stage_held` per holder named, or
/// `holders_not_scanned` when the scan could not run. None when the facts
/// carry no scan (a log written before the discard scanned).
fn held(f: &Facts, out: &mut Vec<Refusal>) {
    match &f.holders {
        Some(Ok(found)) => {
            for x in found {
                out.push(Refusal::new(Code::StageHeld, None, x.clone()));
            }
        }
        Some(Err(e)) => {
            let d = format!("the stage could not be scanned for holders: {e}");
            out.push(Refusal::new(Code::HoldersNotScanned, None, d));
        }
        None => {}
    }
}

/// One entry's refusals: a marker (a watchdog armed the stage, another
/// discard is under way), a name the trusted receipt does not declare, a
/// type other than a regular file (the receipt itself excepted), and for
/// a regular file what [`regular_file`] finds. With no trusted receipt
/// every name counts as declared: the receipt's own refusal already
/// stands.
fn entry(f: &Facts, receipt: Option<&BeforeTransfer>, e: &Entry, out: &mut Vec<Refusal>) {
    let name = Some(e.name.as_str());
    if e.name == ARMED_NAME {
        out.push(Refusal::new(
            Code::Armed,
            name,
            "a watchdog armed this stage: an exec may have started",
        ));
        return;
    }
    if e.name == DISCARDING_NAME {
        out.push(Refusal::new(
            Code::DiscardInProgress,
            name,
            "another discard is removing this stage (or one stopped part way)",
        ));
        return;
    }
    let declared = match receipt {
        Some(r) if e.name != RECEIPT_NAME => {
            r.files.iter().any(|d| escape_name(d.as_bytes()) == e.name)
        }
        _ => true,
    };
    if !declared {
        let mut r = Refusal::new(
            Code::UndeclaredEntry,
            name,
            format!("a {} that is not a declared upload", e.kind.as_str()),
        );
        r.kind = Some(e.kind);
        out.push(r);
    }
    if e.kind != EntryType::File {
        if e.name != RECEIPT_NAME {
            let mut r = Refusal::new(
                Code::NotRegular,
                name,
                format!("a {}, not a regular file", e.kind.as_str()),
            );
            r.kind = Some(e.kind);
            out.push(r);
        }
        return;
    }
    regular_file(f, e, out);
}

/// A regular file's refusals: more than one link (another name, possibly
/// outside the stage, shares its data), another owner than us, another
/// file system than the stage's.
fn regular_file(f: &Facts, e: &Entry, out: &mut Vec<Refusal>) {
    let name = Some(e.name.as_str());
    if e.nlink != 1 {
        out.push(Refusal::new(
            Code::HardLinked,
            name,
            format!("{} links", e.nlink),
        ));
    }
    if e.uid != f.uid {
        out.push(Refusal::new(
            Code::ForeignUid,
            name,
            format!("belongs to uid {}", e.uid),
        ));
    }
    if e.dev != f.stage.dev {
        out.push(Refusal::new(
            Code::OtherFilesystem,
            name,
            "on another filesystem",
        ));
    }
}

/// The listing's own refusals: more entries than it keeps, and each entry
/// that changed while it was inventoried.
fn listing(f: &Facts, out: &mut Vec<Refusal>) {
    if f.truncated {
        out.push(Refusal::new(
            Code::TooManyEntries,
            None,
            "more entries than any declared upload",
        ));
    }
    for c in &f.changed {
        out.push(Refusal::new(
            Code::ConcurrentChange,
            Some(c),
            "changed while it was inventoried",
        ));
    }
}

/// At most this many refusals are listed; the rest are summed up in one.
pub const MAX_REFUSALS: usize = 64;

/// Keeps a decision within the audit line cap whatever the stage holds:
/// the first [`MAX_REFUSALS`] refusals, then one `more_refusals` naming how
/// many more and their codes (names are never repeated in a `detail`, and
/// each `name` is bounded by [`Refusal::new`]).
fn bound(mut out: Vec<Refusal>) -> Vec<Refusal> {
    if out.len() <= MAX_REFUSALS {
        return out;
    }
    let rest = out.split_off(MAX_REFUSALS);
    let mut codes: Vec<String> = rest.iter().map(|r| r.code.as_str()).collect();
    codes.sort();
    codes.dedup();
    out.push(Refusal::new(
        Code::MoreRefusals,
        None,
        format!(
            "{} more refusals not listed (codes: {})",
            rest.len(),
            codes.join(", ")
        ),
    ));
    out
}

/// The removal order of an accepted stage: the uploads by name, the
/// receipt, then the discard's own `.rea-discarding` (not in the listing:
/// it is created after the decision).
pub fn plan(f: &Facts) -> Vec<String> {
    let mut names: Vec<String> = f
        .entries
        .iter()
        .filter(|e| e.name != RECEIPT_NAME)
        .map(|e| e.name.clone())
        .collect();
    names.sort();
    names.push(RECEIPT_NAME.to_string());
    names.push(DISCARDING_NAME.to_string());
    names
}
