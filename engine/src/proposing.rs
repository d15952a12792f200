//! The propose side of docs/contract.md#proposals: `propose_*`, `list_proposals`, `get_proposal`, `reject_proposal`.
//! Proposals are written only into the inbox (files first, then the audit record and the state
//! row, committed together); notes are never touched here.

use std::sync::Arc;

use policy::VaultPath;
use proposals::{CreatedBy, Draft, Kind, Proposal};
use serde_json::Value;
use vault::write::{Area, WriteMode};

use crate::api::{
    CreatedByOut, GetProposalOut, LinkRewriteItem, ListProposalsOut, ProposalItem, ProposedOut, RejectOut,
};
use crate::call::{Call, TxnRecord};
use crate::core::{Actor, VaultHandle, recorded, rfc3339};
use crate::core::{PageCall, not_this_cursor};
use crate::cursor::Position;
use crate::error::{GatewayError, Refused, Stale};
use crate::ids::{NoteHash, ProposalId};
use crate::txn::{Keyed, internal};

/// The inbox files of one proposal, relative to the inbox folder (docs/contract.md#proposals).
pub struct InboxFiles {
    /// `(role, path under the inbox)`; the metadata file is always last.
    pub files: Vec<(&'static str, String)>,
}

impl InboxFiles {
    pub fn of(kind: Kind, slug: &str) -> InboxFiles {
        let files = match kind {
            Kind::New => vec![
                ("content", format!("new/{slug}.md")),
                ("meta", format!("new/{slug}.proposal.json")),
            ],
            Kind::Patch => vec![
                ("content", format!("patch/{slug}.new.md")),
                ("diff", format!("patch/{slug}.diff")),
                ("meta", format!("patch/{slug}.proposal.json")),
            ],
            Kind::Move => vec![("meta", format!("move/{slug}.proposal.json"))],
            Kind::Delete => vec![("meta", format!("delete/{slug}.proposal.json"))],
        };
        InboxFiles { files }
    }

    pub fn get(&self, role: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, p)| p.as_str())
    }

    /// Where a file goes when the proposal is decided: `<applied|rejected>/<date>/<file name>`.
    pub fn archived(rel: &str, bucket: &str, date: &str) -> String {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        format!("{bucket}/{date}/{name}")
    }
}

/// A path under the vault's inbox folder.
pub fn inbox_path(v: &VaultHandle, rel: &str) -> Result<VaultPath, GatewayError> {
    Ok(VaultPath::parse(&format!("{}/{rel}", v.reader.layout().inbox))?)
}

