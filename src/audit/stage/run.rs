//! The verdict's rules about the stage over the run (docs/stage.md,
//! "Nothing changes during the run" and "The expected content"): the stage
//! at close is the one the run started with and its baseline, and the
//! stage at start is what the controller uploaded. Each returns the
//! reasons it finds, in a fixed order; `verify` adds them to the verdict.

use crate::audit::replay::Replay;
use crate::audit::summary;
use crate::audit::verdict::Code;
use crate::inventory;
use crate::kinds::watchdog::Receipt;

/// `--expect-stage-digest`: the stage the run started with holds what the
/// controller uploaded (`want`); nothing to say without it.
pub fn as_uploaded(replay: &Replay, want: Option<&str>) -> Option<(Code, String)> {
    let want = want?;
    let detail = match replay.baseline().map(|b| b.content.as_deref()) {
        Some(Some(c)) if c == want => return None,
        Some(Some(c)) => format!("the stage at start has content digest {c}, expected {want}"),
        Some(None) => {
            format!("the stage at start had too many entries for a content digest, expected {want}")
        }
        None => format!("the log has no baseline of a stage, expected content digest {want}"),
    };
    Some((Code::StageDigestMismatch, detail))
}

/// The stage at close against the stage at start: the same directory
/// (`staging_mismatch`), a baseline taken (`stage_baseline_missing`), and
/// nothing changed since (`stage_changed_during_run`, one reason per entry
/// the log names). Empty for a run without a stage, and for a stage that
/// could not be read at close (`stage_unreadable` says so already).
pub fn during_run(replay: &Replay, rc: &Receipt) -> Vec<(Code, String)> {
    let mut out = Vec::new();
    let start_staging = replay.start().and_then(|s| s.staging.as_ref());
    let (Some(at_start), Some(sealed)) = (start_staging, &rc.staging) else {
        return out;
    };
    if !inventory::same_dir(at_start, &sealed.identity) {
        out.push((
            Code::StagingMismatch,
            "the staging directory was replaced during the action (identity at close differs from start)".into(),
        ));
    }
    if sealed.unreadable.is_some() {
        return out;
    }
    let Some(baseline) = replay.baseline() else {
        out.push((
            Code::StageBaselineMissing,
            "the log has no baseline of the stage taken at start: nothing shows the stage did not change during the run".into(),
        ));
        return out;
    };
    if baseline.inventory.digest == sealed.inventory.digest {
        return out;
    }
    let code = Code::StageChangedDuringRun;
    let Some(c) = replay.stage_changed() else {
        out.push((
            code,
            "the stage at close is not its baseline at start".into(),
        ));
        return out;
    };
    for e in &c.changes {
        out.push((
            code,
            format!("during the run: {}", summary::stage_change(e)),
        ));
    }
    if c.more > 0 {
        out.push((
            code,
            format!("during the run: {} more entries differ", c.more),
        ));
    }
    if let Some(why) = &c.unnamed {
        out.push((
            code,
            format!("the stage at close is not its baseline at start ({why})"),
        ));
    }
    out
}
