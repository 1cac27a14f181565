//! What may be launched: an admitted spawn request, or exec's own job,
//! with everything the jobs room needs to start it and to record who
//! asked.

use std::ffi::OsString;
use std::fs::File;
use std::time::Duration;

use super::caller::Bound;
use super::effect::ReplyTo;
use crate::process::identity::Stat;
use crate::process::pidfd::VerifiedPidFd;
use crate::protocol::SpawnSpec;
use crate::vocab::{Capture, Ident, Sig};

/// One job to launch, as admitted (or as exec's own job).
pub struct LaunchRequest {
    pub id: String,
    pub argv: Vec<OsString>,
    /// The file to execute when `argv[0]` does not name it (exec's bare
    /// command name, found on `PATH`); `None`: `argv[0]`.
    pub program: Option<OsString>,
    pub name: Option<String>,
    /// The job's own deadline from now (capped by the action deadline).
    pub deadline: Option<Duration>,
    /// The inner alarm, from now (below the deadline).
    pub inner_alarm: Option<Duration>,
    /// What the leader is asked to stop with when the action stops: a
    /// request's [`StopSignal`], or any signal timeout's `-s` names.
    pub stop_signal: Sig,
    pub capture: Capture,
    /// The job's working directory (`None`: the watchdog's).
    pub cwd: Option<OsString>,
    /// The job's whole environment from the request (`None`: the job
    /// environment); the `REA_*` names are set over it at launch.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// The request's `stdin` file name in `replies/`, until admission
    /// opens it into `stdin`.
    pub stdin_name: Option<String>,
    /// The job's stdin (`None`: /dev/null, or exec's own).
    pub stdin: Option<File>,
    /// A caller other than the root, bound for as long as the job runs.
    pub caller: Option<VerifiedPidFd>,
    /// Who asked, for the record (`None` in exec mode: nobody did).
    pub caller_ident: Option<Ident>,
    /// Where the caller's ancestry met the watchdog ([`Bound::via`]): the
    /// job it belongs to is named in the record from it.
    pub caller_via: Option<Stat>,
    pub reply: Option<ReplyTo>,
}

impl LaunchRequest {
    /// exec mode: the one job, ARGV (run from `program` when given), with
    /// output passed through.
    pub fn exec(
        argv: &[OsString],
        program: Option<OsString>,
        deadline: Option<Duration>,
        stop: Sig,
    ) -> LaunchRequest {
        LaunchRequest {
            id: "exec".into(),
            argv: argv.to_vec(),
            program,
            name: None,
            deadline,
            inner_alarm: None,
            stop_signal: stop,
            capture: Capture::Discard,
            cwd: None,
            env: None,
            stdin_name: None,
            stdin: None,
            caller: None,
            caller_ident: None,
            caller_via: None,
            reply: None,
        }
    }

    /// An admitted spawn request; `root` is recorded as the caller when
    /// none was bound (`None` in exec mode, whose root is only its parent).
    pub fn admitted(
        reply: ReplyTo,
        spec: SpawnSpec,
        caller: Option<Bound>,
        root: Option<Ident>,
    ) -> LaunchRequest {
        let (caller, caller_via) = match caller {
            Some(b) => (Some(b.fd), b.via),
            None => (None, None),
        };
        LaunchRequest {
            id: reply.id.clone(),
            argv: spec.argv.iter().map(OsString::from).collect(),
            program: None,
            name: spec.name,
            deadline: Some(Duration::from_millis(spec.deadline_ms)),
            inner_alarm: spec.inner_alarm_ms.map(Duration::from_millis),
            stop_signal: spec.stop_signal.sig(),
            capture: spec.capture,
            cwd: spec.cwd.map(OsString::from),
            env: spec.env.map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect()
            }),
            stdin_name: spec.stdin,
            stdin: None,
            caller_ident: caller.as_ref().map(|c| c.ident()).or(root),
            caller,
            caller_via,
            reply: Some(reply),
        }
    }
}
