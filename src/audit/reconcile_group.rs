//! The containment half of `rea-audit reconcile` (SPEC 8): when the log's
//! `containment` record names the action's cgroup, the group is looked up
//! again by its recorded path and inode and its members are listed with
//! pid, start time, comm and whether they run ([`crate::contain::census`],
//! read-only). A group that is gone, or whose name now names another
//! directory, is said plainly; its members are never read then.

use std::path::Path;

use serde::Serialize;

use super::reconcile_env::check_hint;
use super::reconcile_log::LogScan;
use super::record::{Containment, GroupIdentity, GroupMember, GroupSeen, GroupState};
use crate::contain::census::{census, look};

#[derive(Serialize, Clone, Debug)]
pub struct MemberPart {
    #[serde(flatten)]
    pub member: GroupMember,
    /// For a live member: commands that show what it is.
    pub check: Option<String>,
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
    p.members = c
        .members
        .into_iter()
        .map(|m| MemberPart {
            check: match (m.alive, m.start_time) {
                (true, Some(st)) => Some(check_hint(m.pid, st)),
                _ => None,
            },
            member: m,
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

/// The operator's recovery command for this log (SPEC 8):
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
