"""Section 10 of the benchmarks (issue 30): CPython's grandchild case.

`sh -c "sleep 30 & sleep 30"` with its output captured and a 1 s timeout,
three ways, in the same run:

- `subprocess.run(..., capture_output=True, timeout=1)`;
- the Popen recipe of Python's documentation for `communicate(timeout=)`
  (`proc.kill(); outs, errs = proc.communicate()` after the timeout);
- `rea_client.run(..., capture_output=True, timeout=1)` (rea-watchdog exec).

For each: the time until the call returned or raised, and whether a
process of the tree was still running then. The oracle is a pipe whose
write end is the command's stdin, inherited by the shell and both sleeps:
still open after the call means something of the tree is alive. Nothing
here is signalled by the bench (the tree's leftovers end with their sleep).

    python3 tools/bench/oneshot.py [REA_WATCHDOG]   # prints the section
"""
import os
import select
import subprocess
import sys
import time

CMD = ["sh", "-c", "sleep 30 & sleep 30"]


def _held(r):
    p = select.poll()
    p.register(r, select.POLLIN)
    return not p.poll(0)


def _case(call):
    r, w = os.pipe()
    t = time.monotonic()
    raised = "returned"
    try:
        call(w)
    except subprocess.TimeoutExpired:
        raised = "TimeoutExpired"
    secs = time.monotonic() - t
    os.close(w)
    left = _held(r)
    # Wait for the leftovers' own end, so the next case starts clean.
    select.poll().poll(0)
    p = select.poll()
    p.register(r, select.POLLIN)
    p.poll(40_000)
    os.close(r)
    return {"outcome": raised, "seconds": round(secs, 3), "tree_left": left}


def _recipe(w):
    proc = subprocess.Popen(CMD, stdin=w, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.communicate(timeout=1)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def section10(watchdog, tools):
    sys.path.insert(0, tools)
    import rea_client
    return {
        "python": sys.version.split()[0],
        "subprocess.run": _case(lambda w: subprocess.run(CMD, capture_output=True, timeout=1,
                                                         stdin=w)),
        "Popen recipe": _case(_recipe),
        "rea_client.run": _case(lambda w: rea_client.run(CMD, capture_output=True, timeout=1,
                                                         stdin=w, binary=watchdog)),
    }


def section10_md(w, s):
    w("## 10. A timeout and the grandchild that holds the pipe (issue 30)")
    w("")
    w('`sh -c "sleep 30 & sleep 30"`, output captured, timeout 1 s (CPython '
      f'{s["python"]}): how long the call took to return or raise, and whether a process')
    w("of the tree was still running then (a pipe each of them inherited was still open).")
    w("")
    w("| call | outcome | time | tree left running |")
    w("|---|---|---|---|")
    for k in ("subprocess.run", "Popen recipe", "rea_client.run"):
        c = s[k]
        w(f"| `{k}` | {c['outcome']} | {c['seconds']:.2f} s | "
          f"{'**yes**' if c['tree_left'] else 'no'} |")
    w("")
    w("`subprocess.run` kills the shell alone and raises (CPython 3.7.5 and 3.8.1 and")
    w("later no longer wait for the pipe: bpo-37424); the background sleep runs on")
    w("until its 30 s are over. The recipe in Python's documentation for")
    w("`communicate(timeout=)` (`proc.kill()`, then `proc.communicate()`) waits for the")
    w("pipe, that is for the grandchild: about 30 s, and it too ended on its own.")
    w("`rea_client.run` runs the command under `rea-watchdog exec --deadline 1`: the")
    w("whole tree is ended (TERM, 0.5 s grace, KILL) and proven gone before")
    w("TimeoutExpired is raised (docs/runner.md).")
    w("")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    wd = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "target",
                                                              "release", "rea-watchdog")
    lines = []
    section10_md(lines.append, section10(os.path.abspath(wd), os.path.join(here, "..")))
    print("\n".join(lines))
