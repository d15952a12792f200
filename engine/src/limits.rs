//! Every input bounded before any work (docs/contract.md#limits-and-pagination): [`check_args`] over a call's raw JSON
//! arguments, run first in every MCP and CLI call, and the inbox quotas every `propose_*` checks
//! first ([`Proposals::check_quota`]).
//!
//! The numbers are `gateway.toml [limits]`; a refusal names the one it hit, so the caller knows
//! both the fact and the knob.

use std::collections::HashMap;
use std::fmt::Display;

use policy::FolderPath;
use serde_json::Value;

use crate::core::{Actor, VaultHandle};
use crate::error::{GatewayError, Quota, Refused};
use crate::proposing::InboxFiles;
use crate::proposing::Proposals;

/// The limits of one home: `gateway.toml [limits]` as loaded.
pub use crate::home::LimitsConfig as Limits;

fn over(what: &str, actual: impl Display, unit: &str, limit: u64, name: &str) -> GatewayError {
    GatewayError::InvalidArgument(format!(
        "{what} is {actual} {unit}; the limit is {limit} (limits.{name})"
    ))
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Refuses arguments over a limit with `INVALID_ARGUMENT` (`PATH_INVALID` for paths, docs/contract.md#paths)
/// naming the limit. It only measures: types and meaning are the tool's parser's to check, and
/// it reads each value at most once, stopping at the first limit passed.
pub fn check_args(tool: &str, args: &Value, limits: &Limits) -> Result<(), GatewayError> {
    // SECURITY(T-LIMIT1): bounded before vault resolution, before anything is read or written,
    // whatever the tier: no argument can make the call itself expensive.
    let Some(fields) = args.as_object() else {
        return Ok(());
    };
    let l = limits;
    for (key, value) in fields {
        let key = key.as_str();
        match key {
            "query" => check_query(tool, value, l)?,
            "tag" => each(key, value, l.max_tags, "max_tags", |what, v| {
                json_within(what, v, l.max_value_bytes, "max_value_bytes")
            })?,
            "path" | "from" | "to" | "dir" | "pathPrefix" => check_path(key, value, l)?,
            "paths" => each(key, value, l.max_delete_paths, "max_delete_paths", |what, v| {
                check_path(what, v, l)
            })?,
            "where" | "fields" | "pages" => {
                let (max, name) = match key {
                    "where" => (l.max_where, "max_where"),
                    "fields" => (l.max_fields, "max_fields"),
                    _ => (l.max_pages, "max_pages"),
                };
                each(key, value, max, name, |what, v| {
                    json_within(what, v, l.max_value_bytes, "max_value_bytes")
                })?
            }
            "set" => {
                if let Some(entries) = value.as_object() {
                    if len(entries.len()) > l.max_entries {
                        return Err(over(key, entries.len(), "entries", l.max_entries, "max_entries"));
                    }
                    for (k, v) in entries {
                        if len(k.len()) > l.max_value_bytes {
                            return Err(over(
                                "a `set` key",
                                k.len(),
                                "bytes",
                                l.max_value_bytes,
                                "max_value_bytes",
                            ));
                        }
                        json_within(&format!("set.{k}"), v, l.max_value_bytes, "max_value_bytes")?;
                    }
                }
            }
            "unset" | "addTags" | "removeTags" => {
                each(key, value, l.max_entries, "max_entries", |what, v| {
                    json_within(what, v, l.max_value_bytes, "max_value_bytes")
                })?
            }
            "reason" => {
                if let Some(s) = value.as_str() {
                    let chars = s.chars().count();
                    if len(chars) > l.max_reason_chars {
                        return Err(over(
                            key,
                            chars,
                            "characters",
                            l.max_reason_chars,
                            "max_reason_chars",
                        ));
                    }
                }
            }
            "idempotencyKey" => check_key(value, l)?,
            "id"
            | "challengeId"
            | "expectedHistoryEntryId"
            | "cursor"
            | "vault"
            | "proposalHash"
            | "baseHash"
            | "planHash"
            | "hash" => {
                json_within(key, value, l.max_id_bytes, "max_id_bytes")?;
            }
            "edits" => each(key, value, l.max_edits, "max_edits", |what, edit| {
                for part in ["oldText", "newText"] {
                    if let Some(s) = edit.get(part).and_then(Value::as_str)
                        && len(s.len()) > l.max_proposal_bytes
                    {
                        return Err(over(
                            &format!("{what}.{part}"),
                            s.len(),
                            "bytes",
                            l.max_proposal_bytes,
                            "max_proposal_bytes",
                        ));
                    }
                }
                Ok(())
            })?,
            "content" => {
                if let Some(s) = value.as_str() {
                    check_proposal_bytes(len(s.len()), l)?;
                }
            }
            // Anything else (`status`, `since`, `sort`, a field a later tool adds): a small value.
            _ => {
                if let Some(s) = value.as_str()
                    && len(s.len()) > l.max_value_bytes
                {
                    return Err(over(key, s.len(), "bytes", l.max_value_bytes, "max_value_bytes"));
                }
            }
        }
    }
    Ok(())
}

/// A proposal's new text fits `max_proposal_bytes`, the read limit: a larger note could never be
/// read back, so it could never be applied either.
pub fn check_proposal_bytes(bytes: u64, limits: &Limits) -> Result<(), GatewayError> {
    if bytes > limits.max_proposal_bytes {
        return Err(over(
            "the proposed content",
            bytes,
            "bytes",
            limits.max_proposal_bytes,
            "max_proposal_bytes",
        ));
    }
    Ok(())
}

/// An array of at most `max` items, each passing `item` (named `key[i]` in a refusal).
fn each(
    key: &str,
    value: &Value,
    max: u64,
    name: &str,
    item: impl Fn(&str, &Value) -> Result<(), GatewayError>,
) -> Result<(), GatewayError> {
    let Some(items) = value.as_array() else {
        return Ok(());
    };
    if len(items.len()) > max {
        return Err(over(key, items.len(), "items", max, name));
    }
    for (i, v) in items.iter().enumerate() {
        item(&format!("{key}[{i}]"), v)?;
    }
    Ok(())
}

/// The search terms as the search itself splits them ([`vault::search::terms_of`]): at most
/// `max_query_terms` distinct terms of at most `max_term_bytes` each. Reading stops at the first
/// term past a limit, so a huge query costs one pass over its text.
fn check_query(tool: &str, value: &Value, l: &Limits) -> Result<(), GatewayError> {
    let Some(query) = value.as_str() else {
        return Ok(());
    };
    let mut distinct: Vec<String> = Vec::new();
    for term in vault::search::terms_of(query) {
        if len(term.len()) > l.max_term_bytes {
            return Err(over(
                "a query term",
                term.len(),
                "bytes",
                l.max_term_bytes,
                "max_term_bytes",
            ));
        }
        if !distinct.contains(&term) {
            if len(distinct.len()) >= l.max_query_terms {
                return Err(GatewayError::InvalidArgument(format!(
                    "the {tool} query has more than {max} terms; the limit is {max} (limits.max_query_terms). Search for fewer, more specific terms",
                    max = l.max_query_terms
                )));
            }
            distinct.push(term);
        }
    }
    Ok(())
}

fn check_path(what: &str, value: &Value, l: &Limits) -> Result<(), GatewayError> {
    if let Some(s) = value.as_str()
        && len(s.len()) > l.max_path_bytes
    {
        // PATH_INVALID, as docs/contract.md#paths names an over-long path; the message names the limit.
        return Err(Refused::PathTooLong {
            what: what.to_owned(),
            len: len(s.len()),
            limit: l.max_path_bytes,
        }
        .into());
    }
    Ok(())
}

/// `idempotencyKey`: 1 to `max_key_bytes` bytes of `[A-Za-z0-9._:-]`.
fn check_key(value: &Value, l: &Limits) -> Result<(), GatewayError> {
    let Some(k) = value.as_str() else {
        return Ok(());
    };
    if len(k.len()) > l.max_key_bytes {
        return Err(over(
            "idempotencyKey",
            k.len(),
            "bytes",
            l.max_key_bytes,
            "max_key_bytes",
        ));
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-');
    if k.is_empty() || !k.bytes().all(allowed) {
        return Err(GatewayError::InvalidArgument(format!(
            "idempotencyKey must be 1 to {} bytes of [A-Za-z0-9._:-] (limits.max_key_bytes), e.g. a UUID",
            l.max_key_bytes
        )));
    }
    Ok(())
}

/// A value whose JSON text is at most `max` bytes (a string: its bytes).
fn json_within(what: &str, value: &Value, max: u64, name: &str) -> Result<(), GatewayError> {
    let size = match value {
        Value::String(s) => len(s.len()),
        other => json_size(other, max),
    };
    if size > max {
        return Err(over(what, size, "bytes", max, name));
    }
    Ok(())
}

/// An estimate of `value`'s JSON text length that stops counting once past `cap`.
fn json_size(value: &Value, cap: u64) -> u64 {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(s) => len(s.len()).saturating_add(2),
        Value::Array(items) => {
            let mut n = 2u64;
            for v in items {
                n = n.saturating_add(json_size(v, cap)).saturating_add(1);
                if n > cap {
                    break;
                }
            }
            n
        }
        Value::Object(m) => {
            let mut n = 2u64;
            for (k, v) in m {
                n = n
                    .saturating_add(len(k.len()))
                    .saturating_add(4)
                    .saturating_add(json_size(v, cap));
                if n > cap {
                    break;
                }
            }
            n
        }
    }
}

fn quota(which: Quota, message: String) -> GatewayError {
    Refused::QuotaExceeded { which, message }.into()
}

impl Proposals<'_> {
    /// The inbox quotas (docs/contract.md#limits-and-pagination), checked first by every `propose_*` with the bytes the new
    /// proposal brings: a credential holds at most `max_pending_per_credential` pending proposals
    /// and `max_pending_bytes_per_credential` bytes of them in a vault's inbox, and the inbox at
    /// most `max_inbox_bytes` pending. Over any: `QUOTA_EXCEEDED`, which only a decision cures.
    pub(crate) fn check_quota(
        &self,
        actor: &Actor,
        v: &VaultHandle,
        incoming: u64,
    ) -> Result<(), GatewayError> {
        // SECURITY(T-LIMIT2): a `propose` credential cannot fill the inbox, the disk or the
        // reviewer's queue: every pending proposal is counted against its maker and its vault.
        let l = &self.core.config().limits;
        check_proposal_bytes(incoming, l)?;
        let me = actor.principal_id();
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            // docs/contract.md#team-mode: counted across the team's gateways.
            let sizes = team.pending_sizes(&v.id)?;
            return check_pending(&me, v, &sizes, incoming, l);
        }
        let pending = self.core.state.pending_refs(&v.id)?;
        let (sizes, unlisted) = inbox_sizes(v);
        let sized: Vec<(String, u64)> = pending
            .iter()
            .filter_map(|p| {
                let kind = p.kind.parse::<proposals::Kind>().ok()?;
                // A file in a folder that could not be listed counts as large as a proposal may
                // be: an unreadable inbox narrows the quota, never lifts it.
                let bytes = InboxFiles::of(kind, &p.slug)
                    .files
                    .iter()
                    .filter_map(|(_, rel)| match sizes.get(rel.as_str()) {
                        Some(n) => Some(*n),
                        None => unlisted
                            .iter()
                            .any(|f| rel.starts_with(&format!("{f}/")))
                            .then_some(l.max_proposal_bytes),
                    })
                    .fold(0u64, u64::saturating_add);
                Some((p.created_by.clone(), bytes))
            })
            .collect();
        let mine = len(pending.iter().filter(|p| p.created_by == me).count());
        check_pending_counted(&me, v, mine, &sized, incoming, l)
    }
}

