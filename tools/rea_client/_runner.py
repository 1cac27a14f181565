"""subprocess.run's shape under rea-watchdog (docs/runner.md).

- `Runner(watchdog, wrap=None)`: a callable with subprocess.run's signature
  (the part a harness uses) whose every call is a job of the watchdog:
  submitted through it, so a nested launcher is the phase's sibling, and
  stopped with the whole action.
- `bwrap_argv(owner_argv, bwrap_bin)`: the owner's bwrap argv with one
  `--die-with-parent` added right after bwrap itself, nothing else changed.
- `run(args, ...)`: the same signature as a one-shot for scripts, through
  `rea-watchdog exec`: a timeout ends the whole tree, grandchildren too.

Exceptions are the ones subprocess.run raises (TimeoutExpired,
CalledProcessError, FileNotFoundError, PermissionError, OSError), plus
`ActionStopped` (the action was stopped: nothing launches again) and its
subclass `OutputLimitExceeded` (a job wrote more than the cap). Both are
also `subprocess.SubprocessError`s and `ReaError`s.
"""

import errno
import io
import json
import os
import shutil
import subprocess
import tempfile
from typing import IO, Any, Callable, Mapping, Optional, Sequence, Union

from . import (Client, Duration, JobResult, ReaError, Refused, StrPath, _duration_ms, _flag_ms,
               _seconds)

#: What `args` may be: one program, or its argv (as subprocess.run takes them).
Args = Union[StrPath, Sequence[StrPath]]
#: A stdout/stderr/stdin argument: None, subprocess.PIPE/DEVNULL/STDOUT, a
#: descriptor, or a file object with a fileno().
Target = Union[None, int, IO[Any]]
#: The environment argument (str or bytes names and values, as subprocess takes).
Env = Mapping[Union[str, bytes], Union[str, bytes]]

#: The flag `bwrap_argv` adds: bwrap's child gets SIGKILL when bwrap dies.
DIE_WITH_PARENT = "--die-with-parent"
#: A Runner call without a timeout still needs a job deadline (the
#: protocol's is required): a year, capped by the action's deadline.
NO_TIMEOUT_S = 365 * 86400


class ActionStopped(ReaError, subprocess.SubprocessError):
    """The watchdog's action has been stopped (`reason`: "deadline",
    "excess_output", "root_lost", "abandoned", "stop_requested", ...,
    docs/stop.md): this call launched nothing, and no later one will."""

    def __init__(self, reason: str, cmd: Any = None, detail: str = "") -> None:
        self.reason = reason
        self.cmd = cmd
        self.detail = detail
        more = f": {detail}" if detail else ""
        super().__init__(f"the action was stopped ({reason}); nothing launches again{more}")


class OutputLimitExceeded(ActionStopped):
    """A job wrote more than the watchdog's output cap (its combined stdout
    and stderr, `--output-cap`, 64 KiB by default): the action was stopped
    (excess_output). `output`/`stdout` and `stderr` hold what was kept, up
    to the cap (bytes, or None where they were not captured)."""

    def __init__(self, cmd: Any, output: Optional[bytes], stderr: Optional[bytes]) -> None:
        super().__init__("excess_output", cmd, "the job wrote more than the output cap")
        self.output = output
        self.stderr = stderr

    @property
    def stdout(self) -> Optional[bytes]:
        return self.output


def bwrap_argv(owner_argv: Sequence[str], bwrap_bin: str = "/usr/bin/bwrap") -> list[str]:
    """The owner's bwrap argv with one `--die-with-parent` inserted right
    after `bwrap_bin`; every other element is the same string object, in
    the same place. Refuses (ValueError, nothing launched) an argv that
    does not start with exactly `bwrap_bin` or already has the flag
    anywhere; TypeError for anything but a list or tuple of str."""
    if isinstance(owner_argv, (str, bytes)) or not isinstance(owner_argv, (list, tuple)):
        raise TypeError(f"bwrap_argv takes an argv (a list of str), not {type(owner_argv).__name__}")
    if not all(isinstance(a, str) for a in owner_argv):
        raise TypeError("bwrap_argv: every element of the argv must be a str")
    if not owner_argv or owner_argv[0] != bwrap_bin:
        first = owner_argv[0] if owner_argv else "(empty argv)"
        raise ValueError(f"bwrap_argv: the argv starts with {first!r}, not with {bwrap_bin!r}; "
                         "refusing to launch it")
    if DIE_WITH_PARENT in owner_argv:
        raise ValueError(f"bwrap_argv: the argv already has {DIE_WITH_PARENT} (at index "
                         f"{list(owner_argv).index(DIE_WITH_PARENT)}); refusing to add another")
    return [owner_argv[0], DIE_WITH_PARENT, *owner_argv[1:]]


