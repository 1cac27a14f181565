#!/usr/bin/env python3
"""One benchmark case, run as the init (pid 1) of its own PID namespace.

    unshare --pid --fork --mount-proc --kill-child -- python3 case.py SPEC.json

bench.py starts every case this way: whatever a case leaves alive dies with
its namespace when this process exits, so nothing leaks into the next case,
and nothing outside the namespace can be seen or signalled from here.

Signals go only to processes this driver started itself (its own unreaped
children), through pidfds (`os.pidfd_open` + `signal.pidfd_send_signal`).
Members of a tree are *found* by a marker in their environment (to count
survivors), never signalled by it.

Prints one JSON object (the case's result) on stdout.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import rea_client  # noqa: E402  (tools/rea_client.py: the protocol's one Python client)

HOPPER = os.path.join(ROOT, "fixtures", "hopper.py")
STORM = os.path.join(ROOT, "fixtures", "storm.py")
TREE = os.path.join(HERE, "benchtree.py")
CGSUP = os.path.join(HERE, "cgsup.py")
PY = sys.executable
ENV_BIN = "/usr/bin/env"
MARK_VAR = "REA_BENCH_MARK"
GRACE_S = 0.5
KILL_BOUND_S = 3.0

# The controller: a light shell that starts the supervisor, reports its pid
# on stdout (a pipe to this driver), closes it and waits. A dash process dies
# of SIGKILL in microseconds, so the reaction figures measure the supervisor,
# not the teardown of a heavy controller.
CONTROLLER = '"$@" >/dev/null & echo $!; exec >&-; wait; exec sleep 3600'


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def log(*a):
    print("case:", *a, file=sys.stderr, flush=True)


# ----- processes this driver started -----------------------------------------


class Child:
    """A child of this driver, bound to a pidfd before it can be reaped."""

    def __init__(self, popen):
        self.popen = popen
        self.pid = popen.pid
        self.fd = os.pidfd_open(popen.pid)

    def signal(self, sig):
        signal.pidfd_send_signal(self.fd, sig)

    def exited(self, timeout_s=0.0):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        return bool(p.poll(int(timeout_s * 1000)))

    def wait(self, timeout_s):
        if self.exited(timeout_s):
            return self.popen.wait()
        return None


class Observed:
    """A grandchild we only watch (never signal): pidfd_open, then the
    parent read back from /proc must be the child that reported it."""

    def __init__(self, pid, parent_pid):
        self.pid = pid
        self.fd = os.pidfd_open(pid)
        if stat_of(pid)["ppid"] != parent_pid:
            raise RuntimeError(f"pid {pid} is not the child of {parent_pid}")

    def exited(self, timeout_s=0.0):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        return bool(p.poll(int(timeout_s * 1000)))


def stat_of(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    close = data.rindex(b")")
    rest = data[close + 2 :].split()
    return {
        "comm": data[data.index(b"(") + 1 : close].decode(errors="replace"),
        "state": rest[0].decode(),
        "ppid": int(rest[1]),
        "start_time": int(rest[19]),
    }


def status_of(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def schedstat(pid):
    """(ns on CPU, ns waiting on a run queue) of one process so far."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def sched_delta(a, b):
    if a is None or b is None:
        return None
    return {"cpu_ms": (b[0] - a[0]) / 1e6, "runq_wait_ms": (b[1] - a[1]) / 1e6}


def kib(v):
    return int(v.split()[0]) if v else None


def scan_marked(marker, limit_s=None, info=None):
    """Live (non-zombie) processes whose environment holds the marker.
    With limit_s, stops after that long and sets info["complete"] = False
    (reading the environ of a process that is forking waits for its mm)."""
    needle = f"{MARK_VAR}={marker}".encode()
    found = []
    until = None if limit_s is None else time.monotonic() + limit_s
    if info is not None:
        info["complete"] = True
    for name in os.listdir("/proc"):
        if until is not None and time.monotonic() > until:
            if info is not None:
                info["complete"] = False
            break
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            if needle not in env:
                continue
            st = stat_of(int(name))
        except OSError:
            continue
        if st["state"] in ("Z", "X"):
            continue
        found.append(st["comm"])
    return found


def roles(comms):
    out = {}
    for c in comms:
        r = {
            "sleep": "leaf",
            "python3": "hopper",
            "bt-escapee": "escapee",
            "bt-daemon": "daemon",
            "bt-ignorer": "ignorer",
            "bt-probe": "probe",
            "bt-root": "root",
        }.get(c, c)
        out[r] = out.get(r, 0) + 1
    return out


class Oracle:
    """The read end of a FIFO every member of the tree holds for writing."""

    def __init__(self, path):
        os.mkfifo(path, 0o600)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.buf = b""
        self.lines = []
        self.eof = False

    def _read(self, timeout_ms):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        if not p.poll(timeout_ms):
            return
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self.eof = True
                return
            self.buf += chunk
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    self.lines.append(json.loads(line))
                except ValueError:
                    pass

    def wait_ready(self, limit_s):
        until = time.monotonic() + limit_s
        while time.monotonic() < until:
            for v in self.lines:
                if v.get("ready"):
                    return v
            if self.eof:
                return None
            self._read(50)
        return None

    def wait_eof(self, slice_ms, stop):
        """Waits for EOF; calls stop() between slices (True: give up).
        Returns the CLOCK_MONOTONIC ns at which EOF was seen, or None."""
        while not self.eof:
            self._read(slice_ms)
            if self.eof:
                return mono_ns()
            if stop():
                return None
        return mono_ns()

    def probe(self):
        for v in self.lines:
            if "probe_term" in v:
                return v["probe_term"]
        return None