pub fn today(now: time::OffsetDateTime) -> String {
    let d = now.date();
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

fn target_path(v: &VaultHandle, raw: &str) -> Result<VaultPath, GatewayError> {
    let p = VaultPath::parse(raw)?;
    v.reader.layout().check_write_target(&p)?;
    Ok(p)
}

fn require_reason(reason: &str) -> Result<(), GatewayError> {
    if reason.trim().is_empty() {
        return Err(GatewayError::InvalidArgument(
            "`reason` must say why (it is shown to the reviewer)".into(),
        ));
    }
    Ok(())
}

/// Current bytes and hash of a note, read without following links (`None` when missing).
pub fn current(v: &VaultHandle, p: &VaultPath) -> Result<Option<(Vec<u8>, String)>, GatewayError> {
    let _checked_out = v.reading()?;
    Ok(v.reader.fs().read_for_write(Area::Note, p)?)
}

/// A patch's base: the note's text now, refused as stale unless its hash is `base_hash`.
fn based_text(
    v: &VaultHandle,
    target: &VaultPath,
    base_hash: &str,
) -> Result<(String, String), GatewayError> {
    let (bytes, hash) = current(v, target)?.ok_or_else(|| not_found(target))?;
    proposals::plan::check_base(base_hash, Some(&hash)).map_err(|_| stale(target, base_hash, Some(&hash)))?;
    let old = String::from_utf8(bytes)
        .map_err(|_| GatewayError::Vault(vault::VaultError::Fs(vault::fs::FsError::NotText)))?;
    Ok((old, hash))
}

fn stale(p: &VaultPath, expected: &str, actual: Option<&str>) -> GatewayError {
    Refused::StaleBase {
        path: p.to_string(),
        why: Stale::SinceRead {
            expected: expected.to_owned(),
            actual: actual.map(str::to_owned),
        },
    }
    .into()
}

/// Proposals: made, listed, read and rejected; the inbox quotas (limits.rs).
pub struct Proposals<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl Proposals<'_> {
    /// The proposal `id` of vault `v` if it exists and is pending, else the refusal
    /// (docs/contract.md#applying-a-proposal check 1): the one answer of apply, reject and the
    /// in-client question alike.
    pub(crate) fn pending(&self, v: &VaultHandle, id: &str) -> Result<inbox::StoredProposal, GatewayError> {
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            return crate::teamwrite::pending(team, v, id).map(|p| p.row);
        }
        let row = self
            .core
            .state
            .proposal(&v.id, id)?
            .ok_or_else(|| proposal_not_found(id))?;
        match row.status {
            inbox::ProposalStatus::Applied => Err(already_applied(&row.id)),
            inbox::ProposalStatus::Rejected => Err(rejected(&row.id)),
            inbox::ProposalStatus::Pending => Ok(row),
        }
    }

    /// `list_proposals`: newest first, a page after the cursor's (createdAt, row). `page` is
    /// `None` for the CLI, which takes no cursor.
    pub fn list_proposals_page(
        &self,
        v: &VaultHandle,
        page: Option<&PageCall<'_>>,
        status: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<crate::api::ListProposalsOut, GatewayError> {
        let status = status.unwrap_or("pending");
        let bad_status = || GatewayError::InvalidArgument("status is pending, applied or rejected".into());
        if !matches!(status, "pending" | "applied" | "rejected") {
            return Err(bad_status());
        }
        let limit = limit.unwrap_or(50);
        if !(1..=500).contains(&limit) {
            return Err(GatewayError::InvalidArgument("limit is 1 to 500".into()));
        }
        let status: inbox::ProposalStatus = status.parse().map_err(|_| bad_status())?;
        let after = match (page, cursor) {
            (Some(p), c) => match self.core.open_cursor(v, p, c)? {
                None => None,
                Some(Position::Proposals { created_at, row }) => Some((created_at, row)),
                Some(_) => return Err(not_this_cursor()),
            },
            (None, Some(_)) => return Err(not_this_cursor()),
            (None, None) => None,
        };
        // A created_at the cursor had to cut cannot be compared in SQL: such a cursor was never
        // sealed for a real timestamp (RFC 3339 is short).
        let after_at = match &after {
            Some((k, row)) if k.hash.is_none() => Some((String::from_utf8_lossy(&k.head).into_owned(), *row)),
            Some(_) => return Err(not_this_cursor()),
            None => None,
        };
        let after_at = after_at.as_ref().map(|(a, r)| (a.as_str(), *r));
        let mut rows = match crate::teamwrite::team_of(self.core, v) {
            Some(team) => team
                .list_proposals(&v.id, status, limit + 1, after_at)?
                .into_iter()
                .map(|p| (p.n, p.row))
                .collect(),
            None => self
                .core
                .state
                .list_proposals_page(&v.id, Some(status), limit + 1, after_at)?,
        };
        let truncated = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match (rows.last(), page) {
            (Some((row, last)), Some(p)) if truncated => Some(self.core.seal(
                v,
                p,
                &Position::Proposals {
                    created_at: vault::Key::exact(&last.created_at),
                    row: *row,
                },
            )),
            _ => None,
        };
        Ok(crate::api::ListProposalsOut {
            proposals: rows
                .iter()
                .filter_map(|(_, r)| crate::proposing::item(r))
                .collect(),
            truncated,
            next_cursor,
        })
    }

    fn created_by(actor: &Actor) -> CreatedBy {
        match actor {
            Actor::Caller(c) => CreatedBy {
                credential_id: c.credential.id.as_str().to_owned(),
                name: c.credential.name.clone(),
            },
            Actor::Operator(o) => CreatedBy {
                credential_id: o.label(),
                name: o.label(),
            },
        }
    }

    /// Seals the draft, writes its inbox files, then appends the call's durable record and
    /// commits the pending row in one state transaction. If the record or the row cannot be
    /// written the files go again: nothing is left that looks like a proposal (docs/contract.md#the-audit-log).
    fn store_proposal(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        draft: Draft,
        content: Option<&str>,
        diff: Option<&str>,
    ) -> Result<Proposal, GatewayError> {
        let id = uuid::Uuid::now_v7().to_string();
        let p = proposals::seal(draft, id, self.core.secret().bytes());
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            // docs/contract.md#team-mode: the proposal lives in the team's database, not in files.
            let meta = serde_json::to_value(&p).map_err(|e| GatewayError::Internal(e.to_string()))?;
            crate::teamwrite::store(team, call, &p, &meta, content, diff)?;
            return Ok(p);
        }
        let files = InboxFiles::of(p.kind, &p.slug);
        // No write lock: a proposal writes only its own new inbox files (created exclusively)
        // and its row, so it never waits for an apply (docs/contract.md#proposals: the lock is held only as long
        // as it must be). The staging guard keeps a sweep from taking its temp files.
        let _staging = v.reader.fs().staging_guard()?;
        let meta = serde_json::to_value(&p).map_err(|e| GatewayError::Internal(e.to_string()))?;
        let meta_text =
            serde_json::to_string_pretty(&meta).map_err(|e| GatewayError::Internal(e.to_string()))?;
        let fs = v.reader.fs();
        let mut written: Vec<VaultPath> = Vec::new();
        // The files share a folder: it is fsynced once, before the row that makes them pending.
        let staged = fs.deferring_dir_syncs(|| {
            for (role, rel) in &files.files {
                let bytes: &[u8] = match *role {
                    "content" => content.unwrap_or_default().as_bytes(),
                    "diff" => diff.unwrap_or_default().as_bytes(),
                    _ => meta_text.as_bytes(),
                };
                let path = inbox_path(v, rel)?;
                fs.write_atomic(Area::Inbox, &path, bytes, WriteMode::Exclusive)?;
                written.push(path);
            }
            Ok::<_, GatewayError>(())
        });
        if let Err(e) = staged {
            self.unstage(v, &written);
            return Err(e);
        }
        let committed = self.core.state.insert_proposal_recorded(
            &inbox::NewProposal {
                vault: &v.id,
                id: &p.id,
                slug: &p.slug,
                kind: p.kind.as_str(),
                target: &p.target,
                created_by: &p.created_by.credential_id,
                created_at: &p.created_at,
                meta: &meta,
            },
            // SECURITY(T-AUDIT4): the record is part of the proposal: durable before the row.
            || {
                call.record_head(TxnRecord {
                    event: None,
                    outcome: audit::Outcome::Ok,
                    code: None,
                    target: None,
                    proposal_id: Some(p.id.clone()),
                    challenge_id: None,
                    approval: None,
                })
            },
        );
        if let Err(e) = committed {
            self.unstage(v, &written);
            return Err(recorded(e));
        }
        Ok(p)
    }

    /// Removes inbox files a propose wrote before a crash kept its row from committing: files
    /// named like a proposal's (`<date>-<stem>-<id8>` plus a proposal suffix) whose slug has no
    /// row. Runs only while no propose is staging (their files and row are committed under the
    /// shared staging lock), so a live proposal is never taken. Returns how many were removed.
    pub fn sweep_orphan_proposals(&self, v: &VaultHandle) -> usize {
        let run = v.reader.fs().when_no_one_stages(|| {
            let mut removed = 0;
            let inbox = &v.layout().inbox;
            for folder in ["new", "patch", "move", "delete"] {
                let Ok(dir) = inbox.join(folder) else { continue };
                let Ok(entries) = v.reader.fs().list_dir(&policy::FolderPath::Dir(dir)) else {
                    continue;
                };
                for e in entries {
                    let name = e.path.file_name().to_owned();
                    let Some(slug) = proposal_slug_of(&name) else { continue };
                    match self.core.state.proposal(&v.id, slug) {
                        Ok(None) => {}
                        Ok(Some(_)) => continue,
                        Err(err) => {
                            tracing::warn!(vault = %v.id, error = %err, "orphan sweep stopped");
                            return removed;
                        }
                    }
                    match inbox_path(v, &format!("{folder}/{name}"))
                        .and_then(|p| Ok(v.reader.fs().remove_file(Area::Inbox, &p)?))
                    {
                        Ok(()) => removed += 1,
                        Err(err) => tracing::warn!(vault = %v.id, error = %err, "removing an orphaned proposal file failed"),
                    }
                }
            }
            removed
        });
        match run {
            Ok(Some(n)) => {
                if n > 0 {
                    tracing::info!(vault = %v.id, removed = n, "removed files of proposals a crash left uncommitted");
                }
                n
            }
            Ok(None) => 0,
            Err(e) => {
                tracing::warn!(vault = %v.id, error = %e, "orphan sweep skipped");
                0
            }
        }
    }

    /// Removes the inbox files of a proposal that was not committed.
    fn unstage(&self, v: &VaultHandle, written: &[VaultPath]) {
        for path in written.iter().rev() {
            if let Err(e) = v.reader.fs().remove_file(Area::Inbox, path) {
                tracing::error!(vault = %v.id, error = %e, "removing an uncommitted proposal file failed");
            }
        }
    }

    fn draft(&self, actor: &Actor, v: &VaultHandle, kind: Kind, target: &VaultPath, reason: &str) -> Draft {
        Draft {
            kind,
            vault: v.id.clone(),
            target: target.to_string(),
            from: None,
            content_hash: None,
            base_hash: None,
            reason: reason.to_owned(),
            created_by: Self::created_by(actor),
            created_at: rfc3339(time::OffsetDateTime::now_utc()),
        }
    }

    pub fn propose_new(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        path: &str,
        content: &str,
        reason: &str,
    ) -> Result<ProposedOut, GatewayError> {
        self.check_quota(call.actor(), v, content.len() as u64)?;
        require_reason(reason)?;
        let target = target_path(v, path)?;
        if current(v, &target)?.is_some() {
            return Err(exists(&target));
        }
        if let Some(other) = v.reader.fs().find_collision(&target)? {
            return Err(collides(&target, &other));
        }
        let mut d = self.draft(call.actor(), v, Kind::New, &target, reason);
        d.content_hash = Some(proposals::sha256_hex(content.as_bytes()));
        let p = self.store_proposal(call, v, d, Some(content), None)?;
        Ok(proposed(p))
    }

    pub fn propose_patch(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        args: crate::api::ProposePatchArgs,
    ) -> Result<ProposedOut, GatewayError> {
        let incoming = args.content.as_ref().map_or(0, |c| c.len() as u64);
        self.check_quota(call.actor(), v, incoming)?;
        require_reason(&args.reason)?;
        let target = target_path(v, &args.path)?;
        let (old, hash) = based_text(v, &target, &args.base_hash)?;
        let new = match (args.content, args.edits) {
            (Some(c), None) => c,
            (None, Some(edits)) => {
                let edits: Vec<proposals::Edit> = edits
                    .into_iter()
                    .map(|e| proposals::Edit {
                        old_text: e.old_text,
                        new_text: e.new_text,
                    })
                    .collect();
                proposals::apply_edits(&old, &edits).map_err(edit_error)?
            }
            _ => {
                return Err(GatewayError::InvalidArgument(
                    "pass exactly one of `content` (the whole new text) or `edits`".into(),
                ));
            }
        };
        self.store_patch(call, v, &target, &old, hash, &new, &args.reason)
    }

    /// `propose_frontmatter_update` (docs/contract.md#notes-as-data-and-attachments): the note's text with only its frontmatter block
    /// edited (`vault::fmedit`), proposed as an ordinary patch, so it is applied like any other.
    pub fn propose_frontmatter(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        args: crate::api::ProposeFrontmatterArgs,
    ) -> Result<ProposedOut, GatewayError> {
        self.check_quota(call.actor(), v, 0)?;
        require_reason(&args.reason)?;
        let target = target_path(v, &args.path)?;
        let (old, hash) = based_text(v, &target, &args.base_hash)?;
        let update = vault::fmedit::Update {
            set: args.set.unwrap_or_default(),
            unset: args.unset.unwrap_or_default(),
            add_tags: args.add_tags.unwrap_or_default(),
            remove_tags: args.remove_tags.unwrap_or_default(),
        };
        // SECURITY(T-FMEDIT): the editor re-reads its result and refuses anything but the named keys changing.
        let new =
            vault::fmedit::update(&old, &update).map_err(|e| GatewayError::InvalidArgument(e.to_string()))?;
        self.store_patch(call, v, &target, &old, hash, &new, &args.reason)
    }

    /// Stores a patch from `old` (whose hash is `hash`) to `new`, with its diff.
    #[allow(clippy::too_many_arguments)]
    fn store_patch(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        target: &VaultPath,
        old: &str,
        hash: String,
        new: &str,
        reason: &str,
    ) -> Result<ProposedOut, GatewayError> {
        // Edits can grow a note past what could ever be read back.
        crate::limits::check_proposal_bytes(new.len() as u64, &self.core.config().limits)?;
        if new == old {
            return Err(GatewayError::InvalidArgument(
                "the proposed text equals the current text".into(),
            ));
        }
        let diff = proposals::unified_diff(target.as_str(), old, new);
        let mut d = self.draft(call.actor(), v, Kind::Patch, target, reason);
        d.content_hash = Some(proposals::sha256_hex(new.as_bytes()));
        d.base_hash = Some(hash.clone());
        let p = self.store_proposal(call, v, d, Some(new), Some(&diff))?;
        Ok(ProposedOut {
            diff: Some(diff),
            ..proposed(p)
        })
    }

    pub fn propose_move(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        from: &str,
        to: &str,
        reason: &str,
    ) -> Result<ProposedOut, GatewayError> {
        self.check_quota(call.actor(), v, 0)?;
        require_reason(reason)?;
        let from = target_path(v, from)?;
        let to = target_path(v, to)?;
        if from == to {
            return Err(GatewayError::InvalidArgument(
                "`from` and `to` are the same path".into(),
            ));
        }
        let (_, hash) = current(v, &from)?.ok_or_else(|| not_found(&from))?;
        if current(v, &to)?.is_some() {
            return Err(exists(&to));
        }
        if let Some(other) = v.reader.fs().find_collision(&to)?.filter(|o| *o != from) {
            return Err(collides(&to, &other));
        }
        let rewrites = v.reader.plan_move(&from, &to)?;
        let mut d = self.draft(call.actor(), v, Kind::Move, &to, reason);
        d.from = Some(from.to_string());
        d.base_hash = Some(hash.clone());
        let p = self.store_proposal(call, v, d, None, None)?;
        Ok(ProposedOut {
            link_rewrites: Some(
                rewrites
                    .iter()
                    .map(|r| LinkRewriteItem {
                        path: r.path.to_string(),
                        count: r.count as u64,
                    })
                    .collect(),
            ),
            ..proposed(p)
        })
    }

    pub fn propose_delete(
        &self,
        call: &mut Call<'_>,
        v: &VaultHandle,
        path: &str,
        base_hash: &NoteHash,
        reason: &str,
    ) -> Result<ProposedOut, GatewayError> {
        self.check_quota(call.actor(), v, 0)?;
        let base_hash = base_hash.as_str();
        require_reason(reason)?;
        let target = target_path(v, path)?;
        let (_, hash) = current(v, &target)?.ok_or_else(|| not_found(&target))?;
        proposals::plan::check_base(base_hash, Some(&hash))
            .map_err(|_| stale(&target, base_hash, Some(&hash)))?;
        let mut d = self.draft(call.actor(), v, Kind::Delete, &target, reason);
        d.base_hash = Some(hash.clone());
        let p = self.store_proposal(call, v, d, None, None)?;
        Ok(proposed(p))
    }

    /// The CLI's `inbox list`: the first page (see `Proposals::list_proposals_page`).
    pub fn list_proposals(
        &self,
        v: &VaultHandle,
        status: Option<&str>,
        limit: Option<u32>,
    ) -> Result<ListProposalsOut, GatewayError> {
        self.list_proposals_page(v, None, status, limit, None)
    }

    /// Every pending proposal's id, in `list_proposals` order: what the CLI's `apply` without
    /// `--only` works through (all of them, not one page).
    pub fn pending_proposal_ids(&self, v: &VaultHandle) -> Result<Vec<String>, GatewayError> {
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            let rows = team.list_proposals(&v.id, inbox::ProposalStatus::Pending, u32::MAX, None)?;
            return Ok(rows.into_iter().map(|p| p.row.id).collect());
        }
        let rows = self
            .core
            .state
            .list_proposals(&v.id, Some(inbox::ProposalStatus::Pending), u32::MAX)?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    /// The state a person sees on the card (docs/contract.md#the-review-page-and-in-client-approval):
    /// `pending`, or `stale` when a pending patch's, delete's or move's note no longer has its base
    /// (check 5 would refuse it), or the decided status.
    pub fn card_state(&self, v: &VaultHandle, p: &GetProposalOut) -> Result<String, GatewayError> {
        if p.item.status != "pending" {
            return Ok(p.item.status.clone());
        }
        let Some(base) = p.base_hash.as_deref() else {
            return Ok(p.item.status.clone());
        };
        // A move's base is its source's.
        let based_on = match (p.item.kind.as_str(), &p.item.from) {
            ("move", Some(from)) => from,
            _ => &p.item.target,
        };
        let now = current(v, &VaultPath::parse(based_on)?)?.map(|(_, hash)| hash);
        Ok(match proposals::plan::check_base(base, now.as_deref()) {
            Ok(()) => "pending".into(),
            Err(_) => "stale".into(),
        })
    }

    /// What a person reads of a proposal beyond its diff (docs/contract.md#the-review-page-and-in-client-approval), for the review
    /// page and the terminal alike: a pending patch's frontmatter changes key by key against the
    /// note as it is now, and a pending move's rewrites, each note with each link it rewrites.
    pub fn shown(&self, v: &VaultHandle, p: &GetProposalOut) -> Result<Shown, GatewayError> {
        let pending = p.item.status == "pending";
        let fields = match (&p.content, p.item.kind.as_str()) {
            (Some(new), "patch") if pending => self.field_changes(v, &p.item.target, new)?,
            _ => Vec::new(),
        };
        let rewrites = match (p.item.kind.as_str(), &p.item.from) {
            ("move", Some(from)) if pending => self.rewritten_links(v, from, &p.item.target)?,
            _ => Vec::new(),
        };
        Ok(Shown { fields, rewrites })
    }

    /// The frontmatter keys `new` changes against the note at `target` now; none when either
    /// side's frontmatter does not parse.
    fn field_changes(
        &self,
        v: &VaultHandle,
        target: &str,
        new: &str,
    ) -> Result<Vec<proposals::diff::FieldChange>, GatewayError> {
        let target = VaultPath::parse(target)?;
        let old = match current(v, &target)? {
            Some((bytes, _)) => String::from_utf8(bytes).unwrap_or_default(),
            None => String::new(),
        };
        let (before, after) = (
            vault::note::NoteHeader::parse(&old, ""),
            vault::note::NoteHeader::parse(new, ""),
        );
        if before.frontmatter_error.is_some() || after.frontmatter_error.is_some() {
            return Ok(Vec::new());
        }
        Ok(proposals::diff::field_changes(
            &before.frontmatter,
            &after.frontmatter,
        ))
    }

    /// Each note a move from `from` to `to` rewrites now, with each link it rewrites: one plan,
    /// each note read through the read policy (a note that cannot be read shows its count only).
    fn rewritten_links(
        &self,
        v: &VaultHandle,
        from: &str,
        to: &str,
    ) -> Result<Vec<RewrittenNote>, GatewayError> {
        let (from, to) = (target_path(v, from)?, target_path(v, to)?);
        let mut out = Vec::new();
        let _checked_out = v.reading()?;
        for r in v.reader.plan_move(&from, &to)? {
            let links = match v.reader.fs().read_text(&r.path) {
                Ok(old) => {
                    let diff = proposals::diff::unified_diff(r.path.as_str(), &old.text, &r.new_text);
                    crate::diff::link_changes(&proposals::diff::hunks(&diff))
                }
                Err(_) => Vec::new(),
            };
            out.push(RewrittenNote {
                path: r.path.to_string(),
                count: r.count as u64,
                links,
            });
        }
        Ok(out)
    }

    pub fn get_proposal(&self, v: &VaultHandle, id: &ProposalId) -> Result<GetProposalOut, GatewayError> {
        let id = id.as_str();
        let team = crate::teamwrite::team_of(self.core, v)
            .map(|team| crate::teamwrite::proposal(team, v, id))
            .transpose()?;
        let row = match &team {
            Some(t) => t.row.clone(),
            None => self
                .core
                .state
                .proposal(&v.id, id)?
                .ok_or_else(|| proposal_not_found(id))?,
        };
        let p: Proposal = serde_json::from_value(row.meta.clone())
            .map_err(|e| GatewayError::Internal(format!("stored proposal {id}: {e}")))?;
        let files = InboxFiles::of(p.kind, &p.slug);
        // Pending proposals' content is read from the inbox as a reviewer would see it (a team's
        // from its database).
        let content = match (files.get("content"), row.status.as_str()) {
            _ if team.is_some() => team.and_then(|t| t.content),
            (Some(rel), "pending") => v
                .reader
                .fs()
                .read_for_write(Area::Inbox, &inbox_path(v, rel)?)?
                .map(|(b, _)| String::from_utf8_lossy(&b).into_owned()),
            (Some(rel), _) => {
                let path = archived_path(v, &row, rel)?;
                v.reader
                    .fs()
                    .read_for_write(Area::Inbox, &path)?
                    .map(|(b, _)| String::from_utf8_lossy(&b).into_owned())
            }
            (None, _) => None,
        };
        let diff = match (p.kind, &content) {
            (Kind::New, Some(c)) => proposals::unified_diff(&p.target, "", c),
            // The diff is against the note as it is now; a target that cannot be read (gone, or
            // replaced by a link) shows as empty rather than failing the whole answer.
            (Kind::Patch, Some(c)) => proposals::unified_diff(&p.target, &now_text(v, &p.target), c),
            (Kind::Delete, _) => proposals::unified_diff(&p.target, &now_text(v, &p.target), ""),
            _ => String::new(),
        };
        let it =
            item(&row).ok_or_else(|| GatewayError::Internal(format!("stored proposal {id} is malformed")))?;
        Ok(GetProposalOut {
            item: it,
            vault: v.id.clone(),
            content_hash: p.content_hash,
            base_hash: p.base_hash,
            content,
            diff,
            decided_at: row.decided_at.clone(),
            reject_reason: row.reject_reason.clone(),
        })
    }

    /// Rejects a pending proposal: the row moves to `rejected` (one winner) in one state
    /// transaction with the call's durable record, then its files are archived under
    /// `rejected/<date of decided_at>/`. A crash before the files moved is finished by the next
    /// recovery ([`Proposals::finish_rejections`]).
    pub fn reject_proposal(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        id: &ProposalId,
        reason: &str,
    ) -> Result<RejectOut, GatewayError> {
        require_reason(reason)?;
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            return crate::teamwrite::reject(self.core, team, call, v, id.as_str(), reason, None);
        }
        self.core.writes().write(
            call,
            v,
            Keyed::Row,
            crate::group::Claims::exclusive(),
            |_| Ok(()),
            |call, ()| self.reject_locked(call, v, id.as_str(), reason, None),
        )
    }

    /// `reject_proposal_in_app`: the card's Reject (docs/contract.md#the-review-page-and-in-client-approval).
    /// The sealed approval is used once before the lock, and stands in for the tier one step up;
    /// the answer is kept under the caller's idempotency key in the rejection's own commit.
    pub fn reject_in_app(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        id: &ProposalId,
        approval: &str,
        reason: &str,
        idempotency_key: &str,
    ) -> Result<RejectOut, GatewayError> {
        require_reason(reason)?;
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            let card = Some((approval, idempotency_key));
            return crate::teamwrite::reject(self.core, team, call, v, id.as_str(), reason, card);
        }
        self.core.writes().write(
            call,
            v,
            Keyed::Key {
                key: idempotency_key,
                what: "reject",
                first: |v| serde_json::from_value(v).map_err(internal),
            },
            crate::group::Claims::exclusive(),
            |call| self.core.approvals().app_reject(call, v, id, approval),
            |call, approved| {
                self.reject_locked(call, v, id.as_str(), reason, Some((approved, idempotency_key)))
            },
        )
    }

    /// `reject_proposal` under the vault's write lock, interrupted writes settled (an apply a
    /// crash interrupted may be this very proposal's). `app`: the card's approval and the key.
    fn reject_locked(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        id: &str,
        reason: &str,
        app: Option<(crate::approval::Approved, &str)>,
    ) -> Result<RejectOut, GatewayError> {
        let row = self.pending(v, id)?;
        let via = match &app {
            Some((a, _)) if a.covers(&row.id, row_hash(&row)) => {
                self.core
                    .approvals()
                    .authorize_approved(call.actor(), &row.created_by)?;
                Some(a.via.as_str().to_owned())
            }
            _ => {
                self.core
                    .approvals()
                    .authorize_decision(call.actor(), &row.created_by)?;
                None
            }
        };
        let kind: Kind = row
            .kind
            .parse()
            .map_err(|_| GatewayError::Internal("stored kind".into()))?;
        let decided_at = rfc3339(time::OffsetDateTime::now_utc());
        let label = call.actor().label();
        let answer = RejectOut {
            rejected: true,
            archived_to: rejected_archive_path(v, kind, &row.slug, &decided_at)?,
        };
        let answer_json = serde_json::to_value(&answer).map_err(internal)?;
        let (principal, args_hash) = (call.actor().principal_id(), call.args_hash());
        let key = app.as_ref().map(|(_, key)| inbox::IdemKey {
            credential_id: &principal,
            key,
            tool: call.tool(),
            args_hash: &args_hash,
        });
        let moved = self
            .core
            .state
            .mark_rejected_recorded(
                &row.id,
                &label,
                &decided_at,
                reason,
                key.as_ref().map(|k| (k, &answer_json)),
                || {
                    call.record_head(TxnRecord {
                        event: None,
                        outcome: audit::Outcome::Ok,
                        code: None,
                        target: Some(row.target.clone()),
                        proposal_id: Some(row.id.clone()),
                        challenge_id: None,
                        approval: via.clone(),
                    })
                },
            )
            .map_err(recorded)?;
        if !moved {
            return Err(Refused::DecidedMeanwhile.into());
        }
        self.archive_rejected(v, &row.id, kind, &row.slug, &decided_at)?;
        Ok(answer)
    }

    /// Moves a rejected proposal's files to `rejected/<date of decided_at>/` and clears its
    /// `archive_pending` mark. Returns where the metadata file went.
    fn archive_rejected(
        &self,
        v: &VaultHandle,
        id: &str,
        kind: Kind,
        slug: &str,
        decided_at: &str,
    ) -> Result<String, GatewayError> {
        let date = decided_at.get(..10).unwrap_or(decided_at);
        let files = InboxFiles::of(kind, slug);
        let mut complete = true;
        for (_, rel) in &files.files {
            let from = inbox_path(v, rel)?;
            let to = inbox_path(v, &InboxFiles::archived(rel, "rejected", date))?;
            let fs = v.reader.fs();
            match fs.rename(Area::Inbox, &from, Area::Inbox, &to) {
                Ok(()) => {}
                // Already moved (by the interrupted call), or moved or deleted by a person: not a
                // reason to fail the rejection.
                Err(e) => {
                    let there = fs.read_for_write(Area::Inbox, &to).ok().flatten().is_some();
                    let gone = fs.read_for_write(Area::Inbox, &from).ok().flatten().is_none();
                    if !(there || gone) {
                        complete = false;
                        tracing::warn!(proposal = %id, error = %e, "archiving a rejected proposal file failed");
                    }
                }
            }
        }
        if complete && let Err(e) = self.core.state.mark_archived(id) {
            tracing::warn!(proposal = %id, error = %e, "marking a rejected proposal archived failed");
        }
        rejected_archive_path(v, kind, slug, decided_at)
    }

    /// Finishes rejections a crash interrupted between the commit and the archiving of the
    /// files (called by recovery, under the vault's write lock).
    pub(crate) fn finish_rejections(&self, v: &VaultHandle) -> Result<(), GatewayError> {
        for row in self.core.state.unarchived_rejections(&v.id)? {
            let Ok(kind) = row.kind.parse::<Kind>() else {
                continue;
            };
            let decided_at = row.decided_at.clone().unwrap_or_default();
            self.archive_rejected(v, &row.id, kind, &row.slug, &decided_at)?;
        }
        Ok(())
    }
}

