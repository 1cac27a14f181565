//! Ownership by lineage (docs/ownership.md): a process is the action's
//! only if its parent chain reaches the watchdog through processes that
//! started no earlier than the watchdog did.
//!
//! Membership of the action's cgroup is not that proof: anything that may
//! write the group's `cgroup.procs` (every root process; an unprivileged
//! one in a delegated subtree) can move an unrelated process *into* it.
//! The group narrows the search and says `populated`; lineage decides.
//!
//! Why the walk is sound. Every orphan of a descendant is reparented to the
//! watchdog (a child subreaper) when its parent exits, before the parent's
//! pid can be freed, so a `ppid` read from `/proc` named the live parent at
//! that moment. Reading the parent afterwards may find its pid reused by a
//! newer process; a parent never starts after its child, so a "parent"
//! that did is a reuse, and the walk starts again from the process itself.
//! A true descendant's ancestors, walked upwards, are newer than the
//! watchdog until the watchdog itself: an ancestor that started before the
//! watchdog (init, the shell that started a stranger) proves the process
//! is not its descendant.

use std::collections::HashMap;

use super::identity::{is_gone, read_stat, Stat};
use crate::vocab::Ident;

/// Restarts of the walk after a link that changed while it was read.
const RESTARTS: u32 = 8;
/// Longest chain walked (a 200-deep fixture chain is the deepest test).
const DEPTH: usize = 65_536;

/// What the walk found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lineage {
    /// A descendant of the watchdog, started after it.
    Proven,
    /// Not the watchdog's: why, in words for the record.
    Foreign(String),
    /// The process itself is gone (nothing to prove or signal).
    Gone,
}

/// Processes already proven the action's: pid → start time. A walk that
/// meets one of them (same pid *and* start time, read now) stops there.
#[derive(Default)]
pub struct Proven {
    map: HashMap<i32, u64>,
}

impl Proven {
    pub fn insert(&mut self, pid: i32, start_time: u64) {
        self.map.insert(pid, start_time);
    }

    pub fn contains(&self, pid: i32, start_time: u64) -> bool {
        self.map.get(&pid) == Some(&start_time)
    }

    /// Walks `st`'s parent chain (the `stat` read just now, or by a bind)
    /// to the watchdog `me`. `alive(pid)` says, cheaply, that `pid` names a
    /// proven process still alive (a held pidfd that has not exited): the
    /// walk stops there with no `/proc` read. Proven ancestors are
    /// remembered. Never signals; reads `/proc/PID/stat` only.
    pub fn prove(&mut self, st: &Stat, me: Ident, alive: impl Fn(i32) -> bool) -> Lineage {
        if st.start_time < me.start_time {
            return Lineage::Foreign(format!(
                "started before the watchdog (start time {} < {})",
                st.start_time, me.start_time
            ));
        }
        let mut first = st.clone();
        for _ in 0..RESTARTS {
            match self.walk(&first, me, &alive) {
                Walk::Done(l) => return l,
                Walk::Changed => match read_stat(st.pid) {
                    Ok(now) if now.start_time == st.start_time => first = now,
                    Ok(_) => return Lineage::Gone, // the pid names another process now
                    Err(e) if is_gone(&e) => return Lineage::Gone,
                    Err(e) => return Lineage::Foreign(format!("/proc/{}/stat: {e}", st.pid)),
                },
            }
        }
        Lineage::Foreign(format!(
            "its ancestry changed {RESTARTS} times while it was read"
        ))
    }

    fn walk(&mut self, st: &Stat, me: Ident, alive: &impl Fn(i32) -> bool) -> Walk {
        let mut chain: Vec<(i32, u64)> = Vec::new();
        let mut cur = st.clone();
        for _ in 0..DEPTH {
            chain.push((cur.pid, cur.start_time));
            let p = cur.ppid;
            if p == me.pid {
                if super::inherited::is_inherited(&cur) {
                    return Walk::Done(Lineage::Foreign(format!(
                        "pid {} ({}) was the watchdog's child before it started",
                        cur.pid, cur.comm
                    )));
                }
                return self.proven(chain);
            }
            if p <= 0 {
                return Walk::Done(Lineage::Foreign(format!(
                    "its ancestry ends at pid {} ({}) without reaching the watchdog",
                    cur.pid, cur.comm
                )));
            }
            if alive(p) {
                return self.proven(chain);
            }
            let parent = match read_stat(p) {
                Ok(s) => s,
                Err(e) if is_gone(&e) => return Walk::Changed,
                Err(e) => return Walk::Done(Lineage::Foreign(format!("/proc/{p}/stat: {e}"))),
            };
            if parent.start_time > cur.start_time {
                return Walk::Changed; // the parent's pid names a newer process
            }
            if self.contains(parent.pid, parent.start_time) {
                return self.proven(chain);
            }
            if parent.start_time < me.start_time {
                return Walk::Done(Lineage::Foreign(format!(
                    "ancestor pid {} ({}) started before the watchdog and is not it",
                    parent.pid, parent.comm
                )));
            }
            cur = parent;
        }
        Walk::Done(Lineage::Foreign(format!(
            "no end to its ancestry within {DEPTH} links"
        )))
    }

    fn proven(&mut self, chain: Vec<(i32, u64)>) -> Walk {
        for (pid, t) in chain {
            self.insert(pid, t);
        }
        Walk::Done(Lineage::Proven)
    }
}

enum Walk {
    Done(Lineage),
    /// A link changed while it was read: walk again.
    Changed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::identity::read_stat;
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    fn me() -> Ident {
        let pid = std::process::id() as i32;
        Ident {
            pid,
            start_time: read_stat(pid).unwrap().start_time,
            uid: 0,
        }
    }

    /// A grandchild (sh → cat) is proven through its parent, which is
    /// remembered; this process's own parent (older than it) is not its
    /// descendant. The cat reads the test's pipe (an explicit redirection:
    /// a background job's stdin is otherwise /dev/null), so closing it
    /// ends both, with no signal.
    #[test]
    fn a_grandchild_is_proven_and_an_elder_is_foreign() {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "exec 3<&0; cat <&3 & echo $!; wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let sh = child.id() as i32;
        let sh_start = read_stat(sh).map_or(0, |s| s.start_time);
        let mut proven = Proven::default();
        let mine = read_stat(grandchild).map(|s| proven.prove(&s, me(), |_| false));
        let parent = read_stat(std::os::unix::process::parent_id() as i32).unwrap();
        let elder = proven.prove(&parent, me(), |_| false);
        drop(child.stdin.take()); // cat sees EOF; sh's wait returns
        let _ = child.wait();
        assert_eq!(mine.ok(), Some(Lineage::Proven));
        assert!(proven.contains(sh, sh_start), "the shell was remembered");
        assert!(matches!(elder, Lineage::Foreign(w) if w.contains("before the watchdog")));
    }
}