def spawn(argv, env=None, stdout=subprocess.DEVNULL, stderr=None, pass_fds=(), preexec_fn=None):
    return Child(
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=env,
            pass_fds=pass_fds,
            preexec_fn=preexec_fn,
        )
    )


# ----- supervisors -------------------------------------------------------------


def supervisor_argv(spec, job, deadline_s):
    sup = spec["sup"]
    b = spec["bins"]
    if sup == "none":
        return list(job)
    if sup == "timeout":
        return ["timeout", "-k", str(GRACE_S), str(deadline_s or 600), *job]
    if sup == "tini":
        return [b["tini"], "-s", "-g", "--", *job]
    if sup == "dumb-init":
        return [b["dumb-init"], *job]
    if sup == "catatonit":
        return [b["catatonit"], "--", *job]
    if sup == "bwrap":
        return [b["bwrap"], "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--", *job]
    if sup in ("cgroup", "askterm"):
        a = [PY, CGSUP, "--cgroot", spec["cgroot"], "--name", spec["cgname"]]
        if sup == "askterm":
            a += ["--ask-then-term", str(GRACE_S)]
        if deadline_s:
            a += ["--deadline", str(deadline_s), "--report", os.path.join(spec["scratch"], "cgsup.json")]
        return [*a, "--", *job]
    if sup in ("rea", "rea-shm", "rea-none"):
        a = [
            *spec.get("wrap", []),
            b["rea-watchdog"],
            "exec",
            "--audit-log",
            spec["audit_log"],
            "--term-grace",
            f"{spec.get('rea_grace_ms', int(GRACE_S * 1000))}ms",
            "--kill-bound",
            f"{spec.get('rea_kill_ms', int(KILL_BOUND_S * 1000))}ms",
            "--contain",
            spec.get("contain") or ("none" if sup == "rea-none" else "cgroup"),
        ]
        if deadline_s:
            a += ["--deadline", f"{int(deadline_s * 1000)}ms"]
        return [*a, "--", *job]
    raise SystemExit(f"unknown supervisor {sup}")


def deadline_instant(spec, nominal):
    try:
        if spec["sup"] in ("cgroup", "askterm"):
            with open(os.path.join(spec["scratch"], "cgsup.json")) as f:
                return json.load(f)["deadline_ns"]
        if spec["sup"].startswith("rea"):
            # job_spawned is recorded after the spawn, so spawned + D can be
            # later than the real deadline; the trigger record cannot be
            # earlier than it. Take the smaller.
            spawned = trig = None
            with open(spec["audit_log"], "rb") as f:
                for line in f:
                    r = json.loads(line)
                    if r["kind"] == "job_spawned" and spawned is None:
                        spawned = r["mono_ns"] + r["data"]["deadline_ms"] * 1_000_000
                    if r["kind"] == "stop_triggered" and trig is None:
                        trig = r["mono_ns"]
            return min(x for x in (spawned, trig, nominal + 10**12) if x is not None)
    except (OSError, ValueError, KeyError):
        pass
    return nominal


def rea_log_summary(path, t0):
    """What the audit log says about the stop, relative to the trigger t0."""
    out = {}
    try:
        with open(path, "rb") as f:
            recs = [json.loads(l) for l in f.read().splitlines() if l.strip()]
    except (OSError, ValueError) as e:
        return {"error": str(e)}
    for r in recs:
        k = r["kind"]
        if k == "stop_triggered" and r["data"]["first"] and "trigger_ns" not in out:
            out["trigger_ns"] = r["mono_ns"] - t0
            out["reason"] = r["data"]["reason"]
        elif k == "signal_sweep" and "first_sweep_ns" not in out:
            out["first_sweep_ns"] = r["mono_ns"] - t0
            out["first_sweep_targets"] = len(r["data"]["targets"])
        if k == "signal_sweep" and r["data"]["stage"] == "kill" and r["data"]["part"] == 0:
            out["kill_sweeps"] = out.get("kill_sweeps", 0) + 1
            out.setdefault("first_kill_ns", r["mono_ns"] - t0)
        elif k == "stop_completed":
            out["stop_completed"] = r["data"]
            out["stop_completed_ns"] = r["mono_ns"] - t0
        elif k == "receipt":
            d = r["data"]
            out["receipt"] = {
                "quiescent": d["quiescent"],
                "no_live": d["no_live_or_waitable_descendants"],
                "uncertain": d["uncertain_mappings"],
                "temp_root_removed": d["temp_root_removed"],
                "signals": d["counts"]["signals"],
                "reaped": d["counts"]["reaped"],
            }
    out["sweeps"] = sum(1 for r in recs if r["kind"] == "signal_sweep" and r["data"]["part"] == 0)
    out.setdefault("kill_sweeps", 0)
    out["records"] = len(recs)
    return out


# ----- the cleanup case (sections 1, 2) ---------------------------------------


