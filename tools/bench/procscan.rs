//! What the stop procedure's per-process work costs, piece by piece, and
//! what cheaper equivalents would cost, measured in the same run
//! (tools/bench/bench.py, "Diagnosis"). Run it only inside a private PID
//! namespace (bench.py does): it starts N `sleep` children and kills them.
//!
//!     cargo run --release --example procscan -- N REPS
//!
//! Only this process's own children are signalled, through the library's
//! verified pidfds (`bind_unwaited_child` + `VerifiedPidFd::signal`). Prints one JSON object:
//! median milliseconds per pass over all N processes.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::sys::signal::Signal;
use rea::process::identity::{read_stat, read_uids};
use rea::process::pidfd::{bind, bind_unwaited_child, VerifiedPidFd};
use rea::process::reap::{peek, Peek};
use rea::process::scan::descendants;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn time<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    let mut v = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    median(v)
}

/// One `/proc` file read the cheap way: open, one read into a reused
/// buffer, close (std's `read_to_end` adds statx + lseek + a second read).
fn read_raw(path: &std::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: plain open/read/close on a NUL-terminated path and our buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n.max(0) as usize
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(pid, 0) returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative result is a new fd that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn spawn(n: usize) -> Vec<(std::process::Child, VerifiedPidFd)> {
    (0..n)
        .map(|_| {
            let c = Command::new("/bin/sleep")
                .arg("3600")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sleep");
            let fd = bind_unwaited_child(&c).expect("bind own child");
            (c, fd)
        })
        .collect()
}

fn kill_all(kids: &[(std::process::Child, VerifiedPidFd)]) -> f64 {
    let t = Instant::now();
    for (_, fd) in kids {
        fd.signal(Signal::SIGKILL).expect("signal own child");
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    // Wait until every one is a zombie (its pidfd polls readable).
    for (_, fd) in kids {
        while !fd.has_exited() {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    ms
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let me = std::process::id() as i32;
    let uid = nix::unistd::getuid().as_raw();
    let kids = spawn(n);
    // Let every child exec (its comm becomes "sleep").
    std::thread::sleep(std::time::Duration::from_millis(200));
    let scan = descendants(me).expect("scan");
    assert!(scan.len() >= n, "scan found {} of {n}", scan.len());
    let pids: Vec<i32> = scan.iter().map(|s| s.pid).collect();
    let stat_paths: Vec<std::ffi::CString> = pids
        .iter()
        .map(|p| std::ffi::CString::new(format!("/proc/{p}/stat")).unwrap())
        .collect();
    let status_paths: Vec<std::ffi::CString> = pids
        .iter()
        .map(|p| std::ffi::CString::new(format!("/proc/{p}/status")).unwrap())
        .collect();
    let mut buf = vec![0u8; 4096];
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: f64| {
        out.insert(k.into(), serde_json::json!((v * 1000.0).round() / 1000.0));
    };
    put("n", n as f64);
    put(
        "scan_descendants_ms",
        time(reps, || {
            descendants(me).unwrap();
        }),
    );
    put(
        "bind_all_ms",
        time(reps, || {
            let fds: Vec<_> = scan
                .iter()
                .map(|st| bind(st, uid, |p| p == me).expect("bind"))
                .collect();
            drop(fds);
        }),
    );
    put(
        "read_stat_std_ms",
        time(reps, || {
            for &p in &pids {
                read_stat(p).unwrap();
            }
        }),
    );
    put(
        "read_stat_one_read_ms",
        time(reps, || {
            for p in &stat_paths {
                read_raw(p, &mut buf);
            }
        }),
    );
    put(
        "read_status_std_ms",
        time(reps, || {
            for &p in &pids {
                read_uids(p).unwrap();
            }
        }),
    );
    put(
        "read_status_one_read_ms",
        time(reps, || {
            for p in &status_paths {
                read_raw(p, &mut buf);
            }
        }),
    );
    put(
        "pidfd_open_ms",
        time(reps, || {
            let v: Vec<_> = pids.iter().map(|&p| pidfd_open(p)).collect();
            drop(v);
        }),
    );
    let dir_read = || {
        let mut k = 0;
        for e in std::fs::read_dir("/proc").unwrap() {
            let e = e.unwrap();
            if e.file_name()
                .to_str()
                .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
            {
                k += 1;
            }
        }
        k
    };
    put(
        "readdir_proc_ms",
        time(reps, || {
            dir_read();
        }),
    );
    put(
        "poll_has_exited_ms",
        time(reps, || {
            for (_, fd) in &kids {
                fd.has_exited();
            }
        }),
    );
    // The bind step done the cheap way: pidfd_open, one read of stat, one
    // read of status (the same checks, without statx/lseek/second reads).
    put(
        "bind_all_one_read_ms",
        time(reps, || {
            let mut fds = Vec::with_capacity(pids.len());
            for (i, &p) in pids.iter().enumerate() {
                fds.push(pidfd_open(p));
                read_raw(&stat_paths[i], &mut buf);
                read_raw(&status_paths[i], &mut buf);
            }
            drop(fds);
        }),
    );
    // Signalling and reaping: the current way (peek, read the zombie's
    // stat, reap the Zombie it returned) and through the pidfd already held
    // (no /proc read).
    put("sigkill_loop_ms", kill_all(&kids));
    let t = Instant::now();
    let mut reaped = 0;
    while let Peek::Waitable(zombie) = peek().unwrap() {
        let _ = read_stat(zombie.pid());
        zombie.reap().unwrap();
        reaped += 1;
    }
    put("reap_peek_stat_pid_ms", t.elapsed().as_secs_f64() * 1e3);
    assert_eq!(reaped, n);
    drop(kids);
    let kids = spawn(n);
    std::thread::sleep(std::time::Duration::from_millis(200));
    kill_all(&kids);
    let t = Instant::now();
    for (_, fd) in &kids {
        fd.try_reap().unwrap();
    }
    put("reap_held_pidfd_ms", t.elapsed().as_secs_f64() * 1e3);
    // The std Child handles were never waited: forget them (already reaped).
    for (c, _) in kids {
        std::mem::forget(c);
    }
    println!("{}", serde_json::Value::Object(out));
}
