//! Command-line quantities: durations like timeout(1) and byte counts.
//! Integer arithmetic only; a value that does not parse is an error, never
//! a default.

use std::fmt;
use std::time::Duration;

/// Why a quantity on the command line was refused; each variant keeps the
/// text as given (`{s:?}` in the message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// A duration with a leading `-`.
    Negative(String),
    /// A unit suffix that is not one of `units` ("ms, s, m, h or d").
    UnknownUnit {
        text: String,
        unit: String,
        units: &'static str,
    },
    /// Not digits with at most one `.` before the unit.
    NotADuration(String),
    /// A fraction of a second finer than a nanosecond.
    TooPrecise(String),
    /// Not digits before the unit.
    NotAByteCount(String),
    /// More than the type holds.
    TooLarge(String),
    /// Zero where more is required.
    Zero(String),
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantityError::Negative(s) => write!(f, "{s:?}: a duration cannot be negative"),
            QuantityError::UnknownUnit { text, unit, units } => {
                write!(f, "{text:?}: unknown unit {unit:?} (use {units})")
            }
            QuantityError::NotADuration(s) => {
                write!(f, "{s:?} is not a duration (try 60, 0.5, 500ms, 2m)")
            }
            QuantityError::TooPrecise(s) => write!(f, "{s:?}: at most 9 decimal places"),
            QuantityError::NotAByteCount(s) => write!(f, "{s:?} is not a byte count"),
            QuantityError::TooLarge(s) => write!(f, "{s:?} is too large"),
            QuantityError::Zero(s) => write!(f, "{s:?}: must be more than zero"),
        }
    }
}

impl std::error::Error for QuantityError {}

/// `60` (seconds), `0.5`, `500ms`, `2m`, `1h`, `1d`, `10s`.
pub fn parse_duration(s: &str) -> Result<Duration, QuantityError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(QuantityError::Negative(s.to_string()));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_ns: u128 = match unit {
        "" | "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3600 * 1_000_000_000,
        "d" => 86_400 * 1_000_000_000,
        _ => {
            return Err(QuantityError::UnknownUnit {
                text: s.to_string(),
                unit: unit.to_string(),
                units: "ms, s, m, h or d",
            })
        }
    };
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(QuantityError::NotADuration(s.to_string()));
    }
    if frac.len() > 9 {
        return Err(QuantityError::TooPrecise(s.to_string()));
    }
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse()
            .map_err(|_| QuantityError::TooLarge(s.to_string()))?
    };
    let frac_val: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u128>()
            .map_err(|_| QuantityError::NotADuration(s.to_string()))?
            * 10u128.pow(9 - frac.len() as u32)
    };
    let ns = int
        .checked_mul(unit_ns)
        .and_then(|v| v.checked_add(frac_val * unit_ns / 1_000_000_000))
        .ok_or_else(|| QuantityError::TooLarge(s.to_string()))?;
    let ns = u64::try_from(ns).map_err(|_| QuantityError::TooLarge(s.to_string()))?;
    Ok(Duration::from_nanos(ns))
}

/// A positive duration (deadlines).
pub fn parse_positive_duration(s: &str) -> Result<Duration, QuantityError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(QuantityError::Zero(s.to_string()));
    }
    Ok(d)
}

/// `65536`, `64K`, `64KiB`, `1M`, `1MiB` (binary multiples).
pub fn parse_bytes(s: &str) -> Result<u64, QuantityError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit {
        "" | "B" => 1,
        "K" | "k" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        _ => {
            return Err(QuantityError::UnknownUnit {
                text: s.to_string(),
                unit: unit.to_string(),
                units: "K, M or G",
            })
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| QuantityError::NotAByteCount(s.to_string()))?;
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| QuantityError::TooLarge(s.to_string()))?;
    if v == 0 {
        return Err(QuantityError::Zero(s.to_string()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_timeout() {
        let ms = |s| parse_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("60"), Ok(60_000));
        assert_eq!(ms("0.5"), Ok(500));
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("2m"), Ok(120_000));
        assert_eq!(ms("1.5h"), Ok(5_400_000));
        assert_eq!(ms("1d"), Ok(86_400_000));
        assert_eq!(ms(".25s"), Ok(250));
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(
            parse_duration("1.000000001").unwrap().as_nanos(),
            1_000_000_001
        );
        for bad in [
            "",
            "s",
            "-1",
            "1x",
            "1.2.3",
            "abc",
            "1e3",
            "99999999999999999999d",
            "1.0000000001",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse_duration("-0.5")
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(parse_positive_duration("0ms").is_err());
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64K"), Ok(65536));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        for bad in ["", "0", "-1", "1T", "K", "1.5M"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} parsed");
        }
    }
}
