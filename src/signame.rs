//! Signal names as coreutils spells them (gnulib's sig2str and str2sig):
//! the one table that `timeout -s`, `timeout -v` and the records' [`Sig`]
//! share, so a signal is spelled the same on the command line, on stderr
//! and in the audit log.
//!
//! [`Sig`]: crate::vocab::Sig

/// Linux signal names as gnulib's sig2str table has them: the first entry
/// of a number is the name [`name`] gives it.
#[rustfmt::skip]
const NAMES: [(&str, i32); 35] = [
    ("HUP", libc::SIGHUP), ("INT", libc::SIGINT), ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL), ("TRAP", libc::SIGTRAP), ("ABRT", libc::SIGABRT),
    ("FPE", libc::SIGFPE), ("KILL", libc::SIGKILL), ("SEGV", libc::SIGSEGV),
    ("BUS", libc::SIGBUS), ("PIPE", libc::SIGPIPE), ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM), ("USR1", libc::SIGUSR1), ("USR2", libc::SIGUSR2),
    ("CHLD", libc::SIGCHLD), ("URG", libc::SIGURG), ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP), ("CONT", libc::SIGCONT), ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU), ("SYS", libc::SIGSYS), ("POLL", libc::SIGIO),
    ("VTALRM", libc::SIGVTALRM), ("PROF", libc::SIGPROF), ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ), ("IOT", libc::SIGABRT), ("CLD", libc::SIGCHLD),
    ("PWR", libc::SIGPWR), ("WINCH", libc::SIGWINCH), ("IO", libc::SIGIO),
    ("STKFLT", libc::SIGSTKFLT), ("EXIT", 0),
];

/// The largest signal number (`NSIG - 1` on Linux).
pub const SIGNUM_BOUND: i64 = 64;

/// All of `s` as a decimal number (digits only), `None` on overflow.
pub fn decimal(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0i64, |a, &d| {
        a.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })
}

/// C `strtol(s, &end, 10)` that must use all of `s`: white space, a sign,
/// digits; the empty string is 0 (strtol converts nothing and stops at the
/// end, as it does on `" "`, which is therefore refused). `None` on
/// anything else or overflow.
fn strtol_all(s: &[u8]) -> Option<i64> {
    if s.is_empty() {
        return Some(0);
    }
    let s = &s[s.iter().take_while(|&&b| c_isspace(b)).count()..];
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let v = decimal(digits)?;
    Some(if neg { -v } else { v })
}

/// gnulib str2sig on an upper-cased name (without `SIG`): a number up
/// to [`SIGNUM_BOUND`], a name of the table, or a real-time spelling.
pub fn str2sig(name: &[u8]) -> Option<i32> {
    if name.first().is_some_and(u8::is_ascii_digit) {
        let n = decimal(name)?;
        return (n <= SIGNUM_BOUND).then_some(n as i32);
    }
    if let Some(&(_, n)) = NAMES.iter().find(|(nm, _)| nm.as_bytes() == name) {
        return Some(n);
    }
    let (lo, hi) = (i64::from(libc::SIGRTMIN()), i64::from(libc::SIGRTMAX()));
    if let Some(rest) = name.strip_prefix(b"RTMIN") {
        let n = strtol_all(rest)?;
        return (0 <= n && n <= hi - lo).then_some((lo + n) as i32);
    }
    if let Some(rest) = name.strip_prefix(b"RTMAX") {
        let n = strtol_all(rest)?;
        return (lo - hi <= n && n <= 0).then_some((hi + n) as i32);
    }
    None
}

/// The name timeout -v prints for a signal: the first sig2str name
/// ("TERM", "KILL", "USR1"; 6 is "ABRT", 17 "CHLD", 29 "POLL", 31 "SYS"),
/// "RTMIN", "RTMIN+N" for the lower half of the real-time signals,
/// "RTMAX-N", "RTMAX" for the upper half, and the decimal number for one
/// with no name (32, 33) and for 0 ("0", as coreutils 9.10 and later print
/// it, not "EXIT").
pub fn name(sig: i32) -> String {
    if sig != 0 {
        if let Some(&(name, _)) = NAMES.iter().find(|&&(_, n)| n == sig) {
            return name.to_string();
        }
        let (lo, hi) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        if (lo..=hi).contains(&sig) {
            let (base, name) = if sig <= lo + (hi - lo) / 2 {
                (lo, "RTMIN")
            } else {
                (hi, "RTMAX")
            };
            return match sig - base {
                0 => name.to_string(),
                d => format!("{name}{d:+}"),
            };
        }
    }
    sig.to_string()
}

/// C `isspace` in the C locale: space, `\t`, `\n`, `\v`, `\f`, `\r`.
pub fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}
