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

Needs Linux 5.3+ and Python 3.9+ (os.pidfd_open, signal.pidfd_send_signal).
"""

import base64
import errno
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import time

PROTOCOL_VERSION = 1
MAX_REQUEST = 4096
_SLICE_MS = 500

__all__ = [
    "ReaError", "StaleStateDir", "WatchdogGone", "Refused", "ReplyTimeout",
    "Watchdog", "Client", "Job", "JobResult", "Receipt", "Verdict",
    "verify", "bind", "start_time",
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
    """The watchdog refused a request; nothing was launched or changed."""

    def __init__(self, reason, detail, request_id=None):
        super().__init__(f"request {request_id or '?'} refused: {reason} ({detail})")
        self.reason = reason
        self.detail = detail
        self.request_id = request_id


# ----- process identity ---------------------------------------------------

def _stat_fields(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # comm may contain spaces and ')': split after the last ')'.
    return data[data.rindex(b")") + 2:].split()


def start_time(pid="self"):
    """Field 22 of /proc/PID/stat (clock ticks since boot)."""
    return int(_stat_fields(pid)[19])


def _uid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise ReaError(f"/proc/{pid}/status has no Uid line")


def bind(pid, expected_start_time, expected_uid=None):
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


def _readable(fd, timeout_ms=0):
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(timeout_ms))


_counter = [0]


def _request_id(tag):
    _counter[0] += 1
    tag = "".join(c if c.isalnum() or c in "_.-" else "_" for c in tag)[:24] or "req"
    return f"{tag}-{os.getpid()}-{_counter[0]}-{os.urandom(4).hex()}"


def _duration_ms(seconds):
    ms = int(round(float(seconds) * 1000))
    if ms <= 0:
        raise ValueError(f"a deadline must be positive, got {seconds!r}")
    return ms


STOP_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM")


def _stop_signal(sig):
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

    def __init__(self, accepted, final):
        self.accepted = accepted
        self.reply = final
        self.outcome = final["type"]
        self.job = final["job"]
        self.pid = accepted["pid"]
        self.status = final["status"]             # {"code": N} or {"signal": N}
        self.stop_reason = final.get("reason")    # only when stopped
        self.duration_ms = final["duration_ms"]
        self.output_capped = final["output_capped"]
        self.stdout = _decode(final["stdout"])
        self.stderr = _decode(final["stderr"])
        self.stdout_bytes = final["stdout"]["bytes"]
        self.stderr_bytes = final["stderr"]["bytes"]

    @property
    def code(self):
        """The exit code, or None when killed by a signal."""
        return self.status.get("code")

    @property
    def signal(self):
        return self.status.get("signal")

    @property
    def shell_status(self):
        """Like a shell's $?: the code, or 128+N for signal N."""
        return self.code if self.code is not None else 128 + self.signal

    @property
    def ok(self):
        return self.outcome == "exited" and self.code == 0

    def __repr__(self):
        how = f"stopped ({self.stop_reason})" if self.outcome == "stopped" else "exited"
        return f"<JobResult job {self.job} {how} status {self.status}>"


def _decode(stream):
    data = stream.get("data_b64")
    return base64.b64decode(data) if data is not None else None


class Receipt:
    """The end of an action: the close reply and/or the sealed line, plus the
    receipt record itself (read from the log and checked against the head)."""

    def __init__(self, outcome, stop_reason, positive, head, audit_log, run_id=None,
                 exit_code=None, record=None):
        self.outcome = outcome
        self.stop_reason = stop_reason
        self.positive = positive
        self.head = head
        self.audit_log = audit_log
        self.run_id = run_id
        self.exit_code = exit_code
        self.record = record     # the receipt's "data" (counts, quiescent, ...)

    def __repr__(self):
        return (f"<Receipt {self.outcome} stop_reason={self.stop_reason} "
                f"positive={self.positive} head={self.head}>")


def read_receipt(audit_log, head=None):
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
    return rec["data"] if rec.get("kind") == "receipt" else None


# ----- talking to a watchdog ----------------------------------------------