def case_tree(spec):
    scratch = spec["scratch"]
    sup, trigger, n = spec["sup"], spec["trigger"], spec["n"]
    marker = spec["marker"]
    res = {"sup": sup, "trigger": trigger, "n": n, "ignorer": spec["ignorer"]}
    oracle = Oracle(os.path.join(scratch, "oracle"))
    sibling = spawn([PY, HOPPER])
    job = [ENV_BIN, f"{MARK_VAR}={marker}", PY, TREE, "--oracle", oracle.path, "--leaves", str(n)]
    if spec["ignorer"]:
        job.append("--termignore")
    if spec.get("probe"):
        job.append("--probe")
    job += ["--then", "exit" if trigger == "exit" else "wait"]
    deadline_s = spec.get("deadline_s") if trigger == "deadline" else None
    argv = supervisor_argv(spec, job, deadline_s)
    errlog = open(os.path.join(scratch, "supervisor.stderr"), "wb")
    t_spawn = mono_ns()
    controller = None
    if trigger == "ctlkill":
        r, w = os.pipe()
        controller = spawn(["/bin/sh", "-c", CONTROLLER, "sh", *argv], stdout=w, stderr=errlog)
        os.close(w)
        # The controller's child is the supervisor (for none: the tree root).
        line = b""
        while not line.endswith(b"\n"):
            chunk = os.read(r, 64)
            if not chunk:
                break
            line += chunk
        os.close(r)
        try:
            supproc = Observed(int(line), controller.pid)
        except (ValueError, OSError, RuntimeError) as e:
            res["error"] = f"controller did not report its child: {e}"
            return res
    else:
        supproc = spawn(argv, stderr=errlog)
    ready = oracle.wait_ready(120)
    t_ready = mono_ns()
    if not ready:
        res["error"] = "tree not ready (supervisor refused or crashed?)"
        res["stderr"] = open(os.path.join(scratch, "supervisor.stderr"), "rb").read()[-400:].decode(errors="replace")
        return res
    res["build_s"] = (t_ready - t_spawn) / 1e9
    res["expected"] = ready["count"]
    before = scan_marked(marker)
    res["members_seen"] = len(before)
    attached = None
    if spec.get("attach"):
        # A profiler attached to the supervisor (strace, perf) before the trigger.
        argv_a = [a.replace("{pid}", str(supproc.pid)).replace("{scratch}", scratch) for a in spec["attach"]]
        attached = spawn(argv_a, stderr=open(os.path.join(scratch, "attach.stderr"), "wb"))
        time.sleep(spec.get("attach_wait", 1.0))
    sched0 = schedstat(supproc.pid) if sup.startswith("rea") else None
    if trigger == "deadline":
        # The instant the supervisor's own timer falls: nominal spawn + D for
        # timeout (its start-up, about 1 ms, is counted against it); cgsup
        # reports its instant; rea's is job_spawned.mono_ns + deadline_ms.
        t0 = t_spawn + int(deadline_s * 1e9)
        if t_ready > t0:
            res["late"] = True  # the tree was not complete when the deadline fell
    elif trigger == "exit":
        t0 = ready["t_exit"]
    else:
        # The trigger instant: CLOCK_MONOTONIC taken right before the signal.
        if trigger == "cancel":
            t0 = mono_ns()
            supproc.signal(signal.SIGTERM)
        elif trigger == "ctlkill":
            t0 = mono_ns()
            controller.signal(signal.SIGKILL)
        else:
            raise SystemExit(f"unknown trigger {trigger}")
    # Wait for the last member to go (oracle EOF), or until it is clear
    # that nobody will stop the rest (see bench.py: "observation window").
    state = {"sup_gone_at": None, "checked": False, "why": None}
    no_sup = sup == "none"

    def give_up():
        now = mono_ns()
        if now < t0:
            return False
        if no_sup and now - t0 > 0.5e9:
            state["why"] = "no supervisor"
            return True
        if not no_sup and state["sup_gone_at"] is None and supproc.exited():
            state["sup_gone_at"] = now
        if state["sup_gone_at"] is not None and now - state["sup_gone_at"] > 0.3e9:
            state["why"] = "supervisor exited, members left"
            return True
        if not state["checked"] and now - t0 > (GRACE_S + 0.7) * 1e9:
            state["checked"] = True
            if len(scan_marked(marker)) >= len(before):
                state["why"] = "no reaction"
                return True
        if now - t0 > (GRACE_S + KILL_BOUND_S + 2.5) * 1e9:
            state["why"] = "observation cap"
            return True
        return False

    t_eof = oracle.wait_eof(20, give_up)
    if sched0 is not None:
        res["rea_sched"] = sched_delta(sched0, schedstat(supproc.pid))
    if trigger == "deadline":
        t0 = deadline_instant(spec, t0)
    res["t0_from_spawn_s"] = (t0 - t_spawn) / 1e9
    res["quiesce_ms"] = None if t_eof is None else (t_eof - t0) / 1e6
    res["gave_up"] = state["why"]
    t_scan = mono_ns()
    left = scan_marked(marker)
    res["survivors"] = len(left)
    res["survivor_roles"] = roles(left)
    res["survivor_scan_at_ms"] = (t_scan - t0) / 1e6
    res["sibling_alive"] = not sibling.exited()
    probe = oracle.probe()
    if probe is not None:
        res["probe_term_ms"] = (probe - t0) / 1e6
    if sup != "none":
        if isinstance(supproc, Child):
            rc = supproc.wait(6 if t_eof is not None else 0.2)
            res["sup_rc"] = rc
        else:
            supproc.exited(6 if t_eof is not None else 0.2)
    if sup.startswith("rea"):
        res["rea"] = rea_log_summary(spec["audit_log"], t0)
    if attached is not None:
        res["attach_rc"] = attached.wait(30)
    return res


# ----- fork storm (section 3) ---------------------------------------------------


