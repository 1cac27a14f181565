#!/usr/bin/env python3
"""Regenerates BENCHMARKS.md: rea against the tools people use today, side by
side in one run (issue 6). Stdlib only.

    python3 tools/bench/bench.py            # everything, writes BENCHMARKS.md
    python3 tools/bench/bench.py --quick    # one small pass (debugging the harness)
    python3 tools/bench/bench.py --sections 1,4 --out /tmp/b.md

What it does, in order:
  1. setup (outside any namespace): installs the peers with apt-get when one
     is missing (tini dumb-init catatonit bubblewrap; a peer that cannot be
     installed or cannot run is skipped with a note), builds the release
     binaries and the bench examples (genlog, auditrate) with cargo;
  2. re-executes itself inside a private PID namespace
     (`unshare --pid --fork --mount-proc`, as root; an unprivileged user
     namespace otherwise) and runs the sections there;
  3. runs every case that spawns or signals processes (tools/bench/case.py)
     as the init of *its own* nested PID namespace, so whatever a case leaves
     alive is killed when the case ends and nothing leaks into the next;
  4. writes BENCHMARKS.md (and the raw figures as JSON next to the scratch
     files) with medians, maxima and same-run ratios.

Safety: processes are signalled only by the case driver that started them,
through pidfds; survivors are found (never killed) by a marker in their
environment and removed by tearing the case's namespace down.

Environment: CARGO_TARGET_DIR is honoured (default ./target). Scratch files
go to $CARGO_TARGET_DIR/rea-bench/ (the real disk) and /dev/shm/rea-bench.*.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import holders  # noqa: E402  (section 9, tools/bench/holders.py)
import oneshot  # noqa: E402  (section 10, tools/bench/oneshot.py)
import stagehash  # noqa: E402  (section 11, tools/bench/stagehash.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
TARGET = os.path.abspath(TARGET)
REL = os.path.join(TARGET, "release")
WORK = os.path.join(TARGET, "rea-bench")
PY = sys.executable
PEERS_APT = ["tini", "dumb-init", "catatonit", "bubblewrap", "lsof", "psmisc"]
PEER_BINS = {"tini": "tini", "dumb-init": "dumb-init", "catatonit": "catatonit", "bwrap": "bwrap"}
SUPS = ["none", "timeout", "tini", "dumb-init", "catatonit", "bwrap", "cgroup", "askterm", "rea", "rea-none", "rea-shm"]
CONTAINING = ["bwrap", "cgroup", "rea", "rea-none"]  # the ones whose times are compared
# askterm: cgsup.py's --ask-then-term, the floor of rea's stop policy (the
# ask, then SIGTERM to each member through a pidfd; no proof, no record):
# what asking first and signalling each member costs by itself. Section 1.
REPEATED = CONTAINING + ["rea-shm", "askterm"]
# rea: `--contain cgroup` (the action's own cgroup v2 group, docs/containment.md);
# rea-none: `--contain none` (the pure user-space path); both log on disk.
REA_MODES = {"rea": "cgroup", "rea-none": "none", "rea-shm": "cgroup"}
# rea-shm: the same rea with its audit log on tmpfs, to show what the
# fdatasync before the first TERM costs; only for the signal triggers.
SHM_TRIGGERS = {"cancel", "ctlkill"}
TRIGGERS = ["cancel", "ctlkill", "exit", "deadline"]
TRIGGER_TEXT = {
    "cancel": "cancel (SIGTERM to the supervisor)",
    "ctlkill": "controller SIGKILL",
    "exit": "the job exits, leaving orphans",
    "deadline": "deadline",
}
HAS_DEADLINE = {"timeout", "cgroup", "askterm", "rea", "rea-none"}
GRACE_MS = 500


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def mono():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        with open("/proc/loadavg") as f:
            return "loadavg " + f.read().strip()


def med(xs):
    return statistics.median(xs) if xs else None


def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))
    return s[i]


# ----- setup (outside the namespace) --------------------------------------------


def setup(args):
    notes = []
    missing = [p for p, b in zip(PEERS_APT, ["tini", "dumb-init", "catatonit", "bwrap", "lsof", "fuser"]) if not shutil.which(b)]
    if missing and not args.no_install:
        log("installing peers:", " ".join(missing))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        r = subprocess.run(["apt-get", "install", "-y", *missing], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True)
            r = subprocess.run(["apt-get", "install", "-y", *missing], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            notes.append(f"apt-get install {' '.join(missing)} failed: {r.stderr.strip()[-200:]}")
    log("building (cargo build --release --bins --examples)")
    r = subprocess.run(
        ["cargo", "build", "--release", "--bins", "--example", "genlog", "--example", "auditrate", "--example", "procscan"],
        cwd=ROOT,
    )
    if r.returncode != 0:
        sys.exit("bench: cargo build failed")
    return notes


def enter_namespace(argv):
    """Re-executes this script as the init of a private PID namespace."""
    base = ["--pid", "--fork", "--mount-proc", "--kill-child"]
    for pre in ([], ["--user", "--map-root-user"]):
        probe = subprocess.run(["unshare", *pre, *base, "true"], capture_output=True)
        if probe.returncode == 0:
            env = dict(os.environ, REA_BENCH_INNER="1")
            os.execvpe("unshare", ["unshare", *pre, *base, "--", PY, *argv], env)
    sys.exit(
        "bench: cannot create a private PID namespace here (unshare --pid failed);"
        " refusing to spawn and signal process trees next to processes that are not ours"
    )


# ----- running one case ----------------------------------------------------------


class Runner:
    def __init__(self, args, env_info):
        self.args = args
        self.info = env_info
        self.token = hashlib.sha256(f"{os.getpid()}-{time.time()}".encode()).hexdigest()[:10]
        self.n = 0
        os.makedirs(WORK, exist_ok=True)
        self.scratch_root = tempfile.mkdtemp(prefix="run.", dir=WORK)
        self.shm_root = tempfile.mkdtemp(prefix="rea-bench.", dir="/dev/shm")
        self.bins = env_info["bins"]
        self.cgroot = env_info.get("cgroot")

    def case(self, spec, limit_s=240):
        self.n += 1
        d = os.path.join(self.scratch_root, f"case-{self.n:04d}")
        os.makedirs(d)
        spec = dict(spec)
        spec.setdefault("scratch", d)
        spec["tmpfs"] = os.path.join(self.shm_root, f"case-{self.n:04d}")
        os.makedirs(spec["tmpfs"])
        spec["bins"] = self.bins
        spec["marker"] = f"{self.token}-{self.n}"
        spec["cgroot"] = self.cgroot
        spec["cgname"] = f"rea-bench-{self.token}-{self.n}"
        if spec.get("audit_log") == "disk":
            spec["audit_log"] = os.path.join(d, "audit.jsonl")
        elif spec.get("audit_log") == "tmpfs":
            spec["audit_log"] = os.path.join(spec["tmpfs"], "audit.jsonl")
        else:
            spec.setdefault("audit_log", os.path.join(d, "audit.jsonl"))
        path = os.path.join(d, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        err = open(os.path.join(d, "case.stderr"), "wb")
        t_case = mono()
        p = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--", PY, os.path.join(HERE, "case.py"), path],
            stdout=subprocess.PIPE,
            stderr=err,
        )
        try:
            out, _ = p.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            # Our own child (unshare); --kill-child takes the case namespace down with it.
            import signal as _s

            fd = os.pidfd_open(p.pid)
            _s.pidfd_send_signal(fd, _s.SIGKILL)
            os.close(fd)
            out, _ = p.communicate()
            return {"error": f"case timed out after {limit_s}s", **{k: spec.get(k) for k in ("sup", "trigger", "n")}}
        finally:
            err.close()
            # cgsup removes its group; if the case was torn down first, the
            # group empties as the namespace's processes finish dying.
            g = os.path.join(self.cgroot or "/nonexistent", spec["cgname"])
            for _ in range(100):
                if not os.path.isdir(g):
                    break
                try:
                    os.rmdir(g)
                except OSError:
                    time.sleep(0.1)
        try:
            res = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            res = {"error": f"case printed no result (rc {p.returncode}); see {d}/case.stderr"}
        if not self.args.keep:
            shutil.rmtree(spec["tmpfs"], ignore_errors=True)
        res["case_s"] = round(mono() - t_case, 3)
        return res

    def cleanup(self):
        shutil.rmtree(self.shm_root, ignore_errors=True)
        if not self.args.keep:
            shutil.rmtree(self.scratch_root, ignore_errors=True)


def probe_environment(args):
    info = {"bins": {}, "skipped": {}, "notes": []}
    info["bins"]["rea-watchdog"] = os.path.join(REL, "rea-watchdog")
    info["bins"]["rea-audit"] = os.path.join(REL, "rea-audit")
    info["bins"]["timeout"] = shutil.which("timeout") or "/usr/bin/timeout"
    for name, b in PEER_BINS.items():
        path = shutil.which(b)
        if not path:
            info["skipped"][name] = f"`{b}` is not installed"
            continue
        info["bins"][name] = path
    if "bwrap" in info["bins"]:
        r = subprocess.run(
            [info["bins"]["bwrap"], "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--", "/bin/true"],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            info["skipped"]["bwrap"] = f"bwrap cannot run here: {r.stderr.strip()[:160]}"
    info["cgroot"] = None
    cands = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                cands.append(parts[1])
    for c in cands:
        t = os.path.join(c, f"rea-bench-probe-{os.getpid()}")
        try:
            os.mkdir(t)
            os.rmdir(t)
            info["cgroot"] = c
            break
        except OSError as e:
            info["notes"].append(f"cgroup2 at {c}: cannot create a child group ({e})")
    if not info["cgroot"]:
        info["skipped"]["cgroup"] = "no writable cgroup v2 hierarchy (" + (", ".join(cands) or "none mounted") + ")"
        info["skipped"]["askterm"] = info["skipped"]["cgroup"]
    vers = {}
    for name, cmd in (
        ("timeout", ["timeout", "--version"]),
        ("tini", ["tini", "--version"]),
        ("dumb-init", ["dumb-init", "--version"]),
        ("catatonit", ["catatonit", "--version"]),
        ("bwrap", ["bwrap", "--version"]),
        ("rea-watchdog", [info["bins"]["rea-watchdog"], "--version"]),
    ):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=5)
            vers[name] = (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            vers[name] = "?"
    info["versions"] = vers
    return info


# ----- the sections ----------------------------------------------------------------


def reps_for(args, n, sup):
    if args.quick:
        return 1
    if sup not in REPEATED and not args.full:
        return 1
    return {20: 3, 200: 2, 1000: 2}.get(n, 2) * args.reps_scale


def section1(run, args):
    ns = [20, 200] if args.quick else [20, 200, 1000]
    if args.ns:
        ns = [int(x) for x in args.ns.split(",")]
    sups = [s for s in SUPS if s not in run.info["skipped"]]
    if args.sups:
        sups = [s for s in sups if s in args.sups.split(",")]
    trigs = args.triggers.split(",") if args.triggers else TRIGGERS
    results = []
    builds = {}
    for n in ns:
        maxrep = max(reps_for(args, n, s) for s in sups)
        for rep in range(maxrep):
            for trig in trigs:
                for ign in ((False,) if args.polite_only else (False, True)):
                    for sup in sups:
                        if rep >= reps_for(args, n, sup):
                            continue
                        if trig == "deadline" and sup not in HAS_DEADLINE:
                            continue
                        if sup == "rea-shm" and trig not in SHM_TRIGGERS:
                            continue
                        spec = {"kind": "tree", "sup": sup, "trigger": trig, "n": n, "ignorer": ign}
                        if sup == "rea-shm":
                            spec["audit_log"] = "tmpfs"
                        if trig == "deadline":
                            # D must outlast the tree's build: 1.5 × a high
                            # percentile of the recent builds at this N (a
                            # late tree is retried once with 2 D).
                            b = sorted(builds.get(n, [1.0])[-12:])
                            b = b[min(len(b) - 1, int(0.8 * len(b)))]
                            spec["deadline_s"] = round(max(1.0, 1.5 * b + 0.4), 2)
                        r = run.case(spec)
                        if trig == "deadline" and r.get("late"):
                            spec["deadline_s"] = round(spec["deadline_s"] * 2, 2)
                            r = run.case(spec)
                        r.update(rep=rep, sup=sup, trigger=trig, n=n, ignorer=ign)
                        if r.get("build_s"):
                            builds.setdefault(n, []).append(r["build_s"])
                        results.append(r)
                        log(
                            f"s1 N={n} rep={rep} {trig:8} {'ign' if ign else 'pol'} {sup:9} "
                            f"t={fmt(r.get('quiesce_ms'))}ms surv={r.get('survivors')} "
                            f"{r.get('gave_up') or ''} {r.get('error') or ''}"
                        )
    return results


def section2(run, args):
    reps = 3 if args.quick else 10 * args.reps_scale
    out = []
    fl = run.case({"kind": "wakefloor", "reps": 10 if args.quick else 30})
    fl.update(where="floor")
    out.append(fl)
    log("s2 floor", mm(fl.get("wake_ms", []), 3))
    for rep in range(reps):
        for where in ("disk", "tmpfs"):
            r = run.case(
                {"kind": "tree", "sup": "rea", "trigger": "ctlkill", "n": 20, "ignorer": False, "probe": True, "audit_log": where}
            )
            r.update(rep=rep, where=where)
            out.append(r)
            rl = r.get("rea") or {}
            log(f"s2 {where} rep={rep} first_sweep={fmt(ns_ms(rl.get('first_sweep_ns')), 3)}ms probe={fmt(r.get('probe_term_ms'), 3)}ms")
    return out


def section3(run, args):
    reps = 1 if args.quick else 2 * args.reps_scale
    mx = 500 if args.quick else 2000
    out = []
    for rep in range(reps):
        for sup in CONTAINING:
            if sup in run.info["skipped"] or (args.sups and sup not in args.sups.split(",")):
                continue
            if not sup.startswith("rea") and rep > 0 and not args.full:
                continue  # the peers once (each storm costs tens of seconds); rea twice
            r = run.case({"kind": "storm", "sup": sup, "max": mx}, limit_s=420)
            r.update(rep=rep, sup=sup)
            out.append(r)
            log(f"s3 {sup} rep={rep} t={fmt(r.get('quiesce_ms'))}ms surv={r.get('survivors')} live={r.get('live_at_stop')} {r.get('error') or ''}")
    return out


def section4(run, args):
    spec = {"kind": "spawn", "k": 20 if args.quick else 100, "rounds": 1 if args.quick else 2, "k_exec": 10 if args.quick else 40}
    r = run.case(spec, limit_s=600)
    log("s4", {k: r.get(k) for k in ("failures", "exec_failures", "error")})
    return r


def section5(run, args):
    res = {"append": [], "verify": []}
    rate = os.path.join(REL, "examples", "auditrate")
    genlog = os.path.join(REL, "examples", "genlog")
    reps = 1 if args.quick else 3
    for rep in range(reps):
        for where, base in (("disk", run.scratch_root), ("tmpfs", run.shm_root)):
            for every, n in ((1, 300 if args.quick else 1000), (100, 5000 if args.quick else 30000)):
                p = os.path.join(base, f"rate-{rep}-{every}.jsonl")
                r = subprocess.run([rate, p, str(n), str(every)], capture_output=True, text=True)
                try:
                    v = json.loads(r.stdout)
                except ValueError:
                    v = {"error": r.stderr[-300:]}
                v.update(where=where, rep=rep)
                res["append"].append(v)
                os.unlink(p) if os.path.exists(p) else None
                log(f"s5 append {where} every={every}: {v.get('per_s')}/s")
    records = 100_000 if args.quick else 1_000_000
    big = os.path.join(WORK, f"verify-{records}.jsonl")
    stamp = os.path.join(WORK, f"verify-{records}.stamp")
    want = f"{os.stat(genlog).st_mtime_ns}-{os.stat(genlog).st_size}"
    if not (os.path.exists(big) and os.path.exists(stamp) and open(stamp).read() == want):
        for p in (big, stamp):
            if os.path.exists(p):
                os.unlink(p)
        log(f"s5 generating a {records}-record log")
        subprocess.run([genlog, big, str(records)], check=True, capture_output=True)
        with open(stamp, "w") as f:
            f.write(want)
    size = os.path.getsize(big)
    res["log_bytes"] = size
    res["log_records"] = records
    with open(big, "rb") as f:  # warm the page cache for both readers
        while f.read(1 << 22):
            pass
    audit = run.bins["rea-audit"]
    for rep in range(reps):
        for tool in ("sha256sum", "verify"):
            argv = ["sha256sum", big] if tool == "sha256sum" else [audit, "verify", big]
            t = mono()
            r = subprocess.run(argv, capture_output=True)
            dt = mono() - t
            res["verify"].append({"tool": tool, "rep": rep, "seconds": dt, "rc": r.returncode})
            log(f"s5 {tool}: {dt:.3f}s rc={r.returncode}")
    return res


def section7(run, args):
    configs = [(200, 0), (20, 200)] if args.quick else [(1000, 0), (20, 1000)]
    out = []
    for rep in range(1 if args.quick else 2):
        for n, by in configs:
            r = run.case(
                {"kind": "cmd", "bystanders": by, "argv": [os.path.join(REL, "examples", "procscan"), str(n), "5"]},
                limit_s=300,
            )
            r.update(bystanders=by, rep=rep)
            out.append(r)
            log("s7", r)
    # A stop whose first TERM sweep takes longer than grace + kill bound
    # (here made so by tiny bounds; on a loaded host by CPU starvation).
    n = 1000
    for rep in range(1 if args.quick else 3):
        r = run.case({"kind": "tree", "sup": "rea", "trigger": "cancel", "n": n, "ignorer": True,
                      "audit_log": "tmpfs", "rea_grace_ms": 1, "rea_kill_ms": 1})
        r.update(kind="killbound", n=n, rep=rep)
        out.append(r)
        log("s7 killbound", {k: r.get(k) for k in ("survivors", "survivor_roles", "sup_rc")}, (r.get("rea") or {}).get("stop_completed"))
    return out


def section6(run, args):
    out = {"rss": [], "idle": []}
    reps = 1 if args.quick else 2
    for rep in range(reps):
        r = run.case({"kind": "footprint", "n": 200 if args.quick else 1000}, limit_s=300)
        out["rss"].append(r)
        log(f"s6 rss {r.get('before')} -> {r.get('after_stop')} stop={fmt(r.get('stop_ms'))}ms {r.get('error') or ''}")
    for rep in range(reps):
        r = run.case({"kind": "idle", "seconds": 2 if args.quick else 5}, limit_s=120)
        out["idle"].append(r)
        log(f"s6 idle {r}")
    return out


def section8(run, args):
    """Hostile input (issue 10): a job floods its own watchdog's request FIFO."""
    secs = 5 if args.quick else 10
    out = {"flood": [], "deadline": [], "emfile": []}
    r = run.case({"kind": "hostile", "part": "flood", "seconds": secs, "quiet_s": 0.4 * secs}, limit_s=secs + 150)
    out["flood"].append(r)
    log(f"s8 flood {secs}s: trips={r.get('trips_in_flood')} p50/max={mm(r.get('trip_total_ms') or [], 1)}ms "
        f"log flood={fmt((r.get('log_flood_per_min') or 0) / 1024)}KiB/min total={fmt((r.get('log_total_per_min') or 0) / 1024)}KiB/min "
        f"fails={len(r.get('trip_failures') or [])} {r.get('error') or ''}")
    # One action per lateness figure: a deadline stops the whole action (and
    # the flood with it), so each figure is its own watchdog, its deadline
    # falling 0.3 s .. `secs` into its flood.
    k = 4 if args.quick else 8
    for i in range(k):
        d = round(0.3 + i * (secs - 0.3) / (k - 1), 2)
        r = run.case({"kind": "hostile", "part": "deadline", "delay_s": d}, limit_s=d + 150)
        r.update(rep=i)
        out["deadline"].append(r)
        log(f"s8 deadline after {d}s of flood: late={fmt(r.get('lateness_ms'), 2)}ms (≤{fmt(r.get('lateness_upper_ms'), 2)}) "
            f"reason={r.get('trigger_reason')} flood_on={r.get('flood_on_at_trigger')} {r.get('error') or ''}")
    for rep in range(1 if args.quick else 2):
        spec = {"kind": "hostile", "part": "emfile", "n": 200, "deadline_s": 3.0, "nofile": 64}
        r = run.case(spec, limit_s=240)
        if r.get("late"):
            spec["deadline_s"] = 6.0
            r = run.case(spec, limit_s=240)
        r.update(rep=rep)
        out["emfile"].append(r)
        log(f"s8 emfile rep={rep}: surv={r.get('survivors')} positive={r.get('positive')} t={fmt(r.get('quiesce_ms'))}ms "
            f"{r.get('close_error') or ''} {r.get('error') or ''}")
    return out


