#!/usr/bin/env python3
"""The cgroup v2 `cgroup.kill` reference supervisor of the benchmark.

    cgsup.py --cgroot DIR --name NAME [--deadline SECONDS] [--report FILE] -- ARGV...

Creates DIR/NAME (a fresh cgroup v2 group), starts ARGV inside it, and on
the first of: SIGTERM/SIGINT to this process (cancel), its parent's death
(controller SIGKILL: the parent's pidfd becomes readable), ARGV's exit (the
job exits, its orphans stay in the group), or the deadline, writes "1" to
DIR/NAME/cgroup.kill: the kernel SIGKILLs every member at once. It then
waits for `populated 0` in cgroup.events, removes the group and exits 0.
Exit 125 when the group cannot be created (the bench then skips this row).
--report FILE: writes {"deadline_ns": N} there, the CLOCK_MONOTONIC instant
its deadline falls (the bench's trigger instant for the deadline trigger).

It stays outside the group itself, so the kill never reaches it. This is the
kernel's own limit (no TERM grace, no escape by setsid or double fork), in
the same shape as the other supervisors.
"""
import os
import select
import signal
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    cgroot, name, deadline, report = None, None, None, None
    while args and args[0] != "--":
        a = args.pop(0)
        if a == "--cgroot":
            cgroot = args.pop(0)
        elif a == "--name":
            name = args.pop(0)
        elif a == "--deadline":
            deadline = float(args.pop(0))
        elif a == "--report":
            report = args.pop(0)
        else:
            sys.exit(__doc__)
    argv = args[1:]
    if not cgroot or not name or not argv:
        sys.exit(__doc__)
    group = os.path.join(cgroot, name)
    try:
        os.mkdir(group)
    except OSError as e:
        print(f"cgsup: cannot create {group}: {e}", file=sys.stderr)
        sys.exit(125)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    fired = []
    signal.signal(signal.SIGTERM, lambda s, f: fired.append(s))
    signal.signal(signal.SIGINT, lambda s, f: fired.append(s))
    parent = os.pidfd_open(os.getppid())
    procs = os.path.join(group, "cgroup.procs")

    def enter():
        with open(procs, "w") as f:
            f.write("0")

    job = subprocess.Popen(argv, preexec_fn=enter)
    jobfd = os.pidfd_open(job.pid)
    until = None if deadline is None else time.monotonic() + deadline
    if report and until is not None:
        with open(report, "w") as f:
            f.write('{"deadline_ns": %d}\n' % int(until * 1e9))
    p = select.poll()
    for fd in (wake_r, parent, jobfd):
        p.register(fd, select.POLLIN)
    while True:
        left = None if until is None else max(0, int((until - time.monotonic()) * 1000))
        ready = p.poll(left)
        if fired or ready or (until is not None and time.monotonic() >= until):
            break
    with open(os.path.join(group, "cgroup.kill"), "w") as f:
        f.write("1")
    ev = os.open(os.path.join(group, "cgroup.events"), os.O_RDONLY)
    q = select.poll()
    q.register(ev, select.POLLPRI)
    give_up = time.monotonic() + 10
    while time.monotonic() < give_up:
        data = os.pread(ev, 4096, 0).decode()
        if "populated 0" in data:
            break
        q.poll(100)
    job.wait()
    try:
        os.rmdir(group)
    except OSError as e:
        print(f"cgsup: cannot remove {group}: {e}", file=sys.stderr)
    sys.exit(0)


if __name__ == "__main__":
    main()
