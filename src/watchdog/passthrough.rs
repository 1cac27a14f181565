//! exec mode: forwarding the job's output to the watchdog's own stdout and
//! stderr without letting a slow reader stall the loop.
//!
//! Pipes, FIFOs and terminals are reopened through `/proc/self/fd/N` as a
//! new, non-blocking open file description (the caller's own description
//! keeps its flags). Regular files never block for long and are written
//! directly; anything that cannot be reopened (a socket) falls back to
//! blocking writes. Past a high-water mark the job's pipe is no longer read,
//! so the job blocks instead of the watchdog buffering without bound.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;

use mio::{Interest, Token};
use nix::poll::{poll, PollFd, PollFlags};

use super::sources::{Source, Sources};

/// Queued bytes per stream before the job's pipe stops being read.
pub const HIGH_WATER: usize = 256 * 1024;

struct Sink {
    file: File,
    nonblocking: bool,
    queue: Vec<u8>,
    /// Registered for writability while bytes are queued.
    token: Option<Token>,
}

pub struct Passthrough {
    sinks: [Sink; 2],
}

fn open_sink(fd: i32) -> io::Result<Sink> {
    // SAFETY: 1 and 2 are open for the whole life of the process.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let st = nix::sys::stat::fstat(borrowed)?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFIFO || kind == libc::S_IFCHR {
        if let Ok(f) = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(format!("/proc/self/fd/{fd}"))
        {
            return Ok(Sink {
                file: f,
                nonblocking: true,
                queue: Vec::new(),
                token: None,
            });
        }
    }
    let dup = nix::unistd::dup(borrowed)?;
    // SAFETY: `dup` is a fresh descriptor we own.
    let file = unsafe { File::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(dup)) };
    Ok(Sink {
        file,
        nonblocking: false,
        queue: Vec::new(),
        token: None,
    })
}

impl Passthrough {
    pub fn new() -> io::Result<Passthrough> {
        Ok(Passthrough {
            sinks: [open_sink(1)?, open_sink(2)?],
        })
    }

    pub fn is_full(&self, i: usize) -> bool {
        self.sinks[i].queue.len() >= HIGH_WATER
    }

    /// Forwards `data` to stream `i` (1-based streams map to 0/1 here).
    pub fn push(&mut self, src: &mut Sources, i: usize, data: &[u8]) {
        self.sinks[i].queue.extend_from_slice(data);
        self.flush(src, i);
    }

    /// Writes what the sink takes now. Write errors (a closed terminal, a
    /// reader gone) drop the bytes: the job's output is still counted.
    pub fn flush(&mut self, src: &mut Sources, i: usize) {
        let s = &mut self.sinks[i];
        while !s.queue.is_empty() {
            match s.file.write(&s.queue) {
                Ok(n) => {
                    s.queue.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    s.queue.clear();
                    break;
                }
            }
        }
        if s.nonblocking && !s.queue.is_empty() && s.token.is_none() {
            s.token = src
                .add(s.file.as_raw_fd(), Source::Pass(i), Interest::WRITABLE)
                .ok();
        }
    }

    /// At exit: write everything left, waiting for slow readers (bounded).
    pub fn finish(&mut self, src: &mut Sources, within: std::time::Duration) {
        let until = std::time::Instant::now() + within;
        for i in 0..2 {
            while !self.sinks[i].queue.is_empty() && std::time::Instant::now() < until {
                self.flush(src, i);
                if !self.sinks[i].queue.is_empty() {
                    let sink = PollFd::new(self.sinks[i].file.as_fd(), PollFlags::POLLOUT);
                    let _ = poll(&mut [sink], 50u16); // bounded by `until`
                }
            }
            if let Some(token) = self.sinks[i].token.take() {
                src.remove(token, self.sinks[i].file.as_raw_fd());
            }
        }
    }
}
