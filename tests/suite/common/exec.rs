//! One `rea-watchdog exec` action for a test (`tests/suite/exec.rs`,
//! `tests/suite/exec_handover.rs`): its scratch directory, its audit log
//! and its command line. Each file adds the checks of its own.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use super::harness::{output_within, records, watchdog_bin, Scratch, PATIENCE};
use super::typed::Log;

/// One exec action's scratch, log and command line.
pub struct Exec {
    pub scratch: Scratch,
    pub log: PathBuf,
}

impl Exec {
    pub fn new() -> Exec {
        let scratch = Scratch::new();
        let log = scratch.path("audit.jsonl");
        Exec { scratch, log }
    }

    /// `rea-watchdog exec --audit-log LOG ARGS -- ARGV` (TMPDIR in
    /// scratch), stdin null, stdout and stderr piped (a test may set them
    /// otherwise).
    pub fn command(&self, args: &[&str], argv: &[&str]) -> Command {
        let mut c = Command::new(watchdog_bin());
        c.arg("exec")
            .arg("--audit-log")
            .arg(&self.log)
            .args(args)
            .arg("--")
            .args(argv)
            .env("TMPDIR", self.scratch.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub fn spawn(&self, args: &[&str], argv: &[&str]) -> Child {
        self.command(args, argv).spawn().expect("spawn exec")
    }

    pub fn run(&self, args: &[&str], argv: &[&str]) -> Output {
        output_within(self.spawn(args, argv), PATIENCE)
    }

    /// The log's lines as JSON (the envelope: `run`, `seq`, ...).
    pub fn records(&self) -> Vec<Value> {
        records(&self.log)
    }

    /// The log's records, typed ([`Log::read`]).
    pub fn typed(&self) -> Log {
        Log::read(&self.log)
    }
}

impl Default for Exec {
    fn default() -> Self {
        Exec::new()
    }
}
