//! `Vault`: the read tools of one vault (docs/contract.md#the-mcp-surface) over contained file access.
//!
//! Once the search index (`crate::index`) is started and complete, the catalog tools (search,
//! tags, related, recent, counts, standards) answer from it; until then, and whenever it fails,
//! they scan: one walk (`index::catalog_walk`, the one definition of which notes exist) and at most one
//! read per note. Both paths share the argument checks and the `search`, `note`, `links`
//! functions, so their answers are the same.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use policy::{FolderPath, Layout, NoteClass, VaultPath};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::fs::{DirEntry, EntryKind, FsError, VaultFs};
use crate::index::grams::term_query_tokens;
use crate::index::query::ContentArgs;
use crate::index::{Index, IndexError, IndexHealth, SETTLE_WAIT, SyncReport, catalog_walk};
use crate::links::{Resolution, Resolver};
use crate::note::{Note, stem};
use crate::rank::{Fields, NoteRanker, Weights, hit_lines, judge};
use crate::search::{Ranker, Step, fold, fold_into, knowledge_score, parse_terms, snippet};
use crate::types::{
    ContentHit, ContentHits, ContentQuery, Counts, KnowledgeHit, KnowledgeHits, ListNotes, ListStandards,
    ListTags, MAX_LIST_ITEMS, NoteEntry, NoteEntryKind, NoteRef, NotesPos, ReadNote, RecentNote, RecentNotes,
    RecentPos, Related, SearchPage, SearchPos, StandardItem, TagCount, VaultError,
};

/// One vault opened for reading.
pub struct Vault {
    fs: Arc<VaultFs>,
    /// The search index, once started.
    index: OnceLock<Arc<Index>>,
}

impl Vault {
    /// Opens the vault; reads scan until `start_index` or `manual_index`.
    pub fn open(root: &Path, layout: Layout) -> std::io::Result<Vault> {
        Ok(Vault {
            fs: Arc::new(VaultFs::open(root, layout)?),
            index: OnceLock::new(),
        })
    }

    pub fn layout(&self) -> &Layout {
        self.fs.layout()
    }

    /// The contained file access underneath (for callers that need raw listings).
    pub fn fs(&self) -> &VaultFs {
        &self.fs
    }

    // ---- the search index ---------------------------------------------------------------------

    /// Starts the search index, kept fresh by a background thread (servers). Returns at once;
    /// reads scan until an index built earlier is open, or until the first build is done. A
    /// second call does nothing.
    pub fn start_index(&self) {
        self.index.get_or_init(|| Index::start(self.fs.clone()));
    }

    /// Uses the search index, kept fresh by the caller through `refresh_index` (the CLI, tests).
    /// Reads scan until the first refresh. Does nothing when an index is already in use.
    pub fn manual_index(&self) {
        self.index.get_or_init(|| Index::manual(self.fs.clone()));
    }

