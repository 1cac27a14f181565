//! The second half of verifying a recovery log: the records' order, the
//! decision run again on the recorded facts ([`crate::recover::rule`]),
//! and the stage against `--staging` (the rules of docs/verdict.md for a
//! watchdog's log: the stage LOG recorded, inventoried, and unchanged).

use std::path::Path;

use super::lines::{Check, FindingCode, Judged, Problem};
use crate::audit::stage::held as stage_held;
use crate::audit::verdict::Status;
use crate::holders::HolderScan;
use crate::inventory;
use crate::kinds::recovery::{
    Code, Outcome, RecoveryChecked, RecoveryDecided, RecoveryEvent, RecoveryGroupRemoved,
    RecoveryKilled, RecoveryMembers, RecoveryScan, RecoveryStaging, RecoveryStarted,
};
use crate::kinds::recovery_rule::{failures, gathered, member_refusal, refusal};
use crate::kinds::watchdog::{DirIdentity, StagingInventoried};

/// Where each kind belongs (strictly increasing through the log).
fn rank(ev: &RecoveryEvent) -> u8 {
    match ev {
        RecoveryEvent::Started(_) => 0,
        RecoveryEvent::Checked(_) => 1,
        RecoveryEvent::Members(_) => 2,
        RecoveryEvent::Killed(_) => 3,
        RecoveryEvent::GroupRemoved(_) => 4,
        RecoveryEvent::Staging(_) => 5,
        RecoveryEvent::Scan(_) => 6,
        RecoveryEvent::Decided(_) => 7,
    }
}

#[derive(Default)]
struct Records {
    started: Option<RecoveryStarted>,
    checked: Option<RecoveryChecked>,
    members: Option<RecoveryMembers>,
    killed: Option<RecoveryKilled>,
    removed: Option<RecoveryGroupRemoved>,
    staging: Option<RecoveryStaging>,
    scan: Option<RecoveryScan>,
    decided: Option<(u64, RecoveryDecided)>,
}

fn collect(c: &mut Check) -> Records {
    let mut r = Records::default();
    let mut last: Option<u8> = None;
    for (n, ev) in std::mem::take(&mut c.events) {
        if let Some((d, _)) = &r.decided {
            let detail = format!("{} after the decision on line {d}", ev.kind());
            c.push(Problem::RecordAfterDecision, Some(n), detail);
            continue;
        }
        let k = rank(&ev);
        let placed = match k {
            0 => n == 1,
            1 => n == 2,
            _ => n > 2,
        };
        if !placed || last.is_some_and(|l| k <= l) {
            let d = format!(
                "{} out of the order recover writes its records in",
                ev.kind()
            );
            c.push(Problem::OutOfOrder, Some(n), d);
        }
        last = Some(last.map_or(k, |l| l.max(k)));
        match ev {
            RecoveryEvent::Started(x) => r.started = Some(x),
            RecoveryEvent::Checked(x) => r.checked = Some(x),
            RecoveryEvent::Members(x) => r.members = Some(x),
            RecoveryEvent::Killed(x) => r.killed = Some(x),
            RecoveryEvent::GroupRemoved(x) => r.removed = Some(x),
            RecoveryEvent::Staging(x) => r.staging = Some(x),
            RecoveryEvent::Scan(x) => r.scan = Some(x),
            RecoveryEvent::Decided(x) => r.decided = Some((n, x)),
        }
    }
    r
}

