//! The seam to a vault's git repository (docs/contract.md#git-history), through the `git` CLI's plumbing.
//!
//! SECURITY(T-GIT1): nothing here may run a program or prompt on the user's behalf. Every command
//! runs with an empty environment (no inherited `GIT_*`, no system or global configuration), with
//! hooks pointed at nothing (plumbing fires some: `reference-transaction`, `post-index-change`),
//! no fsmonitor, no signing, no auto-gc, and never reads a work-tree file (blobs are written from
//! bytes with `--no-filters`, so no clean/smudge filter runs). Every output is bounded, every
//! command has a deadline. Nothing is ever pushed or fetched.
//!
//! A commit is built from a parent's tree plus exactly the changed paths (only the folders on
//! their way are rewritten: the cost follows the change, not the repository), and only the index
//! entries of exactly those paths are touched.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A bound on any one git command: a repository on a hung disk must not hold the write lock.
const DEADLINE: Duration = Duration::from_secs(30);
/// The most any command may print (a tree listing of a huge folder, a note's blob).
const MAX_OUTPUT: usize = 64 << 20;

/// Configuration given to every command (as `GIT_CONFIG_COUNT`/`_KEY_n`/`_VALUE_n`, which wins
/// over the repository's own and, unlike `-c key=value`, cannot be misparsed when a name the
/// repository chose holds a `=`).
const OVERRIDES: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("commit.gpgSign", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("credential.helper", ""),
    ("core.sshCommand", ""),
    // SECURITY(T-GIT5): a repository's `protocol.<name>.allow = always` beats the general
    // `protocol.allow`, so every transport git has is named too (and GIT_ALLOW_PROTOCOL, below,
    // allows none, whatever the name); beside GIT_NO_LAZY_FETCH, a hostile promisor
    // (`ext::sh -c …`) has two locks to pass.
    ("protocol.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.fd.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.http.allow", "never"),
    ("protocol.https.allow", "never"),
    ("protocol.ftp.allow", "never"),
    ("protocol.ftps.allow", "never"),
    ("trace2.normalTarget", "0"),
    ("trace2.perfTarget", "0"),
    ("trace2.eventTarget", "0"),
];

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The repository cannot take a commit now; the commit waits in the queue.
    #[error("the repository is busy: {0}")]
    Busy(String),
    #[error("git {command} failed: {detail}")]
    Failed { command: String, detail: String },
    #[error("git could not be run: {0}")]
    Spawn(std::io::Error),
}

/// A file of a commit: its mode and blob id, or `None` for a path the commit removes.
pub type TreeEntry = Option<(String, String)>;

/// The regular-file mode of a note.
pub const FILE_MODE: &str = "100644";

/// A vault's repository: the work tree holding the vault folder.
#[derive(Debug, Clone)]
pub struct Repo {
    program: PathBuf,
    top: PathBuf,
    git_dir: PathBuf,
    /// The vault folder relative to the work tree, with a trailing `/` (or empty).
    prefix: String,
    /// `filter.<driver>.*` emptied for every driver the repository's configuration names: git
    /// runs a clean filter even from `update-index --index-info`, when it re-checks a "racily
    /// clean" entry of the user's index against its work-tree file.
    no_filters: Vec<(String, String)>,
    /// The all-zero object id of the repository's hash (SHA-1 or SHA-256).
    null_id: String,
}

/// What `git` to run; the edge may name one, else `git` is looked up by the OS.
#[derive(Debug, Clone)]
pub struct Program(pub PathBuf);

/// The program the edge found on the operator's `PATH` (the engine reads no environment).
static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

impl Default for Program {
    fn default() -> Self {
        Program(PROGRAM.get().cloned().unwrap_or_else(|| PathBuf::from("git")))
    }
}

