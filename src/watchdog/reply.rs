//! Reply FIFOs: validated before they are opened, written without ever
//! blocking the loop.
//!
//! A reply FIFO is named by the request and must be a FIFO directly inside
//! `replies/`, not a symlink, owned by the watchdog's uid, mode 0600, with a
//! reader (the caller opens it before sending). Replies larger than the pipe
//! buffer (captured output) are queued and flushed as the FIFO drains.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use mio::{Interest, Token};
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::stat::{fstat, fstatat, Mode};

use super::sources::{Source, Sources};
use crate::protocol::Reply;

struct Chan {
    file: File,
    queue: Vec<u8>,
    /// Registered for writability while bytes are queued.
    token: Option<Token>,
    /// Close once the queue is flushed.
    last: bool,
}

#[derive(Default)]
pub struct Replies {
    chans: HashMap<u64, Chan>,
    next: u64,
}

/// Why a reply FIFO (or a job's stdin file in `replies/`) is refused or
/// failed; each names the file as `replies/NAME`.
#[derive(Debug)]
pub enum ReplyError {
    /// A system call on `replies/NAME` failed.
    Sys(String, Errno),
    /// A call on the descriptor already opened failed (no name said).
    Opened(Errno),
    Symlink(String),
    NotFifo(String),
    NotRegular(String),
    /// A reply FIFO not of the watchdog's uid: (name, its uid, the uid).
    Owner(String, u32, u32),
    /// A reply FIFO whose mode is not 0600.
    Mode(String, u32),
    /// A stdin file not the watchdog's uid's with mode 0600: (name, its
    /// uid, its mode, the uid).
    Input(String, u32, u32, u32),
    /// The FIFO has no reader (ENXIO at open).
    NoReader(String),
    /// What was opened is not what was checked.
    Replaced(String),
    /// A reply to a channel already closed.
    Closed,
    /// Writing to the FIFO failed.
    Write(io::Error),
    /// The FIFO could not be added to the poll.
    Poll(io::Error),
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyError::Sys(n, e) => write!(f, "replies/{n}: {}", e.desc()),
            ReplyError::Opened(e) => f.write_str(e.desc()),
            ReplyError::Symlink(n) => write!(f, "replies/{n} is a symlink"),
            ReplyError::NotFifo(n) => write!(f, "replies/{n} is not a FIFO"),
            ReplyError::NotRegular(n) => write!(f, "replies/{n} is not a regular file"),
            ReplyError::Owner(n, have, want) => {
                write!(f, "replies/{n} is owned by uid {have}, not {want}")
            }
            ReplyError::Mode(n, mode) => write!(f, "replies/{n} has mode {mode:o}, must be 600"),
            ReplyError::Input(n, have, mode, want) => write!(
                f,
                "replies/{n} is owned by uid {have} with mode {mode:o}; must be {want}, 600"
            ),
            ReplyError::NoReader(n) => write!(f, "replies/{n}: nobody is reading it"),
            ReplyError::Replaced(n) => write!(f, "replies/{n} was replaced while being opened"),
            ReplyError::Closed => f.write_str("reply channel already closed"),
            ReplyError::Write(e) => write!(f, "reply FIFO: {e}"),
            ReplyError::Poll(e) => write!(f, "cannot poll reply FIFO: {e}"),
        }
    }
}

impl std::error::Error for ReplyError {}

