//! The review page (`/review/` of `vaultgate serve`) in a real headless Chromium: a person logs in
//! with the link `vaultgate review` prints, reads a proposal's diff, applies or rejects it, undoes
//! and redoes through History, and manages credentials. Every effect is checked outside the
//! browser: the note on disk, the CLI's JSON, the audit log, a real MCP client.
//!
//! Each test has its own home, server and browser.

use serde_json::{Value, json};

use crate::browser::{Browser, Serve};
use crate::util::{Env, Reply};

/// The note the proposals change, and the line they change in it.
const NOTE: &str = "z/softmax.md";
const OLD_LINE: &str = "Used to normalize the scores in [[attention]].";
const NEW_LINE: &str = "Used to normalise the scores in [[attention]].";

// ---- helpers ---------------------------------------------------------------------------------------

fn note(env: &Env) -> String {
    std::fs::read_to_string(env.vault.join(NOTE)).unwrap()
}

/// An agent (`propose` tier, over stdio) proposes `content` for `path`; returns the proposal id.
async fn propose_patch(env: &Env, path: &str, content: &str, reason: &str) -> String {
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let base = c.call("read_note", json!({ "path": path })).await.ok()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let p = c
        .call(
            "propose_note_patch",
            json!({"path": path, "baseHash": base, "content": content, "reason": reason}),
        )
        .await
        .ok();
    c.close().await;
    p["id"].as_str().unwrap().to_owned()
}

/// The usual proposal: one line of `NOTE` changed. Returns (id, old text, new text).
async fn propose_spelling(env: &Env) -> (String, String, String) {
    let old = note(env);
    assert!(old.contains(OLD_LINE), "fixture {NOTE} has {OLD_LINE:?}");
    let new = old.replace(OLD_LINE, NEW_LINE);
    let id = propose_patch(env, NOTE, &new, "British spelling").await;
    (id, old, new)
}

/// Opens a fresh login link; returns the session's base URL `http://127.0.0.1:P/review/s/<sp>`.
async fn login(b: &Browser, env: &Env, srv: &Serve) -> String {
    b.goto(&srv.login_link(env)).await;
    b.wait_for("nav#nav").await;
    let url = b.url().await;
    let prefix = format!("{}/review/s/", srv.origin());
    let rest = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("after login the browser is at {url}, not under {prefix}"));
    let sp = rest.split('/').next().unwrap();
    assert!(!sp.is_empty(), "no session path in {url}");
    format!("{prefix}{sp}")
}

/// From the inbox (where login lands), opens the proposal `id` through its row's link.
async fn open_from_inbox(b: &Browser, base: &str, id: &str) {
    b.goto(&format!("{base}/v/basic/inbox")).await;
    let row = format!("table#inbox tr.proposal[data-id=\"{id}\"]");
    b.wait_for(&row).await;
    b.click(&format!("{row} a.open")).await;
    b.wait_for("h1#proposal-title").await;
}

/// Waits for a decision's result page; panics unless it reports success.
async fn expect_ok_result(b: &Browser, what: &str) {
    let r = b.wait_for("div#result").await;
    let outcome = r.attr("data-outcome").await.unwrap();
    if outcome.as_deref() != Some("ok") {
        panic!(
            "{what}: result data-outcome={outcome:?} data-code={:?}: {}",
            r.attr("data-code").await.unwrap(),
            b.describe().await
        );
    }
}

/// Texts of every element matching `css`.
async fn texts(b: &Browser, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in b.all(css).await {
        out.push(e.text().await.unwrap());
    }
    out
}

/// The unified diff's lines of one kind (`add`, `del`, `ctx`), as text: each `span.text` less the
/// diff marker the page may show in front of it (`+`, `-`, a space).
async fn unified(b: &Browser, kind: &str) -> Vec<String> {
    let marker = match kind {
        "add" => '+',
        "del" => '-',
        _ => ' ',
    };
    texts(b, &format!("div#diff-unified div.line.{kind} span.text"))
        .await
        .into_iter()
        .map(|t| t.strip_prefix(marker).map_or(t.clone(), str::to_owned))
        .collect()
}

use crate::util::audit_lines as audit;

fn json_of(env: &Env, args: &[&str]) -> Value {
    let out = env.ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} is not JSON ({e}): {out}"))
}

