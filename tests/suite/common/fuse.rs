//! A FUSE server inside the test process that answers everything a reader
//! needs to open one file, and never answers a READ.
//!
//! A process reading that file waits in the kernel for the answer. Before
//! any signal it waits interruptibly. Once a fatal signal arrives after the
//! server has taken the request (`FR_SENT`), `request_wait_answer` waits
//! uninterruptibly (state D), and SIGKILL does not end the process until
//! the server answers or the connection is aborted. The never-answering
//! `StuckMount` of `stuck.rs` is not the same thing: until INIT is
//! answered, requests wait killably.
//!
//! The mount is made on `target` in the calling thread's mount namespace
//! (`mounts::private_mount_ns` first). A thread serves the raw protocol
//! (`include/uapi/linux/fuse.h`) on the only `/dev/fuse` descriptor
//! (O_CLOEXEC: no child keeps one). Dropped, the guard stops that thread,
//! closes the descriptor (the last reference, which aborts the connection:
//! every request still waiting ends with ECONNABORTED) and detaches the
//! mount, whatever happened before, failed assertion or not.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The one file of the mount: a regular file, 4096 bytes, mode 0444.
pub const FILE: &str = "stuck";

const ROOT_ID: u64 = 1;
const FILE_ID: u64 = 2;
const FILE_SIZE: u64 = 4096;
/// The protocol version answered to INIT: 7.31 (Linux 5.4's), whose
/// structures are those below; the kernel uses the smaller of its minor
/// and this one.
const MINOR: u32 = 31;
const MAX_WRITE: u32 = 64 * 1024;
/// Room for any request: the kernel refuses a read buffer smaller than
/// a header, a write_in and max_write.
const BUF: usize = 2 * MAX_WRITE as usize;
/// Seconds the kernel may cache a name or attributes.
const VALID: u64 = 60;

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const RELEASEDIR: u32 = 29;
const INTERRUPT: u32 = 36;
const DESTROY: u32 = 38;
const BATCH_FORGET: u32 = 42;
const FOPEN_DIRECT_IO: u32 = 1;
/// `struct fuse_in_header`.
const IN_HEADER: usize = 40;

/// A READ the server took and will never answer.
#[derive(Clone, Copy, Debug)]
pub struct ReadTaken {
    /// The reader, as the mount's PID namespace (the test's) sees it.
    pub pid: i32,
    pub unique: u64,
}

/// What the server saw besides: for the test's messages.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen {
    pub requests: u64,
    pub interrupts: u64,
}

pub struct FuseServer {
    target: CString,
    fuse: Option<Arc<OwnedFd>>,
    /// The write end of the pipe the serving thread polls: closed, the
    /// thread returns.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<Seen>>,
    reads: Receiver<ReadTaken>,
}

/// Opens `/dev/fuse` (close-on-exec) and mounts a FUSE file system of it
/// on `target`, named `source` in the mount table, in this thread's mount
/// namespace (`common::mounts::private_mount_ns` first). Returns the
/// connection's only descriptor: whoever holds it is the server; closing
/// it aborts the connection.
pub fn mount_fuse(target: &Path, source: &str) -> OwnedFd {
    let dev = CString::new("/dev/fuse").unwrap();
    // SAFETY: a valid C string; the descriptor returned is owned below.
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(
        fd >= 0,
        "open /dev/fuse: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fuse = unsafe { OwnedFd::from_raw_fd(fd) };
    let target = CString::new(target.as_os_str().as_bytes()).unwrap();
    let source = CString::new(source).unwrap();
    let fstype = CString::new("fuse").unwrap();
    let data = CString::new(format!(
        "fd={},rootmode=40000,user_id=0,group_id=0",
        fuse.as_raw_fd()
    ))
    .unwrap();
    // SAFETY: valid C strings; the mount is in this thread's private
    // mount namespace.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr() as *const libc::c_void,
        )
    };
    assert_eq!(r, 0, "mount fuse: {}", std::io::Error::last_os_error());
    fuse
}