impl Replies {
    /// Validates and opens `replies/NAME` for writing.
    pub fn open(&mut self, dir: BorrowedFd<'_>, name: &str, uid: u32) -> Result<u64, ReplyError> {
        let named = || name.to_string();
        let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| ReplyError::Sys(named(), e))?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFLNK {
            return Err(ReplyError::Symlink(named()));
        }
        if kind != libc::S_IFIFO {
            return Err(ReplyError::NotFifo(named()));
        }
        if st.st_uid != uid {
            return Err(ReplyError::Owner(named(), st.st_uid, uid));
        }
        if st.st_mode & 0o777 != 0o600 {
            return Err(ReplyError::Mode(named(), st.st_mode & 0o777));
        }
        let fd = openat(
            dir,
            name,
            OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ENXIO => ReplyError::NoReader(named()),
            e => ReplyError::Sys(named(), e),
        })?;
        let st2 = fstat(&fd).map_err(ReplyError::Opened)?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(ReplyError::Replaced(named()));
        }
        let id = self.next;
        self.next += 1;
        self.chans.insert(
            id,
            Chan {
                file: File::from(fd),
                queue: Vec::new(),
                token: None,
                last: false,
            },
        );
        Ok(id)
    }

    /// Validates and opens `replies/NAME` for reading as a job's stdin: a
    /// regular file (not a symlink) of the watchdog's uid, mode 0600, that
    /// the caller wrote before sending the request (docs/requests.md).
    pub fn open_input(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        uid: u32,
    ) -> Result<File, ReplyError> {
        let fd = openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ReplyError::Sys(name.to_string(), e))?;
        let st = fstat(&fd).map_err(|e| ReplyError::Sys(name.to_string(), e))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(ReplyError::NotRegular(name.to_string()));
        }
        if st.st_uid != uid || st.st_mode & 0o777 != 0o600 {
            return Err(ReplyError::Input(
                name.to_string(),
                st.st_uid,
                st.st_mode & 0o777,
                uid,
            ));
        }
        // Blocking again for the job, which reads it as a plain stdin.
        let flags = OFlag::from_bits_truncate(
            nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).map_err(ReplyError::Opened)?,
        );
        nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFL(flags & !OFlag::O_NONBLOCK),
        )
        .map_err(ReplyError::Opened)?;
        Ok(File::from(fd))
    }

    /// Queues a reply and writes what the FIFO takes now. `last` closes the
    /// channel once everything is written. An error means the caller is
    /// gone (EPIPE) or the FIFO broke; the channel is then dropped.
    pub fn send(
        &mut self,
        src: &mut Sources,
        chan: u64,
        reply: &Reply,
        last: bool,
    ) -> Result<(), ReplyError> {
        let Some(c) = self.chans.get_mut(&chan) else {
            return Err(ReplyError::Closed);
        };
        c.queue.extend_from_slice(&reply.to_line());
        c.last |= last;
        self.flush(src, chan)
    }

    /// Writes queued bytes until the FIFO is full; called again when writable.
    pub fn flush(&mut self, src: &mut Sources, chan: u64) -> Result<(), ReplyError> {
        let Some(c) = self.chans.get_mut(&chan) else {
            return Ok(());
        };
        let mut result = Ok(());
        while !c.queue.is_empty() {
            match c.file.write(&c.queue) {
                Ok(n) => {
                    c.queue.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    result = Err(ReplyError::Write(e));
                    c.queue.clear();
                    c.last = true;
                    break;
                }
            }
        }
        if c.queue.is_empty() && c.last {
            self.close(src, chan);
        } else if !c.queue.is_empty() && c.token.is_none() {
            let fd = c.file.as_fd().as_raw_fd();
            let token = src
                .add(fd, Source::Reply(chan), Interest::WRITABLE)
                .map_err(ReplyError::Poll)?;
            c.token = Some(token);
        }
        result
    }

    pub fn close(&mut self, src: &mut Sources, chan: u64) {
        if let Some(c) = self.chans.remove(&chan) {
            if let Some(token) = c.token {
                src.remove(token, c.file.as_fd().as_raw_fd());
            }
        }
    }

    /// Blocks (bounded) until queued replies are written: used once, at exit.
    pub fn drain_all(&mut self, src: &mut Sources, within: std::time::Duration) {
        let until = std::time::Instant::now() + within;
        let chans: Vec<u64> = self.chans.keys().copied().collect();
        for chan in chans {
            while self.chans.get(&chan).is_some_and(|c| !c.queue.is_empty())
                && std::time::Instant::now() < until
            {
                if self.flush(src, chan).is_err() {
                    break;
                }
                if let Some(c) = self.chans.get(&chan) {
                    if !c.queue.is_empty() {
                        let chan = PollFd::new(c.file.as_fd(), PollFlags::POLLOUT);
                        let _ = poll(&mut [chan], 50u16); // bounded by `until`
                    }
                }
            }
            self.close(src, chan);
        }
    }
}
