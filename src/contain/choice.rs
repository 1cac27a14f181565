//! Choosing containment at start (docs/containment.md): `auto` takes a cgroup when a
//! writable cgroup2 hierarchy is found and the group can be made, else
//! none; `cgroup` refuses to start without one; `none` never looks.

use std::path::PathBuf;

use super::discover::{discover, NoHierarchy};
use super::group::ActionGroup;
use crate::kinds::group::{Containment, GroupIdentity};
use crate::kinds::mode::{ContainMode, ContainRequest};

/// `--contain` and where discovery looks (`--cgroup-root`, for tests).
#[derive(Clone, Debug, Default)]
pub struct ContainChoice {
    pub request: ContainRequest,
    pub root_override: Option<PathBuf>,
}

/// What start chose: the record to write and the group, if any.
#[derive(Debug)]
pub struct Contained {
    pub record: Containment,
    pub group: Option<ActionGroup>,
}

/// Why no action group could be had.
#[derive(Debug)]
pub enum NoGroup {
    Hierarchy(NoHierarchy),
    /// `rea-<run id>` could not be made in the own group: (its path, why).
    Create(String, std::io::Error),
}

impl std::fmt::Display for NoGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoGroup::Hierarchy(e) => e.fmt(f),
            NoGroup::Create(path, e) => write!(f, "cannot create {path}: {e}"),
        }
    }
}

impl std::error::Error for NoGroup {}

/// `--contain cgroup` without a group: the watchdog refuses to start.
#[derive(Debug)]
pub struct CgroupRefused(pub NoGroup);

impl std::fmt::Display for CgroupRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--contain cgroup: no writable cgroup v2 hierarchy ({}); refusing to start",
            self.0
        )
    }
}

impl std::error::Error for CgroupRefused {}

impl ContainChoice {
    /// Discovers and creates `rea-<run_id>` as asked. `Err` only for
    /// `cgroup` that cannot have one (the caller refuses to start).
    pub fn apply(&self, run_id: &str) -> Result<Contained, CgroupRefused> {
        let none = |detail: String| Contained {
            record: Containment {
                requested: self.request,
                mode: ContainMode::None,
                group: None,
                detail,
            },
            group: None,
        };
        if self.request == ContainRequest::None {
            return Ok(none("--contain none".into()));
        }
        let made = discover(self.root_override.as_deref())
            .map_err(NoGroup::Hierarchy)
            .and_then(|h| {
                ActionGroup::create(&h.own, run_id)
                    .map_err(|e| NoGroup::Create(format!("{}/rea-{run_id}", h.own.display()), e))
            });
        match (made, self.request) {
            (Ok(g), _) => Ok(Contained {
                record: Containment {
                    requested: self.request,
                    mode: ContainMode::Cgroup,
                    group: Some(GroupIdentity {
                        path: g.path().to_string_lossy().into_owned(),
                        ino: g.ino(),
                    }),
                    detail: String::new(),
                },
                group: Some(g),
            }),
            (Err(e), ContainRequest::Cgroup) => Err(CgroupRefused(e)),
            (Err(e), _) => Ok(none(e.to_string())),
        }
    }
}
