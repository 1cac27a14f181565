//! The checks of the stage's records as the replay reads them: one
//! baseline, before anything was spawned, of the stage the run started
//! with; one `staging_changed`, after the inventory at close, exactly when
//! the digests differ, naming the two digests it compared.
//!
//! Whether the stage *changed* is a verdict (`stage_changed_during_run`,
//! docs/verdict.md), not tampering; here the records must agree with each
//! other.

use super::Replay;
use crate::inventory::same_dir;
use crate::kinds::watchdog::{Receipt, StagingChanged, StagingInventoried};

impl Replay {
    /// `staging_baseline`: once, for a run with a stage, of that stage,
    /// before the first `job_spawned`.
    pub(super) fn staging_baseline(&mut self, b: StagingInventoried) {
        let start = self.start.as_ref().and_then(|s| s.staging.as_ref());
        let problem = match start {
            _ if self.baseline.is_some() => Some("a second staging_baseline"),
            None => Some("a staging_baseline in a run without a staging directory"),
            Some(s) if !same_dir(s, &b.identity) => {
                Some("the staging_baseline is not of the stage the run started with")
            }
            Some(_) if self.counts.jobs > 0 => {
                Some("the staging_baseline comes after a job_spawned")
            }
            Some(_) if b.unreadable.is_some() => Some("a staging_baseline recorded unreadable"),
            Some(_) => None,
        };
        self.push_problem(problem.map(str::to_string));
        self.baseline.get_or_insert(b);
    }

    /// `staging_changed`: once, right after the inventory at close, naming
    /// the baseline's digest and that inventory's, which differ.
    pub(super) fn staging_changed(&mut self, c: StagingChanged) {
        let problem = match (&self.baseline, &self.last_staging) {
            _ if self.changed.is_some() => Some("a second staging_changed"),
            (None, _) => Some("a staging_changed with no staging_baseline"),
            (_, None) => Some("a staging_changed before staging_inventoried"),
            (Some(b), Some(now))
                if c.baseline != b.inventory.digest || c.now != now.inventory.digest =>
            {
                Some("staging_changed names digests other than the baseline's and the inventory's at close")
            }
            _ if c.baseline == c.now => Some("a staging_changed whose two digests are equal"),
            _ => None,
        };
        self.push_problem(problem.map(str::to_string));
        self.changed.get_or_insert(c);
    }

    /// At the receipt: a stage read at close whose digest is not its
    /// baseline's has its `staging_changed`.
    pub(super) fn stage_mismatches(&self, receipt: &Receipt) -> Option<String> {
        let (b, now) = (self.baseline.as_ref()?, receipt.staging.as_ref()?);
        let differs = now.unreadable.is_none() && now.inventory.digest != b.inventory.digest;
        (differs && self.changed.is_none()).then(|| {
            "the stage at close differs from its baseline, but no staging_changed names it".into()
        })
    }

    /// The baseline, if the run recorded one.
    pub fn baseline(&self) -> Option<&StagingInventoried> {
        self.baseline.as_ref()
    }

    /// The entries named as changed during the run, if any were.
    pub fn stage_changed(&self) -> Option<&StagingChanged> {
        self.changed.as_ref()
    }
}
