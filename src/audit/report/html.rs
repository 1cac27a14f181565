//! Escaping, and the page around the sections.
//!
//! A log is attacker-influenced: a job chooses its argv, its comm, its
//! request ids, and a hostile one would like the reviewer's browser to run
//! `<script>` or fetch `<img src=//evil>` from the report. Every string
//! taken from a log reaches the page through [`text`] (or [`attr`]), which
//! makes control, bidirectional-format and other invisible characters
//! visible first (the same `\xNN` convention as `rea-audit show`, so an ESC
//! sequence, a right-to-left override or a zero-width space is shown, not
//! obeyed) and then escapes the five
//! HTML-significant characters. The page also carries a Content Security
//! Policy that forbids every load and every script, so even an escaping
//! bug could fetch or run nothing.

use std::fmt::Write as _;

use crate::audit::people;

/// The policy: nothing is loaded, nothing runs; only the inline style and
/// `data:` images (none are used) are allowed. `base-uri` and
/// `form-action` are not covered by `default-src`, so they are named.
pub const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

/// Escapes `& < > " '` for HTML text and quoted attribute values alike
/// (SVG inside HTML is parsed by the same HTML parser).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A string from a log, for people: control and invisible characters
/// visible as `rea-audit show` prints them ([`people::escape`]), then
/// HTML-escaped.
pub fn text(s: &str) -> String {
    esc(&people::escape(s))
}

/// [`text`] of at most `max` characters.
pub fn short(s: &str, max: usize) -> String {
    text(&people::cut(s, max))
}

/// The page's style, inline (no external resource), with a print block:
/// colours kept on paper, sections not split across pages where they fit,
/// the table's header repeated on every page.
const STYLE: &str = include_str!("style.css");

/// The page up to `<body>`'s first child: charset and the policy come
/// before anything else, the favicon is an empty `data:` URL (so a browser
/// asks no server for `/favicon.ico`). `title` is from the log (escaped here).
pub fn head(title: &str, body_class: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n\
<meta name=\"referrer\" content=\"no-referrer\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<link rel=\"icon\" href=\"data:,\">\n<title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n\
<body class=\"{}\">\n",
        esc(CSP),
        text(title),
        esc(body_class)
    )
}

/// Closes what [`head`] opened.
pub const TAIL: &str = "</body>\n</html>\n";

/// A `<section>`'s opening with its heading; `untrusted` adds the red
/// note that what follows comes from a log that failed verification.
pub fn section(id: &str, title: &str, untrusted: bool) -> String {
    let mut s = format!("<section id=\"{}\">\n<h2>{}</h2>\n", esc(id), esc(title));
    if untrusted {
        s.push_str(
            "<p class=\"untrusted-note\">UNTRUSTED: drawn from a log that failed \
verification; it shows what the file says, not what happened.</p>\n",
        );
    }
    s
}

/// One row of a two-column facts table (`value` already escaped).
pub fn row(out: &mut String, key: &str, value: &str) {
    let _ = writeln!(out, "<tr><th>{}</th><td>{value}</td></tr>", esc(key));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_five_characters_are_escaped() {
        assert_eq!(
            esc(r#"<script>alert('x')</script> & "q""#),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn controls_and_bidi_are_made_visible_then_escaped() {
        assert_eq!(text("a\x1b[2J<b>"), "a\\x1b[2J&lt;b&gt;");
        assert_eq!(text("evil\u{202e}gpj.exe"), "evil\\u{202e}gpj.exe");
        assert_eq!(text("\"><img src=x>"), "&quot;&gt;&lt;img src=x&gt;");
    }

    /// Every character that changes how text reads without showing itself
    /// (bidi marks and controls, zero-width ones, separators, the BOM).
    #[test]
    fn invisible_characters_are_made_visible() {
        for c in [
            '\u{61c}', '\u{200b}', '\u{200c}', '\u{200d}', '\u{200e}', '\u{200f}', '\u{2028}',
            '\u{2029}', '\u{202a}', '\u{202e}', '\u{2060}', '\u{2061}', '\u{2062}', '\u{2063}',
            '\u{2064}', '\u{2066}', '\u{2069}', '\u{feff}',
        ] {
            let shown = text(&format!("a{c}b"));
            assert_eq!(shown, format!("a\\u{{{:x}}}b", c as u32), "{:x}", c as u32);
        }
    }
}