# ----- formatting ------------------------------------------------------------------


def fmt(x, nd=1):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def ns_ms(x):
    return None if x is None else x / 1e6


def mm(xs, nd=1, unit=""):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{fmt(med(xs), nd)} / {fmt(max(xs), nd)}{unit}"


ROLE_LETTER = {"root": "R", "escapee": "E", "daemon": "D", "hopper": "H", "ignorer": "I", "probe": "P"}


def surv_text(roles):
    parts = []
    for r in ("root", "escapee", "daemon", "hopper", "ignorer", "probe"):
        if roles.get(r):
            parts.append(ROLE_LETTER[r])
    if roles.get("leaf"):
        parts.append(f"{roles['leaf']}L")
    for k, v in roles.items():
        if k not in ROLE_LETTER and k != "leaf":
            parts.append(f"{v}×{k}")
    return " ".join(parts)


def cell(rs):
    """One table cell for a list of reps of one (sup, trigger, n, variant)."""
    if not rs:
        return "n/a"
    errs = [r for r in rs if r.get("error")]
    ok = [r for r in rs if not r.get("error")]
    if not ok:
        return "error: " + errs[0]["error"][:40]
    surv = [r.get("survivors", 0) for r in ok]
    sib = all(r.get("sibling_alive") for r in ok)
    times = [r["quiesce_ms"] for r in ok if r.get("quiesce_ms") is not None]
    mark = "" if sib else " **SIBLING KILLED**"
    if any(str(r.get("sup")).startswith("rea") and not ((r.get("rea") or {}).get("receipt") or {}).get("quiescent") for r in ok):
        mark += " (receipt not quiescent)"
    if errs:
        mark += f" ({len(errs)} errored)"
    reps = f" ×{len(ok)}" if len(ok) > 1 else " ×1"
    if max(surv) == 0 and len(times) == len(ok):
        return f"**0** · {mm(times)} ms{reps}{mark}"
    worst = max(ok, key=lambda r: r.get("survivors", 0))
    t = f" · {mm(times)} ms" if times else ""
    return f"{max(surv)} left ({surv_text(worst.get('survivor_roles') or {})}){t}{reps}{mark}"


