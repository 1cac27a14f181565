//! A scan's results in words: one line per holder, mount, loop device and
//! unreadable process (every string already escaped by the scan).

use super::{Hold, Holder, HolderScan, LoopHold, MountHold, MountHow, SocketHold, Unreadable};

fn hold(h: &Hold) -> String {
    if let Some(sock) = &h.socket {
        return socket(h, sock);
    }
    let mut s = match (h.fd, h.access) {
        (Some(fd), Some(a)) => format!("fd {fd} ({}) {}", a.as_str(), h.what),
        (Some(fd), None) => format!("fd {fd} {}", h.what),
        _ => format!("{} {}", h.how.as_str(), h.what),
    };
    if h.deleted && !s.ends_with(" (deleted)") {
        s.push_str(" (deleted)");
    }
    s
}

/// `unix socket /stage/live.sock (stream, listening; fd 3, socket inode
/// 81, bound as /elsewhere/live.sock)`: the name the binder gave only when
/// it is not the tree's path.
fn socket(h: &Hold, sock: &SocketHold) -> String {
    let fd = h.fd.map(|n| format!("fd {n}, ")).unwrap_or_default();
    let bound_as = if sock.bound_as == h.what {
        String::new()
    } else {
        format!(", bound as {}", sock.bound_as)
    };
    format!(
        "unix socket {} ({}, {}; {fd}socket inode {}{bound_as})",
        h.what,
        sock.kind.as_str(),
        sock.state.as_str(),
        sock.ino
    )
}

/// `pid 42 (comm, uid 0, exe /x): fd 3 (read) /stage/f, cwd /stage`.
pub fn holder(h: &Holder) -> String {
    let holds: Vec<String> = h.holds.iter().map(hold).collect();
    let more = h.holds_total.saturating_sub(h.holds.len() as u64);
    let more = if more > 0 {
        format!(", and {more} more")
    } else {
        String::new()
    };
    format!(
        "pid {} ({}, uid {}, started at tick {}, exe {}): {}{more}",
        h.pid,
        h.comm,
        h.uid,
        h.start_time,
        if h.exe.is_empty() { "-" } else { &h.exe },
        holds.join(", ")
    )
}

pub fn mount(m: &MountHold) -> String {
    let how = match m.how {
        MountHow::MountPoint => "mounted on a stage entry",
        MountHow::Source => "its root is a stage entry (bind mount)",
    };
    format!(
        "mount {} ({} from {}, mount namespace {} seen through pid {}): {how}",
        m.mount_point, m.fstype, m.source, m.mnt_ns, m.seen_by
    )
}

pub fn loop_device(l: &LoopHold) -> String {
    let deleted = if l.deleted { " (unlinked)" } else { "" };
    format!(
        "loop device /dev/{}: backed by {}{deleted}",
        l.device, l.backing_file
    )
}

pub fn unreadable(u: &Unreadable) -> String {
    if u.pid == 0 {
        format!("{}: {}", u.what, u.error)
    } else {
        format!("pid {}: cannot read {}: {}", u.pid, u.what, u.error)
    }
}

/// One line per finding, in the scan's order (holders, mounts, loop
/// devices, then what could not be read), with the counts beyond the
/// named ones.
pub fn findings(s: &HolderScan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    out.extend(s.holders.iter().map(holder));
    out.extend(s.mounts.iter().map(mount));
    out.extend(s.loops.iter().map(loop_device));
    out.extend(
        s.unreadable
            .iter()
            .map(|u| format!("not readable: {}", unreadable(u))),
    );
    let unnamed = |what: &str, total: u64, named: usize| {
        let more = total.saturating_sub(named as u64);
        (more > 0).then(|| format!("... and {more} more {what}"))
    };
    out.extend(unnamed("holders", s.holders_total, s.holders.len()));
    out.extend(unnamed("mounts", s.mounts_total, s.mounts.len()));
    out.extend(unnamed("loop devices", s.loops_total, s.loops.len()));
    out.extend(unnamed(
        "not readable",
        s.unreadable_total,
        s.unreadable.len(),
    ));
    out
}

/// The whole report of `rea-audit holders`.
pub fn human(s: &HolderScan) -> String {
    let mut out = String::new();
    for r in &s.roots {
        out.push_str(&format!(
            "tree {} (dev {}, inode {}, {} entries)\n",
            r.path, r.dev, r.ino, r.entries
        ));
    }
    out.push_str(&format!(
        "looked at {} processes and {} mount namespaces in {} ms\n",
        s.processes,
        s.mount_namespaces,
        s.elapsed_us / 1000
    ));
    if s.held() {
        out.push_str(&format!(
            "HELD: {} processes, {} mounts, {} loop devices\n",
            s.holders_total, s.mounts_total, s.loops_total
        ));
    } else {
        out.push_str(
            "not held: no process (fd, cwd, root, exe, mapping or unix socket bound in it), \
             mount or loop device holds it\n",
        );
    }
    for l in findings(s) {
        out.push_str("  ");
        out.push_str(&l);
        out.push('\n');
    }
    out
}
