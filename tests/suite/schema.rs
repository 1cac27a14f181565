//! audit-schema/ against what the library really writes: every record kind,
//! requests, replies, verdicts, the negative cases the schemas must refuse,
//! and the README's worked example of the chain rule.

use crate::common;
use rea::log::Kind as _;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use common::schema::{
    assert_log_matches_schema, assert_reply_matches_schema, assert_request_matches_schema,
    assert_verdict_matches_schema, record_validator, reply_validator, request_validator,
    schema_dir, schema_errors, verdict_validator,
};
use rea::audit::verdict::{Code, Reason, Status as VStatus, Verdict};
use rea::audit::verify::{verify_bytes, verify_file, VerifyOptions};
use rea::audit::{AuditWriter, Event};
use rea::kinds::stage::{Aspect, Change, StageChange};
use rea::kinds::watchdog::*;
use rea::protocol::{
    parse_request, Caller, Capture, Op, RefusalReason, Reply, Request, StreamReply,
};
use rea::vocab::StopSignal;

// ------------------------------------------------------------------ helpers

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn assert_rejected(validator: &jsonschema::Validator, instance: &Value, what: &str) {
    assert!(
        !validator.is_valid(instance),
        "{what}: the schema accepted what it must refuse: {instance}"
    );
    assert!(!schema_errors(validator, instance).is_empty());
}