def pick(rs, **kw):
    return [r for r in rs if all(r.get(k) == v for k, v in kw.items())]


def times_of(rs):
    return [r["quiesce_ms"] for r in rs if not r.get("error") and r.get("survivors") == 0 and r.get("quiesce_ms") is not None]


def report(res, info, args, started, ended):
    L = []
    w = L.append
    w("# BENCHMARKS")
    w("")
    w("rea against the tools people use today, side by side in one run (issue 6).")
    w("Regenerate with **one command** (as root; it installs the peers, builds, and")
    w("enters a private PID namespace by itself):")
    w("")
    w("```sh")
    w("python3 tools/bench/bench.py")
    w("```")
    w("")
    w("## Conditions of this run")
    w("")
    loads = []
    for tag, u in info["uptime"]:
        w(f"- `uptime` {tag}: `{u}`")
        try:
            loads.append(float(u.split("load average:")[1].split(",")[0]))
        except (IndexError, ValueError):
            pass
    load_warn = bool(loads) and loads[0] > 1.5
    w(f"- started {started}, finished {ended} ({info['elapsed_s']:.0f} s); {os.cpu_count()} CPUs; kernel {platform.release()}; Python {platform.python_version()}")
    w(f"- cpu: {info.get('cpu', '?')}")
    w(f"- mode: {'--quick (one small pass; not for comparison)' if args.quick else 'full'}; reps scale {args.reps_scale}")
    w("- versions: " + "; ".join(f"{k} `{v}`" for k, v in info["versions"].items()))
    if info["skipped"]:
        for k, v in info["skipped"].items():
            w(f"- **skipped {k}**: {v}")
    for n in info["notes"]:
        w(f"- note: {n}")
    w("")
    w("> Load readings after section 1 starts include this bench's own processes")
    w("> (the 1000-process trees die all at once; section 3's storm keeps 2000")
    w("> processes polling every 5 ms): they do not say the machine was busy.")
    if load_warn:
        w(f"> **The machine was not quiet when the run started**: 1-minute load average")
        w(f"> {loads[0]:.1f} on {os.cpu_count()} CPUs (other work, or the decay of earlier work).")
        w("> Absolute times are then pessimistic; ratios taken in the same run are more")
        w("> trustworthy; survivor counts are exact. The run-queue wait columns show how")
        w("> much of rea's time was spent waiting for a CPU.")
    w("")
    w("Every figure is *median / max* over the repetitions shown (×k); ratios compare")
    w("medians taken in the same run. Scratch files (audit logs, state directories)")
    w(f"are on the real disk (`{info.get('work', WORK)}`, {info.get('work_fs', 'ext4?')}) unless marked tmpfs (`/dev/shm`).")
    w("")
    s = res.get("s1")
    if s is not None:
        section1_md(w, s, args)
    if res.get("s2") is not None:
        section2_md(w, res["s2"])
    if res.get("s3") is not None:
        section3_md(w, res["s3"])
    if res.get("s4") is not None:
        section4_md(w, res["s4"])
    if res.get("s5") is not None:
        section5_md(w, res["s5"])
    if res.get("s6") is not None:
        section6_md(w, res["s6"])
    if res.get("s7") is not None:
        section7_md(w, res["s7"])
    if res.get("s8") is not None:
        section8_md(w, res["s8"])
    if res.get("s9") is not None:
        holders.section9_md(w, res["s9"])
    if res.get("s10") is not None:
        oneshot.section10_md(w, res["s10"])
    if res.get("s11") is not None:
        stagehash.section11_md(w, res["s11"])
    w("## Targets")
    w("")
    w("| target | measured (this run) | |")
    w("|---|---|---|")
    for t, m, ok in res.get("targets", []):
        w(f"| {t} | {m} | {'met' if ok else ('**missed**' if ok is False else 'not measured')} |")
    w("")
    notes = os.path.join(HERE, "NOTES.md")
    if os.path.exists(notes):
        w(open(notes).read().rstrip())
        w("")
    return "\n".join(L) + "\n"


