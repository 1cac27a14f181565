//! A read-only liveness probe by identity (pid, start time), for
//! `rea-audit reconcile` (docs/containment.md).
//!
//! `pidfd_open`, then `/proc/PID/stat` read back *after* the open: the fd
//! pins whatever process the pid named at that instant, so if the start
//! time read afterwards is the recorded one, the recorded process was
//! alive when the fd was opened; a different start time is a reused pid
//! (another process: the one recorded is gone). Finally the fd is polled:
//! readable means the pinned process has exited (a zombie is gone too,
//! only not yet reaped). The fd is closed at once. Nothing here signals,
//! waits on or otherwise touches the process: this module has no way to.

use serde::{Deserialize, Serialize};

use super::identity::{is_gone, read_stat, real_uid, Stat};
use super::pidfd::{pidfd_exited, pidfd_open};

/// What the probe found.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// The process with this pid *and* start time is running.
    Alive,
    /// No process has this identity: exited, reaped, or its pid now names
    /// another process.
    Gone,
    /// The probe could not tell (see the detail).
    Unknown,
}

/// The probe's answer, with what `/proc` said now (when it said anything).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub state: Liveness,
    /// Why, in a few words ("no such pid", "pid reused", "zombie", ...).
    pub detail: String,
    /// `/proc/PID/stat` now, for an alive process: its comm, parent,
    /// session, state letter and real uid.
    pub now: Option<Now>,
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Now {
    pub comm: String,
    pub ppid: i32,
    pub sid: i32,
    /// The state letter of `/proc/PID/stat` (`R`, `S`, `D`, `T`, ...).
    pub state: String,
    pub uid: Option<u32>,
}

fn answer(state: Liveness, detail: impl Into<String>) -> Probe {
    Probe {
        state,
        detail: detail.into(),
        now: None,
    }
}

/// Is the process (pid, start_time) alive? Read-only; see the module doc.
pub fn probe(pid: i32, start_time: u64) -> Probe {
    if pid <= 0 {
        return answer(Liveness::Unknown, format!("pid {pid} is not a process id"));
    }
    let fd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            return answer(Liveness::Gone, "no process has this pid")
        }
        Err(e) => return answer(Liveness::Unknown, format!("pidfd_open({pid}): {e}")),
    };
    let st: Stat = match read_stat(pid) {
        Ok(st) => st,
        Err(e) if is_gone(&e) => return answer(Liveness::Gone, "exited while it was looked at"),
        Err(e) => return answer(Liveness::Unknown, format!("/proc/{pid}/stat: {e}")),
    };
    if st.start_time != start_time {
        return answer(
            Liveness::Gone,
            format!(
                "pid reused: pid {pid} is now another process ({:?}, started at {})",
                st.comm, st.start_time
            ),
        );
    }
    if st.is_zombie() || pidfd_exited(&fd) {
        return answer(
            Liveness::Gone,
            "exited (a zombie not yet reaped by its parent)",
        );
    }
    Probe {
        state: Liveness::Alive,
        detail: "running (pid and start time match)".into(),
        now: Some(Now {
            comm: st.comm.clone(),
            ppid: st.ppid,
            sid: st.sid,
            state: (st.state as char).to_string(),
            uid: real_uid(pid),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::identity::self_start_time;

    #[test]
    fn self_is_alive_and_a_wrong_start_time_is_gone() {
        let me = std::process::id() as i32;
        let st = self_start_time().unwrap();
        let p = probe(me, st);
        assert_eq!(p.state, Liveness::Alive, "{p:?}");
        assert_eq!(p.now.unwrap().uid, Some(nix::unistd::getuid().as_raw()));
        let p = probe(me, st + 1);
        assert_eq!(p.state, Liveness::Gone, "{p:?}");
        assert!(p.detail.contains("reused"), "{p:?}");
        assert_eq!(probe(0, 1).state, Liveness::Unknown);
    }
}
