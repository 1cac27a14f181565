//! coreutils timeout(1)'s command line, parsed exactly (coreutils 9.11).
//!
//! Options are read like `getopt_long` with optstring `"+fk:ps:v"`
//! (`-f`, `-p`: POSIX.1-2024, coreutils 9.6+): DURATION or `--` ends them,
//! short ones cluster (`-vk1`), long ones take `--opt=VAL` or `--opt VAL`
//! and may be any unique prefix. They take effect in order: the first bad
//! one is reported, and a `--help` after it is never seen.
//!
//! An `Err` of [`parse`] is the whole text coreutils writes to stderr but
//! for two deliberate differences: the program name is always `timeout`
//! (coreutils uses argv\[0\] as typed), and values are quoted as in the C
//! locale (`'x'`, never `‘x’`; see [`quote`]). A non-UTF-8 byte in an
//! option name is shown as U+FFFD.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

pub use crate::signame::name as signal_name;
use crate::signame::{c_isspace, decimal, str2sig, SIGNUM_BOUND};

/// When the command is timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// No time-out: the duration was 0, infinite, or above
    /// [`MAX_SECONDS`].
    Never,
    /// Time out after this long; never zero (an underflow is 1 ns).
    After(Duration),
}

/// The largest duration kept as [`Limit::After`], in seconds (`i64::MAX`,
/// `u64::MAX / 2`, the largest a `time_t` timer takes); anything longer is
/// [`Limit::Never`].
pub const MAX_SECONDS: u64 = u64::MAX / 2;

/// A command line that runs a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutArgs {
    /// The DURATION operand.
    pub duration: Limit,
    /// `-k`/`--kill-after`: how long after the first signal KILL follows;
    /// [`Limit::Never`] when absent or 0.
    pub kill_after: Limit,
    /// `-s`/`--signal`: the signal sent at the time-out (`SIGTERM` unless
    /// given; 0, a liveness check only, is allowed).
    pub signal: i32,
    /// `-p`/`--preserve-status`: exit with COMMAND's status after a time-out.
    pub preserve_status: bool,
    /// `-f`/`--foreground`: leave COMMAND in timeout's process group.
    pub foreground: bool,
    /// `-v`/`--verbose`: report each signal sent on stderr.
    pub verbose: bool,
    /// COMMAND and its arguments, as given; never empty.
    pub command: Vec<OsString>,
}

/// What a valid command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run the command.
    Run(TimeoutArgs),
    /// `--help` came among the options, before any bad one and before
    /// `--version`: print [`help_text`], exit 0.
    Help,
    /// `--version` came among the options, before any bad one and before
    /// `--help`: print the version, exit 0.
    Version,
}

const TRY: &str = "Try 'timeout --help' for more information.";

/// coreutils' long option table, in its order (the order ambiguity
/// messages list them in): name, the short option it is (`h` and `V`
/// stand for `--help` and `--version`, which have none), whether it takes
/// a value.
const LONG: [(&str, u8, bool); 7] = [
    ("foreground", b'f', false),
    ("kill-after", b'k', true),
    ("preserve-status", b'p', false),
    ("signal", b's', true),
    ("verbose", b'v', false),
    ("help", b'h', false),
    ("version", b'V', false),
];

