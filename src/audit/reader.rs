//! Strict reading of one log line into a typed record.
//!
//! The bytes are checked before they are believed: UTF-8, no CR, bounded
//! length, an envelope with exactly the eight fields, `data` typed by `kind`
//! with unknown fields and duplicate keys refused, and no floats anywhere.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::record::Event;
use super::verdict::Code;
use super::writer::MAX_LINE;

/// One record, as read (envelope strings borrowed from the line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub v: u32,
    pub run: Cow<'a, str>,
    pub seq: u64,
    pub ts: Cow<'a, str>,
    pub mono_ns: u64,
    pub prev: Cow<'a, str>,
    pub event: Event,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    v: u32,
    #[serde(borrow)]
    run: Cow<'a, str>,
    seq: u64,
    #[serde(borrow)]
    ts: Cow<'a, str>,
    mono_ns: u64,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    prev: Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// Why a line is not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub code: Code,
    pub detail: String,
}

fn err(code: Code, detail: impl Into<String>) -> LineError {
    LineError {
        code,
        detail: detail.into(),
    }
}

/// Maps a serde_json error to the reason it stands for.
fn json_code(e: &serde_json::Error) -> Code {
    let msg = e.to_string();
    if msg.starts_with("unknown field") {
        Code::UnknownField
    } else if msg.starts_with("duplicate field") {
        Code::DuplicateKey
    } else if msg.contains("floating point") {
        Code::Float
    } else if e.is_syntax() || e.is_eof() {
        Code::MalformedJson
    } else {
        Code::BadField
    }
}

/// Parses one line (without its `\n`).
pub fn parse_line(line: &[u8]) -> Result<Record<'_>, LineError> {
    if line.len() > MAX_LINE {
        return Err(err(
            Code::LineTooLong,
            format!("{} bytes; the cap is {MAX_LINE}", line.len()),
        ));
    }
    if let Some(i) = line.iter().position(|&b| b == b'\r') {
        return Err(err(
            Code::CarriageReturn,
            format!("carriage return at byte {i}"),
        ));
    }
    let text = std::str::from_utf8(line).map_err(|e| err(Code::InvalidUtf8, e.to_string()))?;
    let wire: Wire = serde_json::from_str(text).map_err(|e| err(json_code(&e), e.to_string()))?;
    let event = match Event::parse_data(&wire.kind, wire.data.get()) {
        None => {
            return Err(err(
                Code::UnknownKind,
                format!("unknown kind {:?}", crate::vocab::bounded(&wire.kind)),
            ))
        }
        Some(Err(e)) => return Err(err(json_code(&e), format!("{} data: {e}", wire.kind))),
        Some(Ok(ev)) => ev,
    };
    if !crate::vocab::is_token(&wire.run) {
        return Err(err(
            Code::BadField,
            "run id must match [A-Za-z0-9_.-]{1,64}",
        ));
    }
    if !crate::audit::chain::is_digest(&wire.prev) {
        return Err(err(Code::BadField, "prev must be 64 lowercase hex digits"));
    }
    if chrono::DateTime::parse_from_rfc3339(&wire.ts).is_err() || !wire.ts.ends_with('Z') {
        return Err(err(
            Code::BadTimestamp,
            format!("ts {:?} is not RFC 3339 UTC", wire.ts),
        ));
    }
    Ok(Record {
        v: wire.v,
        run: wire.run,
        seq: wire.seq,
        ts: wire.ts,
        mono_ns: wire.mono_ns,
        prev: wire.prev,
        event,
    })
}

/// Splits a log into complete lines and a torn tail (bytes after the last `\n`).
pub fn split_lines(data: &[u8]) -> (Vec<&[u8]>, Option<&[u8]>) {
    let mut lines = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.iter().position(|&b| b == b'\n') {
        lines.push(&rest[..i]);
        rest = &rest[i + 1..];
    }
    let torn = if rest.is_empty() { None } else { Some(rest) };
    (lines, torn)
}
