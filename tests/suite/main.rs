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
//! REA_CONTAIN=none tools/test stop::      # those in none mode (SPEC 8)
//! ```
//!
//! Tests run concurrently as before; those that must not overlap (mounts
//! and mount namespaces) share a lock in `common/`.

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
mod parser;
mod python_client;
mod reconcile;
mod recover;
mod report;
mod requests;
mod schedules;
mod schema;
mod show;
mod smoke_stop;
mod stage;
mod stop;
mod stop_bound;
mod stop_storm;
mod stuck;
mod timeout;
mod timeout_args;
mod watchdog_loop;
