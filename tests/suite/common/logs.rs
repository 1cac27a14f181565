//! Building audit logs with the library writer, for verify tests.
//!
//! [`build`] writes a realistic log of one action through
//! [`rea::audit::AuditWriter`] (never by formatting JSON by hand): the
//! watchdog is this test process (its own pid, start time and uid), the root
//! controller is its parent, jobs are the watchdog's children, a stop
//! signals only processes that hang off the watchdog, the temp root is a
//! real directory inventoried and removed with `rea::inventory`, and the
//! receipt's counts are counted record by record with the library's one
//! count rule, `Counts::add` ([`super::counted`], shared with the bench
//! examples). [`LogOpts`] selects the row of the verdict table (docs/verdict.md) the
//! log stands for.
//!
//! The rest of the module is what tamper tests need: the log as lines,
//! byte-level edits of one line, re-chaining, and running `rea-audit`.

use rea::log::Kind as _;
use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::counted::CountedLog;
use rea::inventory;
use rea::kinds::watchdog::Outcome;
use rea::kinds::watchdog::{
    AskSpan, Bounds, DirIdentity, Event, Ident, JobExited, JobSpawned, Link, MappingUncertain,
    Mode, OutputCapped, Proc, Reaped, ReapedProc, Receipt, RequestReceived, RequestRefused,
    RootBound, RootSource, RunStarted, Sig, SignalSweep, Stage, Status, StopCompleted,
    StopPriority, StopReason, StopTriggered, Stream, StreamSummary, TempRootInventoried,
    TempRootRemoved, Uncertainty,
};
use rea::log::chain;
use rea::process::identity;
use rea::protocol::{Capture, Op, RefusalReason};
use serde_json::Value;

/// What the log of one action shows. Start from [`LogOpts::closed`] or
/// [`LogOpts::stopped`] and change fields with struct update syntax.
#[derive(Clone, Debug)]
pub struct LogOpts {
    pub run: String,
    /// Jobs spawned (job 1 by the root controller, later ones are nested
    /// launchers asked for by job 1).
    pub jobs: u64,
    /// Spawn requests refused (each is a request_received + request_refused).
    pub refused: u64,
    /// `None`: closed normally. `Some(reason)`: stopped for `reason`.
    pub stop: Option<StopReason>,
    /// Adopted descendants (double forks, setsid daemons) the stop signals
    /// and reaps; the last one ignores SIGTERM and needs a SIGKILL sweep.
    pub escapees: u64,
    /// Processes that could not be bound or verified (mapping_uncertain).
    pub uncertain: u64,
    /// The stop proved quiescence (false: the kill bound ran out with the
    /// SIGTERM-ignoring escapee still alive; the receipt is negative).
    pub proof: bool,
    pub temp_removed: bool,
    /// A real directory: identity at start, inventory at the end.
    pub staging: Option<PathBuf>,
    /// false: the watchdog was lost after spawning the jobs (no receipt).
    pub seal: bool,
    /// Applied to the receipt just before it is written (forged counts, ...).
    pub tweak_receipt: Option<fn(&mut Receipt)>,
    /// Records the writer appends after the receipt (a forger with the
    /// library in hand; the watchdog never does this).
    pub after_receipt: Vec<Event>,
    /// Records appended once the jobs are spawned, before they end (what a
    /// forger slips into the middle of an action).
    pub while_running: Vec<Event>,
}

impl LogOpts {
    /// A clean, closed action: two jobs (the second nested), one refused
    /// request, everything reaped, the temp root removed. Positive receipt.
    pub fn closed(run: &str) -> LogOpts {
        LogOpts {
            run: run.to_string(),
            jobs: 2,
            refused: 1,
            stop: None,
            escapees: 0,
            uncertain: 0,
            proof: true,
            temp_removed: true,
            staging: None,
            seal: true,
            tweak_receipt: None,
            after_receipt: Vec::new(),
            while_running: Vec::new(),
        }
    }

