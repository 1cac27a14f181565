//! The stage as tests look at it: `rea-stage` run bounded, and a
//! snapshot of a tree to prove that nothing in it changed.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::harness::{output_within, s, stage_bin, PATIENCE};
use super::schema::{compile, schema_errors};

/// `rea-stage ARGS` → (exit code, stdout, stderr), bounded.
pub fn stage_cmd(args: &[&str], env: Option<(&str, &Path)>) -> (i32, String, String) {
    let mut c = Command::new(stage_bin());
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = output_within(c.spawn().expect("spawn rea-stage"), PATIENCE);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Everything under `root` (not following links): type, mode, owner,
/// links, inode, and the bytes of files / the target of links.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let t = m.file_type();
        let what = if t.is_file() && m.len() > 1 << 20 {
            // Huge (sparse) test files: their size, not their bytes.
            format!("file of {} bytes", m.len())
        } else if t.is_file() {
            format!("file {:?}", std::fs::read(&p).unwrap())
        } else if t.is_symlink() {
            format!("link {:?}", std::fs::read_link(&p).unwrap())
        } else if t.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
            "dir".to_string()
        } else {
            "special".to_string()
        };
        let meta = format!("{:o} {} {} {}", m.mode(), m.uid(), m.nlink(), m.ino());
        out.insert(p, format!("{meta} {what}"));
    }
    out
}

/// `rea-audit verify FILE --json` → (exit code, verdict), the verdict
/// checked against remove-verdict.schema.json.
pub fn verify_removal(log: &Path) -> (i32, Value) {
    let out = Command::new(super::harness::audit_bin())
        .args(["verify", s(log), "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let errors = schema_errors(&compile("remove-verdict"), &v);
    assert!(
        errors.is_empty(),
        "remove-verdict.schema.json: {errors:?}\n{v:#}"
    );
    (out.status.code().unwrap_or(-1), v)
}
