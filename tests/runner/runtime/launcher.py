#!/usr/bin/env python3
"""A launcher of the fake runtime.

    launcher.py N ok|hang ORACLE HOPPER

"ok" prints "launcher N ok". "hang" reports itself on the FIFO ORACLE,
starts the Hopper (`python3 HOPPER`, fixtures/hopper.py: the unrelated
sibling's exact argv) holding the FIFO too, and sleeps: both outlive any
launcher timeout.
"""
import json
import os
import subprocess
import sys
import time

n, how, oracle, hopper = sys.argv[1:5]
if how == "ok":
    print(f"launcher {n} ok")
    sys.exit(0)
fd = os.open(oracle, os.O_WRONLY)
os.set_inheritable(fd, True)
with open(f"/proc/{os.getpid()}/stat", "rb") as f:
    data = f.read()
st = int(data[data.rindex(b")") + 2:].split()[19])
os.write(fd, (json.dumps({"pid": os.getpid(), "start_time": st, "role": "launcher"}) + "\n").encode())
env = dict(os.environ, REA_TEST_ORACLE_FD=str(fd))
subprocess.Popen([sys.executable, hopper], env=env, pass_fds=(fd,))
print(f"launcher {n} started the Hopper", flush=True)
time.sleep(300)
