//! The documentation stands alone: every relative link in every Markdown file of the repository
//! leads to a file inside it that exists (and, with a `#fragment`, to a heading that exists), and
//! no page sends the reader to a document outside the repository. Links to web pages are fine.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().unwrap()
}

/// Every `*.md` in the repository, outside build output and scratch folders.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap_or_default();
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                let skip = name.starts_with('.')
                    || matches!(name.as_str(), "target" | "node_modules")
                    || (name == "out" && dir.ends_with("bench"));
                if !skip {
                    walk(&e.path(), out);
                }
            } else if ty.is_file() && name.ends_with(".md") {
                out.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.sort();
    out
}

/// Text outside fenced code blocks and inline code, line by line (1-based numbers).
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
            }
            continue;
        }
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = Some(&t[..3]);
            continue;
        }
        // Drop `code spans`: a link-like text inside one is not a link.
        let mut kept = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                kept.push(c);
            }
        }
        out.push((i + 1, kept));
    }
    out
}

/// The destinations of inline links and images (`[t](dest)`, `![a](dest "title")`), reference
/// definitions (`[x]: dest`) and HTML `href`/`src` attributes.
fn destinations(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (j, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = j;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inner = after[..end].trim();
        let dest = if let Some(stripped) = inner.strip_prefix('<') {
            stripped.split('>').next().unwrap_or("")
        } else {
            inner.split_whitespace().next().unwrap_or("")
        };
        if !dest.is_empty() {
            out.push(dest.to_owned());
        }
        rest = &after[end.min(after.len())..];
    }
    let t = line.trim_start();
    if t.starts_with('[')
        && let Some(i) = t.find("]: ")
        && !t[..i].contains('(')
    {
        out.push(t[i + 3..].split_whitespace().next().unwrap_or("").to_owned());
    }
    for attr in ["href=\"", "src=\""] {
        let mut rest = line;
        while let Some(i) = rest.find(attr) {
            let after = &rest[i + attr.len()..];
            let end = after.find('"').unwrap_or(after.len());
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// The anchors a GitHub-style renderer gives the headings of a page: lower case, spaces to `-`,
/// other punctuation dropped, a repeated heading suffixed `-1`, `-2`, …
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = !fence;
            continue;
        }
        if fence || !t.starts_with('#') {
            continue;
        }
        let heading = t.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => {
                    Some(c.to_lowercase().next().unwrap_or(c))
                }
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    // Explicit anchors (`<a id="x">`, `<a name="x">`).
    for attr in ["id=\"", "name=\""] {
        for (i, _) in text.match_indices(attr) {
            let after = &text[i + attr.len()..];
            out.insert(after[..after.find('"').unwrap_or(0)].to_owned());
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(hex) = std::str::from_utf8(&bytes[i + 1..i + 3])
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_web(dest: &str) -> bool {
    let scheme = dest.split(':').next().unwrap_or("");
    dest.contains(':')
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

#[test]
fn no_relative_link_leads_outside_the_repository_or_to_a_missing_file() {
    let root = root();
    let files = markdown_files();
    assert!(
        files.len() > 10,
        "found only {} Markdown files under {}",
        files.len(),
        root.display()
    );
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        for (n, line) in prose(&text) {
            for dest in destinations(&line) {
                if is_web(&dest) {
                    continue;
                }
                let (path, fragment) = match dest.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (dest.as_str(), None),
                };
                let target = if path.is_empty() {
                    file.clone()
                } else if let Some(from_root) = path.strip_prefix('/') {
                    root.join(percent_decode(from_root))
                } else {
                    file.parent().unwrap().join(percent_decode(path))
                };
                let Ok(real) = target.canonicalize() else {
                    broken.push(format!("{rel}:{n}: `{dest}`: no such file"));
                    continue;
                };
                if !real.starts_with(&root) {
                    broken.push(format!("{rel}:{n}: `{dest}` leads outside the repository"));
                    continue;
                }
                if let Some(f) = fragment
                    && real.extension().is_some_and(|e| e == "md")
                    && !f.is_empty()
                {
                    let target_text = std::fs::read_to_string(&real).unwrap();
                    if !anchors(&target_text).contains(&percent_decode(f)) {
                        broken.push(format!("{rel}:{n}: `{dest}`: no heading with anchor #{f}"));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The project's documents never send the reader to the contract or the notes it was built from:
/// those live outside the repository, so a clone would have a dead reference.
#[test]
fn no_document_cites_a_text_outside_the_repository() {
    let root = root();
    let mut cites = Vec::new();
    for file in markdown_files() {
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for needle in ["SPEC", "../shared", "shared/seeds", "STYLE.md"] {
                if line.contains(needle) {
                    cites.push(format!("{rel}:{}: {needle}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(cites.is_empty(), "{}", cites.join("\n"));
}

/// The checker itself: links it must accept and links it must refuse.
#[test]
fn the_link_checker_finds_what_it_should() {
    assert_eq!(
        destinations("see [a](docs/x.md) and ![b](<y z.png> \"t\")"),
        ["docs/x.md", "y z.png"]
    );
    assert_eq!(destinations("[ref]: ../up.md"), ["../up.md"]);
    assert_eq!(destinations("<img src=\"docs/a.png\">"), ["docs/a.png"]);
    assert_eq!(destinations("a (paren) [x](f(1).md) b"), ["f(1).md"]);
    assert!(
        prose("```\n[a](missing.md)\n```\n`[b](gone.md)`")
            .iter()
            .all(|(_, l)| destinations(l).is_empty())
    );
    assert!(
        is_web("https://example.com/x") && is_web("mailto:a@b") && !is_web("docs/x.md") && !is_web("#frag")
    );
    let a = anchors("# vaultgate token issue\n## read_note\n## A `code`, and (more)!\n## Same\n## Same\n");
    for want in [
        "vaultgate-token-issue",
        "read_note",
        "a-code-and-more",
        "same",
        "same-1",
    ] {
        assert!(a.contains(want), "{want}: {a:?}");
    }
    assert_eq!(percent_decode("a%20b.md"), "a b.md");
}

/// Every text file the repository tracks, outside build output (code, scripts, manifests, docs).
fn tracked_text_files() -> Vec<(String, String)> {
    let root = root();
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["ls-files", "-z"])
        .output()
        .unwrap();
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .split('\0')
        .filter(|f| !f.is_empty())
        .filter_map(|f| {
            let text = std::fs::read_to_string(root.join(f)).ok()?;
            Some((f.to_owned(), text))
        })
        .collect()
}

/// Code and documents cite the contract in the repository (its path, `#`, a heading's anchor), never a
/// numbered section of a text outside it (no section sign before a number, with or without the
/// word SPEC), and every anchor of the contract a file names is a heading of it.
#[test]
fn the_code_cites_the_contract_in_the_repository() {
    let contract = anchors(&std::fs::read_to_string(root().join("docs/contract.md")).unwrap());
    let mut bad = Vec::new();
    let mut cited = 0;
    for (file, text) in tracked_text_files() {
        for (i, line) in text.lines().enumerate() {
            let at = format!("{file}:{}", i + 1);
            if line.contains(concat!("SPEC ", "\u{a7}")) {
                bad.push(format!("{at}: cites the SPEC: {}", line.trim()));
            }
            let numbered = line
                .match_indices('§')
                .any(|(j, _)| line[j + '§'.len_utf8()..].starts_with(|c: char| c.is_ascii_digit()));
            if numbered {
                bad.push(format!("{at}: cites a numbered section: {}", line.trim()));
            }
            let cite = concat!("contract.md", "#");
            for (j, _) in line.match_indices(cite) {
                let anchor: String = line[j + cite.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                    .collect();
                cited += 1;
                if !contract.contains(&anchor) {
                    bad.push(format!("{at}: docs/contract.md has no heading #{anchor}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(cited > 100, "the code cites the contract ({cited} citations)");
}