/// The inbox quotas, given every pending proposal's maker and size.
fn check_pending(
    me: &str,
    v: &VaultHandle,
    pending: &[(String, u64)],
    incoming: u64,
    l: &Limits,
) -> Result<(), GatewayError> {
    let mine = len(pending.iter().filter(|(by, _)| by == me).count());
    check_pending_counted(me, v, mine, pending, incoming, l)
}

/// [`check_pending`] with this credential's count given (a local inbox counts a proposal whose
/// kind it cannot read too).
fn check_pending_counted(
    me: &str,
    v: &VaultHandle,
    mine: u64,
    pending: &[(String, u64)],
    incoming: u64,
    l: &Limits,
) -> Result<(), GatewayError> {
    let next_step =
        "ask a reviewer to apply or reject pending proposals (list_proposals), then propose again";
    if mine >= l.max_pending_per_credential {
        return Err(quota(
            Quota::PendingPerCredential,
            format!(
                "this credential holds {mine} pending proposals in vault '{}'; the limit is {} (limits.max_pending_per_credential): {next_step}",
                v.id, l.max_pending_per_credential
            ),
        ));
    }
    let (mut mine_bytes, mut all_bytes) = (0u64, 0u64);
    for (by, bytes) in pending {
        all_bytes = all_bytes.saturating_add(*bytes);
        if by == me {
            mine_bytes = mine_bytes.saturating_add(*bytes);
        }
    }
    if mine_bytes.saturating_add(incoming) > l.max_pending_bytes_per_credential {
        return Err(quota(
            Quota::PendingBytesPerCredential,
            format!(
                "this credential's pending proposals in vault '{}' hold {mine_bytes} bytes and this one {incoming} more; the limit is {} (limits.max_pending_bytes_per_credential): {next_step}",
                v.id, l.max_pending_bytes_per_credential
            ),
        ));
    }
    if all_bytes.saturating_add(incoming) > l.max_inbox_bytes {
        return Err(quota(
            Quota::InboxBytes,
            format!(
                "the pending proposals of vault '{}' hold {all_bytes} bytes and this one {incoming} more; the limit is {} (limits.max_inbox_bytes): {next_step}",
                v.id, l.max_inbox_bytes
            ),
        ));
    }
    Ok(())
}

