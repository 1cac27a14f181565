//! The watchdog's own files in the stage, as the verdict sees them
//! (docs/stage.md, "The watchdog's own place"). Its state directory and
//! audit log, when they lie in the stage, are left out of the stage's
//! inventory at start and at close; these rules account for them instead:
//! the same paths at start and at close, the state directory removed at
//! close and still absent now, and the entry at the log's path still the
//! log the watchdog wrote (or gone).

use std::os::fd::BorrowedFd;

use crate::audit::replay::Replay;
use crate::audit::verdict::Code;
use crate::inventory;
use crate::kinds::watchdog::{PrivateState, Receipt};

/// What the log says about the watchdog's own files: the paths left out
/// at close are the ones left out at start (`staging_mismatch`), and a
/// state directory in the stage was removed at close (`private_state_kept`).
pub fn at_close(replay: &Replay, rc: &Receipt) -> Vec<(Code, String)> {
    let mut out = Vec::new();
    let Some(sealed) = &rc.staging else {
        return out;
    };
    let at_start = replay.baseline().and_then(|b| b.private.as_ref());
    let paths = |p: Option<&PrivateState>| p.map(PrivateState::paths);
    if replay.baseline().is_some() && paths(at_start) != paths(sealed.private.as_ref()) {
        out.push((
            Code::StagingMismatch,
            "the watchdog's own files left out of the stage at close are not the ones left out at its baseline".into(),
        ));
    }
    let Some(p) = &sealed.private else {
        return out;
    };
    if let Some(dir) = &p.state_dir {
        match &p.state_dir_removed {
            Some(r) if r.removed => {}
            Some(r) => out.push((
                Code::PrivateStateKept,
                format!("the state directory {dir} in the stage was not removed at close: {}", r.detail),
            )),
            None => out.push((
                Code::PrivateStateKept,
                format!("the log does not say the state directory {dir} in the stage was removed at close"),
            )),
        }
    }
    out
}

/// The watchdog's own files as found now under the stage open as `dir`:
/// one detail per entry that is not as close left it (the state
/// directory back, the log's path now another file, a link on the way).
pub fn now(dir: BorrowedFd<'_>, p: &PrivateState) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(rel) = &p.state_dir {
        match inventory::stat_under(dir, rel) {
            Ok(None) => {}
            Ok(Some(_)) => out.push(format!(
                "{rel} is in the stage: the watchdog's state directory was removed at close, and something is there now"
            )),
            Err(e) => out.push(format!("{rel}: cannot look: {e}")),
        }
    }
    if let Some(rel) = &p.audit_log {
        match inventory::stat_under(dir, rel) {
            Ok(None) => {}
            Ok(Some(st))
                if st.st_mode & libc::S_IFMT == libc::S_IFREG
                    && Some(st.st_ino) == p.audit_log_ino => {}
            Ok(Some(st)) => out.push(format!(
                "{rel} is not the audit log the watchdog wrote (inode {}, expected {})",
                st.st_ino,
                p.audit_log_ino.map_or("none".into(), |i| i.to_string())
            )),
            Err(e) => out.push(format!("{rel}: cannot look: {e}")),
        }
    }
    out
}
