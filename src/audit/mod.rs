//! The hash-chained, append-only audit log (docs/audit-log.md) and its
//! verifier (docs/verdict.md).

/// `From<log::Fault>` for the problems of a log kind whose verifier names
/// the chain rule's faults coarsely (the discard and recovery logs): every
/// way a line is not a record is `Malformed`; the chain's own faults keep
/// their names.
macro_rules! coarse_faults {
    ($problem:ident) => {
        impl From<crate::log::Fault> for $problem {
            fn from(f: crate::log::Fault) -> $problem {
                use crate::log::Fault as F;
                match f {
                    F::UnknownKind => $problem::UnknownKind,
                    F::BadVersion => $problem::BadVersion,
                    F::NonCanonical => $problem::NonCanonical,
                    F::SeqMismatch => $problem::SeqMismatch,
                    F::MonoRegressed => $problem::MonoRegressed,
                    F::GenesisMismatch => $problem::GenesisMismatch,
                    F::RunMismatch => $problem::RunMismatch,
                    F::PrevMismatch => $problem::PrevMismatch,
                    F::LineTooLong
                    | F::CarriageReturn
                    | F::InvalidUtf8
                    | F::MalformedJson
                    | F::UnknownField
                    | F::DuplicateKey
                    | F::Float
                    | F::BadField
                    | F::BadTimestamp => $problem::Malformed,
                }
            }
        }
    };
}

pub mod checked;
pub mod passes;
pub mod people;
pub mod reader;
pub mod reconcile;
pub mod recover;
pub mod replay;
pub mod report;
pub mod rules;
pub mod show;
pub mod stage;
pub mod summary;
pub mod verdict;
pub mod verify;

pub use crate::kinds::watchdog::Event;
pub use crate::log::LogError as AuditError;

/// The watchdog's audit log: the chained log of [`Event`]s.
pub type AuditWriter = crate::log::ChainWriter<Event>;
