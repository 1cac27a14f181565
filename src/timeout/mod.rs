//! The `timeout` personality (SPEC 3.7 rev 2): rea-watchdog invoked as
//! `timeout` takes coreutils' command line.

pub mod args;
