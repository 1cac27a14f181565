//! `rea-watchdog`: one process that owns every process of one action.

pub mod action;
pub mod caller;
pub mod cleanup;
pub mod config;
pub mod job;
pub mod modes;
pub mod passthrough;
pub mod priority;
pub mod reply;
pub mod spawn;
pub mod start;
pub mod state_dir;
