//! Text for people's terminals. argv, comm, ids and details are chosen by
//! jobs; printed raw, `ESC ] 0 ; ... BEL` or `ESC [ 2 J` would rewrite the
//! reviewer's terminal. Everything `show` and verify's summary print goes
//! through [`escape`]; `--json` output is exact and never escaped.

/// C0 controls and DEL as `\xNN`, C1 controls (U+0080..U+009F) as
/// `\u{NN}`, and `\` as `\\` (so an escape cannot be forged by the text).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\0'..='\x1f' | '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn controls_are_escaped_and_text_is_kept() {
        assert_eq!(escape("a\x1b]0;t\x07b"), "a\\x1b]0;t\\x07b");
        assert_eq!(escape("\x7f\u{9b}\u{a0}ü"), "\\x7f\\u{9b}\u{a0}ü");
        assert_eq!(escape("C:\\x1b"), "C:\\\\x1b");
        assert_eq!(escape("a\nb\tc"), "a\\x0ab\\x09c");
    }
}
