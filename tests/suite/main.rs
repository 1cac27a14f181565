//! The integration suite: every test that runs the real binaries against
//! real processes, pidfds, FIFOs, files and cgroups, as one test binary.
//!
//! One binary, not one per file: each file used to be a crate of its own
//! that compiled the shared support in `common/` (and its `jsonschema`
//! instantiations) again and linked again, ~35 s of release build per file
//! on two cores, most of a fresh `tools/test`. Each file is a module here,
//! so a test is named by its file: `stop::deadline_stops_the_whole_tree`.
//!
//! Run it inside a private PID namespace, through `tools/test`; a filter
//! picks files or tests:
//!
//! ```text
//! tools/test stop::                       # the tests of stop.rs
//! tools/test -- stop:: ask::             # several filters: after --
//! REA_CONTAIN=none tools/test stop::      # those in none mode (docs/containment.md)
//! ```
//!
//! Tests run concurrently as before; those that must not overlap (mounts
//! and mount namespaces) share a lock in `common/`.

/// The preamble of every test that starts or signals processes: it runs
/// only inside a private PID namespace, so that it can never see or signal
/// a process outside it. Outside one the test returns at once, saying so
/// (`common::harness::skip_outside_pid_ns`), and under `tools/test` or
/// `.ci/run` (`REA_REQUIRE_PIDNS=1`) it fails instead of skipping.
macro_rules! require_pid_ns {
    ($what:expr) => {
        if crate::common::harness::skip_outside_pid_ns($what) {
            return;
        }
    };
}

mod common;

mod acceptance;
mod alarms;
mod ask;
mod audit_tamper;
mod audit_verdict;
mod client;
mod clock;
mod contain;
mod corpus;
mod exec;
mod exec_handover;
mod faults;
mod faults_audit;
mod foreign;
mod framer_props;
mod fuzz_verify;
mod generate;
mod holders;
mod holders_sockets;
mod layout;
mod parser;
mod python_client;
mod reconcile;
mod recover;
mod report;
mod requests;
mod runner;
mod schedules;
mod schema;
mod show;
mod smoke_stop;
mod ssh;
mod stage;
mod stage_changes;
mod stage_pinned;
mod stage_private;
mod stage_remove;
mod stop;
mod stop_bound;
mod stop_storm;
mod stuck;
mod timeout;
mod timeout_args;
mod watchdog_loop;
