//! The framer: request FIFO bytes → texts, in RFC 7464 framing (docs/requests.md).
//!
//! A text is the byte RS (0x1E), one JSON object, LF: at most
//! [`MAX_REQUEST`] bytes in all, so a writer's single `write` of a whole
//! text never interleaves with another's (`PIPE_BUF`). RS always starts a
//! new text, so bytes that a writer left unfinished (it died mid-request, it
//! wrote garbage) are cut off by the next RS and can never swallow or
//! corrupt the next writer's request:
//!
//! | bytes | text |
//! |---|---|
//! | `RS json LF` | [`Text::Json`] (without RS and LF) |
//! | `RS json…` then `RS` | [`Text::Truncated`] (cut off), a new text starts |
//! | `garbage` then `RS` | [`Text::Truncated`] |
//! | `garbage LF` (no RS) | [`Text::Unframed`] |
//! | `RS` + more than the cap without LF | [`Text::Oversize`] once, the rest skipped up to the next LF or RS |
//!
//! Pure and bounded: it holds at most one text's bytes, whatever it is fed.

use crate::protocol::{MAX_REQUEST, RS};

/// One framed text, or one piece of input that is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    /// The JSON between RS and LF.
    Json(Vec<u8>),
    /// `n` bytes cut off by the next RS before their LF.
    Truncated(usize),
    /// A line of `n` bytes (LF included) that did not start with RS.
    Unframed(usize),
    /// A text that reached the cap without its LF (`n` bytes so far); the
    /// rest of it is skipped.
    Oversize(usize),
}

#[derive(Debug, Default, PartialEq, Eq)]
enum State {
    /// Between texts: the next byte should be RS.
    #[default]
    Between,
    /// Bytes that are not a text, up to LF or RS (their count).
    Garbage(usize),
    /// After RS: the text so far is in `buf`.
    Text,
    /// After an oversize text was reported: skipping up to LF or RS.
    Skipping,
}

/// Cuts FIFO bytes into texts; keeps one partial text between reads.
#[derive(Debug, Default)]
pub struct Framer {
    state: State,
    buf: Vec<u8>,
}

impl Framer {
    /// Appends the texts completed by `data` to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<Text>) {
        let mut rest = data;
        while let Some((&b, tail)) = rest.split_first() {
            match (&mut self.state, b) {
                (State::Between, RS) => self.start(),
                (State::Between, b'\n') => out.push(Text::Unframed(1)),
                (State::Between, _) => self.state = State::Garbage(1),
                (State::Garbage(n), RS) => {
                    out.push(Text::Truncated(*n));
                    self.start();
                }
                (State::Garbage(n), b'\n') => {
                    out.push(Text::Unframed(*n + 1));
                    self.state = State::Between;
                }
                (State::Garbage(n), _) => {
                    // Skip to the next LF or RS in one step.
                    let skip = rest.iter().position(|&c| c == b'\n' || c == RS);
                    let skip = skip.unwrap_or(rest.len());
                    *n += skip;
                    rest = &rest[skip..];
                    continue;
                }
                (State::Text, RS) => {
                    out.push(Text::Truncated(self.buf.len() + 1));
                    self.start();
                }
                (State::Text, b'\n') => {
                    out.push(Text::Json(std::mem::take(&mut self.buf)));
                    self.state = State::Between;
                }
                (State::Text, _) => {
                    // Take every byte up to LF or RS at once, within the cap
                    // (RS and LF count towards it).
                    let end = rest.iter().position(|&c| c == b'\n' || c == RS);
                    let end = end.unwrap_or(rest.len());
                    let room = (MAX_REQUEST - 2).saturating_sub(self.buf.len());
                    if end > room {
                        out.push(Text::Oversize(1 + self.buf.len() + end));
                        self.buf = Vec::new();
                        self.state = State::Skipping;
                    } else {
                        self.buf.extend_from_slice(&rest[..end]);
                    }
                    rest = &rest[end..];
                    continue;
                }
                (State::Skipping, RS) => self.start(),
                (State::Skipping, b'\n') => self.state = State::Between,
                (State::Skipping, _) => {}
            }
            rest = tail;
        }
    }

    fn start(&mut self) {
        self.buf.clear();
        self.state = State::Text;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame;

    fn texts(chunks: &[&[u8]]) -> Vec<Text> {
        let mut f = Framer::default();
        let mut out = Vec::new();
        for c in chunks {
            f.feed(c, &mut out);
        }
        out
    }

    fn json(s: &str) -> Text {
        Text::Json(s.as_bytes().to_vec())
    }

    #[test]
    fn texts_are_cut_at_rs_and_lf_across_reads() {
        let out = texts(&[b"\x1eab\n\x1ecd", b"e\n\x1e", b"\n"]);
        assert_eq!(out, vec![json("ab"), json("cde"), json("")]);
    }

    #[test]
    fn a_fragment_never_swallows_the_next_text() {
        // A writer died after `{"v":1,`; the next writer's text survives.
        let out = texts(&[b"\x1e{\"v\":1,", b"\x1e{\"ok\":1}\n"]);
        assert_eq!(out, vec![Text::Truncated(8), json("{\"ok\":1}")]);
        // Garbage without RS before a text: one truncated refusal.
        let out = texts(&[b"garbage\x1e{}\n"]);
        assert_eq!(out, vec![Text::Truncated(7), json("{}")]);
    }

    #[test]
    fn lines_without_rs_are_unframed() {
        let out = texts(&[b"{\"v\":1}\n\n\x1e{}\n"]);
        assert_eq!(out, vec![Text::Unframed(8), Text::Unframed(1), json("{}")]);
    }

    #[test]
    fn the_cap_counts_rs_and_lf() {
        let fits = "x".repeat(MAX_REQUEST - 2);
        let out = texts(&[&frame(fits.as_bytes())]);
        assert_eq!(out, vec![json(&fits)]);
        let over = "x".repeat(MAX_REQUEST - 1);
        let mut bytes = frame(over.as_bytes());
        bytes.extend_from_slice(&frame(b"{}"));
        let out = texts(&[&bytes[..100], &bytes[100..]]);
        assert_eq!(out, vec![Text::Oversize(MAX_REQUEST), json("{}")]);
    }

    #[test]
    fn an_oversize_text_is_skipped_to_its_lf_and_reported_once() {
        let big = vec![b'x'; 3 * MAX_REQUEST];
        let mut f = Framer::default();
        let mut out = Vec::new();
        f.feed(&[RS], &mut out);
        for chunk in big.chunks(1000) {
            f.feed(chunk, &mut out);
        }
        f.feed(b"\n\x1e{}\n", &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(matches!(out[0], Text::Oversize(_)));
        assert_eq!(out[1], json("{}"));
        assert!(f.buf.capacity() <= MAX_REQUEST, "the framer stays bounded");
    }
}
