//! The facts a recovery decides on, gathered read-only and in order: LOG
//! (read once, strictly, like `rea-audit reconcile` reads it), then LOG's
//! watchdog (probed by pid and start time, as reconcile probes it), then
//! the recorded group (re-opened by path *and inode*), then where NEW
//! would go. Nothing here signals, writes or removes anything.

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use crate::audit::reader::open_log;
use crate::audit::reconcile::log::{scan, LogScan};
use crate::audit::verdict::Status;
use crate::audit::verify::{verify_file, VerifyOptions};
use crate::contain::census::look;
use crate::contain::group::ActionGroup;
use crate::kinds::recovery::{Code, RecoveryChecked, RecoveryStarted, WatchdogSeen};
use crate::kinds::recovery_rule::gathered;
use crate::process::alive::probe;

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Why LOG's chain is not trusted: where `reconcile`'s chain check first
/// breaks, else `verify`'s tamper reasons on the same open file. A torn
/// last line and a missing receipt are not tampering (the watchdog died).
fn tampered(s: &LogScan, log: &std::fs::File) -> Option<String> {
    if let Some(b) = &s.chain_break {
        return Some(format!(
            "the chain holds through record {} and breaks at line {} ({}: {})",
            s.intact_through, b.line, b.code, b.detail
        ));
    }
    // The same open file, not the path again: verify reads what was scanned.
    let same = PathBuf::from(format!("/proc/self/fd/{}", log.as_raw_fd()));
    let v = verify_file(&same, &VerifyOptions::default());
    let t: Vec<_> = v
        .reasons
        .iter()
        .filter(|r| r.class == Status::Tampered)
        .collect();
    let first = t.first()?;
    let codes: Vec<String> = t.iter().map(|r| r.code.as_str()).collect();
    Some(format!("verify: {} ({})", codes.join(", "), first.detail))
}

/// Reads LOG and says what it shows (the first record of the recovery log).
pub fn started(log: &Path, staging: Option<&Path>) -> RecoveryStarted {
    let mut st = RecoveryStarted {
        version: env!("CARGO_PKG_VERSION").to_string(),
        log: absolute(log).display().to_string(),
        log_error: None,
        log_run: None,
        log_records: 0,
        log_intact_seq: None,
        log_intact_head: None,
        log_torn_tail_bytes: 0,
        log_sealed: false,
        log_tampered: None,
        watchdog: None,
        containment: None,
        staging: staging.map(|p| absolute(p).display().to_string()),
        staging_given: staging.is_some(),
        staging_recorded: None,
        uid: nix::unistd::getuid().as_raw(),
        pid: std::process::id(),
    };
    let read = open_log(log)
        .map_err(|e| e.to_string())
        .and_then(|f| scan(&f).map(|s| (f, s)).map_err(|e| e.to_string()));
    let (f, s) = match read {
        Ok(x) => x,
        Err(e) => {
            st.log_error = Some(e);
            return st;
        }
    };
    st.log_tampered = tampered(&s, &f);
    st.log_run = s.run.clone();
    st.log_records = s.records;
    st.log_intact_seq = s.intact_through.checked_sub(1);
    st.log_intact_head = s.intact_head.clone();
    st.log_torn_tail_bytes = s.tail_bytes;
    st.log_sealed = s.sealed;
    st.watchdog = s.run_started.as_ref().map(|r| r.watchdog);
    st.containment = s.containment.clone();
    st.staging_recorded = s.run_started.as_ref().and_then(|r| r.staging.clone());
    if st.staging.is_none() {
        st.staging = st.staging_recorded.as_ref().map(|d| d.path.clone());
    }
    st
}

/// Probes the watchdog and looks the group up, each only when every check
/// before it passed; the group, when it is still the recorded one.
pub fn checked(s: &RecoveryStarted) -> (RecoveryChecked, Option<ActionGroup>) {
    let mut c = RecoveryChecked {
        watchdog: None,
        group: None,
        recoverer_in_group: None,
    };
    let (probe_watchdog, _, _) = gathered(s, &c);
    if let (true, Some(w)) = (probe_watchdog, s.watchdog) {
        let p = probe(w.pid, w.start_time);
        c.watchdog = Some(WatchdogSeen {
            state: p.state,
            detail: p.detail,
        });
    }
    let (_, look_group, _) = gathered(s, &c);
    let mut group = None;
    if let (true, Some(g)) = (look_group, s.group()) {
        let (seen, found) = look(g);
        c.group = Some(seen);
        group = found;
    }
    if let Some(g) = &group {
        let me = std::process::id() as i32;
        c.recoverer_in_group = Some(match g.members() {
            Ok(pids) => pids.contains(&me),
            // Unreadable: assume the worst (refused, nothing killed).
            Err(_) => true,
        });
    }
    (c, group)
}

/// Whether NEW may be created: it must not exist (it is never
/// overwritten), and must not be inside a stage (the one to inventory or
/// the one LOG recorded: the stage's inventory would include it, and
/// whoever deletes the stage would delete it).
pub fn new_log_problem(new: &Path, stages: &[&Path]) -> Option<(Code, String)> {
    if std::fs::symlink_metadata(new).is_ok() {
        return Some((
            Code::NewLogExists,
            format!(
                "--audit-log {} already exists: a recovery log is never overwritten; name a new file",
                new.display()
            ),
        ));
    }
    let stage = stages.iter().find(|st| inside(new, st))?;
    Some((
        Code::NewLogInStage,
        format!(
            "--audit-log {} is inside the stage {}: the log must be outside it",
            new.display(),
            stage.display()
        ),
    ))
}

/// NEW's directory is the stage or below it (by device and inode, walking
/// `..` up to `/`). A stage that cannot be opened has nothing inside.
fn inside(new: &Path, stage: &Path) -> bool {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::fstat;
    let Ok(sfd) = crate::inventory::open_dir(stage) else {
        return false;
    };
    let Ok(st) = fstat(&sfd) else {
        return false;
    };
    let parent = match new.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(f) = std::fs::File::open(parent) else {
        return false;
    };
    let mut fd: std::os::fd::OwnedFd = f.into();
    for _ in 0..4096 {
        let Ok(here) = fstat(&fd) else {
            return false;
        };
        if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino) {
            return true;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let Ok(up) = openat(fd.as_fd(), "..", flags, nix::sys::stat::Mode::empty()) else {
            return false;
        };
        let Ok(above) = fstat(&up) else {
            return false;
        };
        if (above.st_dev, above.st_ino) == (here.st_dev, here.st_ino) {
            return false;
        }
        fd = up;
    }
    false
}