class Client:
    """A checked connection to one watchdog's state directory.

    Refuses (StaleStateDir) a directory that is missing, not ours, not 0700,
    has no request FIFO or ready.json, or whose watchdog (pid *and* start
    time) is gone."""

    def __init__(self, state_dir):
        self.state_dir = os.path.abspath(state_dir)
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
                self.ready = json.loads(f.read())
        except FileNotFoundError:
            raise StaleStateDir(
                f"{self.state_dir}: no ready.json: the watchdog never started here") from None
        except ValueError as e:
            raise StaleStateDir(f"{self.state_dir}/ready.json is not a ready line: {e}") from None
        try:
            self.watchdog_fd = bind(self.ready["pid"], self.ready["start_time"],
                                    self.ready.get("uid"))
        except ProcessLookupError:
            raise StaleStateDir(
                f"stale state directory {self.state_dir}: watchdog pid {self.ready['pid']} "
                f"(run {self.ready.get('run_id')}) is gone") from None
        self.run_id = self.ready["run_id"]

    @classmethod
    def from_env(cls):
        """Inside a job: the watchdog named by REA_STATE_DIR."""
        d = os.environ.get("REA_STATE_DIR")
        if not d:
            raise StaleStateDir("REA_STATE_DIR is not set: not running inside a rea job")
        return cls(d)

    def close_fd(self):
        if self.watchdog_fd is not None:
            os.close(self.watchdog_fd)
            self.watchdog_fd = None

    def watchdog_alive(self):
        return not _readable(self.watchdog_fd)

    # -- one exchange ------------------------------------------------------

    def _request(self, op, tag, **fields):
        rid = _request_id(tag)
        req = {
            "v": PROTOCOL_VERSION, "op": op, "id": rid,
            "caller": {"pid": os.getpid(), "start_time": start_time(), "uid": os.getuid()},
            "reply": rid,
        }
        req.update({k: v for k, v in fields.items() if v is not None})
        return req

    def _send(self, req):
        # RFC 7464 framing (SPEC 3.3): RS, one JSON text, LF. RS always starts
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

    def spawn(self, argv, deadline, capture=False, name=None, inner_alarm=None,
              stop_signal=None):
        """Asks for a job and waits for `accepted`; returns a `Job` to wait on.
        `deadline` is in seconds; `inner_alarm` (seconds, below the deadline)
        is the runtime's own alarm: SIGALRM to the job's leader at that
        instant, recorded, not a stop. `stop_signal` ("TERM", the default,
        "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM") is what the leader is asked to
        stop with when the action stops: it alone is asked first, and the
        rest of its tree gets SIGTERM once it has exited or half the TERM
        grace has passed. Raises `Refused` (nothing launched)."""
        if stop_signal is not None:
            stop_signal = _stop_signal(stop_signal)
        argv = [os.fspath(a) for a in argv]
        if not argv or not argv[0].startswith("/"):
            exe = shutil.which(argv[0]) if argv else None
            if not exe:
                raise ReaError(f"{argv[0] if argv else '(empty argv)'}: command not found")
            argv[0] = os.path.abspath(exe)
        req = self._request("spawn", name or "job", argv=argv,
                            deadline_ms=_duration_ms(deadline),
                            capture="capture" if capture else "discard", name=name,
                            inner_alarm_ms=None if inner_alarm is None else _duration_ms(inner_alarm),
                            stop_signal=stop_signal)
        chan = self._send(req)
        try:
            first = chan.next(30)
            if first["type"] == "refused":
                raise Refused(first["reason"], first["detail"], req["id"])
            if first["type"] != "accepted":
                raise ReaError(f"unexpected first reply: {first}")
        except BaseException:
            chan.close()
            raise
        return Job(chan, first, req["id"])

    def submit(self, argv, deadline, capture=False, name=None, inner_alarm=None,
               stop_signal=None):
        """Runs a job to its end; returns its `JobResult`."""
        return self.spawn(argv, deadline, capture, name, inner_alarm, stop_signal).wait()

    def stop(self, wait=8):
        """Stops the action (stop_requested) and waits for the stop to finish.
        Returns the `stop_complete` reply (reason, quiescent)."""
        chan = self._send(self._request("stop", "stop"))
        with chan:
            r = chan.next(wait)
        if r["type"] == "refused":
            raise Refused(r["reason"], r["detail"], r.get("id"))
        return r

    def close(self, wait=8):
        """Closes the action; returns the `closed` reply (outcome, stop_reason,
        positive, head, audit_log)."""
        chan = self._send(self._request("close", "close"))
        with chan:
            r = chan.next(wait)
        if r["type"] == "refused":
            raise Refused(r["reason"], r["detail"], r.get("id"))
        return r


