//! The stage's baseline (docs/stage.md, "Nothing changes during the run").
//!
//! Right after arming and before anything is spawned, the watchdog walks
//! the stage with the same walk close uses (types, modes, owners, sizes,
//! link counts, inodes, every regular file's SHA-256) and records it as
//! `staging_baseline`. At close the stage is walked again; when the digests
//! differ, `staging_changed` names each entry added, removed, replaced or
//! changed, and `verify` keeps the stage (`stage_changed_during_run`). The
//! verdict rests on the two recorded digests, never on this process's
//! memory: the listing kept here only names the entries.
//!
//! Where the stage's before-transfer receipt pins hashes (`rea-stage begin
//! --file NAME=SHA256`), the baseline must match them exactly or the start
//! is refused (`stage_not_as_uploaded`, recorded, nothing launched); the
//! baseline also records the content digest `verify --expect-stage-digest`
//! compares (docs/stage.md, "The expected content").
//!
//! Both walks hash every byte of the stage, so their deadline grows with
//! its size ([`hash_deadline`]); a stage that does not answer refuses the
//! start (`stage_unreadable`, nothing launched), as the identity check does.

use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::config::Config;
use super::private::{locate, Mine};
use crate::bounded::{self, hash_deadline, Failure, WorkError, STAGE_DEADLINE};
use crate::inventory::{self, listing, Listing};
use crate::kinds::watchdog::{
    DirIdentity, Event, PrivateState, StagingBaseline, StagingInventoried, StartRefusal,
    StartRefused,
};
use crate::stage::receipt::{self, BeforeTransfer, MAX_RECEIPT};
use crate::stage::{pinned, RECEIPT_NAME};

/// What close compares the stage with.
pub struct Baseline {
    digest: String,
    bytes: u64,
    listing: Listing,
}

/// The stage an action was given: its identity at start and, once taken,
/// its baseline and the watchdog's own files in it.
pub struct Stage {
    pub start: Option<DirIdentity>,
    pub baseline: Option<Baseline>,
    /// What the watchdog made (state directory, log), to find in the stage.
    mine: Mine,
    /// The watchdog's own files in the stage, found before the baseline
    /// (docs/stage.md, "The watchdog's own place"); left out of its walks.
    pub private: Option<PrivateState>,
}

impl Stage {
    pub fn new(start: Option<DirIdentity>, mine: Mine) -> Stage {
        Stage {
            start,
            baseline: None,
            mine,
            private: None,
        }
    }

    /// Whether the state directory is in the stage (close removes it).
    pub fn holds_state_dir(&self) -> bool {
        self.private.as_ref().is_some_and(|p| p.state_dir.is_some())
    }

    /// The step `Ledger::start` takes after the first records: arm the
    /// stage (`arm.rs`), then take its baseline, so that the marker arming
    /// made is in it. The records to write, in order; a refusal is
    /// recorded by the ledger as the log's last record.
    pub fn arm_then_baseline<'a>(
        &'a mut self,
        cfg: &'a Config,
    ) -> impl FnOnce() -> Result<Vec<Event>, StartRefused> + 'a {
        move || {
            let armed =
                super::arm::arm_stage(cfg, self.start.as_ref()).map_err(|e| StartRefused {
                    code: StartRefusal::StageRefused,
                    detail: e.to_string(),
                })?;
            let mut out: Vec<Event> = armed.into_iter().collect();
            if let (Some(path), Some(start)) = (cfg.staging.as_deref(), &self.start) {
                self.private = locate(path, &self.mine).map_err(|e| StartRefused {
                    code: StartRefusal::StageRefused,
                    detail: format!(
                        "staging directory {}: {e} (refusing to start; nothing was launched)",
                        path.display()
                    ),
                })?;
                let (seen, baseline) = take(path, start, self.private.as_ref())?;
                out.push(Event::StagingBaseline(seen));
                self.baseline = Some(baseline);
            }
            Ok(out)
        }
    }

    /// The deadline of the walk at close: room for the baseline's bytes.
    pub fn close_deadline(&self) -> Duration {
        hash_deadline(self.baseline.as_ref().map_or(0, |b| b.bytes))
    }

    /// `staging_changed` when the stage at close (`seen`, listed as
    /// `listing`) is not its baseline; `None` when it is, or when there is
    /// no baseline to compare with.
    pub fn changed(&self, seen: &StagingInventoried, listing: &Listing) -> Option<Event> {
        let b = self.baseline.as_ref()?;
        if seen.unreadable.is_some() || seen.inventory.digest == b.digest {
            return None;
        }
        let c = listing::compare(&b.listing, &b.digest, listing, &seen.inventory.digest);
        Some(Event::StagingChanged(c))
    }
}

