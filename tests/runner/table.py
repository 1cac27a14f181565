#!/usr/bin/env python3
"""Runner against subprocess.run, case by case, in one process.

    table.py WATCHDOG TOOLS WORK

Each case is run with subprocess.run itself and with a Runner over a
watchdog started here, and the outcomes are compared: return code (a
signal as a negative code), stdout, stderr, args, or the exception's type
and its errno, filename, return code and output. Prints one JSON line a
case ({"case", "expect", "same", "subprocess", "runner"}) and a last line
{"cases": N, "same": N}. `expect` is "same", or the documented difference
(output over the cap; a timeout stops the action). Driven by
tests/suite/runner.rs.
"""
import json
import os
import subprocess
import sys
import tempfile

WATCHDOG, TOOLS, WORK = sys.argv[1:4]
sys.path.insert(0, TOOLS)
import rea_client  # noqa: E402

SH = "/bin/sh"
PATH = os.environ.get("PATH", "/usr/bin:/bin")


def setup():
    """Files the cases run: a script, a non-executable file, a file with
    +x and no format exec knows, output bigger and smaller than the cap."""
    os.makedirs(os.path.join(WORK, "dir"))
    paths = {}
    for name, body, mode in (
            ("script.sh", "#!/bin/sh\necho script ran in \"$(pwd)\"\n", 0o755),
            ("noexec.sh", "#!/bin/sh\necho never\n", 0o644),
            ("garbage", "\x7fELF? not really\n", 0o755)):
        path = os.path.join(WORK, "dir", name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, mode)
        paths[name] = path
    return paths


def outcome(fn):
    """What a call did, as comparable JSON."""
    try:
        r = fn()
    except subprocess.CalledProcessError as e:
        return {"raised": "CalledProcessError", "returncode": e.returncode,
                "output": show(e.output), "stderr": show(e.stderr)}
    except subprocess.TimeoutExpired as e:
        # subprocess's is the time left when it gave up: 0.99999 for 1.
        return {"raised": "TimeoutExpired", "timeout": round(e.timeout, 1)}
    except rea_client.ActionStopped as e:
        return {"raised": type(e).__name__, "reason": e.reason}
    except OSError as e:
        return {"raised": type(e).__name__, "errno": e.errno, "filename": e.filename}
    except (ValueError, TypeError) as e:
        return {"raised": type(e).__name__, "message": str(e)}
    return {"args": r.args, "returncode": r.returncode, "stdout": show(r.stdout),
            "stderr": show(r.stderr)}


def show(data):
    if data is None or isinstance(data, str):
        return data
    return {"bytes": data.hex()} if len(data) < 2000 else {"len": len(data)}


