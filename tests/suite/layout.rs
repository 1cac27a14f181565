//! `tools/layout.py`, the layout check CI runs, checked against planted
//! breaches in a copy of `src/`: a folder that imports a higher one (a
//! folder circle), a new function over the cap, an existing one grown
//! past it, a folder in no layer. The copy unchanged passes, so each failure
//! is the plant's.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::harness::Scratch;

/// A copy of `src/` in a scratch directory.
fn copy_of_src(scratch: &Scratch) -> PathBuf {
    let to = scratch.path("src");
    let st = Command::new("cp")
        .arg("-r")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .arg(&to)
        .status()
        .expect("cp");
    assert!(st.success());
    to
}

/// `python3 tools/layout.py --root ROOT` → (exit code, stdout).
fn layout(root: &Path) -> (i32, String) {
    let o = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/layout.py"))
        .arg("--root")
        .arg(root)
        .output()
        .expect("python3 tools/layout.py");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    (o.status.code().unwrap_or(-1), text)
}

fn append(file: &Path, text: &str) {
    let mut s = std::fs::read_to_string(file).unwrap();
    s.push_str(text);
    std::fs::write(file, s).unwrap();
}

#[test]
fn the_copy_as_it_is_passes() {
    let scratch = Scratch::new();
    let (code, out) = layout(&copy_of_src(&scratch));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(", 0 breach(es)"), "{out}");
}

#[test]
fn a_planted_folder_circle_fails() {
    let scratch = Scratch::new();
    let root = copy_of_src(&scratch);
    // The vocabulary (a bottom layer) importing the verifier: with the
    // verifier's imports of the vocabulary, a circle between folders.
    append(
        &root.join("vocab.rs"),
        "\n#[allow(unused_imports)]\nuse crate::audit::verify::VerifyOptions;\n",
    );
    let (code, out) = layout(&root);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("layering: src/vocab.rs (vocab) imports src/audit/verify.rs (audit)"),
        "{out}"
    );
}

#[test]
fn a_planted_long_function_fails_and_so_does_a_grown_one() {
    let scratch = Scratch::new();
    let root = copy_of_src(&scratch);
    let body = "    let _ = 0;\n".repeat(101);
    append(
        &root.join("units.rs"),
        &format!("\nfn planted() {{\n{body}}}\n"),
    );
    let (code, out) = layout(&root);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("fn planted is 103 lines (at most 100)"),
        "{out}"
    );

    // No function has a ceiling above the cap any more (FN_CEILINGS is
    // empty): one of the stop procedure's grown past it fails like a new one.
    let scratch = Scratch::new();
    let root = copy_of_src(&scratch);
    let sweep = root.join("watchdog/stop/sweep.rs");
    let s = std::fs::read_to_string(&sweep).unwrap();
    let at = s.find("fn sweep(").expect("fn sweep");
    let open = at + s[at..].find("{\n").unwrap() + 2;
    let lines = "        let _grown = ();\n".repeat(100);
    let grown = format!("{}{lines}{}", &s[..open], &s[open..]);
    std::fs::write(&sweep, grown).unwrap();
    let (code, out) = layout(&root);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("fn sweep is"), "{out}");
}

#[test]
fn a_folder_in_no_layer_fails() {
    let scratch = Scratch::new();
    let root = copy_of_src(&scratch);
    std::fs::write(root.join("stray.rs"), "pub fn x() {}\n").unwrap();
    let (code, out) = layout(&root);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("folder stray"), "{out}");
}
