//! The signal dispositions the process was started with, and the mask the
//! watchdog reads its signals through (docs/guarantees.md).
//!
//! Two facts about what a caller hands over:
//! - Ignored dispositions survive exec. timeout(1) keeps them for its
//!   command (`trap '' PIPE; timeout 5 yes | head -1` makes `yes` report a
//!   broken pipe), so `exec` does too; they are read here before the
//!   watchdog changes any.
//! - Rust's runtime sets SIGPIPE to SIG_IGN before `main`, so what the
//!   caller gave for SIGPIPE is gone by then. The binary records it from an
//!   `.init_array` constructor, which runs before the runtime's setup, by
//!   calling [`note_sigpipe_before_main`].

use std::sync::atomic::{AtomicU8, Ordering};

use nix::sys::signal::{SigSet, Signal};

/// 0: not recorded (the library used from another program), 1: default,
/// 2: ignored.
static SIGPIPE_AT_START: AtomicU8 = AtomicU8::new(0);

/// Records SIGPIPE's disposition. Only for a constructor that runs before
/// Rust's runtime: plain syscalls, no allocation.
pub fn note_sigpipe_before_main() {
    if let Some(ignored) = is_ignored(libc::SIGPIPE) {
        SIGPIPE_AT_START.store(if ignored { 2 } else { 1 }, Ordering::Relaxed);
    }
}

fn is_ignored(sig: i32) -> Option<bool> {
    // SAFETY: a zeroed sigaction is a valid out-buffer; a null new action
    // only queries.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return None;
        }
        Some(old.sa_sigaction == libc::SIG_IGN)
    }
}

/// Signals 1..=64 as a bit set (bit N-1 for signal N).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalBits(pub u64);

impl SignalBits {
    /// The set of these signal numbers (those outside 1..=64 left out).
    pub fn of(sigs: &[i32]) -> SignalBits {
        let bits = sigs
            .iter()
            .filter(|s| (1..=64).contains(*s))
            .fold(0u64, |b, s| b | 1 << (s - 1));
        SignalBits(bits)
    }

    pub fn contains(self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.0 & (1u64 << (sig - 1)) != 0
    }

    /// The signal numbers in the set, ascending.
    pub fn numbers(self) -> Vec<i32> {
        (1..=64).filter(|&s| self.contains(s)).collect()
    }
}

/// The signals whose disposition is SIG_IGN now (SIGPIPE as the caller
/// gave it, when the binary recorded it; SIGCHLD never: an ignored SIGCHLD
/// makes children reap themselves, which no job should inherit either).
/// Read before the watchdog changes any.
pub fn ignored_now() -> SignalBits {
    let mut bits = 0u64;
    for sig in 1..=64 {
        let ignored = match sig {
            libc::SIGCHLD | libc::SIGKILL | libc::SIGSTOP => false,
            libc::SIGPIPE => SIGPIPE_AT_START.load(Ordering::Relaxed) == 2,
            _ => is_ignored(sig).unwrap_or(false),
        };
        if ignored {
            bits |= 1 << (sig - 1);
        }
    }
    SignalBits(bits)
}

/// Gives SIGCHLD its default disposition: a caller's `trap '' CHLD` is
/// inherited across exec and would make the kernel reap every child
/// itself, so that no exit would ever be seen.
pub fn reset_sigchld() -> std::io::Result<()> {
    // SAFETY: installing SIG_DFL for SIGCHLD; no handler code of ours.
    if unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Every signal the watchdog reads from its signalfd: all that can be
/// blocked (glibc's own two excepted by `sigfillset`), but SIGPIPE. A
/// blocked signal is queued even where its disposition is SIG_IGN, so
/// SIGPIPE stays out: it is what the watchdog's own write to a closed pipe
/// raises, answered by EPIPE, and never anybody's request.
pub fn watched() -> SigSet {
    let mut set = SigSet::all();
    set.remove(Signal::SIGPIPE);
    set
}

/// The kernel's `struct sigaction` (handler, flags, restorer, mask), as
/// `rt_sigaction` takes it on the 64-bit Linux targets.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Sets `sig`'s disposition with the raw syscall (glibc's wrapper refuses
/// its own two). Async-signal-safe: also for a child between fork and exec.
fn raw_disposition(sig: i32, handler: libc::sighandler_t) -> bool {
    let act = KernelSigaction {
        handler,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: a valid kernel sigaction for SIG_IGN/SIG_DFL (no handler
    // code, no restorer needed), no old-action buffer, the kernel's 8-byte
    // sigset size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &act as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            8usize,
        )
    };
    r == 0
}

/// glibc keeps signals 32 and 33 for itself: `sigfillset` leaves them out
/// of every mask and `signal` refuses them, so their default action
/// (terminate) would stay, and `kill -32` would end the watchdog. They are
/// ignored instead (the watchdog never cancels a thread nor calls
/// setuid, the two uses glibc has for them).
pub fn ignore_glibc_reserved() {
    for sig in [32, 33] {
        raw_disposition(sig, libc::SIG_IGN);
    }
}

/// For a job, between fork and exec: 32 and 33 back to their default (an
/// ignored disposition would survive exec).
pub fn default_glibc_reserved() {
    for sig in [32, 33] {
        raw_disposition(sig, libc::SIG_DFL);
    }
}

/// Blocks [`watched`] in this thread, as early as a subcommand that will
/// become a watchdog is known (before the first record, so a signal sent
/// right after the start waits in the queue instead of killing it), and
/// ignores glibc's reserved two.
pub fn block_early() {
    ignore_glibc_reserved();
    let _ = watched().thread_block();
}

/// Ends this process by `sig`, as timeout(1) passes on its command's
/// death by a signal it did not send: the caller (a shell's `$?`, a
/// supervisor's `WIFSIGNALED`) sees the same death. The default action is
/// restored, core dumps are disabled (the command may have dumped one;
/// this process has nothing to dump), the signal is sent through this
/// process's own verified pidfd (the crate's one way to signal) and
/// unblocked. Returns only when that did not end the process (a signal
/// whose default is not to terminate, or no pidfd): the caller then exits
/// with 128 + `sig`.
pub fn die_of(sig: i32) {
    use crate::process::identity::self_start_time;
    use crate::process::pidfd::bind_ident;
    let Ok(start_time) = self_start_time() else {
        return;
    };
    let me = crate::vocab::Ident {
        pid: std::process::id() as i32,
        start_time,
        uid: nix::unistd::getuid().as_raw(),
    };
    let Ok(fd) = bind_ident(me) else {
        return;
    };
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) and setrlimit on a local struct;
    // both only change this process's own attributes.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
    raw_disposition(sig, libc::SIG_DFL);
    if fd.signal_number(sig).is_err() {
        return;
    }
    // SAFETY: a sigset_t on the stack, filled by sigemptyset/sigaddset
    // before pthread_sigmask reads it; no old-mask buffer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}