fn load_schema(name: &str) -> Value {
    let path = schema_dir().join(format!("{name}.schema.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every variant of each enum the records carry. The `match` without a
/// wildcard stops compiling when a variant is added, so the lists (and with
/// them the schema checks below) cannot silently fall behind.
fn all_stop_reasons() -> Vec<StopReason> {
    use StopReason::*;
    let all = vec![
        Deadline,
        RootLost,
        CallerLost,
        Abandoned,
        ExcessOutput,
        MappingRefused,
        Signal,
        StopRequested,
        CloseWhileRunning,
        AuditFailure,
        Hangup,
    ];
    for r in &all {
        match r {
            Deadline | RootLost | CallerLost | Abandoned | ExcessOutput | MappingRefused
            | Signal | StopRequested | CloseWhileRunning | AuditFailure | Hangup => {}
        }
    }
    all
}

fn all_refusals() -> Vec<RefusalReason> {
    use RefusalReason::*;
    let all = vec![
        Malformed,
        Oversize,
        UnknownField,
        DuplicateKey,
        BadVersion,
        BadOp,
        BadId,
        BadCaller,
        BadArgv,
        RelativeArgv0,
        BadDeadline,
        BadCapture,
        BadName,
        BadReply,
        CallerNotAlive,
        CallerMismatch,
        CallerNotOwned,
        DuplicateId,
        Aborted,
        Closed,
        NotFound,
        NotExecutable,
        SpawnFailed,
        Framing,
        Truncated,
        NoDescriptors,
        BadInnerAlarm,
        BadStopSignal,
        BadCwd,
        BadEnv,
        BadStdin,
    ];
    for r in &all {
        match r {
            Malformed | Oversize | UnknownField | DuplicateKey | BadVersion | BadOp | BadId
            | BadCaller | BadArgv | RelativeArgv0 | BadDeadline | BadCapture | BadName
            | BadReply | CallerNotAlive | CallerMismatch | CallerNotOwned | DuplicateId
            | Aborted | Closed | NotFound | NotExecutable | SpawnFailed | Framing | Truncated
            | NoDescriptors | BadInnerAlarm | BadStopSignal | BadCwd | BadEnv | BadStdin => {}
        }
    }
    all
}

fn all_uncertainties() -> Vec<Uncertainty> {
    use Uncertainty::*;
    let all = vec![
        PidfdFailed,
        StartTimeChanged,
        UidMismatch,
        ParentChanged,
        Unreadable,
    ];
    for u in &all {
        match u {
            PidfdFailed | StartTimeChanged | UidMismatch | ParentChanged | Unreadable => {}
        }
    }
    all
}

fn all_codes() -> Vec<Code> {
    use Code::*;
    let all = vec![
        Bom,
        CarriageReturn,
        InvalidUtf8,
        LineTooLong,
        MalformedJson,
        UnknownField,
        DuplicateKey,
        Float,
        BadField,
        UnknownKind,
        BadVersion,
        BadTimestamp,
        SeqMismatch,
        PrevMismatch,
        GenesisMismatch,
        RunMismatch,
        FirstNotRunStarted,
        DuplicateReceipt,
        RecordAfterReceipt,
        HeadMismatch,
        ExpectRunMismatch,
        ReplayMismatch,
        NonCanonical,
        MonoRegressed,
        BadDigest,
        ForeignUid,
        LeaderNotSession,
        StopNotCompleted,
        StopInClosedLog,
        SweepWithoutTrigger,
        EmptyLog,
        TornLine,
        NoReceipt,
        NotQuiescent,
        UncertainMappings,
        ForeignMember,
        Unkillable,
        TempRootNotRemoved,
        RootLost,
        Hangup,
        AuditFailure,
        StagingMismatch,
        StagingNotRecorded,
        StagingNotChecked,
        StageHeld,
        HoldersNotScanned,
        StageUnreadable,
        StageChangedDuringRun,
        StageBaselineMissing,
        StageNotAsUploaded,
        StageRefused,
        StageDigestMismatch,
        PrivateStateKept,
        PrivateStateChanged,
        IoError,
        NotARegularFile,
    ];
    for c in &all {
        match c {
            Bom
            | CarriageReturn
            | InvalidUtf8
            | LineTooLong
            | MalformedJson
            | UnknownField
            | DuplicateKey
            | Float
            | BadField
            | UnknownKind
            | BadVersion
            | BadTimestamp
            | SeqMismatch
            | PrevMismatch
            | GenesisMismatch
            | RunMismatch
            | FirstNotRunStarted
            | DuplicateReceipt
            | RecordAfterReceipt
            | HeadMismatch
            | ExpectRunMismatch
            | ReplayMismatch
            | NonCanonical
            | MonoRegressed
            | BadDigest
            | ForeignUid
            | LeaderNotSession
            | StopNotCompleted
            | StopInClosedLog
            | SweepWithoutTrigger
            | EmptyLog
            | TornLine
            | NoReceipt
            | NotQuiescent
            | UncertainMappings
            | ForeignMember
            | Unkillable
            | TempRootNotRemoved
            | RootLost
            | Hangup
            | AuditFailure
            | StagingMismatch
            | StagingNotRecorded
            | StagingNotChecked
            | StageHeld
            | HoldersNotScanned
            | StageUnreadable
            | StageChangedDuringRun
            | StageBaselineMissing
            | StageNotAsUploaded
            | StageRefused
            | StageDigestMismatch
            | PrivateStateKept
            | PrivateStateChanged
            | IoError
            | NotARegularFile => {}
        }
    }
    all
}

// ------------------------------------------------------- realistic records

const WD: Ident = Ident {
    pid: 4120,
    start_time: 8_412_337,
    uid: 1000,
};
const ROOT: Ident = Ident {
    pid: 4101,
    start_time: 8_412_120,
    uid: 1000,
};
const EMPTY_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn proc_(pid: i32, ppid: i32, comm: &str) -> Proc {
    Proc {
        pid,
        ppid,
        start_time: 8_413_000 + pid as u64,
        uid: 1000,
        comm: comm.into(),
    }
}

fn staging_identity() -> DirIdentity {
    DirIdentity {
        path: "/home/ci/staging/hopper-5.19".into(),
        dev: 2049,
        ino: 1_311_022,
        uid: 1000,
        mode: 0o40700,
    }
}

fn staging_inventoried() -> StagingInventoried {
    StagingInventoried {
        identity: staging_identity(),
        inventory: Inventory {
            entries: 412,
            bytes: 98_112_004,
            digest: sha256_hex(b"staging listing"),
        },
        special: vec![
            TempEntry {
                path: "hopper/agent.sock".into(),
                kind: "socket".into(),
                size: 0,
            },
            TempEntry {
                path: "hopper/events".into(),
                kind: "fifo".into(),
                size: 0,
            },
        ],
        special_truncated: false,
        unreadable: None,
        private: Some(PrivateState {
            state_dir: Some(".rea/state".into()),
            audit_log: Some(".rea/audit.jsonl".into()),
            audit_log_ino: Some(1_048_611),
            state_dir_removed: Some(PrivateRemoved {
                removed: true,
                detail: String::new(),
            }),
        }),
    }
}

fn run_started(staging: Option<DirIdentity>) -> Event {
    Event::RunStarted(RunStarted {
        version: "0.1.0".into(),
        mode: Mode::Run,
        watchdog: WD,
        state_dir: "/tmp/rea-state.Xk2".into(),
        bounds: Bounds {
            action_deadline_ms: Some(600_000),
            term_grace_ms: 500,
            kill_bound_ms: 3000,
            output_cap: None,
            ask: AskSpan::KillAfterMs(1500),
        },
        staging,
        pass_env: vec!["DISPLAY".into(), "XDG_RUNTIME_DIR".into()],
        handover: None,
    })
}

fn root_bound() -> Event {
    Event::RootBound(RootBound {
        root: Some(ROOT),
        comm: Some("python3".into()),
        source: RootSource::Argument,
    })
}

fn reaped_round() -> Event {
    Event::Reaped(Reaped {
        processes: vec![
            ReapedProc {
                pid: 4133,
                start_time: Some(8_417_133),
                comm: Some("HopperDaemon".into()),
                status: Status::Signal(9),
            },
            ReapedProc {
                pid: 4134,
                start_time: None,
                comm: None,
                status: Status::Code(0),
            },
        ],
    })
}

/// One action with every record kind (and every variant of the enums the
/// records carry), in a plausible order.
fn every_kind_events() -> Vec<Event> {
    let argv = vec![
        "/usr/bin/python3".to_string(),
        "-u".into(),
        "/home/ci/staging/install.py".into(),
        "--prefix=/home/ci/staging/hopper-5.19".into(),
    ];
    let mut ev = vec![
        run_started(Some(staging_identity())),
        root_bound(),
        Event::StageArmed(StageArmed {
            path: staging_identity().path,
            marker: ".rea-exec-started".into(),
            ino: 5_242_881,
        }),
        Event::StagingBaseline(StagingBaseline::new(
            staging_inventoried(),
            Some("c".repeat(64)),
            2,
        )),
        Event::RequestReceived(RequestReceived {
            id: Some("install-1".into()),
            op: Some(Op::Spawn),
            caller: Some(ROOT),
            bytes: 287,
        }),
        Event::JobSpawned(JobSpawned {
            job: 1,
            id: "install-1".into(),
            name: Some("install".into()),
            argv: argv.clone(),
            program: None,
            cwd: Some("/home/ci/staging".into()),
            env: Some(vec!["PATH".into(), "LANG".into()]),
            pid: 4130,
            start_time: 8_413_130,
            uid: 1000,
            ppid: WD.pid,
            sid: 4130,
            caller: Some(ROOT),
            caller_job: None,
            deadline_ms: Some(200_000),
            inner_alarm_ms: Some(180_000),
            capture: Capture::Capture,
            stop_signal: Sig::USR1,
        }),
        Event::RequestReceived(RequestReceived {
            id: None,
            op: None,
            caller: None,
            bytes: 5012,
        }),
    ];
    for reason in all_refusals() {
        ev.push(Event::RequestRefused(RequestRefused {
            id: if reason == RefusalReason::Oversize {
                None
            } else {
                Some("launcher-7".into())
            },
            reason,
            detail: format!("refused: {}", reason.as_str()),
        }));
    }
    // A job's inner alarm (docs/requests.md).
    ev.push(Event::InnerAlarm(InnerAlarm {
        job: 1,
        pid: 4130,
        start_time: 8_412_300,
        after_ms: 180_000,
        errno: None,
    }));
    // A signal to the watchdog that is not a stop, forwarded (docs/guarantees.md).
    ev.push(Event::SignalReceived(SignalReceived {
        signal: libc::SIGUSR1,
        name: "SIGUSR1".into(),
        forwarded: true,
        to: vec![Ident {
            pid: 4130,
            start_time: 8_412_300,
            uid: 1000,
        }],
        count: 3,
    }));
    // A coalesced burst of unanswerable refusals (docs/requests.md).
    ev.push(Event::RequestsRefused(RequestsRefused {
        count: 7,
        bytes: 30_211,
        reasons: [(RefusalReason::Malformed, 5), (RefusalReason::Oversize, 2)]
            .into_iter()
            .collect(),
        first: vec![
            RequestRefused {
                id: None,
                reason: RefusalReason::Malformed,
                detail: "expected value at line 1 column 1".into(),
            },
            RequestRefused {
                id: None,
                reason: RefusalReason::Oversize,
                detail: "over 4096 bytes".into(),
            },
        ],
    }));
    ev.extend([
        Event::RequestReceived(RequestReceived {
            id: Some("launcher-2".into()),
            op: Some(Op::Spawn),
            caller: Some(Ident {
                pid: 4131,
                start_time: 8_413_200,
                uid: 1000,
            }),
            bytes: 190,
        }),
        Event::JobFailed(JobFailed {
            job: 2,
            id: "launcher-2".into(),
            argv: vec!["/opt/hopper/bin/Hopper".into(), "--headless".into()],
            program: None,
            errno: 2,
            reason: RefusalReason::NotFound,
            detail: "execve: No such file or directory".into(),
        }),
        Event::JobSpawned(JobSpawned {
            job: 3,
            id: "launcher-3".into(),
            name: None,
            argv: vec!["launcher".into()],
            program: Some("/opt/hopper/bin/launcher".into()),
            cwd: None,
            env: None,
            pid: 4140,
            start_time: 8_413_140,
            uid: 1000,
            ppid: WD.pid,
            sid: 4140,
            // Asked by a descendant of job 1 (the install's launcher).
            caller: Some(Ident {
                pid: 4131,
                start_time: 8_413_200,
                uid: 1000,
            }),
            caller_job: Some(1),
            deadline_ms: None,
            inner_alarm_ms: None,
            capture: Capture::Discard,
            stop_signal: Sig::TERM,
        }),
        Event::OutputCapped(OutputCapped {
            job: 1,
            stream: Stream::Stderr,
            cap: 65_536,
        }),
    ]);
    for (i, reason) in all_stop_reasons().into_iter().enumerate() {
        ev.push(Event::StopTriggered(StopTriggered {
            reason,
            first: i == 0,
            detail: format!("{} ({i})", reason.as_str()),
            job: if i % 2 == 0 { Some(1) } else { None },
            processes: if i == 3 {
                vec![proc_(4133, 1, "HopperDaemon")]
            } else {
                vec![]
            },
            // A trigger behind more processes than its record names.
            more_processes: (i == 3).then_some(5000),
            priority: [
                Some(StopPriority::Fifo),
                Some(StopPriority::Nice),
                Some(StopPriority::Unchanged),
                None,
            ][i % 4],
        }));
    }
    // The ask step (docs/stop.md): every signal a leader may be asked
    // with (timeout's -s: any of 0..=64, each in its one spelling).
    let asked: Vec<Sig> = (0..=64).map(|n| Sig::from_number(n).unwrap()).collect();
    for (i, sig) in asked.into_iter().enumerate() {
        ev.push(Event::SignalSweep(SignalSweep {
            sweep: 1,
            part: i as u32,
            stage: Stage::Ask,
            signals: vec![sig, Sig::CONT],
            targets: vec![proc_(4130, WD.pid, "python3")],
            others: vec![],
            cont: Vec::new(),
        }));
    }
    for reason in [
        AskEnd::HalfGrace,
        AskEnd::LeadersExited,
        AskEnd::KillAfter,
        AskEnd::AskFailed,
    ] {
        ev.push(Event::AskEnded(AskEnded {
            reason,
            after_ms: 250,
            leaders_left: 1,
        }));
    }
    ev.extend([
        Event::SignalSweep(SignalSweep {
            sweep: 2,
            part: 0,
            stage: Stage::Term,
            signals: vec![Sig::TERM],
            targets: vec![
                proc_(4130, WD.pid, "python3"),
                proc_(4133, WD.pid, "HopperDaemon"),
                proc_(4140, WD.pid, "launcher"),
            ],
            others: vec![Link {
                pid: 4134,
                ppid: 4130,
            }],
            // 4140 was stopped when it was bound: SIGCONT after its TERM.
            cont: vec![4140],
        }),
        Event::SignalFailed(SignalFailed {
            sweep: 1,
            target: proc_(4140, WD.pid, "launcher").ident(),
            signal: Sig::CONT,
            errno: 3,
        }),
        Event::JobExited(JobExited {
            job: 1,
            pid: 4130,
            start_time: 8_413_130,
            status: Status::Signal(15),
            duration_ms: 1834,
            stdout: StreamSummary {
                bytes: 0,
                sha256: EMPTY_SHA.into(),
            },
            stderr: StreamSummary {
                bytes: 65_536,
                sha256: sha256_hex(b"stderr bytes"),
            },
            output_capped: true,
            stopped: true,
        }),
        Event::JobExited(JobExited {
            job: 3,
            pid: 4140,
            start_time: 8_413_140,
            status: Status::Code(0),
            duration_ms: 1201,
            stdout: StreamSummary {
                bytes: 12,
                sha256: sha256_hex(b"launched ok\n"),
            },
            stderr: StreamSummary {
                bytes: 0,
                sha256: EMPTY_SHA.into(),
            },
            output_capped: false,
            stopped: true,
        }),
        reaped_round(),
    ]);
    for (i, reason) in all_uncertainties().into_iter().enumerate() {
        ev.push(Event::MappingUncertain(MappingUncertain {
            process: proc_(4150 + i as i32, 4133, "helper"),
            reason,
            detail: "start time 8413150 became 8419001".into(),
        }));
    }
    ev.push(Event::ForeignMember(rea::kinds::watchdog::ForeignMember {
        process: proc_(5001, 1, "hopper"),
        why: "ancestor pid 1 (init) started before the watchdog and is not it".into(),
    }));
    ev.push(Event::Unkillable(rea::kinds::watchdog::Unkillable {
        process: proc_(4140, 4120, "install.sh"),
        state: "D".into(),
        wchan: Some("request_wait_answer".into()),
    }));
    ev.extend([
        Event::SignalSweep(SignalSweep {
            sweep: 3,
            part: 0,
            stage: Stage::Kill,
            signals: vec![Sig::KILL],
            targets: vec![proc_(4133, WD.pid, "HopperDaemon")],
            others: vec![],
            cont: Vec::new(),
        }),
        Event::StopCompleted(StopCompleted {
            reason: StopReason::ExcessOutput,
            sweeps: 2,
            elapsed_ms: 612,
            echild: true,
            scan_empty: true,
            left: 0,
            foreign: None,
        }),
        Event::ReplyFailed(ReplyFailed {
            id: "install-1".into(),
            detail: "reply FIFO has no reader".into(),
        }),
        Event::TempRootInventoried(TempRootInventoried {
            path: "/tmp/rea-state.Xk2/tmp".into(),
            inventory: Inventory {
                entries: 3,
                bytes: 4096,
                digest: sha256_hex(b"temp listing"),
            },
            listing: vec![
                TempEntry {
                    path: "hopper-ipc".into(),
                    kind: "socket".into(),
                    size: 0,
                },
                TempEntry {
                    path: "cache".into(),
                    kind: "dir".into(),
                    size: 0,
                },
                TempEntry {
                    path: "cache/\\xffindex".into(),
                    kind: "file".into(),
                    size: 4096,
                },
            ],
            truncated: false,
        }),
        Event::TempRootRemoved(TempRootRemoved {
            removed: true,
            detail: String::new(),
        }),
        Event::StagingInventoried(staging_inventoried()),
        Event::StagingChanged(StagingChanged {
            baseline: "7d1f0c5a".repeat(8),
            now: staging_inventoried().inventory.digest,
            changes: vec![
                StageChange {
                    path: "hopper-5.19/bin/Hopper".into(),
                    change: Change::Changed,
                    was: Some("file".into()),
                    now: Some("file".into()),
                    what: vec![Aspect::Content],
                },
                StageChange {
                    path: "unexpected.txt".into(),
                    change: Change::Added,
                    was: None,
                    now: Some("file".into()),
                    what: vec![],
                },
            ],
            more: 0,
            unnamed: None,
        }),
        Event::Containment(Containment {
            requested: ContainRequest::Auto,
            mode: ContainMode::Cgroup,
            group: Some(GroupIdentity {
                path: "/sys/fs/cgroup/unified/rea-run-all-kinds.1".into(),
                ino: 2571,
            }),
            detail: String::new(),
        }),
        Event::Containment(Containment {
            requested: ContainRequest::None,
            mode: ContainMode::None,
            group: None,
            detail: "--contain none".into(),
        }),
        Event::GroupKill(GroupKill {
            ino: 2571,
            members: vec![4130, 4131],
            more_members: None,
        }),
        Event::GroupKill(GroupKill {
            ino: 2571,
            members: vec![4130, 4131],
            more_members: Some(70_000),
        }),
        Event::GroupKillFailed(GroupKillFailed {
            ino: 2571,
            errno: 2,
            detail: "No such file or directory".into(),
        }),
        Event::GroupRemoved(GroupRemoved {
            group: GroupIdentity {
                path: "/sys/fs/cgroup/unified/rea-run-all-kinds.1".into(),
                ino: 2571,
            },
            populated: false,
            removed: true,
            detail: String::new(),
        }),
        Event::StartRefused(StartRefused {
            code: StartRefusal::StageNotAsUploaded,
            detail: "the stage is not what the receipt pins: runtime.bin is missing".into(),
        }),
        Event::HoldersScanned(HoldersScanned::Scanned(holder_scan())),
        Event::HoldersScanned(HoldersScanned::Failed {
            error: "/tmp/stage: Permission denied (os error 13)".into(),
        }),
        Event::Receipt(Receipt {
            outcome: Outcome::Stopped,
            stop_reason: Some(StopReason::Deadline),
            quiescent: true,
            no_live_or_waitable_descendants: true,
            uncertain_mappings: 5,
            temp_root_removed: true,
            root_alive: true,
            counts: Counts {
                requests: 3,
                refused: 23,
                jobs: 2,
                signals: 7,
                reaped: 4,
            },
            staging: Some(staging_inventoried()),
        }),
    ]);
    ev
}

/// A scan that found one of each kind of finding.
fn holder_scan() -> rea::holders::HolderScan {
    use rea::holders::*;
    HolderScan {
        roots: vec![ScanRoot {
            path: "/tmp/stage".into(),
            dev: 65024,
            ino: 10059877,
            entries: 12,
            held: 3,
        }],
        processes: 214,
        mount_namespaces: 2,
        holders: vec![Holder {
            pid: 4300,
            start_time: 8_412_999,
            uid: 1000,
            comm: "hopper".into(),
            exe: "/tmp/stage/bin/hopper (deleted)".into(),
            holds: vec![
                Hold {
                    root: 0,
                    how: How::Fd,
                    fd: Some(3),
                    access: Some(Access::ReadWrite),
                    what: "/tmp/stage/db".into(),
                    deleted: false,
                    socket: None,
                },
                Hold {
                    root: 0,
                    how: How::Exe,
                    fd: None,
                    access: None,
                    what: "/tmp/stage/bin/hopper (deleted)".into(),
                    deleted: true,
                    socket: None,
                },
                Hold {
                    root: 0,
                    how: How::Socket,
                    fd: Some(5),
                    access: None,
                    what: "/tmp/stage/live.sock".into(),
                    deleted: false,
                    socket: Some(SocketHold {
                        ino: 81_244,
                        kind: sockets::SockKind::Stream,
                        state: sockets::SockState::Listening,
                        bound_as: "/mnt/other/live.sock".into(),
                    }),
                },
            ],
            holds_total: 3,
        }],
        holders_total: 1,
        mounts: vec![MountHold {
            root: 0,
            how: MountHow::Source,
            mount_point: "/mnt/x".into(),
            fstype: "ext4".into(),
            source: "/dev/vda".into(),
            mnt_ns: 4026531841,
            seen_by: 1,
        }],
        mounts_total: 1,
        loops: vec![LoopHold {
            root: 0,
            device: "loop3".into(),
            backing_file: "/tmp/stage/disk.img".into(),
            deleted: false,
        }],
        loops_total: 1,
        unreadable: vec![Unreadable {
            pid: 1,
            what: "cwd".into(),
            error: "Permission denied (os error 13)".into(),
        }],
        unreadable_total: 1,
        elapsed_us: 4100,
    }
}

#[test]
fn the_holder_scan_is_one_schema_in_every_file() {
    let canonical = load_schema("holders");
    let defs = canonical["$defs"].as_object().unwrap();
    for name in [
        "record",
        "verdict",
        "recovery-verdict",
        "reconcile",
        "stage-record",
    ] {
        let other = load_schema(name);
        for (k, v) in defs {
            assert_eq!(
                &other["$defs"][k], v,
                "{name}.schema.json's $defs.{k} differs from holders.schema.json's"
            );
        }
    }
    let v = common::schema::compile("holders");
    common::schema::assert_valid(
        &v,
        &serde_json::to_value(holder_scan()).unwrap(),
        "a holder scan",
    );
    let mut bad = serde_json::to_value(holder_scan()).unwrap();
    bad["holders"][0]["holds"][0]["how"] = json!("name");
    assert_rejected(&v, &bad, "a hold by name");
    let mut bad = serde_json::to_value(holder_scan()).unwrap();
    bad["holders"][0]["holds"][1]["deleted"] = json!(false);
    assert_rejected(&v, &bad, "deleted written as false (the writer omits it)");
}

fn write_log(path: &Path, run: &str, events: &[Event]) -> BTreeSet<&'static str> {
    let mut w = AuditWriter::create(path, run).unwrap();
    let mut kinds = BTreeSet::new();
    let (last, body) = events.split_last().unwrap();
    for e in body {
        w.record(e).unwrap();
        kinds.insert(e.kind());
    }
    if matches!(last, Event::Receipt(_)) {
        w.seal(last).unwrap();
    } else {
        w.record(last).unwrap();
    }
    kinds.insert(last.kind());
    kinds
}

/// The complete lines of a log, parsed.
fn log_values(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn record_of_kind(values: &[Value], kind: &str) -> Value {
    values
        .iter()
        .find(|v| v["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} record"))
        .clone()
}

// -------------------------------------------------------------------- tests

#[test]
fn schema_lists_exactly_the_record_kinds() {
    let s = load_schema("record");
    let variants: Vec<&str> = s["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["properties"]["kind"]["const"].as_str().unwrap())
        .collect();
    assert_eq!(
        variants, KINDS,
        "one oneOf variant per kind, in KINDS order"
    );
    let listed: Vec<&str> = s["properties"]["kind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(listed, KINDS);
}

#[test]
fn every_kind_written_by_the_library_matches_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let written = write_log(&path, "run-all-kinds.1", &every_kind_events());
    assert_eq!(
        written.len(),
        KINDS.len(),
        "the test log must hold every kind; missing: {:?}",
        KINDS
            .iter()
            .filter(|k| !written.contains(*k))
            .collect::<Vec<_>>()
    );
    assert_log_matches_schema(&path);
}

/// A signal has one spelling in records: what `timeout -v` calls it,
/// after `SIG`; the reader takes that and nothing else.
#[test]
fn signals_are_spelled_once_and_read_back() {
    for n in 0..=64 {
        let sig = Sig::from_number(n).unwrap();
        let text = serde_json::to_string(&sig).unwrap();
        assert_eq!(serde_json::from_str::<Sig>(&text).unwrap(), sig, "{text}");
        assert_eq!(sig.number(), n);
    }
    assert_eq!(Sig::TERM.name(), "SIGTERM");
    assert_eq!(Sig::from_number(0).unwrap().name(), "SIG0");
    assert_eq!(Sig::from_number(32).unwrap().name(), "SIG32");
    let rt = libc::SIGRTMIN() + 2;
    assert_eq!(Sig::from_number(rt).unwrap().name(), "SIGRTMIN+2");
    assert_eq!(Sig::from_number(65), None);
    assert_eq!(Sig::from_number(-1), None);
    for bad in [
        "SIGIOT",
        "SIGCLD",
        "sigterm",
        "TERM",
        "SIG15",
        "SIG065",
        "SIGRTMIN+0",
        "SIG65",
        "SIGNAL",
    ] {
        assert!(
            serde_json::from_str::<Sig>(&format!("{bad:?}")).is_err(),
            "{bad} is not how a record spells a signal"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, "run-signals.1", &every_kind_events());
    let sweep = record_of_kind(&log_values(&path), "signal_sweep");
    let with = |name: &str| {
        let mut r = sweep.clone();
        r["data"]["signals"] = json!([name]);
        r
    };
    let v = record_validator();
    assert_eq!(schema_errors(v, &with("SIGRTMAX-3")), Vec::<String>::new());
    assert_rejected(v, &with("SIGIOT"), "an alias");
    assert_rejected(v, &with("SIG65"), "beyond 64");
    for n in 0..=64 {
        let name = Sig::from_number(n).unwrap().name();
        assert_eq!(
            schema_errors(v, &with(&name)),
            Vec::<String>::new(),
            "{name}"
        );
    }
    for other in ["SIG15", "SIG9", "SIGRTMIN+16", "SIGRTMAX-15", "SIGRTMIN+0"] {
        assert_rejected(v, &with(other), "not the one spelling");
    }
}

#[test]
fn the_helper_names_the_bad_line_and_ignores_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, "r1", &[run_started(None), root_bound()]);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"v\":1,\"run\":\"r1\",\"seq\":2,"); // torn: no newline
    std::fs::write(&path, &text).unwrap();
    assert_log_matches_schema(&path);

    let bad = text.replacen(
        "\"source\":\"argument\"",
        "\"source\":\"argument\",\"x\":1",
        1,
    );
    std::fs::write(&path, bad).unwrap();
    let msg = std::panic::catch_unwind(|| assert_log_matches_schema(&path))
        .expect_err("an unknown field must fail")
        .downcast::<String>()
        .unwrap();
    assert!(msg.contains("line 2:"), "{msg}");
    assert!(!msg.contains("line 1:"), "{msg}");
    assert!(msg.contains("/data"), "{msg}");
}

#[test]
fn records_the_schema_must_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, "run-neg", &every_kind_events());
    let values = log_values(&path);
    let v = record_validator();
    let start = record_of_kind(&values, "run_started");
    let exited = record_of_kind(&values, "job_exited");
    let receipt = record_of_kind(&values, "receipt");
    for ok in [&start, &exited, &receipt] {
        assert!(v.is_valid(ok), "{ok}");
    }

    let mut r = start.clone();
    r["data"]["extra"] = json!(1);
    assert_rejected(v, &r, "unknown field in data");

    let mut r = start.clone();
    r["data"]["bounds"]["extra"] = json!(true);
    assert_rejected(v, &r, "unknown field in nested data");

    let mut r = start.clone();
    r["host"] = json!("ci-7");
    assert_rejected(v, &r, "unknown field in the envelope");

    let mut r = start.clone();
    r["mono_ns"] = json!(1_043_371_521_694.5);
    assert_rejected(v, &r, "float mono_ns");

    let mut r = exited.clone();
    r["data"]["duration_ms"] = json!(1834.25);
    assert_rejected(v, &r, "float inside data");

    let mut r = start.clone();
    r["data"]["watchdog"]["start_time"] = json!(8.5);
    assert_rejected(v, &r, "float inside nested data");

    let mut r = start.clone();
    r["kind"] = json!("root_bound");
    assert_rejected(v, &r, "root_bound kind with run_started data");

    let mut r = receipt.clone();
    r["kind"] = json!("stop_completed");
    assert_rejected(v, &r, "stop_completed kind with receipt data");

    let mut r = exited.clone();
    r["data"]["status"] = json!({"code": 0, "signal": 9});
    assert_rejected(v, &r, "status with both keys");

    let mut r = exited.clone();
    r["data"]["status"] = json!({});
    assert_rejected(v, &r, "status with no key");

    for prev in [
        start["prev"].as_str().unwrap().to_uppercase(),
        start["prev"].as_str().unwrap()[1..].to_string(),
        format!("{}0", start["prev"].as_str().unwrap()),
        "g".repeat(64),
    ] {
        let mut r = start.clone();
        r["prev"] = json!(prev);
        assert_rejected(v, &r, "prev not 64 lowercase hex");
    }

    let mut r = receipt.clone();
    r["data"].as_object_mut().unwrap().remove("stop_reason");
    assert_rejected(v, &r, "an Option field left out instead of null");

    let mut r = start.clone();
    r["kind"] = json!("run_resumed");
    assert_rejected(v, &r, "unknown kind");

    for ts in [
        "2026-11-29T18:55:35.124031+00:00",
        "2026-11-29 18:55:35Z",
        "2026-13-29T18:55:35Z",
    ] {
        let mut r = start.clone();
        r["ts"] = json!(ts);
        assert_rejected(v, &r, "ts not RFC 3339 UTC with Z");
    }

    let mut r = start.clone();
    r["v"] = json!(2);
    assert_rejected(v, &r, "v other than 1");

    let mut r = start.clone();
    r["run"] = json!("run/1");
    assert_rejected(v, &r, "run id with a slash");

    let mut r = start.clone();
    r["seq"] = json!(-1);
    assert_rejected(v, &r, "negative seq");

    let mut r = start.clone();
    r["data"]["watchdog"]["uid"] = json!(4_294_967_296u64);
    assert_rejected(v, &r, "uid beyond u32");

    let mut r = exited.clone();
    r["data"]["stdout"]["sha256"] = json!("sha256:".to_string() + EMPTY_SHA);
    assert_rejected(v, &r, "digest not bare hex");
}

