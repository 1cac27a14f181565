//! The command that re-verifies the log, with the actual values, quoted
//! for a POSIX shell so that it can be pasted as it is: a path with a
//! space or a quote in single quotes, one with control characters,
//! bidirectional formatting characters or bytes that are not UTF-8 in
//! `$'...'` with `\xNN` (bash, zsh, ksh and POSIX.1-2024 sh), never raw.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b)
}

fn needs_dollar(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` as one shell word.
pub fn quote(s: &[u8]) -> String {
    if !s.is_empty() && s.iter().all(|&b| plain(b)) {
        return String::from_utf8_lossy(s).into_owned();
    }
    match std::str::from_utf8(s) {
        Ok(t) if !t.chars().any(needs_dollar) => format!("'{}'", t.replace('\'', "'\\''")),
        Ok(t) => {
            let mut out = String::from("$'");
            for c in t.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\'' => out.push_str("\\'"),
                    c if needs_dollar(c) => {
                        let mut buf = [0u8; 4];
                        for b in c.encode_utf8(&mut buf).bytes() {
                            out.push_str(&format!("\\x{b:02x}"));
                        }
                    }
                    c => out.push(c),
                }
            }
            out.push('\'');
            out
        }
        Err(_) => {
            let mut out = String::from("$'");
            for &b in s {
                match b {
                    b'\\' => out.push_str("\\\\"),
                    b'\'' => out.push_str("\\'"),
                    0x20..=0x7e => out.push(b as char),
                    b => out.push_str(&format!("\\x{b:02x}")),
                }
            }
            out.push('\'');
            out
        }
    }
}

/// `rea-audit verify LOG [--expect-head HEAD] [--staging DIR]`.
pub fn command(log: &Path, head: Option<&str>, staging: Option<&Path>) -> String {
    let mut c = format!("rea-audit verify {}", quote(log.as_os_str().as_bytes()));
    if let Some(h) = head {
        c.push_str(&format!(" --expect-head {}", quote(h.as_bytes())));
    }
    if let Some(s) = staging {
        c.push_str(&format!(" --staging {}", quote(s.as_os_str().as_bytes())));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn words_are_quoted_for_a_shell() {
        assert_eq!(quote(b"/tmp/a.jsonl"), "/tmp/a.jsonl");
        assert_eq!(quote(b"it's here"), "'it'\\''s here'");
        assert_eq!(quote(b"a\x1b[2Jb"), "$'a\\x1b[2Jb'");
        assert_eq!(quote(b"\xff'"), "$'\\xff\\''");
        assert_eq!(quote("x\u{202e}y".as_bytes()), "$'x\\xe2\\x80\\xaey'");
        assert_eq!(quote(b""), "''");
    }
}
