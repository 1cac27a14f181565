//! Writing the watchdog's own lines to its stdout and stderr, which are the
//! caller's: a terminal, a file, or a pipe that nobody reads any more.
//!
//! `println!` and `eprintln!` panic when the write fails (a closed pipe:
//! EPIPE, since Rust ignores SIGPIPE) and block for ever on a full pipe.
//! Neither may happen to a watchdog: a panic before the job runs leaves an
//! unsealed log, a block stops the loop. So a line here is written once,
//! whole, when the descriptor can take it within [`PATIENCE`], and
//! otherwise dropped: these lines tell people what the audit log already
//! holds, and losing one loses nothing the verdict needs.

use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::sync::OnceLock;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// How long a line waits for a full pipe to drain before it is dropped.
pub const PATIENCE: u16 = 100; // ms

/// Which of the process's own streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Writes `text` and a newline to `stream`: whole, or (closed, full for
/// [`PATIENCE`], any error) not at all. Returns whether it was written.
pub fn line(stream: Stream, text: impl Display) -> bool {
    let mut bytes = text.to_string().into_bytes();
    bytes.push(b'\n');
    let fd = match stream {
        Stream::Stdout => libc::STDOUT_FILENO,
        Stream::Stderr => libc::STDERR_FILENO,
    };
    // SAFETY: 1 and 2 stay open (or closed) for the life of the process;
    // the borrow lasts for this call only.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut done = 0;
    while done < bytes.len() {
        let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
        match poll(&mut fds, PollTimeout::from(PATIENCE)) {
            Ok(1) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return false,
        }
        let ready = fds[0].revents().unwrap_or(PollFlags::empty());
        if !ready.contains(PollFlags::POLLOUT) {
            return false; // POLLERR, POLLHUP, POLLNVAL: nobody reads
        }
        match nix::unistd::write(fd, &bytes[done..]) {
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Where [`note`] writes instead of stderr, once [`notes_to`] set it.
static NOTES: OnceLock<File> = OnceLock::new();

/// Sends every later [`note`] to `file` (opened for appending) instead of
/// stderr: `exec --notes FILE`, so that ARGV's stderr, which is exec's own,
/// carries ARGV's bytes alone (docs/cli.md). Only the first call counts.
pub fn notes_to(file: File) {
    let _ = NOTES.set(file);
}

/// `rea-watchdog: MSG` on stderr (or to the `--notes` file), never
/// panicking, never blocking for long.
pub fn note(msg: impl Display) -> bool {
    if let Some(mut f) = NOTES.get() {
        // A regular file: one write of the whole line, or nothing.
        return f
            .write_all(format!("rea-watchdog: {msg}\n").as_bytes())
            .is_ok();
    }
    line(Stream::Stderr, format_args!("rea-watchdog: {msg}"))
}
