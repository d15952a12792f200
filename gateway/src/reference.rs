//! The reference pages of `docs/reference/`, generated from the code itself: the tool catalog
//! (as `describe --json` prints it), the error codes, the clap tree and the `gateway.toml` schema.
//! A unit test below holds the committed pages equal to these; `UPDATE_REFERENCE=1` rewrites them.

use std::fmt::Write as _;

use serde_json::Value;

/// Where the pages live, relative to the repository root.
pub(crate) const DIR: &str = "docs/reference";

const GENERATED: &str = "<!-- Generated from the code by `UPDATE_REFERENCE=1 cargo test -p gateway reference`. Do not edit by hand. -->";

/// Every page: `(file name, Markdown)`.
pub(crate) fn pages() -> Vec<(&'static str, String)> {
    vec![
        ("tools.md", tools(&crate::describe::describe())),
        ("errors.md", errors()),
        ("cli.md", cli()),
        ("config.md", config()),
    ]
}

fn tools(d: &Value) -> String {
    let mut s = format!("{GENERATED}\n\n# Tools\n\n");
    s.push_str(
        "Every tool vaultgate serves over MCP, as `vaultgate describe --json` prints it. The tiers are those \
whose credentials may call the tool (see [the tiers](../guide/tiers.md)); a call outside them answers \
`CAPABILITY_DENIED`. Every answer that fails carries one of the [error codes](errors.md).\n\n",
    );
    let list = d["tools"].as_array().cloned().unwrap_or_default();
    for t in &list {
        let name = t["name"].as_str().unwrap_or("");
        let _ = writeln!(s, "- [`{name}`](#{name})");
    }
    for t in &list {
        let name = t["name"].as_str().unwrap_or("");
        let _ = write!(s, "\n## {name}\n\n");
        if let Some(title) = t["title"].as_str() {
            let _ = write!(s, "**{}**. ", md_text(title));
        }
        let _ = write!(s, "{}\n\n", md_text(t["description"].as_str().unwrap_or("")));
        let tiers: Vec<String> = strings(&t["tiers"])
            .into_iter()
            .map(|t| format!("`{t}`"))
            .collect();
        let _ = writeln!(s, "- Tiers: {}", tiers.join(", "));
        if let Some(a) = t["annotations"].as_object() {
            let hints: Vec<String> = a
                .iter()
                .filter(|(k, _)| k.as_str() != "title")
                .map(|(k, v)| format!("`{k}: {v}`"))
                .collect();
            let _ = writeln!(s, "- Annotations: {}", hints.join(", "));
        }
        s.push('\n');
        fields(&mut s, "Arguments", &t["inputSchema"]);
        fields(&mut s, "Result", &t["outputSchema"]);
    }
    s
}

/// A table of an object schema's top-level properties, then the whole schema folded away.
fn fields(s: &mut String, heading: &str, schema: &Value) {
    let Some(props) = schema["properties"].as_object() else {
        return;
    };
    let required = strings(&schema["required"]);
    let _ = write!(
        s,
        "{heading}:\n\n| name | type | required | description |\n|---|---|---|---|\n"
    );
    for (k, p) in props {
        let _ = writeln!(
            s,
            "| `{k}` | {} | {} | {} |",
            type_of(p),
            if required.contains(&k.as_str()) {
                "yes"
            } else {
                "no"
            },
            md_cell(p["description"].as_str().unwrap_or(""))
        );
    }
    let pretty = serde_json::to_string_pretty(schema).unwrap_or_default();
    let _ = write!(
        s,
        "\n<details><summary>{heading}: the JSON Schema</summary>\n\n```json\n{pretty}\n```\n\n</details>\n\n"
    );
}