    /// Stopped for `reason` while both jobs ran; two escapees signalled and
    /// reaped (one after a SIGKILL sweep). Positive receipt.
    pub fn stopped(run: &str, reason: StopReason) -> LogOpts {
        LogOpts {
            stop: Some(reason),
            escapees: 2,
            ..LogOpts::closed(run)
        }
    }
}

/// A log written by [`build`].
pub struct BuiltLog {
    /// Holds the log and the state directory; removed on drop.
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub run: String,
    /// `AuditWriter::head()` after the last record.
    pub head: String,
    /// The kind of every record, in order (line N is `kinds[N-1]`).
    pub kinds: Vec<&'static str>,
    pub watchdog: Ident,
    pub receipt: Option<Receipt>,
}

impl BuiltLog {
    /// 1-based line of the `nth` (0-based) record of `kind`.
    pub fn line_of(&self, kind: &str, nth: usize) -> usize {
        self.kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == kind)
            .nth(nth)
            .map(|(i, _)| i + 1)
            .unwrap_or_else(|| panic!("no record #{nth} of kind {kind} in {:?}", self.kinds))
    }

    pub fn lines(&self) -> Vec<Vec<u8>> {
        read_lines(&self.path)
    }
}

/// Writes records durably, counting them by the library's count rule
/// ([`CountedLog`]), and keeps their kinds and the uncertain mappings.
struct Log {
    out: CountedLog,
    kinds: Vec<&'static str>,
    uncertain: u64,
}

impl Log {
    fn rec(&mut self, ev: Event) {
        if let Event::MappingUncertain(_) = ev {
            self.uncertain += 1;
        }
        self.kinds.push(ev.kind());
        self.out.put(&ev);
    }
}

fn me() -> Ident {
    Ident {
        pid: std::process::id() as i32,
        start_time: identity::self_start_time().expect("own /proc/self/stat"),
        uid: nix::unistd::getuid().as_raw(),
    }
}

/// The test's parent plays the root controller.
fn parent(uid: u32) -> (Ident, String) {
    let ppid = nix::unistd::getppid().as_raw();
    match identity::read_stat(ppid) {
        Ok(st) => (
            Ident {
                pid: ppid,
                start_time: st.start_time,
                uid,
            },
            st.comm,
        ),
        // Outside a PID namespace the parent is always readable; inside
        // one whose init is our parent it is too. Fall back to a plausible
        // identity rather than fail a test about the log format.
        Err(_) => (
            Ident {
                pid: ppid.max(1),
                start_time: 1,
                uid,
            },
            "controller".into(),
        ),
    }
}

fn tick(t: &mut u64) -> u64 {
    *t += 13;
    *t
}

fn digest(bytes: &[u8]) -> String {
    chain::line_hash(bytes)
}

fn summary(bytes: &[u8]) -> StreamSummary {
    StreamSummary {
        bytes: bytes.len() as u64,
        sha256: digest(bytes),
    }
}

/// Pids for processes that exist only in the log: never the watchdog's or
/// the root's pid.
struct Pids {
    next: i32,
    avoid: [i32; 2],
}

impl Pids {
    fn take(&mut self) -> i32 {
        loop {
            self.next += 7;
            if !self.avoid.contains(&self.next) {
                return self.next;
            }
        }
    }
}

struct Job {
    job: u64,
    id: String,
    pid: i32,
    start_time: u64,
    running: bool,
}