/// Checks order and decision; returns what the verdict shows.
pub(crate) fn judge(c: &mut Check, staging: Option<&Path>) -> Judged {
    let r = collect(c);
    let mut j = Judged::default();
    if let Some(s) = &r.started {
        j.recovered_log = Some(s.log.clone());
        j.recovered_run = s.log_run.clone();
        j.recovered_intact_seq = s.log_intact_seq;
        j.recovered_intact_head = s.log_intact_head.clone();
    }
    j.staging = r.staging.as_ref().and_then(|s| s.staging.clone());
    let Some((dline, d)) = r.decided.clone() else {
        if c.chain.lines() > 0 {
            let detail = "no recovery_decided record: the recovery did not finish";
            c.push(Problem::NoDecision, None, detail);
        }
        return j;
    };
    j.sealed = true;
    j.outcome = Some(d.outcome);
    let (Some(s), Some(ch)) = (&r.started, &r.checked) else {
        let detail = "a decision without recovery_started and recovery_checked before it";
        c.push(Problem::OutOfOrder, Some(dline), detail);
        return j;
    };
    let line = Some(dline);
    let (probe, look, census) = gathered(s, ch);
    if (probe, look, census)
        != (
            ch.watchdog.is_some(),
            ch.group.is_some(),
            ch.recoverer_in_group.is_some(),
        )
    {
        let detail = "recovery_checked holds other facts than a recovery gathers from this log";
        c.push(Problem::DecisionMismatch, Some(2), detail);
    }
    let acts = r.members.is_some()
        || r.killed.is_some()
        || r.removed.is_some()
        || r.staging.is_some()
        || r.scan.is_some();
    let codes: Vec<Code> = d.reasons.iter().map(|x| x.code).collect();
    match refusal(s, ch) {
        Some(code) => {
            if d.outcome != Outcome::Refused || codes != [code] {
                let detail = format!(
                    "the recorded facts give the refusal {}; the decision says {:?} {codes:?}",
                    code.as_str(),
                    d.outcome
                );
                c.push(Problem::DecisionMismatch, line, detail);
            }
            if acts {
                let detail = "a refused recovery records no act, yet this log does";
                c.push(Problem::OutOfOrder, line, detail);
            }
        }
        None => match r.members.as_ref().and_then(|m| member_refusal(s, m)) {
            Some(code) => refused_after_census(c, s, &r, &d, code, line),
            None => ran(c, s, &r, &d, line),
        },
    }
    for x in &d.reasons {
        let class = Status::Retain;
        c.push_code(FindingCode::Recovery(x.code), class, line, x.detail.clone());
    }
    if d.outcome == Outcome::Recovered {
        let rule = StageRule {
            recorded: s.staging_recorded.as_ref(),
            inventoried: r
                .staging
                .as_ref()
                .map(|x| (x.staging.as_ref(), x.error.as_deref())),
            given: staging,
        };
        let (found, holders) = compare_stage(&rule);
        for (code, detail) in found {
            c.push(code, None, detail);
        }
        j.holders = holders;
    }
    j
}

/// A recovery the frozen group's census refused (not frozen, members
/// not checkable, or a member not the action's): the decision must be
/// that refusal, and nothing may follow the census but the decision.
fn refused_after_census(
    c: &mut Check,
    s: &RecoveryStarted,
    r: &Records,
    d: &RecoveryDecided,
    code: Code,
    line: Option<u64>,
) {
    let codes: Vec<Code> = d.reasons.iter().map(|x| x.code).collect();
    if d.outcome != Outcome::Refused || codes != [code] {
        let detail = format!(
            "the recorded census gives the refusal {}; the decision says {:?} {codes:?}",
            code.as_str(),
            d.outcome
        );
        c.push(Problem::DecisionMismatch, line, detail);
    }
    if r.members.as_ref().map(|m| &m.group) != s.group() {
        let detail = "the group counted is not the one LOG recorded";
        c.push(Problem::DecisionMismatch, line, detail);
    }
    if r.killed.is_some() || r.removed.is_some() || r.staging.is_some() || r.scan.is_some() {
        let detail = "a recovery refused by its census records no kill, yet this log does";
        c.push(Problem::OutOfOrder, line, detail);
    }
}

/// A recovery the facts let run: every act recorded, the decision the
/// one the recorded results give.
fn ran(c: &mut Check, s: &RecoveryStarted, r: &Records, d: &RecoveryDecided, line: Option<u64>) {
    let mismatch = |c: &mut Check, detail: String| c.push(Problem::DecisionMismatch, line, detail);
    if d.outcome == Outcome::Refused {
        mismatch(c, "refused, but the recorded facts give no refusal".into());
    }
    let (Some(m), Some(k), Some(rm), Some(sc)) = (&r.members, &r.killed, &r.removed, &r.scan)
    else {
        let detail = "a recovery that ran records its members, the kill, the removal and the scan";
        c.push(Problem::OutOfOrder, line, detail);
        return;
    };
    if s.staging.is_some() != r.staging.is_some()
        || r.staging
            .as_ref()
            .is_some_and(|x| Some(&x.path) != s.staging.as_ref())
    {
        let detail = "the stage inventoried is not the one recovery_started names";
        c.push(Problem::OutOfOrder, line, detail);
    }
    if Some(&m.group) != s.group() || Some(&rm.group) != s.group() {
        mismatch(c, "the group acted on is not the one LOG recorded".into());
    }
    if rm.removed && k.populated != Some(false) {
        mismatch(c, "the group is recorded removed while populated".into());
    }
    let want = failures(k, rm, sc);
    let got: Vec<Code> = d.reasons.iter().map(|x| x.code).collect();
    if want != got || (d.outcome == Outcome::Recovered) != want.is_empty() {
        let w: Vec<String> = want.iter().map(|x| x.as_str()).collect();
        mismatch(
            c,
            format!(
                "the recorded results give {:?} [{}]; the decision says {:?}",
                if want.is_empty() {
                    "recovered"
                } else {
                    "failed"
                },
                w.join(", "),
                d.outcome
            ),
        );
    }
}

