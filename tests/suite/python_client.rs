//! Issues 13 and 30, the Python client (tools/rea_client/) as a package: it
//! installs with pip into a fresh venv and imports from anywhere, also
//! from a read-only tree; it is clean under `mypy --strict` and typed for
//! its callers (py.typed: a caller's mypy catches a wrong call); `__all__`
//! names every public name; it is Python 3.9 syntax; it takes durations as
//! numbers or as the CLI's strings, and an old Python gets a clear
//! ImportError.
//!
//! Real processes only: the venv, pip and mypy are the real tools (pip
//! fetches flit_core from PyPI for the build; `.ci/run` installs mypy).
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

/// The package's first file: the version check, then everything else.
fn client_source() -> PathBuf {
    tools().join("rea_client/__init__.py")
}

/// Every file of the package, by name.
fn package_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(tools().join("rea_client"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".py") || n == "py.typed")
        .collect();
    names.sort();
    names
}

/// `python3 -m venv DIR` and `pip install SRC` into it; returns its python.
fn venv_with_client(scratch: &Scratch, src: &Path) -> PathBuf {
    let venv = scratch.path("venv");
    run_ok(
        "python3 -m venv",
        Command::new(python()).arg("-m").arg("venv").arg(&venv),
    );
    let vpy = venv.join("bin/python");
    run_ok(
        "pip install ./tools (needs PyPI for flit_core)",
        Command::new(&vpy)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(src)
            .current_dir(scratch.dir.path()),
    );
    vpy
}

fn need_mypy() {
    let probe = run(Command::new(python()).args(["-c", "import mypy"]));
    assert!(
        probe.status.success(),
        "mypy is not importable by {} ({}): .ci/run installs it \
         (python3 -m pip install mypy); install it the same way to run this test",
        python(),
        String::from_utf8_lossy(&probe.stderr).trim()
    );
}

/// Every file and directory under `root`, with its size (a listing to
/// compare before and after an install).
fn listing(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            out.push((e.path(), if m.is_file() { m.len() } else { 0 }));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
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
    let vpy = venv_with_client(&scratch, &src);
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
    let installed = file.parent().unwrap().to_path_buf();
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
    for name in package_files() {
        assert_eq!(
            std::fs::read(installed.join(&name)).ok(),
            std::fs::read(tools().join("rea_client").join(&name)).ok(),
            "the installed {name} is not tools/rea_client/{name}"
        );
    }
    assert_eq!(
        lines.next(),
        Some("True"),
        "only rea_client is packaged: rehearse.py must not be importable"
    );
}

/// `python3 -m mypy --strict tools/rea_client` exits 0. No mypy is a
/// failure, not a skip: `.ci/run` installs it.
#[test]
fn mypy_strict_is_clean() {
    need_mypy();
    let scratch = Scratch::new();
    // The cache goes to the scratch directory, not .mypy_cache in the repo.
    let out = run_ok(
        "python3 -m mypy --strict tools/rea_client",
        Command::new(python())
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(scratch.path("mypy-cache"))
            .arg("tools/rea_client")
            .current_dir(repo()),
    );
    assert!(out.contains("Success: no issues found"), "mypy said: {out}");
}

const CALLER: &str = r#"
import subprocess
import rea_client

def rehearse(run: rea_client.Runner) -> subprocess.CompletedProcess[bytes]:
    argv = rea_client.bwrap_argv(["/usr/bin/bwrap", "--ro-bind", "/", "/", "--", "/bin/true"])
    done: subprocess.CompletedProcess[bytes] = run(argv, timeout=60, capture_output=True)
    return done

def receipt_head(wd: rea_client.Watchdog) -> str:
    with wd:
        pass
    r = wd.receipt
    return r.head if r is not None and r.head is not None else ""

try:
    rehearse(rea_client.Runner(rea_client.Client.from_env(), wrap=rea_client.bwrap_argv))
except rea_client.ActionStopped as e:
    reason: str = e.reason
"#;

