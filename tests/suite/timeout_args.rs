//! The `timeout` personality's command line (`rea::timeout::args`): DURATION
//! and SIGNAL values, getopt_long's option rules, and coreutils' exact error
//! texts. Pure: no process is started here.

use rea::timeout::args::{
    help_text, parse, parse_duration, parse_signal, quote, signal_name, Limit, Parsed, TimeoutArgs,
    MAX_SECONDS,
};
use std::ffi::OsString;
use std::time::Duration;

const TRY: &str = "Try 'timeout --help' for more information.";

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn run(args: &[&str]) -> TimeoutArgs {
    match parse(&os(args)) {
        Ok(Parsed::Run(t)) => t,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn err(args: &[&str]) -> String {
    match parse(&os(args)) {
        Err(e) => e.to_string(),
        other => panic!("{args:?} parsed: {other:?}"),
    }
}

fn after(ns: u128) -> Limit {
    let secs = u64::try_from(ns / 1_000_000_000).unwrap();
    Limit::After(Duration::new(secs, (ns % 1_000_000_000) as u32))
}

fn secs(s: u64) -> Limit {
    Limit::After(Duration::from_secs(s))
}

#[test]
fn bad_durations_are_refused() {
    for s in [
        "invalid",
        " -0.1",
        " -1e-10000",
        "-0",
        "-0.0",
        "-inf",
        "42D",
        "nan",
        "NaN",
        "",
        " ",
        ".",
        "s",
        "+",
        "++5",
        "+ 5",
        "5 ",
        "1 s",
        "1s1",
        "1ss",
        "1ms",
        "1e",
        "1e+",
        "1es",
        "0x",
        "0x.",
        "0x1p",
        "infinit",
        "infx",
        "é",
    ] {
        assert_eq!(parse_duration(s), Err(()), "{s:?}");
    }
}

#[test]
fn durations_are_exact_nanoseconds() {
    let cases: [(&str, Limit); 28] = [
        ("0x1p-2", after(250_000_000)),
        ("0x1.8p1", secs(3)),
        ("0x1P-30", after(1)),
        ("0x1p62", secs(1 << 62)),
        ("0x7fffffffffffffff", secs(MAX_SECONDS)),
        ("0x1p-1s", after(500_000_000)),
        ("10.34", after(10_340_000_000)),
        ("9.999999999", after(9_999_999_999)),
        ("1d", secs(86_400)),
        ("2.34e+5d", secs(234_000 * 86_400)),
        ("1.5m", secs(90)),
        ("2h", secs(7200)),
        ("3s", secs(3)),
        (" 5", secs(5)),
        ("\t\n+5", secs(5)),
        ("1.", secs(1)),
        (".5", after(500_000_000)),
        ("1.e1", secs(10)),
        ("0.1e1m", secs(60)),
        ("1e-10000", after(1)),
        ("1e-9", after(1)),
        ("1.0000000001e-9", after(2)),
        ("0.0000000015", after(2)),
        ("0.0000000001s", after(1)),
        ("0x10", secs(16)),
        ("0x1p3", secs(8)),
        ("0x.8", after(500_000_000)),
        ("0x1d", secs(29)),
    ];
    for (s, want) in cases {
        assert_eq!(parse_duration(s), Ok(want), "{s:?}");
    }
    // A 1 000-digit fraction still rounds up exactly.
    let long = format!("1.{}1", "0".repeat(1000));
    assert_eq!(parse_duration(&long), Ok(after(1_000_000_001)));
    assert_eq!(parse_duration("0X1P-1000000"), Ok(after(1)));
}

#[test]
fn zero_infinite_and_huge_durations_never_time_out() {
    for s in [
        "0",
        "0s",
        "0d",
        "0.0",
        "+0",
        "0e9",
        "0e-99999999999999999999",
        "0x0",
        "0x0p99",
        "inf",
        "INF",
        "infinity",
        "Infinity",
        "infs",
        "infinityd",
        "9223372036854775808",
        "9223372036854775807.5",
        "1.18973149535723176502e+4932",
        "1e5000",
        "1e99999999999999999999999",
        "106751991167301d",
        "0x8000000000000000",
        "0x1p63",
        "9223372036854775807.000000001",
    ] {
        assert_eq!(parse_duration(s), Ok(Limit::Never), "{s:?}");
    }
    // The cap itself is still a duration.
    assert_eq!(parse_duration("9223372036854775807"), Ok(secs(MAX_SECONDS)));
    assert_eq!(
        parse_duration("106751991167300d"),
        Ok(secs(106_751_991_167_300 * 86_400))
    );
}

#[test]
fn signals_parse_like_operand2sig() {
    let cases: [(&str, i32); 24] = [
        ("0", 0),
        ("9", 9),
        ("09", 9),
        ("64", 64),
        ("32", 32),
        ("137", 9),
        ("128", 0),
        ("265", 9),
        ("256", 0),
        ("KILL", 9),
        ("kill", 9),
        ("SIGKILL", 9),
        ("SIGusr1", libc::SIGUSR1),
        ("term", libc::SIGTERM),
        ("IOT", libc::SIGABRT),
        ("CLD", libc::SIGCHLD),
        ("IO", libc::SIGIO),
        ("poll", libc::SIGIO),
        ("EXIT", 0),
        ("sigexit", 0),
        ("SIG9", 9),
        ("sig64", 64),
        ("STKFLT", libc::SIGSTKFLT),
        ("PWR", libc::SIGPWR),
    ];
    for (s, want) in cases {
        assert_eq!(parse_signal(s), Some(want), "{s:?}");
    }
    let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    assert_eq!(parse_signal("RTMIN"), Some(lo));
    assert_eq!(parse_signal("RTMIN+2"), Some(lo + 2));
    assert_eq!(parse_signal("rtmin+2"), Some(lo + 2));
    assert_eq!(parse_signal("SIGRTMIN+2"), Some(lo + 2));
    assert_eq!(parse_signal("RTMIN 2"), Some(lo + 2));
    assert_eq!(parse_signal("RTMIN-0"), Some(lo));
    assert_eq!(parse_signal(&format!("RTMIN+{}", hi - lo)), Some(hi));
    assert_eq!(parse_signal("RTMAX"), Some(hi));
    assert_eq!(parse_signal("RTMAX-1"), Some(hi - 1));
    assert_eq!(parse_signal("RTMAX+0"), Some(hi));
    for s in [
        "",
        "invalid",
        "65",
        "127",
        "200",
        "255",
        "99999999999",
        "4294967305",
        "+1",
        " 1",
        "1 ",
        "0x1",
        "-1",
        "-KILL",
        " KILL",
        "KILL ",
        "SIGSIGKILL",
        "SIG",
        "SIG65",
        "SIG+9",
        "EMT",
        "RTMIN+ 2",
        "RTMIN+",
        "RTMIN ",
        "RTMAX+1",
        "RTMIN-1",
    ] {
        assert_eq!(parse_signal(s), None, "{s:?}");
    }
    assert_eq!(parse_signal(&format!("RTMIN+{}", hi - lo + 1)), None);
}

#[test]
fn signal_names_are_sig2str_names() {
    assert_eq!(signal_name(libc::SIGTERM), "TERM");
    assert_eq!(signal_name(9), "KILL");
    assert_eq!(signal_name(libc::SIGUSR1), "USR1");
    assert_eq!(signal_name(libc::SIGABRT), "ABRT");
    assert_eq!(signal_name(libc::SIGCHLD), "CHLD");
    assert_eq!(signal_name(libc::SIGIO), "POLL");
    assert_eq!(signal_name(libc::SIGSYS), "SYS");
    assert_eq!(signal_name(0), "0");
    assert_eq!(signal_name(32), "32");
    assert_eq!(signal_name(33), "33");
    assert_eq!(signal_name(65), "65");
    assert_eq!(signal_name(-1), "-1");
    let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    assert_eq!(signal_name(lo), "RTMIN");
    assert_eq!(signal_name(lo + 2), "RTMIN+2");
    assert_eq!(signal_name(hi), "RTMAX");
    assert_eq!(signal_name(hi - 1), "RTMAX-1");
    if (lo, hi) == (34, 64) {
        assert_eq!(signal_name(49), "RTMIN+15");
        assert_eq!(signal_name(50), "RTMAX-14");
    }
    for n in (1..=31).chain(lo..=hi) {
        assert_eq!(parse_signal(&signal_name(n)), Some(n), "{n}");
    }
}

#[test]
fn options_before_duration() {
    let t = run(&["-s0", "-k1", "1", "sleep", "5"]);
    assert_eq!(t.signal, 0);
    assert_eq!(t.kill_after, secs(1));
    assert_eq!(t.duration, secs(1));
    assert_eq!(t.command, os(&["sleep", "5"]));
    assert!(!t.verbose && !t.foreground && !t.preserve_status);

    let t = run(&["-vk", "1", "--preserve-status", "2", "cmd", "a", "-b"]);
    assert!(t.verbose && t.preserve_status && !t.foreground);
    assert_eq!(t.kill_after, secs(1));
    assert_eq!(t.duration, secs(2));
    assert_eq!(t.command, os(&["cmd", "a", "-b"]));

    let t = run(&["5", "cmd"]);
    assert_eq!(t.signal, libc::SIGTERM);
    assert_eq!(t.kill_after, Limit::Never);
    assert_eq!(t.duration, secs(5));

    assert!(run(&["--fore", "1", "cmd"]).foreground);
    assert!(run(&["-f", "1", "cmd"]).foreground);
    assert!(run(&["-p", "1", "cmd"]).preserve_status);
    assert!(run(&["--pres", "1", "cmd"]).preserve_status);
    assert!(run(&["--verb", "1", "cmd"]).verbose);
    assert!(run(&["-vfp", "1", "cmd"]).foreground);
    assert_eq!(run(&["--k=1", "1", "cmd"]).kill_after, secs(1));
    assert_eq!(run(&["--kill-after", "2m", "1", "x"]).kill_after, secs(120));
    assert_eq!(run(&["-k", "0", "1", "x"]).kill_after, Limit::Never);
    assert_eq!(run(&["--sig=KILL", "1", "x"]).signal, 9);
    assert_eq!(run(&["--s", "HUP", "1", "x"]).signal, 1);
    assert_eq!(run(&["--signal", "KILL", "1", "x"]).signal, 9);
    assert_eq!(run(&["-sKILL", "1", "x"]).signal, 9);
    assert_eq!(run(&["-s", "SIGusr1", "1", "x"]).signal, libc::SIGUSR1);
    assert_eq!(run(&["-s", "137", "1", "x"]).signal, 9);
    assert_eq!(
        run(&["-s", "RTMIN+2", "1", "x"]).signal,
        libc::SIGRTMIN() + 2
    );
    // The last of a repeated option wins.
    assert_eq!(run(&["-s1", "-s2", "1", "x"]).signal, 2);
}

#[test]
fn options_end_at_the_first_operand() {
    let t = run(&["1", "cmd", "--foreground"]);
    assert!(!t.foreground);
    assert_eq!(t.command, os(&["cmd", "--foreground"]));

    let t = run(&["--", "1", "cmd"]);
    assert_eq!(t.duration, secs(1));
    assert_eq!(t.command, os(&["cmd"]));

    // After `--` even a `--help` is an operand.
    assert_eq!(run(&["1", "--", "x"]).command, os(&["--", "x"]));
    assert_eq!(run(&["1", "-v"]).command, os(&["-v"]));
    assert_eq!(run(&["-v", "--", "1", "--help"]).command, os(&["--help"]));
    assert_eq!(
        err(&["--", "--help", "x"]),
        format!("timeout: invalid time interval '--help'\n{TRY}")
    );
    assert_eq!(
        err(&["-", "x"]),
        format!("timeout: invalid time interval '-'\n{TRY}")
    );
}

#[test]
fn help_and_version() {
    assert_eq!(parse(&os(&["--help"])), Ok(Parsed::Help));
    assert_eq!(parse(&os(&["--version"])), Ok(Parsed::Version));
    assert_eq!(parse(&os(&["-v", "--help", "--bogus"])), Ok(Parsed::Help));
    assert_eq!(parse(&os(&["--he"])), Ok(Parsed::Help));
    assert_eq!(parse(&os(&["--vers", "1", "x"])), Ok(Parsed::Version));
    // Options take effect in order: an error before --help wins.
    assert_eq!(
        err(&["--bogus", "--help"]),
        format!("timeout: unrecognized option '--bogus'\n{TRY}")
    );
    assert_eq!(
        err(&["-s", "x", "--help"]),
        format!("timeout: 'x': invalid signal\n{TRY}")
    );
    // After the DURATION, --help belongs to COMMAND.
    assert_eq!(run(&["1", "x", "--help"]).command, os(&["x", "--help"]));

    let h = help_text();
    assert!(h.starts_with("Usage: timeout [OPTION] DURATION COMMAND [ARG]...\n"));
    for needle in [
        "--foreground",
        "--kill-after=DURATION",
        "--preserve-status",
        "--signal=SIGNAL",
        "--verbose",
        "--help",
        "--version",
        "124",
        "125",
        "126",
        "127",
        "137",
        "escapees",
        "REA_AUDIT_LOG",
        "$TMPDIR/rea-timeout-*.jsonl",
        "REA_CONTAIN",
    ] {
        assert!(h.contains(needle), "help lacks {needle:?}");
    }
    assert!(h.ends_with('\n'));
}

#[test]
fn error_texts_are_coreutils_texts() {
    let cases: [(&[&str], &str); 21] = [
        (&["--signal=", "1", "x"], "timeout: '': invalid signal"),
        (
            &["--signal=invalid", "1", "sleep", "0"],
            "timeout: 'invalid': invalid signal",
        ),
        (&["-s", "65", "1", "x"], "timeout: '65': invalid signal"),
        (
            &["--kill-after=invalid", "1", "x"],
            "timeout: invalid time interval 'invalid'",
        ),
        (&["-k", "", "1", "x"], "timeout: invalid time interval ''"),
        (
            &["invalid", "sleep", "0"],
            "timeout: invalid time interval 'invalid'",
        ),
        (&["42D", "x"], "timeout: invalid time interval '42D'"),
        (&[" -0.1", "x"], "timeout: invalid time interval ' -0.1'"),
        (
            &["--kill-after"],
            "timeout: option '--kill-after' requires an argument",
        ),
        (
            &["--k"],
            "timeout: option '--kill-after' requires an argument",
        ),
        (
            &["--signal"],
            "timeout: option '--signal' requires an argument",
        ),
        (&["-k"], "timeout: option requires an argument -- 'k'"),
        (&["-vs"], "timeout: option requires an argument -- 's'"),
        (&["-z"], "timeout: invalid option -- 'z'"),
        (&["-vz", "1", "x"], "timeout: invalid option -- 'z'"),
        (&["-v-"], "timeout: invalid option -- '-'"),
        (&["-0", "x"], "timeout: invalid option -- '0'"),
        (&["--bogus"], "timeout: unrecognized option '--bogus'"),
        (&["--bogus=1"], "timeout: unrecognized option '--bogus=1'"),
        (
            &["--preserve-status=x", "1", "x"],
            "timeout: option '--preserve-status' doesn't allow an argument",
        ),
        (
            &["--f=", "1", "x"],
            "timeout: option '--foreground' doesn't allow an argument",
        ),
    ];
    for (args, first) in cases {
        assert_eq!(err(args), format!("{first}\n{TRY}"), "{args:?}");
    }
    assert_eq!(
        err(&["--ver=1"]),
        format!(
            "timeout: option '--ver=1' is ambiguous; possibilities: '--verbose' '--version'\n{TRY}"
        )
    );
    assert_eq!(
        err(&["--=x", "1", "x"]),
        format!(
            "timeout: option '--=x' is ambiguous; possibilities: '--foreground' \
             '--kill-after' '--preserve-status' '--signal' '--verbose' '--help' \
             '--version'\n{TRY}"
        )
    );
    // A missing operand: coreutils prints only the Try line.
    for args in [&[][..], &["1"], &["-v", "1"], &["--", "1"], &["-k", "1"]] {
        assert_eq!(err(args), TRY, "{args:?}");
    }
    // Missing operands win over a bad DURATION (checked first).
    assert_eq!(err(&["invalid"]), TRY);
}

#[test]
fn values_are_quoted_as_in_the_c_locale() {
    assert_eq!(quote(b"a'b"), r"'a\'b'");
    assert_eq!(quote(b"a\\b"), r"'a\\b'");
    assert_eq!(quote(b"a\"b c"), "'a\"b c'");
    assert_eq!(quote(b"\t\n\x01\x7f"), r"'\t\n\001\177'");
    assert_eq!(quote("é".as_bytes()), r"'\303\251'");
    assert_eq!(
        err(&["a\tb", "x"]),
        format!("timeout: invalid time interval 'a\\tb'\n{TRY}")
    );
    assert_eq!(
        err(&["-s", "a'b", "1", "x"]),
        format!("timeout: 'a\\'b': invalid signal\n{TRY}")
    );
}

#[test]
fn non_utf8_arguments_are_kept_or_refused_never_panic() {
    use std::os::unix::ffi::OsStringExt;
    let raw = OsString::from_vec(vec![b'x', 0xff]);
    let t = match parse(&[OsString::from("1"), raw.clone(), raw.clone()]) {
        Ok(Parsed::Run(t)) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(t.command, vec![raw.clone(), raw.clone()]);
    assert_eq!(
        parse(&[raw.clone(), OsString::from("x")]).map_err(|e| e.to_string()),
        Err(format!("timeout: invalid time interval 'x\\377'\n{TRY}"))
    );
}
