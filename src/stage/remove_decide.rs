//! The verified removal's decision (docs/stage.md, "One verified
//! removal"), a pure function over what was seen.
//!
//! `rea-stage remove` calls [`decide`] on the verdict of the audit log
//! (verify's checks, run through the stage's descriptor) and on its own
//! walk of that descriptor; `rea-audit verify` calls it again on the same
//! facts as the removal log recorded them, so a log claiming `removed` for
//! a stage the rule refuses does not verify. An empty answer is the only
//! "yes".

use serde::{Deserialize, Serialize};

use super::decide::DirId;
use super::{ARMED_NAME, RECEIPT_NAME};
use crate::inventory::Node;

/// Why a removal is refused or stopped; each its own code.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// DIR (or a directory above it) cannot be opened without following a symlink.
    StageUnreachable,
    /// The audit log's verdict for this stage is not `delete_allowed`:
    /// one refusal per reason of verify, its code in `name`.
    Verdict,
    /// The log's head is not `--expect-head`.
    HeadMismatch,
    /// The log has no receipt (it is not sealed).
    NotSealed,
    /// The log recorded no stage at close.
    NoStageRecorded,
    /// The stage opened is not the log's staging directory (dev, inode,
    /// owner or mode differ).
    IdentityMismatch,
    /// The stage's walk through the descriptor is not the inventory the
    /// log recorded at close (another digest).
    StageChanged,
    /// An entry is a mount point or on another filesystem.
    OtherFilesystem,
    /// More entries than one removal lists.
    TooManyEntries,
    /// Something changed between the walk and the removal.
    ConcurrentChange,
    IoError,
    /// Stands for the refusals past [`MAX_REFUSALS`].
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
    /// The entry it is about, or (for `verdict`) verify's reason code.
    pub name: Option<String>,
    pub detail: String,
}

impl Refusal {
    pub fn new(code: Code, name: Option<&str>, detail: impl Into<String>) -> Refusal {
        Refusal {
            code,
            name: name.map(crate::vocab::bounded),
            detail: crate::vocab::bounded(&detail.into()),
        }
    }
}

/// One reason of verify's verdict, as recorded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VerdictReason {
    pub code: String,
    pub detail: String,
}

/// The audit log's verdict, as the removal recorded it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogVerdict {
    /// `delete_allowed`, `retain`, `incomplete`, `tampered` or `error`.
    pub status: String,
    pub sealed: bool,
    pub run: Option<String>,
    pub head: Option<String>,
    /// The staging directory the log sealed, and its inventory digest at
    /// close (`null`: none recorded).
    pub staging: Option<DirId>,
    pub digest: Option<String>,
    pub reasons: Vec<VerdictReason>,
}

/// The stage's own walk through the descriptor, as recorded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Walked {
    /// The inventory digest (the watchdog's staging rule).
    pub digest: String,
    pub entries: u64,
    /// Entries on another device than the stage (at most a few named).
    pub other_dev: Vec<String>,
    /// More entries than [`MAX_NODES`].
    pub too_many: bool,
}

/// Everything the decision looks at.
#[derive(Clone, Debug)]
pub struct Facts {
    /// `--expect-head`.
    pub expect_head: String,
    pub verdict: LogVerdict,
    /// The stage opened, through its descriptor.
    pub stage: DirId,
    /// The walk, or why it failed.
    pub walked: Result<Walked, String>,
}

/// Entries one removal walks at most (each is one record in its log).
pub const MAX_NODES: usize = 50_000;
/// At most this many refusals are listed; the rest are summed up in one.
pub const MAX_REFUSALS: usize = 64;

/// Why the stage may not be removed; empty when it may.
pub fn decide(f: &Facts) -> Vec<Refusal> {
    let mut out = Vec::new();
    let v = &f.verdict;
    if v.status != "delete_allowed" {
        for r in &v.reasons {
            out.push(Refusal::new(Code::Verdict, Some(&r.code), r.detail.clone()));
        }
        if v.reasons.is_empty() {
            let d = format!("the audit log's verdict is {}", v.status);
            out.push(Refusal::new(Code::Verdict, Some(&v.status), d));
        }
    }
    if v.head.as_deref() != Some(f.expect_head.as_str()) {
        let d = format!(
            "the log's head is {}, --expect-head {}",
            v.head.as_deref().unwrap_or("(none)"),
            f.expect_head
        );
        out.push(Refusal::new(Code::HeadMismatch, None, d));
    }
    if !v.sealed {
        out.push(Refusal::new(
            Code::NotSealed,
            None,
            "the log has no receipt",
        ));
    }
    let (Some(id), Some(digest)) = (&v.staging, &v.digest) else {
        let d = "the log recorded no staging directory at close";
        out.push(Refusal::new(Code::NoStageRecorded, None, d));
        return bound(out);
    };
    if (id.dev, id.ino, id.uid, id.mode) != (f.stage.dev, f.stage.ino, f.stage.uid, f.stage.mode) {
        let d = format!(
            "the stage is dev {} inode {} uid {} mode {:o}; the log sealed dev {} inode {} uid {} mode {:o}",
            f.stage.dev, f.stage.ino, f.stage.uid, f.stage.mode, id.dev, id.ino, id.uid, id.mode
        );
        out.push(Refusal::new(Code::IdentityMismatch, None, d));
    }
    match &f.walked {
        Err(e) => out.push(Refusal::new(
            Code::IoError,
            None,
            format!("walking the stage: {e}"),
        )),
        Ok(w) => {
            if &w.digest != digest {
                let d = format!(
                    "the stage now inventories to {}, the log recorded {digest} at close",
                    w.digest
                );
                out.push(Refusal::new(Code::StageChanged, None, d));
            }
            for n in &w.other_dev {
                let d = "a mount point or an entry on another filesystem";
                out.push(Refusal::new(Code::OtherFilesystem, Some(n), d));
            }
            if w.too_many {
                let d = format!("more than {MAX_NODES} entries");
                out.push(Refusal::new(Code::TooManyEntries, None, d));
            }
        }
    }
    bound(out)
}

