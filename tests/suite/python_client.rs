//! Issue 13, the Python client (tools/rea_client.py) as a package: it
//! installs with pip into a fresh venv and imports from anywhere, it is
//! clean under `mypy --strict`, it takes durations as numbers or as the
//! CLI's strings, and an old Python gets a clear ImportError.
//!
//! Real processes only: the venv, pip and mypy are the real tools (pip
//! fetches setuptools from PyPI for the build; `.ci/run` installs mypy).
//! Nothing here starts a watchdog.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::harness::*;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn tools() -> PathBuf {
    Path::new(repo()).join("tools")
}

fn client_source() -> PathBuf {
    tools().join("rea_client.py")
}

/// Runs `cmd` to its end (stdin closed) and returns what it printed,
/// panicking with its output when it did not exit 0.
fn run_ok(what: &str, cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// `cp -r src dst`, regular files and directories only.
fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let ty = entry.file_type().unwrap();
        let to = dst.join(entry.file_name());
        if ty.is_dir() {
            copy_tree(&entry.path(), &to);
        } else if ty.is_file() {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// `pip install ./tools` into a new venv, then `import rea_client` from
/// another directory finds the installed copy, not tools/.
#[test]
fn pip_installs_the_client_into_a_fresh_venv() {
    let scratch = Scratch::new();
    // A copy of tools/, so that setuptools' in-tree build (build/,
    // *.egg-info) lands in the scratch directory, not in the repository.
    let src = scratch.path("src/tools");
    copy_tree(&tools(), &src);
    let venv = scratch.path("venv");
    run_ok(
        "python3 -m venv",
        Command::new(python()).arg("-m").arg("venv").arg(&venv),
    );
    let vpy = venv.join("bin/python");
    run_ok(
        "pip install ./tools (needs PyPI for setuptools)",
        Command::new(&vpy)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(&src)
            .current_dir(scratch.dir.path()),
    );
    let out = run_ok(
        "import rea_client from the venv",
        Command::new(&vpy)
            .args([
                "-c",
                "import importlib.util, rea_client\n\
                 print(rea_client.__file__)\n\
                 print(importlib.util.find_spec('rehearse') is None)",
            ])
            .current_dir(scratch.dir.path()),
    );
    let mut lines = out.lines();
    let file = PathBuf::from(lines.next().expect("rea_client.__file__"));
    let venv_real = venv.canonicalize().unwrap();
    let file_real = file.canonicalize().unwrap();
    assert!(
        file_real.starts_with(&venv_real),
        "rea_client was imported from {file:?}, not from inside the venv {venv_real:?}"
    );
    assert!(
        !file_real.starts_with(tools()),
        "imported from tools/: {file:?}"
    );
    assert!(
        !file_real.starts_with(&src),
        "imported from the source copy: {file:?}"
    );
    assert_eq!(
        std::fs::read(&file_real).unwrap(),
        std::fs::read(client_source()).unwrap(),
        "the installed module is not tools/rea_client.py"
    );
    assert_eq!(
        lines.next(),
        Some("True"),
        "only rea_client is packaged: rehearse.py must not be importable"
    );
}

/// `python3 -m mypy --strict tools/rea_client.py` exits 0. No mypy is a
/// failure, not a skip: `.ci/run` installs it.
#[test]
fn mypy_strict_is_clean() {
    let probe = run(Command::new(python()).args(["-c", "import mypy"]));
    assert!(
        probe.status.success(),
        "mypy is not importable by {} ({}): .ci/run installs it \
         (python3 -m pip install mypy); install it the same way to run this test",
        python(),
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    let scratch = Scratch::new();
    // The cache goes to the scratch directory, not .mypy_cache in the repo.
    let out = run_ok(
        "python3 -m mypy --strict tools/rea_client.py",
        Command::new(python())
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(scratch.path("mypy-cache"))
            .arg("tools/rea_client.py")
            .current_dir(repo()),
    );
    assert!(out.contains("Success: no issues found"), "mypy said: {out}");
}

const DURATIONS: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
import rea_client as rc
assert rc._duration_ms(1.5) == 1500
assert rc._duration_ms(60) == 60000
assert rc._duration_ms("60") == 60000
assert rc._duration_ms("0.5") == 500
assert rc._duration_ms("500ms") == 500
assert rc._duration_ms("10s") == 10000
assert rc._duration_ms("2m") == 120000
assert rc._duration_ms("1h") == 3600000
assert rc._seconds("2m") == 120 and rc._seconds(0.25) == 0.25
assert rc._flag_ms(0, "term_grace") == 0 and rc._flag_ms("0ms", "term_grace") == 0
for bad in ["5 parsecs", "1e3", "-1", "1.2.3", "", "0ms"]:
    try:
        v = rc._duration_ms(bad)
    except ValueError as e:
        assert repr(bad) in str(e), (bad, str(e))
        print("refused", repr(bad), "--", e)
    else:
        raise AssertionError(f"{bad!r} accepted as {v} ms")
# Neither a number nor a string: a ValueError naming the parameter too
# (not float()'s TypeError, which names neither).
for bad in [None, [1], True, b"60"]:
    for f in (lambda v: rc._duration_ms(v, "deadline"), lambda v: rc._seconds(v, "wait"),
              lambda v: rc._flag_ms(v, "term_grace")):
        try:
            v = f(bad)
        except ValueError as e:
            assert repr(bad) in str(e) and ("deadline" in str(e) or "wait" in str(e)
                                             or "term_grace" in str(e)), (bad, str(e))
        else:
            raise AssertionError(f"{bad!r} accepted as {v}")
print("durations ok")
"#;

/// Numbers are seconds; strings read as `rea-watchdog` reads its flags
/// (src/units.rs); a bad string is a ValueError that names it.
#[test]
fn durations_are_numbers_or_cli_strings() {
    let out = run_ok(
        "the duration checks",
        Command::new(python())
            .args(["-c", DURATIONS])
            .arg(tools())
            .current_dir(repo()),
    );
    assert!(out.contains("refused '5 parsecs' -- "), "{out}");
    assert!(out.trim_end().ends_with("durations ok"), "{out}");
}

const OLD_PYTHON: &str = r#"
import ast, sys, types
path = sys.argv[1]
src = open(path).read()
# Python 3.6 must be able to parse the whole file for the check to run.
tree = ast.parse(src, feature_version=(3, 6))
for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        raise AssertionError("a __future__ import is a SyntaxError on Python 3.6")

def load(version_info):
    fake = types.ModuleType("sys")
    fake.__dict__.update(vars(sys))
    fake.version_info = version_info
    real = sys.modules["sys"]
    sys.modules["sys"] = fake   # what the module's own `import sys` finds
    try:
        exec(compile(src, path, "exec"), {"__name__": "rea_client_under_test"})
    except ImportError as e:
        return "ImportError: " + str(e)
    finally:
        sys.modules["sys"] = real
    return "imported"

print(load((3, 8, 18, "final", 0)))
print(load(sys.version_info))
"#;

/// Under a (faked) Python 3.8 the module raises ImportError naming the
/// floors before anything else runs; under the real one it imports.
#[test]
fn old_python_gets_a_clear_import_error() {
    let out = run_ok(
        "the version check",
        Command::new(python())
            .args(["-c", OLD_PYTHON])
            .arg(client_source())
            .current_dir(repo()),
    );
    let mut lines = out.lines();
    let old = lines.next().unwrap_or("");
    assert!(old.starts_with("ImportError: "), "3.8: {old}");
    for needed in ["Python 3.9+", "Linux 5.3+", "this is Python 3.8"] {
        assert!(
            old.contains(needed),
            "3.8's ImportError lacks {needed:?}: {old}"
        );
    }
    assert_eq!(lines.next(), Some("imported"), "the real Python: {out}");
}
