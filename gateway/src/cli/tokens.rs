//! `vaultgate token …`: issuing, listing, revoking and re-tiering credentials.

use super::*;

/// The longest `--expires`: ten years. Longer is what "never" (no `--expires`) is for.
pub(crate) const MAX_EXPIRES_SECS: i64 = 3650 * 86_400;

/// Parses `90s`, `15m`, `12h`, `30d` into seconds (a clap value parser: a bad value is a usage
/// error, exit 2).
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}': use a positive number with s, m, h or d, like 30d (at most 3650d)");
    let Some(unit) = s.chars().last() else {
        return Err(bad());
    };
    let num = &s[..s.len() - unit.len_utf8()];
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mul = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let secs = num.parse::<i64>().ok().and_then(|n| n.checked_mul(mul));
    match secs {
        Some(n) if n > 0 && n <= MAX_EXPIRES_SECS => Ok(n),
        Some(0) => Err(bad()),
        _ => Err(format!(
            "'{s}' is too far ahead: at most 3650d (ten years); omit --expires for a credential that never expires"
        )),
    }
}

pub(crate) fn parse_name(s: &str) -> Result<String, String> {
    engine::credentials::check_credential_name(s)?;
    Ok(s.to_owned())
}

/// `full` needs `--yes` or an interactive y/N (docs/contract.md#tiers-and-capabilities, docs/contract.md#the-command-line).
pub(crate) fn confirm_full(yes: bool, what: &str) -> Result<(), GatewayError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(GatewayError::InvalidArgument(format!(
            "{what} grants the `full` tier (apply anyone's proposals, permanent deletion); pass --yes to confirm"
        )));
    }
    err(&format!(
        "{what} grants the `full` tier: it may apply anyone's proposals. Continue? [y/N] "
    ));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    if matches!(line.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(GatewayError::InvalidArgument("not confirmed".into()))
    }
}

/// docs/contract.md#the-review-page-and-in-client-approval: the opt-in is a tier raise, and `token issue` says so.
pub(crate) fn approve_in_client_warning(tier: Tier) -> String {
    match tier {
        Tier::Propose | Tier::Auto => format!(
            "warning: in-client approval is on: whoever holds this token may apply {} once its client \
             says a person approved (the client is trusted to ask honestly), so it acts one tier above \
             '{tier}'. Revoke it with `vaultgate token revoke` if that is not what you want.",
            if tier == Tier::Propose {
                "its own proposals"
            } else {
                "anyone's proposals"
            }
        ),
        Tier::Read | Tier::Full => {
            format!("note: in-client approval has no effect on the '{tier}' tier")
        }
    }
}

pub(crate) fn token_cmd(home: &Home, cmd: TokenCmd, user: &str) -> Result<(), GatewayError> {
    match cmd {
        TokenCmd::Issue {
            name,
            tier,
            vaults,
            expires,
            format,
            yes,
            approve_in_client,
        } => {
            if tier == Tier::Full {
                confirm_full(yes, &format!("credential '{name}'"))?;
            }
            let core = open_core(home)?;
            let (cred, token) = core.credentials().issue_credential(
                &Operator::cli(user),
                &name,
                tier,
                vaults,
                expires,
                approve_in_client,
            )?;
            if approve_in_client {
                // stderr: stdout may be a bare token or one JSON object.
                eprintln!("{}", approve_in_client_warning(tier));
            }
            let exe = std::env::current_exe()?;
            let target = crate::clientconf::Target {
                exe: &exe,
                home: &home.dir,
                port: core.config().server.port,
            };
            let text = crate::clientconf::render(format, &target, &cred, &token);
            if matches!(format, Some(TokenFormat::Json)) {
                out_json_text(&text);
            } else {
                out(&text);
            }
            Ok(())
        }
        TokenCmd::List { json } => {
            if !home.exists() {
                return Err(GatewayError::NoHome(home.dir.clone()));
            }
            // A team's credentials are in its database.
            let creds = if home.load_config()?.team.is_some() {
                open_core(home)?.credentials().all()?
            } else {
                engine::credentials::list_credentials(home)?
            };
            if json {
                let v: Vec<_> = creds.iter().map(crate::clientconf::credential_json).collect();
                out_json_text(&serde_json::Value::Array(v).to_string());
            } else if creds.is_empty() {
                out("no credentials; issue one with: vaultgate token issue --name NAME");
            } else {
                for c in &creds {
                    let status = if c.is_revoked() {
                        "revoked"
                    } else if c.is_expired(engine::core::now_unix()) {
                        "expired"
                    } else {
                        "active"
                    };
                    let scope = if c.vaults.is_empty() {
                        "*".to_owned()
                    } else {
                        c.vaults.join(",")
                    };
                    let approval = if c.approve_in_client {
                        "\tapprove-in-client"
                    } else {
                        ""
                    };
                    out(&format!(
                        "{}\t{}\t{}\t{status}\tvaults={scope}{approval}",
                        c.id.as_str(),
                        one_line(&c.name),
                        c.tier
                    ));
                }
                // docs/contract.md#the-review-page-and-in-client-approval: the opt-in is a tier raise, and the list says so where it shows it.
                if creds.iter().any(|c| c.approve_in_client && !c.is_revoked()) {
                    eprintln!(
                        "note: approve-in-client credentials may apply one tier above their own once their \
                         client says a person approved; the client is trusted to ask honestly"
                    );
                }
            }
            Ok(())
        }
        TokenCmd::Revoke { id } => {
            let core = open_core(home)?;
            let c = core.credentials().revoke_credential(&Operator::cli(user), &id)?;
            out(&format!(
                "revoked {} ({}); running servers refuse it from the next call",
                c.id.as_str(),
                c.name
            ));
            Ok(())
        }
        TokenCmd::SetTier { id, tier, yes } => {
            if tier == Tier::Full {
                confirm_full(yes, &format!("setting '{id}' to full"))?;
            }
            let core = open_core(home)?;
            let c = core
                .credentials()
                .set_credential_tier(&Operator::cli(user), &id, tier)?;
            out(&format!(
                "{} ({}) is now tier {}; applies from the next call",
                c.id.as_str(),
                c.name,
                c.tier
            ));
            Ok(())
        }
    }
}
