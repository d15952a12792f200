//! `vaultgate review`: a one-time login to the running server's review page, opened without the code in argv.

use super::*;

/// `vaultgate review`: a one-time login link for the live server of this home (docs/contract.md#the-review-page-and-in-client-approval).
pub(crate) fn review_cmd(home: &Home, open: bool, port: Option<u16>, user: &str) -> Result<(), GatewayError> {
    if !home.exists() {
        return Err(GatewayError::NoHome(home.dir.clone()));
    }
    let record = engine::review::read_server_record(home);
    let no_server = || {
        GatewayError::InvalidArgument(format!(
            "no vaultgate server of the home {} is running; start one with `vaultgate serve` \
             (or pass --port N for a server on another port)",
            home.dir.display()
        ))
    };
    let (host, port) = match (&record, port) {
        (_, Some(p)) => (
            record.as_ref().map_or("127.0.0.1".to_owned(), |r| r.host.clone()),
            p,
        ),
        (Some(r), None) => {
            // A record left by a server that was killed names a process that is gone.
            if !process_alive(r.pid) {
                return Err(no_server());
            }
            (r.host.clone(), r.port)
        }
        (None, None) => return Err(no_server()),
    };
    let addr = crate::http::loopback_addr(&host, port)?;
    let core = open_core(home)?;
    if !core.config().review.enabled {
        return Err(GatewayError::InvalidArgument(
            "the review page is off: set [review] enabled = true in gateway.toml and restart the server"
                .into(),
        ));
    }
    // SECURITY(T-REVIEW5): a code goes only to a server that proves it holds this home's secret;
    // whatever else listens on the port (another home's server, a squatter) gets nothing.
    let nonce = engine::review::new_nonce()?;
    match identify(addr, &nonce) {
        Some(proof) if core.review().is_server_proof(&nonce, &addr, &proof) => {}
        Some(_) => {
            return Err(GatewayError::InvalidArgument(format!(
                "the server on {addr} is not this home's ({}); start this home's with \
                 `vaultgate --home {} serve`, or pass the --port it listens on",
                home.dir.display(),
                home.dir.display()
            )));
        }
        None => return Err(no_server()),
    }
    let code = core.review().mint_review_code(&Operator::cli(user))?;
    let url = format!("http://{addr}/review/login?code={code}");
    out(&url);
    err(&format!(
        "open it within {} s; it works once (run `vaultgate review` again for another)",
        core.config().review.login_code_ttl_seconds
    ));
    if open {
        let page = write_login_redirect(home, &url)?;
        open_in_browser(&page);
    }
    Ok(())
}

/// The file `review --open` hands the browser: a page that redirects to the login link, written
/// with mode 0600 into the home (mode 0700), as Jupyter does.
// SECURITY(T-REVIEW6): the one-time code never stands in an argv, which every local user can read
// in `/proc/*/cmdline`; only the owner can read this file.
pub(crate) fn write_login_redirect(home: &Home, url: &str) -> Result<std::path::PathBuf, GatewayError> {
    use std::os::unix::fs::OpenOptionsExt;
    let href = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    let page = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={href}\">\
         <title>vaultgate review</title></head>\n<body><p>Opening the review page… \
         If nothing happens, <a href=\"{href}\">open it here</a>. The link works once.</p></body></html>\n"
    );
    let path = home.dir.join("review-login.html");
    // A new file (never one planted in its place), then renamed over the last one.
    let tmp = home.dir.join(format!(".review-login.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(page.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(path)
}

/// Asks the server on `addr` for its proof of `nonce` (`GET /review/identify`); `None` when
/// nothing answers like a vaultgate server within a few seconds.
pub(crate) fn identify(addr: std::net::SocketAddr, nonce: &str) -> Option<String> {
    use std::io::Read;
    let timeout = std::time::Duration::from_secs(3);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "GET /review/identify?nonce={nonce} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = Vec::new();
    // A proof is 64 hex digits; a few KiB is more than any honest answer.
    s.take(16 * 1024).read_to_end(&mut answer).ok()?;
    let text = String::from_utf8(answer).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let ok = head
        .lines()
        .next()
        .is_some_and(|l| l.split(' ').nth(1) == Some("200"));
    ok.then(|| body.trim().to_owned())
}

/// Whether a process with this id still runs (Linux: /proc; elsewhere assumed, the port check
/// decides).
pub(crate) fn process_alive(pid: u32) -> bool {
    let proc = std::path::Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

/// Opens `page` (a file) with the desktop's opener. Only the file's path is in the opener's argv.
pub(crate) fn open_in_browser(page: &std::path::Path) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener)
        .arg(page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => err("opened in your browser"),
        Err(e) => err(&format!(
            "could not run {opener} ({e}); open the link above yourself"
        )),
    }
}
