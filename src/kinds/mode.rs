//! What containment was asked for and what the action runs with.

use serde::{Deserialize, Serialize};

/// `--contain`: what the operator asked for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ContainRequest {
    /// A cgroup when a writable cgroup2 hierarchy is found, else none.
    #[default]
    Auto,
    /// A cgroup, or refuse to start.
    Cgroup,
    /// User space only (the /proc closure).
    None,
}

impl ContainRequest {
    pub const NAMES: &'static str = "auto, cgroup, none";

    pub fn parse(s: &str) -> Option<ContainRequest> {
        match s {
            "auto" => Some(ContainRequest::Auto),
            "cgroup" => Some(ContainRequest::Cgroup),
            "none" => Some(ContainRequest::None),
            _ => None,
        }
    }
}

/// What the action actually runs with.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ContainMode {
    Cgroup,
    None,
}