class _Channel:
    """One reply FIFO: read line by line, never past the watchdog's death."""

    def __init__(self, client, path):
        self.client = client
        self.path = path
        self.fd = None
        self.buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _read(self):
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return None
        return data

    def next(self, timeout=None):
        """The next reply (a dict). `timeout` in seconds; None waits until the
        watchdog answers or exits."""
        until = None if timeout is None else time.monotonic() + timeout
        wd = self.client.watchdog_fd
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError as e:
                    raise ReaError(f"unreadable reply {line[:200]!r}: {e}") from None
                if reply.get("v") != PROTOCOL_VERSION or "type" not in reply:
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
            p = select.poll()
            p.register(self.fd, select.POLLIN)
            p.register(wd, select.POLLIN)
            events = dict(p.poll(wait_ms))
            ev = events.get(self.fd, 0)
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

    def __init__(self, chan, accepted, request_id):
        self._chan = chan
        self.accepted = accepted
        self.id = request_id
        self.job = accepted["job"]
        self.pid = accepted["pid"]
        self.start_time = accepted["start_time"]
        self.result = None

    def wait(self, timeout=None):
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
    """A `rea-watchdog run` this process started and is the root controller of."""

    @classmethod
    def start(cls, binary=None, state_dir=None, audit_log=None, staging=None, run_id=None,
              action_deadline=None, term_grace=None, kill_bound=None, output_cap=None,
              pass_env=(), extra_args=(), stderr=None, ready_timeout=30):
        """Starts the watchdog and waits for its ready line. Durations are
        seconds. The watchdog's root controller is this process: if it dies,
        the watchdog stops everything (root_lost)."""
        binary = binary or os.environ.get("REA_WATCHDOG") or shutil.which("rea-watchdog")
        if not binary:
            raise ReaError("rea-watchdog not found (pass binary= or set REA_WATCHDOG)")
        if not state_dir or not audit_log:
            raise ValueError("state_dir and audit_log are required")
        cmd = [binary, "run", "--state-dir", os.fspath(state_dir),
               "--audit-log", os.fspath(audit_log)]
        for flag, val in (("--staging", staging), ("--run-id", run_id)):
            if val is not None:
                cmd += [flag, os.fspath(val)]
        for flag, secs in (("--action-deadline", action_deadline),
                           ("--term-grace", term_grace), ("--kill-bound", kill_bound)):
            if secs is not None:
                cmd += [flag, f"{_duration_ms(secs) if secs else 0}ms"]
        if output_cap is not None:
            cmd += ["--output-cap", str(output_cap)]
        for name in pass_env:
            cmd += ["--pass-env", name]
        cmd += list(extra_args)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr)
        # Our own unreaped child: its pid cannot be reused, so this is race-free.
        pidfd = os.pidfd_open(proc.pid)
        try:
            line, rest = _read_line(proc.stdout.fileno(), pidfd, ready_timeout)
        except BaseException:
            _kill_child(proc, pidfd)
            raise
        if line is None:
            code = proc.wait()
            os.close(pidfd)
            raise ReaError(f"rea-watchdog run exited with status {code} before its ready "
                           "line (its reason is on stderr)")
        ready = json.loads(line)
        if ready.get("event") != "ready":
            _kill_child(proc, pidfd)
            raise ReaError(f"rea-watchdog run printed {line!r}, not a ready line")
        self = cls(ready["state_dir"])
        self.proc = proc
        self.pidfd = pidfd
        self.pid = proc.pid
        self.audit_log = ready["audit_log"]
        self.sealed = None
        self._stdout_rest = rest
        return self

    def kill(self, sig=signal.SIGKILL):
        """Signals the watchdog through its pidfd (it is our own child)."""
        signal.pidfd_send_signal(self.pidfd, sig)

    def wait(self, timeout=30):
        """Waits for the watchdog to exit; returns (exit status, sealed line
        or None). Raises ReplyTimeout if it does not exit in time."""
        if self.proc.returncode is None:
            if not _readable(self.pidfd, int(timeout * 1000)):
                raise ReplyTimeout(f"the watchdog (pid {self.pid}) did not exit within "
                                   f"{timeout} s")
            rest = self._stdout_rest + _read_to_eof(self.proc.stdout.fileno())
            rest = rest.decode(errors="replace")
            self.proc.wait()
            for line in rest.splitlines():
                try:
                    v = json.loads(line)
                except ValueError:
                    continue
                if v.get("event") in ("sealed", "unsealed"):
                    self.sealed = v
            os.close(self.pidfd)
            self.proc.stdout.close()
        return self.proc.returncode, self.sealed

    def close(self, wait=8, exit_timeout=30):
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
        return Receipt(reply["outcome"], reply["stop_reason"], reply["positive"], head,
                       reply["audit_log"], self.run_id, code, record)


