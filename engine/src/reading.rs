//! The read service: search, notes, tags, links, queries and the vault overview, answered by
//! the vault and paged with sealed cursors. It changes nothing.

use std::sync::Arc;

use inbox::Credential;

use crate::api::{HistoryTops, IndexStatus, OverviewOut, VaultItem, VaultListOut};
use crate::core::{Core, PageCall, VaultHandle, not_this_cursor};
use crate::cursor::Position;
use crate::error::GatewayError;

/// Reads of the vaults a caller may see.
pub struct Reads<'a> {
    pub(crate) core: &'a Core,
}

impl Reads<'_> {
    /// The search state a cursor carries, and the revision the next cursor is made at.
    fn search_from(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        cursor: Option<&str>,
    ) -> Result<(vault::SearchPage, u64), GatewayError> {
        // Read before searching: a change during the search makes the next cursor stale, never
        // a stale cursor look fresh.
        let revision = self.core.state.revision(&v.id)?;
        let from = match self.core.open_cursor(v, page, cursor)? {
            None => vault::SearchPos::default(),
            Some(Position::Search { pos, .. }) => pos,
            Some(_) => return Err(not_this_cursor()),
        };
        Ok((
            vault::SearchPage {
                from,
                budget: Some(self.core.read_limits().search_budget),
            },
            revision,
        ))
    }

    pub fn search_knowledge(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        query: &str,
        tags: &[String],
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<vault::KnowledgeHits, GatewayError> {
        let (from, revision) = self.search_from(v, page, cursor)?;
        let (mut out, next) = v.reader.search_knowledge_page(query, tags, limit, &from)?;
        out.next_cursor = next.map(|pos| self.core.seal(v, page, &Position::Search { revision, pos }));
        Ok(out)
    }

    /// `search_note_content` (docs/contract.md#the-mcp-surface): one page of the ranked hits.
    pub fn search_content(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        a: crate::api::SearchNoteContentArgs,
    ) -> Result<vault::ContentHits, GatewayError> {
        let (from, revision) = self.search_from(v, page, a.cursor.as_deref())?;
        let q = vault::ContentQuery {
            query: a.query,
            mode: a.match_mode.map(Into::into).unwrap_or_default(),
            per_note: a.per_note,
            limit: a.limit,
            tags: a.tag.unwrap_or_default(),
            path_prefix: a.path_prefix,
        };
        let (mut out, next) = v.reader.search_content_page(&q, &from)?;
        out.next_cursor = next.map(|pos| self.core.seal(v, page, &Position::Search { revision, pos }));
        Ok(out)
    }

    /// `vaultgate index`: brings the vault's search index up to date (or rebuilds it), reporting
    /// progress as (done, total).
    pub fn refresh_index(
        &self,
        v: &VaultHandle,
        rebuild: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<vault::SyncReport, GatewayError> {
        v.reader
            .refresh_index(rebuild, progress)
            .map_err(|e| GatewayError::Internal(format!("indexing vault '{}': {e}", v.id)))
    }

    /// A standards note's text (the `vaultgate://standards/` resource); anything else is
    /// `NOT_FOUND`, like a note that does not exist.
    pub fn read_standard(&self, v: &VaultHandle, path: &str) -> Result<String, GatewayError> {
        let vp = policy::VaultPath::parse(path)?;
        if v.reader.layout().classify(&vp) != policy::NoteClass::Standard {
            return Err(GatewayError::not_found());
        }
        Ok(v.read_note(path)?.content)
    }

    pub fn read_note(&self, v: &VaultHandle, path: &str) -> Result<vault::ReadNote, GatewayError> {
        v.read_note(path)
    }

    pub fn list_notes(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        dir: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<vault::ListNotes, GatewayError> {
        let after = match self.core.open_cursor(v, page, cursor)? {
            None => None,
            Some(Position::Notes(p)) => Some(p),
            Some(_) => return Err(not_this_cursor()),
        };
        let (mut out, next) = v.reader.list_notes_page(dir, limit, after.as_ref())?;
        out.next_cursor = next.map(|p| self.core.seal(v, page, &Position::Notes(p)));
        Ok(out)
    }

    pub fn list_standards(&self, v: &VaultHandle) -> Result<vault::ListStandards, GatewayError> {
        Ok(v.reader.list_standards()?)
    }

    /// `list_tags`, a page (default and at most 1,000 tags) after the cursor's (count, name).
    pub fn list_tags(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<vault::ListTags, GatewayError> {
        let limit = match limit {
            None => vault::MAX_LIST_ITEMS,
            Some(n) if (1..=vault::MAX_LIST_ITEMS).contains(&(n as usize)) => n as usize,
            Some(n) => {
                return Err(GatewayError::InvalidArgument(format!(
                    "limit must be between 1 and {}, got {n}",
                    vault::MAX_LIST_ITEMS
                )));
            }
        };
        let after = match self.core.open_cursor(v, page, cursor)? {
            None => None,
            Some(Position::Tags { count, name }) => Some((count, name)),
            Some(_) => return Err(not_this_cursor()),
        };
        let mut out = v.reader.list_tags()?;
        // The order is count descending, then folded name: the same key the cursor carries.
        if let Some((count, name)) = &after {
            out.tags.retain(|t| {
                let c = t.count as u64;
                c < *count || (c == *count && name.is_before(&vault::search::fold(&t.name)))
            });
        }
        out.truncated = out.tags.len() > limit;
        out.tags.truncate(limit);
        out.next_cursor = match out.tags.last() {
            Some(t) if out.truncated => Some(self.core.seal(
                v,
                page,
                &Position::Tags {
                    count: t.count as u64,
                    name: vault::Key::exact(&vault::search::fold(&t.name)),
                },
            )),
            _ => None,
        };
        Ok(out)
    }

    pub fn related(&self, v: &VaultHandle, path: &str) -> Result<vault::Related, GatewayError> {
        Ok(v.reader.related(path)?)
    }

    pub fn recent(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        limit: Option<u32>,
        since: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<vault::RecentNotes, GatewayError> {
        let after = match self.core.open_cursor(v, page, cursor)? {
            None => None,
            Some(Position::Recent(p)) => Some(p),
            Some(_) => return Err(not_this_cursor()),
        };
        let (mut out, next) = v.reader.recent_page(limit, since, after.as_ref())?;
        out.next_cursor = next.map(|p| self.core.seal(v, page, &Position::Recent(p)));
        Ok(out)
    }

    /// `query_notes`: a page of rows after the cursor's (sort key, path), within the output limit.
    pub fn query_notes(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        args: crate::api::QueryNotesArgs,
    ) -> Result<vault::data::QueryNotes, GatewayError> {
        let after = match self.core.open_cursor(v, page, args.cursor.as_deref())? {
            None => None,
            Some(Position::Query(p)) => Some(p),
            Some(_) => return Err(not_this_cursor()),
        };
        let spec = vault::data::QuerySpec {
            conditions: args.where_.unwrap_or_default(),
            tags: args.tag.unwrap_or_default(),
            path_prefix: args.path_prefix,
            fields: args.fields.unwrap_or_default(),
            sort: args.sort,
            limit: args.limit,
        };
        // The rows appear twice in a result (structured and as text).
        let max_bytes = self.core.read_limits().max_output_bytes / 2;
        let (mut out, next) = v.reader.query_notes_page(&spec, after.as_ref(), max_bytes)?;
        out.next_cursor = next.map(|p| self.core.seal(v, page, &Position::Query(p)));
        Ok(out)
    }

    pub fn vault_list(&self, cred: &Credential) -> VaultListOut {
        let config = self.core.config();
        let mut vaults: Vec<VaultItem> = self
            .core
            .visible(cred)
            .into_iter()
            .take(vault::MAX_LIST_ITEMS + 1)
            .map(|v| VaultItem {
                id: v.id.clone(),
                name: v.name.clone(),
                is_default: config.default_vault.as_deref() == Some(v.id.as_str()),
                note_count: v.reader.note_count() as u64,
            })
            .collect();
        let truncated = vaults.len() > vault::MAX_LIST_ITEMS;
        vaults.truncate(vault::MAX_LIST_ITEMS);
        VaultListOut { vaults, truncated }
    }

    pub fn overview(&self, v: &VaultHandle) -> Result<OverviewOut, GatewayError> {
        let counts = v.reader.counts()?;
        let tops = self.core.state.history_tops(&v.id)?;
        Ok(OverviewOut {
            vault: v.id.clone(),
            notes: counts.notes as u64,
            standards: counts.standards as u64,
            tags: counts.tags as u64,
            pending_proposals: self.core.state.count_pending(&v.id)?,
            revision: self.core.state.revision(&v.id)?,
            index: {
                // Compared with the files now: `fresh` only when reads use the index and no
                // catalog file differs from it.
                let health = v.reader.index_health();
                IndexStatus {
                    indexed_at: vault::rfc3339(health.indexed_at.unwrap_or(std::time::UNIX_EPOCH)),
                    fresh: health.fresh,
                    stale_files: health.stale_files as u64,
                }
            },
            history: HistoryTops {
                undo_top: tops.undo,
                redo_top: tops.redo,
            },
        })
    }

    pub fn vault_handles(&self, cred: &Credential) -> Vec<Arc<VaultHandle>> {
        self.core.visible(cred)
    }
}
