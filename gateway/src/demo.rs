//! `vaultgate demo`: a demo vault unpacked from the binary, a fresh home, a `full` credential, the
//! client configurations, then serving. Nothing outside the chosen folder is touched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use include_dir::{Dir, include_dir};
use policy::Tier;

use crate::cli::VaultAdd;
use crate::core::Core;
use crate::error::GatewayError;
use crate::home::Home;

static DEMO_VAULT: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/demo/vault");

fn err(s: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{s}");
}

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

pub fn run(dir: Option<PathBuf>, no_serve: bool, user: &str) -> Result<(), GatewayError> {
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
        crate::cli::add_vault(
            &home,
            VaultAdd {
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
    let core = Arc::new(Core::open(home.clone())?);
    let name = format!("demo-{}", crate::core::now_unix());
    let (cred, token) = core.issue_credential(user, &name, Tier::Full, vec![], None)?;
    let exe = std::env::current_exe()?;
    err(&format!(
        "vaultgate demo\n  vault: {}\n  home:  {}\n  credential: {} (tier full)\n\n{}\n",
        vault_dir.display(),
        home.dir.display(),
        cred.id.as_str(),
        crate::clientconf::render(None, &exe, &home.dir, &cred, &token)
    ));
    if no_serve {
        return Ok(());
    }
    err(
        "serving MCP over stdio on this terminal (JSON-RPC on stdin/stdout); Ctrl-C or EOF to stop.\n\
         To use a client instead, paste one of the configurations above.",
    );
    crate::serve::stdio(core, token)
}
