//! The recovery log: a chained log ([`crate::log`]: the same envelope,
//! chain rule and writer as the watchdog's) with the kinds of
//! [`super::record`]. Every record is made durable before the act it
//! announces; the last record is always `recovery_decided`, and the
//! directory entry is synced with it.

use serde::Serialize;

use crate::json_error::JsonError;
use crate::kinds::recovery::{RecoveryEvent, VERSION};

impl crate::log::Kind for RecoveryEvent {
    const VERSION: u32 = VERSION;

    fn kind(&self) -> &'static str {
        RecoveryEvent::kind(self)
    }

    fn data(&self) -> impl Serialize + '_ {
        self
    }

    fn parse_data(kind: &str, data: &str) -> Option<Result<RecoveryEvent, JsonError>> {
        RecoveryEvent::parse(kind, data)
    }
}

/// The recovery log's writer.
pub type RecoveryLog = crate::log::ChainWriter<RecoveryEvent>;