    /// Brings the index up to date now, in this thread (`rebuild`: re-reads every note), and
    /// reports `(done, total)` notes to `progress`. Starts a manual index if none is in use.
    pub fn refresh_index(
        &self,
        rebuild: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<SyncReport, IndexError> {
        self.manual_index();
        match self.index.get() {
            Some(ix) => ix.refresh(rebuild, progress),
            None => Ok(SyncReport::default()),
        }
    }

    /// The catalog files (readable `*.md` under notes and standards, not the inbox) with size and
    /// time, sorted by path: one walk, no reads.
    pub fn catalog_files(&self) -> Vec<DirEntry> {
        catalog_walk(&self.fs)
    }

    /// Brings the index to `files` (a `catalog_files` walk the caller just took, e.g. for the
    /// vault fingerprint). When reads already use the index, waits (a few seconds at most) until
    /// the changes are searchable.
    pub fn index_sync(&self, files: Vec<DirEntry>) {
        if let Some(ix) = self.index.get() {
            ix.sync_with(files, SETTLE_WAIT);
        }
    }

    /// Brings the index up to date with every file (a walk, then only changed notes are read).
    pub fn refresh(&self) {
        if self.index.get().is_some() {
            self.index_sync(self.catalog_files());
        }
    }

    /// Re-indexes these paths (notes, or folders whose notes moved) if they changed.
    pub fn update_paths(&self, paths: &[VaultPath]) {
        if let Some(ix) = self.index.get() {
            ix.update_paths(paths, SETTLE_WAIT);
        }
    }

    /// Asks for these paths to be indexed without waiting (the caller may hold the vault's
    /// writer); [`Vault::index_settled`] waits for them.
    pub fn submit_paths(&self, paths: &[VaultPath]) -> crate::index::IndexTicket {
        match self.index.get() {
            Some(ix) => ix.submit_paths(paths),
            None => crate::index::IndexTicket::Done(true),
        }
    }

    /// Whether the paths of `ticket` are indexed now (docs/contract.md#proposals: an apply
    /// answers `index: "failed"` otherwise), waiting at most as long as `update_paths` does.
    pub fn index_settled(&self, ticket: crate::index::IndexTicket) -> bool {
        match self.index.get() {
            Some(ix) => ix.settled(ticket, SETTLE_WAIT),
            None => true,
        }
    }

    /// Waits until reads are answered from the index; false after `timeout` or without an index.
    pub fn wait_index_ready(&self, timeout: Duration) -> bool {
        self.index.get().is_some_and(|ix| ix.wait_ready(timeout))
    }

    /// How the index compares with the files right now (one walk).
    pub fn index_health(&self) -> IndexHealth {
        match self.index.get() {
            Some(ix) => ix.health(),
            None => IndexHealth {
                indexed_at: None,
                fresh: false,
                stale_files: self.catalog_files().len(),
            },
        }
    }

    /// Where the index file lives (`<vault>/.vaultgate/index.sqlite`).
    pub fn index_file(&self) -> std::path::PathBuf {
        self.fs
            .root()
            .join(crate::write::MACHINE_DIR)
            .join(crate::index::INDEX_FILE)
    }

    /// The index, if reads may try it.
    fn ix(&self) -> Option<&Index> {
        self.index.get().map(|ix| &**ix)
    }

    /// `read_note`: any readable UTF-8 file (the inbox included); a folder is `NOT_FOUND`.
    pub fn read_note(&self, path: &str) -> Result<ReadNote, VaultError> {
        let path = VaultPath::parse(path)?;
        let file = self.fs.read_text(&path)?;
        let note = crate::note::NoteHeader::parse(&file.text, stem(path.file_name()));
        Ok(ReadNote {
            path: path.to_string(),
            title: note.title,
            frontmatter_error: note.frontmatter_error.as_ref().map(ToString::to_string),
            frontmatter: note.frontmatter_error.is_none().then_some(note.frontmatter),
            hash: hex::encode(Sha256::digest(file.bytes())),
            bytes: file.text.len() as u64,
            content: file.text,
            modified: rfc3339(file.modified),
        })
    }

    /// `read_note {hash}` (docs/contract.md#git-history): an earlier version's `bytes`, read as `read_note` reads the
    /// file (the read policy on `path`, UTF-8, the size limit); `modified` is when it was written.
    pub fn read_version(&self, path: &str, bytes: Vec<u8>, modified: String) -> Result<ReadNote, VaultError> {
        let path = VaultPath::parse(path)?;
        self.fs.layout().check_read(&path)?;
        if bytes.len() as u64 > crate::fs::MAX_READ_BYTES {
            return Err(FsError::TooLarge.into());
        }
        let text = String::from_utf8(bytes).map_err(|_| FsError::NotText)?;
        let note = crate::note::NoteHeader::parse(&text, stem(path.file_name()));
        Ok(ReadNote {
            path: path.to_string(),
            title: note.title,
            frontmatter_error: note.frontmatter_error.as_ref().map(ToString::to_string),
            frontmatter: note.frontmatter_error.is_none().then_some(note.frontmatter),
            hash: hex::encode(Sha256::digest(text.as_bytes())),
            bytes: text.len() as u64,
            content: text,
            modified,
        })
    }

    /// `list_notes`: one folder level, folders first, then files, each by path; the page after
    /// `after`, and where the next one starts.
    pub fn list_notes_page(
        &self,
        dir: Option<&str>,
        limit: Option<u32>,
        after: Option<&NotesPos>,
    ) -> Result<(ListNotes, Option<NotesPos>), VaultError> {
        let limit = check_limit(limit, 200, 500)?;
        let folder = FolderPath::parse(dir.unwrap_or(""))?;
        let mut entries = self.fs.list_dir(&folder).map_err(|e| match e {
            // `dir` names a file: there is no such folder.
            FsError::Io(io) if io.kind() == std::io::ErrorKind::NotADirectory => FsError::NotFound,
            e => e,
        })?;
        entries.sort_by(|a, b| {
            (a.kind != EntryKind::Folder, &a.path).cmp(&(b.kind != EntryKind::Folder, &b.path))
        });
        if let Some(pos) = after {
            // Every entry of the folder shares its path up to the name: the name is the key.
            entries.retain(|e| {
                let file = e.kind != EntryKind::Folder;
                (file && !pos.file) || (file == pos.file && pos.name.is_before(e.path.file_name()))
            });
        }
        let truncated = entries.len() > limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some(e) if truncated => Some(NotesPos {
                file: e.kind != EntryKind::Folder,
                name: crate::types::Key::exact(e.path.file_name()),
            }),
            _ => None,
        };
        let entries = entries
            .into_iter()
            .map(|e| {
                let (kind, title) = match e.kind {
                    EntryKind::Folder => (NoteEntryKind::Folder, None),
                    EntryKind::File if e.path.is_markdown() => {
                        (NoteEntryKind::Note, Some(self.title_of(&e.path)))
                    }
                    EntryKind::File => (NoteEntryKind::File, None),
                };
                NoteEntry {
                    path: e.path.to_string(),
                    kind,
                    title,
                }
            })
            .collect();
        Ok((
            ListNotes {
                entries,
                truncated,
                next_cursor: None,
            },
            next,
        ))
    }

