//! Arming a stage (SPEC 7.1): when the staging directory holds a
//! before-transfer receipt (`rea-stage begin`), the watchdog creates
//! `.rea-exec-started` in it exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`
//! through the directory's descriptor, naming the run id) right after its
//! first records and before anything is spawned. From then on the stage is
//! no longer "before any exec" and `rea-stage discard` refuses it. Arming
//! that fails (already armed by another run, the stage replaced, any I/O
//! error) refuses the start: nothing is launched.

use std::io::Write;
use std::os::fd::AsFd;

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat};

use super::config::Config;
use crate::audit::record::{DirIdentity, Event, StageArmed};
use crate::inventory::open_dir;
use crate::stage::receipt::create_exclusive;
use crate::stage::{ARMED_NAME, RECEIPT_NAME};

/// [`arm_stage`] as the step `Ledger::start` takes after the first records.
pub fn then<'a>(
    cfg: &'a Config,
    start: &'a Option<DirIdentity>,
) -> impl FnOnce() -> Result<Option<Event>, String> + 'a {
    move || arm_stage(cfg, start.as_ref())
}

/// Arms the stage if it is one `rea-stage begin` made; the record to write.
pub fn arm_stage(cfg: &Config, start: Option<&DirIdentity>) -> Result<Option<Event>, String> {
    let (Some(path), Some(start)) = (cfg.staging.as_deref(), start) else {
        return Ok(None);
    };
    let shown = path.display();
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!("staging directory {shown}: {what}: {e} (refusing to start; nothing was launched)")
    };
    let fd = open_dir(path).map_err(|e| fail("cannot open it", &e))?;
    let st = fstat(&fd).map_err(|e| fail("fstat", &e))?;
    if (st.st_dev, st.st_ino) != (start.dev, start.ino) {
        return Err(fail("arming", &"it was replaced since the start"));
    }
    match fstatat(fd.as_fd(), RECEIPT_NAME, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => {}
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
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
    writeln!(f, "{}", cfg.run_id).map_err(|e| fail("writing the marker", &e))?;
    f.sync_all().map_err(|e| fail("fsync the marker", &e))?;
    nix::unistd::fsync(&fd).map_err(|e| fail("fsync", &e))?;
    Ok(Some(Event::StageArmed(StageArmed {
        path: start.path.clone(),
        marker: ARMED_NAME.to_string(),
        ino,
    })))
}
