//! The environment scan of `rea-audit reconcile`: live processes whose
//! environment carries `REA_RUN_ID=<run>`. Every job process of a run
//! inherits that variable (docs/architecture.md), so after a lost watchdog this finds
//! descendants no record ever named (a setsid grandchild). A hint, never a
//! proof: a process can change or drop its environment, and another can
//! forge it. Read-only: `/proc/PID/environ`, `stat`, `status`, `cmdline`.

use std::io;

use serde::Serialize;

use crate::process::identity::{is_gone, read_stat, real_uid};

/// At most this many are listed.
pub const MAX_FOUND: usize = 1024;

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct EnvProc {
    pub pid: i32,
    pub start_time: u64,
    pub ppid: i32,
    pub comm: String,
    pub uid: Option<u32>,
    /// `/proc/PID/cmdline`, split at NUL (lossy UTF-8).
    pub argv: Vec<String>,
    /// What to run to see what it is.
    pub check: String,
}

/// Live (non-zombie) processes whose environment has `REA_RUN_ID=run`.
pub fn run_processes(run: &str) -> io::Result<Vec<EnvProc>> {
    let needle = format!("REA_RUN_ID={run}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc")? {
        let Ok(e) = e else { continue };
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let env = match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(env) => env,
            Err(_) => continue,
        };
        if !env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            continue;
        }
        let st = match read_stat(pid) {
            Ok(st) if !st.is_zombie() => st,
            Ok(_) => continue,
            Err(e) if is_gone(&e) => continue,
            Err(_) => continue,
        };
        let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        out.push(EnvProc {
            pid,
            start_time: st.start_time,
            ppid: st.ppid,
            comm: st.comm.clone(),
            uid: real_uid(pid),
            argv,
            check: check_hint(pid, st.start_time),
        });
        if out.len() >= MAX_FOUND {
            break;
        }
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// What to run to see what a live process is, before anyone acts on it.
pub fn check_hint(pid: i32, start_time: u64) -> String {
    format!(
        "ls -l /proc/{pid}/exe; cat /proc/{pid}/status; tr '\\0' ' ' < /proc/{pid}/cmdline; echo; \
         sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20   # must print {start_time}, else the pid was reused"
    )
}
