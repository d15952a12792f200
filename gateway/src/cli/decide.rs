//! `vaultgate inbox`, `apply`, `history` and `audit`: the operator reads and decides as the engine's `Decisions`.

use super::*;

pub(crate) fn audit_cmd(home: &Home, cmd: AuditCmd, user: &str) -> Result<(), GatewayError> {
    let path = home.audit_path();
    if !home.exists() {
        return Err(GatewayError::NoHome(home.dir.clone()));
    }
    if let Some(team) = home.load_config()?.team {
        return team_audit_cmd(home, &team, cmd);
    }
    match cmd {
        AuditCmd::Verify { file: Some(file) } => verify_export(&file),
        AuditCmd::Export { since, out: None } => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            match engine::audit_log::export(home, since, &mut w) {
                // The reader went away (`| head`): it has what it wanted.
                Err(GatewayError::Audit(engine::audit_log::AuditError::Io(e)))
                    if e.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    Ok(())
                }
                r => r.map(drop),
            }
        }
        AuditCmd::Export {
            since,
            out: Some(file),
        } => export_to_file(home, since, &file),
        AuditCmd::Verify { file: None } => match engine::audit_log::chain_status(home)? {
            engine::audit_log::ChainStatus::Holds { records } => {
                out(&format!(
                    "audit chain ok: {records} records in {}",
                    path.display()
                ));
                Ok(())
            }
            engine::audit_log::ChainStatus::Broken(problem) => Err(GatewayError::AuditBroken(problem)),
        },
        AuditCmd::Repair => {
            let msg = match engine::audit_log::repair_torn_tail(&path)? {
                engine::audit_log::Repair::Clean => "audit log ends cleanly; nothing to repair".to_owned(),
                engine::audit_log::Repair::Completed { seq } => {
                    format!("completed the last record (seq {seq})")
                }
                engine::audit_log::Repair::MovedAside {
                    offset,
                    len,
                    saved_to,
                } => format!(
                    "moved a torn fragment of {len} bytes at offset {offset} to {}",
                    saved_to.display()
                ),
            };
            out(&msg);
            Ok(())
        }
        AuditCmd::Restart { yes: false } => {
            // A usage error (exit 2), like a missing argument: nothing was looked at or changed.
            clap::Error::raw(
                clap::error::ErrorKind::MissingRequiredArgument,
                "`vaultgate audit restart` opens a new audit chain when audit.jsonl is missing or \
                 was replaced; the records it lost cannot be verified any more. Restore the file \
                 from a backup if you can; otherwise run `vaultgate audit restart --yes`.\n",
            )
            .exit()
        }
        AuditCmd::Restart { yes: true } => {
            let r = engine::audit_log::restart(home, user)?;
            if let Some(old) = &r.moved_aside {
                out(&format!("kept the replaced log as {}", old.display()));
            }
            out(&format!(
                "opened a new audit chain in {} (its first record names the previous head: {})",
                path.display(),
                r.record.target.as_deref().unwrap_or("")
            ));
            Ok(())
        }
        AuditCmd::Tail { n, json } => print_records(&engine::audit_log::tail(&path, n)?, json),
    }
}

/// `audit export --out FILE`: written beside FILE, synced, then linked in only if FILE does not
/// exist yet; nothing is left behind on a failure.
fn export_to_file(home: &Home, since: u64, file: &std::path::Path) -> Result<(), GatewayError> {
    let e = write_new_file(file, |w| engine::audit_log::export(home, since, w))?;
    let span = match (e.first_seq, e.last_seq) {
        (Some(a), Some(b)) => format!(" (seq {a} to {b})"),
        _ => String::new(),
    };
    out(&format!(
        "exported {} records{span} to {}; check it with `vaultgate audit verify --file {}`",
        e.records,
        file.display(),
        file.display()
    ));
    Ok(())
}

