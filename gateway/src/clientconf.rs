//! Paste-ready client configurations printed by `token issue` and `demo`: stdio (the client
//! launches `vaultgate stdio`) and Streamable HTTP (the client connects to `vaultgate serve`).

use std::path::Path;

use engine::Credential;
use serde_json::json;

use crate::cli::TokenFormat;
use engine::auth::Token;

pub fn credential_json(c: &Credential) -> serde_json::Value {
    json!({
        "id": c.id.as_str(),
        "name": c.name,
        "tier": c.tier.as_str(),
        "vaults": c.vaults,
        "createdAt": ts(Some(c.created_at)),
        "expiresAt": ts(c.expires_at),
        "revoked": c.is_revoked(),
        "approveInClient": c.approve_in_client,
    })
}

fn ts(t: Option<i64>) -> serde_json::Value {
    t.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
        .map(|t| serde_json::Value::String(engine::core::rfc3339(t)))
        .unwrap_or(serde_json::Value::Null)
}

/// Where clients find the gateway.
pub struct Target<'a> {
    pub exe: &'a Path,
    pub home: &'a Path,
    pub port: u16,
}

impl Target<'_> {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `mcpServers` JSON (Claude Desktop, Claude Code `.mcp.json`, Cursor `.cursor/mcp.json`), stdio.
pub fn mcp_servers_stdio(t: &Target<'_>, token: &Token) -> String {
    pretty(&json!({ "mcpServers": { "vaultgate": {
        "command": t.exe.display().to_string(),
        "args": ["stdio", "--home", t.home.display().to_string()],
        "env": { "VAULTGATE_TOKEN": token.expose() },
    }}}))
}

/// Claude Code `.mcp.json`, Streamable HTTP.
pub fn claude_http(t: &Target<'_>, token: &Token) -> String {
    pretty(&json!({ "mcpServers": { "vaultgate": {
        "type": "http",
        "url": t.url(),
        "headers": { "Authorization": format!("Bearer {}", token.expose()) },
    }}}))
}

/// Cursor `.cursor/mcp.json`, Streamable HTTP.
pub fn cursor_http(t: &Target<'_>, token: &Token) -> String {
    pretty(&json!({ "mcpServers": { "vaultgate": {
        "url": t.url(),
        "headers": { "Authorization": format!("Bearer {}", token.expose()) },
    }}}))
}

/// VS Code `.vscode/mcp.json` (or the profile's `mcp.json`): its key is `servers`, stdio.
pub fn vscode_stdio(t: &Target<'_>, token: &Token) -> String {
    pretty(&json!({ "servers": { "vaultgate": {
        "type": "stdio",
        "command": t.exe.display().to_string(),
        "args": ["stdio", "--home", t.home.display().to_string()],
        "env": { "VAULTGATE_TOKEN": token.expose() },
    }}}))
}

/// VS Code `.vscode/mcp.json`, Streamable HTTP.
pub fn vscode_http(t: &Target<'_>, token: &Token) -> String {
    pretty(&json!({ "servers": { "vaultgate": {
        "type": "http",
        "url": t.url(),
        "headers": { "Authorization": format!("Bearer {}", token.expose()) },
    }}}))
}

/// Codex `~/.codex/config.toml`, stdio.
pub fn codex_stdio(t: &Target<'_>, token: &Token) -> String {
    format!(
        "[mcp_servers.vaultgate]\ncommand = {}\nargs = [\"stdio\", \"--home\", {}]\nenv = {{ VAULTGATE_TOKEN = {} }}",
        q(&t.exe.display().to_string()),
        q(&t.home.display().to_string()),
        q(token.expose())
    )
}

/// Codex `~/.codex/config.toml`, Streamable HTTP.
pub fn codex_http(t: &Target<'_>, token: &Token) -> String {
    format!(
        "[mcp_servers.vaultgate]\nurl = {}\nhttp_headers = {{ Authorization = {} }}",
        q(&t.url()),
        q(&format!("Bearer {}", token.expose()))
    )
}

