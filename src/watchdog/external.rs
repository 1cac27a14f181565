//! What comes from outside the tree: signals to the watchdog (every
//! catchable one, read from the signalfd) and the root controller's exit
//! (its pidfd turns readable).
//!
//! | signal                 | run                         | exec, timeout          |
//! |------------------------|-----------------------------|------------------------|
//! | CHLD                   | reap now                    | reap now               |
//! | TERM INT QUIT          | stop (`signal`)             | stop (`signal`)        |
//! | HUP                    | stop (`hangup`)             | stop (`hangup`)        |
//! | ALRM                   | recorded, ignored           | the deadline, now      |
//! | any other              | recorded, ignored (1)       | forwarded to the leader|
//!
//! (1) forwarded to every running leader with `--forward-signals`.
//! Forwarded and ignored signals are `signal_received` records, coalesced
//! per signal to one a second ([`Forwarder`]).

use std::os::fd::{AsFd, AsRawFd};

use mio::{Interest, Token};
use nix::sys::signalfd::SignalFd;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::config::Config;
use super::effect::Effects;
use super::jobs::Jobs;
use super::ledger::Ledger;
use super::sources::{Source, Sources};
use super::start::OpenError;
use super::stop::Trigger;
use crate::kinds::watchdog::{Event, SignalReceived, StopReason};
use crate::process::pidfd::VerifiedPidFd;
use crate::vocab::{Ident, Mode};

/// A signal's records are at most one per this long.
const RECORD_EVERY: Duration = Duration::from_secs(1);

pub struct External {
    signals: SignalFd,
    /// `None` for an init or the `timeout` personality (no root bound).
    root: Option<VerifiedPidFd>,
    /// `None` once the root's exit was seen (its pidfd stays readable).
    root_token: Option<Token>,
    mode: Mode,
    /// Under run: forward other signals to the running leaders too.
    forward_run: bool,
    fwd: Forwarder,
}

/// Per signal number: when it was last recorded, and how many deliveries
/// came since without a record of their own.
struct Forwarder {
    last: [Option<Instant>; 65],
    unrecorded: [u64; 65],
    /// The leaders the unrecorded deliveries went to.
    unrecorded_to: [Vec<Ident>; 65],
}

impl Default for Forwarder {
    fn default() -> Forwarder {
        Forwarder {
            last: [None; 65],
            unrecorded: [0; 65],
            unrecorded_to: std::array::from_fn(|_| Vec::new()),
        }
    }
}

impl External {
    /// Registers the signalfd and the root's pidfd with the loop.
    pub fn new(
        signals: SignalFd,
        root: Option<VerifiedPidFd>,
        cfg: &Config,
        src: &mut Sources,
    ) -> Result<External, OpenError> {
        let (mode, forward_run) = (cfg.mode, cfg.forward_signals);
        let fd = signals.as_fd().as_raw_fd();
        src.add(fd, Source::Signals, Interest::READABLE)
            .map_err(OpenError::Signalfd)?;
        let root_token = match &root {
            Some(r) => Some(
                src.add(r.as_fd().as_raw_fd(), Source::Root, Interest::READABLE)
                    .map_err(OpenError::RootPidfd)?,
            ),
            None => None,
        };
        Ok(External {
            signals,
            root,
            root_token,
            mode,
            forward_run,
            fwd: Forwarder::default(),
        })
    }

    /// The root controller's identity (the caller of its own requests), if
    /// one was bound.
    pub fn root(&self) -> Option<Ident> {
        self.root.as_ref().map(|r| r.ident())
    }

    /// False once the root exited, and when there is none.
    pub fn root_alive(&self) -> bool {
        self.root.as_ref().is_some_and(|r| !r.has_exited())
    }