def cases(p):
    out_err = "echo out; echo err >&2"
    big = 200_000
    return [
        # return codes and signals
        ("true", ["true"], {}),
        ("false", ["false"], {}),
        ("exit 7", [SH, "-c", "exit 7"], {}),
        ("exit 255", [SH, "-c", "exit 255"], {}),
        ("args as one str", "true", {}),
        ("killed by TERM", [SH, "-c", "kill -TERM $$"], {}),
        ("killed by KILL", [SH, "-c", "kill -KILL $$"], {}),
        ("killed by SEGV", [SH, "-c", "kill -SEGV $$"], {}),
        # check
        ("check, exit 0", ["true"], {"check": True}),
        ("check, exit 3", [SH, "-c", "echo partial; exit 3"],
         {"check": True, "capture_output": True}),
        ("check, signal", [SH, "-c", "kill -TERM $$"], {"check": True}),
        # output
        ("capture_output", [SH, "-c", out_err], {"capture_output": True}),
        ("stdout=PIPE, stderr=DEVNULL", [SH, "-c", out_err],
         {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}),
        ("stdout=DEVNULL, stderr=PIPE", [SH, "-c", out_err],
         {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}),
        ("stderr=STDOUT", [SH, "-c", "echo out; sleep 0.1; echo err >&2"],
         {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}),
        ("output under the cap", [SH, "-c", "head -c 60000 /dev/zero"],
         {"capture_output": True}),
        # input and text
        ("input bytes", ["cat"], {"input": b"hello\x00bytes\n", "capture_output": True}),
        ("input text", ["cat"], {"input": "h\u00e9llo\n", "text": True, "capture_output": True}),
        ("stdin=DEVNULL", ["cat"], {"stdin": subprocess.DEVNULL, "capture_output": True}),
        ("text: universal newlines", ["printf", "a\\r\\nb\\rc\\n"],
         {"text": True, "capture_output": True}),
        ("universal_newlines=True", ["printf", "x\\r\\ny\\n"],
         {"universal_newlines": True, "capture_output": True}),
        ("encoding utf-8", ["printf", "caf\\303\\251\\n"],
         {"encoding": "utf-8", "capture_output": True}),
        ("errors=replace", ["printf", "bad \\377 byte\\n"],
         {"encoding": "utf-8", "errors": "replace", "capture_output": True}),
        # cwd and env
        ("cwd", ["pwd"], {"cwd": "/", "capture_output": True}),
        ("cwd and a relative program", ["./script.sh"],
         {"cwd": os.path.dirname(p["script.sh"]), "capture_output": True}),
        ("env", [SH, "-c", "echo \"$FOO $BAR\""],
         {"env": {"FOO": "foo", "BAR": "b a r", "PATH": PATH}, "capture_output": True}),
        ("env without a name", [SH, "-c", "echo \"${FOO-unset}\""],
         {"env": {"PATH": PATH}, "capture_output": True}),
        ("env decides PATH", ["script.sh"],
         {"env": {"PATH": os.path.dirname(p["script.sh"])}, "capture_output": True,
          "cwd": "/"}),
        # programs that cannot run
        ("missing program on PATH", ["no-such-program-rea"], {}),
        ("missing absolute program", ["/nonexistent/rea/prog"], {}),
        ("not executable", [p["noexec.sh"]], {}),
        ("a directory", [os.path.dirname(p["script.sh"])], {}),
        ("no known format", [p["garbage"]], {}),
        ("missing cwd", ["true"], {"cwd": os.path.join(WORK, "no-such-dir")}),
        # arguments subprocess refuses
        ("input and stdin", ["cat"], {"input": b"x", "stdin": subprocess.DEVNULL}),
        ("capture_output and stdout", ["true"],
         {"capture_output": True, "stdout": subprocess.PIPE}),
        ("a name with =", ["true"], {"env": {"A=B": "1"}}),
        # documented differences, each on a watchdog of its own (they stop it)
        ("output over the cap", [SH, "-c", f"head -c {big} /dev/zero"],
         {"capture_output": True}, "differs: OutputLimitExceeded, the action is stopped"),
        ("timeout", ["sleep", "30"], {"timeout": 1}, "same, then the action is stopped"),
    ]


def main():
    p = setup()
    n = same = 0
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        wd = rea_client.Watchdog.start(WATCHDOG, state_dir=os.path.join(d, "state"),
                                       audit_log=os.path.join(d, "audit.jsonl"))
        with wd:
            shared = rea_client.Runner(wd)
            for case in cases(p):
                name, args, kw = case[:3]
                expect = case[3] if len(case) > 3 else "same"
                runner = shared
                own = None
                if expect != "same" or "timeout" in kw:
                    own = rea_client.Watchdog.start(
                        WATCHDOG, state_dir=os.path.join(d, f"state-{n}"),
                        audit_log=os.path.join(d, f"audit-{n}.jsonl"))
                    runner = rea_client.Runner(own)
                a = outcome(lambda: subprocess.run(args, **kw))
                b = outcome(lambda: runner(args, **kw))
                if expect.startswith("same"):
                    expect = "same"
                row = {"case": name, "expect": expect, "same": a == b, "subprocess": a,
                       "runner": b}
                if own is not None:
                    row["next_call"] = outcome(lambda: runner(["true"]))
                    row["receipt"] = [own.close().outcome, own.receipt.stop_reason
                                      if own.receipt else None]
                print(json.dumps(row), flush=True)
                n += 1
                same += row["same"]
    print(json.dumps({"cases": n, "same": same}))


if __name__ == "__main__":
    main()
