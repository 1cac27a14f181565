//! Reading who a process is from `/proc`.
//!
//! `/proc/PID/stat` is parsed from the *last* `)`: `comm` may contain
//! spaces and parentheses. Field 22 (start time, clock ticks since boot) is
//! what makes a pid an identity: a reused pid has another start time.

use std::fs::File;
use std::io::{self, Read};

use crate::vocab::Proc;

/// The parts of `/proc/PID/stat` the watchdog decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub comm: String,
    /// `R`, `S`, `D`, `Z`, `T`, ...
    pub state: u8,
    pub ppid: i32,
    pub sid: i32,
    pub start_time: u64,
    /// `num_threads` (field 20). A thread-group leader whose main thread
    /// exited (`pthread_exit`) shows state `Z` while its other threads
    /// run: the count still includes them.
    pub threads: u32,
}

impl Stat {
    /// Dead and waiting to be reaped: state `Z` (or `X`) with no live
    /// thread. A leader shown as `Z` whose other threads run is alive: it
    /// is signalled like any process (a signal to it reaches the whole
    /// thread group), and its pidfd polls readable only when all of them
    /// have exited.
    pub fn is_zombie(&self) -> bool {
        (self.state == b'Z' || self.state == b'X') && self.threads <= 1
    }

    /// The record form of this process, its real uid read now
    /// ([`UNKNOWN_UID`] when unreadable): for records that name a process
    /// never decided on by its uid (uncertain, foreign).
    pub fn recorded(&self) -> Proc {
        self.to_proc(real_uid(self.pid).unwrap_or(UNKNOWN_UID))
    }

    /// The record form of this process, with the uid read separately
    /// ([`real_uid`]; a record's `uid` is required, so a caller holding
    /// `None` decides per site, e.g. [`UNKNOWN_UID`]).
    pub fn to_proc(&self, uid: u32) -> Proc {
        Proc {
            pid: self.pid,
            ppid: self.ppid,
            start_time: self.start_time,
            uid,
            comm: self.comm.clone(),
        }
    }
}

/// Parses the contents of `/proc/PID/stat`.
pub fn parse_stat(buf: &[u8]) -> Option<Stat> {
    let open = buf.iter().position(|&b| b == b'(')?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(buf[..open].trim_ascii())
        .ok()?
        .parse()
        .ok()?;
    let comm = String::from_utf8_lossy(&buf[open + 1..close]).into_owned();
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    let mut f = rest.split_ascii_whitespace();
    // Fields 3.. (1-based): state ppid pgrp session tty tpgid flags minflt
    // cminflt majflt cmajflt utime stime cutime cstime priority nice
    // num_threads itrealvalue starttime.
    let state = *f.next()?.as_bytes().first()?;
    let ppid = f.next()?.parse().ok()?;
    let _pgrp = f.next()?;
    let sid = f.next()?.parse().ok()?;
    // tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    // cstime priority nice, then num_threads, itrealvalue, starttime.
    let threads = f.nth(13)?.parse().ok()?;
    let start_time = f.nth(1)?.parse().ok()?;
    Some(Stat {
        pid,
        comm,
        state,
        ppid,
        sid,
        start_time,
        threads,
    })
}

/// Reads a small `/proc` file: open, one `read` (a 4 KiB buffer holds
/// `stat` and `status` whole), close. `read_to_end` would add a `statx` and
/// a second `read` per file, and the stop procedure reads thousands.
fn read_small(path: &str, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    buf.resize(4096, 0);
    let mut f = File::open(path)?;
    let mut len = 0;
    loop {
        let n = f.read(&mut buf[len..])?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        buf.resize(buf.len() * 2, 0);
    }
    buf.truncate(len);
    Ok(())
}

/// Reads `/proc/PID/stat`. `NotFound`/`ESRCH` mean the pid is not in use.
pub fn read_stat(pid: i32) -> io::Result<Stat> {
    let mut buf = Vec::with_capacity(512);
    read_stat_into(pid, &mut buf)
}

