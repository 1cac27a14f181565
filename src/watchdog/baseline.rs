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
//! Both walks hash every byte of the stage, so their deadline grows with
//! its size ([`hash_deadline`]); a stage that does not answer refuses the
//! start (`stage_unreadable`, nothing launched), as the identity check does.

use std::path::Path;
use std::time::Duration;

use super::config::Config;
use crate::bounded::{self, Failure, STAGE_DEADLINE};
use crate::inventory::{self, listing, Listing};
use crate::kinds::watchdog::{DirIdentity, Event, StagingInventoried};

/// The slowest hashing rate a deadline allows for (a loaded machine, a
/// slow disk): 16 MiB/s, on top of [`STAGE_DEADLINE`].
const SLOWEST_BYTES_PER_SEC: u64 = 16 << 20;

/// How long walking and hashing a stage of `bytes` may take before it is
/// called unreadable.
pub fn hash_deadline(bytes: u64) -> Duration {
    STAGE_DEADLINE + Duration::from_secs(bytes / SLOWEST_BYTES_PER_SEC)
}

/// What close compares the stage with.
pub struct Baseline {
    digest: String,
    bytes: u64,
    listing: Listing,
}

/// The stage an action was given: its identity at start and, once taken,
/// its baseline.
pub struct Stage {
    pub start: Option<DirIdentity>,
    pub baseline: Option<Baseline>,
}

impl Stage {
    pub fn new(start: Option<DirIdentity>) -> Stage {
        Stage {
            start,
            baseline: None,
        }
    }

    /// The step `Ledger::start` takes after the first records: arm the
    /// stage (`arm.rs`), then take its baseline, so that the marker arming
    /// made is in it. The records to write, in order.
    pub fn arm_then_baseline<'a>(
        &'a mut self,
        cfg: &'a Config,
    ) -> impl FnOnce() -> Result<Vec<Event>, String> + 'a {
        move || {
            let mut out: Vec<Event> = super::arm::arm_stage(cfg, self.start.as_ref())?
                .into_iter()
                .collect();
            if let (Some(path), Some(start)) = (cfg.staging.as_deref(), &self.start) {
                let (seen, baseline) = take(path, start)?;
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

/// Walks the stage twice in helpers with deadlines: once for its size
/// (names and sizes only), then hashing everything within the deadline
/// that size allows. Refuses a stage that was replaced since the start.
fn take(path: &Path, start: &DirIdentity) -> Result<(StagingInventoried, Baseline), String> {
    let shown = path.display();
    let refuse = |e: Failure| match e {
        Failure::Blocked(b) => format!("stage_unreadable: {b}"),
        Failure::Failed(e) => format!(
            "staging directory {shown}: baseline: {e} (refusing to start; nothing was launched)"
        ),
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
    let (seen, listing) = bounded::run(&what, &key, hash_deadline(size), &[], || {
        inventory::staging_listed(path).map_err(|e| e.to_string())
    })
    .map_err(refuse)?;
    if !inventory::same_dir(&seen.identity, start) {
        return Err(refuse(Failure::Failed(
            "it was replaced since the start".to_string(),
        )));
    }
    let baseline = Baseline {
        digest: seen.inventory.digest.clone(),
        bytes: seen.inventory.bytes,
        listing,
    };
    Ok((seen, baseline))
}
