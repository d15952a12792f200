//! `vaultgate vault …` and `vaultgate index`: the vault set, PDF text and git switches, the search index.

use super::*;

pub(crate) fn vault_cmd(home: &Home, cmd: VaultCmd, user: &str) -> Result<(), GatewayError> {
    match cmd {
        VaultCmd::Add(a) => {
            let Some(path) = a.path else {
                return team_vault_add(home, a, user);
            };
            // `--git` outside a work tree is refused before anything is registered.
            if a.git {
                engine::changelog::check_work_tree(&path)?;
            }
            let vc = configuration_core(home)?.settings().vault_add(
                &Operator::cli(user),
                engine::vaults::VaultAdd {
                    path,
                    id: a.id,
                    name: a.name,
                    notes: a.notes,
                    standards: a.standards,
                    inbox: a.inbox,
                    default: a.default,
                },
            )?;
            out(&format!(
                "added vault '{}' ({}) at {}",
                vc.id,
                vc.name,
                vc.path.display()
            ));
            if a.pdf_text {
                let core = open_core(home)?;
                let on = core
                    .settings()
                    .vault_pdf_text(&Operator::cli(user), &vc.id, true)?;
                out(&describe_pdf_text(&vc.id, on));
            }
            if a.git {
                let core = open_core(home)?;
                let v = core.vault_for_cli(Some(&vc.id))?;
                let s = core.settings().vault_git(&Operator::cli(user), &v, true, false)?;
                out(&engine::changelog::describe_git(&s));
            }
            out("next: vaultgate token issue --name my-client");
            Ok(())
        }
        VaultCmd::PdfText { id, action } => {
            let core = open_core(home)?;
            let on = core
                .settings()
                .vault_pdf_text(&Operator::cli(user), &id, action == OnOff::On)?;
            out(&describe_pdf_text(&id, on));
            Ok(())
        }
        VaultCmd::Git {
            id,
            action,
            drop_queue,
            json,
        } => {
            if drop_queue && action != GitAction::Off {
                return Err(GatewayError::InvalidArgument(
                    "--drop-queue goes with `off`".into(),
                ));
            }
            let core = open_core(home)?;
            let v = core.vault_for_cli(Some(&id))?;
            let s = match action {
                GitAction::Status => core.history().git_status(&v)?,
                GitAction::On => core.settings().vault_git(&Operator::cli(user), &v, true, false)?,
                GitAction::Off => core
                    .settings()
                    .vault_git(&Operator::cli(user), &v, false, drop_queue)?,
            };
            if json {
                return json_out(&s);
            }
            out(&engine::changelog::describe_git(&s));
            Ok(())
        }
        VaultCmd::List { json } => {
            // A team's vaults come from its database, each clone fetched from its remote here.
            let config = match home.load_config()?.team {
                Some(_) => {
                    let core = open_core(home)?;
                    core.settings().sync_team_vaults();
                    core.config()
                }
                None => Arc::new(home.load_config()?),
            };
            if json {
                let list: Vec<_> = config
                    .vaults
                    .iter()
                    .map(|v| {
                        serde_json::json!({
                            "id": v.id, "name": v.name, "path": v.path,
                            "isDefault": config.default_vault.as_deref() == Some(v.id.as_str()),
                            "notes": v.notes, "standards": v.standards, "inbox": v.inbox,
                            "pdfText": v.pdf_text,
                        })
                    })
                    .collect();
                out_json_text(&serde_json::Value::Array(list).to_string());
            } else if config.vaults.is_empty() {
                out("no vaults; add one with: vaultgate vault add PATH");
            } else {
                for v in &config.vaults {
                    let d = if config.default_vault.as_deref() == Some(v.id.as_str()) {
                        " (default)"
                    } else {
                        ""
                    };
                    out(&format!("{}{d}\t{}\t{}", v.id, v.name, v.path.display()));
                }
            }
            Ok(())
        }
        VaultCmd::Remove { id } if home.load_config()?.team.is_some() => {
            open_core(home)?
                .settings()
                .team_vault_remove(&Operator::cli(user), &id)?;
            out(&format!(
                "removed team vault '{id}' for every gateway (its remote was not touched)"
            ));
            Ok(())
        }
        VaultCmd::Resync { id, yes } => {
            if !yes {
                return Err(GatewayError::InvalidArgument(format!(
                    "`vault resync {id}` accepts the remote's rewritten history as the team's: \
                     changes applied before it may be gone from it. Pass --yes once a person \
                     decided that is right"
                )));
            }
            let head = open_core(home)?
                .settings()
                .team_vault_resync(&Operator::cli(user), &id)?;
            out(&format!(
                "team vault '{id}' follows its remote again from {head}; every gateway clones it again"
            ));
            Ok(())
        }
        VaultCmd::Remove { id } => {
            configuration_core(home)?
                .settings()
                .vault_remove(&Operator::cli(user), &id)?;
            out(&format!("removed vault '{id}' (its files were not touched)"));
            Ok(())
        }
        VaultCmd::SetDefault { id } => {
            // A team's default vault is a team setting: the team's core reaches its database.
            let core = match home.load_config()?.team {
                Some(_) => open_core(home)?,
                None => configuration_core(home)?,
            };
            core.settings().vault_set_default(&Operator::cli(user), &id)?;
            out(&format!("default vault is now '{id}'"));
            Ok(())
        }
    }
}