/// Where a rejected proposal's metadata file goes (the last of its files), known before the move.
fn rejected_archive_path(
    v: &VaultHandle,
    kind: Kind,
    slug: &str,
    decided_at: &str,
) -> Result<String, GatewayError> {
    let date = decided_at.get(..10).unwrap_or(decided_at);
    let mut to = String::new();
    for (_, rel) in &InboxFiles::of(kind, slug).files {
        to = inbox_path(v, &InboxFiles::archived(rel, "rejected", date))?.to_string();
    }
    Ok(to)
}

/// A stored proposal's recorded hash.
pub(crate) fn row_hash(row: &inbox::StoredProposal) -> &str {
    row.meta
        .get("proposalHash")
        .and_then(|h| h.as_str())
        .unwrap_or_default()
}

/// What a person reads of a proposal beyond its diff ([`Proposals::shown`]).
#[derive(Debug, Clone, Default)]
pub struct Shown {
    pub fields: Vec<proposals::diff::FieldChange>,
    pub rewrites: Vec<RewrittenNote>,
}

/// A note a move rewrites: how many links, and each one.
#[derive(Debug, Clone)]
pub struct RewrittenNote {
    pub path: String,
    pub count: u64,
    /// Empty when the note cannot be read now (it changed kind, or went): the count still shows.
    pub links: Vec<crate::diff::LinkChange>,
}

