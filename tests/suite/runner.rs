//! Issue 30, the harness's Runner (docs/runner.md): `rea_client.Runner`,
//! `bwrap_argv` and the one-shot `rea_client.run`, each driven through a
//! Python script of `tests/runner/` against this build's watchdog, with
//! real bwrap, real sandboxes and real process trees.
//!
//! - the seed's harness, `rehearse(runtime, *, run=..., bwrap_bin=...)`
//!   (`tests/runner/harness.py`), with `run=subprocess.run` and with
//!   `run=Runner(wd, wrap=bwrap_argv)`: the same results on success; on a
//!   launcher timeout subprocess.run leaves the Hopper running and the
//!   Runner leaves nothing, raises TimeoutExpired, then ActionStopped;
//! - Runner beside subprocess.run on a table of cases (`table.py`);
//! - CPython's grandchild case through the one-shot (`oneshot.py`);
//! - `bwrap_argv` on its own, and the harness example of docs/runner.md
//!   run as written.
//!
//! The unrelated sibling ([`Sibling`], the Hopper's exact argv) lives
//! through every test that starts processes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::harness::*;
use serde_json::Value;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn tools() -> PathBuf {
    Path::new(repo()).join("tools")
}

fn script(name: &str) -> PathBuf {
    Path::new(repo()).join("tests/runner").join(name)
}

/// The bwrap the harness's sandbox names: the real one (`.ci/run`
/// installs bubblewrap). A test must not pass by skipping it.
const BWRAP: &str = "/usr/bin/bwrap";

fn need_bwrap() {
    let ok = Command::new(BWRAP)
        .args(["--ro-bind", "/", "/", "--unshare-net", "--", "/bin/true"])
        .stdin(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "{BWRAP} is missing or cannot make a sandbox here: .ci/run installs bubblewrap \
         (apt-get install -y bubblewrap)"
    );
}

