//! What a job starts with: its environment and its child-side setup.
//!
//! Under run, the job environment of docs/architecture.md: minimal and explicit
//! (`PATH`, `LANG`, `HOME` from the watchdog's, `TMPDIR` its temp root,
//! the `REA_*` names, and what `--pass-env` names). Under exec, by default
//! the caller's whole environment with the `REA_*` names set over it
//! (docs/cli.md: `FOO=1 rea-watchdog exec -- cmd` gives `cmd` FOO);
//! `--env minimal` gives run's.

use std::ffi::OsString;

use super::config::Config;
use super::spawn::ChildSetup;
use super::state_dir::StateDir;
use crate::process::dispositions::SignalBits;

/// The names the watchdog sets for every job (over an inherited value).
const OWN: [&str; 3] = ["REA_RUN_ID", "REA_STATE_DIR", "REA_JOB"];

pub fn job_env(cfg: &Config, state: &StateDir) -> Vec<(OsString, OsString)> {
    let own = [
        ("REA_RUN_ID".into(), cfg.run_id.clone().into()),
        ("REA_STATE_DIR".into(), state.path.clone().into()),
    ];
    if cfg.handover.as_ref().is_some_and(|h| h.env_inherited) {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| !OWN.iter().any(|o| k == o))
            .collect();
        env.extend(own);
        return env;
    }
    let inherit = |k: &str, default: &str| std::env::var_os(k).unwrap_or_else(|| default.into());
    let mut env: Vec<(OsString, OsString)> = vec![
        (
            "PATH".into(),
            inherit("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ),
        ("LANG".into(), inherit("LANG", "C.UTF-8")),
        ("HOME".into(), inherit("HOME", "/")),
        ("TMPDIR".into(), state.tmp_path().into()),
    ];
    env.extend(own);
    for name in &cfg.pass_env {
        if let Some(v) = std::env::var_os(name) {
            env.retain(|(k, _)| k != name.as_str());
            env.push((name.into(), v));
        }
    }
    env
}

/// A request's own environment (`env`, docs/requests.md) with the
/// watchdog's names (`REA_RUN_ID`, `REA_STATE_DIR`) set over it from the
/// job environment `base`; `REA_JOB` is added at launch.
pub fn requested_env(
    asked: &[(OsString, OsString)],
    base: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let own = |k: &OsString| OWN.iter().any(|o| k == o);
    let mut env: Vec<(OsString, OsString)> =
        asked.iter().filter(|(k, _)| !own(k)).cloned().collect();
    env.extend(base.iter().filter(|(k, _)| own(k)).cloned());
    env
}

/// The child side of a spawn for this action: run's way, or exec's
/// handover (the signals the caller left ignored stay so).
pub fn child_setup(cfg: &Config) -> ChildSetup {
    match &cfg.handover {
        None => ChildSetup::RUN,
        Some(h) => ChildSetup {
            inherit_stdio: h.stdio_inherited,
            keep_ignored: SignalBits::of(&h.kept_ignored),
            own_session: h.own_session,
            pdeathsig: h.pdeathsig,
        },
    }
}