/// A limit of JSON Schema, stated in the README: `1.0` is the integer 1 to a
/// schema validator, so only the strict reader refuses it.
#[test]
fn integral_floats_pass_the_schema_but_not_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, "r1", &[run_started(None)]);
    let line = std::fs::read_to_string(&path).unwrap();
    let line = line.trim_end_matches('\n');
    let v: Value = serde_json::from_str(line).unwrap();
    let mono = v["mono_ns"].as_u64().unwrap();
    let floated = line.replacen(
        &format!("\"mono_ns\":{mono}"),
        &format!("\"mono_ns\":{mono}.0"),
        1,
    );
    assert_ne!(floated, line);
    assert!(record_validator().is_valid(&serde_json::from_str(&floated).unwrap()));
    let err = rea::audit::reader::parse_line(floated.as_bytes()).unwrap_err();
    assert_eq!(err.code, Code::Float);
}

fn caller() -> Caller {
    Caller {
        pid: 4101,
        start_time: 8_412_120,
        uid: 1000,
    }
}

fn spawn_request(name: Option<&str>) -> Request {
    Request {
        v: 1,
        op: Op::Spawn,
        id: "install-1".into(),
        caller: caller(),
        reply: "install-1.reply".into(),
        argv: Some(vec![
            "/usr/bin/python3".into(),
            "/home/ci/staging/install.py".into(),
        ]),
        deadline_ms: Some(200_000),
        capture: Some(Capture::Capture),
        name: name.map(String::from),
        inner_alarm_ms: Some(180_000),
        stop_signal: Some(StopSignal::Usr1),
        cwd: Some("/home/ci/staging".into()),
        env: Some(
            [("PATH", "/usr/bin:/bin"), ("LANG", "C.UTF-8")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        stdin: Some("install-1.in".into()),
    }
}

fn plain_request(op: Op) -> Request {
    Request {
        v: 1,
        op,
        id: "ctl-9".into(),
        caller: caller(),
        reply: "ctl-9".into(),
        argv: None,
        deadline_ms: None,
        capture: None,
        name: None,
        inner_alarm_ms: None,
        stop_signal: None,
        cwd: None,
        env: None,
        stdin: None,
    }
}

#[test]
fn requests_as_the_client_writes_them() {
    let mut discard = spawn_request(None);
    discard.capture = Some(Capture::Discard);
    for r in [
        spawn_request(Some("install")),
        spawn_request(None),
        discard,
        plain_request(Op::Stop),
        plain_request(Op::Close),
    ] {
        let line = serde_json::to_string(&r).unwrap();
        assert_request_matches_schema(&line);
        assert_request_matches_schema(&format!("{line}\n"));
        // The watchdog's parser agrees.
        parse_request(line.as_bytes()).unwrap();
    }
}

#[test]
fn requests_the_schema_must_refuse() {
    let v = request_validator();
    let spawn = serde_json::to_value(spawn_request(Some("install"))).unwrap();
    let stop = serde_json::to_value(plain_request(Op::Stop)).unwrap();
    let close = serde_json::to_value(plain_request(Op::Close)).unwrap();

    let mut cases: Vec<(&str, Value)> = Vec::new();
    let mut r = spawn.clone();
    r.as_object_mut().unwrap().remove("argv");
    cases.push(("spawn without argv", r));
    for field in ["deadline_ms", "capture"] {
        let mut r = spawn.clone();
        r.as_object_mut().unwrap().remove(field);
        cases.push(("spawn without a required field", r));
    }
    let mut r = stop.clone();
    r["argv"] = json!(["/bin/true"]);
    cases.push(("stop with argv", r));
    let mut r = close.clone();
    r["name"] = json!("install");
    cases.push(("close with name", r));
    let mut r = spawn.clone();
    r["argv"] = json!(["python3", "-V"]);
    cases.push(("relative argv[0]", r));
    let mut r = spawn.clone();
    r["argv"] = json!([]);
    cases.push(("empty argv", r));
    let mut r = spawn.clone();
    r["argv"] = json!(vec!["/bin/echo"; 1025]);
    cases.push(("argv over 1024 entries", r));
    let mut r = spawn.clone();
    r["argv"] = json!(["/bin/echo", "a\u{0}b"]);
    cases.push(("NUL in argv", r));
    let mut r = spawn.clone();
    r["deadline_ms"] = json!(0);
    cases.push(("deadline 0", r));
    let mut r = spawn.clone();
    r["deadline_ms"] = json!(1000.5);
    cases.push(("float deadline", r));
    let mut r = spawn.clone();
    r["capture"] = json!("keep");
    cases.push(("bad capture", r));
    let mut r = spawn.clone();
    r["name"] = json!("a/b");
    cases.push(("bad name", r));
    let mut r = spawn.clone();
    r["id"] = json!("a b");
    cases.push(("bad id", r));
    let mut r = spawn.clone();
    r["id"] = json!("x".repeat(65));
    cases.push(("id over 64", r));
    for reply in ["..", ".", "../x", ""] {
        let mut r = stop.clone();
        r["reply"] = json!(reply);
        cases.push(("bad reply name", r));
    }
    let mut r = stop.clone();
    r["v"] = json!(2);
    cases.push(("v 2", r));
    let mut r = stop.clone();
    r["op"] = json!("run");
    cases.push(("bad op", r));
    let mut r = stop.clone();
    r["extra"] = json!(1);
    cases.push(("unknown field", r));
    let mut r = stop.clone();
    r["caller"]["gid"] = json!(1000);
    cases.push(("unknown caller field", r));
    let mut r = stop.clone();
    r["caller"]["pid"] = json!(0);
    cases.push(("caller pid 0", r));
    let mut r = stop.clone();
    r["caller"].as_object_mut().unwrap().remove("uid");
    cases.push(("caller without uid", r));

    for (what, r) in &cases {
        assert_rejected(v, r, what);
        // The watchdog's parser refuses them too.
        let line = serde_json::to_string(r).unwrap();
        assert!(
            parse_request(line.as_bytes()).is_err(),
            "{what}: parse_request accepted {line}"
        );
    }

    // Optional fields are omitted, never null. (parse_request currently reads
    // an explicit `null` as absent; the schema states the client's format.)
    let mut r = spawn.clone();
    r["name"] = json!(null);
    assert_rejected(v, &r, "null name");
    let mut r = stop.clone();
    r["argv"] = json!(null);
    assert_rejected(v, &r, "stop with argv null");
}

fn stream(data: Option<&[u8]>) -> StreamReply {
    let bytes = data.unwrap_or(b"");
    StreamReply {
        bytes: bytes.len() as u64,
        sha256: sha256_hex(bytes),
        data_b64: data.map(|_| match bytes {
            b"hello\n" => "aGVsbG8K".to_string(),
            b"" => String::new(),
            b"ok" => "b2s=".to_string(),
            _ => unreachable!(),
        }),
    }
}

fn every_reply() -> Vec<Reply> {
    let mut all = Vec::new();
    all.push(Reply::Accepted {
        v: 1,
        id: "install-1".into(),
        job: 1,
        pid: 4130,
        start_time: 8_413_130,
    });
    for id in [Some("launcher-7".to_string()), None] {
        all.push(Reply::Refused {
            v: 1,
            id,
            reason: RefusalReason::CallerNotOwned,
            detail: "pid 999 is not a descendant of the watchdog or the root".into(),
            stop_reason: None,
            errno: None,
        });
    }
    all.push(Reply::Refused {
        v: 1,
        id: Some("launcher-8".into()),
        reason: RefusalReason::Aborted,
        detail: "the action was stopped (deadline); nothing launches again".into(),
        stop_reason: Some(StopReason::Deadline),
        errno: None,
    });
    all.push(Reply::Refused {
        v: 1,
        id: Some("launcher-9".into()),
        reason: RefusalReason::NotFound,
        detail: "No such file or directory (os error 2)".into(),
        stop_reason: None,
        errno: Some(2),
    });
    all.push(Reply::Exited {
        v: 1,
        id: "install-1".into(),
        job: 1,
        status: Status::Code(0),
        duration_ms: 4211,
        output_capped: false,
        stdout: stream(Some(b"hello\n")),
        stderr: stream(Some(b"")),
    });
    all.push(Reply::Exited {
        v: 1,
        id: "install-2".into(),
        job: 2,
        status: Status::Code(3),
        duration_ms: 12,
        output_capped: false,
        stdout: stream(None),
        stderr: stream(None),
    });
    all.push(Reply::Stopped {
        v: 1,
        id: "rehearsal-1".into(),
        job: 3,
        reason: StopReason::Deadline,
        status: Status::Signal(15),
        duration_ms: 260_001,
        output_capped: true,
        stdout: stream(Some(b"ok")),
        stderr: stream(None),
    });
    all.push(Reply::StopComplete {
        v: 1,
        id: "ctl-9".into(),
        reason: StopReason::StopRequested,
        quiescent: true,
    });
    for (outcome, stop_reason) in [
        (Outcome::Closed, None),
        (Outcome::Stopped, Some(StopReason::Abandoned)),
    ] {
        all.push(Reply::Closed {
            v: 1,
            id: "ctl-10".into(),
            outcome,
            stop_reason,
            positive: true,
            head: sha256_hex(b"last line"),
            audit_log: "/var/tmp/rea/audit.jsonl".into(),
        });
    }
    // Every variant is here (the match breaks when one is added).
    let mut seen = BTreeSet::new();
    for r in &all {
        seen.insert(match r {
            Reply::Accepted { .. } => "accepted",
            Reply::Refused { .. } => "refused",
            Reply::Exited { .. } => "exited",
            Reply::Stopped { .. } => "stopped",
            Reply::StopComplete { .. } => "stop_complete",
            Reply::Closed { .. } => "closed",
        });
    }
    assert_eq!(seen.len(), 6);
    all
}

#[test]
fn every_reply_variant_matches_the_schema() {
    let s = load_schema("reply");
    let types: BTreeSet<&str> = s["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["properties"]["type"]["const"].as_str().unwrap())
        .collect();
    let mut seen = BTreeSet::new();
    for r in every_reply() {
        let line = String::from_utf8(r.to_line()).unwrap();
        assert!(line.ends_with('\n'));
        assert_reply_matches_schema(&line);
        let v: Value = serde_json::from_str(&line).unwrap();
        seen.insert(v["type"].as_str().unwrap().to_string());
    }
    let seen: BTreeSet<&str> = seen.iter().map(String::as_str).collect();
    assert_eq!(seen, types, "one schema variant per Reply variant");
}

#[test]
fn replies_the_schema_must_refuse() {
    let v = reply_validator();
    let all: Vec<Value> = every_reply()
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let exited = all.iter().find(|r| r["type"] == "exited").unwrap().clone();
    let accepted = all
        .iter()
        .find(|r| r["type"] == "accepted")
        .unwrap()
        .clone();

    let mut r = accepted.clone();
    r["type"] = json!("started");
    assert_rejected(v, &r, "unknown type");
    let mut r = accepted.clone();
    r["type"] = json!("exited");
    assert_rejected(v, &r, "accepted fields under type exited");
    let mut r = accepted.clone();
    r["note"] = json!("x");
    assert_rejected(v, &r, "unknown field");
    let mut r = exited.clone();
    r["stdout"].as_object_mut().unwrap().remove("data_b64");
    assert_rejected(v, &r, "data_b64 left out instead of null");
    let mut r = exited.clone();
    r["stdout"]["data_b64"] = json!("aGVsbG8K\n");
    assert_rejected(v, &r, "data_b64 not base64");
    let mut r = exited.clone();
    r["status"] = json!({"code": 0, "signal": 9});
    assert_rejected(v, &r, "status with both keys");
    let mut r = exited.clone();
    r["duration_ms"] = json!(1.5);
    assert_rejected(v, &r, "float duration");
}

fn verdict_value(v: &Verdict) -> Value {
    serde_json::to_value(v).unwrap()
}

#[test]
fn verdicts_of_real_logs_match_the_schema() {
    let dir = tempfile::tempdir().unwrap();

    // Every kind: a rich log whose replay disagrees in places.
    let all = dir.path().join("all.jsonl");
    write_log(&all, "run-verdict.1", &every_kind_events());
    let verdict = verify_file(&all, &VerifyOptions::default());
    assert_verdict_matches_schema(&verdict_value(&verdict));

    // A minimal closed run with a positive receipt and a staging directory.
    let closed = dir.path().join("closed.jsonl");
    write_log(
        &closed,
        "run-verdict.2",
        &[
            run_started(Some(staging_identity())),
            root_bound(),
            Event::TempRootRemoved(TempRootRemoved {
                removed: true,
                detail: String::new(),
            }),
            Event::StagingInventoried(staging_inventoried()),
            Event::Receipt(Receipt {
                outcome: Outcome::Closed,
                stop_reason: None,
                quiescent: true,
                no_live_or_waitable_descendants: true,
                uncertain_mappings: 0,
                temp_root_removed: true,
                root_alive: true,
                counts: Counts {
                    requests: 0,
                    refused: 0,
                    jobs: 0,
                    signals: 0,
                    reaped: 0,
                },
                staging: Some(staging_inventoried()),
            }),
        ],
    );
    assert_log_matches_schema(&closed);
    let verdict = verify_file(&closed, &VerifyOptions::default());
    assert!(verdict.staging.is_some());
    assert_verdict_matches_schema(&verdict_value(&verdict));

    // Unsealed and torn; then pinned to another head; then unreadable.
    let torn = dir.path().join("torn.jsonl");
    write_log(&torn, "run-verdict.3", &[run_started(None), root_bound()]);
    let mut bytes = std::fs::read(&torn).unwrap();
    bytes.extend_from_slice(b"{\"v\":1,");
    let opts = VerifyOptions {
        expect_head: Some("0".repeat(64)),
        ..Default::default()
    };
    let verdict = verify_bytes(&bytes, "torn.jsonl", &opts);
    assert_eq!(verdict.status, VStatus::Tampered);
    assert_verdict_matches_schema(&verdict_value(&verdict));
    let verdict = verify_file(&dir.path().join("missing.jsonl"), &VerifyOptions::default());
    assert_eq!(verdict.status, VStatus::Error);
    assert_verdict_matches_schema(&verdict_value(&verdict));
    let verdict = verify_bytes(b"", "empty.jsonl", &VerifyOptions::default());
    assert_verdict_matches_schema(&verdict_value(&verdict));
}

/// Every reason code, alone in a verdict: the schema knows the code, its
/// class and the status, exit code and decision that class leads to.
#[test]
fn every_reason_code_and_class_matches_the_schema() {
    for code in all_codes() {
        let mut v = Verdict::empty("x.jsonl");
        v.reasons.push(Reason::new(code, Some(1), "detail"));
        assert_verdict_matches_schema(&verdict_value(&v.finish()));
    }
    let mut v = Verdict::empty("x.jsonl");
    v.head = Some(sha256_hex(b"x"));
    assert_verdict_matches_schema(&verdict_value(&v.finish()));
}

#[test]
fn verdicts_the_schema_must_refuse() {
    let val = verdict_validator();
    let mut v = Verdict::empty("x.jsonl");
    v.reasons
        .push(Reason::new(Code::TempRootNotRemoved, None, "not removed"));
    let good = verdict_value(&v.finish());
    assert!(val.is_valid(&good), "{good}");

    let mut r = good.clone();
    r["exit_code"] = json!(0);
    assert_rejected(val, &r, "exit code of another status");
    let mut r = good.clone();
    r["verdict"] = json!("delete_allowed");
    assert_rejected(val, &r, "delete_allowed with status retain");
    let mut r = good.clone();
    r["reasons"][0]["class"] = json!("tampered");
    assert_rejected(val, &r, "reason with the class of another code");
    let mut r = good.clone();
    r["reasons"][0]["code"] = json!("looks_fine");
    assert_rejected(val, &r, "unknown code");
    let mut r = good.clone();
    r["reasons"][0]["line"] = json!(0);
    assert_rejected(val, &r, "line 0 (lines are 1-based)");
    let mut r = good.clone();
    r["records"] = json!(2.5);
    assert_rejected(val, &r, "float records");
    let mut r = good.clone();
    r["extra"] = json!(1);
    assert_rejected(val, &r, "unknown field");
    let mut r = good.clone();
    r["head"] = json!("ABC");
    assert_rejected(val, &r, "head not a digest");
}

// ------------------------------------------------- README worked example

/// The lines of the first fenced block after `marker` in the README.
fn fenced_block<'a>(readme: &'a str, marker: &str) -> Vec<&'a str> {
    let mut lines = readme.lines().skip_while(|l| l.trim() != marker).skip(1);
    let fence = lines.next().unwrap_or_else(|| panic!("no {marker}"));
    assert!(fence.starts_with("```"), "{marker} must precede a fence");
    let block: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    assert!(!block.is_empty(), "{marker}: empty block");
    block
}

#[test]
fn readme_worked_example_verifies() {
    let readme = std::fs::read_to_string(schema_dir().join("README.md")).unwrap();
    let lines = fenced_block(&readme, "<!-- worked-example:log -->");
    assert_eq!(lines.len(), 3, "the worked example has three lines");

    let mut stated = std::collections::BTreeMap::new();
    for l in fenced_block(&readme, "<!-- worked-example:hashes -->") {
        let (key, value) = l.rsplit_once(char::is_whitespace).unwrap();
        stated.insert(key.trim().to_string(), value.to_string());
    }
    let run = &stated["run"];

    // Genesis, independently of the library, then as the library states it.
    let mut g = b"rea-audit/v1 genesis\n".to_vec();
    g.extend_from_slice(run.as_bytes());
    let genesis = sha256_hex(&g);
    assert_eq!(stated["genesis"], genesis, "stated genesis");
    assert_eq!(rea::log::chain::genesis(run), genesis);

    let mut prev = genesis;
    for (i, line) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["run"], json!(run));
        assert_eq!(v["seq"], json!(i));
        assert_eq!(v["prev"], json!(prev), "prev of line {}", i + 1);
        let hash = sha256_hex(line.as_bytes());
        assert_eq!(
            stated[&format!("line {}", i + 1)],
            hash,
            "stated hash of line {}",
            i + 1
        );
        prev = hash;
    }
    assert_eq!(stated["head"], prev, "stated head is the last line's hash");
    assert!(readme.contains(&format!("It prints `head {prev}`")));

    // The same bytes as a log file: schema-valid, and the verifier sees an
    // intact, sealed chain with that head.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("example.log");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    assert_log_matches_schema(&path);
    let opts = VerifyOptions {
        expect_head: Some(prev.clone()),
        expect_run: Some(run.clone()),
        ..Default::default()
    };
    let verdict = verify_file(&path, &opts);
    assert_eq!(verdict.head.as_deref(), Some(prev.as_str()));
    assert!(verdict.sealed);
    assert!(
        verdict
            .reasons
            .iter()
            .all(|r| r.class != VStatus::Tampered && r.class != VStatus::Incomplete),
        "{:?}",
        verdict.reasons
    );
}