/// Why timeout's arguments were refused; its `Display` is the exact
/// stderr text coreutils prints (without the last newline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageError {
    /// Fewer than two operands: only the `Try 'timeout --help'` line.
    MissingOperand,
    /// `--NAME` that abbreviates no long option (the argument after `--`).
    Unrecognized(Vec<u8>),
    /// `--NAME` that abbreviates several: the argument and the candidates.
    Ambiguous {
        body: Vec<u8>,
        names: Vec<&'static str>,
    },
    /// `--NAME=VALUE` for an option without a value.
    TakesNoArgument(&'static str),
    /// `--NAME` without its value at the end of the arguments.
    LongNeedsArgument(&'static str),
    /// `-C` for a letter timeout does not know.
    InvalidShort(u8),
    /// `-k` or `-s` without its value at the end of the arguments.
    ShortNeedsArgument(u8),
    /// A DURATION or `--kill-after` value that is not one.
    InvalidInterval(Vec<u8>),
    /// A `--signal` value that names no signal.
    InvalidSignal(Vec<u8>),
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self != UsageError::MissingOperand {
            f.write_str("timeout: ")?;
        }
        match self {
            UsageError::MissingOperand => return f.write_str(TRY),
            UsageError::Unrecognized(body) => write!(f, "unrecognized option '--{}'", lossy(body)),
            UsageError::Ambiguous { body, names } => {
                let list: Vec<String> = names.iter().map(|n| format!("'--{n}'")).collect();
                write!(
                    f,
                    "option '--{}' is ambiguous; possibilities: {}",
                    lossy(body),
                    list.join(" ")
                )
            }
            UsageError::TakesNoArgument(long) => {
                write!(f, "option '--{long}' doesn't allow an argument")
            }
            UsageError::LongNeedsArgument(long) => {
                write!(f, "option '--{long}' requires an argument")
            }
            UsageError::InvalidShort(c) => write!(f, "invalid option -- '{}'", lossy(&[*c])),
            UsageError::ShortNeedsArgument(c) => {
                write!(f, "option requires an argument -- '{}'", *c as char)
            }
            UsageError::InvalidInterval(s) => write!(f, "invalid time interval {}", quote(s)),
            UsageError::InvalidSignal(s) => write!(f, "{}: invalid signal", quote(s)),
        }?;
        write!(f, "\n{TRY}")
    }
}

impl std::error::Error for UsageError {}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Parses timeout's arguments (argv without argv\[0\]).
///
/// `Ok` is what to do; `Err` is the exact stderr text coreutils prints
/// (without the last newline), after which timeout exits 125. With fewer
/// than two operands (no DURATION or no COMMAND) coreutils prints only the
/// `Try 'timeout --help'` line, and so does this.
pub fn parse(args: &[OsString]) -> Result<Parsed, UsageError> {
    let mut t = TimeoutArgs {
        duration: Limit::Never,
        kill_after: Limit::Never,
        signal: libc::SIGTERM,
        preserve_status: false,
        foreground: false,
        verbose: false,
        command: Vec::new(),
    };
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let arg = arg.as_bytes();
        if arg == b"--" {
            i += 1;
            break;
        }
        if arg.len() < 2 || arg[0] != b'-' {
            break;
        }
        i += 1;
        if arg[1] == b'-' {
            let body = &arg[2..];
            let (name, inline) = match body.iter().position(|&b| b == b'=') {
                Some(eq) => (&body[..eq], Some(&body[eq + 1..])),
                None => (body, None),
            };
            let (long, opt, takes) = find_long(name, body)?;
            if !takes && inline.is_some() {
                return Err(UsageError::TakesNoArgument(long));
            }
            let value = match (inline, takes) {
                (Some(v), _) => Some(v),
                (None, false) => None,
                (None, true) => {
                    let v = args.get(i).ok_or(UsageError::LongNeedsArgument(long))?;
                    i += 1;
                    Some(v.as_bytes())
                }
            };
            if let Some(done) = apply(&mut t, opt, value)? {
                return Ok(done);
            }
            continue;
        }
        let mut j = 1;
        while let Some(&c) = arg.get(j) {
            j += 1;
            if !b"fkpsv".contains(&c) {
                return Err(UsageError::InvalidShort(c));
            }
            if c == b'k' || c == b's' {
                let value = if j < arg.len() {
                    &arg[j..]
                } else if let Some(v) = args.get(i) {
                    i += 1;
                    v.as_bytes()
                } else {
                    return Err(UsageError::ShortNeedsArgument(c));
                };
                apply(&mut t, c, Some(value))?;
                break;
            }
            apply(&mut t, c, None)?;
        }
    }
    let rest = &args[i.min(args.len())..];
    let (Some(duration), Some(_)) = (rest.first(), rest.get(1)) else {
        return Err(UsageError::MissingOperand);
    };
    t.duration =
        duration_of(duration.as_bytes()).ok_or_else(|| bad_interval(duration.as_bytes()))?;
    t.command = rest[1..].to_vec();
    Ok(Parsed::Run(t))
}

