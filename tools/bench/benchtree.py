#!/usr/bin/env python3
"""The disposable tree of the cleanup benchmark (tools/bench/bench.py).

    benchtree.py --oracle FIFO --leaves N [--termignore] [--probe] [--then wait|exit]

Members: the root; a setsid escapee; a double-forked setsid daemon (its
middle process exits); a `fixtures/hopper.py` (the same argv as the
unrelated sibling the bench keeps alive outside the tree); N `/bin/sleep`
leaves (posix_spawn, so they are exec'd when it returns); optionally one
child that ignores SIGTERM, and a probe that notes the CLOCK_MONOTONIC
instant its SIGTERM arrived (written on the oracle as {"probe_term": NS}).

Oracle: the root opens FIFO for writing before any fork; every member
inherits that descriptor, so the bench's read end reaches EOF exactly when
the last member has exited. When every member exists the root writes
{"ready": true, "count": N, "root": PID, "t_exit": NS}; with --then exit it
then exits at once (t_exit is its CLOCK_MONOTONIC just before _exit), leaving
its members orphaned; with --then wait (default) it sleeps.

The bench finds the tree's members (and survivors) by a marker variable in
their environment; it sets it with `env MARKER=... python3 benchtree.py`.
"""
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOPPER = os.path.normpath(os.path.join(HERE, "..", "..", "fixtures", "hopper.py"))
SLEEP = "/bin/sleep"


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def set_comm(name):
    """Names the member in /proc/PID/comm, so a survivor says what it was."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name)
    except OSError:
        pass


def sleep_forever():
    while True:
        time.sleep(3600)


def main():
    args = sys.argv[1:]
    oracle, leaves, then, termignore, probe = None, 0, "wait", False, False
    while args:
        a = args.pop(0)
        if a == "--oracle":
            oracle = args.pop(0)
        elif a == "--leaves":
            leaves = int(args.pop(0))
        elif a == "--then":
            then = args.pop(0)
        elif a == "--termignore":
            termignore = True
        elif a == "--probe":
            probe = True
        else:
            sys.exit(f"benchtree.py: unknown argument {a!r}\n{__doc__}")
    if not oracle or then not in ("wait", "exit"):
        sys.exit(__doc__)
    set_comm("bt-root")
    fd = os.open(oracle, os.O_WRONLY)
    os.set_inheritable(fd, True)
    ack_r, ack_w = os.pipe()

    def member(fn):
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ack_r)
                fn()
            finally:
                os._exit(0)
        return pid

    def ack():
        os.write(ack_w, b".")

    def escapee():
        set_comm("bt-escapee")
        os.setsid()
        ack()
        sleep_forever()

    def daemon():
        os.setsid()
        if os.fork() == 0:
            set_comm("bt-daemon")
            ack()
            sleep_forever()
        os._exit(0)

    def ignorer():
        set_comm("bt-ignorer")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ack()
        sleep_forever()

    def prober():
        # SIGTERM blocked and taken with sigwaitinfo: no handler machinery
        # between the signal's arrival and the clock reading.
        set_comm("bt-probe")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        ack()
        signal.sigwaitinfo({signal.SIGTERM})
        t = mono_ns()
        os.write(fd, (json.dumps({"probe_term": t}) + "\n").encode())
        os._exit(0)

    expected = 1  # the root
    waits = []
    acks = 0
    waits.append(member(escapee))
    acks += 1
    waits.append(member(daemon))  # the middle: reaped below
    acks += 1
    expected += 2
    if termignore:
        member(ignorer)
        acks += 1
        expected += 1
    if probe:
        member(prober)
        acks += 1
        expected += 1
    # Members that exec: posix_spawn returns once the exec happened.
    os.posix_spawn(sys.executable, [sys.executable, HOPPER], os.environ)
    expected += 1
    for _ in range(leaves):
        os.posix_spawn(SLEEP, ["sleep", "3600"], os.environ)
    expected += leaves
    got = 0
    while got < acks:
        got += len(os.read(ack_r, acks - got))
    os.waitpid(waits[1], 0)  # the double fork's middle process
    line = {"ready": True, "count": expected, "root": os.getpid()}
    if then == "exit":
        line["t_exit"] = mono_ns()
        os.write(fd, (json.dumps(line) + "\n").encode())
        os._exit(0)
    os.write(fd, (json.dumps(line) + "\n").encode())
    sleep_forever()


if __name__ == "__main__":
    main()