// ----------------------------------------------------- the recovery log

mod recovery {
    use super::*;
    use rea::audit::recover::log::{verify_recovery_file, RecoveryOptions};
    use rea::kinds::group::{CheckedMember, RunIdSeen};
    use rea::kinds::recovery::{
        Code as RCode, Outcome as ROutcome, Reason as RReason, RecoveryChecked, RecoveryDecided,
        RecoveryEvent, RecoveryFreeze, RecoveryGroupRemoved, RecoveryKilled, RecoveryMembers,
        RecoveryScan, RecoveryStaging, RecoveryStarted, ScanProc, WatchdogSeen, KINDS as RKINDS,
    };
    use rea::process::alive::Liveness;
    use rea::recover::log::RecoveryLog;

    /// Every recovery code; the `match` stops compiling when one is added.
    fn all_recovery_codes() -> Vec<RCode> {
        use RCode::*;
        let all = vec![
            LogUnreadable,
            LogTampered,
            LogSealed,
            NoRunStarted,
            WatchdogAlive,
            WatchdogUnknown,
            NoGroup,
            GroupGone,
            GroupRecreated,
            GroupUnreachable,
            RecovererInGroup,
            NewLogExists,
            NewLogInStage,
            FreezeFailed,
            MembersUnproven,
            ForeignMember,
            KillFailed,
            StillPopulated,
            GroupNotRemoved,
            ScanFailed,
            RunProcessesLeft,
        ];
        for c in &all {
            match c {
                LogUnreadable | LogTampered | LogSealed | NoRunStarted | WatchdogAlive
                | WatchdogUnknown | NoGroup | GroupGone | GroupRecreated | GroupUnreachable
                | RecovererInGroup | NewLogExists | NewLogInStage | FreezeFailed
                | MembersUnproven | ForeignMember | KillFailed | StillPopulated
                | GroupNotRemoved | ScanFailed | RunProcessesLeft => {}
            }
        }
        all
    }

