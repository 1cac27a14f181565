#!/usr/bin/env python3
"""The rehearsal phase of the fake runtime: asks for three nested launchers.

    rehearsal.py RUNTIME TOOLS LAUNCHER_TIMEOUT MODE [ORACLE HOPPER]

Under a watchdog (REA_STATE_DIR is set in every job) each launcher is a job
of its own, asked for through `Runner(Client.from_env())`: the phase's
sibling. Without one it is the phase's own child, through subprocess.run.
MODE "ok": every launcher prints and exits 0; "hang": the second one starts
the Hopper (`python3 HOPPER`) and both outlive the launcher timeout (ORACLE:
the FIFO they report on and hold open).
"""
import os
import subprocess
import sys

runtime, tools, timeout, mode = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
oracle, hopper = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else ("", "")
with open(os.path.join(runtime, "installed")) as f:
    print("rehearsal of", f.read().strip())
if os.environ.get("REA_STATE_DIR"):
    sys.path.insert(0, tools)
    import rea_client
    run = rea_client.Runner(rea_client.Client.from_env())
else:
    run = subprocess.run
for i in (1, 2, 3):
    how = "hang" if mode == "hang" and i == 2 else "ok"
    done = run([sys.executable, os.path.join(runtime, "launcher.py"), str(i), how, oracle, hopper],
               timeout=timeout, capture_output=True, check=True)
    print(done.stdout.decode().strip())
print("rehearsal: 3 launchers ok")
