#!/usr/bin/env python3
"""rea demonstration controller: install and rehearse a (fake) native runtime
from a disposable staging directory, then delete the staging directory only
if the audit log proves no process of the action is left.

    python3 tools/rehearse.py [SCENARIO] [options]

Scenarios (default: success), and the verdict each must reach:

  success          install phase (200 s deadline, inner alarm 180 s),
                   rehearsal phase (260 s, inner alarm 240 s)
                   whose program asks for three nested launchers (60 s
                   each); all exit 0; closed with a positive receipt
                   -> delete_allowed, staging deleted
  timeout          a nested launcher sleeps past a short (2 s) deadline:
                   the phase, its submit client and the launcher are all
                   stopped and reaped, positive proof
                   -> delete_allowed, staging deleted
  escape           the rehearsal phase forks a setsid() escapee and asks
                   for a nested launcher, then exits; the escapee outlives
                   it and is stopped as abandoned, positive proof
                   -> delete_allowed, staging deleted
  controller-kill  this script re-executes itself as a sacrificial
                   controller, which starts the watchdog and the phases;
                   with three launchers running it is SIGKILLed (through
                   its pidfd). The watchdog sees its root pidfd fire,
                   stops and reaps everything and seals the evidence
                   -> retain (root_lost), staging kept
  watchdog-loss    the watchdog itself is SIGKILLed during the rehearsal:
                   its log has no receipt
                   -> retain (incomplete), staging kept
  upload-failed    rea-stage begin declares four files before the upload;
                   two arrive, the transfer "fails"; nothing was ever
                   executed, so rea-stage discard removes the untouched
                   stage (recording every decision in its own log)
                   -> discarded, staging deleted
  response-lost    mid-rehearsal, the process holding the phase's reply
                   channel (the SSH response) is killed; the watchdog and
                   the phase run on. No retry, no cleanup, no close: a
                   fresh controller runs `rea-audit reconcile` (read-only)
                   -> running (the watchdog is alive), and decides
                   -> review, staging kept, with the review packet
                   (rea-audit report, HTML) for a person. The demo then
                   plays that person: it closes the action, so that
                   nothing it started is left running; the stage stays
  response-and-watchdog-lost
                   as response-lost, but the watchdog is SIGKILLed too, with
                   a setsid escapee of the phase running: reconcile names
                   what may be alive
                   -> review (verify: retain), staging kept; with a cgroup
                   (--contain auto finds one as root) the escapee is a live
                   member of the action's group: reconcile -> running,
                   naming `rea-watchdog recover` (which this demo leaves to
                   a person), staging kept

The staging directory is deleted only when the watchdog's own waited exit
status is 0 *and* `rea-audit verify` says delete_allowed (the first of
the README's six outcomes; rea_client.may_delete), and then only by
`rea-stage remove`, which checks it again through one descriptor and
removes exactly what it checked (`rea-audit verify REMOVE_LOG`: removed);
or, before any exec, when `rea-stage discard` removed it itself.

Exit status: 0 when the scenario reached its expected verdict (and the
staging directory was deleted exactly when the verdict allows it); 1 when it
did not; 2 when the demo could not run (binaries missing and cargo failed,
bad arguments).

The binaries come from target/release (or $CARGO_TARGET_DIR/release), built
with `cargo build --release` when missing (or always with --build);
--watchdog/--audit/--stage (or REA_WATCHDOG/REA_AUDIT/REA_STAGE) name others. Everything the
demo creates is under one work directory (a new one in $TMPDIR unless
--work-dir is given); the audit log stays there for `rea-audit show`.

No root, cgroups or namespaces are needed. Signals go only to processes this
script started (or that were re-parented to it as a subreaper), always
through a pidfd.
"""

import argparse
import ctypes
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import rea_client as rc  # noqa: E402

FIXTURES = os.path.join(REPO, "fixtures")
PY = sys.executable
EXPECTED = {
    "success": "delete_allowed",
    "timeout": "delete_allowed",
    "escape": "delete_allowed",
    "controller-kill": "retain",
    "watchdog-loss": "retain",
    "upload-failed": "discarded",
    "response-lost": "review",
    "response-and-watchdog-lost": "review",
}
# The files an upload declares before it starts (rea-stage begin --file).
UPLOAD = ("hopper-runtime.bin", "libhopper.so", "plugins.tar", "manifest.json")
# The seed's bounds: each phase's deadline and its runtime's own inner
# alarm (SIGALRM to the phase's leader, recorded, not a stop), launchers 60 s.
INSTALL_DEADLINE, INSTALL_ALARM = 200, 180
REHEARSAL_DEADLINE, REHEARSAL_ALARM = 260, 240
LAUNCHER_DEADLINE = "60s"
SHORT_DEADLINE = "2s"
PR_SET_CHILD_SUBREAPER = 36


