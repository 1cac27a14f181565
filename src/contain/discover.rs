//! Finding a writable cgroup2 hierarchy (docs/containment.md): the cgroup2 mount in
//! `/proc/self/mountinfo`, the watchdog's own group from the `0::PATH`
//! line of `/proc/self/cgroup`. Works for the unified layout
//! (`/sys/fs/cgroup`) and the hybrid one (`/sys/fs/cgroup/unified`).
//!
//! Tests point discovery at another mount point (`--cgroup-root`, hidden):
//! a missing directory, one that is not cgroup2, or a read-only cgroup2
//! mount all mean "no writable hierarchy".

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `CGROUP2_SUPER_MAGIC` (linux/magic.h).
pub const CGROUP2_MAGIC: i64 = 0x6367_7270;

/// One cgroup2 mount from mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup2Mount {
    /// The path inside the hierarchy the mount shows (field 4).
    pub root: String,
    pub mount_point: PathBuf,
    pub read_only: bool,
}

/// A writable hierarchy and the watchdog's own group in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount_point: PathBuf,
    /// The watchdog's own group's directory (where `rea-<run id>` goes).
    pub own: PathBuf,
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every cgroup2 mount in a mountinfo text, in order.
///
/// A line: `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
pub fn parse_mountinfo(text: &str) -> Vec<Cgroup2Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if dash < 6 || fields.get(dash + 1) != Some(&"cgroup2") {
            continue;
        }
        let ro = |opts: Option<&&str>| opts.is_some_and(|o| o.split(',').any(|x| x == "ro"));
        out.push(Cgroup2Mount {
            root: unescape(fields[3]),
            mount_point: PathBuf::from(unescape(fields[4])),
            read_only: ro(fields.get(5)) || ro(fields.get(dash + 3)),
        });
    }
    out
}

/// The cgroup v2 path of `/proc/self/cgroup` (the `0::PATH` line).
pub fn parse_own_group(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| p.starts_with('/'))
        .map(str::to_string)
}

/// The directory of group `own` under a mount showing hierarchy path `root`.
pub fn own_dir(mount_point: &Path, root: &str, own: &str) -> Option<PathBuf> {
    let rel = if root == "/" {
        own
    } else {
        let rest = own.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        mount_point.to_path_buf()
    } else {
        mount_point.join(rel)
    })
}

fn statfs_magic(p: &Path) -> io::Result<(i64, bool)> {
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL in path"))?;
    // SAFETY: zeroed plain-old-data out-structs, valid NUL-terminated path.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fs.f_type as i64, vfs.f_flag & libc::ST_RDONLY != 0))
}

fn writable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// Why there is no writable cgroup2 hierarchy for the watchdog's group.
#[derive(Debug)]
pub enum NoHierarchy {
    /// `/proc/self/cgroup` or `/proc/self/mountinfo` could not be read.
    Read(&'static str, io::Error),
    /// `/proc/self/cgroup` has no `0::` line.
    NoV2Line,
    /// No cgroup2 mount in `/proc/self/mountinfo`.
    NoMount,
    /// `statfs` of the mount point failed.
    Statfs(PathBuf, io::Error),
    NotCgroup2(PathBuf),
    ReadOnly(PathBuf),
    /// The own group is not below the mount's root: (group, root).
    NotUnderRoot(String, String),
    NotWritable(PathBuf),
}

impl std::fmt::Display for NoHierarchy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoHierarchy::Read(what, e) => write!(f, "{what}: {e}"),
            NoHierarchy::NoV2Line => f.write_str("/proc/self/cgroup has no cgroup v2 (0::) line"),
            NoHierarchy::NoMount => f.write_str("no cgroup2 mount in /proc/self/mountinfo"),
            NoHierarchy::Statfs(m, e) => write!(f, "{}: {e}", m.display()),
            NoHierarchy::NotCgroup2(m) => write!(f, "{} is not a cgroup2 mount", m.display()),
            NoHierarchy::ReadOnly(m) => write!(f, "{} is mounted read-only", m.display()),
            NoHierarchy::NotUnderRoot(own, root) => {
                write!(f, "own group {own} is not under the mount's root {root}")
            }
            NoHierarchy::NotWritable(d) => {
                write!(f, "own group {} is not a writable directory", d.display())
            }
        }
    }
}