def case_storm(spec):
    scratch = spec["scratch"]
    marker = spec["marker"]
    res = {"sup": spec["sup"], "max": spec["max"]}
    oracle = Oracle(os.path.join(scratch, "oracle"))
    sibling = spawn([PY, HOPPER])
    job = [ENV_BIN, f"{MARK_VAR}={marker}", PY, STORM, "--oracle", oracle.path, "--max", str(spec["max"])]
    argv = supervisor_argv(spec, job, None)
    errlog = open(os.path.join(scratch, "supervisor.stderr"), "wb")
    t_spawn = mono_ns()
    supproc = spawn(argv, stderr=errlog)
    ready = oracle.wait_ready(300)
    if not ready:
        res["error"] = "storm not ready within 300 s"
        return res
    res["build_s"] = (mono_ns() - t_spawn) / 1e9
    # No /proc scan here: reading the environ of 2000 forking processes takes
    # tens of seconds (each read waits for that process's mm). The storm's
    # own count: "count" live when it said ready, "born" forked so far.
    res["live_at_stop"] = ready.get("count")
    res["born_at_stop"] = ready.get("born")
    sched0 = schedstat(supproc.pid)
    t0 = mono_ns()
    supproc.signal(signal.SIGTERM)
    cap = t0 + 10e9
    t_eof = oracle.wait_eof(50, lambda: mono_ns() > cap)
    res["sup_sched"] = sched_delta(sched0, schedstat(supproc.pid))
    res["quiesce_ms"] = None if t_eof is None else (t_eof - t0) / 1e6
    info = {}
    left = scan_marked(marker, limit_s=5, info=info)
    res["survivors"] = len(left)
    res["survivor_scan_complete"] = info["complete"]
    res["sibling_alive"] = not sibling.exited()
    res["sup_rc"] = supproc.wait(5)
    res["case_phases_s"] = {"ready": res.get("build_s"), "end": (mono_ns() - t_spawn) / 1e9}
    if spec["sup"].startswith("rea"):
        res["rea"] = rea_log_summary(spec["audit_log"], t0)
    return res


# ----- a client of a running watchdog (sections 4, 6) --------------------------


class Client:
    """The request/reply protocol through tools/rea_client.py (the one Python
    copy of it), the caller being this process (the watchdog's root
    controller). Replies come back as the protocol's dicts."""

    def __init__(self, state_dir):
        self.dir = state_dir
        self.rc = rea_client.Client(state_dir)

    def run(self, argv):
        """One spawn round trip until its last reply (`exited`, `stopped` or
        `refused`)."""
        try:
            return self.rc.submit(argv, deadline=60).reply
        except rea_client.Refused as e:
            return {"type": "refused", "reason": e.reason, "detail": e.detail}

    def spawn(self, argv, deadline_s):
        """An accepted job (`rea_client.Job`), or the refusal as a dict."""
        try:
            return self.rc.spawn(argv, deadline=deadline_s), None
        except rea_client.Refused as e:
            return None, {"type": "refused", "reason": e.reason, "detail": e.detail}

    def stop(self, wait_s):
        return self.rc.stop(wait=wait_s)

    def close(self, wait_s):
        return self.rc.close(wait=wait_s)


def job_end(job, wait_s):
    """The stopped job's last reply, if it comes within wait_s."""
    try:
        job.wait(wait_s)
    except rea_client.ReaError:
        pass


def start_watchdog(spec, name, log_dir, extra=(), preexec_fn=None):
    state = os.path.join(spec["scratch"], f"state-{name}")
    log = os.path.join(log_dir, f"{name}.jsonl")
    wd = spawn(
        [spec["bins"]["rea-watchdog"], "run", "--state-dir", state, "--audit-log", log, *extra],
        stdout=subprocess.PIPE,
        preexec_fn=preexec_fn,
    )
    ready = json.loads(wd.popen.stdout.readline())
    return wd, ready, Client(state)


def close_watchdog(wd, client):
    reply = client.close(30)
    return reply, wd.wait(30)