/// The long option NAME abbreviates (an exact name wins over prefixes);
/// `body` is the whole argument after `--`, for the messages.
fn find_long(name: &[u8], body: &[u8]) -> Result<(&'static str, u8, bool), UsageError> {
    if let Some(&found) = LONG.iter().find(|(n, _, _)| n.as_bytes() == name) {
        return Ok(found);
    }
    let hits: Vec<_> = LONG
        .iter()
        .filter(|(n, _, _)| n.as_bytes().starts_with(name))
        .collect();
    match hits.as_slice() {
        [] => Err(UsageError::Unrecognized(body.to_vec())),
        [&one] => Ok(one),
        many => Err(UsageError::Ambiguous {
            body: body.to_vec(),
            names: many.iter().map(|(n, _, _)| *n).collect(),
        }),
    }
}

/// Applies one option; `Some` when it was `--help` or `--version`.
fn apply(t: &mut TimeoutArgs, opt: u8, value: Option<&[u8]>) -> Result<Option<Parsed>, UsageError> {
    let value = value.unwrap_or_default();
    match opt {
        b'f' => t.foreground = true,
        b'p' => t.preserve_status = true,
        b'v' => t.verbose = true,
        b'k' => t.kill_after = duration_of(value).ok_or_else(|| bad_interval(value))?,
        b's' => {
            t.signal = signal_of(value).ok_or_else(|| UsageError::InvalidSignal(value.to_vec()))?
        }
        b'h' => return Ok(Some(Parsed::Help)),
        _ => return Ok(Some(Parsed::Version)), // b'V'
    }
    Ok(None)
}

fn bad_interval(s: &[u8]) -> UsageError {
    UsageError::InvalidInterval(s.to_vec())
}

