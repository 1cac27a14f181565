//! The hash-chained, append-only audit log (docs/audit-log.md) and its
//! verifier (docs/verdict.md).

pub mod checked;
pub mod passes;
pub mod people;
pub mod reader;
pub mod reconcile;
pub mod reconcile_dirs;
pub mod reconcile_env;
pub mod reconcile_group;
pub mod reconcile_log;
pub mod reconcile_text;
pub mod recover_judge;
pub mod recover_lines;
pub mod recover_log;
pub mod replay;
pub mod replay_ask;
pub mod replay_group;
pub mod report;
pub mod rules;
pub mod show;
pub mod stage_held;
pub mod stage_log;
pub mod verdict;
pub mod verify;

pub use crate::kinds::watchdog::Event;
pub use crate::log::LogError as AuditError;

/// The watchdog's audit log: the chained log of [`Event`]s.
pub type AuditWriter = crate::log::ChainWriter<Event>;