/// Writes the log `opts` describes into a fresh temporary directory.
pub fn build(opts: &LogOpts) -> BuiltLog {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.audit.jsonl", opts.run));
    let state_dir = dir.path().join("state");
    fs::create_dir(&state_dir).unwrap();
    let tmp_root = state_dir.join("tmp");
    fs::create_dir(&tmp_root).unwrap();

    let me = me();
    let (root, root_comm) = parent(me.uid);
    let staging: Option<DirIdentity> = opts
        .staging
        .as_ref()
        .map(|p| inventory::dir_identity(p).expect("staging identity"));
    let mut pids = Pids {
        next: 20_000,
        avoid: [me.pid, root.pid],
    };
    let mut ticks = me.start_time;

    let mut log = Log {
        out: CountedLog::create(&path, &opts.run, true),
        kinds: Vec::new(),
        uncertain: 0,
    };

    log.rec(Event::RunStarted(RunStarted {
        version: env!("CARGO_PKG_VERSION").to_string(),
        mode: Mode::Run,
        watchdog: me,
        state_dir: state_dir.display().to_string(),
        bounds: Bounds {
            action_deadline_ms: Some(600_000),
            term_grace_ms: 500,
            kill_bound_ms: 3_000,
            output_cap: Some(65_536),
            ask: AskSpan::HalfGrace,
        },
        staging: staging.clone(),
        pass_env: vec!["HOPPER_LICENSE_FILE".into()],
        handover: None,
    }));
    log.rec(Event::RootBound(RootBound {
        root: Some(root),
        comm: Some(root_comm),
        source: RootSource::Parent,
    }));
    // The stage's baseline, as the watchdog takes it before any spawn (the
    // stage as it is now: a test changes it afterwards to model a change).
    if let Some(identity) = &staging {
        let (s, listing) =
            inventory::staging_listed(Path::new(&identity.path), None).expect("staging baseline");
        let content = rea::stage::pinned::uploaded_digest(&listing);
        log.rec(Event::StagingBaseline(
            rea::kinds::watchdog::StagingBaseline::new(s, content, 0),
        ));
    }

    // Jobs: job 1 is the install phase asked for by the root; later jobs are
    // launchers that job 1 asked for (a nested request; a sibling, not a child).
    let mut jobs: Vec<Job> = Vec::new();
    for j in 1..=opts.jobs {
        let id = format!("job-{j}");
        let caller = match jobs.first() {
            None => root,
            Some(first) => Ident {
                pid: first.pid,
                start_time: first.start_time,
                uid: me.uid,
            },
        };
        log.rec(Event::RequestReceived(RequestReceived {
            id: Some(id.clone()),
            op: Some(Op::Spawn),
            caller: Some(caller),
            bytes: 311,
        }));
        let pid = pids.take();
        let start_time = tick(&mut ticks);
        let (name, argv) = if j == 1 {
            (
                "install",
                vec![
                    "/opt/hopper/install.sh".to_string(),
                    "--prefix".into(),
                    "/srv/stage/hopper".into(),
                ],
            )
        } else {
            (
                "launcher",
                vec![
                    "/srv/stage/hopper/bin/Hopper".to_string(),
                    "--headless".into(),
                    format!("--session=ü-{j}"),
                ],
            )
        };
        log.rec(Event::JobSpawned(JobSpawned {
            job: j,
            id: id.clone(),
            name: Some(name.into()),
            argv,
            program: None,
            cwd: None,
            env: None,
            pid,
            start_time,
            uid: me.uid,
            ppid: me.pid,
            sid: pid,
            caller: Some(caller),
            caller_job: None,
            deadline_ms: Some(if j == 1 { 200_000 } else { 60_000 }),
            inner_alarm_ms: None,
            capture: if j == 1 {
                Capture::Capture
            } else {
                Capture::Discard
            },
            stop_signal: if j == 1 { Sig::USR1 } else { Sig::TERM },
        }));
        jobs.push(Job {
            job: j,
            id,
            pid,
            start_time,
            running: true,
        });
    }
    for k in 1..=opts.refused {
        let id = format!("bad-{k}");
        log.rec(Event::RequestReceived(RequestReceived {
            id: Some(id.clone()),
            op: Some(Op::Spawn),
            caller: Some(root),
            bytes: 120,
        }));
        log.rec(Event::RequestRefused(RequestRefused {
            id: Some(id),
            reason: RefusalReason::RelativeArgv0,
            detail: "argv[0] \"Hopper\" is not an absolute path".into(),
        }));
    }

    if !opts.seal {
        // The watchdog was SIGKILLed while the jobs ran: nothing more.
        let head = log.out.w.head().to_string();
        return BuiltLog {
            dir,
            path,
            run: opts.run.clone(),
            head,
            kinds: log.kinds,
            watchdog: me,
            receipt: None,
        };
    }

    let exit = |log: &mut Log, job: &mut Job, status: Status, stopped: bool| {
        job.running = false;
        let out = format!("{} done\n", job.id);
        log.rec(Event::JobExited(JobExited {
            job: job.job,
            pid: job.pid,
            start_time: job.start_time,
            status,
            duration_ms: 1_200 + job.job * 10,
            stdout: summary(out.as_bytes()),
            stderr: summary(b""),
            output_capped: opts.stop == Some(StopReason::ExcessOutput) && job.job == 1,
            stopped,
        }));
    };
    // Descendants the watchdog could not prove (pidfd_open failed on them).
    let mut uncertain_procs: Vec<Proc> = Vec::new();
    let write_uncertain = |log: &mut Log, pids: &mut Pids, ticks: &mut u64, out: &mut Vec<Proc>| {
        for _ in 0..opts.uncertain {
            let p = Proc {
                pid: pids.take(),
                ppid: me.pid,
                start_time: tick(ticks),
                uid: me.uid,
                comm: "Hopper Helper".into(),
            };
            log.rec(Event::MappingUncertain(MappingUncertain {
                process: p.clone(),
                reason: Uncertainty::PidfdFailed,
                detail: "pidfd_open: EMFILE".into(),
            }));
            out.push(p);
        }
    };

    for ev in &opts.while_running {
        log.rec(ev.clone());
    }
    match opts.stop {
        None => {
            for job in jobs.iter_mut() {
                exit(&mut log, job, Status::Code(0), false);
            }
            log.rec(Event::RequestReceived(RequestReceived {
                id: Some("close".into()),
                op: Some(Op::Close),
                caller: Some(root),
                bytes: 140,
            }));
            // The close-time scan found something it could not prove.
            write_uncertain(&mut log, &mut pids, &mut ticks, &mut uncertain_procs);
        }
        Some(reason) => {
            // What leads up to the trigger.
            let mut job = jobs.first().map(|j| j.job);
            let mut processes = Vec::new();
            match reason {
                StopReason::ExcessOutput => log.rec(Event::OutputCapped(OutputCapped {
                    job: 1,
                    stream: Stream::Stdout,
                    cap: 65_536,
                })),
                StopReason::StopRequested | StopReason::CloseWhileRunning => {
                    let (id, op) = if reason == StopReason::StopRequested {
                        ("stop", Op::Stop)
                    } else {
                        ("close", Op::Close)
                    };
                    log.rec(Event::RequestReceived(RequestReceived {
                        id: Some(id.into()),
                        op: Some(op),
                        caller: Some(root),
                        bytes: 140,
                    }));
                    job = None;
                }
                StopReason::Abandoned => {
                    // Job 1 ended and left its double-forked children behind.
                    if let Some(first) = jobs.first_mut() {
                        exit(&mut log, first, Status::Code(0), false);
                    }
                }
                StopReason::CallerLost => {
                    // Job 2's caller is job 1: it exits while job 2 runs.
                    if jobs.len() >= 2 {
                        exit(&mut log, &mut jobs[0], Status::Code(0), false);
                    }
                    job = jobs.last().map(|j| j.job);
                }
                StopReason::MappingRefused => {
                    write_uncertain(&mut log, &mut pids, &mut ticks, &mut uncertain_procs);
                    processes = uncertain_procs.clone();
                }
                StopReason::Signal
                | StopReason::Hangup
                | StopReason::RootLost
                | StopReason::AuditFailure => job = None,
                StopReason::Deadline => {}
            }

            // Escapees: adopted by the watchdog (subreaper), except the first,
            // which is still the child of job 1 when job 1 is running.
            let mut escapees = Vec::new();
            for e in 0..opts.escapees {
                let ppid = match jobs.first() {
                    Some(first) if e == 0 && first.running => first.pid,
                    _ => me.pid,
                };
                escapees.push(Proc {
                    pid: pids.take(),
                    ppid,
                    start_time: tick(&mut ticks),
                    uid: me.uid,
                    comm: if e == 0 {
                        "hopper-daemon".into()
                    } else {
                        "hopper (helper)".into()
                    },
                });
            }
            if reason == StopReason::Abandoned {
                processes = escapees.clone();
            }
            let detail = match reason {
                StopReason::Deadline => "job 1 passed its 200000 ms deadline".to_string(),
                StopReason::RootLost => format!("root {} exited", root.pid),
                StopReason::CallerLost => "the caller of the job exited first".into(),
                StopReason::Abandoned => "job 1 left live descendants".into(),
                StopReason::ExcessOutput => "job 1 wrote more than 65536 bytes".into(),
                StopReason::MappingRefused => "a descendant could not be proven".into(),
                StopReason::Signal => "SIGTERM".into(),
                StopReason::Hangup => "SIGHUP received".into(),
                StopReason::StopRequested => "op stop from the root".into(),
                StopReason::CloseWhileRunning => "op close while jobs run".into(),
                StopReason::AuditFailure => {
                    "a job_exited record exceeds the 1048576-byte line cap".into()
                }
            };
            log.rec(Event::StopTriggered(StopTriggered {
                reason,
                first: true,
                detail,
                job,
                processes,
                more_processes: None,
                priority: Some(StopPriority::Fifo),
            }));
            if reason != StopReason::MappingRefused {
                write_uncertain(&mut log, &mut pids, &mut ticks, &mut uncertain_procs);
            }

            // Sweep 1: SIGTERM+SIGCONT to every bound descendant.
            let mut targets: Vec<Proc> = jobs
                .iter()
                .filter(|j| j.running)
                .map(|j| Proc {
                    pid: j.pid,
                    ppid: me.pid,
                    start_time: j.start_time,
                    uid: me.uid,
                    comm: if j.job == 1 { "install.sh" } else { "Hopper" }.into(),
                })
                .collect();
            targets.extend(escapees.iter().cloned());
            let others: Vec<Link> = uncertain_procs
                .iter()
                .map(|p| Link {
                    pid: p.pid,
                    ppid: p.ppid,
                })
                .collect();
            let mut sweeps = 0;
            if !targets.is_empty() {
                sweeps += 1;
                log.rec(Event::SignalSweep(SignalSweep {
                    sweep: sweeps,
                    part: 0,
                    stage: Stage::Term,
                    signals: vec![Sig::TERM, Sig::CONT],
                    targets,
                    others,
                    cont: Vec::new(),
                }));
            }
            for j in jobs.iter_mut().filter(|j| j.running) {
                exit(&mut log, j, Status::Signal(libc::SIGTERM), true);
            }
            // Every escapee but the last dies of SIGTERM.
            let stubborn = escapees.pop();
            if !escapees.is_empty() {
                log.rec(Event::Reaped(Reaped {
                    processes: escapees
                        .iter()
                        .map(|p| ReapedProc {
                            pid: p.pid,
                            start_time: Some(p.start_time),
                            comm: Some(p.comm.clone()),
                            status: Status::Signal(libc::SIGTERM),
                        })
                        .collect(),
                }));
            }
            let mut left = 0;
            if let Some(mut p) = stubborn {
                // Its parent (if job 1) is gone: now the watchdog's.
                p.ppid = me.pid;
                sweeps += 1;
                log.rec(Event::SignalSweep(SignalSweep {
                    sweep: sweeps,
                    part: 0,
                    stage: Stage::Kill,
                    signals: vec![Sig::KILL],
                    targets: vec![p.clone()],
                    others: Vec::new(),
                    cont: Vec::new(),
                }));
                if opts.proof {
                    log.rec(Event::Reaped(Reaped {
                        processes: vec![ReapedProc {
                            pid: p.pid,
                            start_time: Some(p.start_time),
                            comm: Some(p.comm),
                            status: Status::Signal(libc::SIGKILL),
                        }],
                    }));
                } else {
                    left = 1;
                }
            }
            log.rec(Event::StopCompleted(StopCompleted {
                reason,
                sweeps,
                elapsed_ms: 517,
                echild: opts.proof,
                scan_empty: opts.proof,
                left,
                foreign: None,
            }));
        }
    }

    // The private temp root: a real directory with what a runtime left there.
    fs::write(tmp_root.join("hopper.log"), b"started\n").unwrap();
    fs::create_dir(tmp_root.join("cache")).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(tmp_root.join("hopper.sock")).unwrap();
    let tmp_ident = inventory::dir_identity(&tmp_root).unwrap();
    let tmp_fd = inventory::open_dir(&tmp_root).unwrap();
    let (tmp_inv, listing) = inventory::inventory_fd(tmp_fd.as_fd(), 64).unwrap();
    drop(tmp_fd);
    log.rec(Event::TempRootInventoried(TempRootInventoried {
        path: tmp_root.display().to_string(),
        inventory: tmp_inv,
        listing,
        truncated: false,
    }));
    let (removed, detail) = if opts.temp_removed {
        let parent = inventory::open_dir(&state_dir).unwrap();
        inventory::remove_tree_at(parent.as_fd(), "tmp".as_ref(), &tmp_ident)
            .expect("remove the temp root");
        (true, String::new())
    } else {
        (false, "cache is a mount point; not removed".to_string())
    };
    log.rec(Event::TempRootRemoved(TempRootRemoved { removed, detail }));

    let staged = staging.map(|identity| {
        let s = inventory::staging(Path::new(&identity.path)).expect("staging inventory");
        log.rec(Event::StagingInventoried(s.clone()));
        s
    });

    let mut receipt = Receipt {
        outcome: if opts.stop.is_some() {
            Outcome::Stopped
        } else {
            Outcome::Closed
        },
        stop_reason: opts.stop,
        quiescent: opts.proof,
        no_live_or_waitable_descendants: opts.proof,
        uncertain_mappings: log.uncertain,
        temp_root_removed: removed,
        root_alive: opts.stop != Some(StopReason::RootLost),
        counts: log.out.counts.clone(),
        staging: staged,
    };
    if let Some(tweak) = opts.tweak_receipt {
        tweak(&mut receipt);
    }
    log.kinds.push("receipt");
    log.out
        .w
        .seal(&Event::Receipt(receipt.clone()))
        .expect("seal the log");
    for ev in &opts.after_receipt {
        log.rec(ev.clone());
    }
    let head = log.out.w.head().to_string();
    BuiltLog {
        dir,
        path,
        run: opts.run.clone(),
        head,
        kinds: log.kinds,
        watchdog: me,
        receipt: Some(receipt),
    }
}

