//! One schedule, drawn from a seed: the watchdog's bounds and mode, the
//! jobs and their shapes, the trigger and what follows it, and the delays
//! between steps. Everything a run does is decided here, before it starts,
//! so a seed replays the same schedule (the processes' timing aside).

use crate::common::harness::{fixture, python, watchdog_bin};

/// xorshift64* over a splitmix64-scrambled seed: small, deterministic, no
/// dependency.
pub struct Rng(u64);

/// splitmix64: spreads consecutive seeds over the whole space.
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

/// What starts the stop (or the end) of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `close` while jobs may run (close_while_running, or a plain close).
    Close,
    /// `stop` (stop_requested), then `close`.
    Stop,
    /// One job's short `--deadline`, then `close`.
    Deadline,
    /// A short `--action-deadline`, then `close`.
    ActionDeadline,
    /// SIGTERM to the watchdog through its pidfd (it seals by itself).
    Sigterm,
    /// The jobs that end by themselves have ended (a leader exiting, maybe
    /// leaving its tree abandoned), then `close`.
    JobExit,
    /// A job's `submit` client is SIGKILLed (caller_lost), then `close`.
    CallerLost,
}

pub const TRIGGERS: &[Trigger] = &[
    Trigger::Close,
    Trigger::Stop,
    Trigger::Deadline,
    Trigger::ActionDeadline,
    Trigger::Sigterm,
    Trigger::JobExit,
    Trigger::CallerLost,
];

/// A step after the first trigger: during the stop, or after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Later {
    Close,
    Stop,
    Sigterm,
}

/// A job's process tree, from the fixtures.
#[derive(Clone, Debug)]
pub enum Shape {
    /// `tree.py` with these shapes; its leader exits after ready, or waits.
    Tree { shapes: Vec<String>, exit: bool },
    /// `zombies.py N`: N zombies left at once, the leader exits.
    Zombies(u64),
    /// `crowd.py N`: N sleepers abandoned at once, the leader exits.
    Crowd(u64),
    /// `zombie_leader.py` (a `Z` leader with a live thread), `--escape`.
    ZombieLeader { escape: bool },
    /// `storm.py --max N`: forks replacements during the grace.
    Storm(u64),
    /// `launcher.py`: sleeps, exits with a status.
    Launcher { sleep_ms: u64, exit: u64 },
    /// `regroup.py --how HOW` (cgroup mode, root): nest, unnest, leave.
    Regroup { how: &'static str, exit: bool },
    /// The job is itself a `rea-watchdog submit` of this shape (a job
    /// asking for a job).
    Nested(Box<Shape>),
}

/// Opens the oracle FIFO (inheritable) and execs the rest of argv: every
/// process of a fixture without an oracle of its own then holds it.
const HOLD: &str = "import os, sys\n\
fd = os.open(sys.argv[1], os.O_WRONLY)\n\
os.set_inheritable(fd, True)\n\
os.execv(sys.argv[2], sys.argv[2:])\n";

fn hold(fifo: &str, argv: Vec<String>) -> Vec<String> {
    let mut v = vec![python().to_string(), "-c".into(), HOLD.into(), fifo.into()];
    v.extend(argv);
    v
}

fn then(exit: bool) -> String {
    if exit { "exit" } else { "wait" }.into()
}

impl Shape {
    /// The job's argv; every process it makes holds `fifo` open.
    pub fn argv(&self, fifo: &str) -> Vec<String> {
        let py = |f: &str| vec![python().to_string(), fixture(f)];
        let oracle = |f: &str| {
            let mut v = py(f);
            v.extend(["--oracle".to_string(), fifo.to_string()]);
            v
        };
        match self {
            Shape::Tree { shapes, exit } => {
                let mut v = oracle("tree.py");
                for s in shapes {
                    v.extend(["--shape".to_string(), s.clone()]);
                }
                v.extend(["--then".to_string(), then(*exit)]);
                v
            }
            Shape::Zombies(n) | Shape::Crowd(n) => {
                let name = match self {
                    Shape::Zombies(_) => "zombies.py",
                    _ => "crowd.py",
                };
                let mut v = py(name);
                v.push(n.to_string());
                hold(fifo, v)
            }
            Shape::ZombieLeader { escape } => {
                let mut v = oracle("zombie_leader.py");
                v.extend(escape.then(|| "--escape".to_string()));
                v
            }
            Shape::Storm(n) => {
                let mut v = oracle("storm.py");
                v.extend(["--max".to_string(), n.to_string()]);
                v
            }
            Shape::Launcher { sleep_ms, exit } => {
                let mut v = oracle("launcher.py");
                let sleep = format!("{:.3}", *sleep_ms as f64 / 1000.0);
                v.extend(["--sleep".into(), sleep, "--exit".into(), exit.to_string()]);
                v
            }
            Shape::Regroup { how, exit } => {
                let mut v = oracle("regroup.py");
                v.extend([
                    "--how".into(),
                    how.to_string(),
                    "--then".into(),
                    then(*exit),
                ]);
                v
            }
            Shape::Nested(inner) => {
                let mut v = vec![watchdog_bin().to_string(), "submit".into()];
                v.extend(["--name", "inner", "--deadline", "60s", "--"].map(String::from));
                v.extend(inner.argv(fifo));
                hold(fifo, v)
            }
        }
    }

