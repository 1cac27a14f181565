//! The `stop_triggered` record: why a stop began, who was behind it, and
//! the priority it ran at. Re-exported by `record`.

use serde::{Deserialize, Serialize};

use crate::vocab::{Proc, StopReason};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StopTriggered {
    pub reason: StopReason,
    /// True for the trigger that started the stop; later ones only add a record.
    pub first: bool,
    pub detail: String,
    pub job: Option<u64>,
    /// The processes behind the trigger (abandoned or unprovable ones), at
    /// most 4096 (`watchdog::trigger::NAMED_MAX`: the line cap).
    pub processes: Vec<Proc>,
    /// How many more were behind it than `processes` names; absent when
    /// none. The sweeps that follow name every process they signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_processes: Option<u64>,
    /// The first trigger only: the CPU priority the stop ran at
    /// (`watchdog::priority`); `null` on later triggers.
    pub priority: Option<StopPriority>,
}

/// The scheduling the watchdog runs with (taken at start-up).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StopPriority {
    /// `SCHED_FIFO` priority 1.
    Fifo,
    /// A lower nice value than it had.
    Nice,
    /// Not allowed to raise it (or started real-time).
    Unchanged,
}