def section1_md(w, s, args):
    w("## 1. Cleanup completeness and time to quiescence")
    w("")
    w("The tree (`tools/bench/benchtree.py`): a root, a setsid escapee (E), a")
    w("double-forked setsid daemon (D), a `fixtures/hopper.py` (H, the same argv as")
    w("the unrelated sibling), N `/bin/sleep` leaves (L) and, in the `+I` columns,")
    w("one child that ignores SIGTERM (I). An unrelated `hopper.py` sibling runs")
    w("outside the tree in the same namespace; it must be alive at the end.")
    w("Time is from the trigger to the oracle FIFO's EOF (every member holds its")
    w("write end, so EOF = the last member has exited). Survivors are live")
    w("processes carrying the tree's marker variable after the observation window.")
    w("")
    w("Supervisors: `timeout -k 0.5 600`, `tini -s -g`, `dumb-init`, `catatonit`,")
    w("`bwrap --dev-bind / / --unshare-pid --die-with-parent`, `cgroup`: a")
    w("`cgroup.kill` reference supervisor (`tools/bench/cgsup.py`: a fresh cgroup v2")
    w("group, `cgroup.kill` on the trigger), `askterm`: the same with rea's policy")
    w("instead of `cgroup.kill` (`--ask-then-term 0.5`: the leader asked alone, then")
    w("SIGTERM to each member through a pidfd, `cgroup.kill` after the grace; no proof),")
    w("`rea`: `rea-watchdog exec --term-grace")
    w("500ms --kill-bound 3s` (log on disk). Triggers: *cancel* = SIGTERM to the")
    w("supervisor (for `none`: to the tree's root); *controller SIGKILL* = SIGKILL to")
    w("the process that started the supervisor; *job exits* = the tree's root exits")
    w("after the tree is built (time from its own CLOCK_MONOTONIC just before")
    w("`_exit`); *deadline* = the supervisor's own deadline (only `timeout`, `cgroup`")
    w("and `rea` have one; n/a elsewhere — compose with timeout and you get the")
    w("cancel row). Deadline instant: spawn + D for timeout (its ~1 ms start-up is")
    w("counted against it), the instant cgsup reports, and for rea")
    w("min(`job_spawned.mono_ns` + D, `stop_triggered.mono_ns`).")
    w("")
    w("Observation window: wait for EOF; stop waiting when the supervisor has exited")
    w("and 300 ms passed, when nothing at all died within grace + 0.7 s (no reaction),")
    w("or after 6 s. Rows of the peers that leave survivors are one run per cell")
    w("(`--full` repeats them too): their outcome is structural, not a timing.")
    w("Containing supervisors: " + ("1 rep (quick)" if args.quick else f"N=20 ×{reps_for(args, 20, 'rea')}, N=200 ×{reps_for(args, 200, 'rea')}, N=1000 ×{reps_for(args, 1000, 'rea')} (fewer for big N to keep the run in minutes)") + ".")
    w("")
    w("Cells: `**0** · median / max ms ×reps` when nothing survived; otherwise")
    w("`K left (roles)`. Letters: R root, E escapee, D daemon, H in-tree hopper, I")
    w("TERM-ignorer, nL sleep leaves.")
    w("")
    ns = sorted({r["n"] for r in s})
    sibling_ok = all(r.get("sibling_alive") for r in s if not r.get("error"))
    for trig in TRIGGERS:
        w(f"### Trigger: {TRIGGER_TEXT[trig]}")
        w("")
        cols = [(n, ign) for n in ns for ign in (False, True)]
        w("| supervisor | " + " | ".join(f"N={n}{' +I' if ign else ''}" for n, ign in cols) + " |")
        w("|---|" + "---|" * len(cols))
        for sup in SUPS:
            rs_sup = pick(s, sup=sup, trigger=trig)
            if not rs_sup and not (trig == "deadline" and sup not in HAS_DEADLINE):
                continue
            if sup == "rea-shm" and trig not in SHM_TRIGGERS:
                continue
            row = []
            for n, ign in cols:
                if trig == "deadline" and sup not in HAS_DEADLINE or (sup == "rea-shm" and trig not in SHM_TRIGGERS):
                    row.append("n/a")
                else:
                    row.append(cell(pick(s, sup=sup, trigger=trig, n=n, ignorer=ign)))
            w(f"| {sup} | " + " | ".join(row) + " |")
        w("")
    w(f"The unrelated sibling survived every case: **{'yes' if sibling_ok else 'NO'}**.")
    w("")
    # Ratios.
    w("### Same-run ratios, polite tree (rea median / peer median)")
    w("")
    w("`rea` runs with `--contain cgroup` (the action's own cgroup v2 group: members")
    w("from `cgroup.procs`, `cgroup.kill` at the KILL stage), `rea-none` with")
    w("`--contain none` (the user-space path: `/proc` scans); both have their audit")
    w("log on the real disk (an `fdatasync` precedes the first TERM); `rea-shm` is")
    w("cgroup mode with the log on tmpfs, run only for the two signal triggers, to")
    w("show what that sync costs. Targets (issue 12): cgroup ≤ 1.0× bwrap, none ≤ 1.3×.")
    w("`askterm` (`cgsup.py --ask-then-term`) is the floor of rea's stop policy: the")
    w("ask (SIGTERM to the job's leader alone until it exits or half the grace passed),")
    w("then SIGTERM through a fresh pidfd to each member of the group, and nothing else:")
    w("no identity read back, no record, no `fdatasync`, no reaping. ÷askterm is what")
    w("rea's proof costs on top of its policy.")
    w("")
    w("| trigger (who) | " + " | ".join(f"N={n}: ms · ÷bwrap · ÷cgroup.kill · ÷askterm" for n in ns) + " |")
    w("|---|" + "---|" * len(ns))
    for trig in TRIGGERS:
        for who in ("rea", "rea-none", "rea-shm"):
            if who == "rea-shm" and trig not in SHM_TRIGGERS:
                continue
            if not pick(s, sup=who, trigger=trig):
                continue
            row = []
            for n in ns:
                rt = med(times_of(pick(s, sup=who, trigger=trig, n=n, ignorer=False)))
                bt = med(times_of(pick(s, sup="bwrap", trigger=trig, n=n, ignorer=False)))
                ct = med(times_of(pick(s, sup="cgroup", trigger=trig, n=n, ignorer=False)))
                at = med(times_of(pick(s, sup="askterm", trigger=trig, n=n, ignorer=False)))
                row.append(
                    f"{fmt(rt)} · {fmt(rt / bt, 2) if rt and bt else '—'} · {fmt(rt / ct, 2) if rt and ct else '—'}"
                    f" · {fmt(rt / at, 2) if rt and at else '—'}"
                )
            w(f"| {trig} ({who}) | " + " | ".join(row) + " |")
    w("")
    # rea's own account of where the time goes.
    w("### Where rea's time goes (median over reps; ms after the trigger)")
    w("")
    w("From rea's audit log (`mono_ns` of the records) and `/proc/PID/schedstat` of")
    w("the watchdog between the trigger and the oracle EOF: *on CPU* is the time it")
    w("ran, *run-queue wait* the time it was runnable but waiting for a CPU (the")
    w("machine's load, not rea's work).")
    w("")
    w("| trigger | mode, log | N | variant | stop_triggered | first signal_sweep record | oracle EOF | stop_completed | sweeps | rea on CPU | rea run-queue wait |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    where = {"rea": "cgroup, disk", "rea-none": "none, disk", "rea-shm": "cgroup, tmpfs"}
    cpu_per = []
    for trig in TRIGGERS:
        for who in ("rea", "rea-none", "rea-shm"):
            for n in ns:
                for ign in (False, True):
                    rs = [r for r in pick(s, sup=who, trigger=trig, n=n, ignorer=ign) if r.get("rea")]
                    if not rs:
                        continue
                    g = lambda k: med([ns_ms(r["rea"].get(k)) for r in rs if r["rea"].get(k) is not None])
                    cpu = med([r["rea_sched"]["cpu_ms"] for r in rs if r.get("rea_sched")])
                    rq = med([r["rea_sched"]["runq_wait_ms"] for r in rs if r.get("rea_sched")])
                    w(
                        f"| {trig} | {where[who]} | {n} | {'+I' if ign else 'polite'} | {fmt(g('trigger_ns'), 2)} | "
                        f"{fmt(g('first_sweep_ns'), 2)} | {fmt(med(times_of(rs)), 1)} | {fmt(g('stop_completed_ns'), 1)} | "
                        f"{fmt(med([r['rea'].get('sweeps') for r in rs]), 0)} | {fmt(cpu, 1)} | {fmt(rq, 1)} |"
                    )
                    if who != "rea-shm" and not ign and n >= 200 and cpu is not None:
                        cpu_per.append((trig, who, n, cpu * 1000 / (n + 4)))
    w("")
    if cpu_per:
        w("### The watchdog's CPU time per 1000 members (polite tree, trigger → EOF)")
        w("")
        w("*rea on CPU* above, scaled to 1000 members (the tree is N leaves + 4).")
        w("")
        w("| trigger | N | cgroup mode ms | none mode ms |")
        w("|---|---|---|---|")
        for trig in TRIGGERS:
            for n in ns:
                c = [x[3] for x in cpu_per if x[0] == trig and x[2] == n and x[1] == "rea"]
                u = [x[3] for x in cpu_per if x[0] == trig and x[2] == n and x[1] == "rea-none"]
                if c or u:
                    w(f"| {trig} | {n} | {fmt(c[0] if c else None, 1)} | {fmt(u[0] if u else None, 1)} |")
        w("")


def section2_md(w, s2):
    w("## 2. Reaction latency: controller SIGKILL → first signal")
    w("")
    w("`rea-watchdog exec` under a controller process, polite tree N=20 plus a probe")
    w("member that takes its SIGTERM with `sigwaitinfo` and notes CLOCK_MONOTONIC. t0 = the bench's")
    w("CLOCK_MONOTONIC right before `pidfd_send_signal(controller, SIGKILL)`.")
    w("*stop_triggered* and *first signal_sweep* are those records' `mono_ns` (the")
    w("sweep record is appended *before* the `fdatasync` that precedes the signals, so")
    w("it does not include that sync); *probe TERM* is when a TERM actually arrived in")
    w("the tree: it includes the sync and the signal loop up to the probe, which is")
    w("about the fourth target (after the tree's root, the reparented daemon and the")
    w("escapee, all Python processes whose wake-up on TERM can preempt the watchdog")
    w("between two signals): an upper bound on the first TERM.")
    w("")
    w("| audit log on | reps | stop_triggered ms | first signal_sweep ms | probe got TERM ms |")
    w("|---|---|---|---|---|")
    for where in ("disk", "tmpfs"):
        rs = [r for r in s2 if r.get("where") == where and r.get("rea")]
        w(
            f"| {where} | {len(rs)} | {mm([ns_ms(r['rea'].get('trigger_ns')) for r in rs], 3)} | "
            f"{mm([ns_ms(r['rea'].get('first_sweep_ns')) for r in rs], 3)} | {mm([r.get('probe_term_ms') for r in rs], 3)} |"
        )
    fl = [r for r in s2 if r.get("where") == "floor" and r.get("wake_ms")]
    if fl:
        w("")
        w(f"The floor on this machine, same run: SIGKILL to a sleeping process until *another*")
        w(f"process polling its pidfd wakes: {mm(fl[0]['wake_ms'], 3)} ms (median / max of {len(fl[0]['wake_ms'])}).")
        w("Any \"controller died → watchdog reacted\" figure includes it (the victim's exit and")
        w("the wake-up of an idle vCPU).")
    bad = [r for r in s2 if r.get("where") != "floor" and (r.get("error") or r.get("survivors"))]
    if bad:
        w("")
        w(f"{len(bad)} rep(s) errored or left survivors: " + "; ".join(str(r.get("error") or r.get("survivor_roles")) for r in bad[:3]))
    w("")


def section3_md(w, s3):
    w("## 3. Fork storm")
    w("")
    w("`fixtures/storm.py --max M`: every process forks as fast as it can while a")
    w("shared semaphore has room (M live); a TERMed process frees its slot on the way")
    w("out, so the rest fork replacements during the TERM grace. Stop = SIGTERM to")
    w("the supervisor once M processes exist. Time = trigger → oracle EOF.")
    w("")
    w("The observation window is 10 s after the stop (rea's own bounds: grace 0.5 s +")
    w("kill bound 3 s). Survivors are counted with a 5 s limit on the /proc scan")
    w("(reading the environment of a process that is forking waits for its memory map);")
    w("`≥` marks a scan that ran out of time.")
    w("")
    w("| supervisor | reps | live at stop | time to quiescence ms | past the 500 ms grace ms | survivors (per rep) | sibling alive |")
    w("|---|---|---|---|---|---|---|")
    for sup in CONTAINING:
        rs = [r for r in s3 if r.get("sup") == sup]
        if not rs:
            continue
        ok = [r for r in rs if not r.get("error")]
        ts = [r.get("quiesce_ms") for r in ok if r.get("quiesce_ms") is not None]
        past = [t - GRACE_MS for t in ts] if sup.startswith("rea") else []
        surv = [f"{'≥' if r.get('survivor_scan_complete') is False else ''}{r.get('survivors')}" for r in ok]
        nq = sum(1 for r in ok if r.get("quiesce_ms") is None)
        w(
            f"| {sup} | {len(ok)}{' (' + str(len(rs) - len(ok)) + ' errored)' if len(ok) < len(rs) else ''} | "
            f"{fmt(med([r.get('live_at_stop') for r in ok if r.get('live_at_stop') is not None]), 0)} | "
            f"{mm(ts)}{f' ({nq} not quiescent in 10 s)' if nq else ''} | "
            f"{mm(past) if past else ('n/a (no grace)' if not sup.startswith('rea') else '—')} | {', '.join(surv) or '—'} | "
            f"{'yes' if all(r.get('sibling_alive') for r in ok) else 'NO'} |"
        )
    rea = [r for r in s3 if str(r.get("sup")).startswith("rea") and r.get("rea")]
    if rea:
        w("")
        w("rea, per rep (audit log; schedstat of the watchdog from the trigger to EOF):")
        w("")
        for r in rea:
            sc = r.get("sup_sched") or {}
            w(f"- {r.get('sup')}: exit status {r.get('sup_rc')}; sweeps {r['rea'].get('sweeps')} (KILL {r['rea'].get('kill_sweeps')}), first sweep record at {fmt(ns_ms(r['rea'].get('first_sweep_ns')))} ms, "
              f"stop_completed at {fmt(ns_ms(r['rea'].get('stop_completed_ns')))} ms, "
              f"signals {((r['rea'].get('receipt') or {}).get('signals'))}, reaped {((r['rea'].get('receipt') or {}).get('reaped'))}; "
              f"on CPU {fmt(sc.get('cpu_ms'))} ms, run-queue wait {fmt(sc.get('runq_wait_ms'))} ms")
    w("")


def section4_md(w, s4):
    w("## 4. Spawn round trip")
    w("")
    if s4.get("error"):
        w(f"error: {s4['error']}")
        w("")
        return
    lat = s4["lat_ns"]
    if s4.get("rerun_at"):
        w(f"(This section was re-run alone at {s4['rerun_at']}, after the rest of the run.)")
        w("")
    w(f"Sequential, {s4['k']} per block × {s4['rounds']} interleaved rounds, one watchdog (`rea-watchdog run`,")
    w("root = the case driver). *submit CLI* = `rea-watchdog submit -- /bin/true`")
    w("(a whole client process); *in-process* = the request/reply protocol spoken")
    w("by `tools/rea_client.py` in the bench process (reply FIFO in `STATE_DIR/replies/`,")
    w("one line to `STATE_DIR/requests`, caller = the bench process), until the `exited` reply;")
    w("*plain* = fork+exec+wait (and posix_spawn+wait) of `/bin/true` by the same")
    w("harness. Children are started with posix_spawn except the fork row.")
    w("")
    w("| path | requests/s | p50 ms | p99 ms | max ms | failures |")
    w("|---|---|---|---|---|---|")
    names = {
        "fork": "plain fork+exec+wait /bin/true",
        "posix_spawn": "plain posix_spawn+wait /bin/true",
        "submit_cli": "`rea-watchdog submit` CLI (log on disk)",
        "inproc": "in-process client (log on disk)",
        "inproc_tmpfs": "in-process client (log on tmpfs)",
    }
    for k, name in names.items():
        xs = [x / 1e6 for x in lat.get(k, [])]
        if not xs:
            continue
        w(f"| {name} | {len(xs) / (sum(xs) / 1000):.0f} | {fmt(pct(xs, 50), 2)} | {fmt(pct(xs, 99), 2)} | {fmt(max(xs), 2)} | {s4['failures'].get(k)} |")
    w("")
    ex = s4["exec_ns"]
    t = [x / 1e6 for x in ex["timeout"]]
    e = [x / 1e6 for x in ex["exec"]]
    es = [x / 1e6 for x in ex["exec_tmpfs"]]
    w("Whole process, alternating, posix_spawn+wait by the harness:")
    w("")
    w("| command | runs | p50 ms | p99 ms | max ms | ratio of medians to timeout |")
    w("|---|---|---|---|---|---|")
    w(f"| `timeout 10 true` | {len(t)} | {fmt(pct(t, 50), 2)} | {fmt(pct(t, 99), 2)} | {fmt(max(t), 2)} | 1 |")
    w(f"| `rea-watchdog exec -- true` (TMPDIR on disk: log + state) | {len(e)} | {fmt(pct(e, 50), 2)} | {fmt(pct(e, 99), 2)} | {fmt(max(e), 2)} | {pct(e, 50) / pct(t, 50):.1f}× |")
    w(f"| `rea-watchdog exec -- true` (TMPDIR on tmpfs) | {len(es)} | {fmt(pct(es, 50), 2)} | {fmt(pct(es, 99), 2)} | {fmt(max(es), 2)} | {pct(es, 50) / pct(t, 50):.1f}× |")
    rt = [x / 1e6 for x in ex.get("rea_timeout", [])]
    if rt:
        w(f"| rea's `timeout 10 true` (the personality; TMPDIR on disk) | {len(rt)} | {fmt(pct(rt, 50), 2)} | {fmt(pct(rt, 99), 2)} | {fmt(max(rt), 2)} | {pct(rt, 50) / pct(t, 50):.1f}× |")
    w("")
    w("rea's `timeout` is `exec` under coreutils' command line: the same start-up")
    w("(log created and synced, state directory, signalfd, pidfd, the close's")
    w("proof, receipt and holder scan), so its cost is exec's; coreutils' `timeout`")
    w("forks, waits and exits.")
    w("")


def section5_md(w, s5):
    w("## 5. Audit log")
    w("")
    w("Append rate: `tools/bench/auditrate.rs` (the library's `AuditWriter`, a")
    w("rotation of request/spawn/reap/exit records, ~390 bytes each); `record` =")
    w("append + `fdatasync` per record (as the watchdog does before an act), `/100` =")
    w("one `fdatasync` per 100 appends.")
    w("")
    w("| log on | durability | reps | records/s |")
    w("|---|---|---|---|")
    for where in ("disk", "tmpfs"):
        for every in (1, 100):
            xs = [a["per_s"] for a in s5["append"] if a.get("where") == where and a.get("sync_every") == every]
            w(f"| {where} | {'fdatasync each' if every == 1 else 'fdatasync per 100'} | {len(xs)} | {mm(xs, 0)} |")
    w("")
    mb = s5["log_bytes"] / 1e6
    sh = [v["seconds"] for v in s5["verify"] if v["tool"] == "sha256sum"]
    ve = [v["seconds"] for v in s5["verify"] if v["tool"] == "verify"]
    rcs = {v["rc"] for v in s5["verify"] if v["tool"] == "verify"}
    w(f"Verify: a {s5['log_records']:,}-record sealed log ({mb:.0f} MB, `genlog`), page cache warm,")
    w(f"whole-process time, alternating. `rea-audit verify` exit status: {sorted(rcs)} (0 = delete_allowed).")
    w("")
    w("| tool | reps | seconds | MB/s (median) |")
    w("|---|---|---|---|")
    w(f"| `sha256sum` | {len(sh)} | {mm(sh, 3)} | {mb / med(sh):.0f} |")
    w(f"| `rea-audit verify` | {len(ve)} | {mm(ve, 3)} | {mb / med(ve):.0f} |")
    w("")
    w(f"verify throughput = **{100 * med(sh) / med(ve):.0f} %** of sha256sum's (same run).")
    w("")


def section6_md(w, s6):
    w("## 6. Footprint")
    w("")
    rss = [r for r in s6["rss"] if not r.get("error")]
    w("Peak RSS: `rea-watchdog run` spawns the tree (N leaves + 4 members) as")
    w("one job, then `op: stop` through the in-process client; VmHWM is read from")
    w("`/proc/PID/status` after `stop_complete` and before `close` (the high-water")
    w("mark covers start-up, the tree's spawn and the whole stop).")
    w("")
    w("| reps | members | VmRSS before stop KiB | VmHWM after stop KiB | stop (request → stop_complete) ms | survivors |")
    w("|---|---|---|---|---|---|")
    w(
        f"| {len(rss)} | {mm([r.get('members') for r in rss], 0)} | {mm([r['before']['rss_kib'] for r in rss], 0)} | "
        f"{mm([r['after_stop']['hwm_kib'] for r in rss], 0)} | {mm([r.get('stop_ms') for r in rss])} | {max([r.get('survivors', 0) for r in rss], default='—')} |"
    )
    w("")
    idle = [r for r in s6["idle"] if not r.get("error")]
    w("Idle wakeups: a fresh `rea-watchdog run`, voluntary / non-voluntary context")
    w("switches from `/proc/PID/status` over the window.")
    w("")
    w("| state | reps | seconds | voluntary | non-voluntary |")
    w("|---|---|---|---|---|")
    for v, name in (("no_job", "idle, no job"), ("one_job", "idle, one running job (`sleep 3600`, 600 s deadline)")):
        xs = [r[v] for r in idle if v in r]
        if xs:
            w(f"| {name} | {len(xs)} | {xs[0]['seconds']} | {mm([x['voluntary'] for x in xs], 0)} | {mm([x['nonvoluntary'] for x in xs], 0)} |")
    w("")


def section7_md(w, s7):
    w("## 7. Diagnosis: the stop procedure's per-process work, piece by piece")
    w("")
    w("`tools/bench/procscan.rs` (own case namespace) starts N `sleep` children and")
    w("times, over all N, the library's own functions against cheaper equivalents")
    w("doing the same checks (median of 5 passes per rep; ms for all N). `std` reads")
    w("use `read_to_end` (openat + statx + lseek + read + read + close); *one read*")
    w("is openat + one read into a reused buffer + close.")
    w("")
    kb = [r for r in s7 if r.get("kind") == "killbound"]
    s7 = [r for r in s7 if r.get("kind") != "killbound"]
    ok = [r for r in s7 if not r.get("error")]
    if not ok:
        w("error: " + str(s7[0].get("error") if s7 else "not run"))
        w("")
        return
    rows = [
        ("scan_descendants_ms", "`scan::descendants` (readdir /proc + stat of every pid)"),
        ("readdir_proc_ms", "… of which readdir /proc"),
        ("read_stat_std_ms", "`/proc/PID/stat` of the tree, std read (as the library does)"),
        ("read_stat_one_read_ms", "`/proc/PID/stat` of the tree, one read"),
        ("read_status_std_ms", "`/proc/PID/status` of the tree, std read (`read_uids`)"),
        ("read_status_one_read_ms", "`/proc/PID/status` of the tree, one read"),
        ("pidfd_open_ms", "`pidfd_open` of the tree"),
        ("bind_all_ms", "`pidfd::bind` of the tree (pidfd_open + stat + status, std reads)"),
        ("bind_all_one_read_ms", "the same checks with one-read files"),
        ("poll_has_exited_ms", "`has_exited` poll of every held pidfd"),
        ("sigkill_loop_ms", "SIGKILL loop (`VerifiedPidFd::signal`), victims' exits included"),
        ("reap_peek_stat_pid_ms", "reap as `reap_all` does (peek + zombie's stat + reap by pid)"),
        ("reap_held_pidfd_ms", "reap through the pidfds already held (`waitid(P_PIDFD)`)"),
    ]
    configs = sorted({(int(r.get("n", 0)), r.get("bystanders", 0)) for r in ok}, key=lambda c: (-c[0], c[1]))
    w("| step | " + " | ".join(f"tree N={n}, {b} unrelated processes: ms median / max (µs per tree process)" for n, b in configs) + " |")
    w("|---|" + "---|" * len(configs))
    for k, name in rows:
        cells = []
        for n, b in configs:
            xs = [r[k] for r in ok if k in r and int(r.get("n", 0)) == n and r.get("bystanders", 0) == b]
            cells.append(f"{mm(xs, 2)} ({1000 * med(xs) / n:.1f})" if xs else "—")
        w(f"| {name} | " + " | ".join(cells) + " |")
    w("")
    by = max((b for _, b in configs), default=0)
    w("The scan reads the `stat` of *every* process the watchdog can see, not only")
    w(f"its tree: the last column is a small tree on a host with {by} other processes.")
    w("The benchmark's cases run in private PID namespaces, where /proc")
    w("holds little besides the tree; on a real host every sweep and every rescan")
    w("pays for the whole process table.")
    w("")
    if kb:
        w("### A first sweep that outlasts the kill bound")
        w("")
        w(f"`rea-watchdog exec --term-grace 1ms --kill-bound 1ms` over the tree (N={kb[0].get('n')}, with")
        w("the TERM-ignorer), cancel, log on tmpfs: binding the tree takes longer than")
        w("grace + bound, which a loaded host also causes with the default bounds (see the")
        w("storm and the N=1000 deadline rows when they show survivors). A correct stop")
        w("sends at least one KILL sweep before it gives up.")
        w("")
        w("| rep | first TERM sweep record ms | sweeps | KILL sweeps | stop_completed.left | survivors | exit status |")
        w("|---|---|---|---|---|---|---|")
        for r in kb:
            rl = r.get("rea") or {}
            sc = rl.get("stop_completed") or {}
            w(f"| {r.get('rep')} | {fmt(ns_ms(rl.get('first_sweep_ns')))} | {rl.get('sweeps')} | {rl.get('kill_sweeps', '—')} | "
              f"{sc.get('left')} | {r.get('survivors')} {surv_text(r.get('survivor_roles') or {})} | {r.get('sup_rc')} |")
        w("")


def section8_md(w, s8):
    w("## 8. Hostile input: a job floods the request FIFO; the watchdog short of descriptors")
    w("")
    w("The flood job (`tools/bench/fifoflood.py`, a job of the watchdog under test,")
    w("so it writes to its own `$REA_STATE_DIR/requests`) writes garbage at full")
    w("speed in blocking 4096-byte writes: one write in three pure newlines, the")
    w("rest a mix of unframed JSON lines, RS-fragments without their LF, framed")
    w("non-JSON, invalid UTF-8, arrays, well-formed-looking requests from nobody")
    w("with no reply FIFO, and an oversize text. Nothing in it is a valid request.")
    w("Each action below is its own `rea-watchdog run` (default bounds, log on")
    w("disk) in its own case namespace; the root controller and the well-behaved")
    w("client is the case driver (ordinary priority, like any controller).")
    w("")
    fl = [r for r in s8.get("flood", []) if not r.get("error")]
    for r in s8.get("flood", []):
        if r.get("error"):
            w(f"flood action: error: {r['error']}")
            w("")
    if fl:
        r = fl[0]
        rf = r.get("refused") or {}
        w(f"### Flood for {r['flood_s']:.1f} s: log growth and well-behaved round trips")
        w("")
        w(f"One action. For the first {r['quiet_s']:.1f} s the flood runs alone; then the driver")
        w("starts one `/bin/true` spawn every 100 ms through `tools/rea_client.py`")
        w("(request written → `accepted` → `exited`) until the flood ends; only round")
        w("trips that started and ended inside the flood count. Log growth is the bytes")
        w("of the records whose `mono_ns` falls inside the window, per minute. With")
        w("round trips, *the flood's share* leaves out the client's own records (its")
        w("`request_received`, `job_spawned`, `job_exited`) and adds the last")
        w("`requests_refused` burst, recorded up to 1 s after the flood ended. A burst")
        w("is recorded when it is 1 s old *or before any other record*, so the")
        w("client's records cut the flood into more, smaller bursts: the flood's share")
        w("is larger with round trips than alone. *To `request_received`*: from the")
        w("client's first write attempt to that record's `mono_ns` (the time spent")
        w("getting the request into a FIFO the flood keeps full, and read).")
        w("")
        mib = r["flood_bytes"] / 2**20
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(rf.get("reasons", {}).items(), key=lambda kv: -kv[1]))
        w("| flood written | texts refused (bursts) | log growth, flood alone | with round trips: flood's share | … all records | … the client's | round trips in the flood | round trip ms p50 / max | … to `accepted` ms p50 / max | … to `request_received` ms p50 / max | failed round trips | close |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        tt, ta = r.get("trip_total_ms") or [], r.get("trip_accepted_ms") or []
        p = lambda xs: f"{fmt(pct(xs, 50), 1)} / {fmt(max(xs), 1)}" if xs else "—"
        w(f"| {mib:.0f} MiB ({mib / r['flood_s']:.1f} MiB/s) | {rf.get('texts', 0)} ({rf.get('bursts', 0)}) | "
          f"{r['log_quiet_per_min'] / 1024:.1f} KiB/min ({r.get('bursts_quiet')} bursts in {r['quiet_s']:.1f} s) | "
          f"{r['log_flood_per_min'] / 1024:.1f} KiB/min ({r.get('bursts_busy')} bursts in {r['busy_s']:.1f} s) | {r['log_total_per_min'] / 1024:.1f} KiB/min | {r['log_client_per_min'] / 1024:.1f} KiB/min | "
          f"{r.get('trips_in_flood')} | {p(tt)} | {p(ta)} | {p(r.get('trip_received_ms') or [])} | {len(r.get('trip_failures') or []) + r.get('trips_bad', 0)} | "
          f"{r.get('outcome')}, positive {r.get('positive')} |")
        w("")
        if reasons:
            w(f"Refusal reasons recorded: {reasons}; answered refusals: {rf.get('answered', 0)}.")
            w("")
        for f in (r.get("trip_failures") or [])[:3]:
            w(f"- failed round trip after {f['after_ms']:.0f} ms: {f['error']}")
        if r.get("trip_failures") and rf.get("reasons", {}).get("bad_reply"):
            w(f"- `bad_reply` refusals recorded: {rf['reasons']['bad_reply']} (a request read only after its client had given up and removed its reply FIFO)")
        if r.get("trip_failures"):
            w("")
    dl = s8.get("deadline", [])
    if dl:
        w("### Deadline lateness during the flood")
        w("")
        w("A deadline stops the whole action for good (flood included), so one action")
        w("gives one figure: the flood job starts, after *d* seconds of flood the driver")
        w("asks for a `/bin/sleep 5` job with a 200 ms deadline, the deadline stops the")
        w("action. Lateness = `stop_triggered.mono_ns` − (start + 200 ms). The watchdog")
        w("starts the deadline's clock just before the fork; no record carries that")
        w("instant, so the true lateness lies between two figures: start =")
        w("`job_spawned.mono_ns` (recorded after the fork returns: a *lower bound*, negative")
        w("when the spawn took longer than the lateness) and start =")
        w("`request_received.mono_ns` (made durable before the spawn: an *upper bound*,")
        w("the figure the target is judged on). The flood was on at the trigger when")
        w("the flood job's `job_exited` is a stopped one recorded after it.")
        w("")
        w("| d (s of flood before the ask) | flood at the trigger s | lateness ms: upper bound | lower bound | trigger → first sweep ms | → stop_completed ms | reason | flood on | receipt positive |")
        w("|---|---|---|---|---|---|---|---|---|")
        for r in dl:
            if r.get("error"):
                w(f"| {r.get('delay_s')} | error: {r['error'][:80]} | | | | | | | |")
                continue
            w(f"| {r['delay_s']} | {fmt(r.get('flood_s_at_trigger'), 2)} | {fmt(r.get('lateness_upper_ms'), 2)} | {fmt(r.get('lateness_ms'), 2)} | "
              f"{fmt(r.get('first_sweep_ms'), 2)} | {fmt(r.get('stop_completed_ms'))} | {r.get('trigger_reason')} | "
              f"{'yes' if r.get('flood_on_at_trigger') else '**no**'} | {r.get('positive')} |")
        w("")
    em = s8.get("emfile", [])
    if em:
        w("### EMFILE: the watchdog at `nofile 64:64`, a job with 200 children")
        w("")
        w("`rea-watchdog run` started with `RLIMIT_NOFILE` 64:64 (setrlimit before exec);")
        w("one job, `tools/bench/benchtree.py --leaves 200` (root, escapee, daemon, hopper,")
        w("200 `sleep`s), stopped by its own deadline once the tree is built. Time from")
        w("the deadline instant (min(`job_spawned` + D, `stop_triggered`)) to the oracle's")
        w("EOF; survivors by the marker scan; then `close` from the root controller.")
        w("")
        w("| rep | limit | members | deadline s | quiescence ms | sweeps | KILL sweeps | stop_completed.left | receipt quiescent | uncertain | survivors | close: positive |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in em:
            if r.get("error"):
                w(f"| {r.get('rep')} | error: {r['error'][:80]} | | | | | | | | | | |")
                continue
            rl = r.get("rea") or {}
            rc = rl.get("receipt") or {}
            sc = rl.get("stop_completed") or {}
            lim = "/".join(r.get("watchdog_limit") or ["?"])
            close = r.get("close_error") or f"{r.get('positive')}"
            w(f"| {r['rep']} | {lim} | {r.get('members_seen')} of {r.get('expected')} | {r.get('deadline_s')} | {fmt(r.get('quiesce_ms'))} | "
              f"{rl.get('sweeps')} | {rl.get('kill_sweeps')} | {sc.get('left')} | {rc.get('quiescent')} | {rc.get('uncertain')} | "
              f"{r.get('survivors')} {surv_text(r.get('survivor_roles') or {})} | {close} |")
        w("")


# ----- targets -----------------------------------------------------------------------


def targets(res):
    T = []
    s = res.get("s1")
    if s is not None:
        ok = [r for r in s if not r.get("error")]
        rea = [r for r in ok if r["sup"] == "rea"]
        surv = max([r.get("survivors", 0) for r in rea], default=None)
        sib = all(r.get("sibling_alive") for r in ok)
        bad = [r for r in rea if r.get("survivors")]
        detail = "; ".join(
            f"{r['survivors']} left at N={r['n']} {r['trigger']}{' +I' if r['ignorer'] else ''} rep {r['rep']} "
            f"(first sweep {fmt(ns_ms((r.get('rea') or {}).get('first_sweep_ns')))} ms, KILL sweeps {(r.get('rea') or {}).get('kill_sweeps')})"
            for r in bad[:4])
        T.append(("0 survivors for every tree and trigger (rea)", f"{len(bad)} of {len(rea)} rea runs left survivors" + (f": {detail}" if bad else ""), surv == 0 if rea else None))
        T.append(("the unrelated sibling always alive", f"{'alive' if sib else 'killed'} in all {len(ok)} cases", sib))
        # Issue 12: cgroup mode ≤ 1.0× bwrap, none mode ≤ 1.3×, polite
        # tree, N=200 and N=1000, cancel and controller SIGKILL.
        for who, limit in (("rea", 1.0), ("rea-none", 1.3)):
            worst = []
            for n in sorted({r["n"] for r in ok if r["n"] >= 200}):
                for trig in ("cancel", "ctlkill"):
                    rt = med(times_of(pick(ok, sup=who, trigger=trig, n=n, ignorer=False)))
                    bt = med(times_of(pick(ok, sup="bwrap", trigger=trig, n=n, ignorer=False)))
                    if rt and bt:
                        worst.append((rt / bt, n, trig, rt, bt))
            if worst:
                x = max(worst)
                every = ", ".join(f"N={w[1]} {w[2]} {w[0]:.2f}×" for w in sorted(worst, key=lambda w: (w[1], w[2])))
                T.append((f"polite tree, N≥200, cancel and controller SIGKILL: {who} ≤ {limit}× bwrap",
                          f"worst {x[0]:.2f}× (N={x[1]}, {x[2]}: {x[3]:.1f} vs {x[4]:.1f} ms); {every}", x[0] <= limit))
        worst_c, worst_i = [], []
        for n in sorted({r["n"] for r in ok}):
            for trig in TRIGGERS:
                rt = med(times_of(pick(ok, sup="rea", trigger=trig, n=n, ignorer=False)))
                ct = med(times_of(pick(ok, sup="cgroup", trigger=trig, n=n, ignorer=False)))
                if rt and ct:
                    worst_c.append((rt / ct, n, trig, rt, ct))
                it = times_of(pick(ok, sup="rea", trigger=trig, n=n, ignorer=True))
                if it:
                    worst_i.append((med(it), n, trig))
        if worst_c:
            x = max(worst_c)
            T.append(("polite tree: ≤ 5× cgroup.kill (cgroup mode)", f"worst rea/cgroup.kill {x[0]:.2f}× (N={x[1]}, {x[2]}: {x[3]:.1f} vs {x[4]:.1f} ms)", x[0] <= 5.0))
        if worst_i:
            x = max(worst_i)
            T.append(("with the TERM-ignorer: ≤ grace + 25 ms (525 ms)", f"worst median {x[0]:.1f} ms (N={x[1]}, {x[2]})", x[0] <= GRACE_MS + 25))
    s2 = res.get("s2")
    if s2 is not None:
        for where in ("disk", "tmpfs"):
            rs = [r for r in s2 if r.get("where") == where and r.get("rea")]
            fs = [ns_ms(r["rea"].get("first_sweep_ns")) for r in rs if r["rea"].get("first_sweep_ns") is not None]
            pr = [r.get("probe_term_ms") for r in rs if r.get("probe_term_ms") is not None]
            if fs:
                T.append((f"controller SIGKILL → first TERM ≤ 1 ms median, ≤ 5 ms max (log on {where}, sweep record)",
                          f"{med(fs):.3f} / {max(fs):.3f} ms", med(fs) <= 1 and max(fs) <= 5))
            if pr:
                T.append((f"… the same, as the tree saw the TERM (log on {where}, probe)",
                          f"{med(pr):.3f} / {max(pr):.3f} ms", med(pr) <= 1 and max(pr) <= 5))
    s3 = res.get("s3")
    if s3 is not None:
        for who, past in (("rea", 100), ("rea-none", 300)):
            rs = [r for r in s3 if r.get("sup") == who and not r.get("error")]
            if rs:
                ts = [r.get("quiesce_ms") for r in rs]
                surv = max(r.get("survivors") or 0 for r in rs)
                ok = all(t is not None for t in ts) and surv == 0 and max(ts) - GRACE_MS <= past
                T.append((f"fork storm ({who}): 0 left, ≤ {past} ms past the grace", f"{surv} left; {mm([t - GRACE_MS for t in ts if t is not None])} ms past the grace", ok))
    s4 = res.get("s4")
    if s4 is not None and not s4.get("error"):
        for k, name in (("inproc", "in-process client, log on disk"), ("submit_cli", "submit CLI, log on disk"), ("inproc_tmpfs", "in-process client, log on tmpfs")):
            xs = [x / 1e6 for x in s4["lat_ns"][k]]
            rps = len(xs) / (sum(xs) / 1000)
            T.append((f"≥ 500 spawn round trips/s ({name})", f"{rps:.0f}/s", rps >= 500))
        t = pct([x / 1e6 for x in s4["exec_ns"]["timeout"]], 50)
        e = pct([x / 1e6 for x in s4["exec_ns"]["exec"]], 50)
        es = pct([x / 1e6 for x in s4["exec_ns"]["exec_tmpfs"]], 50)
        T.append(("`exec -- true` ≤ 3× `timeout 10 true` (TMPDIR on disk)", f"{e:.2f} vs {t:.2f} ms = {e / t:.1f}×", e / t <= 3))
        T.append(("… (TMPDIR on tmpfs)", f"{es:.2f} vs {t:.2f} ms = {es / t:.1f}×", es / t <= 3))
    s5 = res.get("s5")
    if s5 is not None:
        sh = med([v["seconds"] for v in s5["verify"] if v["tool"] == "sha256sum"])
        ve = med([v["seconds"] for v in s5["verify"] if v["tool"] == "verify"])
        T.append(("`rea-audit verify` ≥ 40 % of sha256sum throughput", f"{100 * sh / ve:.0f} % ({s5['log_bytes'] / 1e6 / ve:.0f} vs {s5['log_bytes'] / 1e6 / sh:.0f} MB/s)", sh / ve >= 0.4))
    s6 = res.get("s6")
    if s6 is not None:
        rss = [r["after_stop"]["hwm_kib"] for r in s6["rss"] if not r.get("error")]
        if rss:
            T.append(("peak RSS ≤ 8 MiB at 1000 processes", f"{med(rss) / 1024:.1f} / {max(rss) / 1024:.1f} MiB VmHWM", max(rss) <= 8192))
        idle = [r for r in s6["idle"] if not r.get("error")]
        if idle:
            v = [r["no_job"]["voluntary"] for r in idle] + [r["one_job"]["voluntary"] for r in idle]
            T.append(("idle wakeups ≈ 0", f"max {max(v)} voluntary switches in {idle[0]['no_job']['seconds']} s", max(v) <= 2))
    s8 = res.get("s8")
    if s8 is not None:
        T.extend(targets8(s8))
    if res.get("s9") is not None:
        T += holders.targets9(res["s9"])
    return T


def targets8(s8):
    T = []
    dl = s8.get("deadline", [])
    ok = [r for r in dl if not r.get("error") and r.get("lateness_ms") is not None]
    if dl:
        xs = [r["lateness_ms"] for r in ok]
        up = [r["lateness_upper_ms"] for r in ok]
        honest = all(r.get("trigger_reason") == "deadline" and r.get("flood_on_at_trigger") for r in ok)
        bad = len(dl) - len(ok)
        m = (f"{pct(up, 50):.2f} / {max(up):.2f} ms over {len(xs)} actions (upper bound; from `job_spawned`, a lower bound: "
             f"{pct(xs, 50):.2f} / {max(xs):.2f} ms)" if xs else "no figure")
        if bad:
            m += f"; {bad} errored"
        if not honest:
            m += "; a trigger was not the deadline or the flood was not on"
        T.append(("flood: deadline lateness p50 / max ≤ 50 ms", m, bool(xs) and not bad and honest and max(up) <= 50))
    fl = [r for r in s8.get("flood", []) if not r.get("error")]
    if s8.get("flood"):
        if fl:
            r = fl[0]
            worst = max(r["log_quiet_per_min"], r["log_flood_per_min"])
            T.append(("flood: log growth ≤ 1 MiB per minute of flood (the flood's records)",
                      f"{r['log_quiet_per_min'] / 1024:.1f} KiB/min alone, {r['log_flood_per_min'] / 1024:.1f} KiB/min beside round trips "
                      f"({r['log_total_per_min'] / 1024:.1f} KiB/min with the client's own records)",
                      worst <= 2**20))
            tt = r.get("trip_total_ms") or []
            fails = len(r.get("trip_failures") or []) + r.get("trips_bad", 0)
            m = f"{pct(tt, 50):.1f} / {max(tt):.1f} ms over {len(tt)}" if tt else "no round trip"
            if fails:
                m += f"; {fails} failed"
            T.append(("flood: well-behaved spawn round trip p50 / max ≤ 100 ms", m, bool(tt) and not fails and max(tt) <= 100))
        else:
            T.append(("flood: log growth and round trips", f"error: {s8['flood'][0].get('error')}", False))
    em = s8.get("emfile", [])
    if em:
        ok = [r for r in em if not r.get("error")]
        good = [r for r in ok if r.get("survivors") == 0 and r.get("positive") is True and not r.get("close_error")]
        surv = [r.get("survivors") for r in ok]
        m = f"{len(good)} of {len(em)} runs: 0 left and a positive receipt; survivors {surv}; quiescence {mm([r.get('quiesce_ms') for r in ok])} ms"
        bad = [r.get("close_error") or r.get("error") for r in em if r.get("close_error") or r.get("error")]
        if bad:
            m += f"; {bad[0][:80]}"
        T.append(("EMFILE (nofile 64:64, 200 children): 0 left, positive receipt", m, len(good) == len(em)))
    return T


# ----- main ----------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one small pass (N=20,200; 1 rep) to debug the harness")
    ap.add_argument("--full", action="store_true", help="repeat the peers' rows as often as the containing supervisors'")
    ap.add_argument("--reps-scale", type=int, default=1, help="multiply the repetition counts")
    ap.add_argument("--sections", default="1,2,3,4,5,6,7,8,9,10,11")
    ap.add_argument("--ns", help="section 1 only at these N (comma-separated), to iterate")
    ap.add_argument("--sups", help="sections 1 and 3 only for these supervisors (comma-separated)")
    ap.add_argument("--triggers", help="section 1 only for these triggers (comma-separated)")
    ap.add_argument("--polite-only", action="store_true", help="section 1 without the TERM-ignorer columns")
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install missing peers")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the per-case scratch directories")
    ap.add_argument("--report-only", metavar="RESULTS.json", help="rewrite the markdown from saved raw results")
    args = ap.parse_args()
    if args.report_only:
        with open(args.report_only) as f:
            saved = json.load(f)
        res, info = saved["results"], saved["info"]
        res["targets"] = targets(res)
        with open(args.out, "w") as f:
            f.write(report(res, info, args, saved["started"], saved["ended"]))
        log("wrote", args.out)
        return
    if os.environ.get("REA_BENCH_INNER") != "1":
        notes = [] if args.no_build else setup(args)
        os.environ["REA_BENCH_SETUP_NOTES"] = json.dumps(notes)
        enter_namespace([os.path.abspath(__file__), *sys.argv[1:], "--no-build"] if not args.no_build else [os.path.abspath(__file__), *sys.argv[1:]])
        return
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    t_start = mono()
    info = probe_environment(args)
    info["notes"] += json.loads(os.environ.get("REA_BENCH_SETUP_NOTES", "[]"))
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        info["cpu"] = "?"
    info["uptime"] = [("at start", uptime())]
    info["work"] = WORK
    os.makedirs(WORK, exist_ok=True)
    try:
        fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", WORK], capture_output=True, text=True).stdout.split()
        info["work_fs"] = " on ".join(fs) if fs else "?"
    except OSError:
        info["work_fs"] = "?"
    run = Runner(args, info)
    log("skipped:", info["skipped"] or "none", "cgroot:", info["cgroot"])
    res = {}
    secs = {int(x) for x in args.sections.split(",") if x.strip()}
    fns = {1: section1, 2: section2, 3: section3, 4: section4, 5: section5, 6: section6, 7: section7, 8: section8,
           9: lambda run, args: holders.section9(run, args, log, WORK, ROOT),
           10: lambda run, args: oneshot.section10(os.path.join(REL, "rea-watchdog"),
                                                   os.path.join(ROOT, "tools")),
           11: lambda run, args: stagehash.section11(REL, WORK)}
    try:
        for k in sorted(secs):
            info["uptime"].append((f"before section {k}", uptime()))
            t = mono()
            res[f"s{k}"] = fns[k](run, args)
            log(f"section {k} took {mono() - t:.0f}s")
    finally:
        run.cleanup()
    info["uptime"].append(("at end", uptime()))
    info["elapsed_s"] = mono() - t_start
    ended = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    raw = os.path.join(WORK, "last-run.json")
    with open(raw, "w") as f:
        json.dump({"results": res, "info": info, "started": started, "ended": ended}, f)
    res["targets"] = targets(res)
    with open(args.out, "w") as f:
        f.write(report(res, info, args, started, ended))
    log(f"wrote {args.out} (raw figures: {raw}) in {info['elapsed_s']:.0f}s")


if __name__ == "__main__":
    main()
