//! Arming a stage (docs/stage.md): when the staging directory holds a
//! before-transfer receipt (`rea-stage begin`), the watchdog creates
//! `.rea-exec-started` in it exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`
//! through the directory's descriptor, naming the run id) right after its
//! first records and before anything is spawned. From then on the stage is
//! no longer "before any exec" and `rea-stage discard` refuses it. Arming
//! that fails (already armed by another run, the stage replaced, any I/O
//! error) refuses the start: nothing is launched.
//!
//! The interlock with a discard: right after creating `.rea-exec-started`
//! the watchdog looks for `.rea-discarding` (which discard creates
//! exclusively before its first removal, then looks for ours). If it is
//! there, the watchdog removes its own marker (by the inode it created) and
//! refuses to start. A stage whose receipt is gone while `.rea-discarding`
//! is there is being discarded: also refused.

use std::io::Write;
use std::os::fd::AsFd;

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat};

use super::config::Config;
use crate::inventory::open_dir;
use crate::kinds::watchdog::{DirIdentity, Event, StageArmed};
use crate::stage::receipt::create_exclusive;
use crate::stage::remove::unlink_own;
use crate::stage::{ARMED_NAME, DISCARDING_NAME, RECEIPT_NAME};

/// Why a stage could not be armed: the start is refused, nothing launched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArmRefused {
    /// The stage, as given.
    pub stage: String,
    /// The step that failed (`creating .rea-exec-started`, `arming`, ...).
    pub step: String,
    pub cause: String,
}

impl std::fmt::Display for ArmRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "staging directory {}: {}: {} (refusing to start; nothing was launched)",
            self.stage, self.step, self.cause
        )
    }
}

/// Arms the stage if it is one `rea-stage begin` made; the record to write.
pub fn arm_stage(cfg: &Config, start: Option<&DirIdentity>) -> Result<Option<Event>, ArmRefused> {
    let (Some(path), Some(start)) = (cfg.staging.as_deref(), start) else {
        return Ok(None);
    };
    let shown = path.display();
    let fail = |what: &str, e: &dyn std::fmt::Display| ArmRefused {
        stage: shown.to_string(),
        step: what.to_string(),
        cause: e.to_string(),
    };
    let fd = open_dir(path).map_err(|e| fail("cannot open it", &e))?;
    let st = fstat(&fd).map_err(|e| fail("fstat", &e))?;
    if (st.st_dev, st.st_ino) != (start.dev, start.ino) {
        return Err(fail("arming", &"it was replaced since the start"));
    }
    let discarding = |fd: &std::os::fd::OwnedFd| match fstatat(
        fd.as_fd(),
        DISCARDING_NAME,
        AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::ENOENT) => Ok(false),
        Err(e) => Err(fail(&format!("looking for {DISCARDING_NAME}"), &e)),
    };
    let busy = "a rea-stage discard is removing this stage";
    match fstatat(fd.as_fd(), RECEIPT_NAME, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => {}
        Err(nix::errno::Errno::ENOENT) => {
            if discarding(&fd)? {
                return Err(fail(
                    "arming",
                    &format!("{busy} ({DISCARDING_NAME} exists, its receipt is already gone)"),
                ));
            }
            return Ok(None);
        }
        Err(e) => return Err(fail("looking for the before-transfer receipt", &e)),
    }
    let mut f = match create_exclusive(fd.as_fd(), ARMED_NAME) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(fail(
                &format!("creating {ARMED_NAME}"),
                &"it exists: the stage is already armed (another run has used it)",
            ))
        }
        Err(e) => return Err(fail(&format!("creating {ARMED_NAME}"), &e)),
    };
    let ino = fstat(&f).map_err(|e| fail("fstat the marker", &e))?.st_ino;
    let other = discarding(&fd);
    if !matches!(other, Ok(false)) {
        drop(f);
        let undone = match unlink_own(fd.as_fd(), ARMED_NAME, ino) {
            Ok(()) => {
                let _ = nix::unistd::fsync(&fd);
                format!("our {ARMED_NAME} was removed again")
            }
            Err(e) => format!("our {ARMED_NAME} could not be removed: {e}"),
        };
        let why = match other {
            Ok(_) => format!("{busy} ({DISCARDING_NAME} exists)"),
            Err(e) => e.to_string(),
        };
        return Err(fail("arming", &format!("{why}; {undone}")));
    }
    writeln!(f, "{}", cfg.run_id).map_err(|e| fail("writing the marker", &e))?;
    f.sync_all().map_err(|e| fail("fsync the marker", &e))?;
    nix::unistd::fsync(&fd).map_err(|e| fail("fsync", &e))?;
    Ok(Some(Event::StageArmed(StageArmed {
        path: start.path.clone(),
        marker: ARMED_NAME.to_string(),
        ino,
    })))
}
