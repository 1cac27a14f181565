#!/usr/bin/env python3
"""A hostile job for bench section 8: floods its own watchdog's request FIFO.

    fifoflood.py --oracle FIFO [--seconds S]

Run as a rea job (so `REA_STATE_DIR` names its watchdog). Opens
`$REA_STATE_DIR/requests` for writing (blocking) and writes garbage at full
speed, one `PIPE_BUF` (4096-byte) write at a time, for S seconds (default:
until it is killed). The writes cycle through pre-built chunks, so no time
goes into making them:

- pure newline garbage (`\\n` × 4096), one chunk in three;
- a mix of: unframed JSON lines (no RS: `framing`), RS-fragments left
  without their LF and cut by the next RS (`truncated`), framed texts that
  are not JSON, invalid UTF-8, a well-formed-looking request whose caller
  is nobody and whose reply FIFO does not exist (refused, unanswerable),
  and an oversize text (an RS and more than 4096 bytes before its LF).

Nothing it writes is a valid request: it never names a real caller.

Oracle (the bench's read end; opened before the flood): one line
{"flood_start": NS} after the FIFO is open and just before the first write,
and {"flood_end": NS, "bytes": B, "writes": W} when S seconds have passed
(CLOCK_MONOTONIC ns). Killed before that, it writes no end line.
"""
import json
import os
import random
import sys
import time

CHUNK = 4096


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def pieces():
    bogus = {
        "v": 1, "op": "close", "id": "flood",
        "caller": {"pid": 0, "start_time": 0, "uid": 0}, "reply": "no-such-reply",
    }
    return [
        b"\n" * 17,
        b'{"v":1,"op":"spawn","id":"unframed"}\n',
        b'\x1e{"v":1,"op":"spawn",',  # an RS-fragment: the next RS cuts it
        b"\x1enot json at all\n",
        b"\x1e\xff\xfe\xfd invalid utf-8\n",
        b"\x1e" + json.dumps(bogus, separators=(",", ":")).encode() + b"\n",
        b"\x1e[1,2,3]\n",
    ]


def chunks():
    rng = random.Random(8)
    out = []
    for k in range(12):
        if k % 3 == 0:
            out.append(b"\n" * CHUNK)
            continue
        buf = b""
        ps = pieces()
        while len(buf) < CHUNK:
            buf += rng.choice(ps)
        out.append(buf[:CHUNK])
    # An oversize text: RS, then more than 4096 bytes without an LF, across
    # two writes; the LF ends it.
    out.append(b"\x1e" + b"a" * (CHUNK - 1))
    out.append(b"b" * (CHUNK - 1) + b"\n")
    return out


def main():
    args = sys.argv[1:]
    oracle, seconds = None, None
    while args:
        a = args.pop(0)
        if a == "--oracle":
            oracle = args.pop(0)
        elif a == "--seconds":
            seconds = float(args.pop(0))
        else:
            sys.exit(f"fifoflood.py: unknown argument {a!r}\n{__doc__}")
    if not oracle:
        sys.exit(__doc__)
    state = os.environ.get("REA_STATE_DIR")
    if not state:
        sys.exit("fifoflood.py: REA_STATE_DIR is not set (run it as a rea job)")
    ofd = os.open(oracle, os.O_WRONLY)
    fifo = os.open(os.path.join(state, "requests"), os.O_WRONLY)
    cs = chunks()
    n = len(cs)
    sent = writes = 0
    t0 = mono_ns()
    os.write(ofd, (json.dumps({"flood_start": t0}) + "\n").encode())
    until = None if seconds is None else t0 + int(seconds * 1e9)
    i = 0
    write = os.write
    while True:
        sent += write(fifo, cs[i])
        writes += 1
        i += 1
        if i == n:
            i = 0
            if until is not None and mono_ns() >= until:
                break
    t1 = mono_ns()
    os.write(ofd, (json.dumps({"flood_end": t1, "bytes": sent, "writes": writes}) + "\n").encode())
    os.close(fifo)


if __name__ == "__main__":
    main()