/// The answer of a `propose_*` call: the stored proposal's id, hash, target, source and base.
fn proposed(p: Proposal) -> ProposedOut {
    ProposedOut {
        id: p.id,
        slug: p.slug,
        proposal_hash: p.proposal_hash,
        target: p.target,
        from: p.from,
        base_hash: p.base_hash,
        diff: None,
        link_rewrites: None,
    }
}

/// Where a decided proposal's file `rel` was archived, from the stored row alone: an apply's
/// recorded `archivedTo` (its folder), else the date of `decided_at` (a rejection's archive date
/// is that date by construction).
fn archived_path(v: &VaultHandle, row: &inbox::StoredProposal, rel: &str) -> Result<VaultPath, GatewayError> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let recorded_dir = row
        .result
        .as_ref()
        .and_then(|r| r.get("archivedTo"))
        .and_then(Value::as_str)
        .and_then(|to| to.rsplit_once('/'))
        .map(|(dir, _)| dir.to_owned());
    if row.status == inbox::ProposalStatus::Applied
        && let Some(dir) = recorded_dir
    {
        return Ok(VaultPath::parse(&format!("{dir}/{name}"))?);
    }
    let date = row
        .decided_at
        .as_deref()
        .map(|d| d.get(..10).unwrap_or(d))
        .unwrap_or("");
    let bucket = if row.status == inbox::ProposalStatus::Applied {
        "applied"
    } else {
        "rejected"
    };
    inbox_path(v, &InboxFiles::archived(rel, bucket, date))
}

