//! What the operator reads and runs (docs/contract.md#the-mcp-surface control characters, docs/contract.md#the-command-line CLI and `doctor`), through
//! the real binary: agents' reasons and diffs reach the terminal escaped; `doctor` names each
//! problem with its next step and creates nothing without a home; bad option values are usage
//! errors (exit 2); `apply --yes` works through every pending proposal; an open `secret.key` stops
//! the servers; the printed Inspector command keeps the token out of argv.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{Client, Env, bin};

/// ANSI that would erase the previous line, set the window title, and start an 8-bit CSI.
const HOSTILE: &str = "\x1b[2K\x1b[1A\x1b]0;owned\x07\u{9b}31m \u{202e}9876-5432\u{202c} zero\u{200b}width\r";

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// No byte a terminal would act on: C0 but newline and tab, DEL, and C1 (as UTF-8, `C2 80..9F`).
fn assert_inert(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|c| {
            (c.is_control() && *c != '\n' && *c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{200b}')
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: raw control characters {bad:?} in:\n{text}"
    );
}

fn assert_escaped(what: &str, text: &str) {
    assert_inert(what, text);
    for visible in [
        "\\u{001B}[2K\\u{001B}[1A",
        "\\u{001B}]0;owned\\u{0007}",
        "\\u{009B}31m",
        "\\u{000D}",
        "\\u{202E}9876-5432\\u{202C} zero\\u{200B}width",
    ] {
        assert!(text.contains(visible), "{what}: `{visible}` is shown:\n{text}");
    }
}

async fn hash_of(c: &Client, path: &str) -> String {
    let r = c.call("read_note", json!({"path": path})).await.ok();
    r["hash"].as_str().unwrap().to_owned()
}

fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// SECURITY(T-CR): a patch adding 31 lines joined by lone CRs shows as 31 added lines, counted
/// `+31`, in `inbox show` (on the red-team's build it counted `+1 −1` and printed one line).
#[tokio::test]
async fn a_cr_joined_patch_shows_every_line_and_counts_them() {
    let env = Env::new();
    let (_, token) = env.token("writer", "propose");
    let c = env.stdio(&token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let joined: String = (0..31).map(|i| format!("hidden {i}\r")).collect();
    let new = format!("{old}{joined}\n");
    let p = c
        .call(
            "propose_note_patch",
            json!({"path": "z/softmax.md", "baseHash": hash_of(&c, "z/softmax.md").await,
                   "content": new, "reason": "a one-line tweak"}),
        )
        .await
        .ok();
    c.close().await;
    let show = env.ok(&["inbox", "show", p["slug"].as_str().unwrap()]);
    assert_inert("inbox show", &show);
    assert!(show.contains("changes: +31 \u{2212}0 lines"), "{show}");
    for i in 0..31 {
        assert!(
            show.lines().any(|l| l == format!("+hidden {i}")),
            "line {i} has a line of its own:\n{show}"
        );
    }
}

#[tokio::test]
async fn reasons_and_diffs_reach_the_terminal_escaped() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = env.stdio(&token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let new = format!("{old}\nhidden line{HOSTILE}\n");
    let reason = format!("tidy up{HOSTILE}");
    let p = c
        .call(
            "propose_note_patch",
            json!({"path": "z/softmax.md", "baseHash": hash_of(&c, "z/softmax.md").await,
                   "content": new, "reason": reason}),
        )
        .await
        .ok();
    let id = p["id"].as_str().unwrap();
    let slug = p["slug"].as_str().unwrap();

    let show = env.ok(&["inbox", "show", slug]);
    assert_escaped("inbox show", &show);
    assert!(
        show.contains("+hidden line\\u{001B}[2K"),
        "the diff line is there:\n{show}"
    );
    assert!(show.contains("reason: tidy up\\u{001B}[2K"), "{show}");

    let list = env.ok(&["inbox", "list"]);
    assert_escaped("inbox list", &list);

    // JSON stays JSON, carrying the exact text, and still nothing a terminal acts on.
    let json_text = env.ok(&["inbox", "show", id, "--json"]);
    assert_inert("inbox show --json", &json_text);
    let shown: Value = serde_json::from_str(json_text.trim()).unwrap();
    assert_eq!(shown["reason"], reason.as_str());
    assert!(shown["diff"].as_str().unwrap().contains(HOSTILE));

    let out = env.run(&["apply", "--only", id, "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let applied = stdout(&out);
    assert_escaped("apply --only --yes", &applied);
    assert!(applied.contains(&format!("applied {slug}")), "{applied}");
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        new,
        "the note holds the bytes proposed; only the display is escaped"
    );

    let history = env.ok(&["history", "status"]);
    assert_inert("history status", &history);
    c.close().await;
}

#[tokio::test]
async fn doctor_passes_a_healthy_home() {
    let env = Env::new();
    env.token("writer", "auto");
    let out = env.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(!text.is_empty());
    for line in text.lines() {
        assert!(line.starts_with("ok    ") || line.starts_with("warn  "), "{line}");
    }
    assert!(text.contains("secret.key"), "{text}");
    assert!(text.contains("vault basic"), "{text}");
    assert!(text.contains("audit chain holds"), "{text}");

    let json: Value = serde_json::from_str(env.ok(&["doctor", "--json"]).trim()).unwrap();
    assert_eq!(json["ok"], true);
    let checks = json["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .all(|c| c["status"] == "ok" || c["status"] == "warn")
    );
    assert!(
        checks
            .iter()
            .all(|c| c["what"].is_string() && c["next"].is_string())
    );
}

#[tokio::test]
async fn doctor_names_each_problem_with_its_next_step() {
    let env = Env::new();
    env.token("writer", "auto");
    env.token("reader", "read");
    chmod(&env.home.join("secret.key"), 0o644);
    std::fs::rename(&env.vault, env.tmp.path().join("moved-away")).unwrap();
    // Alter the first audit record without touching its hash.
    let audit = env.home.join("audit.jsonl");
    let text = std::fs::read_to_string(&audit).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    let altered = first.replacen("\"outcome\":\"ok\"", "\"outcome\":\"denied\"", 1);
    assert_ne!(altered, first, "the record to alter is there");
    std::fs::write(&audit, format!("{altered}\n{rest}")).unwrap();

    let out = env.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let fail = |needle: &str, next: &str| {
        assert!(
            text.lines()
                .any(|l| l.starts_with("fail  ") && l.contains(needle) && l.contains(next)),
            "a fail line naming {needle:?} with {next:?}:\n{text}"
        );
    };
    fail(
        "secret.key",
        &format!("chmod 600 {}", env.home.join("secret.key").display()),
    );
    fail("vault basic", "vaultgate vault remove basic");
    fail("audit chain broken at seq 1", "vaultgate audit restart --yes");

    let out = env.run(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(json["ok"], false);
    let fails = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .count();
    assert_eq!(fails, 3, "{json}");
}

#[test]
fn doctor_names_a_lost_audit_log_with_its_next_step() {
    let env = Env::new();
    env.token("writer", "auto");
    env.token("reader", "read");
    std::fs::remove_file(env.home.join("audit.jsonl")).unwrap();
    let out = env.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("fail  ") && l.contains("missing") && l.contains("audit restart --yes")),
        "{text}"
    );
    env.ok(&["audit", "restart", "--yes"]);
    let out = env.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn doctor_without_a_home_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("no-home-here");
    let out = Command::new(bin())
        .arg("doctor")
        .env("VAULTGATE_HOME", &home)
        .env_remove("VAULTGATE_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "fail  home  run vaultgate init\n");
    assert!(!home.exists(), "doctor created the home");
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing at all appeared"
    );
}

#[test]
fn bad_option_values_are_usage_errors() {
    let env = Env::new();
    for (args, says) in [
        (
            vec!["token", "issue", "--name", "x", "--expires", "99999999999d"],
            "3650d",
        ),
        (
            vec![
                "token",
                "issue",
                "--name",
                "x",
                "--expires",
                "9223372036854775807s",
            ],
            "3650d",
        ),
        (
            vec!["token", "issue", "--name", "x", "--expires", "0d"],
            "--expires",
        ),
        (
            vec!["token", "issue", "--name", "x", "--expires=-5d"],
            "--expires",
        ),
        (
            vec!["token", "issue", "--name", "x", "--expires", "12y"],
            "--expires",
        ),
        (vec!["token", "issue", "--name", "x", "--tier", "bogus"], "bogus"),
        (
            vec!["token", "issue", "--name", "x", "--format", "bogus"],
            "bogus",
        ),
        (vec!["token", "issue", "--name", "a\u{1b}[2Kb"], "control"),
        (vec!["token", "set-tier", "x", "admin"], "admin"),
        (vec!["audit", "tail", "-n", "abc"], "abc"),
        (vec!["inbox", "list", "--status", "bogus"], "bogus"),
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let msg = stderr(&out);
        assert!(msg.contains(says), "{args:?} names {says:?}: {msg}");
        assert_inert("usage error", &msg);
    }
    assert!(
        env.ok(&["token", "list"]).contains("no credentials"),
        "no refused issue created a credential"
    );
    // A good value still works, and the limit itself is accepted.
    env.ok(&[
        "token",
        "issue",
        "--name",
        "ten-years",
        "--expires",
        "3650d",
        "--format",
        "json",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_yes_applies_every_pending_proposal_not_one_page() {
    const PER_CREDENTIAL: usize = 300;
    let env = Env::new();
    let (_, t1) = env.token("writer-1", "auto");
    let (_, t2) = env.token("writer-2", "auto");
    let started = Instant::now();
    let propose = |token: String, who: usize| {
        let env = &env;
        async move {
            let c = env.stdio(&token).await;
            for i in 0..PER_CREDENTIAL {
                c.call(
                    "propose_new_note",
                    json!({"path": format!("bulk/w{who}-{i:03}.md"), "content": format!("# {who} {i}\n"), "reason": "bulk"}),
                )
                .await
                .ok();
            }
            c.close().await;
        }
    };
    tokio::join!(propose(t1, 1), propose(t2, 2));
    eprintln!("600 proposals in {:?}", started.elapsed());

    let out = env.run(&["apply", "--yes"]);
    eprintln!("applied in {:?}", started.elapsed());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().filter(|l| l.starts_with("applied ")).count(), 600);
    assert!(
        text.contains("600 applied, 0 not applied"),
        "{}",
        text.lines().last().unwrap_or("")
    );
    let notes = std::fs::read_dir(env.vault.join("bulk")).unwrap().count();
    assert_eq!(notes, 600, "every proposal's note exists");
    let pending: Value = serde_json::from_str(env.ok(&["inbox", "list", "--json"]).trim()).unwrap();
    assert_eq!(pending.as_array().unwrap().len(), 0, "nothing is left pending");
    assert!(env.ok(&["apply", "--yes"]).contains("no pending proposals"));
}

/// Waits for a process that must exit by itself soon; kills it and fails otherwise.
fn exits_soon(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn servers_refuse_a_secret_other_users_can_read() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let key = env.home.join("secret.key");
    chmod(&key, 0o644);
    let chmod_hint = format!("chmod 600 {}", key.display());

    let mut stdio = Command::new(bin());
    stdio
        .arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", &token);
    let out = exits_soon(stdio);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing on stdout");
    assert!(stderr(&out).contains(&chmod_hint), "{}", stderr(&out));

    let mut serve = Command::new(bin());
    serve
        .args(["serve", "--port", "0", "--home"])
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN");
    let out = exits_soon(serve);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&chmod_hint), "{}", stderr(&out));

    chmod(&key, 0o600);
    env.ok(&["token", "list"]);
}

#[test]
fn the_printed_inspector_command_keeps_the_token_out_of_argv() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["demo", "--no-serve", "--dir"])
        .arg(tmp.path().join("demo"))
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    let token = text
        .lines()
        .skip_while(|l| !l.starts_with("token (shown once"))
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    assert!(token.starts_with("eyJ"), "a JWT: {token}");
    let commands: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("npx @modelcontextprotocol/inspector"))
        .collect();
    assert!(!commands.is_empty(), "{text}");
    for line in commands {
        let (before, argv) = line.split_once("npx ").unwrap();
        assert!(
            !argv.contains(&token),
            "the token is in the Inspector's argv: {line}"
        );
        if line.contains(" stdio ") {
            assert!(
                before.contains("MCP_ENV_VARS=") && before.contains(&token),
                "{line}"
            );
        }
    }
}

