//! Paste-ready client configurations printed by `token issue` and `demo`.

use std::path::Path;

use inbox::Credential;
use serde_json::json;

use crate::auth::Token;

pub fn credential_json(c: &Credential) -> serde_json::Value {
    json!({
        "id": c.id.as_str(),
        "name": c.name,
        "tier": c.tier.as_str(),
        "vaults": c.vaults,
        "createdAt": ts(Some(c.created_at)),
        "expiresAt": ts(c.expires_at),
        "revoked": c.is_revoked(),
    })
}

fn ts(t: Option<i64>) -> serde_json::Value {
    t.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
        .map(|t| serde_json::Value::String(crate::core::rfc3339(t)))
        .unwrap_or(serde_json::Value::Null)
}

fn stdio_entry(exe: &Path, home: &Path, token: &Token) -> serde_json::Value {
    json!({
        "command": exe.display().to_string(),
        "args": ["stdio", "--home", home.display().to_string()],
        "env": { "VAULTGATE_TOKEN": token.expose() },
    })
}

/// `mcpServers` JSON as Claude Desktop, Claude Code (`.mcp.json`) and Cursor (`.cursor/mcp.json`) read it.
pub fn mcp_servers_json(exe: &Path, home: &Path, token: &Token) -> String {
    let v = json!({ "mcpServers": { "vaultgate": stdio_entry(exe, home, token) } });
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// A `[mcp_servers.vaultgate]` table for Codex's `~/.codex/config.toml`.
pub fn codex_toml(exe: &Path, home: &Path, token: &Token) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "[mcp_servers.vaultgate]\ncommand = {}\nargs = [\"stdio\", \"--home\", {}]\nenv = {{ VAULTGATE_TOKEN = {} }}",
        q(&exe.display().to_string()),
        q(&home.display().to_string()),
        q(token.expose())
    )
}

pub fn render(
    format: Option<crate::cli::TokenFormat>,
    exe: &Path,
    home: &Path,
    c: &Credential,
    t: &Token,
) -> String {
    use crate::cli::TokenFormat as F;
    match format {
        Some(F::Token) => t.expose().to_owned(),
        Some(F::Json) => {
            let mut v = credential_json(c);
            if let Some(o) = v.as_object_mut() {
                o.remove("createdAt");
                o.remove("revoked");
                o.insert("token".into(), json!(t.expose()));
            }
            v.to_string()
        }
        Some(F::Claude) | Some(F::Cursor) => mcp_servers_json(exe, home, t),
        Some(F::Codex) => codex_toml(exe, home, t),
        None => format!(
            "issued credential {} ({}, tier {})\n\ntoken (shown once, keep it secret):\n{}\n\n\
             Claude Desktop / Claude Code / Cursor (mcpServers JSON):\n{}\n\n\
             Codex (~/.codex/config.toml):\n{}\n\n\
             MCP Inspector: npx @modelcontextprotocol/inspector -e VAULTGATE_TOKEN=<token> {} stdio --home {}",
            c.id.as_str(),
            c.name,
            c.tier,
            t.expose(),
            mcp_servers_json(exe, home, t),
            codex_toml(exe, home, t),
            exe.display(),
            home.display()
        ),
    }
}