    /// `list_standards`: every note under the standards folders, by path.
    pub fn list_standards(&self) -> Result<ListStandards, VaultError> {
        if let Some(out) = self.ix().and_then(Index::list_standards) {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        let standards = cat
            .entries
            .iter()
            .filter(|e| e.class == NoteClass::Standard)
            .map(|e| {
                let note = cat.note(e);
                StandardItem {
                    path: e.path.to_string(),
                    title: cat.title(e),
                    description: note.and_then(|n| n.description.clone()).unwrap_or_default(),
                }
            })
            .collect();
        Ok(cap_standards(standards))
    }

    /// `list_tags`: how many notes carry each tag, most used first, then by name.
    pub fn list_tags(&self) -> Result<ListTags, VaultError> {
        if let Some(out) = self.ix().and_then(Index::list_tags) {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        let mut tags: HashMap<String, TagCount> = HashMap::new();
        for e in &cat.entries {
            let Some(note) = cat.note(e) else { continue };
            // `Note::tags` is already distinct case-insensitively.
            for t in &note.tags {
                tags.entry(fold(t))
                    .or_insert_with(|| TagCount {
                        name: t.clone(),
                        count: 0,
                    })
                    .count += 1;
            }
        }
        let mut tags: Vec<(String, TagCount)> = tags.into_iter().collect();
        tags.sort_by(|(fa, a), (fb, b)| b.count.cmp(&a.count).then_with(|| fa.cmp(fb)));
        Ok(ListTags {
            tags: tags.into_iter().map(|(_, t)| t).collect(),
            truncated: false,
            next_cursor: None,
        })
    }

    /// `get_related_notes` of a readable note.
    pub fn related(&self, path: &str) -> Result<Related, VaultError> {
        let path = VaultPath::parse(path)?;
        let file = self.fs.read_text(&path)?;
        let this = Note::parse(&file.text, stem(path.file_name()));
        if let Some(out) = self.ix().and_then(|ix| ix.related(&path, &this)) {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        let resolver = Resolver::new(cat.entries.iter().map(|e| &e.path));

        let (outlinks, broken_links) = crate::links::links_out(&resolver, &path, &this.links);
        let outlinks = outlinks
            .into_iter()
            .map(|p| {
                let title = cat
                    .find(&p)
                    .map_or_else(|| stem(p.file_name()).to_owned(), |e| cat.title(e));
                NoteRef {
                    path: p.to_string(),
                    title,
                }
            })
            .collect();

        let mut backlinks = Vec::new();
        let mut mocs = Vec::new();
        for e in cat.entries.iter().filter(|e| e.path != path) {
            let Some(note) = cat.note(e) else { continue };
            let links_here = note
                .links
                .iter()
                .any(|l| resolver.resolve(&e.path, l) == Resolution::Note(path.clone()));
            if !links_here {
                continue;
            }
            let item = NoteRef {
                path: e.path.to_string(),
                title: note.title.clone(),
            };
            if crate::note::is_moc(note, &e.path) {
                mocs.push(item.clone());
            }
            backlinks.push(item);
        }
        Ok(Related::capped(
            outlinks,
            backlinks,
            broken_links,
            mocs,
            MAX_LIST_ITEMS,
        ))
    }

    /// `list_recent_notes`: newest first (then by path), optionally modified at or after `since`;
    /// the page after `after`, and where the next one starts.
    pub fn recent_page(
        &self,
        limit: Option<u32>,
        since: Option<&str>,
        after: Option<&RecentPos>,
    ) -> Result<(RecentNotes, Option<RecentPos>), VaultError> {
        let limit = check_limit(limit, 20, 200)?;
        let since = since
            .map(|s| {
                OffsetDateTime::parse(s, &Rfc3339)
                    .map(SystemTime::from)
                    .map_err(|_| {
                        VaultError::InvalidArgument(format!("since is not an RFC 3339 timestamp: {s:?}"))
                    })
            })
            .transpose()?;
        if let Some(out) = self.ix().and_then(|ix| ix.recent(limit, since, after)) {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        let mut entries: Vec<&CatalogEntry> = cat
            .entries
            .iter()
            .filter(|e| since.is_none_or(|s| e.modified >= s))
            .filter(|e| after.is_none_or(|p| recent_is_after(p, nanos_of(e.modified), e.path.as_str())))
            .collect();
        entries.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.path.cmp(&b.path)));
        let truncated = entries.len() > limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some(e) if truncated => Some(RecentPos {
                mtime: nanos_of(e.modified),
                path: crate::types::Key::exact(e.path.as_str()),
            }),
            _ => None,
        };
        let notes = entries
            .into_iter()
            .map(|e| RecentNote {
                path: e.path.to_string(),
                title: cat.title(e),
                modified: rfc3339(e.modified),
            })
            .collect();
        Ok((
            RecentNotes {
                notes,
                truncated,
                next_cursor: None,
            },
            next,
        ))
    }

    /// `query_notes` (docs/contract.md#notes-as-data-and-attachments; the rules are in `data`): one page of the rows after `after`,
    /// its JSON at most about `max_bytes`, and where the next one starts. Answered from the
    /// index; while it is being built, from the files, by the same rules.
    pub fn query_notes_page(
        &self,
        spec: &crate::data::QuerySpec,
        after: Option<&crate::data::QueryPos>,
        max_bytes: usize,
    ) -> Result<(crate::data::QueryNotes, Option<crate::data::QueryPos>), VaultError> {
        let q = crate::data::Query::parse(spec)?;
        if let FolderPath::Dir(d) = &q.prefix {
            self.layout().check_read(d)?;
        }
        if let Some(out) = self.ix().and_then(|ix| ix.query_notes(&q, after, max_bytes)) {
            return Ok(out);
        }
        let mut notes = Vec::new();
        for e in catalog_walk(&self.fs)
            .into_iter()
            .filter(|e| q.prefix.contains(&e.path))
        {
            let Ok(file) = self.fs.read_text(&e.path) else {
                continue;
            };
            let note = Note::parse(&file.text, stem(e.path.file_name()));
            let data = crate::data::NoteData::new(note.title, note.tags, &note.frontmatter);
            notes.push((
                e.path,
                nanos_of(file.modified),
                file.text.len() as u64,
                data,
                note.frontmatter,
            ));
        }
        let rows: Vec<crate::data::Row<'_>> = notes
            .iter()
            .map(|(path, mtime, size, data, _)| crate::data::Row {
                at: 0,
                path,
                mtime: *mtime,
                size: *size,
                data,
            })
            .collect();
        // Without the index every note was just read: no columns to gain from.
        let cols = crate::data::Columns::default();
        crate::data::page(&q, &rows, &cols, after, max_bytes, &mut |i| {
            Ok::<_, VaultError>(notes.get(i).map(|n| n.4.clone()))
        })
    }

    /// `search_note_content`: case-insensitive substring AND over the terms (docs/contract.md#the-mcp-surface, docs/contract.md#search-and-the-index); one
    /// page (see `search::Ranker`), and where the next one starts.
    pub fn search_content_page(
        &self,
        q: &ContentQuery,
        page: &SearchPage,
    ) -> Result<(ContentHits, Option<SearchPos>), VaultError> {
        let terms = query_terms(&q.query)?;
        let limit = check_limit(q.limit, 60, 200)?;
        let per_note = check_range("perNote", q.per_note, 3, 50)?;
        let prefix = match q.path_prefix.as_deref() {
            None => FolderPath::Root,
            Some(p) => {
                let prefix = FolderPath::parse(p)?;
                if let FolderPath::Dir(d) = &prefix {
                    self.layout().check_read(d)?;
                }
                prefix
            }
        };
        let tags = tag_filter(&q.tags);
        if let Some(out) = self.ix().and_then(|ix| {
            ix.search_content(ContentArgs {
                terms: terms.clone(),
                mode: q.mode,
                per_note,
                limit,
                prefix: prefix.clone(),
                tags: tags.clone(),
                page: page.clone(),
            })
        }) {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        // The statistics cover every readable note (read once for them, then again to judge
        // those in scope, so that no more than one note's text is held at a time).
        let query_tokens: Vec<Vec<String>> = terms.iter().map(|t| term_query_tokens(t)).collect();
        let (mut notes, mut bytes) = (0u64, 0u64);
        let mut gram_counts: Vec<Vec<u64>> = query_tokens.iter().map(|t| vec![0; t.len()]).collect();
        let mut folded = String::new();
        for e in &cat.entries {
            let Some(text) = cat.read(e) else { continue };
            notes += 1;
            bytes += text.len() as u64;
            fold_into(&text, &mut folded);
            for (counts, tokens) in gram_counts.iter_mut().zip(&query_tokens) {
                for (c, g) in counts.iter_mut().zip(tokens) {
                    if folded.contains(g.as_str()) {
                        *c += 1;
                    }
                }
            }
        }
        // A term's document frequency: the notes holding its rarest gram (all notes when it has none).
        let df: Vec<u64> = gram_counts
            .iter()
            .map(|c| c.iter().copied().min().unwrap_or(notes))
            .collect();
        let weights = Weights::new(notes, bytes, &df);

        let mut ranker: NoteRanker<String> = NoteRanker::new(page, limit);
        for e in cat.entries.iter().filter(|e| prefix.contains(&e.path)) {
            if ranker.before_note() == Step::Stop {
                break;
            }
            let Some(text) = cat.read(e) else { continue };
            // Parsed now, from the text at hand, for the tag filter, the title and the aliases.
            let Some(note) = cat.note_from(e, &text) else {
                continue;
            };
            if !tags.iter().all(|t| note.has_tag(t)) {
                continue;
            }
            fold_into(&text, &mut folded);
            let fields = Fields::Some {
                title: &note.title,
                aliases: &note.aliases,
            };
            let Some(j) = judge(&text, &folded, &terms, q.mode, &fields) else {
                continue;
            };
            let score = weights.score(&j);
            if ranker.cannot_enter(score, e.path.as_str()) {
                ranker.more_exist();
                continue;
            }
            let hits = hit_lines(&text, &folded, &terms, &j, per_note)
                .into_iter()
                .map(|(_, line, text)| (line, snippet(text, &terms)))
                .collect();
            ranker.offer(score, e.path.as_str(), hits);
        }
        let (ranked, truncated, next) = ranker.finish();
        let hits = ranked
            .into_iter()
            .map(|h| {
                let title = cat.find_str(&h.path).map(|e| cat.title(e)).unwrap_or_default();
                ContentHit {
                    path: h.path,
                    line: h.line as usize,
                    snippet: h.item,
                    title,
                    score: h.score as usize,
                }
            })
            .collect();
        Ok((
            ContentHits {
                hits,
                truncated,
                next_cursor: None,
            },
            next,
        ))
    }

    /// `search_knowledge`: every term in at least one of title, aliases, description, tags; one
    /// page (see `search::Ranker`), and where the next one starts.
    pub fn search_knowledge_page(
        &self,
        query: &str,
        tags: &[String],
        limit: Option<u32>,
        page: &SearchPage,
    ) -> Result<(KnowledgeHits, Option<SearchPos>), VaultError> {
        let terms = query_terms(query)?;
        let limit = check_limit(limit, 20, 200)?;
        let tags = tag_filter(tags);
        if let Some(out) = self
            .ix()
            .and_then(|ix| ix.search_knowledge(&terms, &tags, limit, page))
        {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        let mut ranker: Ranker<(Vec<crate::types::MatchedField>, String)> =
            Ranker::new(page, limit, knowledge_top(&terms));
        for e in &cat.entries {
            match ranker.before_note(e.path.as_str()) {
                Step::Skip => continue,
                Step::Stop => break,
                Step::Examine => {}
            }
            let Some(note) = cat.note(e) else { continue };
            if !tags.iter().all(|t| note.has_tag(t)) {
                continue;
            }
            let Some((matched, score)) = knowledge_score(note, &terms) else {
                continue;
            };
            ranker.offer(score, e.path.as_str(), 0, || (matched, note.title.clone()));
            if ranker.after_note() {
                break;
            }
        }
        Ok(knowledge_page(ranker))
    }

    /// The first page of `list_notes_page`.
    pub fn list_notes(&self, dir: Option<&str>, limit: Option<u32>) -> Result<ListNotes, VaultError> {
        Ok(self.list_notes_page(dir, limit, None)?.0)
    }

    /// The first page of `recent_page`.
    pub fn recent(&self, limit: Option<u32>, since: Option<&str>) -> Result<RecentNotes, VaultError> {
        Ok(self.recent_page(limit, since, None)?.0)
    }

    /// The first page of `search_content_page`, with no time budget.
    pub fn search_content(&self, q: &ContentQuery) -> Result<ContentHits, VaultError> {
        Ok(self.search_content_page(q, &SearchPage::default())?.0)
    }

    /// The first page of `search_knowledge_page`, with no time budget.
    pub fn search_knowledge(
        &self,
        query: &str,
        tags: &[String],
        limit: Option<u32>,
    ) -> Result<KnowledgeHits, VaultError> {
        Ok(self
            .search_knowledge_page(query, tags, limit, &SearchPage::default())?
            .0)
    }

    /// Catalog counts for the vault overview.
    pub fn counts(&self) -> Result<Counts, VaultError> {
        if let Some(out) = self.ix().and_then(Index::counts) {
            return Ok(out);
        }
        let cat = Catalog::scan(&self.fs);
        let mut tags = HashSet::new();
        for e in &cat.entries {
            if let Some(note) = cat.note(e) {
                tags.extend(note.tags.iter().map(|t| fold(t)));
            }
        }
        Ok(Counts {
            notes: cat.count(NoteClass::Note),
            standards: cat.count(NoteClass::Standard),
            tags: tags.len(),
        })
    }

    /// Notes outside standards and inbox (for `vault_list`); walks, reads nothing.
    pub fn note_count(&self) -> usize {
        if let Some(n) = self.ix().and_then(Index::note_count) {
            return n;
        }
        Catalog::scan(&self.fs).count(NoteClass::Note)
    }

    /// A note's title for a listing; the stem when it cannot be read.
    fn title_of(&self, path: &VaultPath) -> String {
        match self.fs.read_text(path) {
            Ok(f) => Note::parse(&f.text, stem(path.file_name())).title,
            Err(_) => stem(path.file_name()).to_owned(),
        }
    }
}

/// RFC 3339 UTC to the second, e.g. `2026-11-29T20:31:47Z` (times before 1970 read as 1970).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// The best score a `search_knowledge` hit can have: every term in a title.
pub(crate) fn knowledge_top(terms: &[String]) -> u32 {
    to_u32(terms.len()).saturating_mul(4)
}

/// A ranker's page of `search_knowledge`.
pub(crate) fn knowledge_page(
    ranker: Ranker<(Vec<crate::types::MatchedField>, String)>,
) -> (KnowledgeHits, Option<SearchPos>) {
    let (ranked, truncated, next) = ranker.finish();
    let hits = ranked
        .into_iter()
        .map(|h| KnowledgeHit {
            path: h.path,
            title: h.item.1,
            matched: h.item.0,
            score: h.score,
        })
        .collect();
    (
        KnowledgeHits {
            hits,
            truncated,
            next_cursor: None,
        },
        next,
    )
}

pub(crate) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Nanoseconds since 1970, as the index keeps modification times.
pub(crate) fn nanos_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// A note modified at `mtime` sorts after `pos` (newest first, then by path).
pub(crate) fn recent_is_after(pos: &RecentPos, mtime: i64, path: &str) -> bool {
    mtime < pos.mtime || (mtime == pos.mtime && pos.path.is_before(path))
}

/// `list_standards` with at most `MAX_LIST_ITEMS` items (docs/contract.md#limits-and-pagination).
pub(crate) fn cap_standards(mut standards: Vec<StandardItem>) -> ListStandards {
    let count = standards.len();
    standards.truncate(MAX_LIST_ITEMS);
    ListStandards {
        standards,
        truncated: count > MAX_LIST_ITEMS,
        count,
    }
}

fn check_limit(limit: Option<u32>, default: usize, max: usize) -> Result<usize, VaultError> {
    check_range("limit", limit, default, max)
}

fn check_range(name: &str, n: Option<u32>, default: usize, max: usize) -> Result<usize, VaultError> {
    match n {
        None => Ok(default),
        Some(n) if (1..=max).contains(&(n as usize)) => Ok(n as usize),
        Some(n) => Err(VaultError::InvalidArgument(format!(
            "{name} must be between 1 and {max}, got {n}"
        ))),
    }
}

fn query_terms(query: &str) -> Result<Vec<String>, VaultError> {
    let terms = parse_terms(query);
    if terms.is_empty() {
        return Err(VaultError::InvalidArgument(
            "query must contain at least one term".to_owned(),
        ));
    }
    Ok(terms)
}

/// Tag filters without `#`; empty entries are ignored.
fn tag_filter(tags: &[String]) -> Vec<String> {
    tags.iter()
        .map(|t| t.trim().trim_start_matches('#').to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// One catalog note: found by the walk, read and parsed at most once, lazily.
struct CatalogEntry {
    path: VaultPath,
    class: NoteClass,
    modified: SystemTime,
    note: OnceCell<Option<Note>>,
}

/// The notes that search, tags, links, recent and counts cover.
struct Catalog<'v> {
    fs: &'v VaultFs,
    /// Sorted by path.
    entries: Vec<CatalogEntry>,
}

impl<'v> Catalog<'v> {
    /// Every readable `*.md` under the notes and standards folders, the inbox left out: one walk,
    /// no reads.
    fn scan(fs: &'v VaultFs) -> Catalog<'v> {
        let layout = fs.layout();
        let entries = catalog_walk(fs)
            .into_iter()
            .map(|e| CatalogEntry {
                class: layout.classify(&e.path),
                path: e.path,
                modified: e.modified,
                note: OnceCell::new(),
            })
            .collect();
        Catalog { fs, entries }
    }

    fn count(&self, class: NoteClass) -> usize {
        self.entries.iter().filter(|e| e.class == class).count()
    }

    fn find_str(&self, path: &str) -> Option<&CatalogEntry> {
        self.entries
            .binary_search_by(|e| e.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }

    fn find(&self, path: &VaultPath) -> Option<&CatalogEntry> {
        self.entries
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// The note's text, not kept (search needs it once); `None` when unreadable (logged).
    fn read(&self, e: &CatalogEntry) -> Option<String> {
        match self.fs.read_text(&e.path) {
            Ok(f) => Some(f.text),
            Err(err) => {
                tracing::debug!(path = %e.path, error = %err, "note skipped");
                None
            }
        }
    }

    /// The parsed note, read on first use.
    fn note<'e>(&self, e: &'e CatalogEntry) -> Option<&'e Note> {
        e.note
            .get_or_init(|| self.read(e).map(|t| Note::parse(&t, stem(e.path.file_name()))))
            .as_ref()
    }

    /// The parsed note from text already read.
    fn note_from<'e>(&self, e: &'e CatalogEntry, text: &str) -> Option<&'e Note> {
        e.note
            .get_or_init(|| Some(Note::parse(text, stem(e.path.file_name()))))
            .as_ref()
    }

    fn title(&self, e: &CatalogEntry) -> String {
        self.note(e)
            .map_or_else(|| stem(e.path.file_name()).to_owned(), |n| n.title.clone())
    }
}

impl Vault {
    /// `Index::move_sources`, when the index answers.
    pub(crate) fn index_move_sources(
        &self,
        from: &VaultPath,
        to: &VaultPath,
    ) -> Option<(crate::links::Resolver, Vec<VaultPath>)> {
        self.ix().and_then(|ix| ix.move_sources(from, to))
    }

    /// The catalog's note paths (notes and standards, not the inbox), sorted: the set links
    /// resolve against (for `rewrite::plan_move`).
    pub(crate) fn catalog_paths(&self) -> Vec<VaultPath> {
        Catalog::scan(&self.fs)
            .entries
            .into_iter()
            .map(|e| e.path)
            .collect()
    }
}