    fn group() -> GroupIdentity {
        GroupIdentity {
            path: "/sys/fs/cgroup/unified/rea-run-lost.1".into(),
            ino: 4242,
        }
    }

    /// A member checked against the run: every `run_id` and optional
    /// field appears in [`every_recovery_event`].
    fn checked(pid: i32, run_id: RunIdSeen) -> CheckedMember {
        let known = run_id != RunIdSeen::Gone;
        CheckedMember {
            pid,
            start_time: known.then_some(8_412_400 + pid as u64),
            uid: known.then_some(0),
            comm: known.then(|| "python3".to_string()),
            run_id,
            detail: if known {
                String::new()
            } else {
                "exited before it was checked".into()
            },
        }
    }

    /// One record of every kind, with every optional field set somewhere.
    fn every_recovery_event() -> Vec<RecoveryEvent> {
        vec![
            RecoveryEvent::Started(RecoveryStarted {
                version: "0.1.0".into(),
                log: "/w/audit.jsonl".into(),
                log_error: None,
                log_run: Some("run-lost.1".into()),
                log_records: 9,
                log_intact_seq: Some(8),
                log_intact_head: Some(EMPTY_SHA.into()),
                log_torn_tail_bytes: 17,
                log_sealed: false,
                log_tampered: None,
                watchdog: Some(WD),
                containment: Some(Containment {
                    requested: ContainRequest::Cgroup,
                    mode: ContainMode::Cgroup,
                    group: Some(group()),
                    detail: String::new(),
                }),
                staging: Some("/srv/stage".into()),
                staging_given: true,
                staging_recorded: Some(staging_identity()),
                uid: 1000,
                pid: 4300,
            }),
            RecoveryEvent::Checked(RecoveryChecked {
                watchdog: Some(WatchdogSeen {
                    state: Liveness::Gone,
                    detail: "no process has this pid".into(),
                }),
                group: Some(GroupSeen {
                    state: GroupState::Present,
                    ino_now: Some(4242),
                    detail: "has the recorded inode".into(),
                }),
                recoverer_in_group: Some(false),
            }),
            RecoveryEvent::Members(RecoveryMembers {
                group: group(),
                // Every member passes (the log verifies as `failed`);
                // the other run_id values and a freeze error are checked
                // against the schema in the next test.
                freeze: RecoveryFreeze {
                    frozen: true,
                    waited_ms: 1,
                    wait_limit_ms: 5000,
                    error: None,
                },
                populated: Some(true),
                members: vec![
                    checked(4301, RunIdSeen::Carried),
                    checked(4302, RunIdSeen::Gone),
                    checked(4305, RunIdSeen::Zombie),
                ],
                members_not_listed: 0,
                members_not_listed_foreign: 0,
                members_not_visible: 0,
                error: None,
            }),
            RecoveryEvent::Killed(RecoveryKilled {
                kill_error: None,
                populated: Some(false),
                waited_ms: 3,
                wait_limit_ms: 5000,
                members_left: Vec::new(),
                members_left_not_listed: 0,
            }),
            RecoveryEvent::GroupRemoved(RecoveryGroupRemoved {
                group: group(),
                removed: true,
                detail: String::new(),
            }),
            RecoveryEvent::Staging(RecoveryStaging {
                path: "/srv/stage".into(),
                staging: Some(staging_inventoried()),
                error: None,
            }),
            RecoveryEvent::Scan(RecoveryScan {
                run: "run-lost.1".into(),
                processes: vec![ScanProc {
                    pid: 4400,
                    start_time: 8_412_999,
                    comm: "Hopper".into(),
                }],
                processes_not_listed: 0,
                error: None,
            }),
            RecoveryEvent::Decided(RecoveryDecided {
                outcome: ROutcome::Failed,
                reasons: vec![RReason {
                    code: RCode::RunProcessesLeft,
                    detail: "4400 (Hopper)".into(),
                }],
            }),
        ]
    }