/// docs/contract.md#the-command-line, docs/contract.md#the-review-page-and-in-client-approval: `--approve-in-client` is off unless given, warned about on stderr (stdout
/// stays the bare token or the one JSON object), and shown by `token list`.
#[test]
fn approve_in_client_is_opt_in_shown_in_token_list_and_warned_about() {
    let env = Env::new();
    let issue = |name: &str, tier: &str, flag: bool, format: &str| {
        let mut args = vec![
            "token", "issue", "--name", name, "--tier", tier, "--format", format,
        ];
        if flag {
            args.push("--approve-in-client");
        }
        if tier == "full" {
            args.push("--yes");
        }
        let out = env.run(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let plain = issue("plain", "propose", false, "json");
    assert!(!stderr(&plain).contains("in-client"), "{}", stderr(&plain));
    let flagged = issue("flagged", "propose", true, "json");
    let warning = stderr(&flagged);
    assert!(
        warning.contains("warning") && warning.contains("one tier above 'propose'"),
        "{warning}"
    );
    // The JSON object keeps exactly the fields of docs/contract.md#the-command-line.
    let v: Value = serde_json::from_str(stdout(&flagged).trim()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["expiresAt", "id", "name", "tier", "token", "vaults"]);
    let bare = issue("bare", "auto", true, "token");
    assert_eq!(
        stdout(&bare).trim().lines().count(),
        1,
        "only the token on stdout"
    );
    assert!(stderr(&bare).contains("anyone's proposals"), "{}", stderr(&bare));
    let full = issue("root", "full", true, "token");
    assert!(
        stderr(&full).contains("no effect on the 'full' tier"),
        "{}",
        stderr(&full)
    );

    let listed = env.run(&["token", "list"]);
    assert!(
        stderr(&listed).contains("trusted to ask honestly"),
        "the list warns: {}",
        stderr(&listed)
    );
    let text = env.ok(&["token", "list"]);
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with("\tapprove-in-client"))
        .map(|l| l.split('\t').nth(1).unwrap())
        .collect();
    assert_eq!(marked, ["flagged", "bare", "root"], "{text}");
    let list: Value = serde_json::from_str(&env.ok(&["token", "list", "--json"])).unwrap();
    let flags: Vec<(&str, bool)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["approveInClient"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("plain", false),
            ("flagged", true),
            ("bare", true),
            ("root", true)
        ]
    );
}