class DemoError(Exception):
    pass


def out(msg=""):
    print(msg, flush=True)


def ms(n):
    return f"{n}ms" if n < 1000 else f"{n / 1000:.1f}s"


def short(h):
    return f"{h[:16]}..." if h else "-"


# ----- binaries -------------------------------------------------------------

def find_binaries(args):
    """(rea-watchdog, rea-audit, rea-stage), absolute, built when missing."""
    target = os.environ.get("CARGO_TARGET_DIR") or "target"
    target = os.path.join(REPO, target)  # cargo resolves a relative one from the repo too
    release = os.path.join(target, "release")
    wd = args.watchdog or os.environ.get("REA_WATCHDOG") or os.path.join(release, "rea-watchdog")
    au = args.audit or os.environ.get("REA_AUDIT") or os.path.join(release, "rea-audit")
    st = args.stage or os.environ.get("REA_STAGE") or os.path.join(release, "rea-stage")
    explicit = args.watchdog or args.audit or args.stage or os.environ.get("REA_WATCHDOG")
    missing = not all(os.access(b, os.X_OK) for b in (wd, au, st))
    if args.build or (missing and not explicit):
        if not shutil.which("cargo"):
            raise DemoError("the rea binaries are not built and cargo is not installed "
                            "(install Rust from https://rustup.rs, then run this again)")
        print("rehearse: building rea (cargo build --release) ...", file=sys.stderr, flush=True)
        r = subprocess.run(["cargo", "build", "--release", "--bins"], cwd=REPO,
                           stdout=sys.stderr, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise DemoError(f"cargo build --release failed (exit {r.returncode})")
    for b in (wd, au, st):
        if not os.access(b, os.X_OK):
            raise DemoError(f"{b} is missing or not executable")
    return os.path.abspath(wd), os.path.abspath(au), os.path.abspath(st)


# ----- the parts of an action -------------------------------------------------

class Plan:
    """What the controller asks for, scenario by scenario."""

    def __init__(self, args, watchdog):
        self.args = args
        self.watchdog = watchdog
        self.wrap = shlex.split(args.wrap) if args.wrap else []
        self.oracle = ["--oracle", args.oracle] if args.oracle else []

    def install(self):
        return [*self.wrap, PY, os.path.join(FIXTURES, "launcher.py"),
                "--print", "install: runtime unpacked", *self.oracle]

    def rehearsal(self, scenario):
        phase = [*self.wrap, PY, os.path.join(FIXTURES, "phase.py"),
                 "--watchdog", self.watchdog, *self.oracle]
        if self.args.wrap:
            phase += ["--wrap", self.args.wrap]
        if scenario == "timeout":
            # launcher-1 sleeps far past its short deadline.
            return phase + ["--launchers", "3", "--launcher-deadline", SHORT_DEADLINE,
                            "--", "--print", "rehearsal launcher", "--sleep", "120"]
        if scenario == "escape":
            return phase + ["--escapee", "--launchers", "1",
                            "--launcher-deadline", LAUNCHER_DEADLINE,
                            "--", "--print", "rehearsal launcher"]
        if scenario == "response-and-watchdog-lost":
            # An escapee that outlives everything, and launchers still running.
            return phase + ["--escapee", "--launchers", "3", "--parallel",
                            "--launcher-deadline", LAUNCHER_DEADLINE,
                            "--", "--print", "rehearsal launcher", "--sleep", "240",
                            "--mark-running"]
        if scenario in ("controller-kill", "watchdog-loss", "response-lost"):
            # Three launchers at once, each still running when the kill comes.
            return phase + ["--launchers", "3", "--parallel",
                            "--launcher-deadline", LAUNCHER_DEADLINE,
                            "--", "--print", "rehearsal launcher", "--sleep", "240",
                            "--mark-running"]
        return phase + ["--launchers", "3", "--launcher-deadline", LAUNCHER_DEADLINE,
                        "--", "--print", "rehearsal launcher ok"]


#: The watchdog's own place in the stage (docs/stage.md): its binaries are
#: uploaded into STAGE/.rea/bin like any file; its state directory and log
#: are private, left out of the stage's inventory, the state directory
#: removed at close.
REA_BIN = os.path.join(".rea", "bin")
REA_STATE = os.path.join(".rea", "state")
REA_LOG = os.path.join(".rea", "audit.jsonl")


def stage(work, binaries):
    """The stage as a controller uploads it: the runtime, and rea's own
    three binaries in STAGE/.rea/bin. Returns the in-stage binaries, which
    run everything from here on."""
    staging = os.path.join(work, "staging")
    os.makedirs(os.path.join(staging, "runtime"))
    with open(os.path.join(staging, "runtime", "hopper-runtime.bin"), "wb") as f:
        f.write(b"\x7fELF fake native runtime for the rea demo\n")
    bin_dir = os.path.join(staging, REA_BIN)
    os.makedirs(bin_dir)
    staged = []
    for b in binaries:
        dest = os.path.join(bin_dir, os.path.basename(b))
        shutil.copy2(b, dest)
        staged.append(dest)
    return tuple(staged)


def start_watchdog(args, binaries, work, staging):
    return rc.Watchdog.start(binaries[0], state_dir=os.path.join(staging, REA_STATE),
                             audit_log=os.path.join(staging, REA_LOG), staging=staging)


def read_log(path):
    recs = []
    try:
        with open(path, "rb") as f:
            for line in f.read().split(b"\n"):
                if line:
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return recs


def wait_for_launchers(work, n, limit=60):
    """Until n nested launchers run: each marks itself in the watchdog's
    private temp root ($TMPDIR of every job) once its program started."""
    tmp = os.path.join(work, "staging", REA_STATE, "tmp")
    until = time.monotonic() + limit
    while time.monotonic() < until:
        try:
            running = [f for f in os.listdir(tmp) if f.endswith(".running")]
        except FileNotFoundError:
            running = []
        if len(running) >= n:
            return
        time.sleep(0.05)
    raise DemoError(f"the phase did not get {n} launchers running within {limit} s")


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise DemoError(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")


def adopted_children():
    """Live processes whose parent is this process (only descendants can be
    re-parented to a subreaper), bound to pidfds that were verified after
    opening."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            f = rc._stat_fields(pid)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if int(f[1]) != me or f[0] == b"Z":
            continue
        try:
            fd = rc.bind(pid, int(f[19]))
        except ProcessLookupError:
            continue
        try:
            if int(rc._stat_fields(pid)[1]) == me:  # still ours, after the pidfd
                found.append((pid, fd))
                continue
        except (FileNotFoundError, ProcessLookupError):
            pass
        os.close(fd)
    return found


def reap_adopted():
    n = 0
    while True:
        try:
            r = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            return n
        if r is None:
            return n
        n += 1


def settle_orphans(limit=3.0):
    """After the watchdog is gone: wait (bounded) for whatever came back to
    us to end by itself, reap it; stop what does not. Returns (reaped,
    stopped). What ends by itself does so within milliseconds (PDEATHSIG,
    a pipe's EOF); 3 s is generous, and a process that never ends (the
    setsid escapee of response-and-watchdog-lost) is stopped 3 s on, not
    10 (every full test run waited those 7 s twice)."""
    until = time.monotonic() + limit
    reaped = reap_adopted()
    live = adopted_children()
    while live and time.monotonic() < until:
        p = select.poll()
        for _, fd in live:
            p.register(fd, select.POLLIN)
        p.poll(200)
        for _, fd in live:
            os.close(fd)
        reaped += reap_adopted()
        live = adopted_children()
    stopped = 0
    for _, fd in live:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        stopped += 1
    for _, fd in live:
        rc._readable(fd, 5000)
        os.close(fd)
    reaped += reap_adopted()
    return reaped, stopped


# ----- the report ---------------------------------------------------------------

def sig_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def describe_jobs(recs):
    root = next((r["data"]["root"] for r in recs if r["kind"] == "root_bound"), None)
    exited = {r["data"]["job"]: r["data"] for r in recs if r["kind"] == "job_exited"}
    lines = []
    for r in recs:
        if r["kind"] != "job_spawned":
            continue
        d = r["data"]
        e = exited.get(d["job"])
        if e is None:
            how = "no exit recorded"
        else:
            st = e["status"]
            how = f"exited {st['code']}" if "code" in st else f"killed by {sig_name(st['signal'])}"
            if e["stopped"]:
                how += " (stopped)"
            how += f"  {ms(e['duration_ms'])}"
        nested = d["caller"] is not None and root is not None and d["caller"] != root
        note = "  nested: asked for from inside a job" if nested else ""
        lines.append(f"  job {d['job']}  {(d['name'] or d['id']):<11} {how}{note}")
    return lines


def describe_stop(recs):
    first = next((r["data"] for r in recs if r["kind"] == "stop_triggered"
                  and r["data"]["first"]), None)
    if first is None:
        return None
    targets = set()
    for r in recs:
        if r["kind"] == "signal_sweep":
            for t in r["data"]["targets"]:
                targets.add((t["pid"], t["start_time"]))
    done = next((r["data"] for r in recs if r["kind"] == "stop_completed"), None)
    line = f"  stop       {first['reason']}: {first['detail']}"
    procs = [f"pid {p['pid']} ({p['comm']})" for p in first["processes"]]
    if procs:
        line += f" [{', '.join(procs[:3])}{', ...' if len(procs) > 3 else ''}]"
    line += f"\n             {len(targets)} process(es) signalled"
    if done:
        proof = "no descendant left" if done["echild"] and done["scan_empty"] \
            and done["left"] == 0 else f"{done['left']} left"
        line += f", {proof} after {ms(done['elapsed_ms'])}"
    return line


def describe_receipt(rec):
    if rec is None:
        return "  receipt    none: the log is not sealed"
    c = rec["counts"]
    how = rec["outcome"] + (f" ({rec['stop_reason']})" if rec["stop_reason"] else "")
    proof = "quiescent" if rec["quiescent"] else "NOT quiescent"
    return (f"  receipt    {how}, {proof}, {rec['uncertain_mappings']} uncertain, "
            f"temp root {'removed' if rec['temp_root_removed'] else 'kept'}; "
            f"{c['jobs']} jobs, {c['signals']} signals, {c['reaped']} reaped")


def describe_verdict(v):
    head = f"--expect-head {short(v.pinned)} " if v.pinned else ""
    why = ", ".join(v.codes) if v.codes else "positive receipt, staging unchanged"
    status = "" if v["status"] == v["verdict"] else f" ({v['status']})"
    return (f"  verify     {v['verdict']}{status}: {why}\n"
            f"             (rea-audit verify LOG {head}--staging STAGING: exit {v.exit_code})")


# ----- scenarios ----------------------------------------------------------------

def install_phase(wd, plan):
    """The install phase, which must end well for the scenario to go on."""
    install = wd.submit(plan.install(), INSTALL_DEADLINE, capture=True, name="install",
                        inner_alarm=INSTALL_ALARM)
    if not install.ok:
        raise DemoError(f"the install phase failed: {install}")


def run_phases(wd, plan, scenario):
    """install, then rehearsal; returns the rehearsal's JobResult."""
    install_phase(wd, plan)
    return wd.submit(plan.rehearsal(scenario), REHEARSAL_DEADLINE, capture=True,
                     name="rehearsal", inner_alarm=REHEARSAL_ALARM)


def scenario_normal(args, binaries, work, staging, scenario, report, later):
    plan = Plan(args, binaries[0])
    wd = start_watchdog(args, binaries, work, staging)
    out(f"  watchdog   pid {wd.pid}, run {wd.run_id}")
    report["audit_log"] = wd.audit_log
    run_phases(wd, plan, scenario)
    receipt = wd.close()
    report["head"] = receipt.head
    later.append(describe_receipt(receipt.record))
    later.append(f"  head       {short(receipt.head)} (pinned from the close reply and the "
                 "sealed line)")
    later.append(f"  watchdog   exited {receipt.exit_code} (waited by its parent)")
    v = rc.verify(binaries[1], wd.audit_log, expect_head=receipt.head, staging=staging)
    v.pinned = receipt.head
    return v, receipt.record, receipt.exit_code


def start_and_install(args, binaries, work, staging, report, plan):
    """Starts the watchdog (this process its root) and runs the install
    phase to a good end; returns the watchdog."""
    wd = start_watchdog(args, binaries, work, staging)
    out(f"  watchdog   pid {wd.pid}, run {wd.run_id}")
    report["audit_log"] = wd.audit_log
    install_phase(wd, plan)
    return wd


def scenario_watchdog_loss(args, binaries, work, staging, report, later):
    plan = Plan(args, binaries[0])
    become_subreaper()
    wd = start_and_install(args, binaries, work, staging, report, plan)
    job = wd.spawn(plan.rehearsal("watchdog-loss"), REHEARSAL_DEADLINE, capture=True,
                   name="rehearsal", inner_alarm=REHEARSAL_ALARM)
    wait_for_launchers(work, 3)
    wd.kill(signal.SIGKILL)
    out(f"  kill       SIGKILL to the watchdog (pid {wd.pid}) through its pidfd, "
        "3 launchers running")
    try:
        job.wait(timeout=30)
        raise DemoError("the rehearsal reported a result from a dead watchdog")
    except rc.WatchdogGone as e:
        out(f"  client     rehearsal: {e}")
    code, sealed = wd.wait(30)
    reaped, stopped = settle_orphans()
    recs = read_log(wd.audit_log)
    later.append(describe_receipt(None if not recs or recs[-1]["kind"] != "receipt"
                                  else recs[-1]["data"]))
    later.append(f"  orphans    {reaped} process(es) came back to this controller (a "
                 f"subreaper) and were reaped; {stopped} had to be stopped")
    try:
        rc.Client(wd.state_dir)
        raise DemoError("the lost watchdog's state directory was not refused")
    except rc.StaleStateDir as e:
        later.append(f"  late use   refused by the client: {e}")
    v = rc.verify(binaries[1], wd.audit_log, staging=staging)
    v.pinned = None
    return v, None, code


def scenario_controller_kill(args, binaries, work, staging, report, later):
    become_subreaper()
    cmd = [PY, os.path.abspath(__file__), "--role", "sacrificial", "--work-dir", work,
           "--watchdog", binaries[0], "--audit", binaries[1]]
    if args.oracle:
        cmd += ["--oracle", args.oracle]
    if args.wrap:
        cmd += ["--wrap", args.wrap]
    ctl = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    ctl_fd = os.pidfd_open(ctl.pid)  # our own unreaped child: race-free
    line = ctl.stdout.readline()
    if not line:
        ctl.wait()
        raise DemoError(f"the sacrificial controller exited ({ctl.returncode}) before "
                        "starting the watchdog")
    ready = json.loads(line)
    report["audit_log"] = ready["audit_log"]
    out(f"  controller pid {ctl.pid}: this script re-executed as a sacrificial controller")
    out(f"  watchdog   pid {ready['pid']}, run {ready['run_id']} (root = the controller)")
    wd_fd = rc.bind(ready["pid"], ready["start_time"], ready["uid"])
    try:
        wait_for_launchers(work, 3)
        signal.pidfd_send_signal(ctl_fd, signal.SIGKILL)
        ctl.wait()
        ctl.stdout.close()
        os.close(ctl_fd)
        out(f"  kill       SIGKILL to the controller (pid {ctl.pid}) through its pidfd, "
            "3 launchers running")
        if not rc._readable(wd_fd, 60_000):
            raise DemoError("the watchdog did not finish within 60 s of losing its controller")
    finally:
        os.close(wd_fd)
    # The watchdog was re-parented to us (a subreaper): reap it and the rest.
    reaped, stopped = settle_orphans()
    recs = read_log(ready["audit_log"])
    rec = recs[-1]["data"] if recs and recs[-1]["kind"] == "receipt" else None
    later.append(describe_receipt(rec))
    later.append("  head       not pinned: the controller that would have pinned it is dead")
    later.append(f"  orphans    {reaped} process(es) came back to this controller (a "
                 f"subreaper) and were reaped (the watchdog among them); {stopped} had to "
                 "be stopped")
    v = rc.verify(binaries[1], ready["audit_log"], staging=staging)
    v.pinned = None
    return v, rec, None  # reaped as an orphan: no parent waited for its status


def run_tool(cmd, timeout=120):
    """Runs one of rea's commands; (exit status, stdout text, stderr text)."""
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def scenario_upload_failed(args, binaries, work, report, later):
    """Upload failure proven before any exec (docs/stage.md): begin, a partial
    upload, then a conditional discard that removes only an untouched stage."""
    staging = os.path.join(work, "staging")
    cmd = [binaries[2], "begin", staging]
    for name in UPLOAD:
        cmd += ["--file", name]
    code, stdout, stderr = run_tool(cmd)
    if code != 0:
        raise DemoError(f"rea-stage begin failed (exit {code}): {stderr.strip()}")
    receipt = stdout.strip().split()[-1]
    out(f"  begin      rea-stage begin {staging} --file ... (4 declared): receipt "
        f"{short(receipt)}")
    for name in UPLOAD[:2]:  # two of four arrive ...
        with open(os.path.join(staging, name), "wb") as f:
            f.write(b"\x7fELF partial upload for the rea demo\n")
    out(f"  upload     {UPLOAD[0]}, {UPLOAD[1]} arrived; the transfer failed before "
        f"{UPLOAD[2]} (nothing was executed)")
    log = os.path.join(work, "discard.jsonl")
    report["audit_log"] = log
    code, stdout, stderr = run_tool([binaries[2], "discard", staging,
                                     "--receipt-sha256", receipt, "--audit-log", log])
    gone = not os.path.lexists(staging)
    later.append(f"  discard    rea-stage discard: exit {code}, stage "
                 f"{'gone' if gone else 'kept'}"
                 + (f" ({stderr.strip()})" if stderr.strip() else ""))
    v = rc.verify(binaries[1], log)
    v.pinned = None
    return v, None, code if gone else None


def fresh_controller(args):
    """A new controller process (a new SSH session on the host): it knows
    only the work directory. It reconciles (read-only) and decides review,
    whatever reconcile found: a lost response proves nothing about the
    action, so nothing is retried, cleaned up or closed; it writes the
    review packet for a person. Prints one JSON line."""
    work = args.work_dir
    staging = os.path.join(work, "staging")
    log = os.path.join(staging, REA_LOG)
    state = os.path.join(staging, REA_STATE)
    r = rc.reconcile(args.audit, log, staging=staging, state_dir=state)
    watchdog_alive = ((r.get("watchdog") or {}).get("liveness") or {}).get("state") == "alive"
    group = r.get("group") or {}
    found = {"reconcile": r.outcome, "reconcile_exit": r.exit_code, "codes": r.codes,
             "watchdog_alive": watchdog_alive,
             "group_alive": [m["pid"] for m in group.get("members", []) if m.get("alive")],
             "recover_command": r.get("recover_command"),
             # The root and callers are controllers (this one's parent among
             # them), not something the action started.
             "alive": [{"pid": p["pid"], "roles": p.get("roles", []),
                        "argv": p.get("argv")} for p in r.alive()
                       if not set(p.get("roles", [])) <= {"root", "caller"}],
             "unnamed": (r.get("unnamed") or {}).get("by_environment", [])}
    packet = os.path.join(work, "review.html")
    code, _, stderr = run_tool([args.audit, "report", log, "--staging", staging,
                                "--output", packet], timeout=120)
    found.update(decision="review", packet=packet if os.path.exists(packet) else None,
                 packet_error=stderr.strip() if not os.path.exists(packet) else "")
    print(json.dumps(found), flush=True)
    return 0


# The reply channel's relay: reads the (non-blocking) FIFO until EOF.
RELAY = """
import os, select
p = select.poll()
p.register(0, select.POLLIN)
while True:
    p.poll()
    try:
        if not os.read(0, 65536):
            break
    except BlockingIOError:
        pass
"""


def scenario_response_lost(args, binaries, work, staging, report, later, watchdog_too):
    """The remote exec started but its response was lost (docs/containment.md): the
    process holding the phase's reply channel is killed, the watchdog runs
    on. No retry, no cleanup: a fresh controller reconciles first."""
    plan = Plan(args, binaries[0])
    if watchdog_too:
        become_subreaper()  # what the lost watchdog leaves comes back to us
    wd = start_and_install(args, binaries, work, staging, report, plan)
    scenario = "response-and-watchdog-lost" if watchdog_too else "response-lost"
    job = wd.spawn(plan.rehearsal(scenario), REHEARSAL_DEADLINE, capture=True,
                   name="rehearsal", inner_alarm=REHEARSAL_ALARM)
    # The reply channel goes to a relay (the SSH session carrying the
    # response back); this process keeps no copy of it.
    relay = subprocess.Popen([PY, "-c", RELAY], stdin=job._chan.fd, stdout=subprocess.DEVNULL)
    relay_fd = os.pidfd_open(relay.pid)  # our own unreaped child: race-free
    job._chan.close()
    wait_for_launchers(work, 3)
    signal.pidfd_send_signal(relay_fd, signal.SIGKILL)
    relay.wait()
    os.close(relay_fd)
    out(f"  lost       SIGKILL to the process holding the rehearsal's reply channel "
        f"(pid {relay.pid}): its response will never arrive; 3 launchers running")
    if watchdog_too:
        wd.kill(signal.SIGKILL)
        out(f"  kill       SIGKILL to the watchdog too (pid {wd.pid}), through its pidfd")
    # A fresh controller: knows only the work directory.
    cmd = [PY, os.path.abspath(__file__), "--role", "fresh-controller", "--work-dir", work,
           "--watchdog", binaries[0], "--audit", binaries[1]]
    code, stdout, stderr = run_tool(cmd, timeout=180)
    try:
        found = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DemoError(f"the fresh controller failed (exit {code}): {stderr.strip()}")
    report["reconcile"] = found
    out(f"  reconcile  {found['reconcile']} (exit {found['reconcile_exit']})"
        + (f": {', '.join(found['codes'])}" if found["codes"] else ""))
    if found["reconcile"] == "running" and found.get("watchdog_alive"):
        out(f"             the watchdog is alive and owns what runs ({len(found['alive'])} "
            "process(es) the log names are alive): still no retry, no cleanup, no close")
    elif found["reconcile"] == "running":
        out(f"             the watchdog is gone; {len(found['group_alive'])} member(s) of the "
            "action's cgroup are alive: no retry, no cleanup here; a person may run")
        out(f"             {found.get('recover_command')}")
    else:
        for p in found["alive"]:
            out(f"             may be alive: pid {p['pid']} {'/'.join(p['roles'])} "
                f"{' '.join(p['argv'] or [])[:60]}")
        for p in found["unnamed"]:
            out(f"             not named by the log, carries the run's id: pid "
                f"{p.get('pid')} {p.get('comm', '')}")
    if watchdog_too:
        wd.wait(30)
        reaped, stopped = settle_orphans()
        later.append(describe_receipt(None))
        later.append(f"  orphans    after the review: {reaped} process(es) came back to "
                     f"this controller and were reaped; {stopped} had to be stopped")
        v = rc.verify(binaries[1], wd.audit_log, staging=staging)
        v.pinned = None
        v.reconcile = found["reconcile"]
        return v, None, None
    out(f"  decision   review: no retry, no cleanup, no close; the stage is kept and a "
        f"person gets the packet {found.get('packet')}")
    # Then the person, not the controller: the demo must not leave what it
    # started running, so it closes the action (a stop) and keeps the stage.
    code, stdout, stderr = run_tool([binaries[0], "close", "--state-dir",
                                     os.path.join(staging, REA_STATE), "--wait", "60s"],
                                    timeout=120)
    try:
        close = json.loads(stdout)
    except ValueError:
        raise DemoError(f"the person's close failed (exit {code}): {stderr.strip()}")
    head = close.get("head")
    found["close_exit"] = code
    out(f"  person     after the review, closed the action: exit {code}, "
        f"{close.get('outcome')} ({close.get('stop_reason')}); the stage is kept")
    code, _ = wd.wait(60)
    later.append(f"  watchdog   exited {code} (waited by its parent)")
    rec = rc.read_receipt(wd.audit_log, head) if head else None
    later.append(describe_receipt(rec))
    v = rc.verify(binaries[1], wd.audit_log, expect_head=head, staging=staging)
    v.pinned = head
    v.reconcile = found["reconcile"]
    return v, rec, code


def sacrificial(args):
    """The controller that gets SIGKILLed: starts the watchdog, tells the
    demo where it is, runs the phases, and never gets to close."""
    binaries = (args.watchdog, args.audit, args.stage)
    work = args.work_dir
    staging = os.path.join(work, "staging")
    wd = start_watchdog(args, binaries, work, staging)
    print(json.dumps(wd.ready), flush=True)
    run_phases(wd, Plan(args, binaries[0]), "controller-kill")
    return 1  # not reached: the demo kills this process first


# ----- main -----------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario_pos", nargs="?", metavar="SCENARIO", choices=sorted(EXPECTED))
    p.add_argument("--scenario", choices=sorted(EXPECTED))
    p.add_argument("--work-dir", help="where to stage and log (default: a new directory "
                                      "in $TMPDIR)")
    p.add_argument("--watchdog", help="rea-watchdog binary (default: target/release)")
    p.add_argument("--audit", help="rea-audit binary (default: target/release)")
    p.add_argument("--stage", help="rea-stage binary (default: target/release)")
    p.add_argument("--build", action="store_true", help="run cargo build --release first")
    p.add_argument("--wrap", help="run each phase and launcher through this wrapper, e.g. "
                                  "'bwrap --dev-bind / / --die-with-parent --'")
    p.add_argument("--report", help="write a JSON summary here (for tests)")
    p.add_argument("--oracle", help=argparse.SUPPRESS)  # tests: fixtures hold this FIFO
    p.add_argument("--role", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "sacrificial":
        return sacrificial(args)
    if args.role == "fresh-controller":
        return fresh_controller(args)
    scenario = args.scenario or args.scenario_pos or "success"
    expected = EXPECTED[scenario]
    report = {"scenario": scenario, "expected": expected, "ok": False}
    try:
        binaries = find_binaries(args)
        work = args.work_dir or tempfile.mkdtemp(prefix="rea-demo.")
        os.makedirs(work, exist_ok=True)
        staging = os.path.join(work, "staging")
        report.update(work_dir=work, staging=staging)
        out(f"rea demo: {scenario} (expected: {expected}"
            + (", or running with a cgroup)" if scenario == "response-and-watchdog-lost" else ")"))
        later = []
        if scenario == "upload-failed":
            v, rec, code = scenario_upload_failed(args, binaries, work, report, later)
        else:
            local, binaries = binaries, stage(work, binaries)
            out(f"  staging    {staging} (a fake runtime in it; rea's binaries in "
                f"{REA_BIN}, its state directory and log in .rea/ too)")
            if scenario == "controller-kill":
                v, rec, code = scenario_controller_kill(args, binaries, work, staging, report,
                                                        later)
            elif scenario == "watchdog-loss":
                v, rec, code = scenario_watchdog_loss(args, binaries, work, staging, report,
                                                      later)
            elif scenario.startswith("response-"):
                v, rec, code = scenario_response_lost(
                    args, binaries, work, staging, report, later,
                    watchdog_too=scenario == "response-and-watchdog-lost")
            else:
                v, rec, code = scenario_normal(args, binaries, work, staging, scenario,
                                               report, later)
    except (DemoError, rc.ReaError, OSError) as e:
        print(f"rehearse: {e}", file=sys.stderr)
        report["error"] = str(e)
        _write_report(args, report)
        return 2
    except KeyboardInterrupt:
        # The watchdog is in its own session: Ctrl-C did not reach it. It
        # sees this controller exit (root_lost), stops everything and seals.
        print("rehearse: interrupted; the watchdog stops the action when this controller "
              "exits (root_lost), and the staging directory is kept", file=sys.stderr)
        return 130
    recs = read_log(report["audit_log"])
    contained = any(r.get("kind") == "containment" and (r.get("data") or {}).get("mode") == "cgroup"
                    for r in recs)
    if scenario == "response-and-watchdog-lost" and contained:
        # With a cgroup the escapee is a live member of the action's group:
        # the action still runs, and rea-watchdog recover is what ends it.
        expected = report["expected"] = "running"
    for line in describe_jobs(recs):
        out(line)
    stop = describe_stop(recs)
    if stop:
        out(stop)
    for line in later:
        out(line)
    if scenario == "upload-failed":
        # rea-stage removed the stage itself, or refused and removed nothing.
        reached = v.get("result")
        out(f"  verify     {reached} (rea-audit verify DISCARD_LOG: exit {v.exit_code}; "
            f"{v.get('records')} records, head {short(v.get('head'))})")
        deleted = code == 0 and not os.path.lexists(staging)
        out(f"  staging    {'deleted by rea-stage discard' if deleted else 'kept: ' + staging}")
        ok = reached == expected and deleted
    else:
        out(describe_verdict(v))
        # Both, never one alone: the watchdog's waited exit 0 and delete_allowed.
        receipt = rc.Receipt(None, None, None, None, None, exit_code=code)
        deleted = rc.may_delete(receipt, v) and not scenario.startswith("response-")
        if deleted:
            head = getattr(v, "pinned", None)
            deleted = remove_stage(binaries, local, work, staging, report, head)
        if deleted:
            out("  staging    deleted by rea-stage remove (watchdog exit 0, delete_allowed, "
                "and remove's own checks through one descriptor; verify REMOVE_LOG: removed)")
        elif scenario.startswith("response-"):
            out(f"  staging    kept: the controller's decision is review: {staging}")
        elif rc.may_delete(receipt, v):
            out(f"  staging    kept: rea-stage remove refused or stopped: {staging}")
        else:
            why = "the verdict" if not v.delete_allowed else f"the watchdog's exit ({code})"
            out(f"  staging    kept ({why} does not allow deletion): {staging}")
        by_reconcile = scenario == "response-and-watchdog-lost"
        reached = getattr(v, "reconcile", None) if by_reconcile else v["verdict"]
        if scenario == "response-lost":
            reached = report["reconcile"].get("decision")
        ok = reached == expected and deleted == (expected == "delete_allowed")
    if scenario == "controller-kill":
        # The evidence must show the watchdog reacted and proved the stop.
        ok = ok and rec is not None and rec["stop_reason"] == "root_lost" and rec["quiescent"]
    if scenario == "watchdog-loss":
        ok = ok and "no_receipt" in v.codes
    if scenario == "response-lost":
        ok = (ok and report["reconcile"]["reconcile"] == "running"
              and report["reconcile"].get("packet") is not None)
    if scenario == "response-and-watchdog-lost":
        ok = ok and v["verdict"] == "retain"
    # show has no --staging: after a deletion it can only say the stage
    # was not checked, which a reader must not take for a second verdict.
    gone = "; the stage is gone, so show says staging_not_checked" if deleted else ""
    out(f"  audit log  {report['audit_log']}  (rea-audit show LOG{gone})")
    out(f"{'OK' if ok else 'FAILED'}: {scenario} reached {reached}"
        f"{'' if ok else f', expected {expected}'}")
    report.update(ok=ok, verdict=v.get("verdict", v.get("result")), status=v.get("status"),
                  exit_code=v.exit_code, codes=v.codes, stop_reason=v.get("stop_reason"),
                  staging_deleted=deleted, receipt=rec, watchdog_exit=code)
    _write_report(args, report)
    return 0 if ok else 1


def remove_stage(binaries, local, work, staging, report, head):
    """Deletes the stage the way a controller must (docs/stage.md, "One
    verified removal"): `rea-stage remove`, which opens it once, re-runs
    verify's checks through that descriptor and removes exactly what it
    checked, logging each removal; then `rea-audit verify REMOVE_LOG` must
    say removed (the controller's own rea-audit, `local`: the stage's went
with it). Never `rm -rf`. True when the stage is gone that way."""
    if not head:
        return False
    # The log is in the stage and goes with it: fetch it first (the packet
    # and `show` read the copy), and remove against the copy.
    fetched = os.path.join(work, "audit.jsonl")
    shutil.copy2(report["audit_log"], fetched)
    report["audit_log"] = fetched
    log = os.path.join(work, "remove.jsonl")
    code, _, stderr = run_tool([binaries[2], "remove", staging, "--audit-log",
                                fetched, "--expect-head", head, "--log", log])
    r = subprocess.run([local[1], "verify", log, "--json"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    try:
        result = json.loads(r.stdout).get("result")
    except ValueError:
        result = None
    report.update(remove_exit=code, remove_log=log, remove_result=result)
    if code != 0 and stderr.strip():
        out(f"  remove     rea-stage remove: exit {code}: {stderr.strip()}")
    return code == 0 and result == "removed" and not os.path.lexists(staging)


def _write_report(args, report):
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
