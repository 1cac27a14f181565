//! What rooms ask the loop to do. A room never moves the phase, writes a
//! reply or closes the action itself: it returns an [`Effect`], and the
//! loop applies effects in one place, in the order they were made. This is
//! the seam that keeps every arrow pointing from the loop into the rooms.

use super::stop::Trigger;
use crate::protocol::Reply;
use crate::vocab::StopReason;

/// Where a request's replies go: a reply channel and the request's id.
#[derive(Clone, Debug)]
pub struct ReplyTo {
    pub chan: u64,
    pub id: String,
}

/// Who asked for the close: a request (answered with `closed`), or the
/// action itself (exec mode, once its one job is gone).
#[derive(Debug)]
pub enum Closer {
    Request(ReplyTo),
    Own,
}

#[derive(Debug)]
pub enum Effect {
    /// Stop the action (the first trigger starts the stop; later ones are
    /// recorded only).
    Trigger(Trigger),
    /// Write `reply` to channel `chan`; `last` closes the channel after it.
    /// `id` names the request in a `reply_failed` record if it cannot be.
    Reply {
        chan: u64,
        id: String,
        reply: Reply,
        last: bool,
    },
    /// Close the action.
    Close(Closer),
    /// A signal to the watchdog that is not a stop: forward or ignore it.
    Signal(i32),
}

/// Effects in the order they were made.
#[derive(Debug, Default)]
pub struct Effects(Vec<Effect>);

impl Effects {
    pub fn trigger(&mut self, t: Trigger) {
        self.0.push(Effect::Trigger(t));
    }

    pub fn reply(&mut self, to: &ReplyTo, reply: Reply, last: bool) {
        self.0.push(Effect::Reply {
            chan: to.chan,
            id: to.id.clone(),
            reply,
            last,
        });
    }

    pub fn signal(&mut self, sig: i32) {
        self.0.push(Effect::Signal(sig));
    }

    pub fn close(&mut self, by: Closer) {
        self.0.push(Effect::Close(by));
    }

    /// The reason of the first trigger made so far, if any.
    pub fn first_trigger(&self) -> Option<StopReason> {
        self.0.iter().find_map(|e| match e {
            Effect::Trigger(t) => Some(t.reason),
            _ => None,
        })
    }

    /// Hands the effects over (first made, first applied).
    pub fn take(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.0)
    }
}
