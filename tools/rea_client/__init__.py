#!/usr/bin/env python3
"""rea_client: a stdlib-only Python client for rea-watchdog controllers.

A controller starts one watchdog per action, asks it to run jobs (each job is
the watchdog's child, not the controller's), closes the action and pins the
head hash of the sealed audit log, then asks `rea-audit verify` whether the
staging directory may be deleted. Requests and replies follow
audit-schema/request.schema.json and reply.schema.json.

    import rea_client as rc

    wd = rc.Watchdog.start("target/release/rea-watchdog",
                           state_dir="/tmp/act1/state", audit_log="/tmp/act1/audit.jsonl",
                           staging="/srv/stage")
    job = wd.submit(["/usr/bin/python3", "install.py"], deadline=200, name="install",
                    capture=True)
    print(job.outcome, job.code, job.stdout.decode())   # "exited" 0 "..."
    receipt = wd.close()                                # waits for the watchdog to exit
    verdict = rc.verify("target/release/rea-audit", receipt.audit_log,
                        expect_head=receipt.head, staging="/srv/stage")
    if rc.may_delete(receipt, verdict):   # the watchdog's exit 0 *and* delete_allowed
        shutil.rmtree("/srv/stage")

From inside a job (a phase asking for a nested launcher), connect to the
watchdog the job belongs to: `rc.Client.from_env().submit([...], deadline=60)`.

Every request is sent as the calling process (its pid, its start time from
/proc/self/stat field 22, its uid); the watchdog checks that identity and
that the caller is its root controller or a descendant. Errors are
exceptions (`ReaError` and subclasses) with a message that says what went
wrong. Nothing here waits forever on a dead watchdog: every wait also watches
the watchdog's pidfd (bound by pid *and* start time, from ready.json), and a
missing, foreign or stale state directory is refused before anything is sent.
Signals, where this module sends any (`Watchdog.kill`), go only through a
pidfd of a process this process started.

Durations (a job's `deadline` and `inner_alarm`, the watchdog's
`action_deadline`, `term_grace` and `kill_bound`, and every `wait`/`timeout`)
are seconds as a number (`60`, `0.5`) or a string as rea-watchdog's command
line reads them: `"60"`, `"0.5"`, `"500ms"`, `"10s"`, `"2m"`, `"1h"`, `"1d"`.
A string that is not a duration raises ValueError naming it.

Needs Linux 5.3+ and Python 3.9+ (os.pidfd_open, signal.pidfd_send_signal);
an older Python gets an ImportError saying so. Install with
`pip install ./tools` (a single stdlib-only module), or put tools/ on sys.path.
"""

# The version check comes first, and everything in this file is syntax that
# Python 3.6 parses (annotations are only evaluated after this check has run),
# so an old interpreter gets this message, not an AttributeError further on.
import sys

if sys.version_info < (3, 9):
    raise ImportError(
        "rea_client needs Python 3.9+ and Linux 5.3+ (os.pidfd_open, "
        "signal.pidfd_send_signal); this is Python %d.%d" % tuple(sys.version_info[:2]))

import base64
import errno
import json
import math
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from typing import IO, Any, Iterable, Mapping, Optional, TypeVar, Union

#: A duration: seconds as a number, or a string like the CLI's ("500ms", "2m").
Duration = Union[float, str]
#: A filesystem path.
StrPath = Union[str, "os.PathLike[str]"]
#: A reply, a ready line, a record: one JSON object.
JSONObject = dict[str, Any]
_C = TypeVar("_C", bound="Client")
_R = TypeVar("_R", "Verdict", "Reconciled")

PROTOCOL_VERSION = 1
MAX_REQUEST = 4096
_SLICE_MS = 500

# Every public name (tests/suite/python_client.rs checks that nothing
# public is missing and nothing listed is absent).
__all__ = [
    "ReaError", "StaleStateDir", "WatchdogGone", "Refused", "ReplyTimeout",
    "ActionStopped", "OutputLimitExceeded",
    "Watchdog", "Client", "Job", "JobResult", "Receipt", "Verdict", "Reconciled",
    "Runner", "run", "bwrap_argv", "DIE_WITH_PARENT",
    "verify", "reconcile", "may_delete", "read_receipt", "bind", "start_time",
    "Duration", "StrPath", "JSONObject", "STOP_SIGNALS", "PROTOCOL_VERSION", "MAX_REQUEST",
]


class ReaError(Exception):
    """Anything that went wrong talking to rea-watchdog or rea-audit."""


class StaleStateDir(ReaError):
    """The state directory is missing, foreign, or no watchdog serves it."""


class WatchdogGone(ReaError):
    """The watchdog exited (or was killed) before it answered."""


class ReplyTimeout(ReaError):
    """No reply within the wait the caller allowed."""