/// `s` quoted as coreutils' quote() does in the C locale: in single quotes;
/// `'` and `\` backslashed; `\a \b \f \n \r \t \v` as those escapes; any
/// other byte outside printable ASCII (0x20..=0x7e) as three octal digits
/// (`é` is `\303\251`).
pub fn quote(s: &[u8]) -> String {
    const ESC: &[u8] = b"''\\\\\x07a\x08b\x0cf\nn\rr\tt\x0bv";
    let mut out = String::from("'");
    for &b in s {
        match ESC.chunks(2).find(|e| e[0] == b) {
            Some(e) => out.extend(['\\', e[1] as char]),
            None if (0x20..=0x7e).contains(&b) => out.push(b as char),
            None => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('\'');
    out
}

/// Parses a DURATION like coreutils: C `strtod` (leading white space, an
/// optional `+`, decimal or hex with fraction and exponent, `inf` or
/// `infinity` in any case) then at most one suffix of `s`, `m`, `h`, `d`.
///
/// `Ok(Never)` for zero, infinity, or more than [`MAX_SECONDS`]; otherwise
/// `Ok(After(d))` with `d` the value rounded up to the nanosecond (exact
/// decimal arithmetic, no float rounding: `10.34` is 10.34 s, and
/// `1e-10000`, nonzero but under 1 ns, is 1 ns). `Err(())` when it is not
/// a duration, including anything negative: a `-` sign is refused even on
/// zero (`-0`), which coreutils 9.11 would take as 0.
#[allow(clippy::result_unit_err)] // the brief's signature: no detail to carry
pub fn parse_duration(s: &str) -> Result<Limit, ()> {
    duration_of(s.as_bytes()).ok_or(())
}

/// A scanned number: zero, infinite, or its digits (most significant
/// first, one per byte, leading zeros dropped) with a power: `Dec(d, e)` is
/// `d × 10^e`, `Hex(d, e)` is `d × 2^e` (`d` in base 16).
enum Num {
    Zero,
    Inf,
    Dec(Vec<u8>, i64),
    Hex(Vec<u8>, i64),
}

/// Bound on exponents, far beyond any that matters, so sums cannot overflow.
const EXP_CAP: i64 = 1 << 40;

const NS: u128 = 1_000_000_000;

fn duration_of(s: &[u8]) -> Option<Limit> {
    let mut p = s.iter().take_while(|&&b| c_isspace(b)).count();
    match s.get(p) {
        Some(b'-') => return None,
        Some(b'+') => p += 1,
        _ => {}
    }
    let (num, used) = scan_number(&s[p..])?;
    let mult: u64 = match &s[p + used..] {
        b"" | b"s" => 1,
        b"m" => 60,
        b"h" => 3600,
        b"d" => 86_400,
        _ => return None,
    };
    // Nanoseconds, rounded up: the digits times mult × 10^9, exactly; a
    // binary exponent is first made a multiple of 4 (a hex digit).
    let f = mult * 1_000_000_000;
    let ns = match num {
        Num::Zero | Num::Inf => return Some(Limit::Never),
        Num::Dec(mut d, e) => {
            mul_small(&mut d, 10, f);
            pow_ceil(&d, 10, e, 29)
        }
        Num::Hex(mut d, e) => {
            mul_small(&mut d, 16, f << e.rem_euclid(4));
            pow_ceil(&d, 16, e.div_euclid(4), 24)
        }
    };
    match ns {
        Some(ns) if ns <= u128::from(MAX_SECONDS) * NS => {
            let secs = u64::try_from(ns / NS).ok()?;
            Some(Limit::After(Duration::new(secs, (ns % NS) as u32)))
        }
        _ => Some(Limit::Never),
    }
}

/// The longest prefix of `s` that C `strtod` converts (after the sign),
/// and its length; `None` when there is none (`""`, `.`, `x`). `nan` is
/// refused here too: coreutils rejects a NaN whatever follows it.
fn scan_number(s: &[u8]) -> Option<(Num, usize)> {
    let lower = |n: usize| s.get(..n).map(|h| h.to_ascii_lowercase());
    if lower(3).as_deref() == Some(b"inf") {
        let used = 3 + 5 * usize::from(lower(8).as_deref() == Some(b"infinity"));
        return Some((Num::Inf, used));
    }
    if lower(2).as_deref() == Some(b"0x") {
        if let Some((num, used)) = scan_digits(&s[2..], 16) {
            return Some((num, used + 2));
        }
    }
    scan_digits(s, 10)
}

/// The length of the run of base-`base` digits at `s[p..]`.
fn run(s: &[u8], p: usize, base: u32) -> usize {
    let rest = s.get(p..).unwrap_or_default();
    rest.iter()
        .take_while(|&&b| (b as char).is_digit(base))
        .count()
}

/// An exponent (`e-5`, `p+3`) at `s[p..]` if one is there: its value
/// (bounded by [`EXP_CAP`]) and the bytes it takes; else (0, 0), as strtod
/// leaves an `e` without digits unread.
fn scan_exp(s: &[u8], p: usize, marks: &[u8]) -> (i64, usize) {
    if !s.get(p).is_some_and(|b| marks.contains(b)) {
        return (0, 0);
    }
    let (neg, q) = match s.get(p + 1) {
        Some(b'-') => (true, p + 2),
        Some(b'+') => (false, p + 2),
        _ => (false, p + 1),
    };
    let n = run(s, q, 10);
    if n == 0 {
        return (0, 0);
    }
    let v = s[q..q + n]
        .iter()
        .fold(0i64, |a, &d| (a * 10 + i64::from(d - b'0')).min(EXP_CAP));
    (if neg { -v } else { v }, q + n - p)
}

/// `d+[.d*]` or `.d+` in `base`, then its exponent (`e`, decimal, for base
/// 10; `p`, binary, for base 16); `None` when there is no digit.
fn scan_digits(s: &[u8], base: u32) -> Option<(Num, usize)> {
    let n_int = run(s, 0, base);
    let mut p = n_int;
    let mut n_frac = 0;
    if s.get(p) == Some(&b'.') {
        n_frac = run(s, p + 1, base);
        if n_int + n_frac > 0 {
            p += 1 + n_frac;
        }
    }
    if n_int + n_frac == 0 {
        return None;
    }
    let (e, used) = scan_exp(s, p, if base == 10 { b"eE" } else { b"pP" });
    let digits: Vec<u8> = s[..p]
        .iter()
        .filter_map(|&b| (b as char).to_digit(base))
        .map(|d| d as u8)
        .skip_while(|&d| d == 0)
        .collect();
    let num = match (digits.is_empty(), base) {
        (true, _) => Num::Zero,
        (false, 10) => Num::Dec(digits, e - n_frac as i64),
        (false, _) => Num::Hex(digits, e - 4 * n_frac as i64),
    };
    Some((num, p + used))
}

/// `d *= f` for a digit vector in `base` (`f` ≤ 8 × 86 400 × 10^9).
fn mul_small(d: &mut Vec<u8>, base: u64, f: u64) {
    let mut carry = 0u64;
    for x in d.iter_mut().rev() {
        let v = u64::from(*x) * f + carry;
        *x = (v % base) as u8;
        carry = v / base;
    }
    while carry > 0 {
        d.insert(0, (carry % base) as u8);
        carry /= base;
    }
}

/// ⌈int(d) × base^e⌉ for the digits `d`, or `None` when at least
/// base^max (chosen above the cap, and so that anything below fits).
fn pow_ceil(d: &[u8], base: u128, e: i64, max: i64) -> Option<u128> {
    if d.len() as i64 + e > max {
        return None;
    }
    let keep = (d.len() as i64 + e.min(0)).max(0) as usize;
    let v = d[..keep]
        .iter()
        .fold(0u128, |a, &x| a * base + u128::from(x));
    let up = d[keep..].iter().any(|&x| x != 0);
    v.checked_mul(base.pow(e.max(0) as u32))
        .map(|v| v + u128::from(up))
}

/// Parses a SIGNAL like coreutils' operand2sig.
///
/// A string starting with a digit is a decimal number (nothing else may
/// follow); like a shell's `$?` it is masked, `& 0x7f` below 255 and
/// `& 0xff` from 255 on, so `137` is 9 (KILL), `128` is 0 and `265` is 9.
/// Otherwise a name, any case, with or without `SIG`: those of
/// [`signal_name`], the aliases `IOT`, `CLD`, `IO` and `EXIT` (0),
/// `RTMIN`, `RTMIN+N`, `RTMAX`, `RTMAX-N` (`libc::SIGRTMIN()` ..=
/// `SIGRTMAX()`), or `SIG` followed by a number. `Some(n)` when the result
/// is in 0..=64 (unnamed ones such as 32 included, as coreutils 9.5 and
/// later allow); `None` otherwise (`+1`, ` 1`, `0x1`, `-1`, `65`).
pub fn parse_signal(s: &str) -> Option<i32> {
    signal_of(s.as_bytes())
}

fn signal_of(s: &[u8]) -> Option<i32> {
    let n = if s.first().is_some_and(u8::is_ascii_digit) {
        let v = i32::try_from(decimal(s)?).ok()?;
        v & if v >= 0xff { 0xff } else { 0x7f }
    } else {
        let up = s.to_ascii_uppercase();
        match str2sig(&up) {
            Some(n) => n,
            None => str2sig(up.strip_prefix(b"SIG")?)?,
        }
    };
    (0..=SIGNUM_BOUND as i32).contains(&n).then_some(n)
}

/// The text `timeout --help` prints (ending in a newline): usage, options,
/// DURATION, exit statuses, and what rea adds. Our own wording.
pub fn help_text() -> String {
    "\
Usage: timeout [OPTION] DURATION COMMAND [ARG]...
  or:  timeout [OPTION]
Run COMMAND with its arguments, and signal it if it is still running once
DURATION has passed.

A long option may be shortened to any prefix that names only it.

  -f, --foreground           leave COMMAND in timeout's process group: it may
                               read the terminal and gets the terminal's signals
  -k, --kill-after=DURATION  send KILL if COMMAND still runs DURATION after
                               the first signal
  -p, --preserve-status      exit with COMMAND's status even after a time-out
  -s, --signal=SIGNAL        the signal sent at the time-out (default TERM): a
                               name (HUP, SIGUSR1, RTMIN+2; any case) or number
  -v, --verbose              report on stderr each signal sent
      --help                 show this text and exit
      --version              show the version and exit

DURATION is a number, with a fraction or an exponent if wanted, then an
optional unit: s for seconds (the default), m for minutes, h for hours, d
for days. A DURATION of 0 means no time-out.

Exit status:
  124  COMMAND was timed out (and --preserve-status was not given)
  125  timeout itself failed, e.g. on a bad option or value
  126  COMMAND was found but could not be run
  127  COMMAND was not found
  137  KILL was needed to end COMMAND (128 + 9), or timeout itself got KILL
  otherwise COMMAND's own status, which --preserve-status keeps after a
  time-out too (128 + N when signal N ended it); a COMMAND ended by a
  signal timeout did not send makes timeout end by that signal too

This timeout is rea-watchdog: what it adds to the usual behaviour is that
escapees of COMMAND, processes it started that left its process group or
session, are stopped too, and that every run writes an audit log, to the
file REA_AUDIT_LOG names or else to $TMPDIR/rea-timeout-*.jsonl.
REA_CONTAIN (auto, cgroup, none; default auto) picks the containment, as
rea-watchdog exec's --contain does.
"
    .to_string()
}