/// Writes `file`, which must not exist, with what `fill` writes: beside it first, synced, then
/// linked in only if it still does not exist; nothing is left behind when `fill` fails.
pub(crate) fn write_new_file<T>(
    file: &std::path::Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> Result<T, GatewayError>,
) -> Result<T, GatewayError> {
    let exists = |f: &std::path::Path| {
        GatewayError::InvalidArgument(format!(
            "{} already exists: an export never replaces a file; choose another path or remove it",
            f.display()
        ))
    };
    if file.symlink_metadata().is_ok() {
        return Err(exists(file));
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    // Private like the log it copies (0600).
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut w = std::io::BufWriter::new(tmp.as_file());
    let filled = fill(&mut w)?;
    w.flush()?;
    drop(w);
    tmp.as_file().sync_all()?;
    tmp.persist_noclobber(file).map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            exists(file)
        } else {
            GatewayError::Io(e.error)
        }
    })?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(filled)
}

/// `audit verify --file FILE`: an export checked on its own.
pub(crate) fn verify_export(file: &std::path::Path) -> Result<(), GatewayError> {
    if let Err(e) = std::fs::metadata(file) {
        return Err(GatewayError::InvalidArgument(format!(
            "cannot read {}: {e}",
            file.display()
        )));
    }
    let r = engine::audit_log::verify_file(file)?;
    if let Some(b) = r.broken {
        return Err(GatewayError::AuditBroken(format!(
            "export broken at seq {} (line {}): {}",
            b.seq, b.line, b.reason
        )));
    }
    match (r.first, r.last) {
        (Some((first, prev)), Some((last, hash))) => {
            let links = if prev == engine::audit_log::GENESIS {
                "the chain's start".to_owned()
            } else {
                format!(
                    "{prev}, the hash of seq {} (not in this file)",
                    first.saturating_sub(1)
                )
            };
            out(&format!(
                "export ok: {} records, seq {first} to {last}, in {}\n  the first links to {links}\n  the last's hash: {hash}",
                r.records,
                file.display()
            ));
        }
        _ => out(&format!("export ok: no records in {}", file.display())),
    }
    Ok(())
}

/// `audit tail`: one JSON array, or one record per line.
pub(crate) fn print_records<T: serde::Serialize>(records: &[T], json: bool) -> Result<(), GatewayError> {
    if json {
        return json_out(&records);
    }
    for r in records {
        json_out(r)?;
    }
    Ok(())
}

pub(crate) fn json_out<T: serde::Serialize>(v: &T) -> Result<(), GatewayError> {
    out_json_text(&serde_json::to_string(v).map_err(|e| GatewayError::Internal(e.to_string()))?);
    Ok(())
}

/// A field shown on one line (a reason, a name): its newlines and tabs become visible `\n` and
/// `\t`, so it cannot add lines or columns that look like the CLI's own.
pub(crate) fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\n', '\t']) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(s.replace('\n', "\\n").replace('\t', "\\t"))
}

/// A proposal as a reviewer reads it: who, why, and the diff (all escaped by `out`).
pub(crate) fn show_proposal(p: &engine::api::GetProposalOut, shown: &engine::proposing::Shown) {
    let it = &p.item;
    let from = it.from.as_deref().map(|f| format!("{f} -> ")).unwrap_or_default();
    out(&format!(
        "{} {} {from}{}  [{}]\n  id: {}\n  by: {} ({}) at {}\n  reason: {}\n  proposalHash: {}",
        it.slug,
        it.kind,
        it.target,
        it.status,
        it.id,
        one_line(&it.created_by.name),
        it.created_by.credential_id,
        it.created_at,
        one_line(&it.reason),
        it.proposal_hash
    ));
    if !p.diff.is_empty() {
        // The size a reviewer decides on, and the diff a line per terminal line: a lone CR ends
        // a line here as it does in the count (SECURITY(T-CR)).
        let (added, removed) = engine::diff::counts(&engine::diff::hunks(&p.diff));
        out(&format!("  changes: +{added} \u{2212}{removed} lines"));
        for f in &shown.fields {
            out(&format!("  field: {f}"));
        }
        let hunks = engine::diff::hunks(&p.diff);
        for l in engine::diff::link_changes(&hunks) {
            out(&format!("  link: {l}"));
        }
        // The words that changed inside a changed line are marked `[-old-]{+new+}`.
        out(&engine::diff::for_terminal(&p.diff).join("\n"));
    }
    // A move: every note whose links it rewrites, with each link.
    for n in &shown.rewrites {
        out(&format!("  rewrites {}:", n.path));
        for l in &n.links {
            out(&format!("    {l}"));
        }
    }
}

