#!/usr/bin/env python3
"""Profiles rea-watchdog's stop procedure in one benchmark case.

    python3 tools/bench/profile.py TOOL [--n N] [--trigger cancel|ctlkill|exit] [--log disk|tmpfs]

TOOL: strace-c (syscall counts and wall time), strace-T (timeline with
per-call durations), perf (cpu-clock samples with call graphs, user and
kernel), callgrind (instruction counts; reproducible under load — but
valgrind 3.19 does not know pidfd_open, syscall 434, and rea-watchdog then
refuses to start: it needs a valgrind that does).

Runs the same case as section 1 (`rea-watchdog exec` over the tree, inside
private PID namespaces, as root), with the profiler attached to the watchdog
just before the trigger (valgrind wraps it from the start). Prints where the
output is, plus a short summary. Needs the release build (bench.py builds).
"""
import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tool", choices=["strace-c", "strace-T", "perf", "perf-stat", "perf-trace", "callgrind"])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--trigger", default="cancel", choices=["cancel", "ctlkill", "exit"])
    ap.add_argument("--log", default="disk", choices=["disk", "tmpfs"])
    ap.add_argument("--ignorer", action="store_true")
    ap.add_argument("--contain", default="cgroup", choices=["cgroup", "none"])
    args = ap.parse_args()
    if os.environ.get("REA_BENCH_INNER") != "1":
        bench.enter_namespace([os.path.abspath(__file__), *sys.argv[1:]])
        return
    ns = argparse.Namespace(keep=True, quick=True, full=False, reps_scale=1)
    info = bench.probe_environment(ns)
    run = bench.Runner(ns, info)
    spec = {"kind": "tree", "sup": "rea", "trigger": args.trigger, "n": args.n, "ignorer": args.ignorer, "audit_log": args.log,
            "contain": args.contain}
    if args.tool == "strace-c":
        spec["attach"] = ["strace", "-c", "-w", "-S", "time", "-o", "{scratch}/strace.txt", "-p", "{pid}"]
    elif args.tool == "strace-T":
        spec["attach"] = ["strace", "-tt", "-T", "-o", "{scratch}/strace.txt", "-p", "{pid}"]
    elif args.tool == "perf":
        spec["attach"] = ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "cpu-clock", "-F", "10000", "-g", "-o", "{scratch}/perf.data", "-p", "{pid}"]
    elif args.tool == "perf-trace":
        # A timeline of syscalls with durations, at tracepoint cost (strace's
        # ptrace stops make every call ~60 us and hide where time goes).
        spec["attach"] = ["perf", "trace", "-T", "-o", "{scratch}/trace.txt", "-p", "{pid}"]
    elif args.tool == "perf-stat":
        # Syscall counts at full speed (tracepoints, no ptrace).
        ev = ",".join(f"syscalls:sys_enter_{c}" for c in ("waitid", "openat", "read", "pidfd_open", "ioctl", "pidfd_send_signal", "epoll_wait", "epoll_ctl", "write", "fdatasync"))
        spec["attach"] = ["perf", "stat", "-e", ev, "-o", "{scratch}/perf-stat.txt", "-p", "{pid}"]
    elif args.tool == "callgrind":
        spec["wrap"] = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + "{scratch}/callgrind.out", "--dump-instr=no"]
    if args.tool == "callgrind":
        # valgrind's argument needs the case's scratch path: resolve it here.
        d = os.path.join(run.scratch_root, f"case-{run.n + 1:04d}")
        spec["wrap"] = [w.replace("{scratch}", d) for w in spec["wrap"]]
    r = run.case(spec, limit_s=600)
    import shutil
    shutil.rmtree(run.shm_root, ignore_errors=True)  # the scratch dir on disk is kept
    d = os.path.join(run.scratch_root, f"case-{run.n:04d}")
    print(json.dumps({k: r.get(k) for k in ("quiesce_ms", "survivors", "gave_up", "error", "rea")}, indent=1))
    print("scratch:", d)
    if args.tool.startswith("strace"):
        print(open(os.path.join(d, "strace.txt")).read()[-6000:])
    elif args.tool == "perf-stat":
        print(open(os.path.join(d, "perf-stat.txt")).read())
    elif args.tool == "perf-trace":
        print(open(os.path.join(d, "trace.txt")).read()[:6000])
    elif args.tool == "perf":
        out = subprocess.run(
            ["perf", "report", "-i", os.path.join(d, "perf.data"), "--stdio", "--no-children", "--sort", "sym", "-g", "none", "--percent-limit", "1"],
            capture_output=True, text=True)
        print(out.stdout[:8000])
    elif args.tool == "callgrind":
        f = glob.glob(os.path.join(d, "callgrind.out*"))
        if f:
            out = subprocess.run(["callgrind_annotate", "--inclusive=yes", f[0]], capture_output=True, text=True)
            print(out.stdout[:10000])


if __name__ == "__main__":
    main()