impl FuseServer {
    /// Mounts the file system on `target` (a directory) and serves it.
    pub fn on(target: &Path) -> FuseServer {
        let fuse = Arc::new(mount_fuse(target, "rea-fuse-test"));
        let target = CString::new(target.as_os_str().as_bytes()).unwrap();
        let (stop_rd, stop) = pipe();
        let (tx, reads) = channel();
        let served = Arc::clone(&fuse);
        let thread = std::thread::Builder::new()
            .name("fuse-server".into())
            .spawn(move || serve(&served, &stop_rd, &tx))
            .expect("spawn the FUSE server thread");
        FuseServer {
            target,
            fuse: Some(fuse),
            stop: Some(stop),
            thread: Some(thread),
            reads,
        }
    }

    /// The first READ the server took (and holds unanswered), within
    /// `limit`; `None` if none came.
    pub fn read_taken(&self, limit: Duration) -> Option<ReadTaken> {
        self.reads.recv_timeout(limit).ok()
    }

    /// Stops the server, aborts the connection and detaches the mount
    /// (what dropping does); returns what the server saw.
    pub fn abort(mut self) -> Seen {
        self.shut()
    }

    fn shut(&mut self) -> Seen {
        // The serving thread sees the pipe's other end close and returns,
        // dropping its reference to the descriptor.
        drop(self.stop.take());
        let seen = self
            .thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        // The last reference to the only /dev/fuse descriptor: closing it
        // aborts the connection, and every request still waiting (the
        // READ, a lookup) ends with ECONNABORTED.
        // (The thread has returned, so its reference is gone: this one is
        // the last.)
        if let Some(fuse) = self.fuse.take() {
            drop(fuse);
            // SAFETY: a valid C string; a lazy unmount of this test's mount.
            unsafe { libc::umount2(self.target.as_ptr(), libc::MNT_DETACH) };
        }
        seen
    }
}

impl Drop for FuseServer {
    fn drop(&mut self) {
        self.shut();
    }
}

/// A pipe (read end, write end), both O_CLOEXEC.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both were just made and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Serves requests until `stop` is closed or the connection goes away.
fn serve(fuse: &OwnedFd, stop: &OwnedFd, reads: &Sender<ReadTaken>) -> Seen {
    let mut seen = Seen::default();
    let mut buf = vec![0u8; BUF];
    loop {
        let mut p = [
            libc::pollfd {
                fd: fuse.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds; no timeout (the stop pipe wakes it).
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, -1) };
        if n < 0 {
            continue; // EINTR
        }
        if p[1].revents != 0 || p[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return seen;
        }
        if p[0].revents & libc::POLLIN == 0 {
            continue;
        }
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let got = unsafe { libc::read(fuse.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // Interrupted, or the request was ended before we read it.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                _ => return seen, // ENODEV: aborted or unmounted
            }
        }
        let req = &buf[..got as usize];
        if req.len() < IN_HEADER {
            continue;
        }
        seen.requests += 1;
        let opcode = u32_at(req, 4);
        let unique = u64_at(req, 8);
        let nodeid = u64_at(req, 16);
        let pid = u32_at(req, 32) as i32;
        let arg = &req[IN_HEADER..];
        match opcode {
            // No reply is ever sent to these.
            FORGET | BATCH_FORGET => {}
            // The INTERRUPT a signal to the reader sends for its READ is
            // ignored: the READ stays unanswered.
            INTERRUPT => seen.interrupts += 1,
            READ => {
                let _ = reads.send(ReadTaken { pid, unique });
            }
            INIT => reply(fuse, unique, 0, &init_out(arg)),
            LOOKUP if nodeid == ROOT_ID && name(arg) == FILE.as_bytes() => {
                reply(fuse, unique, 0, &entry_out())
            }
            LOOKUP => reply(fuse, unique, -libc::ENOENT, &[]),
            GETATTR if nodeid == ROOT_ID || nodeid == FILE_ID => {
                reply(fuse, unique, 0, &attr_out(nodeid))
            }
            OPEN if nodeid == FILE_ID => {
                // fh 1; direct I/O, so a read reaches the server rather
                // than waiting on a page-cache folio (killably).
                let mut out = Vec::new();
                put64(&mut out, 1);
                put32(&mut out, FOPEN_DIRECT_IO);
                put32(&mut out, 0);
                reply(fuse, unique, 0, &out)
            }
            RELEASE | RELEASEDIR | FLUSH | DESTROY => reply(fuse, unique, 0, &[]),
            _ => reply(fuse, unique, -libc::ENOSYS, &[]),
        }
    }
}