pub(crate) fn inbox_cmd(home: &Home, cmd: InboxCmd, user: &str) -> Result<(), GatewayError> {
    let core = open_core(home)?;
    match cmd {
        InboxCmd::List { vault, status, json } => {
            let v = core.vault_for_cli(vault.as_deref())?;
            let status = status.as_str();
            let list = core.proposals().list_proposals(&v, Some(status), Some(500))?;
            if json {
                return json_out(&list.proposals);
            }
            if list.proposals.is_empty() {
                out(&format!("no {status} proposals in vault '{}'", v.id));
            }
            for p in &list.proposals {
                let from = p.from.as_deref().map(|f| format!("{f} -> ")).unwrap_or_default();
                out(&format!(
                    "{}\t{}\t{from}{}\t{}\t{}",
                    p.slug,
                    p.kind,
                    p.target,
                    one_line(&p.created_by.name),
                    one_line(&p.reason)
                ));
            }
            Ok(())
        }
        InboxCmd::Show { id, vault, json } => {
            let v = core.vault_for_cli(vault.as_deref())?;
            let p = core
                .proposals()
                .get_proposal(&v, &engine::ids::ProposalId::from_wire(id.clone()))?;
            if json {
                return json_out(&p);
            }
            show_proposal(&p, &core.proposals().shown(&v, &p)?);
            Ok(())
        }
        InboxCmd::Reject { id, reason, vault } => {
            let v = core.vault_for_cli(vault.as_deref())?;
            let r = core
                .decisions()
                .operator_reject(&Operator::cli(user), &v, &id, &reason)?;
            if r.archived_to.is_empty() {
                out(&format!("rejected {id}"));
            } else {
                out(&format!("rejected {id}; archived to {}", r.archived_to));
            }
            Ok(())
        }
    }
}

