"""rea_client.ssh: the controller's whole flow on a remote host, over
OpenSSH's own `ssh` and `scp`.

    from rea_client import ssh

    target = ssh.Target("build-7.example", user="root", identity="~/.ssh/rea_ed25519",
                        known_hosts="~/.ssh/known_hosts.rea")
    plan = ssh.Plan(stage="/srv/rea/stage-42", work="/srv/rea/work-42",
                    binaries=ssh.local_binaries("target/dist"),
                    files=["build/hopper-runtime.bin", "build/phase.py", "build/launcher.py"],
                    phases=[ssh.Phase("install", ["{python}", "{stage}/launcher.py"], 200, 180),
                            ssh.Phase("rehearsal", [...], 260, 240)],
                    local_dir="/var/lib/controller/run-42")
    outcome = ssh.Controller(target, plan).run()
    print(outcome.decision)   # removed | discarded | retain | review

or from a shell: `python3 -m rea_client.ssh --help`.

Every local command is an argv list (never a local shell string). What
runs remotely is one string built with `shlex.quote` from an argv (ssh
hands it to the remote user's shell). The ssh options are always
`BatchMode=yes` (no password or passphrase prompt), `IdentitiesOnly=yes`
with `-i KEY`, `StrictHostKeyChecking=yes` with the given
`UserKnownHostsFile` (an unknown or changed host key is an error, never
a question), `ConnectTimeout`, `ServerAliveInterval` and
`ServerAliveCountMax` (a silent network ends the local ssh with exit 255
after interval x count seconds), and `-T` (no pty) unless `tty=True`.

The layout on the remote host (docs/stage.md, "The watchdog's own place"):

    STAGE/                       made by `rea-stage begin`; the declared uploads
    STAGE/harness.py             the remote harness (this package's _ssh_harness.py)
    STAGE/rea_client.zip         this package, imported by the harness from the zip
    STAGE/.rea/bin/rea-watchdog, rea-audit, rea-stage   uploaded like any other file
    STAGE/.rea/state/            the watchdog's state directory (removed at close)
    STAGE/.rea/audit.jsonl       the audit log (stays, sealed)
    WORK/                        the controller's own, outside the stage: the
                                 copy of rea-stage `begin`/`discard` run, the
                                 harness's observations, the discard and remove logs

Every upload is declared before the upload (`rea-stage begin STAGE --file
NAME ...`). In the `flat` layout each is pinned (`NAME=SHA256`). In the
`rea-dir` layout today's `rea-stage begin` takes plain names only and the
watchdog refuses a pinned stage holding an undeclared `.rea/`: the
top-level uploads are declared unpinned and the binaries in `.rea/bin` are
not declared (a gap: 13.1's pins do not cover this layout yet). `begin` creates STAGE, which must not exist yet, so the
`rea-stage` that runs it cannot come from the stage: the controller first
copies its local `rea-stage` into WORK (outside the stage) and runs
`begin` from there; a `discard` after a cut upload runs that same copy
(the stage's own copy may be the file the cut left short). Everything
after the upload runs the stage's own binaries, `STAGE/.rea/bin/...`.

The flow (`Controller.run`): begin; upload; the harness (`ssh host
python3 STAGE/harness.py ...`) starts `rea-watchdog run` from
`STAGE/.rea/bin` (the watchdog leaves the SSH session itself, setsid: a
hangup of that session does not reach it; the harness stays its parent
and root controller), runs
the phases through `rea_client.Runner`, closes the action and prints the
close head; the controller fetches the sealed log with scp, pins its head
(`rea-audit verify LOCAL_COPY --expect-head HEAD` with the local
rea-audit: chain intact, head as printed), runs `STAGE/.rea/bin/rea-audit
verify LOG --expect-head HEAD --staging STAGE` remotely, and only when that
says `delete_allowed` and the watchdog exited 0 runs `STAGE/.rea/bin/rea-stage
remove STAGE --audit-log LOG --expect-head HEAD --log WORK/remove.jsonl`
(the log goes with the stage; the fetched copy stays in `local_dir`).

The unhappy paths (README, "The six outcomes"):
- the upload fails (scp's exit is not 0): `WORK/rea-stage discard STAGE
  --receipt-sha256 HEX --audit-log WORK/discard.jsonl` over a new
  connection; the discard log is fetched and verified locally ->
  `discarded`, or `review` when discard refused.
- the harness's ssh exits 255 or is killed (the response is lost, or an
  SSH timeout: it proves nothing about the remote side): no retry, no
  cleanup, no close, no deletion. A new connection runs
  `STAGE/.rea/bin/rea-audit reconcile LOG --staging STAGE --state-dir STATE
  --json` (read-only) and the decision is `review`, whatever reconcile
  says (even `running`); the report is the packet for a person.
- the harness ends without a close (its watchdog was lost, a phase
  failed to start): reconcile as above -> `review`.
- the action closed but verify says retain: `retain`, stage kept.
- `begin` itself failing (refused, or its ssh lost) raises SSHError:
  nothing was uploaded, but a lost `begin` may have created the stage
  without the controller learning its receipt's SHA-256, so it cannot be
  discarded from here; a person looks.

Remote paths (STAGE, WORK) must be absolute and plain (letters, digits,
`._+-/`): they pass through scp and the remote shell unchanged.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import IO, Callable, Optional, Sequence

from . import JSONObject, ReaError

__all__ = ["Target", "Phase", "Plan", "Outcome", "Controller", "SSHError", "local_binaries",
           "ssh_argv", "scp_argv", "remote_command", "BINARIES"]

#: rea's three binaries, uploaded into STAGE/.rea/bin.
BINARIES = ("rea-watchdog", "rea-audit", "rea-stage")
_SAFE = re.compile(r"^/[A-Za-z0-9._+/-]*$")
_HERE = os.path.dirname(os.path.abspath(__file__))


class SSHError(ReaError):
    """ssh or scp could not do a step that has no decision of its own
    (begin refused, a fetch failed)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """One remote host and how to reach it."""
    host: str
    identity: str
    known_hosts: str
    user: str = "root"
    port: int = 22
    connect_timeout: int = 10
    server_alive_interval: int = 15
    server_alive_count_max: int = 3
    ssh: str = "ssh"
    scp: str = "scp"
    #: scp's bandwidth limit (`-l`, Kbit/s); None: no limit.
    scp_limit_kbps: Optional[int] = None

    def options(self) -> list[str]:
        """The -o options every ssh and scp gets."""
        opts = {
            "BatchMode": "yes",
            "IdentitiesOnly": "yes",
            "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": os.path.expanduser(self.known_hosts),
            "ConnectTimeout": str(self.connect_timeout),
            "ServerAliveInterval": str(self.server_alive_interval),
            "ServerAliveCountMax": str(self.server_alive_count_max),
            "LogLevel": "ERROR",
        }
        out: list[str] = ["-i", os.path.expanduser(self.identity)]
        for k, v in opts.items():
            out += ["-o", f"{k}={v}"]
        return out