/// PEP 561 through the installed package: a caller's `mypy --strict` sees
/// the client's types (no "missing library stubs or py.typed marker"): a
/// correct caller passes, and one planted error (a str where the argv
/// goes, an int taken from a list) is caught, naming the package's own
/// signature.
#[test]
fn a_callers_mypy_sees_the_installed_types() {
    need_mypy();
    let scratch = Scratch::new();
    let src = scratch.path("src/tools");
    copy_tree(&tools(), &src);
    let vpy = venv_with_client(&scratch, &src);
    let mypy = |name: &str, code: &str| {
        let file = scratch.path(name);
        std::fs::write(&file, code).unwrap();
        run(Command::new(python())
            .args([
                "-m",
                "mypy",
                "--strict",
                "--no-incremental",
                "--python-executable",
            ])
            .arg(&vpy)
            .arg("--cache-dir")
            .arg(scratch.path("mypy-cache"))
            .arg(&file)
            .current_dir(scratch.dir.path()))
    };
    let good = mypy("caller.py", CALLER);
    let said = String::from_utf8_lossy(&good.stdout);
    assert!(
        good.status.success() && said.contains("Success: no issues found"),
        "a correct caller fails mypy --strict: {said}"
    );
    let planted = format!(
        "{CALLER}
wrong: int = rea_client.bwrap_argv([\"/usr/bin/bwrap\"])[0]
"
    );
    let bad = mypy("planted.py", &planted);
    let said = String::from_utf8_lossy(&bad.stdout);
    assert!(!bad.status.success(), "the planted error passed: {said}");
    assert!(
        said.contains("planted.py:")
            && said.contains("Incompatible types in assignment (expression has type \"str\"")
            && !said.contains("py.typed"),
        "mypy did not see the package's types: {said}"
    );
    assert_eq!(said.matches(": error:").count(), 1, "{said}");
}

/// `pip install --target T SRC` where SRC is read-only (chmod a-w, and a
/// read-only bind mount as root, whom modes do not stop) works, and SRC
/// is left exactly as it was: the build backend writes nothing into it
/// (setuptools wrote build/ and rea_client.egg-info/ there).
#[test]
fn pip_installs_from_a_read_only_tree() {
    let scratch = Scratch::new();
    let src = scratch.path("ro/tools");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(tools().join("pyproject.toml"), src.join("pyproject.toml")).unwrap();
    copy_tree(&tools().join("rea_client"), &src.join("rea_client"));
    let _ = std::fs::remove_dir_all(src.join("rea_client/__pycache__"));
    run_ok(
        "chmod -R a-w",
        Command::new("chmod").arg("-R").arg("a-w").arg(&src),
    );
    let before = listing(&src);
    let target = scratch.path("target");
    let pip = format!(
        "{} -m pip install --quiet --disable-pip-version-check --no-compile --target {} {}",
        python(),
        target.display(),
        src.display()
    );
    let root = uid() == 0;
    let out = if root {
        // A private mount namespace: the bind mount is seen by pip alone.
        let s = src.display();
        run(Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-ec"])
            .arg(format!(
                "mount --bind {s} {s}; mount -o remount,bind,ro {s}; exec {pip}"
            )))
    } else {
        run(Command::new("sh").args(["-ec", &pip]))
    };
    let restore = || {
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+w")
            .arg(&src)
            .status();
    };
    if !out.status.success() {
        restore();
        panic!(
            "pip install from a read-only tree failed ({}; bind mount: {root}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = listing(&src);
    restore();
    assert_eq!(
        before, after,
        "pip or the build backend wrote into the source tree"
    );
    for name in package_files() {
        assert!(
            target.join("rea_client").join(&name).is_file(),
            "{name} was not installed"
        );
    }
    let imported = run_ok(
        "import the installed package",
        Command::new(python())
            .args([
                "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); import rea_client; \
                 print(rea_client.__file__)",
            ])
            .arg(&target)
            .current_dir(scratch.dir.path()),
    );
    assert!(
        imported.trim().starts_with(&target.display().to_string()),
        "{imported}"
    );
}

const SURFACE: &str = r#"
import ast, inspect, os, sys, types
sys.path.insert(0, sys.argv[1])
import rea_client as rc
pkg = os.path.dirname(rc.__file__)
for name in sorted(os.listdir(pkg)):
    if name.endswith(".py"):
        ast.parse(open(os.path.join(pkg, name)).read(), name, feature_version=(3, 9))
public = {n for n, v in vars(rc).items()
          if not n.startswith("_") and not isinstance(v, types.ModuleType)
          and getattr(v, "__module__", "rea_client").startswith("rea_client")}
missing = public - set(rc.__all__)
absent = [n for n in rc.__all__ if not hasattr(rc, n)]
assert not missing, f"public but not in __all__: {sorted(missing)}"
assert not absent, f"in __all__ but absent: {absent}"
for n in ("may_delete", "reconcile", "Runner", "run", "bwrap_argv", "ActionStopped",
          "OutputLimitExceeded"):
    assert n in rc.__all__, n
assert hasattr(rc.Watchdog, "__enter__") and hasattr(rc.Watchdog, "__exit__")
assert issubclass(rc.OutputLimitExceeded, rc.ActionStopped)
import subprocess
assert issubclass(rc.ActionStopped, subprocess.SubprocessError)
assert issubclass(rc.ActionStopped, rc.ReaError)
print(len(rc.__all__), "names")
"#;

/// `__all__` is every public name (may_delete and reconcile included),
/// and each file parses as Python 3.9; the exceptions a harness catches
/// are where it looks for them; Watchdog is a context manager.
#[test]
fn the_package_surface_is_complete_and_python_3_9() {
    let out = run_ok(
        "the package's surface",
        Command::new(python())
            .args(["-c", SURFACE])
            .arg(tools())
            .current_dir(repo()),
    );
    assert!(out.trim_end().ends_with("names"), "{out}");
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
import ast, os, sys, types
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
    # The package's __init__, as the import system would run it (its
    # relative import of ._runner needs the package in sys.modules).
    pkg = types.ModuleType("rea_client")
    pkg.__path__ = [os.path.dirname(path)]
    pkg.__package__ = "rea_client"
    pkg.__file__ = path
    sys.modules["rea_client"] = pkg
    sys.modules["sys"] = fake   # what the module's own `import sys` finds
    try:
        exec(compile(src, path, "exec"), pkg.__dict__)
    except ImportError as e:
        return "ImportError: " + str(e)
    finally:
        sys.modules["sys"] = real
        for name in [n for n in sys.modules if n.split(".")[0] == "rea_client"]:
            del sys.modules[name]
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
