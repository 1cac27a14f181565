#!/usr/bin/env python3
"""A harness written like the seed's: `rehearse(runtime, *, run=subprocess.run,
bwrap_bin="/usr/bin/bwrap")` runs the install phase (200 s) and the
rehearsal (260 s), whose program asks for three nested launchers (60 s
each), each phase in the owner's sandbox: bwrap with a read-only root and
no network. Driven by tests/suite/runner.rs, one scenario a run:

    harness.py SCENARIO WATCHDOG TOOLS HOPPER BWRAP WORK

SCENARIO is plain-ok, runner-ok, plain-hang or runner-hang: `run` is
subprocess.run (plain) or `Runner(wd, wrap=bwrap_argv)`; "hang" has the
second launcher start the Hopper (`python3 HOPPER`, the unrelated sibling's
exact argv) and outlive a 2 s launcher timeout. Prints one JSON object:
what rehearse returned or raised, the processes left alive (read from a
FIFO each of them holds open: EOF means none is left), and for the Runner
what the next call raised and the argv the audit log recorded.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

SCENARIO, WATCHDOG, TOOLS, HOPPER, BWRAP, WORK = sys.argv[1:7]
sys.path.insert(0, TOOLS)
import rea_client  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def sandbox(bwrap_bin, work):
    """The owner-built argv prefix: read-only root, the work directory
    writable, no network (and no --die-with-parent: the owner's argv)."""
    return [bwrap_bin, "--ro-bind", "/", "/", "--bind", work, work, "--unshare-net", "--"]


def rehearse(runtime, *, run=subprocess.run, bwrap_bin="/usr/bin/bwrap",
             launcher_timeout=60, mode="ok", oracle="", hopper=""):
    """The seed's harness API: `run` in place of subprocess.run."""
    box = sandbox(bwrap_bin, os.path.dirname(runtime))
    install = run(box + [PY, os.path.join(runtime, "install.py"), runtime],
                  timeout=200, capture_output=True, check=True)
    rehearsal = run(box + [PY, os.path.join(runtime, "rehearsal.py"), runtime, TOOLS,
                           str(launcher_timeout), mode, oracle, hopper],
                    timeout=260, capture_output=True, check=True)
    return {"install": install.stdout.decode(), "rehearsal": rehearsal.stdout.decode(),
            "codes": [install.returncode, rehearsal.returncode]}


def watch(fd, seconds):
    """Reports read from the oracle FIFO, and whether it reached EOF (every
    process that opened it has exited) within `seconds`."""
    buf, until = b"", time.monotonic() + seconds
    while True:
        left = until - time.monotonic()
        p = select.poll()
        p.register(fd, select.POLLIN)
        if left <= 0 or not p.poll(int(left * 1000)):
            return [json.loads(x) for x in buf.splitlines()], False
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            return [json.loads(x) for x in buf.splitlines()], True
        buf += chunk


def stat(pid):
    """(state, start time) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    fields = data[data.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[19])


def end_survivors(reports, settle):
    """The reported processes still alive: this script's own descendants,
    ended through a pidfd (never by name).

    A process is dead once its pidfd is readable (the kernel's exit
    notification), not when the oracle FIFO reaches EOF: a process closes
    its files in exit before it is reported exited, so right after EOF it
    may still show as running. `settle` bounds the wait for that exit
    (used only once EOF has proved every holder is exiting); 0 looks once.
    """
    alive = []
    until = time.monotonic() + settle
    for r in reports:
        try:
            fd = os.pidfd_open(r["pid"])
        except ProcessLookupError:
            continue
        try:
            _, st = stat(r["pid"])
            if st != r["start_time"]:
                continue  # another process now has the pid
            p = select.poll()
            p.register(fd, select.POLLIN)
            left = max(0.0, until - time.monotonic())
            if not p.poll(int(left * 1000)):
                alive.append(r["role"])
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass
        finally:
            os.close(fd)
    return alive


def main():
    plain = SCENARIO.startswith("plain")
    mode = "hang" if SCENARIO.endswith("hang") else "ok"
    runtime = os.path.join(WORK, "runtime")
    shutil.copytree(os.path.join(HERE, "runtime"), runtime)
    oracle = os.path.join(WORK, "oracle")
    os.mkfifo(oracle, 0o600)
    rfd = os.open(oracle, os.O_RDONLY | os.O_NONBLOCK)
    out = {"scenario": SCENARIO}
    wd = None
    if not plain:
        wd = rea_client.Watchdog.start(WATCHDOG, state_dir=os.path.join(WORK, "state"),
                                       audit_log=os.path.join(WORK, "audit.jsonl"))
    run = subprocess.run if plain else rea_client.Runner(wd, wrap=rea_client.bwrap_argv)
    t0 = time.monotonic()
    try:
        out["result"] = rehearse(runtime, run=run, bwrap_bin=BWRAP,
                                 launcher_timeout=2 if mode == "hang" else 60, mode=mode,
                                 oracle=oracle if mode == "hang" else "", hopper=HOPPER)
    except BaseException as e:  # noqa: B902 (reported, not swallowed: the test reads it)
        out["raised"] = type(e).__name__
        out["raised_after_s"] = round(time.monotonic() - t0, 2)
        if isinstance(e, subprocess.CalledProcessError):
            out["stderr_tail"] = (e.stderr or b"").decode(errors="replace")[-300:]
    if mode == "hang":
        reports, eof = watch(rfd, 10 if not plain else 4)
        out["reported"] = sorted(r["role"] for r in reports)
        out["eof"] = eof
        out["survivors"] = sorted(end_survivors(reports, 10 if eof else 0))
    if wd is not None:
        for label, again in (("next_call", run),
                             ("fresh_runner", rea_client.Runner(wd, wrap=rea_client.bwrap_argv))):
            try:
                again(sandbox(BWRAP, WORK) + ["/bin/true"], timeout=5)
                out[label] = "returned"
            except rea_client.ActionStopped as e:
                out[label] = f"ActionStopped:{e.reason}"
            except BaseException as e:  # noqa: B902
                out[label] = f"{type(e).__name__}:{e}"
        receipt = wd.close()
        out["receipt"] = [receipt.outcome, receipt.stop_reason, receipt.positive,
                          receipt.exit_code]
        with open(os.path.join(WORK, "audit.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        out["spawned"] = [r["data"]["argv"] for r in recs if r["kind"] == "job_spawned"]
    os.close(rfd)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
