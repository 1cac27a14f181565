//! The record kinds of the three chained logs (docs/audit-log.md), below
//! everything that writes or reads them: the watchdog's records
//! ([`watchdog`], with its containment records in [`group`] and [`mode`]
//! its stop trigger in [`stop`], its stage records in [`stage`], and
//! the directory-tree vocabulary in [`tree`]) and the recovery log's ([`recovery`],
//! with the rules that decide a recovery in [`recovery_rule`], shared by
//! `recover`, which acts on them, and the verifier, which re-derives them).
//!
//! Nothing here imports the watchdog, the verifiers, `recover` or the
//! stage tools: they all import this.

pub mod group;
pub mod held;
pub mod mode;
pub mod recovery;
pub mod recovery_rule;
pub mod stage;
pub mod stop;
pub mod tree;
pub mod watchdog;
