#!/usr/bin/env python3
"""The controller's whole flow over loopback SSH against the same flow run
locally, and where the time goes (issue 31). Stdlib only; root (it makes a
network namespace and runs an sshd in it).

    python3 tools/bench/sshflow.py [--rounds 5] [--bin-dir DIR] [--layout rea-dir|flat]

The flow, each round, on a fresh stage: `rea-stage begin` (every upload
pinned), the upload (rea's three binaries, the harness, rea_client.zip,
phase.py, launcher.py), the harness (start the watchdog from the stage, an
install phase, a rehearsal whose phase asks for three nested launchers,
close), fetching the sealed log and verifying it locally (SSH only),
`rea-audit verify --staging` and `rea-stage remove`.

- **ssh**: `rea_client.ssh.Controller.run()` against an OpenSSH server on
  127.0.0.1 in a network namespace of this run (fixtures/ssh_world.py's
  Sshd); its own per-step timings.
- **local**: the same steps with no SSH: rea-stage begin, a copy of each
  file, the same harness run as a child, verify, remove.
- **ssh round trip**: `ssh host true`, the price of one connection (key
  exchange, authentication, a session), which every SSH step pays once.

Binaries: --bin-dir (tools/dist's target/dist for the static ones); by
default the release build's, stripped into a temp directory (what the
upload carries is then close to tools/dist's size). It re-executes itself
in `unshare --pid --fork --mount-proc --net`, so everything it starts ends
with it. Prints a Markdown table of medians (and the maximum) per step.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, os.path.join(REPO, "fixtures"))
from rea_client import ssh  # noqa: E402

MARK = "REA_SSHFLOW_INSIDE"


def plan(root, bin_dir, layout, n):
    fx = os.path.join(REPO, "fixtures")
    remote = os.path.join(root, f"remote-{n}")
    os.makedirs(remote)
    return ssh.Plan(
        stage=os.path.join(remote, "stage"), work=os.path.join(remote, "work"),
        binaries=ssh.local_binaries(bin_dir),
        files=[os.path.join(fx, "phase.py"), os.path.join(fx, "launcher.py")],
        phases=[ssh.Phase("install", ["{python}", "{stage}/launcher.py", "--print", "install ok"],
                          200, 180),
                ssh.Phase("rehearsal", ["{python}", "{stage}/phase.py", "--watchdog", "{watchdog}",
                                        "--launchers", "3", "--launcher-deadline", "60s", "--",
                                        "--print", "rehearsal launcher ok"], 260, 240)],
        local_dir=os.path.join(root, f"local-{n}"), layout=layout)


def local_flow(p):
    """The same steps as Controller.run, on this machine, without SSH."""
    c = ssh.Controller(ssh.Target("unused", identity="-", known_hosts="-"), p)
    t = {}
    t0 = time.monotonic()
    os.makedirs(p.work, mode=0o700)
    subprocess.run([p.binaries["rea-stage"], "begin", p.stage, *c.declared()], check=True,
                   stdout=subprocess.DEVNULL)
    t1 = time.monotonic()
    t["begin"] = t1 - t0
    if p.rea_dir:
        os.makedirs(os.path.join(p.stage, ".rea", "bin"), mode=0o700)
    for name, path in c.uploads().items():
        shutil.copy(path, os.path.join(p.stage, name))
    t2 = time.monotonic()
    t["upload"] = t2 - t1
    argv = [sys.executable, f"{p.stage}/harness.py", "--stage", p.stage,
            "--watchdog", p.bin("rea-watchdog"), "--state-dir", p.state_dir,
            "--audit-log", p.audit_log, "--events", p.events,
            "--phases", json.dumps([ssh.dataclasses.asdict(ph) for ph in p.phases])]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    code, lines = c.follow_harness(proc)
    closed = next(v for v in lines if v.get("event") == "closed")
    t3 = time.monotonic()
    t["harness"] = t3 - t2
    v = subprocess.run([p.binaries["rea-audit"], "verify", p.audit_log, "--expect-head",
                        closed["head"], "--staging", p.stage], stdout=subprocess.DEVNULL)
    t4 = time.monotonic()
    t["verify"] = t4 - t3
    r = subprocess.run([p.binaries["rea-stage"], "remove", p.stage, "--audit-log", p.audit_log,
                        "--expect-head", closed["head"], "--log", f"{p.work}/remove.jsonl"],
                       stdout=subprocess.DEVNULL)
    t["remove"] = time.monotonic() - t4
    t["total"] = time.monotonic() - t0
    ok = code == 0 and v.returncode == 0 and r.returncode == 0
    return t, ok


def inside(a):
    import ssh_world
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    root = tempfile.mkdtemp(prefix="rea-sshflow.")
    bin_dir = a.bin_dir
    if not bin_dir:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
        bin_dir = os.path.join(root, "bin")
        os.makedirs(bin_dir)
        for b in ssh.BINARIES:
            shutil.copy(os.path.join(target, "release", b), bin_dir)
            subprocess.run(["strip", os.path.join(bin_dir, b)], check=True)
    sizes = {b: os.path.getsize(os.path.join(bin_dir, b)) for b in ssh.BINARIES}
    sshd = ssh_world.Sshd(os.path.join(root, "ssh"))
    target = ssh.Target("127.0.0.1", identity=os.path.join(sshd.dir, "client_key"),
                        known_hosts=sshd.known_hosts, port=ssh_world.PORT)
    rows = {"ssh": [], "local": [], "rtt": []}
    try:
        for n in range(a.rounds):
            t0 = time.monotonic()
            subprocess.run(ssh.ssh_argv(target, ["true"]), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rows["rtt"].append(time.monotonic() - t0)
            o = ssh.Controller(target, plan(root, bin_dir, a.layout, f"s{n}")).run()
            if o.decision != "removed":
                raise SystemExit(f"ssh round {n}: {o.decision}: {o.why}")
            rows["ssh"].append(o.timings)
            t, ok = local_flow(plan(root, bin_dir, a.layout, f"l{n}"))
            if not ok:
                raise SystemExit(f"local round {n} did not end in removed")
            rows["local"].append(t)
    finally:
        sshd.stop()
        shutil.rmtree(root, ignore_errors=True)
    report(a, rows, sizes, bin_dir)


def med(xs):
    return f"{statistics.median(xs) * 1000:.0f} ms (max {max(xs) * 1000:.0f})"


def report(a, rows, sizes, bin_dir):
    up = sum(sizes.values())
    print(f"rounds: {a.rounds}; layout: {a.layout}; binaries: "
          f"{', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in sizes.items())} "
          f"({up / 1e6:.1f} MB){'' if a.bin_dir else ', release build stripped'}")
    print(f"one ssh connection (`ssh host true`): {med(rows['rtt'])}\n")
    print("| step | over loopback SSH | local |")
    print("|---|---|---|")
    pairs = [("begin", "begin", "begin"), ("upload", "upload", "upload"),
             ("harness: start, install, rehearsal (3 launchers), close", "harness", "harness"),
             ("fetch the log, verify the copy locally", "fetch_and_verify_local", None),
             ("verify --staging", "verify_remote", "verify"),
             ("rea-stage remove (+ fetch its log, verify it)", "remove", "remove"),
             ("total", "total", "total")]
    for label, s, l in pairs:
        sv = med([r[s] for r in rows["ssh"]]) if s else "-"
        lv = med([r[l] for r in rows["local"]]) if l else "-"
        print(f"| {label} | {sv} | {lv} |")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--bin-dir")
    p.add_argument("--layout", default="rea-dir", choices=["rea-dir", "flat"])
    a = p.parse_args()
    if os.environ.get(MARK) != "1":
        if os.geteuid() != 0:
            raise SystemExit("sshflow.py needs root (a network namespace, an sshd)")
        env = {**os.environ, MARK: "1"}
        return subprocess.call(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--",
                                sys.executable, os.path.abspath(__file__), *sys.argv[1:]],
                               env=env)
    inside(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
