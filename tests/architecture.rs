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

// ---- read from cargo and a parser ----------------------------------------------------------------

/// `cargo metadata` of the workspace: every member with its manifest, targets and dependencies.
fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(root())
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every workspace member: (name, package folder, its workspace dependencies of kind normal or
/// build, the root files of its lib and bin targets).
fn members() -> Vec<(String, PathBuf, Vec<String>, Vec<PathBuf>)> {
    let m = metadata();
    let packages = m["packages"].as_array().unwrap();
    let names: Vec<&str> = packages.iter().map(|p| p["name"].as_str().unwrap()).collect();
    packages
        .iter()
        .map(|p| {
            let dir = Path::new(p["manifest_path"].as_str().unwrap())
                .parent()
                .unwrap()
                .to_owned();
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .filter(|d| names.contains(&d.as_str()))
                .collect();
            let roots = p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| {
                    t["kind"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k == "lib" || k == "bin")
                })
                .map(|t| PathBuf::from(t["src_path"].as_str().unwrap()))
                .collect();
            (p["name"].as_str().unwrap().to_owned(), dir, deps, roots)
        })
        .collect()
}

fn parse(path: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| panic!("{}: does not parse: {e}", path.display()))
}

/// Every `.rs` file below `dir`, skipping build output.
fn rust_files(dir: &Path) -> Vec<(PathBuf, String)> {
    fn walk(d: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') && name != "out" {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out
}

/// The crate graph, as ARCHITECTURE.md draws it: each member's allowed workspace dependencies.
const EDGES: &[(&str, &[&str])] = &[
    ("policy", &[]),
    ("audit", &[]),
    ("pdftext", &[]),
    ("proposals", &["policy", "audit"]),
    ("inbox", &["policy"]),
    ("vault", &["policy"]),
    (
        "engine",
        &["policy", "proposals", "audit", "inbox", "vault", "pdftext"],
    ),
    ("teamstate", &["engine", "inbox", "audit"]),
    ("gateway", &["engine", "policy", "pdftext", "teamstate"]),
    ("vaultgate", &["gateway"]),
    ("vaultgate-bench", &["pdftext"]),
];

/// Read from `cargo metadata`, not hand-kept lists: a new crate, or a new edge, fails here until
/// it is drawn in ARCHITECTURE.md and added above.
#[test]
fn the_crate_graph_is_the_one_architecture_md_draws() {
    let members = members();
    assert!(members.len() >= 9, "{} members", members.len());
    for (name, _, deps, _) in &members {
        let allowed = EDGES
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("crate {name} is not in ARCHITECTURE.md's graph"))
            .1;
        for d in deps {
            assert!(
                allowed.contains(&d.as_str()),
                "{name} depends on {d}: not an edge of the graph"
            );
        }
    }
    let arch = read("ARCHITECTURE.md");
    for (name, _) in EDGES {
        let short = name.strip_prefix("vaultgate-").unwrap_or(name);
        assert!(
            arch.contains(&format!("\n{short} ")),
            "ARCHITECTURE.md does not draw {name}"
        );
    }
}

/// Finds every use of the keyword that turns off the compiler's memory checks, as the parser sees
/// it: blocks, functions, impls, traits, extern blocks.
#[derive(Default)]
struct Unsafe(Vec<String>);

impl<'a> syn::visit::Visit<'a> for Unsafe {
    fn visit_expr_unsafe(&mut self, e: &'a syn::ExprUnsafe) {
        self.0.push("a block without memory checks".into());
        syn::visit::visit_expr_unsafe(self, e);
    }
    fn visit_signature(&mut self, s: &'a syn::Signature) {
        if s.unsafety.is_some() {
            self.0.push(format!("fn {} without memory checks", s.ident));
        }
        syn::visit::visit_signature(self, s);
    }
    fn visit_item_impl(&mut self, i: &'a syn::ItemImpl) {
        if i.unsafety.is_some() {
            self.0.push("an impl without memory checks".into());
        }
        syn::visit::visit_item_impl(self, i);
    }
    fn visit_item_trait(&mut self, i: &'a syn::ItemTrait) {
        if i.unsafety.is_some() {
            self.0.push(format!("trait {} without memory checks", i.ident));
        }
        syn::visit::visit_item_trait(self, i);
    }
    fn visit_item_foreign_mod(&mut self, i: &'a syn::ItemForeignMod) {
        self.0.push("an extern block".into());
        syn::visit::visit_item_foreign_mod(self, i);
    }
}

fn forbids_unsafe(file: &syn::File) -> bool {
    file.attrs.iter().any(|a| {
        a.path().is_ident("forbid")
            && a.parse_args_with(syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated)
                .is_ok_and(|l| l.iter().any(|p| p.is_ident("unsafe_code")))
    })
}

