"""Section 11 of the benchmarks (issue 29): the stage's full rehash.

A watchdog given `--staging` hashes every byte of the stage twice in a
run: at start (the baseline, before its first spawn: a size walk, then the
hashing walk) and at close (the inventory compared with the baseline), and
`rea-audit verify --staging` a third time. On a stage of SIZE bytes (16
files of SIZE/16 each, page cache warm), in the same run:

- `sha256sum` over the same files (the throughput to compare with);
- `rea-watchdog run --staging`: spawn → ready line (start with the
  baseline), minus the same on an empty stage (the fixed start cost);
- `rea-watchdog close` → the watchdog's exit (close with the rehash), minus
  the same on an empty stage;
- `rea-audit verify --staging` (one more rehash, plus the holder scan).

Medians of `reps` runs each. Nothing is signalled here: every watchdog
ends by `close`.

    python3 tools/bench/stagehash.py TARGET_RELEASE_DIR [SIZE_MIB]   # prints the section
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time


def _med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _fill(stage, size):
    os.makedirs(stage)
    chunk = os.urandom(1 << 20)
    per = size // 16
    for i in range(16):
        with open(os.path.join(stage, f"part-{i:02}.bin"), "wb") as f:
            for _ in range(per >> 20):
                f.write(chunk)
    return [os.path.join(stage, n) for n in sorted(os.listdir(stage))]


def _watchdog_run(rel, work, stage):
    """(ms to ready, ms from close to exit, audit log) for one run."""
    run_dir = tempfile.mkdtemp(dir=work)
    state, log = os.path.join(run_dir, "state"), os.path.join(run_dir, "audit.jsonl")
    t = time.monotonic()
    p = subprocess.Popen(
        [os.path.join(rel, "rea-watchdog"), "run", "--state-dir", state, "--audit-log", log, "--staging", stage],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline()
    ready = (time.monotonic() - t) * 1000
    if b'"ready"' not in line:
        p.wait()
        raise RuntimeError(f"no ready line: {line!r}")
    env = dict(os.environ, REA_STATE_DIR=state)
    t = time.monotonic()
    subprocess.run([os.path.join(rel, "rea-watchdog"), "close"], env=env, capture_output=True, check=True)
    p.stdout.read()
    code = p.wait()
    closed = (time.monotonic() - t) * 1000
    if code != 0:
        raise RuntimeError(f"watchdog exited {code}")
    return ready, closed, log, run_dir


def section11(rel, work, size_mib=1024, reps=3):
    size = size_mib << 20
    root = tempfile.mkdtemp(prefix="stagehash-", dir=work)
    try:
        files = _fill(os.path.join(root, "big"), size)
        empty_stage = os.path.join(root, "empty")
        os.makedirs(empty_stage)
        sums = []
        for _ in range(reps + 1):  # the first warms the page cache
            t = time.monotonic()
            subprocess.run(["sha256sum", *files], capture_output=True, check=True)
            sums.append((time.monotonic() - t) * 1000)
        sums = sums[1:]
        big, empty, verify = [], [], []
        for _ in range(reps):
            ready, closed, log, d = _watchdog_run(rel, work, os.path.join(root, "big"))
            t = time.monotonic()
            v = subprocess.run([os.path.join(rel, "rea-audit"), "verify", log, "--staging",
                                os.path.join(root, "big")], capture_output=True)
            verify.append((time.monotonic() - t) * 1000)
            if v.returncode != 0:
                raise RuntimeError(f"verify said {v.stdout!r}")
            big.append((ready, closed))
            shutil.rmtree(d)
            e_ready, e_closed, _, d = _watchdog_run(rel, work, empty_stage)
            empty.append((e_ready, e_closed))
            shutil.rmtree(d)
        return {
            "size_mib": size_mib,
            "reps": reps,
            "sha256sum_ms": _med(sums),
            "start_ms": _med([b[0] for b in big]),
            "start_empty_ms": _med([e[0] for e in empty]),
            "close_ms": _med([b[1] for b in big]),
            "close_empty_ms": _med([e[1] for e in empty]),
            "verify_ms": _med(verify),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def section11_md(w, s):
    gib = s["size_mib"] / 1024

    def rate(ms):
        return f"{gib / (ms / 1000):.2f} GiB/s" if ms > 0 else "?"

    base = s["start_ms"] - s["start_empty_ms"]
    close = s["close_ms"] - s["close_empty_ms"]
    w("## 11. The stage's full rehash (issue 29)")
    w("")
    w(f"A stage of {s['size_mib']} MiB (16 files of random bytes, page cache warm), hashed by")
    w("`sha256sum` and by a real watchdog at start (the baseline: a size walk, then every byte")
    w("hashed, before the first spawn) and at close (the inventory compared with it), and by")
    w(f"`rea-audit verify --staging`; medians of {s['reps']}. The watchdog's share is its time")
    w("on this stage minus the same step on an empty stage (start-up, log, holder scan).")
    w("")
    w("| step | wall ms | over the empty stage | throughput | time against `sha256sum` |")
    w("|---|---:|---:|---:|---:|")
    w(f"| `sha256sum` of the 16 files | {s['sha256sum_ms']:.0f} | | {rate(s['sha256sum_ms'])} | 1.00× |")
    w(f"| watchdog start → ready (the baseline) | {s['start_ms']:.0f} | {base:.0f} | {rate(base)} | "
      f"{base / s['sha256sum_ms']:.2f}× |")
    w(f"| `close` → exit (the rehash at close) | {s['close_ms']:.0f} | {close:.0f} | {rate(close)} | "
      f"{close / s['sha256sum_ms']:.2f}× |")
    w(f"| `rea-audit verify --staging` | {s['verify_ms']:.0f} | | {rate(s['verify_ms'])} | "
      f"{s['verify_ms'] / s['sha256sum_ms']:.2f}× |")
    w("")
    w("Each walk reads every regular file once through a descriptor checked to be the entry")
    w("listed, in 64 KiB reads, with the same SHA-256 code as the rest of rea; the deadline of")
    w("a walk grows with the stage (5 s plus 1 s per 16 MiB), so a large stage is slow, never")
    w("refused for its size. Why rea is faster than `sha256sum` here: the `sha2` crate uses")
    w("the CPU's SHA instructions when it detects them (`sha_ni` in `/proc/cpuinfo`, if this")
    w("CPU lists it); a `sha256sum` built without them hashes in plain C.")
    w("")


if __name__ == "__main__":
    out = section11(sys.argv[1], tempfile.gettempdir(), int(sys.argv[2]) if len(sys.argv) > 2 else 1024)
    lines = []
    section11_md(lines.append, out)
    print("\n".join(lines))