/// What the hashing walk hands back across its helper: the stage, its
/// listing, and its before-transfer receipt if it has one.
type Seen = (StagingInventoried, Listing, Option<BeforeTransfer>);

/// Walks the stage twice in helpers with deadlines: once for its size
/// (names and sizes only), then hashing everything within the deadline
/// that size allows, reading the receipt in the same helper. Refuses a
/// stage that was replaced since the start, a receipt of another stage,
/// and a stage that is not what the receipt pins (docs/stage.md, "The
/// expected content").
fn take(
    path: &Path,
    start: &DirIdentity,
    private: Option<&PrivateState>,
) -> Result<(StagingBaseline, Baseline), StartRefused> {
    let shown = path.display();
    let refused = |code, e: &dyn std::fmt::Display| StartRefused {
        code,
        detail: format!(
            "staging directory {shown}: baseline: {e} (refusing to start; nothing was launched)"
        ),
    };
    let refuse = |e: Failure| match e {
        Failure::Blocked(b) => refused(StartRefusal::StageUnreadable, &b),
        Failure::Failed(e) => refused(StartRefusal::StageRefused, &e),
    };
    let what = format!("the stage {shown}");
    let key = path.to_string_lossy();
    let size = bounded::run(&what, &key, STAGE_DEADLINE, &[], || {
        let fd = inventory::open_dir(path).map_err(|e| e.to_string())?;
        let (inv, _) =
            inventory::inventory_fd(std::os::fd::AsFd::as_fd(&fd), 0).map_err(|e| e.to_string())?;
        Ok(inv.bytes)
    })
    .map_err(refuse)?;
    let (seen, listing, receipt): Seen =
        bounded::run(&what, &key, hash_deadline(size), &[], || {
            let (seen, listing) =
                inventory::staging_listed(path, private).map_err(|e| e.to_string())?;
            let receipt = read_receipt(path)?;
            Ok((seen, listing, receipt))
        })
        .map_err(refuse)?;
    if !inventory::same_dir(&seen.identity, start) {
        return Err(refused(
            StartRefusal::StageRefused,
            &"it was replaced since the start",
        ));
    }
    let mut pinned = 0;
    if let Some(r) = &receipt {
        if (r.stage.dev, r.stage.ino) != (start.dev, start.ino) {
            return Err(refused(
                StartRefusal::StageRefused,
                &"its before-transfer receipt names another directory",
            ));
        }
        let found = pinned::mismatches(r, &listing);
        if !found.is_empty() {
            return Err(refused(
                StartRefusal::StageNotAsUploaded,
                &pinned::describe(&found),
            ));
        }
        pinned = r.sha256.len() as u64;
    }
    let record = StagingBaseline::new(seen, pinned::uploaded_digest(&listing), pinned);
    let baseline = Baseline {
        digest: record.inventory.digest.clone(),
        bytes: record.inventory.bytes,
        listing,
    };
    Ok((record, baseline))
}

/// The stage's before-transfer receipt, parsed strictly, read through
/// the stage without following a link; `None` when there is none.
fn read_receipt(path: &Path) -> Result<Option<BeforeTransfer>, WorkError> {
    use std::io::Read;
    let dir = inventory::open_dir(path)?;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match openat(&dir, RECEIPT_NAME, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(format!("opening {RECEIPT_NAME}: {e}").into()),
    };
    let f = std::fs::File::from(fd);
    let meta = f
        .metadata()
        .map_err(|e| WorkError(format!("{RECEIPT_NAME}: {e}")))?;
    if !meta.is_file() {
        return Err(format!("{RECEIPT_NAME} is not a regular file").into());
    }
    let mut bytes = Vec::new();
    f.take(MAX_RECEIPT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| WorkError(format!("reading {RECEIPT_NAME}: {e}")))?;
    if bytes.len() as u64 > MAX_RECEIPT {
        return Err(format!("{RECEIPT_NAME} is over {MAX_RECEIPT} bytes").into());
    }
    receipt::parse(&bytes)
        .map(Some)
        .map_err(|e| WorkError(format!("{RECEIPT_NAME}: {e}")))
}
