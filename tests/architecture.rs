//! The architecture's invariants (ARCHITECTURE.md), checked on the sources themselves so that a
//! change that breaks one fails here rather than in a review.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `.rs` file below `dir`, with its text.
fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    fn walk(d: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), &mut out);
    assert!(!out.is_empty(), "no sources under {dir}");
    out
}

/// The workspace crates a manifest's `[dependencies]` names.
fn workspace_deps(manifest: &str) -> Vec<String> {
    let doc: toml::Table = read(manifest).parse().unwrap();
    let members = [
        "policy",
        "proposals",
        "audit",
        "inbox",
        "vault",
        "engine",
        "gateway",
        "pdftext",
    ];
    doc.get("dependencies")
        .and_then(|d| d.as_table())
        .map(|t| {
            t.keys()
                .filter(|k| members.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_edge_depends_on_the_engine_and_policy_alone() {
    let mut deps = workspace_deps("gateway/Cargo.toml");
    deps.sort();
    assert_eq!(
        deps,
        ["engine", "pdftext", "policy"],
        "gateway's workspace dependencies"
    );
}

/// SECURITY(T-PDF): PDF bytes are parsed only inside the worker process. `pdftext` reaches no
/// vault, state or audit code, and outside it only the worker's entry (`worker::serve`, run by
/// `vaultgate pdf-worker`) and the parent side (`worker::run`) are called: the server never
/// calls `pdftext::extract` itself, and the engine uses nothing but the wire types.
#[test]
fn a_pdf_is_parsed_only_in_the_worker_process() {
    assert!(
        workspace_deps("pdftext/Cargo.toml").is_empty(),
        "pdftext depends on a workspace crate"
    );
    for dir in ["engine/src", "gateway/src", "vault/src", "src"] {
        for (path, text) in sources(dir) {
            for needle in ["pdftext::extract", "lopdf"] {
                assert!(!text.contains(needle), "{} uses `{needle}`", path.display());
            }
        }
    }
    for (path, text) in sources("engine/src") {
        assert!(
            !text.contains("pdftext::worker"),
            "{} runs the worker itself: only the edge knows the binary",
            path.display()
        );
    }
}

#[test]
fn the_engine_speaks_no_wire_protocol_and_reads_no_environment() {
    let doc: toml::Table = read("engine/Cargo.toml").parse().unwrap();
    let deps = doc["dependencies"].as_table().unwrap();
    for edge in ["rmcp", "axum", "clap", "http", "gateway", "indicatif"] {
        assert!(!deps.contains_key(edge), "engine depends on {edge}");
    }
    for (path, text) in sources("engine/src") {
        for needle in ["std::env::var", "env::vars(", "rmcp::", "axum::", "clap::"] {
            assert!(!text.contains(needle), "{} uses {needle}", path.display());
        }
    }
}

#[test]
fn nothing_outside_the_engine_builds_an_audit_entry() {
    for dir in ["gateway/src", "src"] {
        for (path, text) in sources(dir) {
            for needle in [
                "Entry {", "audit::", ".append(", "AuditLog", ".reader", "vault::", "inbox::",
            ] {
                assert!(!text.contains(needle), "{} contains `{needle}`", path.display());
            }
        }
    }
}

#[test]
fn dispatch_by_tool_name_lives_only_at_the_edge() {
    // An arm like `"read_note" =>` is dispatch on a wire name.
    for (path, text) in sources("engine/src") {
        for tool in [
            "\"read_note\" =>",
            "\"apply_proposal\" =>",
            "\"history_undo\" =>",
            "\"propose_new_note\" =>",
        ] {
            assert!(!text.contains(tool), "{} dispatches on {tool}", path.display());
        }
    }
    let dispatch = read("gateway/src/dispatch.rs");
    for spec in ["read_note", "apply_proposal", "history_undo", "delete_permanent"] {
        assert!(
            dispatch.contains(&format!("\"{spec}\"")),
            "dispatch.rs lacks {spec}"
        );
    }
}

#[test]
fn no_hash_is_compared_outside_the_plan_and_the_file_operations() {
    // The apply decision (checks 3–6) is `proposals::plan::decide`; the engine's apply only
    // gathers facts. A comparison with a base or proposal hash there would be a second decision.
    let apply = read("engine/src/apply.rs");
    for needle in [
        "base_hash ==",
        "== p.base_hash",
        "proposal_hash ==",
        "== p.proposal_hash",
        "!= p.proposal_hash",
    ] {
        assert!(
            !apply.contains(needle),
            "engine/src/apply.rs compares hashes: {needle}"
        );
    }
    assert!(
        apply.contains("proposals::plan::decide("),
        "apply does not call plan::decide"
    );
}

#[test]
fn every_crate_forbids_unsafe_code() {
    for lib in [
        "policy/src/lib.rs",
        "proposals/src/lib.rs",
        "audit/src/lib.rs",
        "inbox/src/lib.rs",
        "vault/src/lib.rs",
        "engine/src/lib.rs",
        "gateway/src/lib.rs",
        "src/main.rs",
    ] {
        assert!(read(lib).contains("#![forbid(unsafe_code)]"), "{lib}");
    }
}
