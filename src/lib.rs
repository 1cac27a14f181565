//! rea: a process-ownership watchdog and tamper-evident audit trail.
//!
//! `rea-watchdog` owns every process of one action and proves, in a
//! hash-chained audit log, that none is left; `rea-audit` verifies the log
//! and derives whether the staging directory may be deleted. After a lost
//! watchdog, `rea-watchdog recover` ends what is left in the action's
//! cgroup and writes a recovery log that `rea-audit verify` checks.

pub mod audit;
pub mod b64;
pub mod bounded;
pub mod client;
pub mod clock;
pub mod contain;
pub mod generate;
pub mod holders;
pub mod inventory;
pub mod json_error;
pub mod kinds;
pub mod log;
pub mod process;
pub mod protocol;
pub mod recover;
pub mod signame;
pub mod stage;
pub mod tell;
pub mod timeout;
pub mod units;
pub mod vocab;
pub mod watchdog;