    fn write(path: &Path, events: &[RecoveryEvent]) {
        let mut log = RecoveryLog::create(path, "recovery-schema.1").unwrap();
        let (last, body) = events.split_last().unwrap();
        for e in body {
            log.record(e).unwrap();
        }
        log.seal(last).unwrap();
    }

    #[test]
    fn the_recovery_schema_lists_exactly_its_kinds() {
        let s = load_schema("recovery-record");
        let variants: Vec<&str> = s["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["properties"]["kind"]["const"].as_str().unwrap())
            .collect();
        assert_eq!(variants, RKINDS);
        let listed: Vec<&str> = s["properties"]["kind"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(listed, RKINDS);
        let codes: Vec<String> = s["$defs"]["code"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let ours: Vec<String> = all_recovery_codes().iter().map(|c| c.as_str()).collect();
        assert_eq!(
            codes, ours,
            "the schema's codes are the library's, in order"
        );
        // The watchdog's and the recovery's kinds never meet (routing by
        // the first record's kind).
        for k in RKINDS {
            assert!(!KINDS.contains(k), "{k}");
        }
    }

    #[test]
    fn every_recovery_kind_written_by_the_library_matches_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovery.jsonl");
        let events = every_recovery_event();
        write(&path, &events);
        let rec = common::schema::compile("recovery-record");
        let lines = log_values(&path);
        assert_eq!(lines.len(), RKINDS.len());
        for (i, v) in lines.iter().enumerate() {
            let errors = schema_errors(&rec, v);
            assert!(errors.is_empty(), "line {}: {errors:#?}\n{v}", i + 1);
        }
        // Its verdict (a failed recovery: retain, with its reason; the
        // stage recorded is not the one given) matches the verdict schema.
        let verdict = common::schema::compile("recovery-verdict");
        let v = verify_recovery_file(&path, &RecoveryOptions::default());
        let value = serde_json::to_value(&v).unwrap();
        let errors = schema_errors(&verdict, &value);
        assert!(errors.is_empty(), "{errors:#?}\n{value:#}");
        assert_eq!(value["result"], "failed", "{value:#}");
        assert_eq!(value["exit_code"], 1, "{value:#}");
        // Every code with its class, one at a time, on the same verdict.
        for code in all_recovery_codes() {
            let mut x = value.clone();
            x["reasons"] =
                json!([{"code": code.as_str(), "class": "retain", "line": 9, "detail": ""}]);
            let errors = schema_errors(&verdict, &x);
            assert!(errors.is_empty(), "{}: {errors:#?}", code.as_str());
        }
        // A missing log: an error verdict.
        let v = verify_recovery_file(
            &dir.path().join("missing.jsonl"),
            &RecoveryOptions::default(),
        );
        let value = serde_json::to_value(&v).unwrap();
        assert_eq!(value["result"], "error");
        assert!(schema_errors(&verdict, &value).is_empty(), "{value:#}");
    }

    #[test]
    fn recovery_records_and_verdicts_the_schema_must_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovery.jsonl");
        write(&path, &every_recovery_event());
        let rec = common::schema::compile("recovery-record");
        let lines = log_values(&path);
        let good = lines[0].clone();
        assert!(rec.is_valid(&good));
        let mut r = good.clone();
        r["data"]["extra"] = json!(1);
        assert_rejected(&rec, &r, "unknown field in data");
        let mut r = good.clone();
        r["data"]["log_records"] = json!(9.5);
        assert_rejected(&rec, &r, "float");
        let mut r = good.clone();
        r["kind"] = json!("recovery_decided");
        assert_rejected(&rec, &r, "data of another kind");
        let mut r = lines[7].clone();
        r["data"]["reasons"][0]["code"] = json!("looks_fine");
        assert_rejected(&rec, &r, "unknown code");
        let mut r = lines[7].clone();
        r["data"]["outcome"] = json!("discarded");
        assert_rejected(&rec, &r, "an outcome of another log");
        let mut r = lines[1].clone();
        r["data"]["group"]["state"] = json!("moved");
        assert_rejected(&rec, &r, "unknown group state");
        // The census: a foreign member's facts and a failed freeze are
        // valid records; an unknown run_id value is not.
        let mut r = lines[2].clone();
        r["data"]["members"][0]["run_id"] = json!("missing");
        r["data"]["members"][1]["run_id"] = json!("unreadable");
        r["data"]["freeze"]["frozen"] = json!(false);
        r["data"]["freeze"]["error"] = json!("cgroup.freeze: EACCES");
        assert!(rec.is_valid(&r), "{:#?}", schema_errors(&rec, &r));
        r["data"]["members"][0]["run_id"] = json!("forged");
        assert_rejected(&rec, &r, "unknown run_id");
        let mut r = lines[2].clone();
        r["data"]["members"][0]["alive"] = json!(true);
        assert_rejected(&rec, &r, "a census member with an unknown field");

        let verdict = common::schema::compile("recovery-verdict");
        let v = verify_recovery_file(&path, &RecoveryOptions::default());
        let good = serde_json::to_value(&v).unwrap();
        let mut r = good.clone();
        r["verdict"] = json!("delete_allowed");
        assert_rejected(&verdict, &r, "delete_allowed for a failed recovery");
        let mut r = good.clone();
        r["reasons"][0]["class"] = json!("tampered");
        assert_rejected(&verdict, &r, "a recorded reason with another class");
        let mut r = good.clone();
        r["log_kind"] = json!("stage_discard");
        assert_rejected(&verdict, &r, "another log's kind");
    }
}

mod removal {
    use super::*;
    use rea::audit::stage::remove_log::verify_remove_file;
    use rea::stage::decide::DirId;
    use rea::stage::remove_decide::{
        Code as XCode, LogVerdict, Refusal as XRefusal, VerdictReason, Walked,
    };
    use rea::stage::remove_log::{
        EntryRemoved, Outcome as XOutcome, RemoveApproved, RemoveChecked, RemoveDecided,
        RemoveEvent, RemoveLog, RemoveStarted, What, KINDS as XKINDS,
    };

