//! Mounts that hold the tree, in every mount namespace a process is in.
//!
//! A namespace's mounts are read from `/proc/PID/mountinfo` of one process
//! in it, and their paths resolved through that process's `/proc/PID/root`
//! (the lookup then walks that namespace's mounts). Two holds, both by
//! `(dev, ino)`:
//! - **mount point**: it is mounted on a tree entry (the directory its
//!   mount point is in is a tree directory). Only mounts whose parent mount
//!   is of a tree device are looked up. Checked first: such a mount's root
//!   is met by the walk too (as the entry it covers).
//! - **source**: the mount's root is a tree entry (a bind mount of a stage
//!   directory or file elsewhere). Only mounts of a tree device are looked
//!   up; the mount the tree's root itself is the root of, in the scanner's
//!   own namespace, is where the stage is, not a hold (matched by mount ID,
//!   not by path). In another namespace a copy of that mount counts as a
//!   hold: a false "held" (the stage is kept), never a missed one.

use std::collections::HashMap;
use std::ffi::CString;

use super::statx;
use super::tree::Tree;
use super::{bounded, MountHold, MountHow};

/// One line of `mountinfo`.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount {
    pub id: u64,
    pub parent: u64,
    pub dev: u64,
    /// Unescaped.
    pub mount_point: Vec<u8>,
    pub fstype: String,
    pub source: String,
}

/// `\ooo` escapes (space, tab, newline, backslash) undone.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\'
            && i + 3 < s.len()
            && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (s[i + 1] - b'0') as u32 * 64
                + (s[i + 2] - b'0') as u32 * 8
                + (s[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// Parses `mountinfo` (proc(5)); lines that do not parse are skipped.
pub fn parse(text: &[u8]) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(dash) = f.iter().position(|x| *x == b"-") else {
            continue;
        };
        if dash < 6 || f.len() < dash + 3 {
            continue;
        }
        let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
        let dev = std::str::from_utf8(f[2]).ok().and_then(|d| {
            let (a, b) = d.split_once(':')?;
            Some(libc::makedev(a.parse().ok()?, b.parse().ok()?))
        });
        let (Some(id), Some(parent), Some(dev)) = (num(f[0]), num(f[1]), dev) else {
            continue;
        };
        out.push(Mount {
            id,
            parent,
            dev,
            mount_point: unescape(f[4]),
            fstype: bounded(f[dash + 1]),
            source: bounded(&unescape(f[dash + 2])),
        });
    }
    out
}

/// Whether the `/proc` the scan reads (mount `proc_mnt`) hides processes:
/// mounted with `hidepid=` (other than 0/off) or `subset=pid`, it lists
/// only what the reader may see, so the others cannot even be named.
pub fn proc_hides(text: &[u8], proc_mnt: u64) -> Option<String> {
    for line in text.split(|&b| b == b'\n') {
        let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let id = std::str::from_utf8(f.first()?).ok()?.parse::<u64>().ok();
        if id != Some(proc_mnt) {
            continue;
        }
        let dash = f.iter().position(|x| *x == b"-")?;
        let opts = std::str::from_utf8(f.get(dash + 3)?).ok()?;
        let hiding = opts.split(',').find(|o| {
            o.strip_prefix("hidepid=")
                .is_some_and(|v| !matches!(v, "0" | "off"))
                || *o == "subset=pid"
        });
        return hiding.map(|o| {
            format!("/proc is mounted with {o}: processes this user may not see are not listed, so they cannot be named")
        });
    }
    None
}

/// `statx` of `path` as process `pid` sees it (through its root).
fn stat_as(pid: i32, path: &[u8]) -> Option<statx::Stat> {
    let mut full = format!("/proc/{pid}/root").into_bytes();
    full.extend_from_slice(path);
    let c = CString::new(full).ok()?;
    statx::path(&c, false).ok()
}

fn dirname(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&b| b == b'/') {
        Some(0) | None => b"/",
        Some(i) => &p[..i],
    }
}

/// The mounts of namespace `ns`, seen through process `pid`, that hold the
/// tree. `own` is the scanner's own namespace.
pub fn holds(pid: i32, ns: u64, own: bool, tree: &Tree) -> std::io::Result<Vec<MountHold>> {
    let name = CString::new(format!("/proc/{pid}/mountinfo")).map_err(std::io::Error::other)?;
    let mut text = Vec::new();
    super::procs::read_into(nix::fcntl::AT_FDCWD, &name, &mut text)?;
    let mounts = parse(&text);
    let dev_of: HashMap<u64, u64> = mounts.iter().map(|m| (m.id, m.dev)).collect();
    let mut out = Vec::new();
    for m in &mounts {
        let hold = |root, how| MountHold {
            root,
            how,
            mount_point: bounded(&m.mount_point),
            fstype: m.fstype.clone(),
            source: m.source.clone(),
            mnt_ns: ns,
            seen_by: pid,
        };
        // On a tree entry first: a mount on a stage subdirectory also has a
        // root the walk met (as that subdirectory's entry).
        let parent_on_tree = dev_of.get(&m.parent).is_some_and(|d| tree.devs.contains(d));
        if parent_on_tree && m.mount_point != b"/" {
            if let Some(st) = stat_as(pid, dirname(&m.mount_point)) {
                if let (true, Some(root)) = (tree.dirs.contains(&st.key()), tree.root_of(st.key()))
                {
                    out.push(hold(root, MountHow::MountPoint));
                    continue;
                }
            }
        }
        if tree.devs.contains(&m.dev) {
            if let Some(st) = stat_as(pid, &m.mount_point) {
                // The mount a tree's root is itself the root of, in this
                // namespace: where the stage is, not a hold (by mount ID).
                let at_own_root = own && tree.root_mounts.iter().any(|&id| id != 0 && id == m.id);
                if let (Some(root), false) = (tree.root_of(st.key()), at_own_root) {
                    out.push(hold(root, MountHow::Source));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mountinfo_line_parses_with_optional_fields_and_escapes() {
        let text =
            b"36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 shared:2 - ext3 /dev/root rw\n\
                     bad line\n\
                     40 36 0:33 / /x rw - tmpfs tmpfs rw\n";
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].id, 36);
        assert_eq!(m[0].parent, 35);
        assert_eq!(m[0].dev, libc::makedev(98, 0));
        assert_eq!(m[0].mount_point, b"/mnt/a b");
        assert_eq!(m[0].fstype, "ext3");
        assert_eq!(m[0].source, "/dev/root");
        assert_eq!(m[1].mount_point, b"/x");
    }

    #[test]
    fn a_proc_that_hides_processes_is_told() {
        let text = b"22 1 0:5 / /proc rw - proc proc rw,hidepid=invisible\n23 1 0:6 / /p2 rw - proc proc rw,hidepid=0\n";
        assert!(proc_hides(text, 22).unwrap().contains("hidepid=invisible"));
        assert_eq!(proc_hides(text, 23), None);
        assert_eq!(proc_hides(text, 99), None);
    }

    #[test]
    fn dirname_of_a_mount_point() {
        assert_eq!(dirname(b"/a/b/c"), b"/a/b");
        assert_eq!(dirname(b"/a"), b"/");
    }
}
