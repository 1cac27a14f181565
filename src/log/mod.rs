//! The chained log, whatever its records: the chain rule, the record
//! envelope, the one writer, the strict reader and the line-by-line check
//! (docs/audit-log.md).
//!
//! Three logs are written this way: the watchdog's audit log
//! ([`crate::kinds::watchdog::Event`]), `rea-stage discard`'s log
//! ([`crate::stage::log::StageEvent`]) and `rea-watchdog recover`'s log
//! ([`crate::kinds::recovery::RecoveryEvent`]). Each is a [`Kind`]: its
//! record types and their names; the chain, the line encoding, the
//! durability and the poisoning rules are this module's alone, so a new
//! log kind adds records, never chain code.
//!
//! This module knows no record kind: nothing here imports the audit,
//! stage or recover modules.

pub mod chain;
pub mod check;
pub mod read;
pub mod writer;

pub use check::{Chain, Found};
pub use read::{Fault, Record};
pub use writer::{ChainWriter, LogError, Written, MAX_LINE};

/// The records of one log kind: what the writer needs to put a record in
/// the envelope, and what a reader needs to parse it back.
pub trait Kind: Sized {
    /// The envelope's `v` for this kind's records.
    const VERSION: u32;

    /// The record's `kind` string.
    fn kind(&self) -> &'static str;

    /// The record's `data`, serialised alone (the envelope goes around it).
    fn data(&self) -> impl serde::Serialize + '_;

    /// The typed `data` of a record of `kind`; `None` for a kind this log
    /// does not have. Parsed with [`crate::json_error::from_str`], so that
    /// the reader maps each error to its [`Fault`] by kind, never by text.
    fn parse_data(kind: &str, data: &str) -> Option<Result<Self, crate::json_error::JsonError>>;
}