pub(crate) fn apply_cmd(
    home: &Home,
    vault: Option<&str>,
    only: Option<&str>,
    yes: bool,
    user: &str,
) -> Result<(), GatewayError> {
    let interactive = std::io::stdin().is_terminal();
    if !yes && !interactive {
        return Err(GatewayError::InvalidArgument(
            "apply shows each diff and asks y/N on a terminal; without one, pass --yes".into(),
        ));
    }
    let core = open_core(home)?;
    let v = core.vault_for_cli(vault)?;
    // Every pending proposal as it stands now (not one page of them); ones decided meanwhile by
    // another process are skipped below.
    let ids: Vec<String> = match only {
        Some(id) => vec![id.to_owned()],
        None => core.proposals().pending_proposal_ids(&v)?,
    };
    if ids.is_empty() {
        out(&format!("no pending proposals in vault '{}'", v.id));
        return Ok(());
    }
    let (mut applied, mut failed) = (0usize, 0usize);
    let mut first_code = None;
    for id in ids {
        // One unreadable proposal does not stop the batch.
        let p = match core
            .proposals()
            .get_proposal(&v, &engine::ids::ProposalId::from_wire(id.clone()))
        {
            Ok(p) => p,
            Err(e) => {
                failed += 1;
                first_code.get_or_insert(e.code());
                err(&format!("error[{}]: {id}: {e}", e.code()));
                continue;
            }
        };
        if only.is_none() && p.item.status != "pending" {
            out(&format!("skipped {}: {} meanwhile", p.item.slug, p.item.status));
            continue;
        }
        // The reviewer sees what is applied: the whole proposal when asked or named, its reason
        // otherwise.
        if !yes || only.is_some() {
            show_proposal(&p, &core.proposals().shown(&v, &p)?);
        }
        if !yes {
            err("apply this proposal? [y/N] ");
            let mut line = String::new();
            if std::io::stdin().read_line(&mut line)? == 0 {
                out("no answer (end of input); nothing more is applied");
                break;
            }
            if !matches!(line.trim(), "y" | "Y" | "yes") {
                out(&format!("skipped {}", p.item.slug));
                continue;
            }
        }
        let r = core
            .decisions()
            .operator_apply(&Operator::cli(user), &v, &p.item.id, &p.item.proposal_hash);
        match r {
            Ok(a) => {
                applied += 1;
                let reason = if yes && only.is_none() {
                    format!("\n  reason: {}", one_line(&p.item.reason))
                } else {
                    String::new()
                };
                // Where git is on, whether the commit was made or waits (`vault git ID status`).
                let git = match (a.git.as_str(), &a.commit) {
                    (_, Some(commit)) => format!(", pushed {commit}"),
                    ("off", None) => String::new(),
                    (state, None) => format!(", git {state}"),
                };
                out(&format!(
                    "applied {} -> {} (history {}, audit seq {}{git}){reason}",
                    p.item.slug, a.target, a.history_entry_id, a.audit_seq
                ))
            }
            Err(e) => {
                failed += 1;
                first_code.get_or_insert(e.code());
                err(&format!("error[{}]: {}: {e}", e.code(), p.item.slug));
            }
        }
    }
    if only.is_none() {
        out(&format!(
            "{applied} applied, {failed} not applied in vault '{}'",
            v.id
        ));
    }
    if failed > 0 {
        return Err(engine::error::Refused::NotApplied {
            failed,
            first: first_code,
        }
        .into());
    }
    Ok(())
}

pub(crate) fn history_cmd(home: &Home, cmd: HistoryCmd, user: &str) -> Result<(), GatewayError> {
    let (vault, t, yes) = match cmd {
        HistoryCmd::Status { vault, json } => {
            let core = open_core(home)?;
            let v = core.vault_for_cli(vault.as_deref())?;
            let s = core.history().history_status(&v)?;
            if json {
                return json_out(&s);
            }
            out(&engine::history::describe_status(&v.id, &s));
            return Ok(());
        }
        HistoryCmd::Undo { vault, yes } => (vault, engine::Transition::Undo, yes),
        HistoryCmd::Redo { vault, yes } => (vault, engine::Transition::Redo, yes),
    };
    if !yes && !std::io::stdin().is_terminal() {
        return Err(GatewayError::InvalidArgument(format!(
            "history {} shows the change and asks y/N on a terminal; without one, pass --yes",
            t.as_str()
        )));
    }
    let core = open_core(home)?;
    let v = core.vault_for_cli(vault.as_deref())?;
    // Settles an interrupted write first, so the entry shown is the one that counts.
    let top = match core.history().history_top(&v, t) {
        Ok(Some(entry)) => entry,
        // A refusal before anything ran is recorded as the command's one call.
        refused => {
            let e = match refused {
                Err(e) => e,
                Ok(_) => engine::error::Refused::HistoryNotTop {
                    message: format!("nothing to {} in vault '{}'", t.as_str(), v.id),
                }
                .into(),
            };
            return Err(core
                .decisions()
                .operator_history_refused(&Operator::cli(user), &v, t, e));
        }
    };
    let entry = top;
    out(&entry.describe(t));
    if !yes {
        err(&format!("{} this change? [y/N] ", t.as_str()));
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            out("nothing changed");
            return Ok(());
        }
    }
    let s = core
        .decisions()
        .operator_history(&Operator::cli(user), &v, t, &entry.id)?;
    out(&format!("{} {}: done", t.as_str(), entry.id));
    out(&engine::history::describe_status(&v.id, &s));
    Ok(())
}