    /// The job's leader ends by itself (its `submit` returns without a stop).
    pub fn ends_by_itself(&self) -> bool {
        match self {
            Shape::Tree { exit, .. } | Shape::Regroup { exit, .. } => *exit,
            Shape::Zombies(_) | Shape::Crowd(_) | Shape::Launcher { .. } => true,
            Shape::ZombieLeader { .. } | Shape::Storm(_) => false,
            Shape::Nested(inner) => inner.ends_by_itself(),
        }
    }

    /// The fixture writes a ready line on the oracle.
    pub fn reports_ready(&self) -> bool {
        match self {
            Shape::Tree { .. } | Shape::ZombieLeader { .. } | Shape::Storm(_) => true,
            Shape::Regroup { .. } => true,
            Shape::Zombies(_) | Shape::Crowd(_) | Shape::Launcher { .. } => false,
            Shape::Nested(inner) => inner.reports_ready(),
        }
    }

    /// Members a tracer may seize (a tree's, never its leader).
    pub fn traceable(&self) -> bool {
        matches!(self, Shape::Tree { .. })
    }
}

#[derive(Clone, Debug)]
pub struct JobPlan {
    pub shape: Shape,
    /// `--deadline` in ms (60 s unless short).
    pub deadline_ms: u64,
    pub stop_signal: Option<&'static str>,
    pub inner_alarm_ms: Option<u64>,
    /// Submitted after the first trigger (it may be refused).
    pub after_trigger: bool,
    /// Sleep before submitting it.
    pub delay_ms: u64,
    /// Wait for its ready line before the next step.
    pub wait_ready: bool,
}

/// When the outside tracer lets its tracee go (its exit then reaches the
/// watchdog): a straggler the kill bound could not end, dying before the
/// close, or after the seal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Once `stop_completed` is in the log (or the watchdog is gone).
    Stopped,
    /// This long after the first trigger.
    Delay(u64),
    /// After the watchdog exited.
    Sealed,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    /// `none` or `auto`.
    pub contain: &'static str,
    pub grace_ms: u64,
    pub kill_ms: u64,
    pub action_deadline_ms: Option<u64>,
    pub jobs: Vec<JobPlan>,
    pub trigger: Trigger,
    pub trigger_delay_ms: u64,
    /// Steps after the trigger, each after its delay.
    pub later: Vec<(Later, u64)>,
    /// A tracer on a member of this job (which waits for ready).
    pub tracer: Option<(usize, Release)>,
    /// `close` again after a SIGTERM (it may race the seal).
    pub close_after_sigterm: bool,
    /// After a trigger the watchdog acts on by itself (a deadline, a lost
    /// caller, a job's exit), wait a while for its stop before the close.
    pub await_stop: bool,
}

const TREE_SHAPES: &[&str] = &[
    "escapee",
    "doublefork",
    "termignore",
    "stopped",
    "termfork",
    "hopper",
    "chain",
    "zombies",
    "graceful",
    "graceful",
    "exitafter",
    "leavegroup",
];

/// A tree of up to four shapes; `cgroup`: a member may leave the group.
fn tree(r: &mut Rng, cgroup: bool) -> Shape {
    let n = r.range(0, 4);
    let shapes = (0..n)
        .map(|_| match r.pick(TREE_SHAPES) {
            "leavegroup" if !cgroup => "hopper".to_string(),
            "chain" => format!("chain:{}", r.range(1, 12)),
            "zombies" => format!("zombies:{}", r.range(1, 8)),
            "graceful" => format!("graceful:{}", r.range(0, 400)),
            "exitafter" => format!("exitafter:{}", r.range(0, 600)),
            s => s.to_string(),
        })
        .collect();
    Shape::Tree {
        shapes,
        exit: r.chance(30),
    }
}

/// A job shape; `cgroup`: cgroup moves are possible (auto mode, a test
/// group, root).
fn shape(r: &mut Rng, cgroup: bool, nest: bool) -> Shape {
    match r.range(0, 14) {
        0..=4 => tree(r, cgroup),
        5 => Shape::Zombies(r.range(1, 40)),
        6 => Shape::Crowd(r.range(1, 20)),
        7 | 8 => Shape::ZombieLeader {
            escape: r.chance(50),
        },
        9 => Shape::Storm(r.range(4, 24)),
        10 | 11 => Shape::Launcher {
            sleep_ms: r.range(0, 500),
            exit: r.pick(&[0, 0, 1, 3]),
        },
        12 | 13 if cgroup => Shape::Regroup {
            how: r.pick(&["nest", "unnest", "leave"]),
            exit: r.chance(30),
        },
        14 if nest => Shape::Nested(Box::new(shape(r, cgroup, false))),
        _ => tree(r, cgroup),
    }
}