def spawn_wait(path, argv, env=None):
    """posix_spawn (vfork+exec) + waitpid, stdout/stderr to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    t = mono_ns()
    pid = os.posix_spawn(
        path,
        argv,
        env if env is not None else os.environ,
        file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)],
    )
    _, st = os.waitpid(pid, 0)
    dt = mono_ns() - t
    os.close(devnull)
    return dt, os.waitstatus_to_exitcode(st)


def fork_wait(path, argv):
    """fork + execv + waitpid (the plain way)."""
    t = mono_ns()
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(path, argv)
        finally:
            os._exit(127)
    _, st = os.waitpid(pid, 0)
    return mono_ns() - t, os.waitstatus_to_exitcode(st)


def case_spawn(spec):
    b = spec["bins"]
    k = spec["k"]
    rounds = spec["rounds"]
    true = "/bin/true"
    res = {"k": k, "rounds": rounds}
    lat = {m: [] for m in ("fork", "posix_spawn", "submit_cli", "inproc", "inproc_tmpfs")}
    bad = {m: 0 for m in lat}
    wd, ready, client = start_watchdog(spec, "spawn-disk", spec["scratch"])
    wd2, ready2, client2 = start_watchdog(spec, "spawn-tmpfs", spec["tmpfs"])
    env = dict(os.environ, REA_STATE_DIR=client.dir)
    for _ in range(5):  # warm-up
        client.run([true])
        client2.run([true])
        spawn_wait(b["rea-watchdog"], ["rea-watchdog", "submit", "--", true], env)
    for _ in range(rounds):
        for _ in range(k):
            dt, rc = fork_wait(true, ["true"])
            lat["fork"].append(dt)
            bad["fork"] += rc != 0
        for _ in range(k):
            dt, rc = spawn_wait(true, ["true"])
            lat["posix_spawn"].append(dt)
            bad["posix_spawn"] += rc != 0
        for _ in range(k):
            dt, rc = spawn_wait(b["rea-watchdog"], ["rea-watchdog", "submit", "--", true], env)
            lat["submit_cli"].append(dt)
            bad["submit_cli"] += rc != 0
        for c, m in ((client, "inproc"), (client2, "inproc_tmpfs")):
            for _ in range(k):
                t = mono_ns()
                r = c.run([true])
                lat[m].append(mono_ns() - t)
                bad[m] += not (r.get("type") == "exited" and r.get("status") == {"code": 0})
    res["closed_disk"], res["rc_disk"] = close_watchdog(wd, client)
    res["closed_tmpfs"], res["rc_tmpfs"] = close_watchdog(wd2, client2)
    # Whole-process: rea-watchdog exec -- true against timeout 10 true.
    ex = {m: [] for m in ("timeout", "exec", "exec_tmpfs", "rea_timeout")}
    exbad = {m: 0 for m in ex}
    disk_env = dict(os.environ, TMPDIR=spec["scratch"])
    shm_env = dict(os.environ, TMPDIR=spec["tmpfs"])
    timeout_bin = spec["bins"]["timeout"]
    for _ in range(3):
        spawn_wait(b["rea-watchdog"], ["rea-watchdog", "exec", "--", true], disk_env)
        spawn_wait(timeout_bin, ["timeout", "10", true])
    for _ in range(rounds):
        for _ in range(spec["k_exec"]):
            dt, rc = spawn_wait(timeout_bin, ["timeout", "10", true])
            ex["timeout"].append(dt)
            exbad["timeout"] += rc != 0
            dt, rc = spawn_wait(b["rea-watchdog"], ["rea-watchdog", "exec", "--", true], disk_env)
            ex["exec"].append(dt)
            exbad["exec"] += rc != 0
            dt, rc = spawn_wait(b["rea-watchdog"], ["rea-watchdog", "exec", "--", true], shm_env)
            ex["exec_tmpfs"].append(dt)
            exbad["exec_tmpfs"] += rc != 0
            # rea's timeout personality: the same binary, argv[0] "timeout".
            dt, rc = spawn_wait(b["rea-watchdog"], ["timeout", "10", true], disk_env)
            ex["rea_timeout"].append(dt)
            exbad["rea_timeout"] += rc != 0
    res["lat_ns"] = lat
    res["failures"] = bad
    res["exec_ns"] = ex
    res["exec_failures"] = exbad
    return res


# ----- footprint (section 6) ----------------------------------------------------


def case_footprint(spec):
    res = {}
    n = spec["n"]
    marker = spec["marker"]
    wd, ready, client = start_watchdog(spec, "rss", spec["scratch"])
    oracle = Oracle(os.path.join(spec["scratch"], "oracle"))
    job = [ENV_BIN, f"{MARK_VAR}={marker}", PY, TREE, "--oracle", oracle.path, "--leaves", str(n)]
    running, refused = client.spawn(job, 600)
    if refused is not None:
        res["error"] = f"spawn refused: {refused}"
        return res
    if not oracle.wait_ready(120):
        res["error"] = "tree not ready"
        return res
    s = status_of(wd.pid)
    res["members"] = len(scan_marked(marker))
    res["before"] = {"rss_kib": kib(s.get("VmRSS")), "hwm_kib": kib(s.get("VmHWM"))}
    t0 = mono_ns()
    done = client.stop(60)
    t1 = mono_ns()
    res["stop_reply"] = done
    res["stop_ms"] = (t1 - t0) / 1e6
    s = status_of(wd.pid)  # after the stop, before close: the stop's peak
    res["after_stop"] = {"rss_kib": kib(s.get("VmRSS")), "hwm_kib": kib(s.get("VmHWM"))}
    res["fds_after_stop"] = len(os.listdir(f"/proc/{wd.pid}/fd"))
    job_end(running, 5)
    res["closed"], res["rc"] = close_watchdog(wd, client)
    res["survivors"] = len(scan_marked(marker))
    return res


def case_idle(spec):
    res = {}
    secs = spec["seconds"]

    def ctx(pid):
        s = status_of(pid)
        return int(s["voluntary_ctxt_switches"]), int(s["nonvoluntary_ctxt_switches"])

    for variant in ("no_job", "one_job"):
        wd, ready, client = start_watchdog(spec, f"idle-{variant}", spec["scratch"])
        running = None
        if variant == "one_job":
            running, refused = client.spawn(["/bin/sleep", "3600"], 600)
            if refused is not None:
                raise RuntimeError(f"spawn refused: {refused}")
        time.sleep(0.3)
        v0, n0 = ctx(wd.pid)
        time.sleep(secs)
        v1, n1 = ctx(wd.pid)
        res[variant] = {"voluntary": v1 - v0, "nonvoluntary": n1 - n0, "seconds": secs}
        if running is not None:
            client.stop(30)
            job_end(running, 5)
        close_watchdog(wd, client)
    return res


def case_wakefloor(spec):
    """The floor under any 'controller died → watchdog noticed' figure on this
    machine: SIGKILL to a sleeping process (its exit) until *another* process
    polling its pidfd wakes up. Ordinary priorities for both sides."""
    out = []
    for _ in range(spec.get("reps", 20)):
        r, w = os.pipe()
        victim = spawn(["/bin/sleep", "100"])
        pid = os.fork()
        if pid == 0:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            fd = os.pidfd_open(victim.pid)
            os.write(w, b"r")
            p = select.poll()
            p.register(fd, select.POLLIN)
            p.poll()
            os.write(w, str(mono_ns()).encode())
            os._exit(0)
        waiter = os.pidfd_open(pid)
        os.read(r, 1)
        time.sleep(0.05)
        t0 = mono_ns()
        victim.signal(signal.SIGKILL)
        t1 = int(os.read(r, 64))
        os.waitpid(pid, 0)
        os.close(waiter)
        victim.popen.wait()
        os.close(r)
        os.close(w)
        out.append((t1 - t0) / 1e6)
    return {"wake_ms": out}


def case_cmd(spec):
    """Runs one diagnostic program (this namespace's only other process tree)
    and returns the JSON it prints."""
    # Bystanders: unrelated processes (this driver's children, not the
    # program's), as a real host has; a /proc scan must read them all.
    for _ in range(spec.get("bystanders", 0)):
        os.posix_spawn("/bin/sleep", ["sleep", "3600"], os.environ)
    r = subprocess.run(spec["argv"], capture_output=True, text=True, timeout=spec.get("timeout", 300))
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"rc {r.returncode}: {r.stderr[-300:]}"}


# ----- hostile input (section 8) ------------------------------------------------

FIFOFLOOD = os.path.join(HERE, "fifoflood.py")
HOSTILE_DEADLINE_S = 0.2  # the short jobs' deadline
TRIP_INTERVAL_S = 0.1  # one well-behaved round trip started every 100 ms


def oracle_wait(oracle, key, limit_s):
    """The first oracle line holding `key` within limit_s, else None."""
    until = time.monotonic() + limit_s
    while True:
        for v in oracle.lines:
            if key in v:
                return v
        if oracle.eof or time.monotonic() >= until:
            return None
        oracle._read(20)


def read_log(path):
    """[(bytes incl. LF, record)] of an audit log."""
    with open(path, "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l.strip()]
    return [(len(l) + 1, json.loads(l)) for l in lines]


def refused_totals(recs):
    """Quiet refusals recorded (requests_refused bursts) and answered ones."""
    out = {"bursts": 0, "texts": 0, "bytes": 0, "reasons": {}, "answered": 0}
    for _, r in recs:
        if r["kind"] == "requests_refused":
            d = r["data"]
            out["bursts"] += 1
            out["texts"] += d["count"]
            out["bytes"] += d["bytes"]
            for k, v in d["reasons"].items():
                out["reasons"][k] = out["reasons"].get(k, 0) + v
        elif r["kind"] == "request_refused":
            out["answered"] += 1
    return out


def hostile_flood_job(client, oracle, seconds=None):
    argv = [PY, FIFOFLOOD, "--oracle", oracle.path]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    job, refused = client.spawn(argv, (seconds or 0) + 120)
    if refused is not None:
        raise RuntimeError(f"the flood job was refused: {refused}")
    st = oracle_wait(oracle, "flood_start", 30)
    if st is None:
        raise RuntimeError("the flood job never started flooding")
    return job, st["flood_start"]


def hostile_deadline(spec):
    """One action: a flood job, then after delay_s of flood a `sleep 5` job
    with a 200 ms deadline. Its deadline stops the action (flood included),
    so one action gives one lateness figure."""
    res = {"part": "deadline", "delay_s": spec["delay_s"]}
    wd, ready, client = start_watchdog(spec, "deadline", spec["scratch"])
    oracle = Oracle(os.path.join(spec["scratch"], "oracle"))
    flood, t_flood = hostile_flood_job(client, oracle)
    time.sleep(spec["delay_s"])
    t_ask = mono_ns()
    job, refused = client.spawn(["/bin/sleep", "5"], HOSTILE_DEADLINE_S)
    res["ask_to_accepted_ms"] = (mono_ns() - t_ask) / 1e6
    if refused is not None:
        res["error"] = f"the deadline job was refused: {refused}"
        return res
    try:
        res["job_end"] = job.wait(15).outcome
    except rea_client.ReaError as e:
        res["job_end"] = f"{type(e).__name__}: {e}"
    job_end(flood, 10)
    reply, res["rc"] = close_watchdog(wd, client)
    res["positive"] = reply.get("positive")
    res["stop_reason"] = reply.get("stop_reason")
    recs = read_log(ready["audit_log"])
    spawned = {r["data"]["job"]: r for _, r in recs if r["kind"] == "job_spawned"}
    sp = next((r for r in spawned.values() if r["data"]["argv"][0] == "/bin/sleep"), None)
    fl = next((r for r in spawned.values() if r["data"]["argv"][1:2] == [FIFOFLOOD]), None)
    rq = next((r for _, r in recs if r["kind"] == "request_received" and sp and r["data"].get("id") == sp["data"]["id"]), None)
    trig = next((r for _, r in recs if r["kind"] == "stop_triggered" and r["data"]["first"]), None)
    if sp is None or trig is None or rq is None:
        res["error"] = "the log has no job_spawned / request_received / stop_triggered for the deadline job"
        return res
    d_ns = sp["data"]["deadline_ms"] * 1_000_000
    res["deadline_ms"] = sp["data"]["deadline_ms"]
    res["trigger_reason"] = trig["data"]["reason"]
    res["trigger_job_is_deadline_job"] = trig["data"].get("job") == sp["data"]["job"]
    res["lateness_ms"] = (trig["mono_ns"] - (sp["mono_ns"] + d_ns)) / 1e6
    res["lateness_upper_ms"] = (trig["mono_ns"] - (rq["mono_ns"] + d_ns)) / 1e6
    res["flood_s_at_trigger"] = (trig["mono_ns"] - t_flood) / 1e9
    fx = next((r for _, r in recs if r["kind"] == "job_exited" and fl and r["data"]["job"] == fl["data"]["job"]), None)
    # The flood was still on at the trigger: the flood job ended after it,
    # stopped (not by its own exit).
    res["flood_on_at_trigger"] = fx is not None and fx["mono_ns"] > trig["mono_ns"] and fx["data"].get("stopped")
    sw = next((r for _, r in recs if r["kind"] == "signal_sweep" and r["mono_ns"] >= trig["mono_ns"]), None)
    res["first_sweep_ms"] = None if sw is None else (sw["mono_ns"] - trig["mono_ns"]) / 1e6
    sc = next((r for _, r in recs if r["kind"] == "stop_completed"), None)
    res["stop_completed_ms"] = None if sc is None else (sc["mono_ns"] - trig["mono_ns"]) / 1e6
    res["refused"] = refused_totals(recs)
    res["log_bytes"] = sum(b for b, _ in recs)
    return res


def hostile_flood(spec):
    """One action: a flood job for `seconds`; meanwhile a well-behaved client
    (this process, the root controller) runs /bin/true round trips."""
    secs = spec["seconds"]
    res = {"part": "flood", "seconds": secs}
    wd, ready, client = start_watchdog(spec, "flood", spec["scratch"])
    oracle = Oracle(os.path.join(spec["scratch"], "oracle"))
    flood, t_fs = hostile_flood_job(client, oracle, secs)
    # First the flood alone (the log growth it causes by itself), then the
    # round trips (whose own records also cut the flood's refusal bursts).
    t_q = t_fs + int(spec["quiet_s"] * 1e9)
    res["quiet_s"] = spec["quiet_s"]
    time.sleep(max(0.0, (t_q - mono_ns()) / 1e9))
    trips, fails = [], []
    nxt = time.monotonic()
    cap = t_fs + int((secs + 30) * 1e9)
    while not any("flood_end" in v for v in oracle.lines) and not oracle.eof and mono_ns() < cap:
        t0 = mono_ns()
        try:
            job = client.rc.spawn(["/bin/true"], deadline=10, name="rt")
            t1 = mono_ns()
            r = job.wait(10)
            t2 = mono_ns()
            trips.append({"t0": t0, "t_end": t2, "accepted_ms": (t1 - t0) / 1e6, "total_ms": (t2 - t0) / 1e6,
                          "outcome": r.outcome, "code": r.code, "job": r.job, "id": job.id})
        except rea_client.ReaError as e:
            fails.append({"t0": t0, "after_ms": (mono_ns() - t0) / 1e6, "error": f"{type(e).__name__}: {e}"[:200]})
        oracle._read(0)
        nxt += TRIP_INTERVAL_S
        now = time.monotonic()
        if nxt > now:
            time.sleep(nxt - now)
        else:
            nxt = now
    end = oracle_wait(oracle, "flood_end", secs + 30)
    if end is None:
        res["error"] = "the flood job never reported its end"
        return res
    t_fe = end["flood_end"]
    res["flood_bytes"] = end["bytes"]
    res["flood_writes"] = end["writes"]
    res["flood_s"] = (t_fe - t_fs) / 1e9
    job_end(flood, 10)
    time.sleep(1.5)  # the flood's last burst of quiet refusals is recorded within 1 s
    reply, res["rc"] = close_watchdog(wd, client)
    res["positive"] = reply.get("positive")
    res["outcome"] = reply.get("outcome")
    recs = read_log(ready["audit_log"])
    rt_jobs = {r["data"]["job"] for _, r in recs if r["kind"] == "job_spawned" and r["data"].get("name") == "rt"}
    rt_ids = {r["data"]["id"] for _, r in recs if r["kind"] == "job_spawned" and r["data"].get("name") == "rt"}

    def client_rec(r):
        d = r["data"]
        return d.get("id") in rt_ids or (r["kind"] in ("job_exited", "job_failed", "output_capped") and d.get("job") in rt_jobs)

    quiet = total = client_b = late_burst = 0
    for b, r in recs:
        m = r["mono_ns"]
        if t_fs <= m < t_q:
            quiet += b
        elif t_q <= m <= t_fe:
            total += b
            client_b += b if client_rec(r) else 0
        elif t_fe < m <= t_fe + 1_500_000_000 and r["kind"] == "requests_refused":
            late_burst += b  # the burst that was collecting when the flood ended
    res["log_quiet_per_min"] = quiet * 60e9 / (t_q - t_fs)
    per_min = 60e9 / (t_fe - t_q)
    res["log_total_per_min"] = total * per_min
    res["log_flood_per_min"] = (total - client_b + late_burst) * per_min
    res["log_client_per_min"] = client_b * per_min
    res["bursts_quiet"] = sum(1 for _, r in recs if r["kind"] == "requests_refused" and t_fs <= r["mono_ns"] < t_q)
    res["bursts_busy"] = sum(1 for _, r in recs if r["kind"] == "requests_refused" and t_q <= r["mono_ns"] <= t_fe + 1_500_000_000)
    res["log_bytes"] = sum(b for b, _ in recs)
    res["refused"] = refused_totals(recs)
    res["busy_s"] = (t_fe - t_q) / 1e9
    inside = [t for t in trips if t["t0"] >= t_fs and t["t_end"] <= t_fe]
    res["trips"] = len(trips)
    res["trips_in_flood"] = len(inside)
    res["trip_total_ms"] = [t["total_ms"] for t in inside]
    res["trip_accepted_ms"] = [t["accepted_ms"] for t in inside]
    # Where the wait to `accepted` went: until the watchdog had read and
    # recorded the request (FIFO space, its read budget) or after.
    seen = {r["data"].get("id"): r["mono_ns"] for _, r in recs if r["kind"] == "request_received"}
    res["trip_received_ms"] = [(seen[t["id"]] - t["t0"]) / 1e6 for t in inside if t["id"] in seen]
    res["trips_bad"] = sum(1 for t in inside if not (t["outcome"] == "exited" and t["code"] == 0))
    res["trip_failures"] = [f for f in fails if t_fs <= f["t0"] <= t_fe]
    return res


def hostile_emfile(spec):
    """The watchdog at nofile 64:64, a job with N children, stopped by its
    deadline."""
    import resource

    n, marker, dl = spec["n"], spec["marker"], spec["deadline_s"]
    lim = spec.get("nofile", 64)
    res = {"part": "emfile", "n": n, "nofile": lim, "deadline_s": dl}

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim, lim))

    wd, ready, client = start_watchdog(spec, "emfile", spec["scratch"], preexec_fn=limit)
    with open(f"/proc/{wd.pid}/limits") as f:
        res["watchdog_limit"] = next((l.split()[3:5] for l in f if l.startswith("Max open files")), None)
    oracle = Oracle(os.path.join(spec["scratch"], "oracle"))
    job = [ENV_BIN, f"{MARK_VAR}={marker}", PY, TREE, "--oracle", oracle.path, "--leaves", str(n)]
    t_spawn = mono_ns()
    running, refused = client.spawn(job, dl)
    if refused is not None:
        res["error"] = f"the tree job was refused: {refused}"
        return res
    tr = oracle.wait_ready(dl + 30)
    t_ready = mono_ns()
    if not tr:
        res["error"] = "tree not ready"
        return res
    res["expected"] = tr["count"]
    res["build_s"] = (t_ready - t_spawn) / 1e9
    res["members_seen"] = len(scan_marked(marker))
    cap = t_spawn + int((dl + GRACE_S + KILL_BOUND_S + 5) * 1e9)
    t_eof = oracle.wait_eof(20, lambda: mono_ns() > cap)
    left = scan_marked(marker)
    res["survivors"] = len(left)
    res["survivor_roles"] = roles(left)
    job_end(running, 5)
    try:
        reply, res["rc"] = close_watchdog(wd, client)
        res["positive"] = reply.get("positive")
        res["outcome"] = reply.get("outcome")
        res["stop_reason"] = reply.get("stop_reason")
    except rea_client.ReaError as e:
        res["close_error"] = f"{type(e).__name__}: {e}"[:300]
        res["rc"] = wd.wait(10)
    recs = read_log(ready["audit_log"])
    sp = next((r for _, r in recs if r["kind"] == "job_spawned"), None)
    trig = next((r for _, r in recs if r["kind"] == "stop_triggered" and r["data"]["first"]), None)
    if sp is None or trig is None:
        res["error"] = "the log has no job_spawned or stop_triggered"
        return res
    t0 = min(sp["mono_ns"] + sp["data"]["deadline_ms"] * 1_000_000, trig["mono_ns"])
    res["late"] = t_ready > t0  # the tree was not complete when the deadline fell
    res["trigger_reason"] = trig["data"]["reason"]
    res["quiesce_ms"] = None if t_eof is None else (t_eof - t0) / 1e6
    res["rea"] = rea_log_summary(ready["audit_log"], t0)
    res["uncertain_records"] = sum(1 for _, r in recs if r["kind"] == "mapping_uncertain")
    res["signal_failed_records"] = sum(1 for _, r in recs if r["kind"] == "signal_failed")
    return res


def case_hostile(spec):
    return {"deadline": hostile_deadline, "flood": hostile_flood, "emfile": hostile_emfile}[spec["part"]](spec)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if os.getpid() != 1:
        raise SystemExit("case.py must be the init of its own PID namespace (run it through bench.py)")
    kind = spec["kind"]
    observer = kind in ("tree", "storm") or (kind == "hostile" and spec.get("part") == "emfile")
    if observer:
        # The driver only observes here (trigger instant, oracle EOF, the
        # survivor scan): give it a real-time priority so a loaded host (or
        # the storm itself) cannot delay its clock readings or starve its
        # /proc scans. SCHED_RESET_ON_FORK: everything it starts (sibling,
        # supervisors, trees) runs as an ordinary SCHED_OTHER process.
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
            rt = True
        except (OSError, AttributeError):
            rt = False
    fn = {"tree": case_tree, "storm": case_storm, "spawn": case_spawn,
          "footprint": case_footprint, "idle": case_idle, "cmd": case_cmd,
          "wakefloor": case_wakefloor, "hostile": case_hostile}[kind]
    try:
        res = fn(spec)
    except Exception as e:  # report, never hang: the namespace dies with us
        import traceback

        res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    if observer:
        res["driver_rt"] = rt
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
