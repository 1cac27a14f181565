"""The remote harness of rea_client.ssh, uploaded into the stage as
STAGE/harness.py and run as `ssh HOST python3 STAGE/harness.py --stage STAGE
--events FILE --phases JSON [--wait-eof SECONDS]`.

It imports rea_client from STAGE/rea_client.zip (uploaded beside it), starts
`STAGE/.rea/bin/rea-watchdog run` (which leaves this session itself:
setsid, so the SSH session's hangup does not reach it; this harness stays
its parent and root controller, so killing the harness is root_lost), runs
each phase through
`rea_client.Runner`, closes the action and prints the close head.

stdout carries one JSON line per event for the controller (`harness`,
`watchdog`, `phase`, `closed`, `failed`). Every line, and everything the
SSH session does to this process, also goes to the events file (outside the
stage): a signal (SIGHUP, SIGPIPE, SIGTERM, SIGINT: recorded, then carried
on), EOF on stdin (`stdin_eof`), a failed write to stdout (`stdout_error`).
After `closed` it waits up to --wait-eof seconds for EOF on stdin (the
controller closes it once it has the line, sshd does when the connection is
gone), so that what sshd did is recorded whatever the timing.
"""

import argparse
import errno
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Optional


class Events:
    """Appends JSON lines to the events file (O_APPEND: one write each)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.t0 = time.monotonic()
        self.stdout_ok = True
        self.eof = threading.Event()

    def note(self, event: dict[str, Any]) -> None:
        event = {**event, "t": round(time.monotonic() - self.t0, 3)}
        os.write(self.fd, (json.dumps(event) + "\n").encode())

    def emit(self, event: dict[str, Any]) -> None:
        """To the controller (stdout) and to the file."""
        self.note({**event, "to": "stdout"})
        if not self.stdout_ok:
            return
        try:
            os.write(1, (json.dumps(event) + "\n").encode())
        except OSError as e:
            self.stdout_ok = False
            self.note({"event": "stdout_error", "errno": errno.errorcode.get(e.errno or 0, "?"),
                       "while": event.get("event")})


def _watch_stdin(ev: Events) -> None:
    while True:
        try:
            b = os.read(0, 4096)
        except OSError as e:
            ev.note({"event": "stdin_error", "errno": errno.errorcode.get(e.errno or 0, "?")})
            break
        if not b:
            ev.note({"event": "stdin_eof"})
            break
    ev.eof.set()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--stage", required=True)
    p.add_argument("--watchdog", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--audit-log", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--phases", required=True)
    p.add_argument("--wait-eof", type=float, default=60.0)
    a = p.parse_args()
    ev = Events(a.events)

    def on_signal(sig: int, _frame: Any) -> None:
        ev.note({"event": "signal", "signal": signal.Signals(sig).name})

    for s in (signal.SIGHUP, signal.SIGPIPE, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    threading.Thread(target=_watch_stdin, args=(ev,), daemon=True).start()
    sys.path.insert(0, os.path.join(a.stage, "rea_client.zip"))
    import rea_client as rc

    pid = os.getpid()
    ev.emit({"event": "harness", "pid": pid, "start_time": rc.start_time(pid),
             "sid": os.getsid(0), "tty": os.isatty(0)})

    err = open(a.events + ".watchdog-stderr", "ab")
    code = 0
    try:
        wd = rc.Watchdog.start(a.watchdog, state_dir=a.state_dir, audit_log=a.audit_log,
                               staging=a.stage, stderr=err)
    except rc.ReaError as e:
        ev.emit({"event": "failed", "error": f"the watchdog did not start: {e}"})
        return 3
    # The watchdog's own pid, from its ready line (it is ours, wd.pid, unless
    # setsid was refused and it forked, leaving a shim: docs/architecture.md).
    with open(os.path.join(a.state_dir, "ready.json")) as f:
        ready = json.load(f)
    ev.emit({"event": "watchdog", "pid": ready["pid"], "start_time": ready["start_time"],
             "child": wd.pid, "run_id": wd.run_id, "audit_log": wd.audit_log})
    run = rc.Runner(wd)
    subst = {"{stage}": a.stage, "{python}": sys.executable, "{watchdog}": a.watchdog}
    try:
        for ph in json.loads(a.phases):
            argv = [_subst(x, subst) for x in ph["argv"]]
            ev.emit({"event": "phase", "name": ph["name"], "state": "started"})
            env: Any = None   # the Runner's Env: str names and values here
            if ph.get("env") is not None:
                env = {k: _subst(v, subst) for k, v in ph["env"].items()}
            done = run(argv, timeout=ph["timeout"], inner_alarm=ph.get("inner_alarm"),
                       env=env, capture_output=True, name=ph["name"])
            ev.emit({"event": "phase", "name": ph["name"], "state": "ended",
                     "code": done.returncode})
            if done.returncode != 0:
                code = 1
                break
        receipt = wd.close()
    except (rc.ReaError, OSError) as e:
        # The watchdog is gone (or refused): no close of something we
        # cannot see; the controller reconciles.
        ev.emit({"event": "failed", "error": f"{type(e).__name__}: {e}"})
        return 3
    ev.emit({"event": "closed", "head": receipt.head, "exit_code": receipt.exit_code,
             "outcome": receipt.outcome, "positive": receipt.positive,
             "stop_reason": receipt.stop_reason})
    if not ev.eof.wait(a.wait_eof):
        ev.note({"event": "no_stdin_eof", "waited": a.wait_eof})
    return code


def _subst(s: str, table: dict[str, str]) -> str:
    for k, v in table.items():
        s = s.replace(k, v)
    return s


if __name__ == "__main__":
    sys.exit(main())
