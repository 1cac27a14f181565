//! One static file for the three programs, chosen by the name it is run
//! as (docs/deploy.md): `rea-watchdog` (and `timeout`), `rea-audit`,
//! `rea-stage`. `tools/dist` builds it so that what a controller uploads
//! into a stage is one binary of about 3 MB instead of three that repeat
//! the same library and libc; the three names are links to it. Any other
//! name runs `rea-watchdog`, as the ordinary build's `rea-watchdog` does.

use std::process::ExitCode;

#[path = "rea-audit.rs"]
mod audit;
#[path = "rea-stage.rs"]
mod stage;
#[path = "rea-watchdog/main.rs"]
mod watchdog;

fn main() -> ExitCode {
    let arg0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&arg0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.as_str() {
        "rea-audit" => audit::main(),
        "rea-stage" => stage::main(),
        _ => watchdog::main(),
    }
}
