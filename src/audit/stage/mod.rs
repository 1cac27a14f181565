//! The stage as the verifier sees it (docs/stage.md): [`held`], the holder
//! scan at verification time (`stage_held`), and [`log`], `rea-audit
//! verify` for a discard log (`rea-stage discard`), [`remove`], `rea-stage
//! remove` (it runs verify), [`remove_log`], `rea-audit verify` for its
//! log, [`run`], the verdict's rules about the stage over a run (changed,
//! as uploaded), and [`private`], those about the watchdog's own files in it. The stage's own code
//! (inventory, decision, removal) is `crate::stage`; this is its check.

pub mod held;
pub mod log;
pub mod private;
pub mod remove;
pub mod remove_log;
pub mod run;