/// SECURITY(T-VAULT): a folder belongs to one vault. The same folder under another id (also
/// through a symlink), a folder inside a vault and one around it are all refused, and
/// `gateway.toml` is left as it was.
#[test]
fn vault_add_refuses_a_folder_that_is_inside_or_around_a_registered_vault() {
    let env = Env::new();
    let config = env.home.join("gateway.toml");
    let before = std::fs::read_to_string(&config).unwrap();
    let link = env.tmp.path().join("link-to-vault");
    std::os::unix::fs::symlink(&env.vault, &link).unwrap();
    let cases = [
        (env.vault.clone(), "is vault 'basic'"),
        (link, "is vault 'basic'"),
        (env.vault.join("z"), "is inside vault 'basic'"),
        (env.tmp.path().to_path_buf(), "contains vault 'basic'"),
    ];
    for (i, (path, says)) in cases.iter().enumerate() {
        let id = format!("other{i}");
        let out = env.run(&["vault", "add", path.to_str().unwrap(), "--id", &id]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", path.display());
        assert!(
            stderr.contains("INVALID_ARGUMENT") && stderr.contains(says),
            "{}: {stderr}",
            path.display()
        );
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            before,
            "{} changed gateway.toml",
            path.display()
        );
    }
    // Control: a folder beside the vault is a vault of its own.
    let beside = env.tmp.path().join("beside");
    std::fs::create_dir(&beside).unwrap();
    env.ok(&["vault", "add", beside.to_str().unwrap(), "--id", "beside"]);
}

