//! What stops an action from outside the tree: a signal to the watchdog
//! (SIGTERM, SIGINT, SIGQUIT, SIGHUP, read from the signalfd) and the root
//! controller's exit (its pidfd turns readable). SIGCHLD arrives on the
//! same signalfd and only says "reap now".

use std::os::fd::{AsFd, AsRawFd};

use mio::{Interest, Token};
use nix::sys::signalfd::SignalFd;

use super::effect::Effects;
use super::sources::{Source, Sources};
use super::stop::Trigger;
use crate::process::pidfd::VerifiedPidFd;
use crate::vocab::Ident;

pub struct External {
    signals: SignalFd,
    root: VerifiedPidFd,
    /// `None` once the root's exit was seen (its pidfd stays readable).
    root_token: Option<Token>,
}

impl External {
    /// Registers the signalfd and the root's pidfd with the loop.
    pub fn new(
        signals: SignalFd,
        root: VerifiedPidFd,
        src: &mut Sources,
    ) -> Result<External, String> {
        let fd = signals.as_fd().as_raw_fd();
        src.add(fd, Source::Signals, Interest::READABLE)
            .map_err(|e| format!("signalfd: {e}"))?;
        let fd = root.as_fd().as_raw_fd();
        let root_token = src
            .add(fd, Source::Root, Interest::READABLE)
            .map_err(|e| format!("root pidfd: {e}"))?;
        let root_token = Some(root_token);
        Ok(External {
            signals,
            root,
            root_token,
        })
    }

    /// The root controller's identity (the caller of its own requests).
    pub fn root(&self) -> Ident {
        self.root.ident()
    }

    pub fn root_alive(&self) -> bool {
        !self.root.has_exited()
    }

    /// Reads every pending signal: a `signal` trigger for each stop signal;
    /// returns whether SIGCHLD was among them.
    pub fn on_signals(&mut self, fx: &mut Effects) -> bool {
        let mut children = false;
        loop {
            match self.signals.read_signal() {
                Ok(Some(info)) if info.ssi_signo as i32 == libc::SIGCHLD => children = true,
                Ok(Some(info)) => fx.trigger(Trigger::signal(info.ssi_signo as i32)),
                Ok(None) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        children
    }

    /// The root's pidfd is readable: a `root_lost` trigger, once.
    pub fn on_root(&mut self, src: &mut Sources, fx: &mut Effects) {
        if !self.root.has_exited() {
            return;
        }
        if let Some(t) = self.root_token.take() {
            src.remove(t, self.root.as_fd().as_raw_fd());
            fx.trigger(Trigger::root_lost(self.root.proc()));
        }
    }
}
