//! `--generate` (issue 13): each binary's man page renders with `man -l`
//! with no warning and documents every subcommand and option; its bash
//! completion loads and completes subcommands and options; zsh and fish
//! scripts are produced. No process is signalled here.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::harness::{audit_bin, stage_bin, watchdog_bin};

fn generate(bin: &str, kind: &str) -> String {
    let out = Command::new(bin)
        .args(["--generate", kind])
        .output()
        .unwrap();
    assert!(out.status.success(), "{bin} --generate {kind}: {out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The page as `man -l` sets it (80 columns, plain text), and what man and
/// groff said on stderr (warnings on).
fn render(roff: &str) -> (String, String) {
    let mut man = Command::new("man")
        .args(["--warnings", "-l", "-"])
        .env("MANWIDTH", "80")
        .env("MAN_KEEP_FORMATTING", "0")
        .env("PAGER", "cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("man (man-db) is needed: .ci/run installs it");
    man.stdin
        .take()
        .unwrap()
        .write_all(roff.as_bytes())
        .unwrap();
    let out = man.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // man-db sets bold and underline with backspaces when not on a tty.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut plain = String::new();
    for c in text.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    (plain, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn man_pages_render_and_cover_every_subcommand() {
    let pages: [(&str, &[&str], &[&str]); 3] = [
        (
            watchdog_bin(),
            &["run", "exec", "submit", "stop", "close", "recover"],
            &[
                "--audit-log",
                "--deadline",
                "--capture",
                "--contain",
                "--stop-signal",
                "--generate",
            ],
        ),
        (
            audit_bin(),
            &["verify", "show", "reconcile", "holders"],
            &["--expect-head", "--staging", "--generate"],
        ),
        (
            stage_bin(),
            &["begin", "discard", "remove"],
            &["--generate", "--expect-head"],
        ),
    ];
    for (bin, subs, options) in pages {
        let (text, warnings) = render(&generate(bin, "man"));
        assert_eq!(warnings, "", "{bin}: man -l warned");
        let name = std::path::Path::new(bin)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert!(text.contains("NAME"), "{text}");
        assert!(text.contains(&format!("{name} -")), "{text}");
        for sub in subs {
            let heading = format!("COMMAND: {}", sub.to_uppercase());
            assert!(text.contains(&heading), "{name}: no {heading:?} in\n{text}");
            assert!(
                text.contains(&format!("{name} {sub} [")),
                "{name}: no synopsis of {sub}"
            );
        }
        for option in options {
            assert!(text.contains(option), "{name}: {option} missing");
        }
    }
}

/// Help texts written as lines stay lines: exec's example and the exit
/// statuses are not refilled into one paragraph.
#[test]
fn notes_are_set_as_written() {
    let (text, _) = render(&generate(watchdog_bin(), "man"));
    assert!(
        text.lines()
            .any(|l| l.trim() == "rea-watchdog exec --deadline 60 -- make -j2 check"),
        "{text}"
    );
}

#[test]
fn bash_completion_loads_and_completes() {
    for (bin, name, word, want) in [
        (watchdog_bin(), "rea-watchdog", "ex", "exec"),
        (audit_bin(), "rea-audit", "ver", "verify"),
        (stage_bin(), "rea-stage", "disc", "discard"),
    ] {
        let script = generate(bin, "complete-bash");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("completion.bash");
        std::fs::write(&path, script).unwrap();
        // The function complete -p names, called as bash would for
        // `NAME WORD<TAB>`.
        let probe = format!(
            "source {path:?} || exit 9\n\
             spec=$(complete -p {name}) || exit 8\n\
             echo \"$spec\"\n\
             fn=${{spec#*-F }}; fn=${{fn%% *}}\n\
             COMP_WORDS=({name} {word}); COMP_CWORD=1; COMP_LINE='{name} {word}'; COMP_POINT=${{#COMP_LINE}}\n\
             \"$fn\" {name} {word} {name}\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
        );
        let out = Command::new("bash")
            .args(["--norc", "-c", &probe])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(stdout.starts_with("complete "), "{stdout}");
        assert!(
            stdout.lines().skip(1).any(|l| l == want),
            "{name} {word}: {stdout}"
        );
    }
}

#[test]
fn zsh_and_fish_scripts_name_the_subcommands() {
    let zsh = generate(watchdog_bin(), "complete-zsh");
    assert!(zsh.starts_with("#compdef rea-watchdog"), "{zsh}");
    let fish = generate(watchdog_bin(), "complete-fish");
    for sub in ["run", "exec", "recover"] {
        assert!(zsh.contains(&format!("'{sub}:")), "zsh lacks {sub}");
        assert!(fish.contains(&format!("-a \"{sub}\"")), "fish lacks {sub}");
    }
}

/// `--generate` with a subcommand, or with a kind it does not know, is a
/// usage error naming the choices; nothing is printed on stdout.
#[test]
fn generate_refuses_what_it_cannot_do() {
    let out = Command::new(watchdog_bin())
        .args(["--generate", "pdf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("man, complete-bash, complete-zsh, complete-fish"),
        "{err}"
    );
    let out = Command::new(watchdog_bin())
        .args(["--generate", "man", "exec"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
}
