//! The checks of the stage's records as the replay reads them: one
//! baseline, before anything was spawned, of the stage the run started
//! with; one `staging_changed`, after the inventory at close, exactly when
//! the digests differ, naming the two digests it compared.
//!
//! Whether the stage *changed* is a verdict (`stage_changed_during_run`,
//! docs/verdict.md), not tampering; here the records must agree with each
//! other.

use super::Replay;
use crate::audit::verdict::{Code, Reason};
use crate::inventory::same_dir;
use crate::kinds::watchdog::{
    Receipt, StagingBaseline, StagingChanged, StartRefusal, StartRefused,
};

impl Replay {
    /// `staging_baseline`: once, for a run with a stage, of that stage,
    /// before the first `job_spawned`.
    pub(super) fn staging_baseline(&mut self, b: StagingBaseline) {
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
            Some(_) => None,
        };
        self.push_problem(problem.map(str::to_string));
        self.baseline.get_or_insert(b);
    }

    /// `stage_armed`: once, right after the start records, and only in a
    /// run with a stage.
    pub(super) fn stage_armed(&mut self, path: &str) {
        let staged = self.start.as_ref().is_some_and(|s| s.staging.is_some());
        if self.seen != self.group.first_records() + 1 || !staged {
            self.push_problem(Some(format!(
                "stage_armed ({path}) is not the first record after the start records of a run with a staging directory"
            )));
        }
    }

    /// `start_refused`: before anything was spawned, in a run with a stage
    /// (every refusal after the log is open is about the stage), and last
    /// (checked as each later record arrives).
    pub(super) fn start_refused(&mut self, r: StartRefused) {
        let staged = self.start.as_ref().is_some_and(|s| s.staging.is_some());
        let problem = if !staged {
            Some("a start_refused in a run without a staging directory")
        } else if self.counts.jobs > 0 || self.baseline.is_some() {
            Some("a start_refused after the stage's baseline or a job_spawned")
        } else {
            None
        };
        self.push_problem(problem.map(str::to_string));
        self.refused.get_or_insert(r);
    }

    /// The reasons of a log that ends in `start_refused` (it has no
    /// receipt to finish with): what did not add up, then the refusal.
    pub fn finish_refused(&mut self) -> Vec<Reason> {
        let Some(r) = self.refused.clone() else {
            return Vec::new();
        };
        let mut out = std::mem::take(&mut self.out);
        if !self.second_is_root_bound {
            out.push(Reason::new(
                Code::ReplayMismatch,
                None,
                "the second record is not root_bound: the root was never bound",
            ));
        }
        let code = match r.code {
            StartRefusal::StageNotAsUploaded => Code::StageNotAsUploaded,
            StartRefusal::StageUnreadable => Code::StageUnreadable,
            StartRefusal::StageRefused => Code::StageRefused,
        };
        out.push(Reason::new(
            code,
            None,
            format!("the start was refused, nothing was launched: {}", r.detail),
        ));
        out
    }

    /// Why the start was refused, when the log says it was.
    pub fn refused(&self) -> Option<&StartRefused> {
        self.refused.as_ref()
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
    pub fn baseline(&self) -> Option<&StagingBaseline> {
        self.baseline.as_ref()
    }

    /// The entries named as changed during the run, if any were.
    pub fn stage_changed(&self) -> Option<&StagingChanged> {
        self.changed.as_ref()
    }
}
