//! The containment half of `rea-audit reconcile` (docs/containment.md): when the log's
//! `containment` record names the action's cgroup, the group is looked up
//! again by its recorded path and inode and its members are listed with
//! pid, start time, comm and whether they run ([`crate::contain::census`],
//! read-only). Each live member is checked against the run as `recover`
//! checks it ([`crate::contain::proof`]): one that started before the
//! run's watchdog or lacks the run's `REA_RUN_ID` is labelled `foreign`
//! (a stranger written into the group's `cgroup.procs` is a member, not
//! the action's; `recover` refuses while one is there). A group that is
//! gone, or whose name now names another directory, is said plainly; its
//! members are never read then.

use std::path::Path;

use serde::Serialize;

use super::env::check_hint;
use super::log::LogScan;
use crate::contain::census::{census, look};
use crate::contain::proof::check_member;
use crate::kinds::group::{NotTheAction, RunIdSeen};
use crate::kinds::watchdog::{Containment, GroupIdentity, GroupMember, GroupSeen, GroupState};

/// Whose a live member of the group is, by the proof `recover` uses.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MemberRole {
    /// Started after the run's watchdog and carries its `REA_RUN_ID`.
    Action,
    /// Not proven the action's (see `not_the_action`).
    Foreign,
}

#[derive(Serialize, Clone, Debug)]
pub struct MemberPart {
    #[serde(flatten)]
    pub member: GroupMember,
    /// For a live member: commands that show what it is.
    pub check: Option<String>,
    /// For a live member, when the log names its run and watchdog.
    pub role: Option<MemberRole>,
    /// Why a `foreign` member is not the action's.
    pub not_the_action: Vec<NotTheAction>,
}

