//! The supervisor inside `serve`: starts `tunnel-client`, watches its health, restarts it with backoff and stops it with the server.

use super::*;

pub(crate) struct Running {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) generation: u64,
}

/// Runs `tunnel-client` as the child of `serve`, one at a time.
pub struct Supervisor {
    pub(crate) core: Arc<Core>,
    /// The profile folder, opened and checked when `serve` started; or why it is not used (then
    /// the tunnel does not start, and nothing on record is ended).
    pub(crate) files: Result<Files, Refused>,
    /// The profile folder's lock, held for the supervisor's life: one `serve` of a home runs
    /// the tunnel; another one neither sweeps nor starts it (`None`: not ours).
    pub(crate) lock: Option<std::fs::File>,
    pub(crate) mcp_url: String,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) state: Mutex<Inner>,
    /// Serialises start and stop.
    pub(crate) turn: tokio::sync::Mutex<()>,
}

pub(crate) struct Inner {
    pub(crate) running: Option<Running>,
    pub(crate) status: Status,
    pub(crate) generation: u64,
}

impl Supervisor {
    /// For the server bound to `served`; ends an orphan of an earlier, crashed `serve`.
    pub async fn new(
        core: Arc<Core>,
        env: BTreeMap<String, String>,
        served: std::net::SocketAddr,
    ) -> Result<Arc<Supervisor>, GatewayError> {
        let base = cache_base(&env)?;
        let files = match open_profile(&base, &core.config().gateway_id, true) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(Refused {
                what: "the tunnel profile folder was not made".into(),
                next: String::new(),
            }),
            Err(r) => Err(r),
        };
        core.refresh();
        let config = core.config();
        let status = status(&core.home, &config, &env);
        let lock = match &files {
            Ok(f) => {
                let lock = f.lock();
                if lock.is_none() {
                    tracing::warn!(
                        "another serve of this home supervises the tunnel; this one leaves it alone"
                    );
                }
                lock
            }
            Err(r) => {
                tracing::warn!(reason = %r, "the tunnel profile folder is not used: the tunnel does not start");
                None
            }
        };
        let sup = Arc::new(Supervisor {
            mcp_url: format!("http://{served}/mcp"),
            core,
            files,
            lock,
            env,
            state: Mutex::new(Inner {
                running: None,
                status,
                generation: 0,
            }),
            turn: tokio::sync::Mutex::new(()),
        });
        sup.sweep_orphan().await;
        Ok(sup)
    }

    pub(crate) fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// SECURITY(T-TUNNEL2, T-TUNNEL5): ends the child an earlier `serve` left running, only
    /// if the record is vaultgate's own (a regular file of this user's, 0600, in a profile folder
    /// nobody else can write to) and the process it names is still that child ([`not_ours`]).
    /// Anything else is left alone, and logged.
    pub(crate) async fn sweep_orphan(&self) {
        let Ok(files) = &self.files else {
            return;
        };
        if self.lock.is_none() {
            return;
        }
        match files.child_record() {
            Ok(None) => {}
            Ok(Some(rec)) => {
                match not_ours(&rec) {
                    None => {
                        tracing::warn!(pid = rec.pid, "ending the tunnel-client left by an earlier serve");
                        end_process(&rec, Duration::from_secs(5)).await;
                    }
                    Some(why) => tracing::info!(%why, "the recorded tunnel-client no longer runs"),
                }
                files.remove(CHILD);
            }
            Err(why) => {
                tracing::warn!(%why, "child.json is not vaultgate's record: ignored, nothing is signalled");
            }
        }
        self.set_status(Phase::Stopped, None, None, None);
    }

    /// The status as this process knows it (the binary looked up now).
    pub fn status(&self) -> Status {
        let mut s = self.inner().status.clone();
        let config = self
            .core
            .home
            .load_config()
            .map(|c| c.tunnel)
            .unwrap_or_else(|_| self.core.config().tunnel.clone());
        let command = resolve(&config, self.env.get("PATH").map(String::as_str));
        s.set_up = config.tunnel_id.is_some() && self.core.home.tunnel_key_path().exists();
        with_lookup(s, command)
    }

    pub(crate) fn set_status(
        &self,
        phase: Phase,
        pid: Option<u32>,
        health: Option<Value>,
        error: Option<String>,
    ) {
        self.set_status_for(None, phase, pid, health, error);
    }

    /// As [`Supervisor::set_status`]; with `Some(generation)`, only while that child is the
    /// running one (checked under the same lock, so a Stop in between wins).
    pub(crate) fn set_status_for(
        &self,
        generation: Option<u64>,
        phase: Phase,
        pid: Option<u32>,
        health: Option<Value>,
        error: Option<String>,
    ) {
        let mut g = self.inner();
        if let Some(want) = generation
            && g.running.as_ref().map(|r| r.generation) != Some(want)
        {
            return;
        }
        g.status.phase = phase;
        g.status.pid = pid;
        if health.is_some() || phase != Phase::Connected {
            g.status.health = health.or(g.status.health.take());
        }
        if error.is_some() {
            g.status.last_error = error;
        } else if phase == Phase::Connected {
            g.status.last_error = None;
        }
        let text = serde_json::to_string(&g.status).unwrap_or_default();
        drop(g);
        // Only the supervisor of the home records (another serve's status is not this one's).
        if let Ok(files) = &self.files
            && self.lock.is_some()
            && let Err(e) = files.write(STATUS, &text)
        {
            tracing::warn!(error = %e, "recording the tunnel status failed");
        }
    }

    /// Starts the child (no-op while one runs), audited as the operator's action: the record
    /// comes first, so a start that cannot be audited does not happen.
    pub async fn start(self: &Arc<Self>, operator: &Operator) -> Result<(), GatewayError> {
        let _turn = self.turn.lock().await;
        self.record(operator, "tunnel.start", None).await?;
        let result = self.start_inner().await;
        if let Err(e) = &result {
            self.set_status(Phase::Failed, None, None, Some(e.to_string()));
            if let Err(r) = self.record(operator, "tunnel.start_failed", Some(e)).await {
                tracing::warn!(error = %r, "recording the failed tunnel start failed");
            }
        }
        result
    }

    pub(crate) async fn record(
        &self,
        operator: &Operator,
        event: &'static str,
        failed: Option<&GatewayError>,
    ) -> Result<(), GatewayError> {
        let core = self.core.clone();
        let op = operator.clone();
        let failed = failed.map(|e| GatewayError::Config(e.to_string()));
        tokio::task::spawn_blocking(move || {
            core.settings()
                .record_operator_action(&op, event, "tunnel", failed.as_ref())
        })
        .await
        .map_err(|_| GatewayError::Internal("the audit worker stopped".into()))?
    }

    pub(crate) async fn start_inner(self: &Arc<Self>) -> Result<(), GatewayError> {
        let files = self
            .files
            .as_ref()
            .map_err(|r| GatewayError::Config(format!("{r}; then restart `vaultgate serve`")))?;
        if self.lock.is_none() {
            return Err(GatewayError::Config(
                "another `vaultgate serve` of this home runs the tunnel; start it there".into(),
            ));
        }
        {
            let mut g = self.inner();
            // A child that exited unnoticed is not running.
            let exited = g
                .running
                .as_mut()
                .is_some_and(|r| !matches!(r.child.try_wait(), Ok(None)));
            if exited {
                g.running = None;
            }
            if g.running.is_some() {
                return Ok(());
            }
        }
        // Read fresh: `tunnel setup` may have run while this server was up.
        let config = &self.core.home.load_config()?.tunnel;
        let tunnel_id = config.tunnel_id.clone().ok_or_else(|| {
            GatewayError::Config("the tunnel is not set up: run `vaultgate tunnel setup`".into())
        })?;
        let bin = resolve(config, self.env.get("PATH").map(String::as_str))
            .ok_or_else(|| GatewayError::Config(format!("tunnel-client was not found; {INSTALL}")))?;
        let key = read_api_key(&self.core.home.tunnel_key_path()).map_err(|_| {
            GatewayError::Config("tunnel.key is missing or damaged: run `vaultgate tunnel setup`".into())
        })?;
        let core = self.core.clone();
        let token = tokio::task::spawn_blocking(move || core.settings().tunnel_token())
            .await
            .map_err(|_| GatewayError::Internal("the token worker stopped".into()))??;
        files.remove(HEALTH_URL);
        files.write(PROFILE, &profile(&tunnel_id, &files.dir, &self.mcp_url))?;
        // The log of the latest run: what a `failed` phase points at. O_APPEND: the child always
        // writes at the end, so cutting the file back works.
        let log = files.create(LOG, true)?;
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let mut cmd = tokio::process::Command::new(&bin);
        cmd.arg("run")
            .arg("--config")
            .arg(files.profile())
            .env_clear()
            .envs(allowed_env(&self.env))
            .env(KEY_VAR, &key)
            .env(AUTH_VAR, format!("Bearer {}", token.expose()))
            .env(MARK_VAR, &mark)
            .current_dir(&files.dir)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| GatewayError::Config(format!("starting {} failed: {e}", bin.display())))?;
        let pid = child
            .id()
            .ok_or_else(|| GatewayError::Internal("tunnel-client exited at once".into()))?;
        match identify(pid, &mark, &bin) {
            Some(record) => files.write(
                CHILD,
                &serde_json::to_string(&record).map_err(|e| GatewayError::Internal(e.to_string()))?,
            )?,
            None => {
                files.remove(CHILD);
                tracing::warn!(
                    pid,
                    "tunnel-client cannot be identified: a crash would leave it running"
                );
            }
        }
        let generation = {
            let mut g = self.inner();
            g.generation += 1;
            let generation = g.generation;
            g.running = Some(Running {
                child,
                pid,
                generation,
            });
            g.status.last_error = None;
            generation
        };
        tracing::info!(pid, "started tunnel-client");
        self.set_status(Phase::Starting, Some(pid), None, None);
        tokio::spawn(self.clone().watch(bin, generation));
        Ok(())
    }

    /// Follows one child: its exit, and its health (every second while it starts, every ten
    /// once connected).
    pub(crate) async fn watch(self: Arc<Self>, bin: PathBuf, generation: u64) {
        let Ok(files) = &self.files else {
            return;
        };
        loop {
            let connected = self.inner().status.phase == Phase::Connected;
            tokio::time::sleep(if connected {
                Duration::from_secs(10)
            } else {
                Duration::from_secs(1)
            })
            .await;
            let exited = {
                let mut g = self.inner();
                match g.running.as_mut() {
                    Some(r) if r.generation == generation => r.child.try_wait().ok().flatten(),
                    // Stopped, or replaced by a newer child.
                    _ => return,
                }
            };
            if let Some(code) = exited {
                let pid = {
                    let mut g = self.inner();
                    g.running.take().map(|r| r.pid)
                };
                files.remove(CHILD);
                tracing::warn!(?pid, %code, "tunnel-client exited");
                self.set_status(
                    Phase::Failed,
                    None,
                    None,
                    Some(format!(
                        "tunnel-client exited ({code}); see {}",
                        files.log().display()
                    )),
                );
                return;
            }
            bound_log(files);
            let (phase, health, error) = self.health(files, &bin).await;
            let pid = self.inner().running.as_ref().map(|r| r.pid);
            self.set_status_for(Some(generation), phase, pid, health, error);
        }
    }

    /// Readiness is the control-plane poll, not `/readyz` (docs/contract.md#the-chatgpt-tunnel).
    pub(crate) async fn health(&self, files: &Files, bin: &Path) -> (Phase, Option<Value>, Option<String>) {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(["health", "--url-file"])
            .arg(files.health_url())
            .args(["--require-control-plane-poll", "--json"])
            .env_clear()
            .envs(allowed_env(&self.env))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        // Five seconds and 64 KiB: the answer is a small JSON object.
        let read = async {
            use tokio::io::AsyncReadExt as _;
            let mut child = cmd.spawn()?;
            let mut stdout = Vec::new();
            if let Some(out) = child.stdout.take() {
                out.take(HEALTH_MAX_BYTES).read_to_end(&mut stdout).await?;
            }
            let _ = child.kill().await;
            Ok::<_, std::io::Error>(stdout)
        };
        let stdout = match tokio::time::timeout(Duration::from_secs(5), read).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return (Phase::Starting, None, Some(format!("tunnel-client health: {e}"))),
            Err(_) => {
                return (
                    Phase::Starting,
                    None,
                    Some("tunnel-client health did not answer in 5 s".into()),
                );
            }
        };
        let Ok(health) = serde_json::from_slice::<Value>(&stdout) else {
            return (
                Phase::Starting,
                None,
                Some("tunnel-client health printed no JSON".into()),
            );
        };
        let polled = health.pointer("/control_plane_poll/ok") == Some(&Value::Bool(true));
        if polled {
            (Phase::Connected, Some(health), None)
        } else {
            let why = health
                .pointer("/control_plane_poll/error")
                .and_then(Value::as_str)
                .map(|e| format!("not connected yet: {}", policy::text::escape(e)));
            (Phase::Starting, Some(health), why)
        }
    }

    /// Stops the child (SIGTERM, then SIGKILL after 5 s), audited when an operator asked.
    pub async fn stop(&self, operator: Option<&Operator>) -> Result<(), GatewayError> {
        let _turn = self.turn.lock().await;
        let running = self.inner().running.take();
        if let Some(mut r) = running {
            // Our own child, and `try_wait` says it is not reaped: its pid cannot belong to
            // anyone else, so it is signalled without the identity check an orphan needs.
            if matches!(r.child.try_wait(), Ok(None)) {
                signal(r.pid, rustix::process::Signal::TERM);
            }
            if tokio::time::timeout(Duration::from_secs(5), r.child.wait())
                .await
                .is_err()
            {
                let _ = r.child.kill().await;
            }
            tracing::info!(pid = r.pid, "stopped tunnel-client");
        }
        if let Ok(files) = &self.files
            && self.lock.is_some()
        {
            files.remove(CHILD);
        }
        self.set_status(Phase::Stopped, None, None, None);
        if let Some(op) = operator {
            self.record(op, "tunnel.stop", None).await?;
        }
        Ok(())
    }
}