def _read_to_eof(fd):
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _read_line(fd, pidfd, timeout):
    """(first line, bytes after it) from a child's stdout; (None, b"") if
    it exited first."""
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


def _kill_child(proc, pidfd):
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    os.close(pidfd)


# ----- rea-audit -----------------------------------------------------------

class Verdict(dict):
    """`rea-audit verify --json`'s object, plus `exit_code`."""

    @property
    def delete_allowed(self):
        return self.get("verdict") == "delete_allowed" and self.exit_code == 0

    @property
    def codes(self):
        return [r["code"] for r in self.get("reasons", [])]


def verify(binary, audit_log, expect_head=None, expect_run=None, staging=None):
    """Runs `rea-audit verify --json`; returns a `Verdict` (exit codes: 0
    delete_allowed, 1 retain, 2 incomplete, 3 tampered, 4 error)."""
    args = []
    if expect_head:
        args += ["--expect-head", expect_head]
    if expect_run:
        args += ["--expect-run", expect_run]
    if staging is not None:
        args += ["--staging", os.fspath(staging)]
    return _rea_audit(binary, "verify", audit_log, args, Verdict, "verdict")


def _rea_audit(binary, sub, audit_log, args, wrap, what):
    """Runs `rea-audit SUB LOG --json ARGS`; its JSON as `wrap`, with
    `.exit_code` set."""
    binary = binary or os.environ.get("REA_AUDIT") or shutil.which("rea-audit")
    if not binary:
        raise ReaError("rea-audit not found (pass binary= or set REA_AUDIT)")
    cmd = [binary, sub, os.fspath(audit_log), "--json", *args]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, timeout=120)
    try:
        v = wrap(json.loads(out.stdout))
    except ValueError:
        raise ReaError(f"rea-audit {sub} printed no {what} (exit {out.returncode}): "
                       f"{out.stderr.decode(errors='replace').strip()}") from None
    v.exit_code = out.returncode
    return v


def may_delete(receipt, verdict):
    """The controller's deletion rule (SPEC 7, first row): the watchdog's
    own waited exit status is 0 *and* `verify` says delete_allowed. Either
    alone is not enough: a verdict read from a log says nothing about a
    watchdog that is still running or died after sealing, and an exit
    status says nothing about the stage the controller is about to delete."""
    return (receipt is not None and receipt.exit_code == 0 and verdict is not None
            and verdict.delete_allowed)


class Reconciled(dict):
    """`rea-audit reconcile --json`'s report, plus `exit_code` (0
    delete_allowed, 5 running, 6 review, 4 error). `running` means the
    watchdog is alive (wait, or close it) *or* the action's cgroup still has
    live members (reason `group_members_alive`): with the watchdog gone
    there is nothing to close, and `self["recover_command"]` names the
    operator's `rea-watchdog recover`."""

    @property
    def outcome(self):
        return self.get("outcome")

    @property
    def codes(self):
        return [r["code"] for r in self.get("reasons", [])]

    def alive(self):
        """The processes the log names that are alive now."""
        return [p for p in self.get("processes", [])
                if p.get("liveness", {}).get("state") == "alive"]


def reconcile(binary, audit_log, staging=None, state_dir=None):
    """Runs `rea-audit reconcile --json` (read-only: it never signals,
    deletes or writes); returns a `Reconciled`."""
    args = []
    if staging is not None:
        args += ["--staging", os.fspath(staging)]
    if state_dir is not None:
        args += ["--state-dir", os.fspath(state_dir)]
    return _rea_audit(binary, "reconcile", audit_log, args, Reconciled, "report")