/// Adding, removing and choosing the default vault are operator changes like any other: each is
/// audited with the operator as actor (a refused one too), and a vault whose folder is gone can
/// still be removed.
#[test]
fn vault_add_remove_and_set_default_are_audited() {
    let env = Env::new();
    let last = |tool: &str| {
        crate::util::audit_lines(&env)
            .into_iter()
            .rev()
            .find(|r| r["tool"] == tool)
            .unwrap_or_else(|| panic!("no {tool} record"))
    };
    let second = env.tmp.path().join("second");
    std::fs::create_dir_all(&second).unwrap();
    env.ok(&["vault", "add", second.to_str().unwrap(), "--id", "second"]);
    let r = last("vault_add");
    assert_eq!(
        (&r["outcome"], &r["vault"], &r["actor"]),
        (&json!("ok"), &json!("second"), &json!("cli:tester")),
        "{r}"
    );

    // A folder inside a vault is refused, and the refusal is on record.
    let nested = env.vault.join("z");
    let out = env.run(&["vault", "add", nested.to_str().unwrap(), "--id", "nested"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is inside vault 'basic'"),
        "{}",
        stderr(&out)
    );
    let r = last("vault_add");
    assert_eq!(
        (&r["outcome"], &r["code"]),
        (&json!("denied"), &json!("INVALID_ARGUMENT")),
        "{r}"
    );

    env.ok(&["vault", "set-default", "second"]);
    let r = last("vault_set_default");
    assert_eq!(
        (&r["outcome"], &r["vault"]),
        (&json!("ok"), &json!("second")),
        "{r}"
    );

    // Its folder gone, the vault is still removed; the default falls back to the other vault.
    std::fs::remove_dir_all(&second).unwrap();
    env.ok(&["vault", "remove", "second"]);
    let r = last("vault_remove");
    assert_eq!(
        (&r["outcome"], &r["vault"], &r["actor"]),
        (&json!("ok"), &json!("second"), &json!("cli:tester")),
        "{r}"
    );
    let list: Value = serde_json::from_str(&env.ok(&["vault", "list", "--json"])).unwrap();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["basic"]);
    assert_eq!(list[0]["isDefault"], true);
    let out = env.run(&["audit", "verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Configuration changes from several terminals at once all land: each read-modify-write of
/// `gateway.toml` holds the home's config lock, so none overwrites another's change.
#[test]
fn concurrent_vault_adds_from_several_processes_all_land() {
    let env = Env::new();
    let n = 8;
    let dirs: Vec<std::path::PathBuf> = (0..n)
        .map(|i| {
            let d = env.tmp.path().join(format!("v{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    let children: Vec<std::process::Child> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            std::process::Command::new(crate::util::bin())
                .args(["vault", "add", d.to_str().unwrap(), "--id", &format!("v{i}")])
                .arg("--home")
                .arg(&env.home)
                .env_remove("VAULTGATE_HOME")
                .env_remove("VAULTGATE_TOKEN")
                .env("USER", "tester")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let list: Value = serde_json::from_str(&env.ok(&["vault", "list", "--json"])).unwrap();
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    want.push("basic".into());
    want.sort();
    assert_eq!(ids, want, "a concurrent vault add was lost");
}