# ----- what subprocess.run does with its arguments ------------------------

def _argv(args: Args) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(args)]
    argv = [os.fsdecode(a) for a in args]
    if not argv:
        raise IndexError("list index out of range")   # subprocess.run([]) says the same
    return argv


def _text_codec(text: Optional[bool], universal_newlines: Optional[bool],
                encoding: Optional[str], errors: Optional[str]) -> Optional[tuple[str, str]]:
    """(encoding, errors) in text mode, else None: the defaults are the
    ones subprocess's text streams get (io.TextIOWrapper's)."""
    if not (text or universal_newlines or encoding or errors):
        return None
    w = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors)
    return w.encoding, w.errors or "strict"


def _decode(data: bytes, codec: tuple[str, str]) -> str:
    # subprocess's _translate_newlines: universal newlines on output.
    return data.decode(*codec).replace("\r\n", "\n").replace("\r", "\n")


def _env(env: Optional[Env]) -> Optional[dict[str, str]]:
    if env is None:
        return None
    out: dict[str, str] = {}
    for k, v in env.items():
        name, value = os.fsdecode(k), os.fsdecode(v)
        if not name or "=" in name or "\0" in name:
            raise ValueError("illegal environment variable name")
        if "\0" in value:
            raise ValueError("embedded null byte")
        out[name] = value
    return out


def _resolve(prog: str, cwd: Optional[str], env: Optional[Mapping[str, str]]) -> str:
    """The absolute path subprocess would execute for `prog`: a path with a
    slash relative to `cwd`, a bare name searched on `env`'s PATH (else
    ours), as CPython's _posixsubprocess does. FileNotFoundError or
    PermissionError (naming `prog`) where it would fail."""
    base = os.path.abspath(cwd) if cwd is not None else os.getcwd()
    if "/" in prog:
        return os.path.normpath(os.path.join(base, prog))
    denied = False
    for d in os.get_exec_path(env):
        cand = os.path.normpath(os.path.join(base, d, prog))
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
        denied = denied or os.path.exists(cand)
    code = errno.EACCES if denied else errno.ENOENT
    raise OSError(code, os.strerror(code), prog)