    /// Every removal code; the `match` stops compiling when one is added.
    fn all_codes() -> Vec<XCode> {
        use XCode::*;
        let all = vec![
            StageUnreachable,
            Verdict,
            HeadMismatch,
            NotSealed,
            NoStageRecorded,
            IdentityMismatch,
            StageChanged,
            OtherFilesystem,
            TooManyEntries,
            ConcurrentChange,
            IoError,
            MoreRefusals,
        ];
        for c in &all {
            match c {
                StageUnreachable | Verdict | HeadMismatch | NotSealed | NoStageRecorded
                | IdentityMismatch | StageChanged | OtherFilesystem | TooManyEntries
                | ConcurrentChange | IoError | MoreRefusals => {}
            }
        }
        all
    }

    /// A removal that was approved and stopped after one entry: every kind.
    fn every_event() -> Vec<RemoveEvent> {
        let id = DirId {
            dev: 1,
            ino: 2,
            uid: 1000,
            mode: 0o40700,
        };
        let (head, digest) = ("a".repeat(64), "d".repeat(64));
        vec![
            RemoveEvent::Started(RemoveStarted {
                version: "0".into(),
                stage: "/srv/stage".into(),
                identity: Some(id),
                audit_log: "/srv/audit.jsonl".into(),
                expect_head: head.clone(),
                uid: 1000,
                pid: 42,
            }),
            RemoveEvent::Checked(RemoveChecked {
                verdict: LogVerdict {
                    status: "delete_allowed".into(),
                    sealed: true,
                    run: Some("run-1".into()),
                    head: Some(head),
                    staging: Some(id),
                    digest: Some(digest.clone()),
                    reasons: vec![VerdictReason {
                        code: "x".into(),
                        detail: "listed, not deciding".into(),
                    }],
                },
                walked: Some(Walked {
                    digest: digest.clone(),
                    entries: 2,
                    other_dev: Vec::new(),
                    too_many: false,
                }),
                walk_error: None,
            }),
            RemoveEvent::Approved(RemoveApproved { entries: 2, digest }),
            RemoveEvent::Removed(EntryRemoved {
                path: "lib/hopper.so".into(),
                what: What::File,
                dev: 1,
                ino: 7,
            }),
            RemoveEvent::Decided(RemoveDecided {
                outcome: XOutcome::Stopped,
                reasons: vec![XRefusal::new(
                    XCode::ConcurrentChange,
                    Some("lib"),
                    "lib is a symlink now",
                )],
                removed: 1,
                stage_removed: false,
            }),
        ]
    }