impl std::error::Error for NoHierarchy {}

/// Finds a writable cgroup2 hierarchy and the watchdog's own group in it;
/// `root_override` replaces the mountinfo search (tests). The error says
/// why there is none.
pub fn discover(root_override: Option<&Path>) -> Result<Hierarchy, NoHierarchy> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| NoHierarchy::Read("/proc/self/cgroup", e))?;
    let own = parse_own_group(&cgroup).ok_or(NoHierarchy::NoV2Line)?;
    let (mount_point, root) = match root_override {
        Some(p) => (p.to_path_buf(), "/".to_string()),
        None => {
            let info = std::fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| NoHierarchy::Read("/proc/self/mountinfo", e))?;
            let mounts = parse_mountinfo(&info);
            let m = mounts
                .iter()
                .find(|m| !m.read_only)
                .or(mounts.first())
                .ok_or(NoHierarchy::NoMount)?;
            (m.mount_point.clone(), m.root.clone())
        }
    };
    let (magic, ro) = match statfs_magic(&mount_point) {
        Ok(r) => r,
        Err(e) => return Err(NoHierarchy::Statfs(mount_point, e)),
    };
    if magic != CGROUP2_MAGIC {
        return Err(NoHierarchy::NotCgroup2(mount_point));
    }
    if ro {
        return Err(NoHierarchy::ReadOnly(mount_point));
    }
    let Some(dir) = own_dir(&mount_point, &root, &own) else {
        return Err(NoHierarchy::NotUnderRoot(own, root));
    };
    if !dir.is_dir() || !writable(&dir) {
        return Err(NoHierarchy::NotWritable(dir));
    }
    Ok(Hierarchy {
        mount_point,
        own: dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
36 31 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
";
    const UNIFIED: &str = "\
24 29 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 24 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn hybrid_layout_finds_the_unified_mount_only() {
        let m = parse_mountinfo(HYBRID);
        assert_eq!(
            m,
            vec![Cgroup2Mount {
                root: "/".into(),
                mount_point: "/sys/fs/cgroup/unified".into(),
                read_only: false,
            }]
        );
    }

    #[test]
    fn unified_layout_finds_sys_fs_cgroup() {
        let m = parse_mountinfo(UNIFIED);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, PathBuf::from("/sys/fs/cgroup"));
        assert!(!m[0].read_only);
    }

    #[test]
    fn read_only_by_mount_or_super_options_and_escapes() {
        let text = "\
40 31 0:27 / /mnt/cg\\040ro ro,relatime - cgroup2 cgroup2 rw
41 31 0:27 /sub /mnt/cg2 rw,relatime master:3 - cgroup2 none ro
42 31 0:27 / /mnt/cgroup2fs rw - tmpfs cgroup2 rw
garbage line without a dash
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/cg ro"));
        assert!(m[0].read_only);
        assert_eq!(m[1].root, "/sub");
        assert!(m[1].read_only);
    }

    #[test]
    fn own_group_line() {
        let hybrid = "12:memory:/\n1:name=systemd:/user.slice\n0::/\n";
        assert_eq!(parse_own_group(hybrid).as_deref(), Some("/"));
        let unified = "0::/user.slice/user-1000.slice/session-3.scope\n";
        assert_eq!(
            parse_own_group(unified).as_deref(),
            Some("/user.slice/user-1000.slice/session-3.scope")
        );
        assert_eq!(parse_own_group("1:name=systemd:/\n"), None);
        assert_eq!(parse_own_group("0::relative\n"), None);
    }

    #[test]
    fn own_directory_under_the_mount() {
        let mp = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(own_dir(mp, "/", "/"), Some(mp.to_path_buf()));
        assert_eq!(own_dir(mp, "/", "/a/b"), Some(mp.join("a/b")));
        assert_eq!(own_dir(mp, "/a", "/a/b"), Some(mp.join("b")));
        assert_eq!(own_dir(mp, "/a", "/ab"), None);
        assert_eq!(own_dir(mp, "/", "/a/../b"), None);
    }
}