def remote_command(argv: Sequence[str]) -> str:
    """The one string ssh sends: each argument shlex-quoted."""
    return " ".join(shlex.quote(a) for a in argv)


def ssh_argv(t: Target, remote: Sequence[str], tty: bool = False) -> list[str]:
    """`ssh OPTIONS -p PORT USER@HOST -- 'quoted remote argv'`."""
    return [t.ssh, *t.options(), "-tt" if tty else "-T", "-p", str(t.port),
            f"{t.user}@{t.host}", "--", remote_command(remote)]


def scp_argv(t: Target, sources: Sequence[str], dest: str) -> list[str]:
    """`scp -q OPTIONS -P PORT SRC... DEST`; a remote side is `USER@HOST:PATH`."""
    limit = [] if t.scp_limit_kbps is None else ["-l", str(t.scp_limit_kbps)]
    return [t.scp, "-q", *t.options(), *limit, "-P", str(t.port), *sources, dest]


def local_binaries(directory: str) -> dict[str, str]:
    """{name: path} of the three binaries in a local directory (target/dist)."""
    return {b: os.path.join(directory, b) for b in BINARIES}


@dataclasses.dataclass
class Phase:
    """A phase the harness runs through the Runner. In argv, `{stage}`
    becomes STAGE and `{python}` the remote python3."""
    name: str
    argv: list[str]
    timeout: float
    inner_alarm: Optional[float] = None
    env: Optional[dict[str, str]] = None


