//! The watchdog's log read strictly: [`crate::log::read`] for its record
//! kind ([`Event`]), each fault named by the verdict's reason code.

pub(crate) use crate::log::read::Wire;
pub use crate::log::read::{open_log, read_lines, started, OpenError, Piece};

use super::verdict::Code;
use crate::kinds::watchdog::Event;

/// One record of the watchdog's log, as read.
pub type Record<'a> = crate::log::Record<'a, Event>;

/// Why a line is not a record of the watchdog's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub code: Code,
    pub detail: String,
}

/// Parses one line (without its `\n`) into a record of the watchdog's log.
pub fn parse_line(line: &[u8]) -> Result<Record<'_>, LineError> {
    crate::log::read::parse_line::<Event>(line).map_err(|e| LineError {
        code: Code::from(e.fault),
        detail: e.detail,
    })
}