def _fd_of(target: Target, which: str) -> Optional[int]:
    """Where uncaptured output of `which` goes: a descriptor, or None (dropped)."""
    if target is None:
        return 1 if which == "stdout" else 2
    if target == subprocess.DEVNULL:
        return None
    if isinstance(target, int):
        if target < 0:
            raise ValueError(f"{which}={target!r} is not a descriptor")
        return target
    return target.fileno()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Runner:
    """A `subprocess.run` whose every call is a job of `watchdog` (a
    `Watchdog` this process started, or `Client.from_env()` inside a job).

        run = rea_client.Runner(wd, wrap=rea_client.bwrap_argv)
        done = run([BWRAP, "--ro-bind", "/", "/", "--", "/usr/bin/make"],
                   timeout=200, capture_output=True, check=True)

    `wrap` (such as `bwrap_argv`) is applied to every argv first. A call
    returns `subprocess.CompletedProcess` and raises what subprocess.run
    raises; once the action has been stopped, every call raises
    `ActionStopped` and launches nothing. The differences from
    subprocess.run are in docs/runner.md."""

    def __init__(self, watchdog: Client, *,
                 wrap: Optional[Callable[[list[str]], list[str]]] = None) -> None:
        self.watchdog = watchdog
        self.wrap = wrap
        #: Why the action stopped, once a call saw it; None before.
        self.stop_reason: Optional[str] = None

    def __call__(self, args: Args, *, stdin: Target = None, input: Union[bytes, str, None] = None,
                 stdout: Target = None, stderr: Target = None, capture_output: bool = False,
                 timeout: Optional[Duration] = None, check: bool = False,
                 cwd: Optional[StrPath] = None, env: Optional[Env] = None,
                 text: Optional[bool] = None, encoding: Optional[str] = None,
                 errors: Optional[str] = None, universal_newlines: Optional[bool] = None,
                 inner_alarm: Optional[Duration] = None,
                 name: Optional[str] = None) -> "subprocess.CompletedProcess[Any]":
        if self.stop_reason is not None:
            raise ActionStopped(self.stop_reason, args, "seen by an earlier call")
        if input is not None and stdin is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        if stdin not in (None, subprocess.DEVNULL):
            raise ValueError("Runner: a job's stdin is /dev/null or input=..., "
                             "not a descriptor of this process")
        if capture_output:
            if stdout is not None or stderr is not None:
                raise ValueError("stdout and stderr arguments may not be used "
                                 "with capture_output.")
            stdout = stderr = subprocess.PIPE
        codec = _text_codec(text, universal_newlines, encoding, errors)
        data: Optional[bytes] = None
        if isinstance(input, str):
            if codec is None:
                raise TypeError("input is a str but the call is not in text mode")
            data = input.encode(*codec)
        elif input is not None:
            data = bytes(input)
        argv = _argv(args)
        if self.wrap is not None:
            argv = self.wrap(argv)       # raises (ValueError) before anything is sent
        cwd_s = None if cwd is None else os.fsdecode(cwd)
        job_env = _env(env)
        argv[0] = _resolve(argv[0], cwd_s, job_env)
        deadline: Duration = NO_TIMEOUT_S if timeout is None else timeout
        _duration_ms(deadline, "timeout")
        merged = stderr == subprocess.STDOUT
        drop = (stdout == subprocess.DEVNULL and (merged or stderr == subprocess.DEVNULL))
        try:
            job = self.watchdog.spawn(argv, deadline, capture=not drop, name=name,
                                      inner_alarm=inner_alarm, cwd=cwd_s, env=job_env,
                                      input=data)
        except Refused as e:
            raise self._refused(e, args, cwd_s) from None
        res = job.wait()
        out, err = self._deliver(res, stdout, stderr, merged)
        if res.outcome == "stopped" or res.output_capped:
            reason = res.stop_reason or "excess_output"
            self.stop_reason = reason
            if reason == "excess_output":
                raise OutputLimitExceeded(args, res.stdout, res.stderr)
            if reason == "deadline" and timeout is not None:
                raise subprocess.TimeoutExpired(args, _seconds(timeout), output=res.stdout,
                                                stderr=res.stderr)
            raise ActionStopped(reason, args, f"job {res.job} was stopped")
        code = res.code if res.code is not None else -int(res.status["signal"])
        outs: Any = out if codec is None or out is None else _decode(out, codec)
        errs: Any = err if codec is None or err is None else _decode(err, codec)
        if check and code:
            raise subprocess.CalledProcessError(code, args, outs, errs)
        return subprocess.CompletedProcess(args, code, outs, errs)

    def _refused(self, e: Refused, args: Args, cwd: Optional[str]) -> BaseException:
        if e.reason == "aborted":
            self.stop_reason = e.stop_reason or "unknown"
            return ActionStopped(self.stop_reason, args, "refused by the watchdog (aborted)")
        if e.reason in ("not_found", "not_executable", "spawn_failed"):
            code = e.errno or (errno.ENOENT if e.reason == "not_found" else errno.EACCES)
            # subprocess names the directory when chdir failed, else args[0].
            name = cwd if cwd is not None and not os.path.isdir(cwd) else _argv(args)[0]
            return OSError(code, os.strerror(code), name)
        if e.reason == "bad_env":
            return ValueError(f"illegal environment: {e.detail}")
        return e

    @staticmethod
    def _deliver(res: JobResult, stdout: Target, stderr: Target,
                 merged: bool) -> tuple[Optional[bytes], Optional[bytes]]:
        """(stdout, stderr) for the CompletedProcess: the captured bytes
        where PIPE was asked for; the rest is written where subprocess's
        child would have written it (this process's stdout/stderr, a file,
        a descriptor) or dropped (DEVNULL). With stderr=STDOUT the stderr
        bytes follow the stdout bytes (the watchdog keeps them apart)."""
        o, e = res.stdout or b"", res.stderr or b""
        if merged:
            o, e, stderr = o + e, b"", subprocess.DEVNULL
        kept: list[Optional[bytes]] = []
        for data, target, which in ((o, stdout, "stdout"), (e, stderr, "stderr")):
            if target == subprocess.PIPE:
                kept.append(data)
                continue
            kept.append(None)
            fd = _fd_of(target, which)
            if fd is not None and data:
                _write_all(fd, data)
        return kept[0], kept[1]


# ----- the one-shot --------------------------------------------------------