class Refused(ReaError):
    """The watchdog refused a request; nothing was launched or changed.
    `reason` is the refusal code (docs/requests.md); `stop_reason` says why
    the action stopped when `reason` is "aborted"; `errno` is what exec,
    chdir or fork said for "not_found", "not_executable", "spawn_failed"."""

    def __init__(self, reason: str, detail: str, request_id: Optional[str] = None,
                 stop_reason: Optional[str] = None, errno: Optional[int] = None) -> None:
        super().__init__(f"request {request_id or '?'} refused: {reason} ({detail})")
        self.reason = reason
        self.detail = detail
        self.request_id = request_id
        self.stop_reason = stop_reason
        self.errno = errno


# ----- process identity ---------------------------------------------------

def _stat_fields(pid: Union[int, str]) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # comm may contain spaces and ')': split after the last ')'.
    return data[data.rindex(b")") + 2:].split()


def start_time(pid: Union[int, str] = "self") -> int:
    """Field 22 of /proc/PID/stat (clock ticks since boot)."""
    return int(_stat_fields(pid)[19])


def _uid(pid: Union[int, str]) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise ReaError(f"/proc/{pid}/status has no Uid line")


def bind(pid: int, expected_start_time: int, expected_uid: Optional[int] = None) -> int:
    """A pidfd proven to name (pid, start time, uid): pidfd_open first, then
    /proc is read back. Raises ProcessLookupError when that process is gone
    (or the pid now names another one)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise ProcessLookupError(f"pid {pid} is not alive") from None
    try:
        st = start_time(pid)
        uid = _uid(pid)
    except (FileNotFoundError, ProcessLookupError):
        os.close(fd)
        raise ProcessLookupError(f"pid {pid} is not alive") from None
    if st != expected_start_time or (expected_uid is not None and uid != expected_uid):
        os.close(fd)
        raise ProcessLookupError(
            f"pid {pid} now names another process (start time {st}, uid {uid}; "
            f"expected {expected_start_time}, {expected_uid})")
    return fd


def _readable(fd: int, timeout_ms: int = 0) -> bool:
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(timeout_ms))


_counter = [0]


def _request_id(tag: str) -> str:
    _counter[0] += 1
    tag = "".join(c if c.isalnum() or c in "_.-" else "_" for c in tag)[:24] or "req"
    return f"{tag}-{os.getpid()}-{_counter[0]}-{os.urandom(4).hex()}"


# rea-watchdog's duration units (src/units.rs parse_duration), in ns.
_UNIT_NS = {"": 10**9, "s": 10**9, "ms": 10**6, "m": 60 * 10**9, "h": 3600 * 10**9,
            "d": 86400 * 10**9}
_MAX_NS = 2**64 - 1


def _parse_duration_ns(text: str, what: str = "duration") -> int:
    """A duration string read as rea-watchdog reads its command line
    (src/units.rs `parse_duration`): `60` (seconds), `0.5`, `500ms`, `10s`,
    `2m`, `1h`, `1d`; at most 9 decimal places; no sign, no exponent.
    Returns nanoseconds; ValueError (naming `text`) for anything else."""
    t = text.strip()
    if t.startswith("-"):
        raise ValueError(f"{what} {text!r}: a duration cannot be negative")
    split = next((i for i, c in enumerate(t) if c not in "0123456789."), len(t))
    num, unit = t[:split], t[split:]
    unit_ns = _UNIT_NS.get(unit)
    if unit_ns is None:
        raise ValueError(f"{what} {text!r}: unknown unit {unit!r} (use ms, s, m, h or d)")
    whole, _, frac = num.partition(".")
    if (not whole and not frac) or "." in frac:
        raise ValueError(f"{what} {text!r} is not a duration (try 60, 0.5, 500ms, 2m)")
    if len(frac) > 9:
        raise ValueError(f"{what} {text!r}: at most 9 decimal places")
    ns = int(whole or "0") * unit_ns + int(frac.ljust(9, "0")) * unit_ns // 10**9
    if ns > _MAX_NS:
        raise ValueError(f"{what} {text!r} is too large")
    return ns


def _number_or_text(value: object, what: str) -> None:
    """ValueError naming `what` unless `value` is a number of seconds or a
    duration string (a bool is neither, though Python counts it an int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(
            f"{what} {value!r}: seconds as a number, or a duration string (60, 0.5, \"500ms\")")


def _seconds(value: Duration, what: str = "timeout") -> float:
    """A wait in seconds: a number as given, or a duration string."""
    _number_or_text(value, what)
    if isinstance(value, str):
        return _parse_duration_ns(value, what) / 10**9
    return value


def _duration_ms(seconds: Duration, what: str = "deadline") -> int:
    """A positive duration in whole milliseconds (rounded): seconds as a
    number (int or float), or a string as the CLI reads it ("500ms", "2m")."""
    _number_or_text(seconds, what)
    if isinstance(seconds, str):
        ms = (_parse_duration_ns(seconds, what) + 500_000) // 1_000_000
    else:
        secs = float(seconds)
        if not math.isfinite(secs):
            raise ValueError(f"{what} {seconds!r} is not a finite number of seconds")
        ms = int(round(secs * 1000))
    if ms <= 0:
        raise ValueError(f"a {what} must be positive, got {seconds!r}")
    return ms


def _flag_ms(value: Duration, what: str) -> int:
    """A watchdog flag's duration in ms: zero allowed (`term_grace=0`),
    otherwise as `_duration_ms`."""
    _number_or_text(value, what)
    if isinstance(value, str):
        if _parse_duration_ns(value, what) == 0:
            return 0
    elif not value:
        return 0
    return _duration_ms(value, what)


STOP_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM")


def _stop_signal(sig: Union[str, int]) -> str:
    """ "USR1", "SIGUSR1", "usr1" or signal.SIGUSR1 -> "USR1"; else ValueError."""
    if isinstance(sig, int):
        try:
            sig = signal.Signals(sig).name
        except ValueError:
            raise ValueError(f"stop_signal {sig!r} is not a signal") from None
    name = str(sig).upper()
    name = name[3:] if name.startswith("SIG") else name
    if name not in STOP_SIGNALS:
        raise ValueError(f"stop_signal {sig!r} is not one of {', '.join(STOP_SIGNALS)}")
    return name


# ----- results ------------------------------------------------------------

class JobResult:
    """How a job ended: `outcome` is "exited" or "stopped"."""

    def __init__(self, accepted: JSONObject, final: JSONObject) -> None:
        self.accepted = accepted
        self.reply = final
        self.outcome: str = final["type"]
        self.job: int = final["job"]
        self.pid: int = accepted["pid"]
        self.status: JSONObject = final["status"]         # {"code": N} or {"signal": N}
        self.stop_reason: Optional[str] = final.get("reason")    # only when stopped
        self.duration_ms: int = final["duration_ms"]
        self.output_capped: bool = final["output_capped"]
        self.stdout = _decode(final["stdout"])
        self.stderr = _decode(final["stderr"])
        self.stdout_bytes: int = final["stdout"]["bytes"]
        self.stderr_bytes: int = final["stderr"]["bytes"]

    @property
    def code(self) -> Optional[int]:
        """The exit code, or None when killed by a signal."""
        code: Optional[int] = self.status.get("code")
        return code

    @property
    def signal(self) -> Optional[int]:
        sig: Optional[int] = self.status.get("signal")
        return sig

    @property
    def shell_status(self) -> int:
        """Like a shell's $?: the code, or 128+N for signal N."""
        code = self.code
        return code if code is not None else 128 + int(self.status["signal"])

    @property
    def ok(self) -> bool:
        return self.outcome == "exited" and self.code == 0

    def __repr__(self) -> str:
        how = f"stopped ({self.stop_reason})" if self.outcome == "stopped" else "exited"
        return f"<JobResult job {self.job} {how} status {self.status}>"


def _decode(stream: JSONObject) -> Optional[bytes]:
    data = stream.get("data_b64")
    return base64.b64decode(data) if data is not None else None


class Receipt:
    """The end of an action: the close reply and/or the sealed line, plus the
    receipt record itself (read from the log and checked against the head)."""

    def __init__(self, outcome: Optional[str], stop_reason: Optional[str],
                 positive: Optional[bool], head: Optional[str], audit_log: Optional[str],
                 run_id: Optional[str] = None, exit_code: Optional[int] = None,
                 record: Optional[JSONObject] = None) -> None:
        self.outcome = outcome
        self.stop_reason = stop_reason
        self.positive = positive
        self.head = head
        self.audit_log = audit_log
        self.run_id = run_id
        self.exit_code = exit_code
        self.record = record     # the receipt's "data" (counts, quiescent, ...)

    def __repr__(self) -> str:
        return (f"<Receipt {self.outcome} stop_reason={self.stop_reason} "
                f"positive={self.positive} head={self.head}>")


def read_receipt(audit_log: StrPath, head: Optional[str] = None) -> Optional[JSONObject]:
    """The receipt record of a sealed log (its `data`), or None if the last
    line is not a receipt. With `head`, the last line's SHA-256 must match."""
    import hashlib
    with open(audit_log, "rb") as f:
        data = f.read()
    if not data.endswith(b"\n"):
        return None
    last = data[:-1].rsplit(b"\n", 1)[-1]
    if head is not None and hashlib.sha256(last).hexdigest() != head:
        raise ReaError(f"{audit_log}: the last line does not hash to the pinned head {head}")
    rec = json.loads(last)
    if rec.get("kind") != "receipt":
        return None
    record: JSONObject = rec["data"]
    return record


# ----- talking to a watchdog ----------------------------------------------

class Client:
    """A checked connection to one watchdog's state directory.

    Refuses (StaleStateDir) a directory that is missing, not ours, not 0700,
    has no request FIFO or ready.json, or whose watchdog (pid *and* start
    time) is gone."""

    def __init__(self, state_dir: StrPath) -> None:
        self.state_dir: str = os.path.abspath(state_dir)
        uid = os.geteuid()
        try:
            st = os.lstat(self.state_dir)
        except FileNotFoundError:
            raise StaleStateDir(f"state directory {self.state_dir} does not exist") from None
        if not stat.S_ISDIR(st.st_mode):
            raise StaleStateDir(f"state directory {self.state_dir} is not a directory")
        if st.st_uid != uid:
            raise StaleStateDir(
                f"state directory {self.state_dir} belongs to uid {st.st_uid}, not to us "
                f"({uid}): refusing a foreign watchdog")
        if st.st_mode & 0o077:
            raise StaleStateDir(
                f"state directory {self.state_dir} has mode {st.st_mode & 0o777:o}; "
                "a watchdog's is 0700")
        fifo = os.path.join(self.state_dir, "requests")
        try:
            fst = os.lstat(fifo)
        except FileNotFoundError:
            raise StaleStateDir(
                f"{self.state_dir}: no request FIFO: not a watchdog state directory") from None
        if not stat.S_ISFIFO(fst.st_mode) or fst.st_uid != uid:
            raise StaleStateDir(f"{fifo} is not a FIFO of ours")
        try:
            with open(os.path.join(self.state_dir, "ready.json")) as f:
                self.ready: JSONObject = json.loads(f.read())
        except FileNotFoundError:
            raise StaleStateDir(
                f"{self.state_dir}: no ready.json: the watchdog never started here") from None
        except ValueError as e:
            raise StaleStateDir(f"{self.state_dir}/ready.json is not a ready line: {e}") from None
        try:
            self.watchdog_fd: Optional[int] = bind(
                self.ready["pid"], self.ready["start_time"], self.ready.get("uid"))
        except ProcessLookupError:
            raise StaleStateDir(
                f"stale state directory {self.state_dir}: watchdog pid {self.ready['pid']} "
                f"(run {self.ready.get('run_id')}) is gone") from None
        self.run_id: str = self.ready["run_id"]

    @classmethod
    def from_env(cls: type[_C]) -> _C:
        """Inside a job: the watchdog named by REA_STATE_DIR."""
        d = os.environ.get("REA_STATE_DIR")
        if not d:
            raise StaleStateDir("REA_STATE_DIR is not set: not running inside a rea job")
        return cls(d)

    def close_fd(self) -> None:
        if self.watchdog_fd is not None:
            os.close(self.watchdog_fd)
            self.watchdog_fd = None

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_fd()

    def _watchdog_fd(self) -> int:
        if self.watchdog_fd is None:
            raise ReaError(f"the client of {self.state_dir} is closed (close_fd)")
        return self.watchdog_fd

    def watchdog_alive(self) -> bool:
        return not _readable(self._watchdog_fd())

    # -- one exchange ------------------------------------------------------

    def _request(self, op: str, tag: str, **fields: Any) -> JSONObject:
        rid = _request_id(tag)
        req = {
            "v": PROTOCOL_VERSION, "op": op, "id": rid,
            "caller": {"pid": os.getpid(), "start_time": start_time(), "uid": os.getuid()},
            "reply": rid,
        }
        req.update({k: v for k, v in fields.items() if v is not None})
        return req

    def _send(self, req: JSONObject) -> "_Channel":
        # RFC 7464 framing (docs/requests.md): RS, one JSON text, LF. RS always starts
        # a new text, so a fragment left by a writer that died cannot
        # swallow this request.
        line = b"\x1e" + json.dumps(req, separators=(",", ":")).encode() + b"\n"
        if len(line) > MAX_REQUEST:
            raise ReaError(f"request is {len(line)} bytes; the protocol's cap is "
                           f"{MAX_REQUEST} (argv too long?)")
        replies = os.path.join(self.state_dir, "replies")
        path = os.path.join(replies, req["reply"])
        os.mkfifo(path, 0o600)
        os.chmod(path, 0o600)  # whatever the umask did; we just made it in a 0700 dir
        chan = _Channel(self, path)
        try:
            # The reply FIFO is open for reading before the request exists.
            chan.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                w = os.open(os.path.join(self.state_dir, "requests"),
                            os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    raise StaleStateDir(
                        f"stale state directory {self.state_dir}: no watchdog is reading "
                        "its request FIFO") from None
                raise ReaError(f"{self.state_dir}/requests: {e}") from None
            try:
                until = time.monotonic() + 10
                while True:
                    try:
                        n = os.write(w, line)   # <= PIPE_BUF: all or nothing
                        if n != len(line):
                            raise ReaError("short write on the request FIFO")
                        break
                    except BlockingIOError:
                        if not self.watchdog_alive():
                            raise WatchdogGone("the watchdog exited") from None
                        if time.monotonic() > until:
                            raise ReplyTimeout("the request FIFO stayed full for 10 s") from None
                        p = select.poll()
                        p.register(w, select.POLLOUT)
                        p.poll(20)
            finally:
                os.close(w)
        except BaseException:
            chan.close()
            raise
        return chan

    # -- operations --------------------------------------------------------

    def spawn(self, argv: Iterable[StrPath], deadline: Duration, capture: bool = False,
              name: Optional[str] = None, inner_alarm: Optional[Duration] = None,
              stop_signal: Optional[Union[str, int]] = None, *,
              cwd: Optional[StrPath] = None, env: Optional[Mapping[str, str]] = None,
              input: Optional[bytes] = None) -> "Job":
        """Asks for a job and waits for `accepted`; returns a `Job` to wait on.
        `deadline` is in seconds (a number, or a string like "500ms", "2m");
        `inner_alarm` (the same, below the deadline)
        is the runtime's own alarm: SIGALRM to the job's leader at that
        instant, recorded, not a stop. `stop_signal` ("TERM", the default,
        "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM") is what the leader is asked to
        stop with when the action stops: it alone is asked first, and the
        rest of its tree gets SIGTERM once it has exited or half the TERM
        grace has passed. `cwd` is the job's working directory (made
        absolute here), `env` its whole environment (the watchdog sets its
        REA_* names over it; the request's 4096-byte cap applies), `input`
        the bytes it reads on stdin (written to a file in replies/ that is
        removed once answered; default /dev/null). Raises `Refused`
        (nothing launched)."""
        if stop_signal is not None:
            stop_signal = _stop_signal(stop_signal)
        args = [os.fspath(a) for a in argv]
        if not args or not args[0].startswith("/"):
            exe = shutil.which(args[0]) if args else None
            if not exe:
                raise ReaError(f"{args[0] if args else '(empty argv)'}: command not found")
            args[0] = os.path.abspath(exe)
        alarm_ms = None if inner_alarm is None else _duration_ms(inner_alarm, "inner_alarm")
        req = self._request("spawn", name or "job", argv=args,
                            deadline_ms=_duration_ms(deadline, "deadline"),
                            capture="capture" if capture else "discard", name=name,
                            inner_alarm_ms=alarm_ms, stop_signal=stop_signal,
                            cwd=None if cwd is None else os.path.abspath(os.fspath(cwd)),
                            env=None if env is None else dict(env))
        stdin_path = None
        if input is not None:
            req["stdin"] = req["id"] + ".in"
            stdin_path = os.path.join(self.state_dir, "replies", req["stdin"])
            _write_private(stdin_path, input)
        try:
            chan = self._send(req)
            try:
                first = chan.next(30)
                if first["type"] == "refused":
                    raise Refused(first["reason"], first["detail"], req["id"],
                                  first.get("stop_reason"), first.get("errno"))
                if first["type"] != "accepted":
                    raise ReaError(f"unexpected first reply: {first}")
            except BaseException:
                chan.close()
                raise
        finally:
            # Admission opened it (or refused): the job holds its own descriptor.
            if stdin_path is not None:
                try:
                    os.unlink(stdin_path)
                except FileNotFoundError:
                    pass
        return Job(chan, first, req["id"])

    def submit(self, argv: Iterable[StrPath], deadline: Duration, capture: bool = False,
               name: Optional[str] = None, inner_alarm: Optional[Duration] = None,
               stop_signal: Optional[Union[str, int]] = None, *,
               cwd: Optional[StrPath] = None, env: Optional[Mapping[str, str]] = None,
               input: Optional[bytes] = None) -> "JobResult":
        """Runs a job to its end; returns its `JobResult`."""
        return self.spawn(argv, deadline, capture, name, inner_alarm, stop_signal,
                          cwd=cwd, env=env, input=input).wait()

    def stop(self, wait: Duration = 8) -> JSONObject:
        """Stops the action (stop_requested) and waits for the stop to finish.
        Returns the `stop_complete` reply (reason, quiescent)."""
        chan = self._send(self._request("stop", "stop"))
        with chan:
            r = chan.next(wait)
        if r["type"] == "refused":
            raise Refused(r["reason"], r["detail"], r.get("id"), r.get("stop_reason"))
        return r

    def close(self, wait: Duration = 8) -> JSONObject:
        """Closes the action; returns the `closed` reply (outcome, stop_reason,
        positive, head, audit_log)."""
        chan = self._send(self._request("close", "close"))
        with chan:
            r = chan.next(wait)
        if r["type"] == "refused":
            raise Refused(r["reason"], r["detail"], r.get("id"))
        return r


def _write_private(path: str, data: bytes) -> None:
    """Creates `path` (mode 0600, never following a symlink) holding `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.fchmod(fd, 0o600)   # whatever the umask did
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


class _Channel:
    """One reply FIFO: read line by line, never past the watchdog's death."""

    def __init__(self, client: Client, path: str) -> None:
        self.client = client
        self.path = path
        self.fd: Optional[int] = None
        self.buf = b""

    def __enter__(self) -> "_Channel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fd(self) -> int:
        if self.fd is None:
            raise ReaError(f"the reply channel {self.path} is closed")
        return self.fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _read(self) -> Optional[bytes]:
        try:
            data = os.read(self._fd(), 65536)
        except BlockingIOError:
            return None
        return data

    def next(self, timeout: Optional[Duration] = None) -> JSONObject:
        """The next reply (a dict). `timeout` in seconds (or a duration
        string); None waits until the watchdog answers or exits."""
        if timeout is not None:
            timeout = _seconds(timeout, "timeout")
        until = None if timeout is None else time.monotonic() + timeout
        wd = self.client._watchdog_fd()
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError as e:
                    raise ReaError(f"unreadable reply {line[:200]!r}: {e}") from None
                if (not isinstance(reply, dict) or reply.get("v") != PROTOCOL_VERSION
                        or "type" not in reply):
                    raise ReaError(f"unsupported reply {line[:200]!r}")
                return reply
            data = self._read()
            if data:
                self.buf += data
                continue
            if _readable(wd):
                # It may have written its last words just before exiting.
                rest = self._read() or b""
                if not rest:
                    raise WatchdogGone(
                        f"the watchdog (pid {self.client.ready['pid']}) exited before answering")
                self.buf += rest
                continue
            wait_ms = _SLICE_MS
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    raise ReplyTimeout(f"no reply within {timeout} s")
                wait_ms = min(wait_ms, max(1, int(left * 1000)))
            fd = self._fd()
            p = select.poll()
            p.register(fd, select.POLLIN)
            p.register(wd, select.POLLIN)
            events = dict(p.poll(wait_ms))
            ev = events.get(fd, 0)
            if ev & select.POLLHUP and not ev & select.POLLIN:
                # A FIFO reports POLLHUP only after a writer came and went.
                rest = self._read() or b""
                if rest:
                    self.buf += rest
                elif not _readable(wd, 100):
                    # (A watchdog that just died also hangs up: say that instead.)
                    raise ReaError("the watchdog closed the reply channel without an answer")


class Job:
    """An accepted job: `pid`, `start_time`, `job` (its number); `wait()`."""

    def __init__(self, chan: _Channel, accepted: JSONObject, request_id: str) -> None:
        self._chan = chan
        self.accepted = accepted
        self.id = request_id
        self.job: int = accepted["job"]
        self.pid: int = accepted["pid"]
        self.start_time: int = accepted["start_time"]
        self.result: Optional[JobResult] = None

    def wait(self, timeout: Optional[Duration] = None) -> JobResult:
        """Waits for `exited` or `stopped`; returns the `JobResult`."""
        if self.result is None:
            try:
                final = self._chan.next(timeout)
            except ReplyTimeout:
                raise
            except BaseException:
                self._chan.close()
                raise
            self._chan.close()
            if final["type"] not in ("exited", "stopped"):
                raise ReaError(f"unexpected reply for job {self.job}: {final}")
            self.result = JobResult(self.accepted, final)
        return self.result


# ----- owning a watchdog ---------------------------------------------------

class Watchdog(Client):
    """A `rea-watchdog run` this process started and is the root controller of.

    A context manager: `with Watchdog.start(...) as wd:` closes the action
    at the end of the block if nobody did (a close stops whatever still
    runs: close_while_running), waits for the watchdog's exit and keeps
    the `Receipt` in `wd.receipt`."""

    proc: "subprocess.Popen[bytes]"
    pidfd: int
    pid: int
    audit_log: str
    sealed: Optional[JSONObject]
    receipt: Optional[Receipt]
    _stdout_rest: bytes

    def __enter__(self) -> "Watchdog":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc.returncode is None and self.receipt is None:
                try:
                    self.receipt = self.close()
                except ReaError:
                    # No close (the watchdog is gone or did not answer): a
                    # SIGTERM stops it the operator's way, with a receipt.
                    self._end()
        finally:
            self.close_fd()

    def _end(self) -> None:
        """Waits for the watchdog's exit: SIGTERM first (a clean stop),
        SIGKILL only if it has not exited 30 s later."""
        if self.proc.returncode is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.kill(sig)
            except ProcessLookupError:
                pass
            try:
                self.wait(30)
                return
            except ReplyTimeout:
                continue

    @classmethod
    def start(cls, binary: Optional[StrPath] = None, state_dir: Optional[StrPath] = None,
              audit_log: Optional[StrPath] = None, staging: Optional[StrPath] = None,
              run_id: Optional[str] = None, action_deadline: Optional[Duration] = None,
              term_grace: Optional[Duration] = None, kill_bound: Optional[Duration] = None,
              output_cap: Optional[Union[int, str]] = None, pass_env: Iterable[str] = (),
              extra_args: Iterable[StrPath] = (), stderr: Union[None, int, IO[Any]] = None,
              ready_timeout: Duration = 30) -> "Watchdog":
        """Starts the watchdog and waits for its ready line. Durations are
        seconds (a number) or strings like "500ms", "2m"; a zero
        `term_grace`/`kill_bound` is passed as 0. The watchdog's root
        controller is this process: if it dies, the watchdog stops everything
        (root_lost)."""
        binary = binary or os.environ.get("REA_WATCHDOG") or shutil.which("rea-watchdog")
        if not binary:
            raise ReaError("rea-watchdog not found (pass binary= or set REA_WATCHDOG)")
        if not state_dir or not audit_log:
            raise ValueError("state_dir and audit_log are required")
        cmd = [os.fspath(binary), "run", "--state-dir", os.fspath(state_dir),
               "--audit-log", os.fspath(audit_log)]
        for flag, val in (("--staging", staging), ("--run-id", run_id)):
            if val is not None:
                cmd += [flag, os.fspath(val)]
        for flag, what, secs in (("--action-deadline", "action_deadline", action_deadline),
                                 ("--term-grace", "term_grace", term_grace),
                                 ("--kill-bound", "kill_bound", kill_bound)):
            if secs is not None:
                cmd += [flag, f"{_flag_ms(secs, what)}ms"]
        if output_cap is not None:
            cmd += ["--output-cap", str(output_cap)]
        for name in pass_env:
            cmd += ["--pass-env", name]
        cmd += [os.fspath(a) for a in extra_args]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr)
        # Our own unreaped child: its pid cannot be reused, so this is race-free.
        pidfd = os.pidfd_open(proc.pid)
        try:
            line, rest = _read_line(_stdout(proc).fileno(), pidfd, ready_timeout)
        except BaseException:
            _kill_child(proc, pidfd)
            raise
        if line is None:
            code = proc.wait()
            os.close(pidfd)
            raise ReaError(f"rea-watchdog run exited with status {code} before its ready "
                           "line (its reason is on stderr)")
        ready = json.loads(line)
        if not isinstance(ready, dict) or ready.get("event") != "ready":
            _kill_child(proc, pidfd)
            raise ReaError(f"rea-watchdog run printed {line!r}, not a ready line")
        self = cls(ready["state_dir"])
        self.proc = proc
        self.pidfd = pidfd
        self.pid = proc.pid
        self.audit_log = ready["audit_log"]
        self.sealed = None
        self.receipt = None
        self._stdout_rest = rest
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signals the watchdog through its pidfd (it is our own child)."""
        signal.pidfd_send_signal(self.pidfd, sig)

    def wait(self, timeout: Duration = 30) -> tuple[int, Optional[JSONObject]]:
        """Waits for the watchdog to exit; returns (exit status, sealed line
        or None). Raises ReplyTimeout if it does not exit in time."""
        if self.proc.returncode is None:
            timeout = _seconds(timeout, "timeout")
            if not _readable(self.pidfd, int(timeout * 1000)):
                raise ReplyTimeout(f"the watchdog (pid {self.pid}) did not exit within "
                                   f"{timeout} s")
            stdout = _stdout(self.proc)
            rest = (self._stdout_rest + _read_to_eof(stdout.fileno())).decode(errors="replace")
            self.proc.wait()
            for line in rest.splitlines():
                try:
                    v = json.loads(line)
                except ValueError:
                    continue
                if v.get("event") in ("sealed", "unsealed"):
                    self.sealed = v
            os.close(self.pidfd)
            stdout.close()
        return self.proc.returncode, self.sealed

    # Returns a Receipt where Client.close returns the reply: the owner of a
    # watchdog also waits for its exit (a deliberate, documented difference).
    def close(self, wait: Duration = 8,  # type: ignore[override]
              exit_timeout: Duration = 30) -> Receipt:
        """Closes the action, waits for the watchdog to exit, and returns the
        `Receipt` (head from the close reply, checked against the sealed line
        and the log's last line)."""
        reply = Client.close(self, wait)
        code, sealed = self.wait(exit_timeout)
        head = reply["head"]
        if sealed is not None and sealed.get("head") not in (None, head):
            raise ReaError(f"the close reply's head {head} differs from the sealed "
                           f"line's {sealed.get('head')}")
        record = read_receipt(reply["audit_log"], head) if head else None
        self.receipt = Receipt(reply["outcome"], reply["stop_reason"], reply["positive"], head,
                               reply["audit_log"], self.run_id, code, record)
        return self.receipt


def _stdout(proc: "subprocess.Popen[bytes]") -> IO[bytes]:
    if proc.stdout is None:
        raise ReaError("rea-watchdog run was started without a stdout pipe")
    return proc.stdout


def _read_to_eof(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _read_line(fd: int, pidfd: int, timeout: Duration) -> tuple[Optional[str], bytes]:
    """(first line, bytes after it) from a child's stdout; (None, b"") if
    it exited first."""
    timeout = _seconds(timeout, "ready_timeout")
    buf = b""
    until = time.monotonic() + timeout
    while b"\n" not in buf:
        left = until - time.monotonic()
        if left <= 0:
            raise ReplyTimeout(f"no ready line within {timeout} s")
        p = select.poll()
        p.register(fd, select.POLLIN)
        p.poll(int(min(left, 0.5) * 1000))
        chunk = b""
        if _readable(fd):
            chunk = os.read(fd, 4096)
            buf += chunk
        if not chunk and _readable(pidfd):
            return None, b""
    line, rest = buf.split(b"\n", 1)
    return line.decode(), rest


def _kill_child(proc: "subprocess.Popen[bytes]", pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    os.close(pidfd)


# ----- rea-audit -----------------------------------------------------------

class Verdict(dict[str, Any]):
    """`rea-audit verify --json`'s object, plus `exit_code`."""

    exit_code: int

    @property
    def delete_allowed(self) -> bool:
        return self.get("verdict") == "delete_allowed" and self.exit_code == 0

    @property
    def codes(self) -> list[str]:
        return [r["code"] for r in self.get("reasons", [])]


def verify(binary: Optional[StrPath], audit_log: StrPath, expect_head: Optional[str] = None,
           expect_run: Optional[str] = None, staging: Optional[StrPath] = None) -> Verdict:
    """Runs `rea-audit verify --json`; returns a `Verdict` (exit codes: 0
    delete_allowed, 1 retain, 2 incomplete, 3 tampered, 4 error)."""
    args: list[str] = []
    if expect_head:
        args += ["--expect-head", expect_head]
    if expect_run:
        args += ["--expect-run", expect_run]
    if staging is not None:
        args += ["--staging", os.fspath(staging)]
    return _rea_audit(binary, "verify", audit_log, args, Verdict, "verdict")


def _rea_audit(binary: Optional[StrPath], sub: str, audit_log: StrPath, args: list[str],
               wrap: type[_R], what: str) -> _R:
    """Runs `rea-audit SUB LOG --json ARGS`; its JSON as `wrap`, with
    `.exit_code` set."""
    binary = binary or os.environ.get("REA_AUDIT") or shutil.which("rea-audit")
    if not binary:
        raise ReaError("rea-audit not found (pass binary= or set REA_AUDIT)")
    cmd = [os.fspath(binary), sub, os.fspath(audit_log), "--json", *args]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, timeout=120)
    try:
        v = wrap(json.loads(out.stdout))
    except ValueError:
        raise ReaError(f"rea-audit {sub} printed no {what} (exit {out.returncode}): "
                       f"{out.stderr.decode(errors='replace').strip()}") from None
    v.exit_code = out.returncode
    return v


def may_delete(receipt: Optional[Receipt], verdict: Optional[Verdict]) -> bool:
    """The controller's deletion rule (the first of the README's six
    outcomes): the watchdog's own waited exit status is 0 *and* `verify`
    says delete_allowed. Either alone is not enough: a verdict read from a
    log says nothing about a watchdog that is still running or died after
    sealing, and an exit status says nothing about the stage the
    controller is about to delete."""
    return (receipt is not None and receipt.exit_code == 0 and verdict is not None
            and verdict.delete_allowed)


class Reconciled(dict[str, Any]):
    """`rea-audit reconcile --json`'s report, plus `exit_code` (0
    delete_allowed, 5 running, 6 review, 4 error). `running` means the
    watchdog is alive (wait, or close it) *or* the action's cgroup still has
    live members (reason `group_members_alive`): with the watchdog gone
    there is nothing to close, and `self["recover_command"]` names the
    operator's `rea-watchdog recover`."""

    exit_code: int

    @property
    def outcome(self) -> Optional[str]:
        outcome: Optional[str] = self.get("outcome")
        return outcome

    @property
    def codes(self) -> list[str]:
        return [r["code"] for r in self.get("reasons", [])]

    def alive(self) -> list[JSONObject]:
        """The processes the log names that are alive now."""
        return [p for p in self.get("processes", [])
                if p.get("liveness", {}).get("state") == "alive"]


def reconcile(binary: Optional[StrPath], audit_log: StrPath, staging: Optional[StrPath] = None,
              state_dir: Optional[StrPath] = None) -> Reconciled:
    """Runs `rea-audit reconcile --json` (read-only: it never signals,
    deletes or writes); returns a `Reconciled`."""
    args: list[str] = []
    if staging is not None:
        args += ["--staging", os.fspath(staging)]
    if state_dir is not None:
        args += ["--state-dir", os.fspath(state_dir)]
    return _rea_audit(binary, "reconcile", audit_log, args, Reconciled, "report")


# The Runner, bwrap_argv and the one-shot run (docs/runner.md), in their own
# module; imported last, once everything above exists (they use it).
from ._runner import (  # noqa: E402
    DIE_WITH_PARENT, ActionStopped, OutputLimitExceeded, Runner, bwrap_argv, run)