/// Writes one answer (`struct fuse_out_header` and `payload`). A failed
/// write (the request already ended) is ignored.
fn reply(fuse: &OwnedFd, unique: u64, error: i32, payload: &[u8]) {
    let mut out = Vec::with_capacity(16 + payload.len());
    put32(&mut out, (16 + payload.len()) as u32);
    put32(&mut out, error as u32);
    put64(&mut out, unique);
    out.extend_from_slice(payload);
    // SAFETY: `out` is valid for its length.
    let _ = unsafe { libc::write(fuse.as_raw_fd(), out.as_ptr().cast(), out.len()) };
}

/// `struct fuse_init_out` (64 bytes) for the kernel's `struct fuse_init_in`.
fn init_out(arg: &[u8]) -> Vec<u8> {
    let kernel_minor = if arg.len() >= 8 { u32_at(arg, 4) } else { 0 };
    let max_readahead = if arg.len() >= 12 { u32_at(arg, 8) } else { 0 };
    let mut out = Vec::new();
    put32(&mut out, 7); // major
    put32(&mut out, MINOR.min(kernel_minor.max(1)));
    put32(&mut out, max_readahead);
    put32(&mut out, 0); // flags: nothing asked for
    put16(&mut out, 16); // max_background
    put16(&mut out, 12); // congestion_threshold
    put32(&mut out, MAX_WRITE);
    put32(&mut out, 1); // time_gran
    put16(&mut out, 0); // max_pages (unused without FUSE_MAX_PAGES)
    put16(&mut out, 0); // map_alignment
    put32(&mut out, 0); // flags2
    out.resize(64, 0); // unused
    out
}

/// `struct fuse_attr` (88 bytes) of the root directory or the file.
fn attr(nodeid: u64) -> Vec<u8> {
    let (size, mode, nlink) = if nodeid == FILE_ID {
        (FILE_SIZE, libc::S_IFREG | 0o444, 1)
    } else {
        (0, libc::S_IFDIR | 0o755, 2)
    };
    let mut out = Vec::new();
    put64(&mut out, nodeid); // ino
    put64(&mut out, size);
    put64(&mut out, size.div_ceil(512)); // blocks
    out.resize(out.len() + 3 * 8 + 3 * 4, 0); // times
    put32(&mut out, mode);
    put32(&mut out, nlink);
    put32(&mut out, 0); // uid
    put32(&mut out, 0); // gid
    put32(&mut out, 0); // rdev
    put32(&mut out, 4096); // blksize
    put32(&mut out, 0); // flags
    debug_assert_eq!(out.len(), 88);
    out
}

/// `struct fuse_entry_out` of the file.
fn entry_out() -> Vec<u8> {
    let mut out = Vec::new();
    put64(&mut out, FILE_ID);
    put64(&mut out, 1); // generation
    put64(&mut out, VALID); // entry_valid
    put64(&mut out, VALID); // attr_valid
    put32(&mut out, 0);
    put32(&mut out, 0);
    out.extend_from_slice(&attr(FILE_ID));
    out
}

/// `struct fuse_attr_out`.
fn attr_out(nodeid: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put64(&mut out, VALID); // attr_valid
    put32(&mut out, 0);
    put32(&mut out, 0); // dummy
    out.extend_from_slice(&attr(nodeid));
    out
}

/// The NUL-terminated name a LOOKUP carries.
fn name(arg: &[u8]) -> &[u8] {
    arg.split(|&b| b == 0).next().unwrap_or_default()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fn put16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_ne_bytes());
}

fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_ne_bytes());
}

fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_ne_bytes());
}