impl MemberPart {
    pub fn is_foreign(&self) -> bool {
        self.role == Some(MemberRole::Foreign)
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct GroupPart {
    /// The group as the `containment` record names it.
    pub recorded: GroupIdentity,
    /// What its name names now.
    pub now: GroupSeen,
    /// `cgroup.events` `populated`, when the group is present and readable.
    pub populated: Option<bool>,
    pub members: Vec<MemberPart>,
    pub members_not_listed: u64,
    /// Members outside this PID namespace (`cgroup.procs` shows pid 0).
    pub members_not_visible: u64,
    /// Why `cgroup.procs` or `cgroup.events` could not be read.
    pub error: Option<String>,
    /// The close's `group_removed` says the watchdog removed it (`null`:
    /// the log has no such record).
    pub removed_at_close: Option<bool>,
    pub detail: String,
}

impl GroupPart {
    pub fn alive(&self) -> impl Iterator<Item = &GroupMember> {
        self.members.iter().map(|m| &m.member).filter(|m| m.alive)
    }
}

/// The recorded group, when the log ran in cgroup mode.
pub fn recorded_group(c: Option<&Containment>) -> Option<&GroupIdentity> {
    c.and_then(|c| c.group.as_ref())
}

/// The group part of the report (`None` without a cgroup-mode
/// `containment` record).
pub fn group_part(s: &LogScan) -> Option<GroupPart> {
    let recorded = recorded_group(s.containment.as_ref())?.clone();
    let removed_at_close = s.group_removed.as_ref().map(|g| g.removed);
    let (now, group) = look(&recorded);
    let mut p = GroupPart {
        recorded,
        now,
        populated: None,
        members: Vec::new(),
        members_not_listed: 0,
        members_not_visible: 0,
        error: None,
        removed_at_close,
        detail: String::new(),
    };
    let Some(g) = group else {
        p.detail = match (p.now.state, removed_at_close) {
            (GroupState::Gone, Some(true)) => "gone: the watchdog removed it at close".into(),
            (GroupState::Gone, _) => format!(
                "GONE: {}; its members (if any were left) cannot be listed or recovered through it",
                p.now.detail
            ),
            (GroupState::Recreated, _) => format!(
                "RECREATED: {}; its members are not this action's and are not listed",
                p.now.detail
            ),
            _ => format!("cannot be looked at: {}", p.now.detail),
        };
        return Some(p);
    };
    let c = census(&g);
    p.populated = c.populated;
    p.members_not_listed = c.not_listed;
    p.members_not_visible = c.not_visible;
    p.error = c.error.clone();
    let alive = c.alive().count();
    let run = s.run.clone();
    let run_start = s.run_started.as_ref().map(|r| r.watchdog.start_time);
    p.members = c
        .members
        .into_iter()
        .map(|m| {
            let mut part = MemberPart {
                check: match (m.alive, m.start_time) {
                    (true, Some(st)) => Some(check_hint(m.pid, st)),
                    _ => None,
                },
                role: None,
                not_the_action: Vec::new(),
                member: m,
            };
            if let (true, Some(run), Some(start)) = (part.member.alive, &run, run_start) {
                // Gone or a zombie since the census: not labelled.
                let checked = check_member(part.member.pid, run);
                let same = checked.start_time == part.member.start_time;
                let failed = checked.failed(start);
                part.role = match checked.run_id {
                    RunIdSeen::Gone | RunIdSeen::Zombie => None,
                    _ if !same => None,
                    _ if failed.is_empty() => Some(MemberRole::Action),
                    _ => Some(MemberRole::Foreign),
                };
                if part.role == Some(MemberRole::Foreign) {
                    part.not_the_action = failed;
                }
            }
            part
        })
        .collect();
    p.detail = match (p.populated, &p.error) {
        (_, Some(e)) => format!("present, but {e}"),
        (Some(false), None) => "present and empty (populated 0)".into(),
        _ => format!(
            "present: {} member(s), {alive} alive{}",
            p.members.len() as u64 + p.members_not_listed + p.members_not_visible,
            if p.members_not_visible > 0 {
                format!(", {} outside this PID namespace", p.members_not_visible)
            } else {
                String::new()
            }
        ),
    };
    Some(p)
}

/// What to do about the group's live members with no watchdog: recover
/// them, unless some are not the action's (then `recover` refuses).
pub fn recover_hint(g: &GroupPart, cmd: &str) -> String {
    let foreign: Vec<String> = g
        .members
        .iter()
        .filter(|m| m.is_foreign())
        .map(|m| m.member.pid.to_string())
        .collect();
    if foreign.is_empty() {
        format!(
            "{cmd} ends them all through the recorded group (cgroup.kill, after checking the \
             chain, that the watchdog is gone, the inode, and that every member is the \
             action's) and writes a sealed recovery log NEW for `rea-audit verify NEW`; or \
             check each by hand"
        )
    } else {
        format!(
            "not the action's (foreign): {}; {cmd} refuses while they are in the group: move \
             them out (write each pid to another group's cgroup.procs) or check them by hand, \
             then recover",
            foreign.join(", ")
        )
    }
}

/// A word a POSIX shell reads back as itself.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./-=:@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The operator's recovery command for this log (docs/containment.md):
/// `rea-watchdog recover LOG --audit-log NEW [--staging DIR]`, with `NEW`
/// left for the operator (a file that does not exist, outside the stage).
pub fn recover_command(log: &Path, staging: Option<&str>) -> String {
    let mut cmd = format!(
        "rea-watchdog recover {} --audit-log NEW",
        shell_word(&log.display().to_string())
    );
    if let Some(dir) = staging {
        cmd.push_str(" --staging ");
        cmd.push_str(&shell_word(dir));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_quotes_what_a_shell_would_split() {
        assert_eq!(
            recover_command(Path::new("/w/audit.jsonl"), Some("/srv/stage")),
            "rea-watchdog recover /w/audit.jsonl --audit-log NEW --staging /srv/stage"
        );
        assert_eq!(
            recover_command(Path::new("/w/it's here.jsonl"), None),
            r"rea-watchdog recover '/w/it'\''s here.jsonl' --audit-log NEW"
        );
    }
}