pub(crate) fn now_text(v: &VaultHandle, target: &str) -> String {
    VaultPath::parse(target)
        .ok()
        .and_then(|t| current(v, &t).ok().flatten())
        .map(|(b, _)| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

pub fn item(row: &inbox::StoredProposal) -> Option<ProposalItem> {
    let m = &row.meta;
    let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ProposalItem {
        id: row.id.clone(),
        slug: row.slug.clone(),
        kind: row.kind.clone(),
        target: row.target.clone(),
        from: s("from"),
        status: row.status.as_str().to_owned(),
        created_at: s("createdAt")?,
        created_by: CreatedByOut {
            credential_id: m.get("createdBy")?.get("credentialId")?.as_str()?.to_owned(),
            name: m.get("createdBy")?.get("name")?.as_str()?.to_owned(),
        },
        reason: s("reason").unwrap_or_default(),
        proposal_hash: s("proposalHash")?,
    })
}

fn edit_error(e: proposals::EditError) -> GatewayError {
    use proposals::EditError::*;
    match e {
        Empty => GatewayError::InvalidArgument("`edits` is empty".into()),
        EmptyOldText { index } => GatewayError::InvalidArgument(format!("edits[{index}].oldText is empty")),
        NotFound { index } => Refused::EditNotUnique { index, count: 0 }.into(),
        NotUnique { index, count } => Refused::EditNotUnique { index, count }.into(),
    }
}

pub fn not_found(p: &VaultPath) -> GatewayError {
    Refused::NoteMissing { path: p.to_string() }.into()
}

pub fn exists(p: &VaultPath) -> GatewayError {
    exists_str(p.as_str())
}

pub fn exists_str(p: &str) -> GatewayError {
    Refused::TargetExists { path: p.to_owned() }.into()
}

fn collides(p: &VaultPath, other: &VaultPath) -> GatewayError {
    Refused::TargetCollides {
        path: p.to_string(),
        existing: other.to_string(),
    }
    .into()
}

pub fn proposal_not_found(id: &str) -> GatewayError {
    Refused::ProposalNotFound { id: id.to_owned() }.into()
}

pub fn already_applied(id: &str) -> GatewayError {
    Refused::AlreadyApplied { id: id.to_owned() }.into()
}

pub fn rejected(id: &str) -> GatewayError {
    Refused::Rejected { id: id.to_owned() }.into()
}

/// The slug of a file named like a proposal's inbox file, `None` for anything else.
fn proposal_slug_of(name: &str) -> Option<&str> {
    let stem = [".proposal.json", ".new.md", ".diff", ".md"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))?;
    let b = stem.as_bytes();
    let looks_like_slug = b.len() > 18
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'-'
        && b[b.len() - 9] == b'-'
        && b[b.len() - 8..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    looks_like_slug.then_some(stem)
}

#[cfg(test)]
mod slug_tests {
    use super::proposal_slug_of;

    #[test]
    fn only_proposal_file_names_are_recognised() {
        let slug = proposals::slug("z/attention.md", "0190-abc-3f9a1c2e", "2026-11-29T10:00:00Z");
        for suffix in [".md", ".proposal.json", ".new.md", ".diff"] {
            assert_eq!(proposal_slug_of(&format!("{slug}{suffix}")), Some(slug.as_str()));
        }
        for other in [
            "idea.md",
            "20261129-x.md",
            "notes-3f9a1c2e.md",
            "20261129-Attention-3f9a1c2e.md",
            "20261129-a-3f9a1c2e.txt",
        ] {
            assert_eq!(proposal_slug_of(other), None, "{other}");
        }
    }
}
