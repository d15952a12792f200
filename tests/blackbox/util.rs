//! Shared helpers: a fresh home with a copied fixture vault, CLI runs, MCP clients.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use std::collections::HashMap;

use serde_json::{Value, json};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vaultgate"))
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vaults")
        .join(name)
}

/// Copies a folder tree (files and folders only).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        let dest = to.join(e.file_name());
        if ty.is_dir() {
            copy_tree(&e.path(), &dest);
        } else if ty.is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// A fresh temporary home with one fixture vault registered as `basic` (the default).
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub vault: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        Env::with_fixture("basic")
    }

    pub fn with_fixture(name: &str) -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let vault = tmp.path().join("vault");
        copy_tree(&fixture(name), &vault);
        let env = Env { tmp, home, vault };
        env.ok(&["init"]);
        env.ok(&["vault", "add", env.vault.to_str().unwrap(), "--id", "basic"]);
        env
    }

    /// Runs the CLI with this home; never inherits a VAULTGATE_* variable from the test process.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .arg("--home")
            .arg(&self.home)
            .args(args)
            .env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .env("USER", "tester")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs the CLI and asserts exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "vaultgate {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Issues a credential and returns (id, token).
    pub fn token(&self, name: &str, tier: &str) -> (String, String) {
        let mut args = vec![
            "token", "issue", "--name", name, "--tier", tier, "--format", "json",
        ];
        if tier == "full" {
            args.push("--yes");
        }
        let v: Value = serde_json::from_str(&self.ok(&args)).unwrap();
        (
            v["id"].as_str().unwrap().to_owned(),
            v["token"].as_str().unwrap().to_owned(),
        )
    }

    /// Starts `vaultgate stdio` with this token and connects an rmcp client to it.
    pub async fn stdio(&self, token: &str) -> Client {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("stdio")
            .arg("--home")
            .arg(&self.home)
            .env_remove("VAULTGATE_HOME")
            .env("VAULTGATE_TOKEN", token)
            .stderr(std::process::Stdio::null());
        let transport = TokioChildProcess::new(cmd).unwrap();
        Client {
            inner: ().serve(transport).await.unwrap(),
        }
    }
}

pub struct Client {
    pub inner: RunningService<RoleClient, ()>,
}

/// A tool call's outcome, as a client sees it.
#[derive(Debug, Clone)]
pub enum Reply {
    Ok(Value),
    /// `isError: true`: the parsed docs/contract.md#the-mcp-surface error JSON.
    Err(Value),
}

impl Reply {
    pub fn ok(self) -> Value {
        match self {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("expected success, got error {e}"),
        }
    }
    pub fn code(self) -> String {
        self.err_json()["code"].as_str().unwrap().to_owned()
    }
    /// The error JSON of a call that must have failed.
    pub fn err_json(self) -> Value {
        match self {
            Reply::Ok(v) => panic!("expected an error, got {v}"),
            Reply::Err(e) => e,
        }
    }
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Ok(_))
    }
}

pub fn to_reply(r: CallToolResult) -> Reply {
    if r.is_error == Some(true) {
        assert!(
            r.structured_content.is_none(),
            "errors carry no structuredContent"
        );
        assert_eq!(r.content.len(), 1, "errors carry exactly one text block");
        let text = r.content[0].as_text().expect("error block is text").text.clone();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ok"], Value::Bool(false));
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert!(v["retryable"].is_boolean());
        Reply::Err(v)
    } else {
        let v = r
            .structured_content
            .clone()
            .expect("success carries structuredContent");
        let text = r.content[0].as_text().expect("text block").text.clone();
        let same: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(same, v, "the text block repeats structuredContent");
        Reply::Ok(v)
    }
}

impl Client {
    pub async fn call(&self, tool: &str, args: Value) -> Reply {
        to_reply(
            self.try_call(tool, args)
                .await
                .expect("tools/call transport error"),
        )
    }

    pub async fn try_call(&self, tool: &str, args: Value) -> Result<CallToolResult, rmcp::ServiceError> {
        let mut p = CallToolRequestParams::new(tool.to_owned());
        let args: JsonObject = match args {
            Value::Object(m) => m,
            Value::Null => JsonObject::new(),
            other => panic!("arguments must be an object, got {other}"),
        };
        p.arguments = Some(args);
        self.inner.call_tool(p).await
    }

    pub async fn close(self) {
        let _ = self.inner.cancel().await;
    }
}

// ---- bounded calls and the audit log, shared by every module -------------------------------------