    /// Reads every pending signal and says what each one means (the table
    /// above); returns whether SIGCHLD was among them.
    pub fn on_signals(&mut self, fx: &mut Effects) -> bool {
        let mut children = false;
        loop {
            let sig = match self.signals.read_signal() {
                Ok(Some(info)) => info.ssi_signo as i32,
                Ok(None) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            };
            match sig {
                libc::SIGCHLD => children = true,
                libc::SIGTERM | libc::SIGINT | libc::SIGQUIT | libc::SIGHUP => {
                    fx.trigger(Trigger::signal(sig))
                }
                libc::SIGALRM if self.mode == Mode::Exec => {
                    let detail = "SIGALRM received: the deadline fires now";
                    fx.trigger(Trigger::new(StopReason::Deadline, detail));
                }
                _ => fx.signal(sig),
            }
        }
        children
    }

    /// A signal that is not a stop (real-time ones too): passed to every
    /// running job's leader (under exec; under run with
    /// `--forward-signals`), else only recorded. The first of a burst is
    /// recorded (durably) before it is passed on; later ones within
    /// [`RECORD_EVERY`] are counted, with the leaders they went to, into
    /// that signal's next record, or the one [`External::flush_signals`] writes
    /// before the receipt (a watchdog SIGKILLed before then loses them).
    pub fn forward(&mut self, sig: i32, jobs: &Jobs, ledger: &mut Ledger) {
        let now = Instant::now();
        let forwarding = self.forwarding();
        let to: Vec<&VerifiedPidFd> = match forwarding {
            true => jobs.running().map(|j| &j.leader).collect(),
            false => Vec::new(),
        };
        self.note(
            sig,
            forwarding,
            to.iter().map(|l| l.ident()).collect(),
            ledger,
            now,
        );
        for l in to {
            let _ = l.signal_number(sig); // an exited leader is Ok: its pidfd names it still
        }
    }

    fn note(
        &mut self,
        sig: i32,
        forwarded: bool,
        to: Vec<Ident>,
        ledger: &mut Ledger,
        now: Instant,
    ) {
        let i = sig.clamp(0, 64) as usize;
        match self.fwd.last[i] {
            Some(t) if now.saturating_duration_since(t) < RECORD_EVERY => {
                self.fwd.unrecorded[i] += 1;
                merge(&mut self.fwd.unrecorded_to[i], to);
            }
            _ => {
                let count = std::mem::take(&mut self.fwd.unrecorded[i]) + 1;
                let mut all = std::mem::take(&mut self.fwd.unrecorded_to[i]);
                merge(&mut all, to);
                self.fwd.last[i] = Some(now);
                ledger.record(received(sig, forwarded, all, count));
            }
        }
    }

    /// Records every delivery counted but not yet recorded, before the
    /// receipt. Appended, not synced: they announce nothing the receipt
    /// does not.
    pub fn flush_signals(&mut self, ledger: &mut Ledger) {
        let forwarding = self.forwarding();
        for i in 1..=64usize {
            let n = std::mem::take(&mut self.fwd.unrecorded[i]);
            if n > 0 {
                let to = std::mem::take(&mut self.fwd.unrecorded_to[i]);
                ledger.append(received(i as i32, forwarding, to, n));
            }
        }
    }

    /// Whether signals that are not stops go on to the leaders.
    fn forwarding(&self) -> bool {
        self.mode == Mode::Exec || self.forward_run
    }

    /// The root's pidfd is readable: a `root_lost` trigger, once.
    pub fn on_root(&mut self, src: &mut Sources, fx: &mut Effects) {
        let Some(root) = self.root.as_ref().filter(|r| r.has_exited()) else {
            return;
        };
        if let Some(t) = self.root_token.take() {
            src.remove(t, root.as_fd().as_raw_fd());
            fx.trigger(Trigger::root_lost(root.proc()));
        }
    }
}

/// Adds the leaders in `to` that `seen` lacks (a handful: one per job).
fn merge(seen: &mut Vec<Ident>, to: Vec<Ident>) {
    for x in to {
        if !seen.contains(&x) {
            seen.push(x);
        }
    }
}

fn received(sig: i32, forwarded: bool, to: Vec<Ident>, count: u64) -> Event {
    let name = match Signal::try_from(sig) {
        Ok(s) => s.as_str().to_string(),
        Err(_) => format!("SIG{sig}"),
    };
    Event::SignalReceived(SignalReceived {
        signal: sig,
        name,
        forwarded,
        to,
        count,
    })
}