/// The stage as verify sees it for a recovery log.
struct StageRule<'a> {
    /// LOG's `run_started` stage.
    recorded: Option<&'a DirIdentity>,
    /// The recovery's `recovery_staging`: its inventory, or why none.
    inventoried: Option<(Option<&'a StagingInventoried>, Option<&'a str>)>,
    /// `--staging`.
    given: Option<&'a Path>,
}

/// The verdict's stage rules (docs/verdict.md), for a recovery: the stage
/// inventoried must be the one LOG recorded; `--staging` must be it, unchanged
/// since; a stage inventoried and not checked is not cleared. The stage given,
/// when it is the one inventoried (changed or not), is scanned for holders.
fn compare_stage(rule: &StageRule<'_>) -> (Vec<(Problem, String)>, Option<HolderScan>) {
    let mut holders = None;
    let mut out = Vec::new();
    let inv = rule.inventoried.and_then(|(st, _)| st);
    if let Some(id) = rule.recorded {
        match rule.inventoried {
            None => out.push((
                Problem::StagingMismatch,
                format!("LOG recorded the stage {}; the recovery did not inventory it", id.path),
            )),
            Some((None, e)) => out.push((
                Problem::StagingMismatch,
                format!("the stage could not be inventoried: {}", e.unwrap_or("?")),
            )),
            Some((Some(st), _)) if !inventory::same_dir(id, &st.identity) => out.push((
                Problem::StagingMismatch,
                format!(
                    "the stage inventoried ({}) is not the one LOG recorded ({}): dev/ino/uid/mode differ",
                    st.identity.path, id.path
                ),
            )),
            _ => {}
        }
    }
    match (rule.given, inv) {
        (Some(p), _) if rule.recorded.is_none() => out.push((
            Problem::StagingNotRecorded,
            format!("--staging {} given, but LOG recorded no stage", p.display()),
        )),
        (Some(p), Some(sealed)) => match stage_held::look(p, Some(&sealed.identity), None) {
            Ok(seen) if !inventory::same_dir(&seen.now.identity, &sealed.identity) => out.push((
                Problem::StagingMismatch,
                format!(
                    "{} is not the stage the recovery inventoried (dev/ino/uid/mode differ)",
                    p.display()
                ),
            )),
            Ok(seen) => {
                let now = seen.now;
                if now.inventory != sealed.inventory || now.special != sealed.special {
                    out.push((
                        Problem::StagingMismatch,
                        format!(
                            "{} changed since the recovery (inventory differs)",
                            p.display()
                        ),
                    ));
                }
                if let Some(scan) = seen.scan {
                    let (found, scan) = stage_held::found(scan);
                    match found {
                        Ok(found) => out.extend(found.into_iter().map(|f| (Problem::StageHeld, f))),
                        Err(e) => out.push((Problem::HoldersNotScanned, e.to_string())),
                    }
                    holders = scan;
                }
            }
            Err(crate::bounded::Failure::Blocked(b)) => {
                out.push((Problem::StageUnreadable, b.to_string()))
            }
            Err(crate::bounded::Failure::Failed(e)) => out.push((
                Problem::StagingMismatch,
                format!("cannot inventory {}: {e}", p.display()),
            )),
        },
        (Some(p), None) => {
            if out.is_empty() {
                out.push((
                    Problem::StagingMismatch,
                    format!(
                        "--staging {}: the recovery has no inventory to compare",
                        p.display()
                    ),
                ));
            }
        }
        (None, Some(_)) => out.push((
            Problem::StagingNotChecked,
            "the recovery inventoried a stage: deletion is allowed only for that exact, \
             unchanged stage; pass --staging DIR"
                .into(),
        )),
        (None, None) => {}
    }
    (out, holders)
}