/// The longest any one answer of the server may take in a test: a hung call fails the test with
/// what it waited for, never hangs the suite.
pub const CALL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `f`, or a panic naming `what` once [`CALL_WAIT`] has passed.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(CALL_WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {CALL_WAIT:?}"),
    }
}

/// One tool call, bounded.
pub async fn call(c: &Client, tool: &str, args: Value) -> Reply {
    bounded(tool, c.call(tool, args)).await
}

/// One tool call that must succeed; its `structuredContent`.
pub async fn ok(c: &Client, tool: &str, args: Value) -> Value {
    match call(c, tool, args.clone()).await {
        Reply::Ok(v) => v,
        Reply::Err(e) => panic!("{tool}({args}): expected success, got {e}"),
    }
}

/// A client that checks every success against the tool's declared `outputSchema` (every tool
/// declares one) and bounds every call.
pub struct Checked {
    pub client: Client,
    schemas: HashMap<String, jsonschema::Validator>,
}

impl Checked {
    /// `vaultgate stdio` with `token`, its tools' output schemas compiled.
    pub async fn open(env: &Env, token: &str) -> Checked {
        Checked::of(env.stdio(token).await).await
    }

    pub async fn of(client: Client) -> Checked {
        let mut schemas = HashMap::new();
        let tools = bounded("tools/list", client.inner.list_all_tools())
            .await
            .expect("tools/list");
        for tool in tools {
            let t = serde_json::to_value(&tool).unwrap();
            if let Some(schema) = t.get("outputSchema") {
                let name = t["name"].as_str().unwrap().to_owned();
                schemas.insert(name, jsonschema::draft202012::new(schema).unwrap());
            }
        }
        Checked { client, schemas }
    }

    /// Whether the server lists `tool` with an output schema.
    pub fn lists(&self, tool: &str) -> bool {
        self.schemas.contains_key(tool)
    }

    pub async fn call(&self, tool: &str, args: Value) -> Reply {
        let reply = call(&self.client, tool, args.clone()).await;
        if let Reply::Ok(v) = &reply {
            let schema = self
                .schemas
                .get(tool)
                .unwrap_or_else(|| panic!("{tool} declares no outputSchema"));
            let errors: Vec<String> = schema.iter_errors(v).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{tool}({args}) breaks its outputSchema: {errors:?}\n{v}"
            );
        }
        reply
    }

    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("{tool}({args}): expected success, got {e}"),
        }
    }

    pub async fn code(&self, tool: &str, args: Value) -> String {
        self.call(tool, args).await.code()
    }

    /// A call that must fail: its error JSON.
    pub async fn err(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Reply::Ok(v) => panic!("{tool}({args}): expected an error, got {v}"),
            Reply::Err(e) => e,
        }
    }

    pub async fn close(self) {
        self.client.close().await;
    }
}

/// `propose_new_note` that must succeed: the proposal (id, proposalHash, …).
pub async fn propose_new(c: &Client, path: &str, content: &str, reason: &str) -> Value {
    ok(
        c,
        "propose_new_note",
        json!({"path": path, "content": content, "reason": reason}),
    )
    .await
}

/// Every record of the home's audit log, parsed.
pub fn audit_lines(env: &Env) -> Vec<Value> {
    std::fs::read_to_string(env.home.join("audit.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}")))
        .collect()
}

/// An MCP client that keeps what the server announces: `resources/updated` URIs and the data of
/// log messages, which must come from the `vaultgate.vault` logger.
#[derive(Clone, Default)]
pub struct Recorder {
    pub updated: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub logs: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

// Log messages are what the contract announces changes with; rmcp marks logging deprecated.
#[allow(deprecated)]
impl rmcp::ClientHandler for Recorder {
    async fn on_resource_updated(
        &self,
        p: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(p.uri);
    }
    async fn on_logging_message(
        &self,
        p: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        assert_eq!(p.logger.as_deref(), Some("vaultgate.vault"));
        self.logs.lock().unwrap().push(p.data);
    }
}

impl Recorder {
    pub fn clear(&self) {
        self.updated.lock().unwrap().clear();
        self.logs.lock().unwrap().clear();
    }
}

/// Edits `gateway.toml [limits]`.
pub fn set_limits(env: &Env, limits: &[(&str, i64)]) {
    let path = env.home.join("gateway.toml");
    let mut config: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let table = config
        .entry("limits")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap();
    for (k, v) in limits {
        table.insert((*k).into(), toml::Value::Integer(*v));
    }
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
}