/// The MCP Inspector, both ways, with the token kept out of every command line: another local
/// user can read any process's arguments (`ps`), but not its environment. The Inspector hands the
/// variables of `MCP_ENV_VARS` to the server it launches; over HTTP the token is pasted into its UI.
// SECURITY(T-SECRET2): no printed command puts the token in argv.
pub fn inspector(t: &Target<'_>, token: &Token) -> String {
    let env = json!({ "VAULTGATE_TOKEN": token.expose() }).to_string();
    format!(
        "stdio: MCP_ENV_VARS='{env}' npx @modelcontextprotocol/inspector {exe} stdio --home {home}\n\
         HTTP:  npx @modelcontextprotocol/inspector, then in its UI: transport \"Streamable HTTP\", URL {url},\n\
         \x20      Authentication: header Authorization, value \"Bearer <token>\" (paste the token above)",
        exe = t.exe.display(),
        home = t.home.display(),
        url = t.url()
    )
}

pub fn render(format: Option<TokenFormat>, t: &Target<'_>, c: &Credential, token: &Token) -> String {
    match format {
        Some(TokenFormat::Token) => token.expose().to_owned(),
        Some(TokenFormat::Json) => {
            let mut v = credential_json(c);
            if let Some(o) = v.as_object_mut() {
                // docs/contract.md#the-command-line: exactly {id, name, tier, vaults, expiresAt, token}.
                o.remove("createdAt");
                o.remove("revoked");
                o.remove("approveInClient");
                o.insert("token".into(), json!(token.expose()));
            }
            v.to_string()
        }
        Some(TokenFormat::Claude) => format!(
            "# stdio (Claude Desktop claude_desktop_config.json, Claude Code .mcp.json)\n{}\n\n\
             # Streamable HTTP (Claude Code .mcp.json; start `vaultgate serve` first)\n{}",
            mcp_servers_stdio(t, token),
            claude_http(t, token)
        ),
        Some(TokenFormat::Cursor) => format!(
            "# stdio (.cursor/mcp.json)\n{}\n\n# Streamable HTTP (.cursor/mcp.json; start `vaultgate serve` first)\n{}",
            mcp_servers_stdio(t, token),
            cursor_http(t, token)
        ),
        Some(TokenFormat::Vscode) => format!(
            "# stdio (.vscode/mcp.json, or mcp.json of your VS Code profile)\n{}\n\n\
             # Streamable HTTP (.vscode/mcp.json; start `vaultgate serve` first)\n{}",
            vscode_stdio(t, token),
            vscode_http(t, token)
        ),
        Some(TokenFormat::Codex) => format!(
            "# stdio (~/.codex/config.toml)\n{}\n\n# Streamable HTTP (instead of the above; start `vaultgate serve` first)\n{}",
            codex_stdio(t, token),
            codex_http(t, token)
        ),
        None => format!(
            "issued credential {} ({}, tier {})\n\ntoken (shown once, keep it secret):\n{}\n\n\
             HTTP endpoint (`vaultgate serve`; the demo already serves it): {}  with header  Authorization: Bearer <token>\n\n\
             Claude Desktop / Claude Code / Cursor, stdio (mcpServers JSON):\n{}\n\n\
             Claude Code, HTTP (.mcp.json):\n{}\n\n\
             Cursor, HTTP (.cursor/mcp.json):\n{}\n\n\
             VS Code, stdio (.vscode/mcp.json):\n{}\n\nVS Code, HTTP:\n{}\n\n\
             Codex (~/.codex/config.toml), stdio:\n{}\n\nCodex, HTTP:\n{}\n\n\
             MCP Inspector:\n{}",
            c.id.as_str(),
            c.name,
            c.tier,
            token.expose(),
            t.url(),
            mcp_servers_stdio(t, token),
            claude_http(t, token),
            cursor_http(t, token),
            vscode_stdio(t, token),
            vscode_http(t, token),
            codex_stdio(t, token),
            codex_http(t, token),
            inspector(t, token)
        ),
    }
}