    #[test]
    fn the_removal_schema_lists_exactly_its_kinds_and_codes() {
        let s = load_schema("remove-record");
        let variants: Vec<&str> = s["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["properties"]["kind"]["const"].as_str().unwrap())
            .collect();
        assert_eq!(variants, XKINDS);
        let listed: Vec<&str> = s["properties"]["kind"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(listed, XKINDS);
        let codes: Vec<String> = s["$defs"]["code"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let ours: Vec<String> = all_codes().iter().map(|c| c.as_str()).collect();
        assert_eq!(
            codes, ours,
            "the schema's codes are the library's, in order"
        );
        let v = load_schema("remove-verdict");
        assert_eq!(v["$defs"]["code"], s["$defs"]["code"]);
        assert_eq!(v["$defs"]["refusal"], s["$defs"]["refusal"]);
        // Routing is by the first record's kind: no kind of another log.
        for k in XKINDS {
            assert!(!KINDS.contains(k), "{k}");
            assert!(!rea::stage::log::KINDS.contains(k), "{k}");
            assert!(!rea::kinds::recovery::KINDS.contains(k), "{k}");
        }
    }

    #[test]
    fn every_removal_kind_written_by_the_library_matches_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("remove.jsonl");
        let events = every_event();
        let mut log = RemoveLog::create(&path, "remove-schema.1").unwrap();
        let (last, body) = events.split_last().unwrap();
        for e in body {
            log.record(e).unwrap();
        }
        log.seal(last).unwrap();
        let rec = common::schema::compile("remove-record");
        let lines = log_values(&path);
        assert_eq!(lines.len(), XKINDS.len());
        for (i, v) in lines.iter().enumerate() {
            let errors = schema_errors(&rec, v);
            assert!(errors.is_empty(), "line {}: {errors:#?}\n{v}", i + 1);
        }
        let mut r = lines[3].clone();
        r["data"]["what"] = json!("receipt");
        assert_rejected(&rec, &r, "a discard log's removal kind");
        let verdict = common::schema::compile("remove-verdict");
        let v = serde_json::to_value(verify_remove_file(&path, None, None)).unwrap();
        let errors = schema_errors(&verdict, &v);
        assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
        assert_eq!(
            (v["result"].as_str(), v["exit_code"].as_i64()),
            (Some("stopped"), Some(5)),
            "{v:#}"
        );
        let mut r = v.clone();
        r["log_kind"] = json!("stage_discard");
        assert_rejected(&verdict, &r, "another log's kind");
    }
}