/// A short type for a table: `string`, `integer or null`, `array of EditArg`.
fn type_of(p: &Value) -> String {
    if let Some(r) = p["$ref"].as_str() {
        return r.rsplit('/').next().unwrap_or(r).to_owned();
    }
    if let Some(any) = p["anyOf"].as_array().or(p["oneOf"].as_array()) {
        return any.iter().map(type_of).collect::<Vec<_>>().join(" or ");
    }
    let mut names: Vec<String> = match &p["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ if p.get("enum").is_some() => vec!["enum".into()],
        _ => vec!["any".into()],
    };
    for n in &mut names {
        if n == "array" && p.get("items").is_some() {
            *n = format!("array of {}", type_of(&p["items"]));
        }
    }
    if let Some(values) = p["enum"].as_array() {
        let vs: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", vs.join(", "));
    }
    names.join(" or ")
}

fn errors() -> String {
    let mut s = format!("{GENERATED}\n\n# Error codes\n\n");
    s.push_str(
        "A call that fails answers `{\"ok\": false, \"code\", \"message\", \"retryable\"}` (over MCP, a tool \
result with `isError: true` whose one text block is this object as JSON; never `structuredContent`). The codes are stable: one is never \
renamed or removed. The message says what happened in this case; the table says what the code means and \
what to do next. `retryable` is true when the very same call may succeed later without any change. The CLI \
prints `error[CODE]: message` and exits 1.\n\n| code | retryable | what it means | what to do next |\n|---|---|---|---|\n",
    );
    for c in policy::ErrorCode::ALL {
        let _ = writeln!(
            s,
            "| `{c}` | {} | {} | {} |",
            if c.retryable() { "yes" } else { "no" },
            md_cell(c.meaning()),
            md_cell(c.next_step())
        );
    }
    s
}

fn cli() -> String {
    let mut s = format!("{GENERATED}\n\n# Command line\n\n");
    s.push_str(
        "Every command of `vaultgate`, as its `--help` says it. `--home DIR` works before or after any \
command. Exit status: 0 on success, 1 when the operation failed (`error[CODE]: …` on stderr, see \
[the error codes](errors.md)), 2 on a usage error. `vaultgate man` prints the same as a man page.\n\n",
    );
    let mut top = crate::cli::command();
    top.build();
    let mut all = Vec::new();
    collect(&top, &mut all);
    for c in &all {
        let name = c.get_bin_name().unwrap_or(c.get_name());
        let _ = writeln!(s, "- [`{name}`](#{})", anchor(name));
    }
    for c in all {
        command_section(&mut s, c);
    }
    s
}

fn collect<'a>(c: &'a clap::Command, all: &mut Vec<&'a clap::Command>) {
    all.push(c);
    for sub in c
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        collect(sub, all);
    }
}

