//! `rea-stage` (docs/stage.md): the before-transfer receipt and the conditional
//! discard of a stage that no exec ever touched.
//!
//! One module per idea: [`path`] opens a directory without following a
//! symlink anywhere on the way, [`receipt`] is the before-transfer receipt
//! (`begin`), [`decide`] is the discard decision as a pure function over a
//! listing, [`inventory`] takes that listing through the stage's descriptor,
//! [`log`] is the discard's own hash-chained log, [`remove`] the removal,
//! and [`discard`] puts them together; [`pinned`] is the expected content
//! (the receipt's pins, the manifest). `rea-stage remove` (the verified
//! removal of a stage after a run) has [`remove_decide`] (its decision, a
//! pure function), [`remove_log`] (its log) and [`remove_tree`] (its
//! unlinks); it is put together in `crate::audit::stage::remove`, since it
//! runs verify. Nothing here ever signals anything.

pub mod decide;
pub mod discard;
pub mod inventory;
pub mod log;
pub mod path;
pub mod pinned;
pub mod receipt;
pub mod remove;
pub mod remove_decide;
pub mod remove_log;
pub mod remove_tree;

/// The before-transfer receipt's name inside the stage.
pub const RECEIPT_NAME: &str = ".rea-before-transfer";
/// The watchdog's own place in a stage: `bin/` (uploaded), its state
/// directory and its audit log (docs/stage.md, "The watchdog's own place").
pub const PRIVATE_DIR: &str = ".rea";
/// The marker `rea-watchdog` creates before its first spawn (the stage is armed).
pub const ARMED_NAME: &str = ".rea-exec-started";
/// The marker `rea-stage discard` creates before its first removal. With
/// [`ARMED_NAME`] it is an interlock: each side creates its own marker
/// exclusively, then looks for the other's, and backs off if it is there,
/// so a watchdog and a discard never both go ahead on one stage.
pub const DISCARDING_NAME: &str = ".rea-discarding";

/// Hex SHA-256 of `bytes` (the receipt's digest, as `begin` prints it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    crate::vocab::hex(&Sha256::digest(bytes))
}