/// Every member of the workspace, as cargo lists it: its lib and bin roots say
/// `#![forbid(unsafe_code)]`, its manifest takes the workspace lints (which forbid it too), and no
/// file of it turns the memory checks off anywhere.
#[test]
fn every_crate_forbids_unsafe_code() {
    for (name, dir, _, roots) in members() {
        let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            manifest
                .get("lints")
                .and_then(|l| l.get("workspace"))
                .and_then(|w| w.as_bool()),
            Some(true),
            "{name}: [lints] workspace = true"
        );
        for r in &roots {
            let text = std::fs::read_to_string(r).unwrap();
            assert!(
                forbids_unsafe(&parse(r, &text)),
                "{} lacks #![forbid(unsafe_code)]",
                r.display()
            );
        }
        let files = rust_files(&dir);
        assert!(!files.is_empty(), "{name} has no sources");
        for (path, text) in files {
            // The root package's folder holds the others; each is checked as its own member.
            if name == "vaultgate"
                && !path.starts_with(root().join("src"))
                && !path.starts_with(root().join("tests"))
            {
                continue;
            }
            let mut v = Unsafe::default();
            syn::visit::visit_file(&mut v, &parse(&path, &text));
            assert!(v.0.is_empty(), "{}: {}", path.display(), v.0.join(", "));
        }
    }
}

/// Collects every string literal it visits.
struct Lits<'n>(&'n mut Vec<String>);

impl<'a> syn::visit::Visit<'a> for Lits<'_> {
    fn visit_lit_str(&mut self, l: &'a syn::LitStr) {
        self.0.push(l.value());
    }
}

/// The names of every tool, read from the tool table (`policy/src/tools.rs`) with the parser.
fn tool_names() -> Vec<String> {
    struct Names(Vec<String>);
    impl<'a> syn::visit::Visit<'a> for Names {
        fn visit_item_const(&mut self, c: &'a syn::ItemConst) {
            if c.ident == "TOOLS" {
                syn::visit::visit_expr(&mut Lits(&mut self.0), &c.expr);
            }
        }
    }
    let path = root().join("policy/src/tools.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut n = Names(Vec::new());
    syn::visit::visit_file(&mut n, &parse(&path, &text));
    assert!(n.0.len() >= 28, "tools: {:?}", n.0);
    n.0
}

/// What the engine decides by, outside its tests: comparisons (`==`, `!=`) and match arms.
struct Decisions<'t> {
    tools: &'t [String],
    /// (what, where) of each offence.
    found: Vec<String>,
    hash_compares: Vec<String>,
    fn_name: String,
}

impl Decisions<'_> {
    fn names_a_tool(&self, e: &syn::Expr) -> Option<String> {
        match e {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) if self.tools.contains(&s.value()) => Some(s.value()),
            _ => None,
        }
    }
}

/// Whether an operand names a note, content, base or proposal hash (the idempotency key's
/// `args_hash` is not one: comparing it is the replay rule, not a decision about a proposal).
fn mentions_a_hash(e: &syn::Expr) -> bool {
    use quote::ToTokens;
    let text = e.to_token_stream().to_string().to_ascii_lowercase();
    text.replace("args_hash", "").contains("hash")
}

impl<'a> syn::visit::Visit<'a> for Decisions<'_> {
    fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
        let is_test = m
            .attrs
            .iter()
            .any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"));
        if !is_test {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        self.fn_name = f.sig.ident.to_string();
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        self.fn_name = f.sig.ident.to_string();
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_expr_binary(&mut self, b: &'a syn::ExprBinary) {
        if matches!(b.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_)) {
            for side in [&*b.left, &*b.right] {
                if let Some(t) = self.names_a_tool(side) {
                    self.found
                        .push(format!("{}: compares with the tool name {t:?}", self.fn_name));
                }
            }
            if mentions_a_hash(&b.left) || mentions_a_hash(&b.right) {
                self.hash_compares.push(self.fn_name.clone());
            }
        }
        syn::visit::visit_expr_binary(self, b);
    }
    fn visit_arm(&mut self, a: &'a syn::Arm) {
        let mut lits = Vec::new();
        syn::visit::visit_pat(&mut Lits(&mut lits), &a.pat);
        for l in lits.iter().filter(|l| self.tools.contains(l)) {
            self.found
                .push(format!("{}: matches the tool name {l:?}", self.fn_name));
        }
        syn::visit::visit_arm(self, a);
    }
}

fn decisions(path: &Path, tools: &[String]) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut d = Decisions {
        tools,
        found: Vec::new(),
        hash_compares: Vec::new(),
        fn_name: String::new(),
    };
    syn::visit::visit_file(&mut d, &parse(path, &text));
    (d.found, d.hash_compares)
}