@dataclasses.dataclass
class Plan:
    """What to upload, where, and what to run."""
    stage: str
    work: str
    binaries: dict[str, str]
    files: list[str]
    phases: list[Phase]
    local_dir: str
    local_audit: Optional[str] = None
    remote_python: str = "python3"
    harness_wait_eof: float = 60.0
    #: "rea-dir" (the default; docs/stage.md): binaries in STAGE/.rea/bin, the
    #: state directory and the log in STAGE/.rea. "flat": binaries at the
    #: stage's top, the state directory and the log in WORK (for a
    #: watchdog that predates 11.2, whose begin takes plain names only).
    layout: str = "rea-dir"

    def check(self) -> None:
        for what, p in (("stage", self.stage), ("work", self.work)):
            if not _SAFE.match(p) or "/../" in p + "/" or p.rstrip("/") in ("", "/"):
                raise ValueError(f"{what} must be an absolute plain path, not {p!r}")
        if os.path.commonpath([self.stage, self.work]) in (self.stage, self.work):
            raise ValueError("work must be outside the stage (and the stage outside work)")
        if sorted(self.binaries) != sorted(BINARIES):
            raise ValueError(f"binaries must name exactly {', '.join(BINARIES)}")
        names = [os.path.basename(f) for f in self.files] + ["harness.py", "rea_client.zip"]
        if len(set(names)) != len(names) or any(n.startswith(".rea") for n in names):
            raise ValueError(f"upload names must be distinct and not rea's own: {names}")

    @property
    def rea_dir(self) -> bool:
        if self.layout not in ("rea-dir", "flat"):
            raise ValueError(f"layout is rea-dir or flat, not {self.layout!r}")
        return self.layout == "rea-dir"

    @property
    def bin_prefix(self) -> str:
        """Where the binaries go, relative to the stage ("" or ".rea/bin/")."""
        return ".rea/bin/" if self.rea_dir else ""

    @property
    def audit_log(self) -> str:
        return f"{self.stage}/.rea/audit.jsonl" if self.rea_dir else f"{self.work}/audit.jsonl"

    @property
    def state_dir(self) -> str:
        return f"{self.stage}/.rea/state" if self.rea_dir else f"{self.work}/state"

    @property
    def events(self) -> str:
        """The harness's observations (signals, EOF, EPIPE), outside the stage."""
        return f"{self.work}/harness-events.jsonl"

    def bin(self, name: str) -> str:
        return f"{self.stage}/{self.bin_prefix}{name}"


@dataclasses.dataclass
class Outcome:
    """Where the flow ended. `decision`: removed (the stage is gone, by
    rea-stage remove), discarded (the cut upload is gone, by rea-stage
    discard), retain (closed, verify said keep it), review (the response was
    lost, the SSH connection timed out, or the harness ended without a close:
    a person decides, with `reconcile` as the packet)."""
    decision: str
    why: str
    receipt_sha256: Optional[str] = None
    upload_exit: Optional[int] = None
    harness_exit: Optional[int] = None
    harness_events: list[JSONObject] = dataclasses.field(default_factory=list)
    closed: Optional[JSONObject] = None
    head: Optional[str] = None
    local_log: Optional[str] = None
    verify_local: Optional[JSONObject] = None
    verify_remote: Optional[JSONObject] = None
    remove: Optional[JSONObject] = None
    discard: Optional[JSONObject] = None
    reconcile: Optional[JSONObject] = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_json(self) -> JSONObject:
        return dataclasses.asdict(self)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_or_none(data: bytes) -> Optional[JSONObject]:
    for line in reversed(data.decode(errors="replace").splitlines()):
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if isinstance(v, dict):
            return v
    try:
        v = json.loads(data)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _kill_own(proc: "subprocess.Popen[bytes]", sig: int = signal.SIGKILL) -> None:
    """Signals a child of this process through a pidfd (it is unreaped, so
    its pid cannot have been reused)."""
    if proc.returncode is not None:
        return
    fd = os.pidfd_open(proc.pid)
    try:
        signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


#: Called with each started scp of the upload (tests cut it here).
UploadHook = Callable[["subprocess.Popen[bytes]", str], None]
#: Called with each line the harness prints and its local ssh (tests kill it here).
LineHook = Callable[[JSONObject, "subprocess.Popen[bytes]"], None]


