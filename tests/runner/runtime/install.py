#!/usr/bin/env python3
"""The install phase of the fake runtime: writes RUNTIME/installed."""
import os
import sys

runtime = sys.argv[1]
with open(os.path.join(runtime, "installed"), "w") as f:
    f.write("hopper 1.0\n")
print("install: hopper 1.0 installed")
