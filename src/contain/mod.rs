//! Kernel containment (docs/containment.md): the action's own cgroup v2 group.
//!
//! `discover` finds a writable cgroup2 hierarchy and the watchdog's own
//! group in it; `group` is the [`group::ActionGroup`], the identity of the
//! group `rea-<run id>` this process created by exclusive `mkdir`, with
//! its operations (members, populated, kill, remove) as methods, like
//! [`crate::process::pidfd::VerifiedPidFd`] for a process. `census`
//! looks a recorded group up again and lists who is in it (reconcile,
//! recover); `proof` checks each member is the action's (started after
//! the run's watchdog, carrying its `REA_RUN_ID`). `mode` is the
//! vocabulary the records use.

pub mod census;
pub mod choice;
pub mod discover;
pub mod group;
pub mod nested;
pub mod proof;
