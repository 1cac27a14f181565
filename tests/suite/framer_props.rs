//! Property tests of the request framer (`rea::watchdog::framer::Framer`,
//! docs/requests.md: RFC 7464 texts, RS … LF, at most 4096 bytes). Pure: no
//! process is started.
//!
//! - arbitrary bytes, in any chunking, never panic, every text it gives
//!   fits the cap, and its own state stays bounded (one text at most);
//! - the texts do not depend on how the bytes were cut into reads (only an
//!   oversize text's byte count may: it is counted up to where it was seen);
//! - a well-formed text after any garbage (whatever state the garbage left:
//!   inside a text, an unframed line, an oversize skip) is never lost, and
//!   neither is the garbage's own accounting disturbed by what follows.
//!
//! Short mode by default (64 cases a property, the whole file in a few
//! seconds). Long mode: `REA_LONG_PROPTEST=1 tools/test framer_props::`
//! (20 000 cases a property).

use proptest::prelude::*;
use proptest::test_runner::Config;
use rea::protocol::{frame, MAX_REQUEST, RS};
use rea::watchdog::framer::{Framer, Text};

fn config() -> Config {
    let long = std::env::var_os("REA_LONG_PROPTEST").is_some_and(|v| v == "1");
    Config {
        cases: if long { 20_000 } else { 64 },
        failure_persistence: None,
        ..Config::default()
    }
}

/// Bytes rich in the framer's special bytes (RS, LF) and sometimes long.
fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => any::<u8>(),
        2 => Just(RS),
        2 => Just(b'\n'),
        1 => Just(b'{'),
    ];
    prop_oneof![
        8 => proptest::collection::vec(byte, 0..600),
        // Long runs without LF or RS: oversize texts and long garbage.
        1 => (any::<bool>(), 4000usize..9000).prop_map(|(rs, n)| {
            let mut v = vec![b'x'; n];
            if rs {
                v[0] = RS;
            }
            v
        }),
    ]
}

/// Cut points for feeding `len` bytes in reads of arbitrary sizes.
fn chunking() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1usize..700, 0..40)
}

fn feed_chunked(f: &mut Framer, data: &[u8], cuts: &[usize], out: &mut Vec<Text>) {
    let mut rest = data;
    for &c in cuts {
        if rest.is_empty() {
            break;
        }
        let (a, b) = rest.split_at(c.min(rest.len()));
        f.feed(a, out);
        rest = b;
    }
    f.feed(rest, out);
}

fn texts(data: &[u8], cuts: &[usize]) -> Vec<Text> {
    let mut f = Framer::default();
    let mut out = Vec::new();
    feed_chunked(&mut f, data, cuts, &mut out);
    assert_bounded(&f);
    out
}

/// The framer holds one partial text at most: its debug form (which shows
/// its buffer byte by byte) stays within a text's worth.
fn assert_bounded(f: &Framer) {
    let shown = format!("{f:?}").len();
    assert!(shown <= 5 * MAX_REQUEST + 200, "framer state {shown} chars");
}

fn normalised(v: Vec<Text>) -> Vec<Text> {
    v.into_iter()
        .map(|t| match t {
            Text::Oversize(_) => Text::Oversize(0),
            t => t,
        })
        .collect()
}

/// A JSON-like body with neither RS nor LF, within the cap.
fn body() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..300).prop_map(|v| {
        let mut v: Vec<u8> = v.into_iter().filter(|&b| b != RS && b != b'\n').collect();
        v.insert(0, b'{');
        v.push(b'}');
        v
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(data in hostile_bytes(), cuts in chunking()) {
        for t in texts(&data, &cuts) {
            match t {
                Text::Json(j) => {
                    prop_assert!(j.len() + 2 <= MAX_REQUEST, "a text of {} bytes", j.len());
                    prop_assert!(!j.contains(&RS) && !j.contains(&b'\n'));
                }
                Text::Truncated(n) | Text::Unframed(n) => prop_assert!(n > 0),
                Text::Oversize(n) => prop_assert!(n >= MAX_REQUEST),
            }
        }
    }

    #[test]
    fn texts_do_not_depend_on_the_reads(data in hostile_bytes(), cuts in chunking()) {
        let whole = normalised(texts(&data, &[]));
        let cut = normalised(texts(&data, &cuts));
        prop_assert_eq!(whole, cut);
    }

    #[test]
    fn a_good_text_after_any_garbage_is_never_lost(
        garbage in hostile_bytes(),
        good in body(),
        after in hostile_bytes(),
        cuts in chunking(),
    ) {
        let mut data = garbage.clone();
        data.extend_from_slice(&frame(&good));
        let n_before = texts(&garbage, &[]).len();
        data.extend_from_slice(&after);
        let out = texts(&data, &cuts);
        // Whatever the garbage left unfinished is reported once (at most),
        // then comes the good text, whole.
        let at = out
            .iter()
            .position(|t| *t == Text::Json(good.clone()))
            .expect("the good text was lost");
        prop_assert!(at == n_before || at == n_before + 1, "at {} after {} garbage texts", at, n_before);
        if at == n_before + 1 {
            prop_assert!(matches!(out[n_before], Text::Truncated(_)), "{:?}", out[n_before]);
        }
    }

    #[test]
    fn good_texts_in_any_reads_come_out_in_order(
        goods in proptest::collection::vec(body(), 1..20),
        cuts in chunking(),
    ) {
        let data: Vec<u8> = goods.iter().flat_map(|g| frame(g)).collect();
        let want: Vec<Text> = goods.into_iter().map(Text::Json).collect();
        prop_assert_eq!(texts(&data, &cuts), want);
    }
}