impl Program {
    /// Sets, once per process, the `git` every repository is committed with: the first
    /// executable `git` in `path_var` (the operator's `PATH`). Every command runs with a cleared
    /// environment, so without this the OS would search only its default path.
    pub fn use_path(path_var: &str) {
        let found = std::env::split_paths(path_var)
            .filter(|d| d.is_absolute())
            .map(|d| d.join("git"))
            .find(|p| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            });
        if let Some(p) = found {
            let _ = PROGRAM.set(p);
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

fn base_command(program: &Path, dir: &Path, extra: &[(String, String)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        // Set and empty: git then ignores every `protocol.*` setting and allows no transport.
        .env("GIT_ALLOW_PROTOCOL", "");
    let all = OVERRIDES
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .chain(extra.iter().cloned());
    let mut n = 0;
    for (i, (k, v)) in all.enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
        n = i + 1;
    }
    cmd.env("GIT_CONFIG_COUNT", n.to_string()).arg("-C").arg(dir);
    cmd
}

/// Runs `cmd` with `input` on stdin, bounded in time and output; the stdout on success.
pub(crate) fn run(cmd: Command, what: &str, input: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
    run_within(cmd, what, input, DEADLINE)
}

/// [`run`] with its own deadline (a push must leave time to settle its outcome).
pub(crate) fn run_within(
    mut cmd: Command,
    what: &str,
    input: Option<&[u8]>,
    deadline: Duration,
) -> Result<Vec<u8>, GitError> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(GitError::Spawn)?;
    // Written from a thread, so a git that never reads its input is still killed at the deadline.
    let writer = match (input, child.stdin.take()) {
        (Some(bytes), Some(mut stdin)) => {
            let bytes = bytes.to_vec();
            Some(std::thread::spawn(move || {
                let _ = stdin.write_all(&bytes);
            }))
        }
        _ => None,
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(e) = stderr {
            let _ = e.take(8 << 10).read_to_end(&mut buf);
        }
        buf
    });
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = stdout {
            let _ = o.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut buf);
        }
        buf
    });
    let status = loop {
        match child.try_wait().map_err(GitError::Spawn)? {
            Some(s) => break s,
            None if start.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GitError::Failed {
                    command: what.into(),
                    detail: format!("no answer within {}s", deadline.as_secs_f32()),
                });
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    if out.len() > MAX_OUTPUT {
        return Err(GitError::Failed {
            command: what.into(),
            detail: "output over the limit".into(),
        });
    }
    if !status.success() {
        let detail = policy::text::escape_line(String::from_utf8_lossy(&err).trim());
        if detail.contains(".lock") && (detail.contains("File exists") || detail.contains("cannot lock")) {
            return Err(GitError::Busy(format!(
                "another git process holds a lock ({detail})"
            )));
        }
        return Err(GitError::Failed {
            command: what.into(),
            detail,
        });
    }
    Ok(out)
}

fn text(out: Vec<u8>) -> String {
    String::from_utf8_lossy(&out).trim_end_matches('\n').to_owned()
}

/// One entry of a tree listing: mode, type, id.
type Listed = (String, String, String);