/// Keeps a decision within the line cap whatever the stage holds.
fn bound(mut out: Vec<Refusal>) -> Vec<Refusal> {
    if out.len() <= MAX_REFUSALS {
        return out;
    }
    let rest = out.split_off(MAX_REFUSALS);
    let d = format!("{} more refusals not listed", rest.len());
    out.push(Refusal::new(Code::MoreRefusals, None, d));
    out
}

/// How deep a node is (1: directly in the stage).
fn depth(n: &Node) -> usize {
    1 + n.raw.iter().filter(|&&b| b == b'/').count()
}

/// The removal order: deepest first (every directory's entries before the
/// directory), by path within a depth; the receipt and then the watchdog's
/// `.rea-exec-started` last, so the stage stays armed (no watchdog can
/// start on it) until the end. Indices into `nodes`.
pub fn plan(nodes: &[Node]) -> Vec<usize> {
    let last = |n: &Node| match n.raw.as_slice() {
        r if r == ARMED_NAME.as_bytes() => 2,
        r if r == RECEIPT_NAME.as_bytes() => 1,
        _ => 0,
    };
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&nodes[a], &nodes[b]);
        (last(x), std::cmp::Reverse(depth(x)), &x.raw).cmp(&(
            last(y),
            std::cmp::Reverse(depth(y)),
            &y.raw,
        ))
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "ab";

    fn id() -> DirId {
        DirId {
            dev: 1,
            ino: 2,
            uid: 3,
            mode: 0o40700,
        }
    }

    fn facts() -> Facts {
        Facts {
            expect_head: HEAD.into(),
            verdict: LogVerdict {
                status: "delete_allowed".into(),
                sealed: true,
                run: Some("run-1".into()),
                head: Some(HEAD.into()),
                staging: Some(id()),
                digest: Some("d".into()),
                reasons: Vec::new(),
            },
            stage: id(),
            walked: Ok(Walked {
                digest: "d".into(),
                entries: 3,
                other_dev: Vec::new(),
                too_many: false,
            }),
        }
    }

    fn codes(f: &Facts) -> Vec<Code> {
        decide(f).into_iter().map(|r| r.code).collect()
    }

    #[test]
    fn the_stage_the_log_allows_is_accepted() {
        assert!(decide(&facts()).is_empty());
    }

    #[test]
    fn each_fact_that_breaks_the_rule_has_its_own_code() {
        let mut f = facts();
        f.expect_head = "cd".into();
        assert_eq!(codes(&f), [Code::HeadMismatch]);
        let mut f = facts();
        f.verdict.status = "retain".into();
        f.verdict.reasons.push(VerdictReason {
            code: "root_lost".into(),
            detail: "x".into(),
        });
        let r = decide(&f);
        assert_eq!(
            (r[0].code, r[0].name.as_deref()),
            (Code::Verdict, Some("root_lost"))
        );
        let mut f = facts();
        f.verdict.sealed = false;
        assert_eq!(codes(&f), [Code::NotSealed]);
        let mut f = facts();
        f.stage.ino = 9;
        assert_eq!(codes(&f), [Code::IdentityMismatch]);
        let mut f = facts();
        f.walked = Ok(Walked {
            digest: "e".into(),
            entries: 4,
            other_dev: vec!["mnt".into()],
            too_many: true,
        });
        assert_eq!(
            codes(&f),
            [
                Code::StageChanged,
                Code::OtherFilesystem,
                Code::TooManyEntries
            ]
        );
        let mut f = facts();
        f.walked = Err("EIO".into());
        assert_eq!(codes(&f), [Code::IoError]);
        let mut f = facts();
        f.verdict.staging = None;
        assert_eq!(codes(&f), [Code::NoStageRecorded]);
    }

    #[test]
    fn the_plan_is_deepest_first_with_the_markers_last() {
        let n = |p: &str| Node {
            raw: p.as_bytes().to_vec(),
            dev: 1,
            ino: 1,
            mode: 0,
        };
        let nodes = vec![
            n(ARMED_NAME),
            n(RECEIPT_NAME),
            n("lib"),
            n("lib/a"),
            n("lib/a/x.so"),
            n("runtime.bin"),
            n("z"),
        ];
        let names: Vec<String> = plan(&nodes)
            .into_iter()
            .map(|i| String::from_utf8(nodes[i].raw.clone()).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "lib/a/x.so",
                "lib/a",
                "lib",
                "runtime.bin",
                "z",
                RECEIPT_NAME,
                ARMED_NAME
            ]
        );
    }
}
