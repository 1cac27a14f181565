#!/usr/bin/env python3
"""The one-shot `rea_client.run` on CPython's grandchild case, and beside
subprocess.run on the cases that must not differ. Driven by
tests/suite/runner.rs:

    oneshot.py WATCHDOG TOOLS

Prints one JSON object. The oracle for "nothing is left" is a pipe: its
write end is the program's stdin, so the shell and both sleeps inherit
it; once run() returned and this process closed its own copy, EOF on the
read end means every one of them has exited.
"""
import json
import os
import select
import subprocess
import sys
import time

WATCHDOG, TOOLS = sys.argv[1:3]
sys.path.insert(0, TOOLS)
import rea_client  # noqa: E402


def eof_within(fd, seconds):
    until = time.monotonic() + seconds
    while True:
        left = until - time.monotonic()
        p = select.poll()
        p.register(fd, select.POLLIN)
        if left <= 0 or not p.poll(int(left * 1000)):
            return False
        if not os.read(fd, 4096):
            return True


def grandchild(cmd):
    r, w = os.pipe()
    t0 = time.monotonic()
    out = {}
    try:
        rea_client.run(cmd, capture_output=True, timeout=1, stdin=w, binary=WATCHDOG)
        out["raised"] = None
    except subprocess.TimeoutExpired as e:
        out["raised"] = "TimeoutExpired"
        out["stdout"] = (e.output or b"").decode()
        out["stderr"] = (e.stderr or b"").decode()
    out["seconds"] = round(time.monotonic() - t0, 3)
    os.close(w)
    out["nothing_left"] = eof_within(r, 5)
    os.close(r)
    return out


def same(args, **kw):
    def one(fn):
        try:
            c = fn(args, **kw)
            return [c.returncode, c.stdout, c.stderr]
        except OSError as e:
            return [type(e).__name__, e.errno, e.filename]
        except subprocess.CalledProcessError as e:
            return ["CalledProcessError", e.returncode, e.output, e.stderr]
    a = one(subprocess.run)
    b = one(lambda *a, **k: rea_client.run(*a, binary=WATCHDOG, **k))
    return {"subprocess": repr(a), "run": repr(b), "same": a == b}


def main():
    import tempfile
    fd, noexec = tempfile.mkstemp(prefix="rea-noexec.")
    os.write(fd, b"#!/bin/sh\necho never\n")
    os.fchmod(fd, 0o644)
    os.close(fd)
    result = {
        "grandchild": grandchild(["sh", "-c", "sleep 30 & sleep 30"]),
        "orphan": None,
        "cases": {
            "output and status": same(["sh", "-c", "echo out; echo err >&2; exit 3"],
                                      capture_output=True),
            "signal": same(["sh", "-c", "kill -TERM $$"], capture_output=True),
            "input, text, cwd, env": same(["sh", "-c", "cat; pwd; echo $FOO"], input="in\n",
                                          text=True, capture_output=True, cwd="/",
                                          env={"FOO": "foo", "PATH": os.environ["PATH"]}),
            "check": same(["false"], check=True, capture_output=True),
            "missing program": same(["no-such-program-rea"]),
            "not executable": same([noexec]),
        },
    }
    # An orphan the program leaves behind: run() returns its status at
    # once and the orphan is ended (subprocess.run would wait 30 s for the
    # pipe it holds, then leave it running).
    r, w = os.pipe()
    t0 = time.monotonic()
    done = rea_client.run(["sh", "-c", "sleep 30 & echo started"], capture_output=True,
                          stdin=w, binary=WATCHDOG)
    secs = round(time.monotonic() - t0, 3)
    os.close(w)
    result["orphan"] = {"returncode": done.returncode, "stdout": done.stdout.decode(),
                        "stderr": done.stderr.decode(), "seconds": secs,
                        "nothing_left": eof_within(r, 5)}
    os.close(r)
    os.unlink(noexec)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