/// Runs `python3 SCRIPT ARGS` to its end (bounded) and returns the JSON
/// object on its last line of stdout.
fn drive(name: &str, args: &[&std::ffi::OsStr], limit: Duration) -> Value {
    let child = Command::new(python())
        .arg(script(name))
        .args(args)
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the python driver");
    let out = output_within(child, limit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{name}: {e}: {stdout}"))
}

fn harness(scenario: &str) -> Value {
    let work = Scratch::new();
    let wd = watchdog_bin();
    let hopper = fixture("hopper.py");
    let v = drive(
        "harness.py",
        &[
            scenario.as_ref(),
            wd.as_ref(),
            tools().as_os_str(),
            hopper.as_ref(),
            BWRAP.as_ref(),
            work.dir.path().as_os_str(),
        ],
        Duration::from_secs(120),
    );
    eprintln!("{scenario}: {v}");
    v
}

/// The argv a Runner job ran is the owner's bwrap argv with exactly one
/// `--die-with-parent`, right after bwrap; the owner's has none.
fn assert_wrapped(argv: &Value) {
    let argv: Vec<&str> = argv
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(argv[0], BWRAP, "{argv:?}");
    assert_eq!(argv[1], "--die-with-parent", "{argv:?}");
    assert_eq!(
        argv.iter().filter(|a| **a == "--die-with-parent").count(),
        1,
        "{argv:?}"
    );
    // The rest is the owner's sandbox, element for element.
    assert_eq!(&argv[2..5], ["--ro-bind", "/", "/"], "{argv:?}");
    assert_eq!(argv[5], "--bind", "{argv:?}");
    assert_eq!(&argv[8..10], ["--unshare-net", "--"], "{argv:?}");
}

#[test]
fn the_seeds_harness_gives_the_same_results_with_subprocess_run_and_the_runner() {
    if skip_outside_pid_ns("the seed's harness under the Runner") {
        return;
    }
    need_bwrap();
    let sibling = Sibling::start();
    let plain = harness("plain-ok");
    let runner = harness("runner-ok");
    assert!(plain.get("raised").is_none(), "{plain}");
    assert_eq!(plain["result"], runner["result"], "same results on success");
    assert_eq!(runner["result"]["codes"], serde_json::json!([0, 0]));
    assert!(runner["result"]["rehearsal"]
        .as_str()
        .unwrap()
        .contains("launcher 3 ok\nrehearsal: 3 launchers ok"));
    // install, rehearsal (both wrapped), three launchers (siblings, asked
    // for from inside the rehearsal), then the two calls after it.
    let spawned = runner["spawned"].as_array().unwrap();
    assert_eq!(spawned.len(), 7, "{runner}");
    for i in [0, 1, 5, 6] {
        assert_wrapped(&spawned[i]);
    }
    for (i, n) in [(2, "1"), (3, "2"), (4, "3")] {
        let argv = spawned[i].as_array().unwrap();
        assert!(
            argv[1].as_str().unwrap().ends_with("launcher.py"),
            "{argv:?}"
        );
        assert_eq!(argv[2], n);
    }
    assert_eq!(
        runner["receipt"],
        serde_json::json!(["closed", null, true, 0])
    );
    sibling.assert_alive();
}

#[test]
fn on_a_launcher_timeout_the_runner_leaves_nothing_and_refuses_what_comes_after() {
    if skip_outside_pid_ns("a launcher timeout under the Runner") {
        return;
    }
    need_bwrap();
    let sibling = Sibling::start();
    // subprocess.run: the rehearsal's own subprocess.run kills the
    // launcher, the rehearsal fails, and the Hopper the launcher started
    // (the sibling's argv) is still running.
    let plain = harness("plain-hang");
    assert_eq!(plain["raised"], "CalledProcessError", "{plain}");
    assert_eq!(plain["reported"], serde_json::json!(["hopper", "launcher"]));
    assert_eq!(plain["eof"], false, "{plain}");
    assert_eq!(plain["survivors"], serde_json::json!(["hopper"]), "{plain}");
    sibling.assert_alive();
    // The Runner: the launcher's deadline stops the action; every process
    // of it is gone (the oracle FIFO reached EOF), the phase's call raises
    // TimeoutExpired, and the next calls (this Runner, and a fresh one
    // told by the watchdog's typed refusal) raise ActionStopped.
    let runner = harness("runner-hang");
    assert_eq!(runner["raised"], "TimeoutExpired", "{runner}");
    assert!(
        runner["raised_after_s"].as_f64().unwrap() < 30.0,
        "{runner}"
    );
    assert_eq!(
        runner["reported"],
        serde_json::json!(["hopper", "launcher"])
    );
    assert_eq!(runner["eof"], true, "{runner}");
    assert_eq!(runner["survivors"], serde_json::json!([]), "{runner}");
    assert_eq!(runner["next_call"], "ActionStopped:deadline", "{runner}");
    assert_eq!(runner["fresh_runner"], "ActionStopped:deadline", "{runner}");
    // Nothing was launched after the stop: install, rehearsal, launchers 1 and 2.
    let spawned = runner["spawned"].as_array().unwrap();
    assert_eq!(spawned.len(), 4, "{runner}");
    assert_wrapped(&spawned[0]);
    assert_wrapped(&spawned[1]);
    assert_eq!(
        runner["receipt"],
        serde_json::json!(["stopped", "deadline", true, 0])
    );
    sibling.assert_alive();
}

#[test]
fn the_runner_matches_subprocess_run_case_by_case() {
    if skip_outside_pid_ns("Runner beside subprocess.run") {
        return;
    }
    let sibling = Sibling::start();
    let work = Scratch::new();
    let child = Command::new(python())
        .arg(script("table.py"))
        .arg(watchdog_bin())
        .arg(tools())
        .arg(work.dir.path())
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(240));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "table.py: {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (cases, last) = rows.split_at(rows.len() - 1);
    let mut same = 0;
    for row in cases {
        eprintln!("{row}");
        match row["expect"].as_str().unwrap() {
            "same" => {
                assert_eq!(row["same"], true, "differs from subprocess.run: {row}");
                same += 1;
            }
            other => {
                assert!(other.starts_with("differs: OutputLimitExceeded"), "{row}");
                assert_eq!(row["subprocess"]["returncode"], 0, "{row}");
                assert_eq!(row["subprocess"]["stdout"]["len"], 200_000, "{row}");
                assert_eq!(row["runner"]["raised"], "OutputLimitExceeded", "{row}");
                assert_eq!(row["next_call"]["reason"], "excess_output", "{row}");
            }
        }
        if row["case"] == "timeout" {
            assert_eq!(row["runner"]["raised"], "TimeoutExpired", "{row}");
            assert_eq!(row["next_call"]["raised"], "ActionStopped", "{row}");
            assert_eq!(row["next_call"]["reason"], "deadline", "{row}");
        }
    }
    assert!(same >= 25, "only {same} cases compared equal: {last:?}");
    assert_eq!(last[0]["same"], same, "{last:?}");
    sibling.assert_alive();
}

