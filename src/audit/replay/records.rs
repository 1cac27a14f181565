//! The checks of single records the replay makes as it reads them: a
//! root bound as its source says, a job spawned by the watchdog in its
//! own session, as the watchdog's user.

use super::{mismatch, Replay};
use crate::audit::verdict::Code;
use crate::kinds::watchdog::{Ident, JobSpawned, RootBound, RootSource};

impl Replay {
    /// `root_bound`: second, naming a root exactly when its source binds
    /// one, of the watchdog's uid.
    pub(super) fn root_bound(&mut self, b: &RootBound, wd: Option<Ident>, line: u64) {
        self.second_is_root_bound |= self.seen == 2;
        let unbound = matches!(b.source, RootSource::Init | RootSource::Unwatched);
        if unbound != b.root.is_none() || b.root.is_none() != b.comm.is_none() {
            let detail = format!(
                "root_bound names a root exactly when its source ({:?}) binds one",
                b.source
            );
            self.push(mismatch(detail));
        }
        if let Some((w, r)) = wd.zip(b.root).filter(|(w, r)| w.uid != r.uid) {
            let detail = format!("root of uid {}, not the watchdog's {}", r.uid, w.uid);
            self.at(Code::ForeignUid, line, detail);
        }
        if let Some(r) = b.root {
            self.root.get_or_insert(r);
        }
    }

    /// `job_spawned`: in order, once, a child of the watchdog of its uid,
    /// leading its own session.
    pub(super) fn job_spawned(&mut self, j: &JobSpawned, wd: Option<Ident>, line: u64) {
        if self.last_job.is_some_and(|l| j.job <= l) || self.open.contains_key(&j.job) {
            self.push(mismatch(format!(
                "job {} spawned twice (or out of order)",
                j.job
            )));
        }
        if let Some(by) = j.caller_job {
            self.caller_job(j, by);
        }
        self.last_job = Some(j.job);
        self.open
            .insert(j.job, (j.pid, j.start_time, j.stop_signal));
        if let Some(w) = wd {
            if j.ppid != w.pid {
                self.push(mismatch(format!(
                    "job {} has parent {}, not the watchdog",
                    j.job, j.ppid
                )));
            }
            if j.uid != w.uid {
                let detail = format!(
                    "job {} of uid {}, not the watchdog's {}",
                    j.job, j.uid, w.uid
                );
                self.at(Code::ForeignUid, line, detail);
            }
        }
        if j.sid != j.pid {
            let detail = format!(
                "job {} leader pid {} is in session {}, not its own",
                j.job, j.pid, j.sid
            );
            self.at(Code::LeaderNotSession, line, detail);
        }
    }
}
