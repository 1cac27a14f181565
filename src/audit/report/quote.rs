//! The command that re-verifies the log, with the actual values, quoted
//! for a POSIX shell so that it can be pasted as it is: a path with a
//! space or a quote in single quotes, one with control characters,
//! invisible ones (`people::is_invisible`: bidirectional formatting,
//! zero-width, separators, the BOM) or bytes that are not UTF-8 in
//! `$'...'` with `\xNN` (bash, zsh, ksh and POSIX.1-2024 sh), never raw.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b)
}

/// Controls (C0, DEL, C1) and the page's list of invisible characters.
fn needs_dollar(c: char) -> bool {
    c.is_control() || crate::audit::people::is_invisible(c)
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

/// `p` as an absolute path that means the same from any directory: the
/// canonical path (links resolved), or, where that cannot be had (gone
/// since), `p` joined to the current directory.
pub fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
}

/// `rea-audit verify [--expect-head HEAD] [--staging DIR] -- LOG`, pasteable
/// from any directory: the paths absolute ([`absolute`]), the log after
/// `--` so that no name is taken for an option.
pub fn command(log: &Path, head: Option<&str>, staging: Option<&Path>) -> String {
    let mut c = String::from("rea-audit verify");
    if let Some(h) = head {
        c.push_str(&format!(" --expect-head {}", quote(h.as_bytes())));
    }
    if let Some(s) = staging {
        let s = absolute(s);
        c.push_str(&format!(" --staging {}", quote(s.as_os_str().as_bytes())));
    }
    let log = absolute(log);
    c.push_str(&format!(" -- {}", quote(log.as_os_str().as_bytes())));
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

    #[test]
    fn invisible_characters_are_escaped() {
        for c in [
            '\u{61c}', '\u{200b}', '\u{200c}', '\u{200d}', '\u{200e}', '\u{2028}', '\u{2029}',
            '\u{202e}', '\u{2060}', '\u{2061}', '\u{2062}', '\u{2063}', '\u{2064}', '\u{2066}',
            '\u{feff}',
        ] {
            let mut want = String::from("$'a");
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                want.push_str(&format!("\\x{b:02x}"));
            }
            want.push_str("b'");
            assert_eq!(quote(format!("a{c}b").as_bytes()), want, "{:x}", c as u32);
        }
    }
}