/// The engine decides nothing by a tool's wire name (a `==`, `!=` or match arm on one): what a
/// tool may do is the tool table's (`policy::tools`), dispatch is the edge's.
#[test]
fn the_engine_decides_nothing_by_a_tool_name() {
    let tools = tool_names();
    let mut found = Vec::new();
    for (path, _) in rust_files(&root().join("engine/src")) {
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        found.extend(
            decisions(&path, &tools)
                .0
                .into_iter()
                .map(|f| format!("{rel}: {f}")),
        );
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The apply decision (checks 3–6) is `proposals::plan`; the engine's apply and its early
/// approval check only gather facts. A comparison with a hash there would be a second decider.
#[test]
fn no_hash_is_compared_in_the_engines_write_path() {
    let tools = tool_names();
    for rel in [
        "engine/src/apply.rs",
        "engine/src/approval.rs",
        "engine/src/proposing.rs",
    ] {
        let (_, hashes) = decisions(&root().join(rel), &tools);
        assert!(
            hashes.is_empty(),
            "{rel} compares a hash in {}",
            hashes.join(", ")
        );
    }
    assert!(
        read("engine/src/apply.rs").contains("proposals::plan::decide("),
        "apply does not call plan::decide"
    );
}

/// Every `impl` block of a type, with the file it is in.
struct Impls {
    found: Vec<(String, String)>,
    file: String,
}

impl<'a> syn::visit::Visit<'a> for Impls {
    fn visit_item_impl(&mut self, i: &'a syn::ItemImpl) {
        if i.trait_.is_none()
            && let syn::Type::Path(p) = &*i.self_ty
            && let Some(last) = p.path.segments.last()
        {
            self.found.push((last.ident.to_string(), self.file.clone()));
        }
        syn::visit::visit_item_impl(self, i);
    }
}

/// `Core` is the shared context and the door to the services; the operations live on the
/// services, each in its own file(s). A second `impl Core` would grow the one object back.
#[test]
fn core_is_implemented_in_its_own_file_only() {
    let mut impls = Impls {
        found: Vec::new(),
        file: String::new(),
    };
    for (path, text) in rust_files(&root().join("engine/src")) {
        impls.file = path.strip_prefix(root()).unwrap().display().to_string();
        syn::visit::visit_file(&mut impls, &parse(&path, &text));
    }
    let core: Vec<&String> = impls
        .found
        .iter()
        .filter(|(ty, _)| ty == "Core")
        .map(|(_, f)| f)
        .collect();
    assert!(!core.is_empty(), "no impl Core found: the guard reads nothing");
    let elsewhere: Vec<&&String> = core
        .iter()
        .filter(|f| f.as_str() != "engine/src/core.rs")
        .collect();
    assert!(
        elsewhere.is_empty(),
        "impl Core outside engine/src/core.rs: {elsewhere:?}"
    );
    // The services Core hands out are structs implemented in the files ARCHITECTURE.md names.
    let arch = read("ARCHITECTURE.md");
    let core_rs = read("engine/src/core.rs");
    for service in [
        "Reads",
        "Credentials",
        "Proposals",
        "Writes",
        "History",
        "Challenges",
        "Approvals",
        "Attachments",
        "ReviewSessions",
        "Changes",
        "Decisions",
        "Settings",
    ] {
        assert!(
            impls.found.iter().any(|(ty, _)| ty == service),
            "service {service} has no impl"
        );
        assert!(
            core_rs.contains(&format!("::{service}<'_>")),
            "Core hands out no {service}"
        );
        assert!(
            arch.contains(&format!("`{service}`")),
            "ARCHITECTURE.md does not place {service}"
        );
    }
}

/// "May this actor apply, or does it need a person's yes?" is `policy::may_apply`, asked in
/// exactly one place of the engine.
#[test]
fn the_engine_asks_may_apply_once() {
    let calls: Vec<String> = rust_files(&root().join("engine/src"))
        .into_iter()
        .flat_map(|(path, text)| {
            let rel = path.strip_prefix(root()).unwrap().display().to_string();
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains("policy::may_apply(") && !l.trim_start().starts_with("//"))
                .map(|(n, _)| format!("{rel}:{}", n + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(calls.len(), 1, "policy::may_apply is asked at {calls:?}");
}

/// Every HMAC key and the token key come from `proposals::keys::derive` with a label listed
/// there; the only other `hmac::Key::new` wraps the bytes the token library hands its HS256
/// provider (already derived). Test modules may build keys of their own.
#[test]
fn every_key_is_derived_in_one_place() {
    let allowed = ["proposals/src/keys.rs", "engine/src/auth.rs"];
    let mut found = Vec::new();
    for dir in [
        "engine/src",
        "proposals/src",
        "gateway/src",
        "inbox/src",
        "audit/src",
        "vault/src",
        "policy/src",
    ] {
        for (path, text) in rust_files(&root().join(dir)) {
            let rel = path.strip_prefix(root()).unwrap().display().to_string();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code.lines().enumerate() {
                if line.contains("hmac::Key::new(") && !allowed.contains(&rel.as_str()) {
                    found.push(format!("{rel}:{}", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "an HMAC key not made by keys::derive: {found:?}"
    );
    assert!(read("engine/src/auth.rs").contains("keys::derive(secret.bytes(), keys::TOKEN)"));
}

/// `ErrorCode::X` as a value (not a pattern, not one side of `==`/`!=`): a code chosen here.
struct CodeChoices {
    found: Vec<String>,
}

impl<'a> syn::visit::Visit<'a> for CodeChoices {
    fn visit_expr_binary(&mut self, b: &'a syn::ExprBinary) {
        let compare = matches!(b.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_));
        for side in [&*b.left, &*b.right] {
            if !(compare && matches!(side, syn::Expr::Path(_))) {
                self.visit_expr(side);
            }
        }
    }

    fn visit_expr_path(&mut self, p: &'a syn::ExprPath) {
        let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segs.len() >= 2 && segs[segs.len() - 2] == "ErrorCode" {
            self.found.push(segs.join("::"));
        }
    }

    fn visit_pat(&mut self, p: &'a syn::Pat) {
        // A pattern matches a code decided elsewhere.
        if !matches!(p, syn::Pat::Path(_)) {
            syn::visit::visit_pat(self, p);
        }
    }

    fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
        // Test modules may name codes to check them.
        if m.ident != "tests" {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

/// Refusals are typed facts (`engine::error::Refused`, …) mapped to their codes in
/// `GatewayError::code`: no other engine file picks a code.
#[test]
fn the_engine_chooses_error_codes_in_one_place() {
    let mut found = Vec::new();
    let mut in_error_rs = 0;
    for (path, text) in rust_files(&root().join("engine/src")) {
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        let mut v = CodeChoices { found: Vec::new() };
        syn::visit::visit_file(&mut v, &parse(&path, &text));
        if rel == "engine/src/error.rs" {
            in_error_rs = v.found.len();
        } else {
            found.extend(v.found.into_iter().map(|c| format!("{rel}: {c}")));
        }
    }
    assert!(
        in_error_rs > 20,
        "error.rs maps only {in_error_rs} codes: the guard reads nothing"
    );
    assert!(
        found.is_empty(),
        "codes chosen outside engine/src/error.rs:\n{}",
        found.join("\n")
    );
}

/// Every write opens the same way (key → lock → key again → recover → the operation):
/// `Writes::write` in `engine/src/txn.rs` is the one place that reads an idempotency key.
#[test]
fn one_write_skeleton_reads_idempotency_keys() {
    let mut found = Vec::new();
    for (path, text) in rust_files(&root().join("engine/src")) {
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        // A module's tests (`#[cfg(test)]`, `#[cfg(all(test, …))]`) may look inside the state.
        let code = text
            .split("#[cfg(test)]")
            .next()
            .and_then(|c| c.split("#[cfg(all(test").next())
            .unwrap_or("");
        if code.contains("idempotency_get(") {
            found.push(rel);
        }
    }
    assert_eq!(
        found,
        ["engine/src/txn.rs"],
        "idempotency keys read outside the skeleton"
    );
    let txn = read("engine/src/txn.rs");
    assert!(
        txn.contains("pub(crate) fn write<"),
        "no write skeleton in txn.rs"
    );
    for (rel, opener) in [
        ("engine/src/apply.rs", ".write("),
        ("engine/src/history.rs", ".write("),
        ("engine/src/critical.rs", ".write("),
        ("engine/src/proposing.rs", ".write("),
    ] {
        assert!(
            read(rel).contains(opener),
            "{rel} does not open its write with Writes::write"
        );
    }
}

/// A source file over 850 lines (its tests aside) is one ARCHITECTURE.md's "Long files" names,
/// with the reason; anything else is split.
#[test]
fn long_files_are_named_with_a_reason() {
    let arch = read("ARCHITECTURE.md");
    let section = arch
        .split("## Long files")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("ARCHITECTURE.md has a Long files section");
    let mut unnamed = Vec::new();
    let mut long = 0;
    for (_, dir, _, _) in members() {
        for (path, text) in rust_files(&dir.join("src")) {
            let rel = path.strip_prefix(root()).unwrap().display().to_string();
            if rel.contains("/tests/") || rel.starts_with("tests/") {
                continue;
            }
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            if code.lines().count() > 850 {
                long += 1;
                if !section.contains(&format!("`{rel}`")) {
                    unnamed.push(format!("{rel} ({} lines)", code.lines().count()));
                }
            }
        }
    }
    assert!(long > 0, "no long file found: the guard reads nothing");
    assert!(
        unnamed.is_empty(),
        "long files ARCHITECTURE.md does not explain: {unnamed:?}"
    );
}
