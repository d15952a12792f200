//! `vaultgate demo`: a demo vault unpacked from the binary, a fresh home, a `full` credential, the
//! client configurations, then serving. Nothing outside the chosen folder is touched.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use include_dir::{Dir, include_dir};
use policy::Tier;

use crate::cli::err;
use engine::error::GatewayError;
use engine::home::Home;

static DEMO_VAULT: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/demo/vault");

/// Writes the embedded vault below `dest` (which must not exist yet or be empty).
fn unpack(dir: &Dir<'_>, dest: &Path) -> Result<(), GatewayError> {
    std::fs::create_dir_all(dest)?;
    for f in dir.files() {
        std::fs::write(dest.join(f.path().file_name().unwrap_or_default()), f.contents())?;
    }
    for d in dir.dirs() {
        unpack(d, &dest.join(d.path().file_name().unwrap_or_default()))?;
    }
    Ok(())
}

pub struct DemoOptions {
    pub dir: Option<PathBuf>,
    pub no_serve: bool,
    pub stdio: bool,
    pub port: Option<u16>,
    pub user: String,
}

pub fn run(opts: DemoOptions) -> Result<(), GatewayError> {
    let DemoOptions {
        dir,
        no_serve,
        stdio,
        port,
        user,
    } = opts;
    let base = match dir {
        Some(d) => d,
        None => tempfile::Builder::new()
            .prefix("vaultgate-demo-")
            .tempdir()?
            .keep(),
    };
    let vault_dir = base.join("vault");
    let home = Home {
        dir: base.join("home"),
    };
    let fresh = !home.exists();
    home.init()?;
    if fresh || !vault_dir.exists() {
        if vault_dir.exists() {
            return Err(GatewayError::InvalidArgument(format!(
                "{} exists but holds no demo home; pick another --dir",
                vault_dir.display()
            )));
        }
        unpack(&DEMO_VAULT, &vault_dir)?;
        crate::cli::configuration_core(&home)?.settings().vault_add(
            &engine::core::Operator::cli(&user),
            engine::vaults::VaultAdd {
                path: vault_dir.clone(),
                id: Some("demo".into()),
                name: Some("Demo vault".into()),
                notes: vec![],
                standards: vec!["docs".into()],
                inbox: None,
                default: true,
            },
        )?;
    }
    let core = crate::cli::open_core(&home)?;
    // The demo's own PDF, so read_attachment_text can be tried; a real vault starts off.
    if !core.attachments().pdf_text_on("demo") {
        core.settings()
            .vault_pdf_text(&engine::core::Operator::cli(&user), "demo", true)?;
    }
    let name = format!("demo-{}", uuid::Uuid::now_v7().simple());
    let (cred, token) = core.credentials().issue_credential(
        &engine::core::Operator::cli(&user),
        &name,
        Tier::Full,
        vec![],
        None,
        false,
    )?;
    let exe = std::env::current_exe()?;
    // Bind before printing, so the printed URL carries the real port (`--port 0` picks one).
    let port = port.unwrap_or(core.config().server.port);
    let listener = if no_serve || stdio {
        None
    } else {
        let addr = crate::http::loopback_addr("127.0.0.1", port)?;
        Some(std::net::TcpListener::bind(addr).map_err(|e| {
            GatewayError::InvalidArgument(format!(
                "cannot listen on {addr}: {e}; pass --port N (0 = any free port)"
            ))
        })?)
    };
    let port = match &listener {
        Some(l) => l.local_addr()?.port(),
        None => port,
    };
    let target = crate::clientconf::Target {
        exe: &exe,
        home: &home.dir,
        port,
    };
    err(&format!(
        "vaultgate demo\n  vault: {}\n  home:  {}\n  credential: {} (tier full)\n\n{}\n",
        vault_dir.display(),
        home.dir.display(),
        cred.id.as_str(),
        crate::clientconf::render(None, &target, &cred, &token)
    ));
    // A login link for the review page of the server about to start (it works once, briefly).
    if listener.is_some() && core.config().review.enabled {
        let code = core
            .review()
            .mint_review_code(&engine::core::Operator::cli(&user))?;
        err(&format!(
            "review page: http://127.0.0.1:{port}/review/login?code={code}\n  (works once within {} s; \
             for another: vaultgate --home {} review)\n",
            core.config().review.login_code_ttl_seconds,
            home.dir.display()
        ));
    }
    let core = Arc::new(core);
    match listener {
        None if no_serve => Ok(()),
        None => {
            err("serving MCP over stdio (JSON-RPC on stdin/stdout); EOF to stop.");
            crate::serve::stdio(core, token)
        }
        Some(l) => crate::http::serve_std(
            core,
            l,
            crate::http::Extras {
                env: std::env::vars().collect(),
                tunnel: false,
                user,
            },
        ),
    }
}