/// Sizes of the files in the inbox folders that hold proposal text (`new/`, `patch/`), by path
/// under the inbox (`new/<slug>.md`). One listing per folder, not one look-up per proposal. A
/// missing folder holds nothing; one that exists but cannot be listed (an inbox left out of
/// `readable`) is returned among the unlisted.
fn inbox_sizes(v: &VaultHandle) -> (HashMap<String, u64>, Vec<&'static str>) {
    let mut sizes = HashMap::new();
    let mut unlisted = Vec::new();
    let inbox = &v.layout().inbox;
    for folder in ["new", "patch"] {
        let Ok(dir) = inbox.join(folder) else { continue };
        let entries = match v.reader.fs().list_dir(&FolderPath::Dir(dir)) {
            Ok(entries) => entries,
            Err(vault::fs::FsError::NotFound) => continue,
            Err(e) => {
                tracing::debug!(vault = %v.id, folder, error = %e, "inbox folder not sized for quotas");
                unlisted.push(folder);
                continue;
            }
        };
        for e in entries {
            sizes.insert(format!("{folder}/{}", e.path.file_name()), e.size);
        }
    }
    (sizes, unlisted)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn code(tool: &str, args: Value, l: &Limits) -> Option<String> {
        check_args(tool, &args, l)
            .err()
            .map(|e| format!("{} {}", e.code().as_str(), e))
    }

    #[test]
    fn every_limit_refuses_one_past_it_and_names_itself() {
        let l = Limits::default();
        let words = |n: usize| (0..n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        let table: Vec<(&str, Value, &str)> = vec![
            ("search_knowledge", json!({"query": words(33)}), "max_query_terms"),
            (
                "search_note_content",
                json!({"query": "x".repeat(257)}),
                "max_term_bytes",
            ),
            (
                "search_note_content",
                json!({"query": format!("\"{} {}\"", "a".repeat(200), "b".repeat(60))}),
                "max_term_bytes",
            ),
            ("search_knowledge", json!({"tag": vec!["t"; 33]}), "max_tags"),
            (
                "search_knowledge",
                json!({"tag": ["x".repeat(4097)]}),
                "max_value_bytes",
            ),
            ("read_note", json!({"path": "a".repeat(1025)}), "max_path_bytes"),
            (
                "search_note_content",
                json!({"pathPrefix": "a".repeat(1025)}),
                "max_path_bytes",
            ),
            ("propose_move", json!({"to": "a".repeat(1025)}), "max_path_bytes"),
            (
                "delete_permanent",
                json!({"paths": vec!["a.md"; 1001]}),
                "max_delete_paths",
            ),
            (
                "delete_permanent",
                json!({"paths": ["a".repeat(1025)]}),
                "max_path_bytes",
            ),
            (
                "propose_frontmatter_update",
                json!({"addTags": vec!["t"; 201]}),
                "max_entries",
            ),
            (
                "propose_frontmatter_update",
                json!({"set": {"k": "v".repeat(4097)}}),
                "max_value_bytes",
            ),
            (
                "propose_frontmatter_update",
                json!({"set": {"k": ["v".repeat(4090), "w".repeat(10)]}}),
                "max_value_bytes",
            ),
            (
                "propose_new_note",
                json!({"reason": "é".repeat(4001)}),
                "max_reason_chars",
            ),
            (
                "apply_proposal",
                json!({"idempotencyKey": "k".repeat(201)}),
                "max_key_bytes",
            ),
            ("apply_proposal", json!({"idempotencyKey": ""}), "max_key_bytes"),
            (
                "apply_proposal",
                json!({"idempotencyKey": "a b"}),
                "max_key_bytes",
            ),
            (
                "apply_proposal",
                json!({"idempotencyKey": "ключ"}),
                "max_key_bytes",
            ),
            ("apply_proposal", json!({"id": "i".repeat(129)}), "max_id_bytes"),
            (
                "apply_proposal",
                json!({"proposalHash": "0".repeat(129)}),
                "max_id_bytes",
            ),
            ("list_notes", json!({"vault": "v".repeat(129)}), "max_id_bytes"),
            (
                "delete_permanent",
                json!({"challengeId": "c".repeat(129)}),
                "max_id_bytes",
            ),
            (
                "history_undo",
                json!({"expectedHistoryEntryId": "h".repeat(129)}),
                "max_id_bytes",
            ),
            (
                "get_note_history",
                json!({"cursor": "c".repeat(129)}),
                "max_id_bytes",
            ),
            (
                "propose_note_patch",
                json!({"edits": vec![json!({"oldText": "a", "newText": "b"}); 201]}),
                "max_edits",
            ),
            (
                "propose_note_patch",
                json!({"edits": [{"oldText": "a", "newText": "b".repeat(2 * 1024 * 1024 + 1)}]}),
                "max_proposal_bytes",
            ),
            (
                "propose_new_note",
                json!({"content": "c".repeat(2 * 1024 * 1024 + 1)}),
                "max_proposal_bytes",
            ),
            (
                "query_notes",
                json!({"where": vec![json!({"field": "a"}); 33]}),
                "max_where",
            ),
            ("query_notes", json!({"fields": vec!["f"; 65]}), "max_fields"),
            ("read_attachment_text", json!({"pages": vec![1; 51]}), "max_pages"),
            (
                "list_recent_notes",
                json!({"since": "s".repeat(4097)}),
                "max_value_bytes",
            ),
        ];
        for (tool, args, limit) in table {
            let shown = args.to_string();
            let got = code(tool, args, &l).unwrap_or_else(|| panic!("{tool} {:.80} was accepted", shown));
            assert!(got.contains(&format!("limits.{limit}")), "{tool}: {got}");
            let expected = if limit == "max_path_bytes" {
                "PATH_INVALID"
            } else {
                "INVALID_ARGUMENT"
            };
            assert!(got.starts_with(expected), "{tool}: {got}");
        }
    }

    #[test]
    fn values_at_the_limits_pass() {
        let l = Limits::default();
        let words = (0..32).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        // Repeats are one term, as the search counts them.
        let repeats = vec!["same"; 1000].join(" ");
        for args in [
            json!({"query": words, "tag": vec!["t"; 32], "limit": 5}),
            json!({"query": repeats}),
            json!({"query": "x".repeat(256)}),
            json!({"path": "a".repeat(1024), "reason": "é".repeat(4000)}),
            json!({"idempotencyKey": format!("{}.:_-Z9", "k".repeat(194)), "id": "i".repeat(128)}),
            json!({"edits": vec![json!({"oldText": "a", "newText": "b"}); 200]}),
            json!({"content": "c".repeat(2 * 1024 * 1024), "paths": vec!["a.md"; 1000]}),
            json!({"set": {"k": "v".repeat(4096)}, "unset": vec!["u"; 200]}),
            json!("not an object"),
        ] {
            assert_eq!(code("any", args.clone(), &l), None, "{:.100}", args.to_string());
        }
    }

    #[test]
    fn a_lowered_limit_is_the_one_applied() {
        let l = Limits {
            max_reason_chars: 10,
            max_query_terms: 2,
            ..Limits::default()
        };
        let got = code("propose_new_note", json!({"reason": "eleven char"}), &l).unwrap();
        assert!(
            got.contains("reason is 11 characters; the limit is 10 (limits.max_reason_chars)"),
            "{got}"
        );
        assert!(code("search_knowledge", json!({"query": "a b c"}), &l).is_some());
        assert_eq!(code("search_knowledge", json!({"query": "a b"}), &l), None);
    }

    #[test]
    fn a_huge_query_is_refused_in_one_pass() {
        let l = Limits::default();
        let query = (0..200_000)
            .map(|i| format!("t{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let started = std::time::Instant::now();
        assert!(code("search_note_content", json!({ "query": query }), &l).is_some());
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn old_configs_load_with_the_spec_defaults() {
        let c: Limits = toml::from_str("challenge_ttl_seconds = 60\nmax_reason_chars = 100\n").unwrap();
        assert_eq!(c.challenge_ttl_seconds, 60);
        assert_eq!(c.max_reason_chars, 100);
        assert_eq!(c.max_pending_per_credential, 500);
        assert_eq!(c.max_proposal_bytes, 2 * 1024 * 1024);
        assert_eq!(c.max_output_bytes, 16 * 1024 * 1024);
        assert_eq!(c.search_budget_ms, 2_000);
        assert_eq!(c.max_sessions, 1_024);
        assert_eq!(c.max_sessions_per_credential, 64);
        assert_eq!(c.session_idle_seconds, 3_600);
        let empty: Limits = toml::from_str("").unwrap();
        assert_eq!(empty.max_inbox_bytes, 256 * 1024 * 1024);
    }
}