fn command_section(s: &mut String, c: &clap::Command) {
    let name = c.get_bin_name().unwrap_or(c.get_name());
    let _ = write!(s, "\n## {name}\n\n");
    let about = c
        .get_long_about()
        .or(c.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _ = write!(s, "{}\n\n", help_text(&about));
    let usage = c.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = write!(s, "```text\n{usage}\n```\n\n");
    let args: Vec<&clap::Arg> = c
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        // A global option (`--home`) is listed once, at the top.
        .filter(|a| !a.is_global_set() || c.get_bin_name() == Some("vaultgate"))
        .collect();
    if args.is_empty() {
        return;
    }
    s.push_str("| argument | description |\n|---|---|\n");
    for a in args {
        let mut what = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        // clap drops a help text's last full stop; the facts added below are sentences of their own.
        if !what.is_empty() && !what.ends_with(['.', ')', ':']) {
            what.push('.');
        }
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| match v.get_help() {
                Some(h) => format!("`{}` ({h})", v.get_name()),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if !values.is_empty() {
            let _ = write!(what, " Values: {}.", values.join(", "));
        }
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let flag = matches!(
            a.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
        );
        if !defaults.is_empty() && !flag {
            let _ = write!(what, " Default: `{}`.", defaults.join(" "));
        }
        if let Some(env) = a.get_env() {
            let _ = write!(what, " Environment: `{}`.", env.to_string_lossy());
        }
        if a.is_global_set() {
            what.push_str(" Global: works with every command.");
        }
        let _ = writeln!(s, "| `{}` | {} |", arg_form(a), md_cell(what.trim()));
    }
}

fn arg_form(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let takes_value = a.get_num_args().is_none_or(|n| n.takes_values());
    match (a.get_long(), a.get_short()) {
        (None, None) => value,
        (long, short) => {
            let mut names = Vec::new();
            if let Some(c) = short {
                names.push(format!("-{c}"));
            }
            if let Some(l) = long {
                names.push(format!("--{l}"));
            }
            let names = names.join(", ");
            if takes_value && !matches!(a.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::Count) {
                format!("{names} {value}")
            } else {
                names
            }
        }
    }
}

fn config() -> String {
    let schema = serde_json::to_value(schemars::schema_for!(engine::home::Config)).unwrap_or(Value::Null);
    let mut s = format!("{GENERATED}\n\n# gateway.toml\n\n");
    s.push_str(
        "`<home>/gateway.toml` is written by `vaultgate init` and by the commands that change it (`vault \
add`, `vault set-default`, `vault pdf-text`, `vault git`, `tunnel setup`). You may edit it by hand while no \
server runs; a key it does not know is an error, not ignored. Every key but `gateway_id` and the vaults' \
`id`, `name` and `path` has a default, so a file may name only what it changes.\n\n",
    );
    let defs = &schema["$defs"];
    // Top-level keys that are not tables.
    s.push_str("## Top level\n\n");
    let mut sections = Vec::new();
    table_head(&mut s);
    for (k, p) in schema["properties"].as_object().into_iter().flatten() {
        let target = p["$ref"]
            .as_str()
            .or(p["items"]["$ref"].as_str())
            .and_then(|r| r.rsplit('/').next());
        match target {
            Some(def) => sections.push((k.clone(), def.to_owned(), p["type"] == "array", p.clone())),
            None => key_row(&mut s, k, p, &schema),
        }
    }
    for (key, def, array, p) in sections {
        let header = if array {
            format!("[[{key}]]")
        } else {
            format!("[{key}]")
        };
        let _ = write!(s, "\n## {header}\n\n");
        if let Some(d) = p["description"].as_str() {
            let _ = write!(s, "{}\n\n", md_text(d));
        }
        table_head(&mut s);
        let def = &defs[def.as_str()];
        for (k, field) in def["properties"].as_object().into_iter().flatten() {
            key_row(&mut s, k, field, def);
        }
    }
    s
}

fn table_head(s: &mut String) {
    s.push_str("| key | type | default | description |\n|---|---|---|---|\n");
}

fn key_row(s: &mut String, key: &str, p: &Value, parent: &Value) {
    let required = strings(&parent["required"]).contains(&key);
    let default = match p.get("default") {
        Some(v) => format!("`{}`", toml_literal(v)),
        None if required => "required".into(),
        None => "unset".into(),
    };
    let _ = writeln!(
        s,
        "| `{key}` | {} | {default} | {} |",
        type_of(p),
        md_cell(p["description"].as_str().unwrap_or(""))
    );
}

fn toml_literal(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!("[{}]", a.iter().map(toml_literal).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Prose from doc comments: rustdoc's line breaks joined, as Markdown would anyway.
fn md_text(s: &str) -> String {
    s.trim().to_owned()
}

/// A command's help as Markdown: its indented lines (examples) become a text block.
fn help_text(s: &str) -> String {
    let mut out = String::new();
    let mut in_block = false;
    for line in s.trim().lines() {
        let indented = line.starts_with("  ");
        if indented != in_block {
            out.push_str(if indented { "```text\n" } else { "```\n\n" });
            in_block = indented;
        }
        out.push_str(if indented { line.trim_start() } else { line });
        out.push('\n');
    }
    if in_block {
        out.push_str("```\n");
    }
    let mut out = out.trim_end().to_owned();
    if !out.is_empty() && !out.ends_with(['.', '`', ')', ':']) {
        out.push('.');
    }
    out
}

/// Text inside a table cell: one line, and a `|` cannot end the cell.
fn md_cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The anchor GitHub-style renderers give a heading: lower case, spaces to `-`, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::PathBuf;

    fn dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(super::DIR)
    }

    /// The committed reference is what the code generates: a new tool, code, command, flag or
    /// `gateway.toml` key fails here until the pages are regenerated.
    #[test]
    fn reference_pages_match_the_code() {
        let update = std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1");
        let mut stale = Vec::new();
        for (name, text) in super::pages() {
            let path = dir().join(name);
            if update {
                std::fs::create_dir_all(dir()).unwrap();
                std::fs::write(&path, &text).unwrap();
                continue;
            }
            match std::fs::read_to_string(&path) {
                Ok(committed) if committed == text => {}
                Ok(_) => stale.push(format!("{} differs from the code", path.display())),
                Err(e) => stale.push(format!("{}: {e}", path.display())),
            }
        }
        assert!(
            stale.is_empty(),
            "{}\nregenerate with: UPDATE_REFERENCE=1 cargo test -p gateway reference",
            stale.join("\n")
        );
    }

    #[test]
    fn every_tool_error_command_and_key_is_in_the_reference() {
        let pages: std::collections::BTreeMap<_, _> = super::pages().into_iter().collect();
        for t in crate::tools::CATALOG.iter() {
            assert!(
                pages["tools.md"].contains(&format!("\n## {}\n", t.name)),
                "{}",
                t.name
            );
        }
        for c in policy::ErrorCode::ALL {
            assert!(pages["errors.md"].contains(&format!("| `{c}` |")), "{c}");
        }
        for key in [
            "max_output_bytes",
            "allowed_origins",
            "login_code_ttl_seconds",
            "autostart",
            "pdf_text",
        ] {
            assert!(pages["config.md"].contains(&format!("| `{key}` |")), "{key}");
        }
        for cmd in [
            "vaultgate token issue",
            "vaultgate vault git",
            "vaultgate completions",
            "vaultgate man",
        ] {
            assert!(pages["cli.md"].contains(&format!("\n## {cmd}\n")), "{cmd}");
        }
        // Defaults come from the code's Default impls, not from prose.
        assert!(pages["config.md"].contains("| `max_output_bytes` | integer | `16777216` |"));
        assert!(pages["config.md"].contains("| `port` | integer | `8765` |"));
    }

    /// The reference stands alone: it never cites a document outside the repository.
    #[test]
    fn the_reference_cites_nothing_outside_the_repository() {
        for (name, text) in super::pages() {
            for (n, line) in text.lines().enumerate() {
                assert!(!line.contains("SPEC"), "{name}:{}: {line}", n + 1);
            }
        }
    }

    /// Every argument of every command says what it is for (a bare `--json` or `ID` says nothing).
    #[test]
    fn every_argument_has_help() {
        fn walk(c: &clap::Command, problems: &mut Vec<String>) {
            for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                if a.get_help().is_none() && !matches!(a.get_id().as_str(), "help" | "version") {
                    problems.push(format!(
                        "{}: {}",
                        c.get_bin_name().unwrap_or(c.get_name()),
                        a.get_id()
                    ));
                }
            }
            for sub in c.get_subcommands() {
                walk(sub, problems);
            }
        }
        let mut top = crate::cli::command();
        top.build();
        let mut problems = Vec::new();
        walk(&top, &mut problems);
        assert!(
            problems.is_empty(),
            "arguments without help:\n{}",
            problems.join("\n")
        );
    }

    /// Every configuration key says what it is for.
    #[test]
    fn every_config_key_is_described() {
        let text = super::config();
        let undocumented: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("| `") && l.ends_with("|  |"))
            .collect();
        assert!(
            undocumented.is_empty(),
            "keys without a doc comment:\n{}",
            undocumented.join("\n")
        );
    }
}