#[test]
fn the_one_shot_ends_cpythons_grandchild_case_in_time_and_says_nothing_of_its_own() {
    if skip_outside_pid_ns("rea_client.run") {
        return;
    }
    let sibling = Sibling::start();
    let v = drive(
        "oneshot.py",
        &[watchdog_bin().as_ref(), tools().as_os_str()],
        Duration::from_secs(120),
    );
    eprintln!("{v}");
    let g = &v["grandchild"];
    assert_eq!(g["raised"], "TimeoutExpired", "{v}");
    let secs = g["seconds"].as_f64().unwrap();
    // timeout 1 s + TERM grace 0.5 s + 1 s.
    assert!(
        secs <= 3.0,
        "run() took {secs} s (timeout 1 s, grace 0.5 s)"
    );
    assert_eq!(g["nothing_left"], true, "a sleep outlived run(): {v}");
    // exec's own lines (the sealed head, the log's path) went to --notes.
    assert_eq!(g["stderr"], "", "{v}");
    let o = &v["orphan"];
    assert_eq!(o["returncode"], 0, "{v}");
    assert_eq!(o["stdout"], "started\n", "{v}");
    assert_eq!(o["stderr"], "", "{v}");
    assert_eq!(o["nothing_left"], true, "{v}");
    assert!(o["seconds"].as_f64().unwrap() < 10.0, "{v}");
    for (name, c) in v["cases"].as_object().unwrap() {
        assert_eq!(c["same"], true, "{name}: {c}");
    }
    sibling.assert_alive();
}

const BWRAP_ARGV: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
from rea_client import bwrap_argv, DIE_WITH_PARENT
owner = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--unshare-net", "--", "/bin/sh", "-c", "x"]
out = bwrap_argv(owner)
assert DIE_WITH_PARENT not in owner
assert out[:2] == ["/usr/bin/bwrap", "--die-with-parent"], out
assert out.count("--die-with-parent") == 1, out
assert [out[0]] + out[2:] == owner and all(a is b for a, b in zip(out[2:], owner[1:]))
assert bwrap_argv(["/opt/bwrap", "--"], bwrap_bin="/opt/bwrap") == ["/opt/bwrap", DIE_WITH_PARENT, "--"]
for bad, why in ((["bwrap", "--"], "bare name"), (["/usr/bin/bwrapx"], "other"),
                 ([], "empty"), (owner[:1] + ["--die-with-parent"] + owner[1:], "twice"),
                 (out, "already wrapped")):
    try:
        bwrap_argv(bad)
    except ValueError as e:
        print("refused", why, "--", e)
    else:
        raise AssertionError(f"accepted {why}: {bad}")
for bad in ("/usr/bin/bwrap --", [b"/usr/bin/bwrap"]):
    try:
        bwrap_argv(bad)
    except TypeError:
        pass
    else:
        raise AssertionError(f"accepted {bad!r}")
print("bwrap_argv ok")
"#;

/// One `--die-with-parent` right after bwrap, every other element the
/// same object; anything else refused before a launch.
#[test]
fn bwrap_argv_adds_one_flag_and_refuses_everything_else() {
    let out = Command::new(python())
        .args(["-c", BWRAP_ARGV])
        .arg(tools())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("refused ").count(), 5, "{text}");
    assert!(text.trim_end().ends_with("bwrap_argv ok"), "{text}");
}

/// The first ```python block of docs/runner.md, run as written (with the
/// package on the path and REA_WATCHDOG naming this build), prints what
/// its comments say.
#[test]
fn the_harness_example_in_the_docs_runs_as_written() {
    if skip_outside_pid_ns("the docs' harness example") {
        return;
    }
    need_bwrap();
    let sibling = Sibling::start();
    let doc = std::fs::read_to_string(Path::new(repo()).join("docs/runner.md")).unwrap();
    let start = doc
        .find("```python\n")
        .expect("a python block in docs/runner.md")
        + 10;
    let code = &doc[start..start + doc[start..].find("```").unwrap()];
    let work = Scratch::new();
    let child = Command::new(python())
        .args(["-c", code])
        .env("PYTHONPATH", tools())
        .env("REA_WATCHDOG", watchdog_bin())
        .env("REA_AUDIT", audit_bin())
        .env("TMPDIR", work.dir.path())
        .current_dir(work.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "install: ok",
        "launcher 3: ok",
        "TimeoutExpired",
        "ActionStopped: deadline",
        "verify: delete_allowed",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
    sibling.assert_alive();
}