// ---------------------------------------------------------------------------
// Editing a log the way someone with write access to the file would.

/// The log's lines without their `\n`; panics on a torn tail (built logs
/// never have one).
pub fn read_lines(path: &Path) -> Vec<Vec<u8>> {
    let data = fs::read(path).expect("read the log");
    assert!(data.ends_with(b"\n"), "a built log ends with a newline");
    data[..data.len() - 1]
        .split(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// Joins lines with `\n` after each and writes them to `path`.
pub fn write_lines(path: &Path, lines: &[Vec<u8>]) {
    let mut data = Vec::new();
    for l in lines {
        data.extend_from_slice(l);
        data.push(b'\n');
    }
    fs::write(path, data).expect("write the edited log");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Replaces the first occurrence of `from` in `line` (which must be there).
pub fn replace_once(line: &[u8], from: &str, to: &[u8]) -> Vec<u8> {
    let i = find(line, from.as_bytes())
        .unwrap_or_else(|| panic!("{from:?} not in line {:?}", String::from_utf8_lossy(line)));
    let mut out = line[..i].to_vec();
    out.extend_from_slice(to);
    out.extend_from_slice(&line[i + from.len()..]);
    out
}

/// The `prev` the line carries.
pub fn prev_of(line: &[u8]) -> String {
    let i = find(line, b"\"prev\":\"").expect("a prev field") + 8;
    String::from_utf8(line[i..i + 64].to_vec()).unwrap()
}

/// The line with its `prev` replaced (the rest byte for byte as it was).
pub fn with_prev(line: &[u8], prev: &str) -> Vec<u8> {
    let old = prev_of(line);
    replace_once(
        line,
        &format!("\"prev\":\"{old}\""),
        format!("\"prev\":\"{prev}\"").as_bytes(),
    )
}

/// The `seq` the line carries.
pub fn seq_of(line: &[u8]) -> u64 {
    let i = find(line, b"\"seq\":").expect("a seq field") + 6;
    let end = i + line[i..].iter().position(|&b| b == b',').unwrap();
    std::str::from_utf8(&line[i..end]).unwrap().parse().unwrap()
}

pub fn with_seq(line: &[u8], seq: u64) -> Vec<u8> {
    let old = seq_of(line);
    replace_once(
        line,
        &format!("\"seq\":{old},"),
        format!("\"seq\":{seq},").as_bytes(),
    )
}

/// Recomputes `prev` of every line from index `from` (0-based) on, the way
/// a forger who knows the chain rule would: genesis of `run` for line 0,
/// SHA-256 of the line before for the others. Returns the new head.
pub fn rechain(lines: &mut [Vec<u8>], run: &str, from: usize) -> String {
    for i in from..lines.len() {
        let prev = if i == 0 {
            chain::genesis(run)
        } else {
            chain::line_hash(&lines[i - 1])
        };
        lines[i] = with_prev(&lines[i], &prev);
    }
    chain::line_hash(lines.last().expect("a line"))
}

// ---------------------------------------------------------------------------
// Running rea-audit.

/// What `rea-audit verify --json` said.
#[derive(Debug)]
pub struct Verified {
    pub exit: i32,
    pub json: Value,
    pub stderr: String,
}

impl Verified {
    pub fn status(&self) -> &str {
        self.json["status"].as_str().expect("status")
    }

    pub fn verdict(&self) -> &str {
        self.json["verdict"].as_str().expect("verdict")
    }

    pub fn head(&self) -> Option<&str> {
        self.json["head"].as_str()
    }

    /// Every reason as (code, line).
    pub fn reasons(&self) -> Vec<(String, Option<u64>)> {
        self.json["reasons"]
            .as_array()
            .expect("reasons")
            .iter()
            .map(|r| (r["code"].as_str().unwrap().to_string(), r["line"].as_u64()))
            .collect()
    }

    pub fn codes(&self) -> Vec<String> {
        self.reasons().into_iter().map(|(c, _)| c).collect()
    }

    /// Asserts status, exit code and the exact list of (code, line) reasons.
    #[track_caller]
    pub fn expect(&self, status: &str, exit: i32, reasons: &[(&str, Option<u64>)]) {
        let want: Vec<(String, Option<u64>)> =
            reasons.iter().map(|(c, l)| (c.to_string(), *l)).collect();
        assert_eq!(
            (self.status(), self.exit, self.reasons()),
            (status, exit, want),
            "verdict: {:#}",
            self.json
        );
        let allowed = status == "delete_allowed";
        assert_eq!(
            self.verdict(),
            if allowed { "delete_allowed" } else { "retain" }
        );
        assert_eq!(self.json["exit_code"].as_i64(), Some(i64::from(exit)));
    }
}

pub fn rea_audit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rea-audit"))
}

/// `rea-audit verify LOG --json ARGS...`
pub fn verify(log: &Path, args: &[&str]) -> Verified {
    let out = rea_audit()
        .arg("verify")
        .arg(log)
        .arg("--json")
        .args(args)
        .output()
        .expect("run rea-audit");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 verdict");
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "verify --json printed no JSON ({e}): {stdout:?}; stderr {:?}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Verified {
        exit: out.status.code().expect("rea-audit exited, not killed"),
        json,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