/// `vault add --remote URL --id ID` on a team gateway.
fn team_vault_add(home: &Home, a: VaultAddArgs, user: &str) -> Result<(), GatewayError> {
    let (Some(remote), Some(id)) = (a.remote, a.id) else {
        return Err(GatewayError::InvalidArgument(
            "a team vault needs --remote URL and --id ID".into(),
        ));
    };
    if a.git || a.pdf_text || a.inbox.is_some() || a.default {
        return Err(GatewayError::InvalidArgument(
            "--git, --pdf-text, --inbox and --default are not for team vaults (every change of \
             a team vault is a commit on its remote)"
                .into(),
        ));
    }
    let core = open_core(home)?;
    let synced = core.settings().team_vault_add(
        &Operator::cli(user),
        engine::remote::TeamVault {
            name: a.name.unwrap_or_else(|| id.clone()),
            id: id.clone(),
            remote,
            branch: a.branch,
            notes: if a.notes.is_empty() {
                vec![".".into()]
            } else {
                a.notes
            },
            standards: a.standards,
        },
    )?;
    match synced {
        Ok(engine::remote::Synced::Cloned(head) | engine::remote::Synced::At(head)) => {
            out(&format!(
                "added team vault '{id}' for every gateway; cloned here at {head}
next: vaultgate token issue --name NAME"
            ));
            Ok(())
        }
        Ok(engine::remote::Synced::Diverged { .. }) => {
            Err(GatewayError::Internal("a fresh clone cannot diverge".into()))
        }
        Err(e) => Err(GatewayError::Config(format!(
            "added team vault '{id}' for every gateway, but it could not be cloned here: {}",
            e.client_message()
        ))),
    }
}

pub(crate) fn describe_pdf_text(id: &str, on: bool) -> String {
    if on {
        format!("PDF text is on for vault '{id}': read_attachment_text sends PDF text to clients")
    } else {
        format!("PDF text is off for vault '{id}'")
    }
}

/// `vaultgate index`: one pass in this process; servers that have the vault open pick it up.
pub(crate) fn index_cmd(home: &Home, vault: Option<&str>, rebuild: bool) -> Result<(), GatewayError> {
    let core = open_core(home)?;
    let v = core.vault_for_cli(vault)?;
    // Progress only for a person watching; scripts get the summary alone.
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} indexing {pos}/{len} notes [{bar:40}] {eta} left",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let report = core.reads().refresh_index(&v, rebuild, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    let r = report?;
    let secs = r.elapsed.as_secs_f64();
    let read = r.added + r.updated;
    out(&format!(
        "{} vault '{}': {} notes in the index ({} added, {} updated, {} removed, {} unchanged) in {:.2}s{}\nindex: {}",
        if rebuild { "rebuilt" } else { "updated" },
        v.id,
        r.notes,
        r.added,
        r.updated,
        r.removed,
        r.unchanged,
        secs,
        if read > 0 && secs > 0.0 {
            format!(", {:.0} notes/s", read as f64 / secs)
        } else {
            String::new()
        },
        v.index_file().display()
    ));
    Ok(())
}