fn ids_with_status(env: &Env, status: &str) -> Vec<String> {
    json_of(env, &["inbox", "list", "--status", status, "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect()
}

fn credential(env: &Env, name: &str) -> Value {
    json_of(env, &["token", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no credential named {name} in token list"))
        .clone()
}

// ---- proposals -------------------------------------------------------------------------------------

#[tokio::test]
async fn review_browser_shows_the_diff_and_applies_as_the_reviewer() {
    let env = Env::new();
    let (id, old, new) = propose_spelling(&env).await;
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    let base = login(&b, &env, &srv).await;
    open_from_inbox(&b, &base, &id).await;

    // Side by side: the old line on the left, the new one on the right.
    let olds = texts(&b, "table#diff-split td.old").await;
    let news = texts(&b, "table#diff-split td.new").await;
    assert!(
        olds.iter().any(|t| t.contains(OLD_LINE)),
        "split diff, old side: {olds:?}"
    );
    assert!(
        news.iter().any(|t| t.contains(NEW_LINE)),
        "split diff, new side: {news:?}"
    );
    assert!(
        !news.iter().any(|t| t.contains(OLD_LINE)),
        "the removed line is not new: {news:?}"
    );
    // Unified: one removed line, one added line, each exactly the note's line.
    let dels = unified(&b, "del").await;
    let adds = unified(&b, "add").await;
    assert_eq!(dels, [OLD_LINE], "unified diff, removed lines");
    assert_eq!(adds, [NEW_LINE], "unified diff, added lines");
    assert!(
        !b.all("div#diff-unified div.line.ctx").await.is_empty(),
        "the unified diff shows context lines"
    );

    assert_eq!(note(&env), old, "nothing changes before Apply");
    b.click("#apply-button").await;
    expect_ok_result(&b, "apply").await;
    assert_eq!(note(&env), new, "the note on disk is the proposed text");
    assert!(
        ids_with_status(&env, "applied").contains(&id),
        "the proposal is applied"
    );

    let records = audit(&env);
    assert!(
        records.iter().any(|r| r["tool"] == "apply_proposal"
            && r["actor"] == "review:tester"
            && r["event"] == "review"
            && r["outcome"] == "ok"),
        "an ok apply_proposal by review:tester (event review) is audited: {records:#?}"
    );
    b.close().await;
}

#[tokio::test]
async fn review_browser_rejects_with_a_reason() {
    let env = Env::new();
    let (id, old, _) = propose_spelling(&env).await;
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    let base = login(&b, &env, &srv).await;
    open_from_inbox(&b, &base, &id).await;

    let reason = "we keep American spelling (quokka-7)";
    b.wait_for("textarea#reject-reason[name=reason]")
        .await
        .send_keys(reason)
        .await
        .unwrap();
    b.click("#reject-button").await;
    expect_ok_result(&b, "reject").await;

    assert!(
        ids_with_status(&env, "rejected").contains(&id),
        "the proposal is rejected"
    );
    assert!(
        !ids_with_status(&env, "pending").contains(&id),
        "and no longer pending"
    );
    let shown = json_of(&env, &["inbox", "show", &id, "--json"]);
    assert_eq!(shown["rejectReason"], reason, "the reason is recorded: {shown}");
    assert_eq!(note(&env), old, "a rejection leaves the note as it was");
    b.close().await;
}

#[tokio::test]
async fn review_browser_undoes_and_redoes_through_history() {
    let env = Env::new();
    let (id, old, new) = propose_spelling(&env).await;
    env.ok(&["apply", "--only", &id, "--yes"]);
    assert_eq!(note(&env), new);
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    login(&b, &env, &srv).await;

    b.click("a#nav-history").await;
    let top = b.text("#undo-top").await;
    assert_ne!(top.trim(), "nothing", "the apply is on the undo stack");
    b.click("form#undo button, form#undo input[type=submit]").await;
    expect_ok_result(&b, "undo").await;
    assert_eq!(note(&env), old, "undo puts the old text back on disk");

    b.click("a#nav-history").await;
    assert_eq!(
        b.text("#undo-top").await.trim(),
        "nothing",
        "the only entry was undone"
    );
    assert!(
        b.all("form#undo").await.is_empty(),
        "no undo form when nothing can be undone"
    );
    assert_ne!(
        b.text("#redo-top").await.trim(),
        "nothing",
        "the undo can be redone"
    );
    b.click("form#redo button, form#redo input[type=submit]").await;
    expect_ok_result(&b, "redo").await;
    assert_eq!(note(&env), new, "redo writes the proposed text again");
    b.close().await;
}

// ---- credentials -----------------------------------------------------------------------------------

#[tokio::test]
async fn review_browser_issues_a_credential_whose_token_shows_once() {
    let env = Env::new();
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    let base = login(&b, &env, &srv).await;

    b.click("a#nav-credentials").await;
    b.wait_for("input#issue-name[name=name]")
        .await
        .send_keys("browser-agent")
        .await
        .unwrap();
    b.wait_for("select#issue-tier[name=tier]")
        .await
        .select_by_value("read")
        .await
        .unwrap();
    b.click("#issue-button").await;
    let token = b.text("code#token").await.trim().to_owned();
    assert!(token.len() >= 20, "a token is shown: {token:?}");
    assert!(
        !b.all("pre.client-config").await.is_empty(),
        "client configurations come with it"
    );

    let cred = credential(&env, "browser-agent");
    assert_eq!(cred["tier"], "read");
    assert_eq!(cred["revoked"], false);
    // The token works for an agent.
    let c = env.stdio(&token).await;
    let vaults = c.call("vault_list", json!({})).await.ok();
    assert!(
        vaults.to_string().contains("basic"),
        "vault_list answers: {vaults}"
    );
    c.close().await;

    // Never again: the credentials page, reloaded, holds no trace of it.
    b.goto(&format!("{base}/credentials")).await;
    b.wait_for("tr.credential[data-name=\"browser-agent\"]").await;
    b.wd.refresh().await.unwrap();
    b.wait_for("table#credentials").await;
    assert!(!b.source().await.contains(&token), "the token is not shown again");
    assert!(
        b.all("code#token").await.is_empty(),
        "no token element on the list"
    );
    b.close().await;
}

#[tokio::test]
async fn review_browser_sets_full_only_after_the_second_confirmation() {
    let env = Env::new();
    let (id, _) = env.token("agent", "read");
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    login(&b, &env, &srv).await;

    b.click("a#nav-credentials").await;
    let row = format!("tr.credential[data-id=\"{id}\"]");
    b.wait_for(&format!("{row} form.set-tier select[name=tier]"))
        .await
        .select_by_value("full")
        .await
        .unwrap();
    b.click(&format!("{row} form.set-tier .set-tier-button")).await;
    b.wait_for("div#confirm-full").await;
    assert_eq!(
        credential(&env, "agent")["tier"],
        "read",
        "choosing full alone changes nothing"
    );

    b.click("form#confirm-full-form #confirm-full-button").await;
    expect_ok_result(&b, "confirmed tier change").await;
    assert_eq!(credential(&env, "agent")["tier"], "full", "confirmed, it is full");
    b.click("a#nav-credentials").await;
    let tier = b.wait_for(&row).await.attr("data-tier").await.unwrap();
    assert_eq!(tier.as_deref(), Some("full"), "the page shows the new tier");
    b.close().await;
}

#[tokio::test]
async fn review_browser_revokes_a_credential_and_its_next_call_is_refused() {
    let env = Env::new();
    let (id, token) = env.token("agent", "read");
    let (_, other) = env.token("bystander", "read");
    let c = env.stdio(&token).await;
    let c2 = env.stdio(&other).await;
    c.call("vault_list", json!({})).await.ok();
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    login(&b, &env, &srv).await;

    b.click("a#nav-credentials").await;
    b.click(&format!(
        "tr.credential[data-id=\"{id}\"] form.revoke .revoke-button"
    ))
    .await;
    expect_ok_result(&b, "revoke").await;
    assert_eq!(credential(&env, "agent")["revoked"], true);

    match c.call("vault_list", json!({})).await {
        Reply::Err(e) => assert_eq!(e["code"], "CREDENTIAL_REVOKED", "{e}"),
        Reply::Ok(v) => panic!("a revoked credential's call succeeded: {v}"),
    }
    // Only that one.
    c2.call("vault_list", json!({})).await.ok();
    assert_eq!(credential(&env, "bystander")["revoked"], false);
    c.close().await;
    c2.close().await;
    b.click("a#nav-credentials").await;
    let revoked = b
        .wait_for(&format!("tr.credential[data-id=\"{id}\"]"))
        .await
        .attr("data-revoked")
        .await
        .unwrap();
    assert_eq!(revoked.as_deref(), Some("true"), "the page shows it revoked");
    b.close().await;
}

// ---- without JavaScript, and hostile text ------------------------------------------------------

#[tokio::test]
async fn review_browser_applies_with_javascript_off() {
    let env = Env::new();
    let (id, old, new) = propose_spelling(&env).await;
    let srv = Serve::start(&env);
    let b = Browser::without_javascript().await;
    let base = login(&b, &env, &srv).await;
    open_from_inbox(&b, &base, &id).await;
    let adds = unified(&b, "add").await;
    assert_eq!(adds, [NEW_LINE], "the diff is there without scripts");

    assert_eq!(note(&env), old);
    b.click("#apply-button").await;
    expect_ok_result(&b, "apply without JavaScript").await;
    assert_eq!(note(&env), new, "the plain form post applied the proposal");
    assert!(ids_with_status(&env, "applied").contains(&id));
    b.close().await;
}

#[tokio::test]
async fn review_browser_renders_hostile_proposal_text_as_text() {
    let env = Env::new();
    let script = "<script>window.__pwned=1</script>";
    let img = "\"><img src=x onerror=\"window.__pwned=2\">";
    let content = format!("{}{script}\n{img}\n", note(&env));
    let id = propose_patch(&env, NOTE, &content, img).await;
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    let base = login(&b, &env, &srv).await;
    open_from_inbox(&b, &base, &id).await;
    b.wait_loaded().await;

    assert_eq!(
        b.execute("return window.__pwned").await,
        Value::Null,
        "no injected script ran"
    );
    assert!(
        b.all("img[onerror]").await.is_empty(),
        "no injected <img> element"
    );
    let injected = b
        .execute("return [...document.scripts].filter(s => s.textContent.includes('__pwned')).length")
        .await;
    assert_eq!(injected, json!(0), "no injected <script> element");

    // The literal text is what the reviewer reads.
    let adds = unified(&b, "add").await;
    assert_eq!(adds, [script, img], "unified diff shows the added lines verbatim");
    let news = texts(&b, "table#diff-split td.new").await;
    for line in [script, img] {
        assert!(
            news.iter().any(|t| t.contains(line)),
            "split diff shows {line:?}: {news:?}"
        );
    }
    assert_eq!(b.text("pre#reason").await, img, "the reason is shown verbatim");
    b.close().await;
}

/// docs/contract.md#the-review-page-and-in-client-approval: a changed word, a retargeted link and a
/// frontmatter key read as such in the browser and in `inbox show`, from one proposal.
#[tokio::test]
async fn review_browser_marks_a_changed_word_a_link_change_and_frontmatter_keys() {
    let env = Env::new();
    let old = note(&env);
    let new = old
        .replace("tags: [ml, math]", "tags: [ml, math, stats]")
        .replace(OLD_LINE, "Used to normalise the scores in [[transformer]].");
    assert_ne!(old, new);
    let id = propose_patch(&env, NOTE, &new, "spelling, a better link, a tag").await;
    let srv = Serve::start(&env);
    let b = Browser::new().await;
    let base = login(&b, &env, &srv).await;
    open_from_inbox(&b, &base, &id).await;

    let inserted = texts(&b, "div#diff-unified ins.w").await;
    let deleted = texts(&b, "div#diff-unified del.w").await;
    assert!(inserted.iter().any(|w| w.contains("normalise")), "{inserted:?}");
    assert!(deleted.iter().any(|w| w.contains("normalize")), "{deleted:?}");
    assert!(
        !inserted.iter().any(|w| w.contains("scores")),
        "words both lines share are not marked: {inserted:?}"
    );
    let links = texts(&b, "ul#link-changes li").await;
    assert!(
        links
            .iter()
            .any(|l| l.contains("[[attention]] \u{2192} [[transformer]]")),
        "{links:?}"
    );
    let fields = texts(&b, "ul#field-changes li").await;
    assert_eq!(fields, ["tags: +stats"], "frontmatter key by key");
    b.close().await;

    let out = env.ok(&["inbox", "show", &id]);
    assert!(
        out.contains("[-normalize-]") && out.contains("{+normalise+}"),
        "{out}"
    );
    assert!(
        out.contains("link: [[attention]] \u{2192} [[transformer]]"),
        "{out}"
    );
    assert!(out.contains("tags: +stats"), "{out}");
}
