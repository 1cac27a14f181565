#!/usr/bin/env python3
"""The cgroup v2 `cgroup.kill` reference supervisor of the benchmark.

    cgsup.py --cgroot DIR --name NAME [--deadline SECONDS] [--report FILE]
             [--ask-then-term GRACE_SECONDS] -- ARGV...

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

--ask-then-term GRACE: the floor of rea's stop policy instead (the bench's
`askterm` row). On the trigger: SIGTERM to ARGV's process through its
pidfd, and nothing else until it exited or GRACE/2 passed (docs/stop.md's ask);
then SIGTERM through a fresh pidfd to every member `cgroup.procs` lists,
repeated for newcomers until `populated 0` or the grace ran out; then
`cgroup.kill`. No identity read back, no record, no fsync, no reaping of
anyone but ARGV: what any supervisor that asks first and signals each
member must do, and nothing rea adds for proof.
"""
import os
import select
import signal
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    cgroot, name, deadline, report, askterm = None, None, None, None, None
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
        elif a == "--ask-then-term":
            askterm = float(args.pop(0))
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
    ev = os.open(os.path.join(group, "cgroup.events"), os.O_RDONLY)
    q = select.poll()
    q.register(ev, select.POLLPRI)
    if askterm is not None:
        ask_then_term(group, jobfd, ev, q, askterm)
    with open(os.path.join(group, "cgroup.kill"), "w") as f:
        f.write("1")
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


def ask_then_term(group, jobfd, ev, q, grace):
    """The ask (the leader alone, until it exits or half the grace), then
    SIGTERM to every member through a pidfd until `populated 0` or the end
    of the grace (see the module doc)."""
    start = time.monotonic()
    signal.pidfd_send_signal(jobfd, signal.SIGTERM)
    leader = select.poll()
    leader.register(jobfd, select.POLLIN)
    leader.poll(int(grace / 2 * 1000))
    termed = set()
    procs = os.path.join(group, "cgroup.procs")
    while time.monotonic() < start + grace:
        with open(procs) as f:
            pids = [int(p) for p in f.read().split()]
        for pid in pids:
            if pid in termed:
                continue
            termed.add(pid)
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                signal.pidfd_send_signal(fd, signal.SIGTERM)
            except OSError:
                pass
            os.close(fd)
        if "populated 0" in os.pread(ev, 4096, 0).decode():
            return
        q.poll(10)


if __name__ == "__main__":
    main()
