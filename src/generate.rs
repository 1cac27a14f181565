//! `--generate KIND`, ripgrep's way: each binary prints its own man page
//! or shell completion script, made from the same clap definition that
//! parses its command line, so neither can drift from the options.
//!
//! The man page is one page per binary: its options, each subcommand's
//! synopsis, description and options, and the exit statuses (clap's
//! `after_help` texts), in roff for `man -l` or a `man1` directory.

use std::io::{self, Write};

use clap::ValueEnum;
use clap_complete::Shell;

/// What `--generate` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Generate {
    /// A man page (roff), for `man -l -` or a man1 directory.
    Man,
    /// A bash completion script, to source or put in bash-completion's
    /// directory.
    CompleteBash,
    /// A zsh completion function (`_` and the program's name) for a
    /// directory on `$fpath`.
    CompleteZsh,
    /// A fish completion script for `~/.config/fish/completions`.
    CompleteFish,
}

/// Writes what `kind` names for the program `cmd` describes to `out`.
pub fn write(kind: Generate, mut cmd: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    cmd.build();
    let name = cmd.get_name().to_string();
    let shell = match kind {
        Generate::Man => return man(&cmd, out),
        Generate::CompleteBash => Shell::Bash,
        Generate::CompleteZsh => Shell::Zsh,
        Generate::CompleteFish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, name, out);
    Ok(())
}

/// [`write`] to stdout: the exit status (1 when stdout failed, said on
/// stderr; never a panic on a closed pipe).
pub fn print(kind: Generate, cmd: clap::Command) -> i32 {
    let mut buf = Vec::new();
    let done = write(kind, cmd, &mut buf).and_then(|()| {
        let mut out = io::stdout().lock();
        out.write_all(&buf)?;
        out.flush()
    });
    match done {
        Ok(()) => 0,
        Err(e) => {
            crate::tell::line(
                crate::tell::Stream::Stderr,
                format_args!("--generate: cannot write: {e}"),
            );
            1
        }
    }
}

/// One page: the program's own sections, then for each subcommand (not
/// `help`) a section of its own with its synopsis, text, options and
/// notes. Help texts written as lines (examples, tables of exit statuses)
/// are set as written (`.nf`), not refilled.
fn man(cmd: &clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let top = clap_mangen::Man::new(cmd.clone());
    top.render_title(out)?;
    // Ragged right, no hyphenation: option names stay whole and greppable.
    out.write_all(b".ad l\n.nh\n")?;
    top.render_name_section(out)?;
    top.render_synopsis_section(out)?;
    top.render_description_section(out)?;
    top.render_options_section(out)?;
    let subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect();
    if !subs.is_empty() {
        let mut list = String::from(".SH COMMANDS\n");
        for sub in &subs {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            list.push_str(&format!(
                ".TP\n\\fB{}\\fR\n{}\n",
                escape(sub.get_name()),
                escape(&about)
            ));
        }
        out.write_all(list.as_bytes())?;
    }
    for sub in subs {
        let full = format!("{} {}", cmd.get_name(), sub.get_name());
        let page = clap_mangen::Man::new(sub.clone().name(full.clone()).bin_name(full));
        let mut text = Vec::new();
        page.render_synopsis_section(&mut text)?;
        page.render_description_section(&mut text)?;
        page.render_options_section(&mut text)?;
        let mut section = format!(".SH \"COMMAND: {}\"\n", sub.get_name().to_uppercase());
        section.push_str(&subsections(&String::from_utf8_lossy(&text)));
        if let Some(notes) = sub.get_after_long_help().or(sub.get_after_help()) {
            section.push_str(&as_written(".SS NOTES", &notes.to_string()));
        }
        out.write_all(section.as_bytes())?;
    }
    if let Some(notes) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        out.write_all(as_written(".SH NOTES", &notes.to_string()).as_bytes())?;
    }
    top.render_version_section(out)
}

/// A subcommand's sections as sub-sections of its own `.SH`: roff has one
/// level of `.SH`, so its headings become `.SS`.
fn subsections(roff: &str) -> String {
    let mut s = String::new();
    for line in roff.lines() {
        match line.strip_prefix(".SH ") {
            Some(h) => s.push_str(&format!(".SS {h}\n")),
            None => {
                s.push_str(line);
                s.push('\n');
            }
        }
    }
    s
}

/// `text` under `heading`, each line as written.
fn as_written(heading: &str, text: &str) -> String {
    let mut s = format!("{heading}\n.nf\n");
    for line in text.lines() {
        s.push_str(&escape(line));
        s.push('\n');
    }
    s.push_str(".fi\n");
    s
}

/// Text safe in roff: backslashes and hyphens escaped, and a line that
/// would start with a control character (`.` or `'`) guarded.
fn escape(text: &str) -> String {
    let s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}
