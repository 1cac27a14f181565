//! What the loop waits on: one `mio::Poll` and a `Token → Source` map.
//!
//! The shape of mio's `examples/tcp_server.rs`: every descriptor is
//! registered under a fresh token, the map says what the token stands for,
//! and the loop has one `match` over [`Source`]. Tokens are never reused,
//! so an event still queued for a descriptor that was removed in the same
//! wake-up maps to nothing and is dropped, never to a newer descriptor.

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

/// What a readiness event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The signalfd (SIGCHLD and the stop signals).
    Signals,
    /// The root controller's pidfd: readable once it exited.
    Root,
    /// The request FIFO.
    Fifo,
    /// exec mode: the watchdog's own stdout (0) or stderr (1) can take more.
    Pass(usize),
    /// A job leader's pidfd (job number): readable once it exited.
    Leader(u64),
    /// A job's stdout (0) or stderr (1) pipe.
    Output(u64, usize),
    /// A job's caller's pidfd: readable once the caller exited.
    Caller(u64),
    /// A reply FIFO with queued bytes can take more (channel number).
    Reply(u64),
    /// A pidfd the stop procedure holds (pid): readable once its process
    /// exited. Never removed: the fd leaves the poll set when the stopper
    /// closes it, and its token is never reused.
    Exited(i32),
}

pub struct Sources {
    poll: Poll,
    map: HashMap<Token, Source>,
    next: usize,
}

impl Sources {
    pub fn new() -> io::Result<Sources> {
        Ok(Sources {
            poll: Poll::new()?,
            map: HashMap::new(),
            next: 0,
        })
    }

    /// Registers `fd` for `interest` under a fresh token standing for `source`.
    pub fn add(&mut self, fd: RawFd, source: Source, interest: Interest) -> io::Result<Token> {
        let token = Token(self.next);
        self.next += 1;
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), token, interest)?;
        self.map.insert(token, source);
        Ok(token)
    }

    /// Deregisters `fd` (registered under `token`). Its token means nothing
    /// from now on. Deregistering a descriptor that is already closed is
    /// harmless: the kernel dropped it from the epoll set with the close.
    pub fn remove(&mut self, token: Token, fd: RawFd) {
        if self.map.remove(&token).is_some() {
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        }
    }

    /// What `token` stands for; `None` for a removed one.
    pub fn source(&self, token: Token) -> Option<Source> {
        self.map.get(&token).copied()
    }

    /// Waits for events, at most `timeout` (`None`: until one arrives).
    pub fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        self.poll.poll(events, timeout)
    }
}