/// Like [`read_stat`], reusing `buf` (the scan reads thousands).
pub fn read_stat_into(pid: i32, buf: &mut Vec<u8>) -> io::Result<Stat> {
    read_small(&format!("/proc/{pid}/stat"), buf)?;
    parse_stat(buf).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unparsable /proc/{pid}/stat"),
        )
    })
}

/// Real, effective, saved and filesystem uid (`Uid:` of `/proc/PID/status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uids {
    pub real: u32,
    pub effective: u32,
    pub saved: u32,
    pub fs: u32,
}

impl Uids {
    /// The uid when all four agree (a process that changed only some of
    /// them is not the plain process of one user the watchdog started).
    pub fn uniform(self) -> Option<u32> {
        (self.real == self.effective && self.real == self.saved && self.real == self.fs)
            .then_some(self.real)
    }
}

pub fn parse_uids(status: &[u8]) -> Option<Uids> {
    let text = std::str::from_utf8(status).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut f = line.split_ascii_whitespace().map(|x| x.parse::<u32>());
    Some(Uids {
        real: f.next()?.ok()?,
        effective: f.next()?.ok()?,
        saved: f.next()?.ok()?,
        fs: f.next()?.ok()?,
    })
}

pub fn read_uids(pid: i32) -> io::Result<Uids> {
    let mut buf = Vec::with_capacity(1536);
    read_small(&format!("/proc/{pid}/status"), &mut buf)?;
    parse_uids(&buf).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no Uid line in /proc/{pid}/status"),
        )
    })
}

/// The real uid of `pid`, or `None` when it is unknown: the process is
/// gone since it was seen, or its status could not be read.
pub fn real_uid(pid: i32) -> Option<u32> {
    read_uids(pid).ok().map(|u| u.real)
}

/// What a record's `uid` says for a process whose uid could not be read
/// ([`real_uid`] gave `None`) where the record must still be written (the
/// record schema requires a `uid`): `(uid_t)-1`, which the kernel itself
/// treats as "no uid" (`INVALID_UID`; `setresuid(-1)` means "unchanged"),
/// so no process can really have it and a reader cannot mistake it for an
/// account. Never used to decide anything, only to record.
pub const UNKNOWN_UID: u32 = u32::MAX;

/// This process's own start time (what a caller puts in a request).
pub fn self_start_time() -> io::Result<u64> {
    Ok(read_stat(std::process::id() as i32)?.start_time)
}

/// True when an I/O error from `/proc` means "no such process".
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_with_spaces_and_parens() {
        let line = b"4242 (a) b) (c d) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "a) b) (c d");
        assert_eq!(s.state, b'S');
        assert_eq!(s.ppid, 17);
        assert_eq!(s.sid, 4242);
        assert_eq!(s.start_time, 987654);
    }

    #[test]
    fn truncated_stat_is_rejected() {
        assert_eq!(parse_stat(b"12 (x) S 1 1 1 0"), None);
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(
            parse_stat(b"12 )x( S 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5"),
            None
        );
    }

    #[test]
    fn own_stat_and_uids() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid as u32, std::process::id());
        assert!(me.start_time > 0);
        let uids = read_uids(me.pid).unwrap();
        assert_eq!(uids.real, nix::unistd::getuid().as_raw());
        assert_eq!(uids.effective, nix::unistd::geteuid().as_raw());
    }

    #[test]
    fn uid_line_and_uniformity() {
        let u = parse_uids(b"Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t1\t1\t1\t1\n").unwrap();
        assert_eq!(u.uniform(), Some(1000));
        let u = parse_uids(b"Uid:\t0\t65534\t0\t0\n").unwrap();
        assert_eq!(u.uniform(), None);
        assert_eq!(parse_uids(b"Gid:\t1\t1\t1\t1\n"), None);
    }
}