impl Repo {
    /// The repository whose work tree holds `vault_root`; `None` when it is in none.
    pub fn discover(program: &Program, vault_root: &Path) -> Result<Option<Repo>, GitError> {
        let mut cmd = base_command(&program.0, vault_root, &[]);
        cmd.args([
            "rev-parse",
            "--show-object-format",
            "--is-inside-work-tree",
            "--show-toplevel",
            "--absolute-git-dir",
            "--show-prefix",
        ]);
        let out = match run(cmd, "rev-parse", None) {
            Ok(o) => text(o),
            // Anything else (dubious ownership, a broken config, a timeout) is said as it is.
            Err(GitError::Failed { detail, .. }) if detail.contains("not a git repository") => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let mut lines = out.lines();
        let null_id = match lines.next() {
            Some("sha256") => "0".repeat(64),
            _ => "0".repeat(40),
        };
        if lines.next() != Some("true") {
            return Ok(None);
        }
        let (Some(top), Some(git_dir)) = (lines.next(), lines.next()) else {
            return Ok(None);
        };
        let prefix = lines.next().unwrap_or("").to_owned();
        let top = PathBuf::from(top);
        let mut cmd = base_command(&program.0, &top, &[]);
        cmd.args(["config", "--null", "--name-only", "--get-regexp", "^filter\\."]);
        // Exit 1: no filter is configured.
        let names = match run(cmd, "config", None) {
            Ok(o) => o,
            Err(GitError::Failed { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut drivers: Vec<String> = names
            .split(|b| *b == 0)
            .filter_map(|k| {
                let k = std::str::from_utf8(k).ok()?;
                let rest = k.strip_prefix("filter.")?;
                rest.rsplit_once('.').map(|(driver, _)| driver.to_owned())
            })
            .collect();
        drivers.sort();
        drivers.dedup();
        let no_filters = drivers
            .iter()
            .flat_map(|d| {
                [
                    ("clean", ""),
                    ("smudge", ""),
                    ("process", ""),
                    ("required", "false"),
                ]
                .map(|(k, v)| (format!("filter.{d}.{k}"), v.to_owned()))
            })
            .collect();
        Ok(Some(Repo {
            program: program.0.clone(),
            top,
            git_dir: PathBuf::from(git_dir),
            prefix,
            no_filters,
            null_id,
        }))
    }

    /// The work tree's top folder.
    pub fn top(&self) -> &Path {
        &self.top
    }

    /// A vault path as the repository names it.
    pub fn repo_path(&self, vault_path: &str) -> String {
        format!("{}{vault_path}", self.prefix)
    }

    fn git(&self) -> Command {
        base_command(&self.program, &self.top, &self.no_filters)
    }

    /// Why a commit cannot be made now, if it cannot: another process's lock, or a merge,
    /// rebase, cherry-pick or revert in progress (its state must not be committed over).
    pub fn busy(&self) -> Option<String> {
        let d = &self.git_dir;
        let checks: [(&str, &str); 9] = [
            (
                "index.lock",
                "another git process holds the index lock (.git/index.lock)",
            ),
            ("HEAD.lock", "another git process holds HEAD's lock"),
            ("MERGE_HEAD", "a merge is in progress"),
            ("rebase-merge", "a rebase is in progress"),
            ("rebase-apply", "a rebase or am is in progress"),
            ("CHERRY_PICK_HEAD", "a cherry-pick is in progress"),
            ("REVERT_HEAD", "a revert is in progress"),
            ("sequencer", "a cherry-pick or revert sequence is in progress"),
            ("BISECT_START", "a bisect is in progress"),
        ];
        if let Some((_, why)) = checks.iter().find(|(f, _)| d.join(f).symlink_metadata().is_ok()) {
            return Some((*why).to_owned());
        }
        // A detached HEAD is a place the user visits: a commit there would be lost on return.
        let mut head = Vec::new();
        let attached = std::fs::File::open(d.join("HEAD"))
            .and_then(|f| f.take(4096).read_to_end(&mut head))
            .is_ok_and(|_| head.starts_with(b"ref: "));
        (!attached).then(|| "HEAD is detached: vaultgate commits only onto a branch".to_owned())
    }

    /// The commit `HEAD` names; `None` on an unborn branch.
    pub fn head(&self) -> Result<Option<String>, GitError> {
        let mut cmd = self.git();
        cmd.args(["rev-parse", "-q", "--verify", "HEAD^{commit}"]);
        match run(cmd, "rev-parse HEAD", None) {
            Ok(o) => Ok(Some(text(o))),
            Err(GitError::Failed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores `bytes` as a blob, exactly (no filter runs); its id.
    pub fn write_blob(&self, bytes: &[u8]) -> Result<String, GitError> {
        let mut cmd = self.git();
        cmd.args(["hash-object", "-w", "--no-filters", "--stdin"]);
        Ok(text(run(cmd, "hash-object", Some(bytes))?))
    }

    /// The blob id at `path` (a repository path) in `rev`'s tree, if a regular file is there.
    pub fn blob_id(&self, rev: &str, path: &str) -> Result<Option<String>, GitError> {
        let (dir, name) = match path.rsplit_once('/') {
            Some((d, n)) => (Some(d), n),
            None => (None, path),
        };
        let tree = match dir {
            Some(d) => format!("{rev}:{d}"),
            None => format!("{rev}^{{tree}}"),
        };
        let Some(entries) = self.ls_tree_opt(&tree)? else {
            return Ok(None);
        };
        Ok(entries
            .get(name.as_bytes())
            .filter(|(mode, kind, _)| kind == "blob" && mode.starts_with("100"))
            .map(|(_, _, id)| id.clone()))
    }

    /// A blob's bytes, at most `limit`.
    pub fn read_blob(&self, id: &str, limit: usize) -> Result<Option<Vec<u8>>, GitError> {
        if !id.bytes().all(|b| b.is_ascii_hexdigit()) || id.is_empty() {
            return Ok(None);
        }
        let mut cmd = self.git();
        cmd.args(["cat-file", "blob", id]);
        match run(cmd, "cat-file", None) {
            Ok(o) if o.len() <= limit => Ok(Some(o)),
            Ok(_) => Ok(None),
            Err(GitError::Failed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A tree's entries by raw name (names need not be UTF-8); `None` when `treeish` names none.
    fn ls_tree_opt(&self, treeish: &str) -> Result<Option<BTreeMap<Vec<u8>, Listed>>, GitError> {
        match self.ls_tree(treeish) {
            Ok(map) => Ok(Some(map)),
            Err(GitError::Failed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn ls_tree(&self, treeish: &str) -> Result<BTreeMap<Vec<u8>, Listed>, GitError> {
        let mut cmd = self.git();
        cmd.args(["ls-tree", "-z", "--full-tree", treeish]);
        let out = run(cmd, "ls-tree", None)?;
        let mut map = BTreeMap::new();
        for rec in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let Some(tab) = rec.iter().position(|b| *b == b'\t') else {
                continue;
            };
            let (meta, name) = (String::from_utf8_lossy(&rec[..tab]), &rec[tab + 1..]);
            let mut it = meta.split(' ');
            if let (Some(mode), Some(kind), Some(id)) = (it.next(), it.next(), it.next()) {
                map.insert(name.to_vec(), (mode.to_owned(), kind.to_owned(), id.to_owned()));
            }
        }
        Ok(map)
    }

    fn mktree(&self, entries: &BTreeMap<Vec<u8>, Listed>) -> Result<String, GitError> {
        let mut input = Vec::new();
        for (name, (mode, kind, id)) in entries {
            input.extend_from_slice(format!("{mode} {kind} {id}\t").as_bytes());
            input.extend_from_slice(name);
            input.push(0);
        }
        let mut cmd = self.git();
        // `--missing`: a partial clone may lack a sibling's object, which this tree only names.
        cmd.args(["mktree", "-z", "--missing"]);
        Ok(text(run(cmd, "mktree", Some(&input))?))
    }

    /// The tree of `base` (a tree id; `None`: empty) with `changes` (repository paths) made.
    pub fn tree_with(
        &self,
        base: Option<&str>,
        changes: &BTreeMap<String, TreeEntry>,
    ) -> Result<String, GitError> {
        let parts: Vec<(Vec<&str>, &TreeEntry)> =
            changes.iter().map(|(p, e)| (p.split('/').collect(), e)).collect();
        let refs: Vec<(&[&str], &TreeEntry)> = parts.iter().map(|(p, e)| (p.as_slice(), *e)).collect();
        match self.edit(base, &refs, true)? {
            Some(id) => Ok(id),
            None => self.mktree(&BTreeMap::new()),
        }
    }

    /// Rewrites one folder; `None` when it ends empty (and is not the root).
    fn edit(
        &self,
        tree: Option<&str>,
        changes: &[(&[&str], &TreeEntry)],
        root: bool,
    ) -> Result<Option<String>, GitError> {
        // A folder that cannot be listed is an error, never an empty one: its files would vanish.
        let mut entries = match tree {
            Some(t) => self.ls_tree(t)?,
            None => BTreeMap::new(),
        };
        let mut deeper: BTreeMap<&str, Vec<(&[&str], &TreeEntry)>> = BTreeMap::new();
        for (parts, entry) in changes {
            match parts {
                [] => {}
                [name] => match entry {
                    Some((mode, id)) => {
                        entries.insert(
                            name.as_bytes().to_vec(),
                            (mode.clone(), "blob".into(), id.clone()),
                        );
                    }
                    None => {
                        entries.remove(name.as_bytes());
                    }
                },
                [name, rest @ ..] => deeper.entry(name).or_default().push((rest, entry)),
            }
        }
        for (name, sub) in deeper {
            let current = match entries.get(name.as_bytes()) {
                None => None,
                Some((_, kind, id)) if kind == "tree" => Some(id.clone()),
                // A submodule, a symlink or a file where the note's folder is: committing the
                // note here would replace it. The commit waits; doctor says why.
                Some((mode, kind, _)) => {
                    return Err(GitError::Failed {
                        command: "commit".into(),
                        detail: format!(
                            "'{}' is a {} ({mode}) in HEAD, not a folder: vaultgate does not commit notes inside it",
                            policy::text::escape_line(name),
                            if kind == "commit" {
                                "submodule"
                            } else {
                                kind.as_str()
                            }
                        ),
                    });
                }
            };
            match self.edit(current.as_deref(), &sub, false)? {
                Some(id) => {
                    entries.insert(name.as_bytes().to_vec(), ("040000".into(), "tree".into(), id));
                }
                None => {
                    entries.remove(name.as_bytes());
                }
            }
        }
        if entries.is_empty() && !root {
            return Ok(None);
        }
        self.mktree(&entries).map(Some)
    }

    /// The tree id of commit `rev`.
    pub fn tree_of(&self, rev: &str) -> Result<String, GitError> {
        let mut cmd = self.git();
        cmd.args(["rev-parse", "--verify", &format!("{rev}^{{tree}}")]);
        Ok(text(run(cmd, "rev-parse tree", None)?))
    }

    /// A commit object (never signed); its id. Committed at the author's date, never the clock's:
    /// the same inputs make the same commit, on any machine (a team job's commit is built again
    /// from its row).
    pub fn commit_tree(
        &self,
        tree: &str,
        parent: Option<&str>,
        message: &str,
        who: &Identity,
    ) -> Result<String, GitError> {
        let mut cmd = self.git();
        cmd.env("GIT_AUTHOR_NAME", &who.author_name)
            .env("GIT_AUTHOR_EMAIL", &who.author_email)
            .env("GIT_AUTHOR_DATE", &who.author_date)
            .env("GIT_COMMITTER_NAME", "vaultgate")
            .env("GIT_COMMITTER_EMAIL", "vaultgate@vaultgate.invalid")
            .env("GIT_COMMITTER_DATE", &who.author_date)
            .args(["commit-tree", "--no-gpg-sign", tree]);
        if let Some(p) = parent {
            cmd.args(["-p", p]);
        }
        cmd.args(["-F", "-"]);
        Ok(text(run(cmd, "commit-tree", Some(message.as_bytes()))?))
    }

    /// Sets the index entries of exactly `entries` (repository paths); every other entry stays.
    pub fn set_index(&self, entries: &BTreeMap<String, TreeEntry>) -> Result<(), GitError> {
        let zero = &self.null_id;
        let mut input = Vec::new();
        for (path, e) in entries {
            match e {
                Some((mode, id)) => input.extend_from_slice(format!("{mode} {id}\t{path}").as_bytes()),
                None => input.extend_from_slice(format!("0 {zero}\t{path}").as_bytes()),
            }
            input.push(0);
        }
        let mut cmd = self.git();
        cmd.args(["update-index", "-z", "--index-info"]);
        run(cmd, "update-index", Some(&input)).map(|_| ())
    }

    /// Moves `HEAD` (its branch) from `old` to `new`; false when it is no longer at `old`.
    pub fn update_head(&self, new: &str, old: Option<&str>, reason: &str) -> Result<bool, GitError> {
        let mut cmd = self.git();
        cmd.args(["update-ref", "-m", reason, "HEAD", new]);
        // An empty old value: HEAD's branch must not exist yet.
        cmd.arg(old.unwrap_or(""));
        match run(cmd, "update-ref", None) {
            Ok(_) => Ok(true),
            Err(GitError::Busy(why)) => Err(GitError::Busy(why)),
            Err(GitError::Failed { detail, .. })
                if detail.contains("but expected") || detail.contains("already exists") =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether commit `a` is `b` or one of its ancestors.
    pub fn is_ancestor(&self, a: &str, b: &str) -> Result<bool, GitError> {
        let mut cmd = self.git();
        cmd.args(["merge-base", "--is-ancestor", a, b]);
        match run(cmd, "merge-base", None) {
            Ok(_) => Ok(true),
            // Exit 1: not an ancestor; an unknown id (never written, or gc'd) is not one either.
            Err(GitError::Failed { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Adds `patterns` to the repository's `info/exclude` where missing.
    pub fn exclude(&self, patterns: &[String]) -> Result<(), GitError> {
        let mut cmd = self.git();
        cmd.args(["rev-parse", "--git-path", "info/exclude"]);
        let path = PathBuf::from(text(run(cmd, "rev-parse --git-path", None)?));
        let path = if path.is_absolute() {
            path
        } else {
            self.top.join(path)
        };
        // SECURITY(T-GIT1): the one file vaultgate writes in the repository; a symlink there (or
        // at its folder) could point anywhere.
        for p in [Some(path.as_path()), path.parent()].into_iter().flatten() {
            if p.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(GitError::Failed {
                    command: "info/exclude".into(),
                    detail: format!(
                        "{} is a symbolic link; vaultgate does not write through it",
                        p.display()
                    ),
                });
            }
        }
        let io = |e: std::io::Error| GitError::Failed {
            command: "info/exclude".into(),
            detail: e.to_string(),
        };
        // Bounded: the user's file, read only to find our lines (a larger one is refused).
        const MAX_EXCLUDE: u64 = 1 << 20;
        let current = match std::fs::File::open(&path) {
            Ok(f) => {
                let mut buf = Vec::new();
                f.take(MAX_EXCLUDE + 1).read_to_end(&mut buf).map_err(io)?;
                if buf.len() as u64 > MAX_EXCLUDE {
                    return Err(io(std::io::Error::other(
                        "over 1 MiB; vaultgate does not edit it",
                    )));
                }
                String::from_utf8_lossy(&buf).into_owned()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(e)),
        };
        let missing: Vec<&String> = patterns
            .iter()
            .filter(|p| !current.lines().any(|l| l.trim() == p.as_str()))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        let mut add = String::new();
        if !current.is_empty() && !current.ends_with('\n') {
            add.push('\n');
        }
        add.push_str("# vaultgate's own data (vaultgate vault git … on)\n");
        for p in missing {
            add.push_str(p);
            add.push('\n');
        }
        f.write_all(add.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)
    }

    /// An exclude pattern anchored at the vault folder.
    pub fn anchored(&self, vault_path: &str) -> String {
        // Glob characters in folder names match literally only when escaped.
        let escaped: String = format!("{}{vault_path}", self.prefix)
            .chars()
            .flat_map(|c| match c {
                '\\' | '*' | '?' | '[' | '!' | '#' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        format!("/{escaped}/")
    }
}

/// Who a commit is by.
#[derive(Debug, Clone)]
pub struct Identity {
    pub author_name: String,
    pub author_email: String,
    /// RFC 3339; git reads it.
    pub author_date: String,
}

/// A name fit for an author line: no `<`, `>`, newline or control character (git would cut or
/// refuse them, and they could forge the line).
pub fn clean_name(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c == '<' || c == '>' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    let out = out.trim().to_owned();
    if out.is_empty() { "unknown".into() } else { out }
}

/// The local part of an author email: only `[A-Za-z0-9._-]`.
pub fn clean_email_local(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if out.is_empty() { "unknown".into() } else { out }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// SECURITY(T-GIT5): a repository that allows the `ext` transport for itself and names an
    /// `ext::sh -c …` remote gets no transport from a command vaultgate runs: a fetch (what a
    /// lazy fetch of a partial clone would do) never runs the remote's command.
    #[test]
    fn no_transport_runs_whatever_the_repository_allows() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        let marker = d.join("ran");
        git(d, &["config", "protocol.ext.allow", "always"]);
        git(d, &["config", "protocol.allow", "always"]);
        git(
            d,
            &[
                "config",
                "remote.origin.url",
                &format!("ext::sh -c touch% {}", marker.display()),
            ],
        );
        git(
            d,
            &[
                "config",
                "remote.origin.fetch",
                "+refs/heads/*:refs/remotes/origin/*",
            ],
        );
        let program = Program::default();
        for args in [vec!["fetch", "origin"], vec!["ls-remote", "origin"]] {
            let mut cmd = base_command(program.path(), d, &[]);
            cmd.args(&args);
            let out = cmd.output().unwrap();
            assert!(!out.status.success(), "git {args:?} succeeded");
            assert!(!marker.exists(), "git {args:?} ran the remote's command");
        }
        // Control: the same fetch with the repository's own settings runs it.
        let _ = Command::new("git")
            .arg("-C")
            .arg(d)
            .args(["fetch", "origin"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", d)
            .output()
            .unwrap();
        assert!(
            marker.exists(),
            "the control fetch did not run the remote's command"
        );
    }

    #[test]
    fn a_tree_edit_touches_exactly_its_paths() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(d.join("v/sub")).unwrap();
        std::fs::write(d.join("v/sub/a.md"), "a").unwrap();
        std::fs::write(d.join("v/b.md"), "b").unwrap();
        std::fs::write(d.join("top.txt"), "t").unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "base"]);
        let repo = Repo::discover(&Program::default(), &d.join("v"))
            .unwrap()
            .unwrap();
        assert_eq!(repo.repo_path("x.md"), "v/x.md");
        let head = repo.head().unwrap().unwrap();
        let blob = repo.write_blob(b"new").unwrap();
        let mut changes = BTreeMap::new();
        changes.insert(repo.repo_path("sub/a.md"), None);
        changes.insert(
            repo.repo_path("deep/er/c.md"),
            Some((FILE_MODE.to_owned(), blob.clone())),
        );
        let tree = repo
            .tree_with(Some(&repo.tree_of(&head).unwrap()), &changes)
            .unwrap();
        let who = Identity {
            author_name: clean_name("agent <x>"),
            author_email: "c1@vaultgate.invalid".into(),
            author_date: "2026-01-01T00:00:00Z".into(),
        };
        let commit = repo.commit_tree(&tree, Some(&head), "patch x\n", &who).unwrap();
        assert!(repo.update_head(&commit, Some(&head), "vaultgate").unwrap());
        assert!(
            !repo.update_head(&commit, Some(&head), "vaultgate").unwrap(),
            "CAS"
        );
        let files = git(d, &["ls-tree", "-r", "--name-only", "HEAD"]);
        assert_eq!(
            files.lines().collect::<Vec<_>>(),
            ["top.txt", "v/b.md", "v/deep/er/c.md"]
        );
        assert_eq!(
            git(d, &["log", "-1", "--format=%an <%ae>|%cn"]),
            "agent _x_ <c1@vaultgate.invalid>|vaultgate"
        );
        assert_eq!(
            repo.blob_id("HEAD", "v/deep/er/c.md").unwrap(),
            Some(blob.clone())
        );
        assert_eq!(repo.read_blob(&blob, 10).unwrap().unwrap(), b"new");
        assert_eq!(repo.blob_id("HEAD", "v/sub/a.md").unwrap(), None);
        repo.set_index(&changes).unwrap();
        assert_eq!(git(d, &["diff", "--cached", "--name-only"]), "");
        assert!(repo.busy().is_none());
        std::fs::write(d.join(".git/index.lock"), "").unwrap();
        assert!(repo.busy().is_some());
        assert!(matches!(repo.set_index(&changes), Err(GitError::Busy(_))));
    }

    #[test]
    fn the_repositorys_filters_never_run_even_for_racily_clean_entries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        let marker = d.join("ran");
        let script = d.join("trap.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho x >> '{}'\ncat\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let script = script.display().to_string();
        git(d, &["config", "filter.trap.clean", &script]);
        std::fs::write(d.join(".git/info/attributes"), "* filter=trap\n").unwrap();
        std::fs::write(d.join("a.md"), "a").unwrap();
        // Added in the same second as the index is written: the entry is "racily clean", and git
        // re-reads the file (through its clean filter) whenever it writes the index again.
        git(d, &["add", "a.md"]);
        assert!(marker.exists(), "the trap works");
        std::fs::remove_file(&marker).unwrap();
        let repo = Repo::discover(&Program::default(), d).unwrap().unwrap();
        let blob = repo.write_blob(b"b").unwrap();
        let mut changes = BTreeMap::new();
        changes.insert("b.md".to_owned(), Some((FILE_MODE.to_owned(), blob)));
        repo.set_index(&changes).unwrap();
        assert!(!marker.exists(), "the repository's clean filter ran");
    }

    #[test]
    fn a_sha256_repository_gets_its_commit_and_its_removals() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main", "--object-format=sha256"]);
        std::fs::write(d.join("a.md"), "a").unwrap();
        git(d, &["add", "a.md"]);
        git(d, &["commit", "-q", "-m", "base"]);
        let repo = Repo::discover(&Program::default(), d).unwrap().unwrap();
        let head = repo.head().unwrap().unwrap();
        assert_eq!(head.len(), 64);
        let mut changes = BTreeMap::new();
        changes.insert("a.md".to_owned(), None);
        changes.insert(
            "b.md".to_owned(),
            Some((FILE_MODE.to_owned(), repo.write_blob(b"b").unwrap())),
        );
        let tree = repo
            .tree_with(Some(&repo.tree_of(&head).unwrap()), &changes)
            .unwrap();
        let who = Identity {
            author_name: "a".into(),
            author_email: "a@vaultgate.invalid".into(),
            author_date: "2026-01-01T00:00:00Z".into(),
        };
        let c = repo.commit_tree(&tree, Some(&head), "m\n", &who).unwrap();
        repo.set_index(&changes).unwrap();
        assert!(repo.update_head(&c, Some(&head), "vaultgate").unwrap());
        assert_eq!(git(d, &["ls-files"]), "b.md");
        assert_eq!(git(d, &["ls-tree", "--name-only", "HEAD"]), "b.md");
    }

    #[test]
    fn exclude_patterns_match_a_folder_with_glob_characters_literally() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        let v = d.join("my [notes]*");
        std::fs::create_dir_all(v.join(".vaultgate")).unwrap();
        std::fs::write(v.join(".vaultgate/x"), "x").unwrap();
        std::fs::create_dir_all(d.join("my n")).unwrap();
        let repo = Repo::discover(&Program::default(), &v).unwrap().unwrap();
        repo.exclude(&[repo.anchored(".vaultgate")]).unwrap();
        repo.exclude(&[repo.anchored(".vaultgate")]).unwrap();
        let ex = std::fs::read_to_string(d.join(".git/info/exclude")).unwrap();
        assert_eq!(ex.matches(".vaultgate").count(), 1, "{ex}");
        assert_eq!(
            git(d, &["check-ignore", "my [notes]*/.vaultgate/x"]),
            "my [notes]*/.vaultgate/x"
        );
        let out = Command::new("git")
            .arg("-C")
            .arg(d)
            .args(["check-ignore", "-q", "my n/.vaultgate/x"])
            .status()
            .unwrap();
        assert!(!out.success(), "a glob reading of the pattern would match 'my n'");
    }

    #[test]
    fn exclude_never_writes_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        let outside = d.join("outside.txt");
        std::fs::write(&outside, "mine\n").unwrap();
        let ex = d.join(".git/info/exclude");
        let _ = std::fs::remove_file(&ex);
        std::os::unix::fs::symlink(&outside, &ex).unwrap();
        let repo = Repo::discover(&Program::default(), d).unwrap().unwrap();
        assert!(repo.exclude(&[repo.anchored(".vaultgate")]).is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
    }

    #[test]
    fn sibling_names_that_are_not_utf8_and_submodules_on_the_way_are_kept() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        for name in [&b"caf\xe9.txt"[..], b"na\xefve.txt", b"a.md"] {
            std::fs::write(d.join(std::ffi::OsStr::from_bytes(name)), "x").unwrap();
        }
        git(d, &["add", "-A"]);
        let sub = "0123456789abcdef0123456789abcdef01234567"; // a commit of another repository
        // A gitlink at `sub` (as a submodule leaves it).
        git(
            d,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{sub},sub"),
            ],
        );
        git(d, &["commit", "-q", "-m", "base"]);
        let repo = Repo::discover(&Program::default(), d).unwrap().unwrap();
        let head = repo.head().unwrap().unwrap();
        let base = repo.tree_of(&head).unwrap();
        let mut changes = BTreeMap::new();
        changes.insert(
            "a.md".to_owned(),
            Some((FILE_MODE.to_owned(), repo.write_blob(b"new").unwrap())),
        );
        let tree = repo.tree_with(Some(&base), &changes).unwrap();
        let names = |t: &str| {
            let out = Command::new("git")
                .arg("-C")
                .arg(d)
                .args(["ls-tree", "-z", "--name-only", t])
                .output()
                .unwrap();
            out.stdout
                .split(|b| *b == 0)
                .filter(|n| !n.is_empty())
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&tree), names(&base), "every name kept byte for byte");
        let mut into_sub = BTreeMap::new();
        into_sub.insert(
            "sub/x.md".to_owned(),
            Some((FILE_MODE.to_owned(), repo.write_blob(b"x").unwrap())),
        );
        let e = repo.tree_with(Some(&base), &into_sub).unwrap_err();
        assert!(e.to_string().contains("submodule"), "{e}");
    }

    #[test]
    fn a_filter_driver_named_with_an_equals_sign_is_emptied_too() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        let marker = d.join("ran");
        let script = d.join("trap.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho x >> '{}'\ncat\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        git(
            d,
            &["config", "filter.lfs=x.clean", &script.display().to_string()],
        );
        std::fs::write(d.join(".git/info/attributes"), "* filter=lfs=x\n").unwrap();
        std::fs::write(d.join("a.md"), "a").unwrap();
        git(d, &["add", "a.md"]);
        assert!(marker.exists(), "the trap works");
        std::fs::remove_file(&marker).unwrap();
        let repo = Repo::discover(&Program::default(), d).unwrap().unwrap();
        let mut changes = BTreeMap::new();
        changes.insert(
            "b.md".to_owned(),
            Some((FILE_MODE.to_owned(), repo.write_blob(b"b").unwrap())),
        );
        repo.set_index(&changes).unwrap();
        assert!(!marker.exists(), "the repository's clean filter ran");
    }

    #[test]
    fn a_folder_outside_any_work_tree_has_no_repo() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Repo::discover(&Program::default(), dir.path()).unwrap().is_none());
    }
}