def run(args: Args, *, stdin: Target = None, input: Union[bytes, str, None] = None,
        stdout: Target = None, stderr: Target = None, capture_output: bool = False,
        timeout: Optional[Duration] = None, check: bool = False,
        cwd: Optional[StrPath] = None, env: Optional[Env] = None,
        text: Optional[bool] = None, encoding: Optional[str] = None,
        errors: Optional[str] = None, universal_newlines: Optional[bool] = None,
        binary: Optional[StrPath] = None, audit_log: Optional[StrPath] = None,
        term_grace: Optional[Duration] = None,
        kill_bound: Optional[Duration] = None) -> "subprocess.CompletedProcess[Any]":
    """subprocess.run through `rea-watchdog exec`: the program gets this
    call's stdin, stdout, stderr, cwd and environment as under
    subprocess.run, and a timeout ends its whole tree (TERM, the grace,
    KILL), grandchildren that hold the output pipe too, before
    TimeoutExpired is raised: within timeout + term_grace + 1 s, where
    subprocess.run kills the direct child alone and leaves the rest
    running (and Popen.communicate() after a kill waits for them).
    Orphans the program leaves behind are ended when it exits.

    `binary` is rea-watchdog (default $REA_WATCHDOG, then PATH); the audit
    log goes to `audit_log` when given, else to a private temporary
    directory removed at the end; `term_grace`, `kill_bound` are exec's
    bounds. The watchdog's own lines go to that directory, never to the
    program's stderr (`exec --notes`)."""
    exe = binary or os.environ.get("REA_WATCHDOG") or shutil.which("rea-watchdog")
    if not exe:
        raise ReaError("rea-watchdog not found (pass binary= or set REA_WATCHDOG)")
    argv = _argv(args)
    if capture_output:
        if stdout is not None or stderr is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        stdout = stderr = subprocess.PIPE
    if input is not None:
        if stdin is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        stdin = subprocess.PIPE
    work = tempfile.mkdtemp(prefix="rea-run.")
    try:
        notes = os.path.join(work, "notes")
        status_path = os.path.join(work, "status.json")
        log = os.fspath(audit_log) if audit_log is not None else os.path.join(work, "audit.jsonl")
        cmd = [os.path.abspath(os.fspath(exe)), "exec", "--notes", notes,
               "--json-status", status_path, "--audit-log", os.path.abspath(log)]
        if timeout is not None:
            cmd += ["--deadline", f"{_duration_ms(timeout, 'timeout')}ms"]
        grace = 0.5 if term_grace is None else _seconds(term_grace, "term_grace")
        bound = 3.0 if kill_bound is None else _seconds(kill_bound, "kill_bound")
        if term_grace is not None:
            cmd += ["--term-grace", f"{_flag_ms(term_grace, 'term_grace')}ms"]
        if kill_bound is not None:
            cmd += ["--kill-bound", f"{_flag_ms(kill_bound, 'kill_bound')}ms"]
        cmd += ["--", *argv]
        popen: dict[str, Any] = dict(
            stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, env=_env(env), text=text,
            encoding=encoding, errors=errors, universal_newlines=universal_newlines)
        with subprocess.Popen(cmd, **popen) as proc:
            # exec ends everything itself; this bound only guards against
            # exec itself hanging (then it is asked to stop, as Ctrl-C would).
            limit = None if timeout is None else _seconds(timeout) + grace + bound + 10
            try:
                out, err = proc.communicate(input, timeout=limit)
            except subprocess.TimeoutExpired:
                proc.terminate()        # exec's SIGTERM: a clean stop of its action
                try:
                    proc.communicate(timeout=grace + bound + 10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise ReaError(f"rea-watchdog exec did not end within {limit} s") from None
            except BaseException:
                # Ctrl-C reached exec too (it is in our process group): it
                # stops its action cleanly; wait for that, then go on.
                try:
                    proc.wait(timeout=grace + bound + 10)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    proc.wait()
                raise
        try:
            with open(status_path) as f:
                status: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            said = ""
            if os.path.exists(notes):
                with open(notes, errors="replace") as f:
                    said = f.read().strip()
            raise ReaError(f"rea-watchdog exec failed (exit {proc.returncode}): "
                           f"{said or 'it said nothing'}") from None
        job = status.get("job")
        if job is None:
            raise ReaError(f"rea-watchdog exec launched nothing (exit {status.get('exit')})")
        failed = job.get("failed")
        if failed is not None:
            reason = failed.get("reason")
            if reason in ("not_found", "not_executable"):
                code = errno.ENOENT if reason == "not_found" else errno.EACCES
                raise OSError(code, os.strerror(code), argv[0])
            raise ReaError(f"rea-watchdog exec could not start {argv[0]!r}: {reason}")
        if status.get("stop_reason") == "deadline" and timeout is not None:
            raise subprocess.TimeoutExpired(args, _seconds(timeout), output=out, stderr=err)
        st = job["exited"]["status"]
        code = st["code"] if "code" in st else -int(st["signal"])
        if check and code:
            raise subprocess.CalledProcessError(code, args, out, err)
        return subprocess.CompletedProcess(args, code, out, err)
    finally:
        shutil.rmtree(work, ignore_errors=True)
