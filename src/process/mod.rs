//! Processes: who they are, who descends from whom, binding, signalling, reaping.

pub mod alive;
pub mod dispositions;
pub mod forked;
pub mod identity;
pub mod info;
pub mod inherited;
pub mod lineage;
pub mod pidfd;
pub mod reap;
pub mod scan;