class Controller:
    """The controller's steps over SSH against one Target, for one Plan."""

    def __init__(self, target: Target, plan: Plan, tty: bool = False,
                 command_timeout: float = 300.0) -> None:
        plan.check()
        self.t = target
        self.plan = plan
        self.tty = tty
        self.command_timeout = command_timeout
        os.makedirs(plan.local_dir, exist_ok=True)
        self._pack: Optional[dict[str, str]] = None

    # ----- the plain ssh and scp calls ----------------------------------------

    def ssh(self, remote: Sequence[str], timeout: Optional[float] = None,
            shell_and: Sequence[Sequence[str]] = ()) -> "subprocess.CompletedProcess[bytes]":
        """Runs one remote argv (and, joined with `&&`, those in shell_and);
        returns its status and output. ssh's own failure is exit 255."""
        cmd = ssh_argv(self.t, remote, tty=False)
        if shell_and:
            cmd[-1] = " && ".join([cmd[-1], *(remote_command(a) for a in shell_and)])
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              timeout=timeout or self.command_timeout)

    def _remote(self, path: str) -> str:
        return f"{self.t.user}@{self.t.host}:{path}"

    def scp_to(self, sources: Sequence[str], dest: str,
               hook: Optional[UploadHook] = None) -> int:
        """Uploads; returns scp's exit status (negative: killed by that signal)."""
        proc = subprocess.Popen(scp_argv(self.t, sources, self._remote(dest)),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        if hook is not None:
            hook(proc, dest)
        try:
            _, err = proc.communicate(timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            _kill_own(proc)
            proc.wait()
            return -int(signal.SIGKILL)
        if proc.returncode != 0 and err:
            sys.stderr.write(err.decode(errors="replace"))
        return proc.returncode

    def fetch(self, remote: str, local: str) -> None:
        r = subprocess.run(scp_argv(self.t, [self._remote(remote)], local),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=self.command_timeout)
        if r.returncode != 0:
            raise SSHError(f"scp of {remote} failed (exit {r.returncode}): "
                           f"{r.stderr.decode(errors='replace').strip()}")

    # ----- what is uploaded -----------------------------------------------------

    def uploads(self) -> dict[str, str]:
        """{name in the stage: local path}, the harness and the package zip included."""
        if self._pack is None:
            pack: dict[str, str] = {}
            for f in self.plan.files:
                pack[os.path.basename(f)] = f
            # scp names each file by its local name: the harness as harness.py.
            harness = os.path.join(self.plan.local_dir, "harness.py")
            with open(os.path.join(_HERE, "_ssh_harness.py"), "rb") as src, \
                    open(harness, "wb") as dst:
                dst.write(src.read())
            pack["harness.py"] = harness
            pack["rea_client.zip"] = self._zip_package()
            for name, path in self.plan.binaries.items():
                pack[f"{self.plan.bin_prefix}{name}"] = path
            self._pack = pack
        return self._pack

    def _zip_package(self) -> str:
        """This package as a zip the harness imports (zipimport): one
        declared file instead of a directory."""
        out = os.path.join(self.plan.local_dir, "rea_client.zip")
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for name in sorted(os.listdir(_HERE)):
                if name.endswith(".py") or name == "py.typed":
                    info = zipfile.ZipInfo(f"rea_client/{name}", (1980, 1, 1, 0, 0, 0))
                    with open(os.path.join(_HERE, name), "rb") as f:
                        z.writestr(info, f.read())
        return out

    # ----- the steps ----------------------------------------------------------------

    def declared(self) -> list[str]:
        """begin's `--file` arguments. Today's begin takes plain names only,
        and with any pin the watchdog refuses a stage holding an undeclared
        entry (`.rea`): in the rea-dir layout the top-level uploads are
        declared unpinned and the binaries in .rea/bin are not declared (a
        gap, in the module doc); in the flat layout every upload is pinned."""
        if self.plan.rea_dir:
            return [f"--file={name}" for name in self.uploads() if "/" not in name]
        return [f"--file={name}={_sha256(path)}" for name, path in self.uploads().items()]

    def begin(self) -> str:
        """Copies rea-stage into WORK, runs `begin` with every upload
        declared (see the module doc); returns the receipt's SHA-256."""
        p = self.plan
        r = self.ssh(["mkdir", "-p", "-m", "0700", p.work])
        if r.returncode != 0:
            raise SSHError(f"mkdir {p.work} failed (exit {r.returncode}): "
                           f"{r.stderr.decode(errors='replace').strip()}")
        code = self.scp_to([p.binaries["rea-stage"]], f"{p.work}/rea-stage")
        if code != 0:
            raise SSHError(f"the upload of rea-stage into {p.work} failed (exit {code})")
        r = self.ssh([f"{p.work}/rea-stage", "begin", p.stage, *self.declared()])
        sha = r.stdout.decode().strip().splitlines()[-1:] if r.returncode == 0 else []
        if not sha or not re.fullmatch(r"[0-9a-f]{64}", sha[0]):
            raise SSHError(f"rea-stage begin failed (exit {r.returncode}): "
                           f"{r.stderr.decode(errors='replace').strip()}")
        return sha[0]

    def upload(self, hook: Optional[UploadHook] = None) -> int:
        """scp into the stage: top-level files, then the binaries. 0 when all arrived."""
        top = [path for name, path in self.uploads().items() if "/" not in name]
        bins = [path for name, path in self.uploads().items() if "/" in name]
        code = self.scp_to(top, f"{self.plan.stage}/", hook)
        if code != 0 or not bins:
            return code
        # .rea/bin only now: a cut before it leaves a stage discard accepts
        # (declared regular files only); a cut after it is kept (review).
        p = self.plan
        r = self.ssh(["mkdir", "-m", "0700", f"{p.stage}/.rea", f"{p.stage}/.rea/bin"])
        if r.returncode != 0:
            return r.returncode
        ids = {(os.stat(b).st_dev, os.stat(b).st_ino) for b in bins}
        if len(bins) > 1 and len(ids) == 1:
            # tools/dist's one file for the three programs (docs/deploy.md):
            # uploaded once, the other names linked to it on the host.
            code = self.scp_to(bins[:1], f"{p.stage}/.rea/bin/", hook)
            if code != 0:
                return code
            first = f"{p.stage}/.rea/bin/{os.path.basename(bins[0])}"
            for b in bins[1:]:
                r = self.ssh(["ln", "-f", first, f"{p.stage}/.rea/bin/{os.path.basename(b)}"])
                if r.returncode != 0:
                    return r.returncode
            return 0
        return self.scp_to(bins, f"{self.plan.stage}/.rea/bin/", hook)

    def discard(self, receipt_sha256: str) -> JSONObject:
        """`rea-stage discard` (the WORK copy) over a new connection; its log
        fetched and verified locally."""
        p = self.plan
        log = f"{p.work}/discard.jsonl"
        return self._logged([f"{p.work}/rea-stage", "discard", p.stage, "--receipt-sha256",
                             receipt_sha256, "--audit-log", log], log)

    def _logged(self, argv: Sequence[str], log: str) -> JSONObject:
        """Runs a rea-stage step that writes its own log at `log` on the
        host (outside the stage), then fetches that log and verifies it
        locally: its exit, its JSON line, its stderr, and the verdict."""
        r = self.ssh(argv)
        out: JSONObject = {"exit": r.returncode, "stdout": _json_or_none(r.stdout),
                           "stderr": r.stderr.decode(errors="replace")}
        local = os.path.join(self.plan.local_dir, os.path.basename(log))
        try:
            self.fetch(log, local)
            out["verify"] = self._verify_local(local, None)
        except SSHError as e:
            out["fetch_error"] = str(e)
        return out

    def start_harness(self) -> "subprocess.Popen[bytes]":
        p = self.plan
        phases = [dataclasses.asdict(ph) for ph in p.phases]
        argv = [p.remote_python, f"{p.stage}/harness.py", "--stage", p.stage,
                "--watchdog", p.bin("rea-watchdog"), "--state-dir", p.state_dir,
                "--audit-log", p.audit_log, "--events", p.events, "--phases", json.dumps(phases),
                "--wait-eof", str(p.harness_wait_eof)]
        err = open(os.path.join(p.local_dir, "harness-ssh.stderr"), "ab")
        try:
            return subprocess.Popen(ssh_argv(self.t, argv, tty=self.tty),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        finally:
            err.close()

    def follow_harness(self, proc: "subprocess.Popen[bytes]",
                       hook: Optional[LineHook] = None) -> tuple[int, list[JSONObject]]:
        """Reads the harness's lines until EOF; closes its stdin once it
        printed `closed` (the harness then ends); returns ssh's exit status
        and the lines."""
        lines: list[JSONObject] = []
        out: IO[bytes] = proc.stdout  # type: ignore[assignment]
        for raw in out:
            try:
                v = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(v, dict):
                continue
            lines.append(v)
            if hook is not None:
                hook(v, proc)
            if v.get("event") in ("closed", "failed") and proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        code = proc.wait()
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        return code, lines

    def _audit_local(self) -> str:
        return (self.plan.local_audit or os.environ.get("REA_AUDIT")
                or os.path.join(os.path.dirname(self.plan.binaries["rea-audit"]), "rea-audit"))

    def _verify_local(self, log: str, head: Optional[str]) -> JSONObject:
        cmd = [self._audit_local(), "verify", log, "--json"]
        if head:
            cmd += ["--expect-head", head]
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=self.command_timeout)
        v: JSONObject = _json_or_none(r.stdout) or {}
        v["exit_code"] = r.returncode
        return v

    def verify_remote(self, head: Optional[str]) -> JSONObject:
        p = self.plan
        cmd = [p.bin("rea-audit"), "verify", p.audit_log, "--json", "--staging", p.stage]
        if head:
            cmd += ["--expect-head", head]
        r = self.ssh(cmd)
        v: JSONObject = _json_or_none(r.stdout) or {}
        v["exit_code"] = r.returncode
        return v

    def reconcile(self) -> JSONObject:
        """`rea-audit reconcile` over a new connection: read-only."""
        p = self.plan
        r = self.ssh([p.bin("rea-audit"), "reconcile", p.audit_log, "--staging", p.stage,
                      "--state-dir", p.state_dir, "--json"])
        v: JSONObject = _json_or_none(r.stdout) or {}
        v["exit_code"] = r.returncode
        if r.returncode == 255:
            v["ssh_error"] = r.stderr.decode(errors="replace").strip()
        return v

    def remove(self, head: str) -> JSONObject:
        p = self.plan
        log = f"{p.work}/remove.jsonl"
        return self._logged([p.bin("rea-stage"), "remove", p.stage, "--audit-log",
                             p.audit_log, "--expect-head", head, "--log", log], log)

    def events(self) -> list[JSONObject]:
        """The harness's own observations, read over a new connection."""
        r = self.ssh(["cat", self.plan.events])
        out: list[JSONObject] = []
        for line in r.stdout.decode(errors="replace").splitlines():
            try:
                v = json.loads(line)
            except ValueError:
                continue
            if isinstance(v, dict):
                out.append(v)
        return out

    # ----- the whole flow ---------------------------------------------------------

    def run(self, on_upload: Optional[UploadHook] = None,
            on_line: Optional[LineHook] = None,
            after_harness: Optional[Callable[[int], None]] = None) -> Outcome:
        """begin, upload, harness, fetch+pin, verify (local and remote),
        remove; or the unhappy path each failure leads to."""
        t0 = time.monotonic()
        timings: dict[str, float] = {}

        def lap(name: str, since: float) -> float:
            now = time.monotonic()
            timings[name] = round(now - since, 3)
            return now

        sha = self.begin()
        t = lap("begin", t0)
        o = Outcome("review", "", receipt_sha256=sha, timings=timings)
        o.upload_exit = self.upload(on_upload)
        t = lap("upload", t)
        if o.upload_exit != 0:
            o.discard = self.discard(sha)
            lap("discard", t)
            ok = (o.discard["exit"] == 0
                  and (o.discard.get("verify") or {}).get("result") == "discarded")
            o.decision = "discarded" if ok else "review"
            o.why = f"the upload failed (scp exit {o.upload_exit}); rea-stage discard " + \
                ("removed the untouched stage" if ok else "did not remove it")
            return o
        proc = self.start_harness()
        code, lines = self.follow_harness(proc, on_line)
        t = lap("harness", t)
        o.harness_exit = code
        if after_harness is not None:
            after_harness(code)
        closed = next((v for v in lines if v.get("event") == "closed"), None)
        o.closed = closed
        if code == 255 or code < 0 or closed is None:
            # Response lost / SSH timeout / no close: no retry, no cleanup,
            # no close, no deletion. Read-only reconcile, then a person.
            o.reconcile = self.reconcile()
            lap("reconcile", t)
            o.harness_events = self.events()
            o.decision = "review"
            if code == 255 or code < 0:
                o.why = (f"the harness's ssh ended with {code}: the response was lost or "
                         "the connection timed out; nothing was retried or cleaned up")
            else:
                o.why = f"the harness exited {code} without closing the action"
            return o
        o.head = closed.get("head")
        o.local_log = os.path.join(self.plan.local_dir, "audit.jsonl")
        self.fetch(self.plan.audit_log, o.local_log)
        o.verify_local = self._verify_local(o.local_log, o.head)
        t = lap("fetch_and_verify_local", t)
        o.verify_remote = self.verify_remote(o.head)
        t = lap("verify_remote", t)
        o.harness_events = self.events()
        local_ok = self._local_chain_ok(o.verify_local)
        remote_ok = (o.verify_remote.get("verdict") == "delete_allowed"
                     and o.verify_remote["exit_code"] == 0)
        if not (closed.get("exit_code") == 0 and local_ok and remote_ok and o.head):
            o.decision = "retain"
            o.why = (f"watchdog exit {closed.get('exit_code')}, remote verify "
                     f"{o.verify_remote.get('verdict')} {self._codes(o.verify_remote)}, "
                     f"local copy {'intact' if local_ok else 'NOT intact'}")
            return o
        o.remove = self.remove(o.head)
        lap("remove", t)
        removed = (o.remove["exit"] == 0
                   and (o.remove.get("verify") or {}).get("result") == "removed")
        o.decision = "removed" if removed else "retain"
        o.why = ("rea-stage remove removed the verified stage" if removed
                 else f"rea-stage remove exited {o.remove['exit']}")
        timings["total"] = round(time.monotonic() - t0, 3)
        return o

    @staticmethod
    def _codes(v: JSONObject) -> list[str]:
        return [str(r.get("code")) for r in v.get("reasons", []) if isinstance(r, dict)]

    @classmethod
    def _local_chain_ok(cls, v: JSONObject) -> bool:
        """The fetched copy: intact chain, sealed, head as pinned. Without
        --staging (the stage is remote) verify keeps it for that one reason
        (staging_not_checked); anything else is not intact."""
        if v.get("verdict") == "delete_allowed" and v.get("exit_code") == 0:
            return True
        return v.get("exit_code") == 1 and cls._codes(v) == ["staging_not_checked"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python3 -m rea_client.ssh`: the whole flow against one host;
    prints the Outcome as JSON; exit 0 removed/discarded, 1 retain, 2 review,
    3 a step failed before any decision (begin refused, a fetch failed)."""
    a = argparse.ArgumentParser(prog="python3 -m rea_client.ssh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("host")
    a.add_argument("--user", default="root")
    a.add_argument("--port", type=int, default=22)
    a.add_argument("--identity", required=True)
    a.add_argument("--known-hosts", required=True)
    a.add_argument("--server-alive-interval", type=int, default=15)
    a.add_argument("--server-alive-count-max", type=int, default=3)
    a.add_argument("--connect-timeout", type=int, default=10)
    a.add_argument("--stage", required=True, help="remote stage (must not exist)")
    a.add_argument("--work", required=True, help="remote work dir, outside the stage")
    a.add_argument("--bin-dir", required=True, help="local rea binaries (tools/dist: target/dist)")
    a.add_argument("--file", action="append", default=[], help="a local file to upload")
    a.add_argument("--phase", action="append", default=[],
                   help='JSON: {"name", "argv", "timeout", "inner_alarm"?, "env"?}')
    a.add_argument("--local-dir", default=None, help="where the fetched logs go")
    a.add_argument("--layout", default="rea-dir", choices=["rea-dir", "flat"],
                   help="rea-dir: binaries, state and log in STAGE/.rea (docs/stage.md)")
    args = a.parse_args(argv)
    plan = Plan(stage=args.stage, work=args.work, binaries=local_binaries(args.bin_dir),
                files=args.file, phases=[Phase(**json.loads(p)) for p in args.phase],
                local_dir=args.local_dir or tempfile.mkdtemp(prefix="rea-ssh."),
                layout=args.layout)
    target = Target(args.host, identity=args.identity, known_hosts=args.known_hosts,
                    user=args.user, port=args.port, connect_timeout=args.connect_timeout,
                    server_alive_interval=args.server_alive_interval,
                    server_alive_count_max=args.server_alive_count_max)
    try:
        o = Controller(target, plan).run()
    except (SSHError, ValueError) as e:
        print(f"rea_client.ssh: {e}", file=sys.stderr)
        return 3
    print(json.dumps(o.to_json(), indent=1))
    return {"removed": 0, "discarded": 0, "retain": 1}.get(o.decision, 2)


if __name__ == "__main__":
    sys.exit(main())
