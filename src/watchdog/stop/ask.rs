//! The ask step (docs/stop.md): each running job's leader gets its own
//! stop signal and SIGCONT, and nothing else is signalled, until every
//! leader has exited or half the TERM grace has passed (or, under timeout,
//! as long as its `-k` says: [`crate::vocab::AskSpan`]).
//!
//! The leaders are known by identity (pid and start time, from the jobs
//! room), so the step reads no `/proc` scan and no group: each leader is
//! bound by [`bind_ident`] (start time and uid read back through its new
//! pidfd), and a leader asked is known alive while the pidfd it was
//! signalled through is.

use std::collections::HashSet;
use std::time::Instant;

use super::sweep::Part;
use super::{Ask, StopHost, Stopper};
use crate::kinds::watchdog::{AskEnd, AskSpan, Ident, Sig, Uncertainty};
use crate::process::pidfd::{bind_ident, BindError};

impl Stopper {
    /// One ask step: first whether the ask is over (never before it went
    /// out: a first step that comes late, a busy wake-up or a tiny grace,
    /// still asks), then the ask itself if it has not gone out. Leaves the
    /// stage at TERM when the ask is over. Returns whether anything was
    /// signalled.
    pub(super) fn ask_step(&mut self, host: &mut impl StopHost, now: Instant) -> bool {
        let (held, uid) = (&self.held, host.me().uid);
        self.asked.retain(|a| match held.fds.get(&a.pid) {
            Some(fd) if fd.proc().start_time == a.start_time => !fd.has_exited(),
            // Not held (seen exited, or its bind found no descriptor):
            // bound again to tell; alive unless that says it is gone.
            _ => leader_alive(a, uid),
        });
        let sent = self.asks.is_empty();
        let reason = match () {
            _ if sent && self.asked.is_empty() && self.ask_failed => Some(AskEnd::AskFailed),
            _ if sent && self.asked.is_empty() => Some(AskEnd::LeadersExited),
            _ if sent && now >= self.ask_until => Some(match self.span {
                AskSpan::KillAfterMs(_) => AskEnd::KillAfter,
                _ => AskEnd::HalfGrace,
            }),
            _ => None,
        };
        if let Some(reason) = reason {
            self.end_ask(host, now, reason);
            return false;
        }
        self.ask(host)
    }

    /// The ask step's one sweep: each leader still alive is bound and
    /// verified and gets its own stop signal and SIGCONT, one record part
    /// per signal. Nothing else is signalled. A leader that cannot be
    /// bound now is left to the TERM stage (its bind is retried there).
    /// Returns whether anything was signalled.
    fn ask(&mut self, host: &mut impl StopHost) -> bool {
        if self.asks.is_empty() {
            host.sync();
            return false;
        }
        let me = host.me();
        let asks = std::mem::take(&mut self.asks);
        let mut part = Part::new(self.sweeps + 1);
        let mut seen = HashSet::new();
        let signals: Vec<Sig> = asks
            .iter()
            .map(|a| a.signal)
            .filter(|s| seen.insert(*s))
            .collect();
        for sig in signals {
            for ask in asks.iter().filter(|a| a.signal == sig) {
                self.ask_one(host, me, ask, &mut part);
            }
            if !part.targets.is_empty() {
                self.signal_part(host, &mut part, &[sig, Sig::CONT]);
            }
        }
        if part.index == 0 {
            host.sync();
            return false;
        }
        self.sweeps = part.sweep;
        true
    }

    fn ask_one(&mut self, host: &mut impl StopHost, me: Ident, ask: &Ask, part: &mut Part) {
        let ident = Ident {
            pid: ask.pid,
            start_time: ask.start_time,
            uid: me.uid,
        };
        match bind_ident(ident) {
            Ok(fd) => {
                part.targets.push(fd);
                self.asked.push(*ask);
            }
            // Exited; or reaped, and its pid names another process now.
            Err(BindError::Gone)
            | Err(BindError::Uncertain {
                reason: Uncertainty::StartTimeChanged,
                ..
            }) => {}
            // Not asked, but still a live leader: the ask waits for it as
            // for the others (TERM retries the bind); but not as long as
            // timeout's ask would, for nothing would ever signal it.
            Err(BindError::NoDescriptors(_)) if self.span.is_half_grace() => self.asked.push(*ask),
            Err(BindError::NoDescriptors(_)) => self.ask_failed = true,
            Err(BindError::Uncertain { reason, detail }) => {
                if self.uncertain.insert(ask.key()) {
                    let st = crate::process::identity::read_stat(ask.pid).ok();
                    if let Some(st) = st.filter(|s| s.start_time == ask.start_time) {
                        host.uncertain(&st, reason, &detail);
                    }
                }
            }
        }
    }
}

/// Whether an asked leader not held any more is still alive: bound again
/// by identity, it is alive unless it is gone (or its pid names another
/// process now). A bind that cannot say (no descriptor) counts as alive.
fn leader_alive(a: &Ask, uid: u32) -> bool {
    let ident = Ident {
        pid: a.pid,
        start_time: a.start_time,
        uid,
    };
    match bind_ident(ident) {
        Ok(_) | Err(BindError::NoDescriptors(_)) => true,
        Err(BindError::Gone) => false,
        Err(BindError::Uncertain { reason, .. }) => reason != Uncertainty::StartTimeChanged,
    }
}
