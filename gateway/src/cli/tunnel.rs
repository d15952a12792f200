//! `vaultgate tunnel …`: the ChatGPT tunnel's setup and status.

use super::*;

/// A credential name: shown to the operator in lists and prompts, so no control characters.
pub(crate) fn parse_tunnel_id(s: &str) -> Result<String, String> {
    if crate::tunnel::valid_tunnel_id(s) {
        Ok(s.to_owned())
    } else {
        Err("expected `tunnel_` and 32 lowercase hex digits, as the OpenAI platform shows it".into())
    }
}

pub(crate) fn tunnel_cmd(
    home: &Home,
    cmd: TunnelCmd,
    user: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), GatewayError> {
    match cmd {
        TunnelCmd::Setup {
            tunnel_id,
            api_key_file,
            tier,
            vaults,
            approve_in_client,
            yes,
        } => {
            if tier == Tier::Full {
                confirm_full(yes, "ChatGPT's tunnel credential")?;
            }
            let done = crate::tunnel::setup(
                home,
                &Operator::cli(user),
                &tunnel_id,
                &api_key_file,
                engine::tunnel::TunnelGrant {
                    tier,
                    vaults,
                    approve_in_client,
                },
                env,
            )?;
            out(&format!(
                "tunnel {tunnel_id} is set up: the API key is in {} (mode 0600; you may delete {} now)",
                home.tunnel_key_path().display(),
                api_key_file.display()
            ));
            out(&format!(
                "ChatGPT connects as credential {} ({}, tier {}{})",
                done.credential.id.as_str(),
                done.credential.name,
                done.credential.tier,
                if done.credential.approve_in_client {
                    ", approves on ChatGPT's card one tier up"
                } else {
                    ""
                }
            ));
            match &done.command {
                Some(c) => out(&format!("tunnel-client: {}", c.display())),
                None => out(&format!(
                    "tunnel-client was not found on PATH; {}",
                    crate::tunnel::INSTALL
                )),
            }
            out(&format!(
                "next: vaultgate --home {} serve --tunnel, then add the connector in ChatGPT (Connection: Tunnel, No authentication)",
                home.dir.display()
            ));
            out(
                "a tunnel already running keeps the old, now revoked, credential: restart `serve --tunnel` (or Stop and Start on the review page)",
            );
            Ok(())
        }
        TunnelCmd::Status { json } => {
            if !home.exists() {
                return Err(GatewayError::NoHome(home.dir.clone()));
            }
            let config = home.load_config()?;
            let s = crate::tunnel::status(home, &config, env);
            if json {
                out_json_text(&serde_json::to_string(&s).map_err(|e| GatewayError::Internal(e.to_string()))?);
                return Ok(());
            }
            out(&format!("phase: {}", s.phase.as_str()));
            if !s.set_up {
                out("not set up: run `vaultgate tunnel setup --tunnel-id ID --api-key-file F`");
            }
            if let Some(pid) = s.pid {
                out(&format!("pid: {pid}"));
            }
            if let Some(c) = &s.command {
                out(&format!("tunnel-client: {}", c.display()));
            }
            if let Some(i) = &s.install {
                out(i);
            }
            if let Some(h) = &s.health {
                let poll = h.pointer("/control_plane_poll/ok") == Some(&serde_json::Value::Bool(true));
                out(&format!(
                    "last health check: {} (control-plane poll {})",
                    h.get("result").and_then(|r| r.as_str()).unwrap_or("unknown"),
                    if poll { "ok" } else { "not seen yet" }
                ));
            }
            if let Some(e) = &s.last_error {
                out(&format!("last error: {e}"));
            }
            Ok(())
        }
    }
}
