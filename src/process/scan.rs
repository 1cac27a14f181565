//! Descendant enumeration: one `/proc` scan, PPID links, closure from a pid.
//!
//! `/proc/PID/task/TID/children` is not available on every kernel, so the
//! whole of `/proc` is read. Guarantee: a process that exists for the whole
//! scan, with an ancestor chain that does not change during it, is found.
//! Processes born or reparented mid-scan may be missed; the stop procedure
//! therefore repeats scans until `waitid` reports ECHILD.

use std::collections::HashMap;
use std::io;

use super::identity::{is_gone, read_stat_into, Stat};

/// Every live or zombie descendant of `ancestor`, parents before children.
pub fn descendants(ancestor: i32) -> io::Result<Vec<Stat>> {
    descendants_known(ancestor, |_| None)
}

/// [`descendants`], where `known` already knows some of them: a process
/// it returns a `Stat` for is not read from `/proc` and counts as a
/// descendant whatever its parent is now (the caller proved it one, and
/// holds it: a pidfd that has not polled exited, so the pid is still its).
/// Its descendants are found through their own parent links as usual.
pub fn descendants_known(
    ancestor: i32,
    known: impl Fn(i32) -> Option<Stat>,
) -> io::Result<Vec<Stat>> {
    let mut children: HashMap<i32, Vec<Stat>> = HashMap::new();
    let mut out = Vec::new();
    let mut frontier = vec![ancestor];
    let mut buf = Vec::with_capacity(512);
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(st) = known(pid) {
            frontier.push(st.pid);
            out.push(st);
            continue;
        }
        match read_stat_into(pid, &mut buf) {
            Ok(st) => children.entry(st.ppid).or_default().push(st),
            Err(e) if is_gone(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    while let Some(p) = frontier.pop() {
        if let Some(kids) = children.remove(&p) {
            // An inherited child and its subtree are not the action's.
            for k in kids
                .into_iter()
                .filter(|k| !super::inherited::is_inherited(k))
            {
                frontier.push(k.pid);
                out.push(k);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn finds_own_grandchild() {
        // sh -> sleep: both are our descendants; the closure must hold both.
        let mut child = Command::new("/bin/sh")
            .args(["-c", "/bin/sleep 10 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let found = descendants(std::process::id() as i32).unwrap();
        let pids: Vec<i32> = found.iter().map(|s| s.pid).collect();
        // Stop the sleeper through a verified pidfd before asserting, so a
        // failed assertion leaves nothing behind.
        let sh = child.id() as i32;
        let uid = nix::unistd::getuid().as_raw();
        let bound = found
            .iter()
            .find(|s| s.pid == grandchild)
            .map(|s| crate::process::pidfd::bind(s, uid, |p| p == sh));
        if let Some(Ok(fd)) = &bound {
            fd.signal(nix::sys::signal::Signal::SIGKILL).unwrap();
        }
        let _ = child.wait();
        assert!(pids.contains(&sh), "{pids:?}");
        assert!(pids.contains(&grandchild), "{pids:?}");
        assert!(
            matches!(bound, Some(Ok(_))),
            "the grandchild could not be bound"
        );
    }
}
