//! `vaultgate completions` and `vaultgate man`: what a packager installs, checked by the shells
//! and the formatter that will read it. Neither command needs (or creates) a home.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use crate::util::bin;

/// Runs the binary with no home anywhere: HOME points at an empty folder.
fn run(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let fresh = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(args)
        .env_clear()
        .env("HOME", fresh.path())
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out, fresh)
}

fn stdout_of(args: &[&str]) -> String {
    let (out, fresh) = run(args);
    assert!(
        out.status.success(),
        "vaultgate {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(fresh.path()).unwrap().count(),
        0,
        "{args:?} wrote into HOME"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The bash script parses (`bash -n`), and loaded into a real bash it completes subcommands and
/// the options of a nested one.
#[test]
fn bash_completions_parse_and_complete() {
    let script = stdout_of(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vaultgate.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    // What bash does on <TAB>: COMP_WORDS/COMP_CWORD set, the registered function called.
    let complete = |words: &str| -> BTreeSet<String> {
        let program = format!(
            "source {}\nCOMP_WORDS=({words})\nCOMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n\
             COMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n\
             _vaultgate vaultgate \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
            file.display()
        );
        let out = Command::new("bash").arg("-c").arg(program).output().unwrap();
        assert!(
            out.status.success(),
            "bash: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let top = complete("vaultgate to");
    assert!(top.contains("token"), "{top:?}");
    let issue = complete("vaultgate token issue --");
    for flag in ["--name", "--tier", "--expires", "--approve-in-client"] {
        assert!(issue.contains(flag), "{flag} not offered: {issue:?}");
    }
    let shells = complete("vaultgate completions ''");
    assert!(
        ["bash", "zsh", "fish"].iter().all(|s| shells.contains(*s)),
        "{shells:?}"
    );
}

/// zsh and fish scripts name every top-level command (no zsh or fish is needed to check that).
#[test]
fn zsh_and_fish_completions_name_every_command() {
    let zsh = stdout_of(&["completions", "zsh"]);
    assert!(
        zsh.starts_with("#compdef vaultgate"),
        "{}",
        &zsh[..zsh.len().min(80)]
    );
    let fish = stdout_of(&["completions", "fish"]);
    for cmd in [
        "init", "vault", "serve", "stdio", "token", "inbox", "apply", "doctor", "man",
    ] {
        assert!(zsh.contains(&format!("'{cmd}:")), "zsh lacks {cmd}");
        assert!(fish.contains(&format!("-a \"{cmd}\"")), "fish lacks {cmd}");
    }
    let (bad, _) = run(&["completions", "powershell"]);
    assert_eq!(bad.status.code(), Some(2), "an unknown shell is a usage error");
}

/// `man` prints the top page; `man --dir` writes one page per command. groff formats every page
/// without a warning (`-k`: UTF-8 input through preconv, as man-db reads pages), and every page the top one refers to exists.
#[test]
fn man_pages_are_valid_roff_and_complete() {
    let top = stdout_of(&["man"]);
    assert!(top.contains(".TH vaultgate 1"), "{}", &top[..top.len().min(200)]);
    let dir = tempfile::tempdir().unwrap();
    let pages_dir = dir.path().join("man1");
    let written = stdout_of(&["man", "--dir", pages_dir.to_str().unwrap()]);
    assert!(written.starts_with("wrote "), "{written}");
    let pages: BTreeSet<String> = std::fs::read_dir(&pages_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for page in [
        "vaultgate.1",
        "vaultgate-token-issue.1",
        "vaultgate-vault-git.1",
        "vaultgate-man.1",
    ] {
        assert!(pages.contains(page), "{page} missing: {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p.contains("-help")),
        "help pseudo-commands: {pages:?}"
    );
    assert_eq!(
        std::fs::read_to_string(pages_dir.join("vaultgate.1")).unwrap(),
        top
    );

    // Every `vaultgate-…(1)` the pages refer to is a page of its own.
    for page in &pages {
        let text = std::fs::read_to_string(pages_dir.join(page)).unwrap();
        for (i, _) in text.match_indices("(1)") {
            let start = text[..i]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '\\'))
                .map_or(0, |s| s + 1);
            let name = text[start..i].replace("\\-", "-");
            if name.starts_with("vaultgate") {
                assert!(pages.contains(&format!("{name}.1")), "{page} refers to {name}(1)");
            }
        }
        let groff = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(pages_dir.join(page))
            .output()
            .expect("groff is needed to check the man pages (apt-get install groff-base)");
        assert!(
            groff.status.success() && groff.stderr.is_empty(),
            "groff on {page}: {}",
            String::from_utf8_lossy(&groff.stderr)
        );
    }
    // The formatted top page says what the tool is and lists its commands.
    let out = Command::new("groff")
        .args(["-k", "-man", "-Tutf8"])
        .arg(pages_dir.join("vaultgate.1"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MCP gateway"), "{text}");
    assert!(
        text.contains("vaultgate-token(1)") || text.contains("vaultgate‐token(1)"),
        "{text}"
    );
}
