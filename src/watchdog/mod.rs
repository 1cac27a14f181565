//! `rea-watchdog`: one process that owns every process of one action.

pub mod action;
pub mod arm;
pub mod caller;
pub mod config;
pub mod detach;
pub mod effect;
pub mod external;
pub mod framer;
pub mod intake;
pub mod job;
pub mod job_env;
pub mod jobs;
pub mod ledger;
pub mod modes;
pub mod ownership;
pub mod passthrough;
pub mod phase;
pub mod priority;
pub mod receipt;
pub mod reply;
pub mod sources;
pub mod spawn;
pub mod start;
pub mod state_dir;
pub mod stop;
pub mod trigger;