const STOP_SIGNALS: &[&str] = &["TERM", "INT", "HUP", "USR1", "USR2", "ALRM"];

impl Plan {
    /// The schedule of `seed`; `cgroup`: cgroup-moving jobs are possible
    /// in auto mode.
    pub fn draw(seed: u64, cgroup: bool) -> Plan {
        let mut r = Rng::new(seed);
        let contain = r.pick(&["none", "auto"]);
        let cgroup = cgroup && contain == "auto";
        let trigger = r.pick(TRIGGERS);
        let grace_ms = if r.chance(30) { 0 } else { r.range(1, 300) };
        let kill_ms = r.range(200, 1000);
        let action_deadline_ms = match trigger {
            Trigger::ActionDeadline => Some(r.range(300, 1500)),
            _ => None,
        };
        let n = r.range(1, 3) as usize;
        let mut jobs: Vec<JobPlan> = (0..n)
            .map(|_| {
                let deadline_ms = if r.chance(10) {
                    r.range(300, 2000)
                } else {
                    60_000
                };
                JobPlan {
                    shape: shape(&mut r, cgroup, true),
                    deadline_ms,
                    stop_signal: r.chance(25).then(|| r.pick(STOP_SIGNALS)),
                    inner_alarm_ms: r
                        .chance(8)
                        .then(|| r.range(100, 800).min(deadline_ms - 100)),
                    after_trigger: r.chance(15),
                    delay_ms: r.range(0, 200),
                    wait_ready: r.chance(60),
                }
            })
            .collect();
        // The trigger has what it needs: a job that is there before it, a
        // short deadline, a job that ends by itself.
        jobs[0].after_trigger = false;
        match trigger {
            Trigger::Deadline => jobs[0].deadline_ms = r.range(200, 1500),
            Trigger::JobExit if !jobs.iter().any(|j| j.shape.ends_by_itself()) => {
                jobs[0].shape = Shape::Launcher {
                    sleep_ms: r.range(0, 400),
                    exit: 0,
                };
            }
            _ => {}
        }
        for j in &mut jobs {
            j.inner_alarm_ms = j.inner_alarm_ms.filter(|&a| a + 50 < j.deadline_ms);
        }
        let traced = jobs
            .iter()
            .position(|j| !j.after_trigger && j.shape.traceable());
        let tracer = traced.filter(|_| r.chance(20)).map(|i| {
            jobs[i].wait_ready = true;
            if let Shape::Tree { exit, .. } = &mut jobs[i].shape {
                *exit = false; // its members would be stopped before the tracer is there
            }
            let release = match r.range(0, 2) {
                0 => Release::Stopped,
                1 => Release::Delay(r.range(0, 500)),
                _ => Release::Sealed,
            };
            (i, release)
        });
        let later = (0..r.range(0, 2))
            .map(|_| {
                let step = r.pick(&[Later::Close, Later::Stop, Later::Sigterm]);
                (step, r.range(0, 300))
            })
            .collect();
        Plan {
            seed,
            contain,
            grace_ms,
            kill_ms,
            action_deadline_ms,
            jobs,
            trigger,
            trigger_delay_ms: r.range(0, 400),
            later,
            tracer,
            close_after_sigterm: r.chance(20),
            await_stop: r.chance(70),
        }
    }

    /// The watchdog's flags for this schedule.
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![
            "--contain".to_string(),
            self.contain.to_string(),
            "--term-grace".into(),
            format!("{}ms", self.grace_ms),
            "--kill-bound".into(),
            format!("{}ms", self.kill_ms),
        ];
        if let Some(d) = self.action_deadline_ms {
            v.extend(["--action-deadline".into(), format!("{d}ms")]);
        }
        v
    }

    /// One line per schedule: enough to see what it did.
    pub fn summary(&self) -> String {
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .map(|j| {
                format!(
                    "{:?} deadline={}ms sig={:?} alarm={:?} after={} delay={}ms ready={}",
                    j.shape,
                    j.deadline_ms,
                    j.stop_signal,
                    j.inner_alarm_ms,
                    j.after_trigger,
                    j.delay_ms,
                    j.wait_ready
                )
            })
            .collect();
        format!(
            "contain={} grace={}ms kill={}ms action_deadline={:?} trigger={:?} after {}ms, await_stop={}, later={:?}, tracer={:?}, close_after_sigterm={}\n  jobs:\n    {}",
            self.contain,
            self.grace_ms,
            self.kill_ms,
            self.action_deadline_ms,
            self.trigger,
            self.trigger_delay_ms,
            self.await_stop,
            self.later,
            self.tracer,
            self.close_after_sigterm,
            jobs.join("\n    ")
        )
    }
}
