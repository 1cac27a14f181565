//! Text for people's terminals. argv, comm, ids and details are chosen by
//! jobs; printed raw, `ESC ] 0 ; ... BEL` or `ESC [ 2 J` would rewrite the
//! reviewer's terminal, and U+202E would show a name reversed. Everything
//! `show`, verify's summary and the report's page print goes through
//! [`escape`]; `--json` output is exact and never escaped.

/// C0 controls and DEL as `\xNN`, C1 controls (U+0080..U+009F) and the
/// invisible characters ([`is_invisible`]) as `\u{N}`, and `\` as `\\`
/// (so an escape cannot be forged by the text).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\0'..='\x1f' | '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c if is_invisible(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how text reads without showing themselves, the
/// one list [`escape`] (and through it the report's page) and the report's
/// re-verify command make visible: bidirectional marks, embeddings,
/// overrides and isolates (a comm with U+202E shows its text reversed,
/// "Trojan Source"; U+061C is Arabic's mark), zero-width spaces and
/// joiners, the word joiner and the invisible operators, the line and
/// paragraph separators (a line break inside a `<pre>` command), the soft
/// hyphen, the Mongolian vowel separator, the deprecated format controls,
/// the BOM (zero-width no-break space), the interlinear annotation
/// controls and the tag characters. C0, DEL and C1 controls are escaped
/// beside them.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// At most `max` characters of `s` (on a char edge), with `...` when cut:
/// labels and table cells stay readable, and output bounded.
pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// A value in the words the log itself uses (its serde name: `run`,
/// `parent`, `term`, `stop_requested`), never a Rust debug name.
pub fn word<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
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

    /// A terminal shows a bidi override or a zero-width space no more than
    /// a page does: `show` makes them visible too.
    #[test]
    fn invisible_characters_are_made_visible() {
        assert_eq!(escape("evil\u{202e}gpj.exe"), "evil\\u{202e}gpj.exe");
        assert_eq!(escape("a\u{200b}b\u{feff}"), "a\\u{200b}b\\u{feff}");
    }

    #[test]
    fn cut_keeps_char_edges() {
        assert_eq!(super::cut("ééé", 2), "éé...");
        assert_eq!(super::cut("ab", 2), "ab");
    }
}
