use std::collections::BTreeSet;

use audit::{Actor, AuditLog, Durability, Entry, Outcome, tail};
use serde_json::Value;

use crate::common::{at, home, lines};

fn keys_of_line(line: &[u8]) -> BTreeSet<String> {
    let v: Value = serde_json::from_slice(line).unwrap();
    v.as_object().unwrap().keys().cloned().collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

const ALWAYS: [&str; 7] = ["seq", "ts", "prev", "hash", "event", "actor", "outcome"];

#[test]
fn a_record_never_contains_a_field_it_was_not_given() {
    type Setter = fn(&mut Entry);
    let table: [(&str, Setter); 8] = [
        ("", |_| {}),
        ("vault", |e| e.vault = Some("v".into())),
        ("tool", |e| e.tool = Some("t".into())),
        ("target", |e| e.target = Some("a.md".into())),
        ("proposalId", |e| e.proposal_id = Some("p".into())),
        ("challengeId", |e| e.challenge_id = Some("c".into())),
        ("code", |e| e.code = Some("PATH_DENIED".into())),
        ("argsHash", |e| e.args_hash = Some("ab".into())),
    ];
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    for (i, (key, set_field)) in table.iter().enumerate() {
        let mut e = Entry::new("tool_call", Actor::Cli { user: "u".into() }, Outcome::Denied);
        set_field(&mut e);
        log.append(e, at(i as u64), Durability::Flush).unwrap();
        let mut expected = set(&ALWAYS);
        if !key.is_empty() {
            expected.insert((*key).to_owned());
        }
        assert_eq!(keys_of_line(&lines(&path)[i]), expected, "field {key:?}");
    }
}

#[test]
fn a_full_entry_uses_the_spec_field_names() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    let e = Entry {
        event: "proposal_applied".into(),
        actor: Actor::Credential {
            credential_id: "cred_7".into(),
            name: "cursor".into(),
            tier: "full".into(),
            transport: "stdio".into(),
        },
        vault: Some("work".into()),
        tool: Some("apply_proposal".into()),
        target: Some("notes/a.md".into()),
        proposal_id: Some("prop_1".into()),
        challenge_id: Some("chal_1".into()),
        outcome: Outcome::Error,
        code: Some("PROPOSAL_STALE_BASE".into()),
        args_hash: Some(audit::args_hash(&serde_json::json!({"id": "prop_1"}))),
        count: None,
        approval: None,
        gateway: None,
    };
    let record = log.append(e, at(0), Durability::Sync).unwrap();
    let line = &lines(&path)[0];
    let v: Value = serde_json::from_slice(line).unwrap();
    assert_eq!(
        keys_of_line(line),
        set(&[
            "seq",
            "ts",
            "prev",
            "hash",
            "event",
            "actor",
            "vault",
            "tool",
            "target",
            "proposalId",
            "challengeId",
            "outcome",
            "code",
            "argsHash"
        ])
    );
    assert_eq!(v["ts"], "2026-11-29T20:31:47.123Z");
    assert_eq!(v["outcome"], "error");
    assert_eq!(
        v["actor"],
        serde_json::json!({"credentialId": "cred_7", "name": "cursor", "tier": "full", "transport": "stdio"})
    );
    // The line is the canonical JSON of the record, and reads back as the same record.
    assert_eq!(line, &format!("{}\n", audit::canonical_json(&v)).into_bytes());
    assert_eq!(tail(&path, 1).unwrap(), vec![record]);
}

#[test]
fn a_team_record_names_its_gateway_inside_its_hash() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    let mut e = Entry::new("tool_call", Actor::Cli { user: "ana".into() }, Outcome::Ok);
    e.gateway = Some("ana@laptop".into());
    log.append(e, at(0), Durability::Flush).unwrap();
    let line = lines(&path)[0].clone();
    let v: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(v["gateway"], "ana@laptop");
    assert_eq!(audit::verify(&path).unwrap().broken, None);
    // Another gateway's name in the same line breaks it.
    let forged = String::from_utf8(line)
        .unwrap()
        .replace("ana@laptop", "bob@laptop");
    std::fs::write(&path, forged).unwrap();
    assert_eq!(audit::verify(&path).unwrap().broken.map(|b| b.seq), Some(1));
}

#[test]
fn cli_actor_is_a_string_and_ts_is_utc() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    let e = Entry::new("token_issued", Actor::Cli { user: "alice".into() }, Outcome::Ok);
    let now = time::macros::datetime!(2026-11-29 21:31:47.123_999 +01:00);
    let record = log.append(e, now, Durability::Flush).unwrap();
    let v: Value = serde_json::from_slice(&lines(&path)[0]).unwrap();
    assert_eq!(v["actor"], "cli:alice");
    assert_eq!(v["ts"], "2026-11-29T20:31:47.123Z");
    assert_eq!(record.ts, time::macros::datetime!(2026-11-29 20:31:47.123 UTC));
}
