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

/// Why a reply FIFO is refused or failed.
pub type ReplyError = String;

impl Replies {
    /// Validates and opens `replies/NAME` for writing.
    pub fn open(&mut self, dir: BorrowedFd<'_>, name: &str, uid: u32) -> Result<u64, ReplyError> {
        let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| format!("replies/{name}: {}", e.desc()))?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFLNK {
            return Err(format!("replies/{name} is a symlink"));
        }
        if kind != libc::S_IFIFO {
            return Err(format!("replies/{name} is not a FIFO"));
        }
        if st.st_uid != uid {
            return Err(format!(
                "replies/{name} is owned by uid {}, not {uid}",
                st.st_uid
            ));
        }
        if st.st_mode & 0o777 != 0o600 {
            return Err(format!(
                "replies/{name} has mode {:o}, must be 600",
                st.st_mode & 0o777
            ));
        }
        let fd = openat(
            dir,
            name,
            OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ENXIO => format!("replies/{name}: nobody is reading it"),
            e => format!("replies/{name}: {}", e.desc()),
        })?;
        let st2 = fstat(&fd).map_err(|e| e.desc().to_string())?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(format!("replies/{name} was replaced while being opened"));
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
        .map_err(|e| format!("replies/{name}: {}", e.desc()))?;
        let st = fstat(&fd).map_err(|e| format!("replies/{name}: {}", e.desc()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(format!("replies/{name} is not a regular file"));
        }
        if st.st_uid != uid || st.st_mode & 0o777 != 0o600 {
            return Err(format!(
                "replies/{name} is owned by uid {} with mode {:o}; must be {uid}, 600",
                st.st_uid,
                st.st_mode & 0o777
            ));
        }
        // Blocking again for the job, which reads it as a plain stdin.
        let flags = OFlag::from_bits_truncate(
            nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL)
                .map_err(|e| e.desc().to_string())?,
        );
        nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFL(flags & !OFlag::O_NONBLOCK),
        )
        .map_err(|e| e.desc().to_string())?;
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
            return Err("reply channel already closed".into());
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
                    result = Err(format!("reply FIFO: {e}"));
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
                .map_err(|e| format!("cannot poll reply FIFO: {e}"))?;
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
