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

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nix::poll::{poll, PollFd, PollFlags};

/// Queued bytes per stream before the job's pipe stops being read.
pub const HIGH_WATER: usize = 256 * 1024;

struct Sink {
    file: File,
    nonblocking: bool,
    queue: Vec<u8>,
    registered: bool,
}

pub struct Passthrough {
    sinks: [Sink; 2],
    tokens: [Token; 2],
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
                registered: false,
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
        registered: false,
    })
}

impl Passthrough {
    pub fn new(tokens: [Token; 2]) -> io::Result<Passthrough> {
        Ok(Passthrough {
            sinks: [open_sink(1)?, open_sink(2)?],
            tokens,
        })
    }

    pub fn is_full(&self, i: usize) -> bool {
        self.sinks[i].queue.len() >= HIGH_WATER
    }

    /// Forwards `data` to stream `i` (1-based streams map to 0/1 here).
    pub fn push(&mut self, reg: &Registry, i: usize, data: &[u8]) {
        self.sinks[i].queue.extend_from_slice(data);
        self.flush(reg, i);
    }

    /// Writes what the sink takes now. Write errors (a closed terminal, a
    /// reader gone) drop the bytes: the job's output is still counted.
    pub fn flush(&mut self, reg: &Registry, i: usize) {
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
        if s.nonblocking && !s.queue.is_empty() && !s.registered {
            let fd = s.file.as_raw_fd();
            if reg
                .register(&mut SourceFd(&fd), self.tokens[i], Interest::WRITABLE)
                .is_ok()
            {
                s.registered = true;
            }
        }
    }

    pub fn stream_of(&self, token: Token) -> Option<usize> {
        self.tokens.iter().position(|&t| t == token)
    }

    /// At exit: write everything left, waiting for slow readers (bounded).
    pub fn finish(&mut self, reg: &Registry, within: std::time::Duration) {
        let until = std::time::Instant::now() + within;
        for i in 0..2 {
            while !self.sinks[i].queue.is_empty() && std::time::Instant::now() < until {
                self.flush(reg, i);
                if !self.sinks[i].queue.is_empty() {
                    let sink = PollFd::new(self.sinks[i].file.as_fd(), PollFlags::POLLOUT);
                    let _ = poll(&mut [sink], 50u16); // bounded by `until`
                }
            }
            if self.sinks[i].registered {
                let fd = self.sinks[i].file.as_raw_fd();
                let _ = reg.deregister(&mut SourceFd(&fd));
                self.sinks[i].registered = false;
            }
        }
    }
}
