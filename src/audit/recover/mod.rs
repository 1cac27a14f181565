//! `rea-audit verify` for a recovery log (`rea-watchdog recover`,
//! docs/containment.md), in three parts: [`log`] reads the lines and gives
//! the verdict, [`lines`] checks each line on its own and against the one
//! before it (and holds the findings vocabulary), [`judge`] checks the
//! records' order, runs the recovery's decision again and compares the
//! stage.

pub mod judge;
pub mod lines;
pub mod log;
