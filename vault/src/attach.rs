//! Attachments (docs/contract.md#notes-as-data-and-attachments): the vault's files that are not notes, listed through the same path
//! policy as notes, with a media type told from the extension and checked against the content.
//! Nothing here parses a document: a PDF's bytes leave through `read_pdf` to the engine, which
//! hands them to the worker process.

use std::time::SystemTime;

use policy::{FolderPath, NoteClass, VaultPath};
use schemars::JsonSchema;
use serde::Serialize;

use crate::fs::{EntryKind, FsError};
use crate::types::{Key, VaultError};
use crate::{Vault, rfc3339};

/// `list_attachments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListAttachments {
    pub attachments: Vec<Attachment>,
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub path: String,
    pub bytes: u64,
    /// From the extension, checked against the first bytes: a file whose content contradicts
    /// its extension is `application/octet-stream`.
    pub media_type: String,
    /// RFC 3339 UTC.
    pub modified: String,
}

pub const PDF: &str = "application/pdf";
const OCTETS: &str = "application/octet-stream";
/// Enough of a file's head for every signature below.
const HEAD: usize = 16;

/// Media type by extension, with the leading bytes the content must have (`None`: any).
const TYPES: &[(&str, &str, Option<&[u8]>)] = &[
    ("pdf", PDF, Some(b"%PDF-")),
    ("png", "image/png", Some(b"\x89PNG\r\n\x1a\n")),
    ("jpg", "image/jpeg", Some(b"\xff\xd8\xff")),
    ("jpeg", "image/jpeg", Some(b"\xff\xd8\xff")),
    ("gif", "image/gif", Some(b"GIF8")),
    ("webp", "image/webp", Some(b"RIFF")),
    ("zip", "application/zip", Some(b"PK")),
    ("svg", "image/svg+xml", None),
    ("txt", "text/plain", None),
    ("csv", "text/csv", None),
    ("json", "application/json", None),
    ("canvas", "application/json", None),
    ("html", "text/html", None),
    ("mp3", "audio/mpeg", None),
    ("mp4", "video/mp4", None),
    ("webm", "video/webm", None),
];

/// The media type of `path` whose file starts with `head`.
pub fn media_type(path: &VaultPath, head: &[u8]) -> &'static str {
    let name = path.file_name();
    let Some((_, ext)) = name.rsplit_once('.') else {
        return OCTETS;
    };
    let ext = ext.to_ascii_lowercase();
    match TYPES.iter().find(|(e, _, _)| *e == ext) {
        Some((_, t, Some(magic))) if head.starts_with(magic) => {
            // WebP is RIFF with its own tag at 8..12.
            if *t == "image/webp" && head.get(8..12) != Some(b"WEBP") {
                return OCTETS;
            }
            t
        }
        Some((_, t, None)) => t,
        _ => OCTETS,
    }
}

/// Where `list_attachments` continues: after this path.
pub type AttachmentsPos = Key;

impl Vault {
    /// `list_attachments`: every readable non-note file below `dir` (default: the notes and
    /// standards folders), the inbox left out, by path; the page after `after`.
    pub fn list_attachments_page(
        &self,
        dir: Option<&str>,
        limit: Option<u32>,
        after: Option<&AttachmentsPos>,
    ) -> Result<(ListAttachments, Option<AttachmentsPos>), VaultError> {
        let limit = match limit {
            None => 200,
            Some(n) if (1..=500).contains(&n) => n as usize,
            Some(n) => {
                return Err(VaultError::InvalidArgument(format!(
                    "limit must be between 1 and 500, got {n}"
                )));
            }
        };
        let fs = self.fs();
        let layout = fs.layout();
        let folder = FolderPath::parse(dir.unwrap_or(""))?;
        if let FolderPath::Dir(p) = &folder {
            // A folder that is not there (or is a file) is NOT_FOUND, as for list_notes.
            if fs.metadata(p)?.kind != EntryKind::Folder {
                return Err(VaultError::Fs(FsError::NotFound));
            }
        }
        let roots: Vec<FolderPath> = layout.notes.iter().chain(&layout.standards).cloned().collect();
        let mut rows = Vec::with_capacity(limit + 1);
        for e in fs.walk_attachments(std::slice::from_ref(&folder)) {
            if after.is_some_and(|k| !k.is_before(e.path.as_str())) {
                continue;
            }
            // SECURITY(T-PATH): the same rules as the catalog's notes: readable, in a notes or
            // standards folder, never the inbox.
            if layout.classify(&e.path) == NoteClass::Inbox
                || layout.check_read(&e.path).is_err()
                || !roots.iter().any(|f| f.contains(&e.path))
            {
                continue;
            }
            rows.push(e);
            if rows.len() > limit {
                break;
            }
        }
        let truncated = rows.len() > limit;
        rows.truncate(limit);
        let next = match rows.last() {
            Some(e) if truncated => Some(Key::exact(e.path.as_str())),
            _ => None,
        };
        let attachments = rows
            .into_iter()
            .map(|e| {
                let head = fs.read_head(&e.path, HEAD).unwrap_or_default();
                Attachment {
                    media_type: media_type(&e.path, &head).to_owned(),
                    path: e.path.to_string(),
                    bytes: e.size,
                    modified: rfc3339(e.modified),
                }
            })
            .collect();
        Ok((
            ListAttachments {
                attachments,
                truncated,
                next_cursor: None,
            },
            next,
        ))
    }

    /// The bytes of the PDF at `path` (at most `max`), after the read policy; anything that is
    /// not a PDF by extension and content is `NOT_TEXT` before more than its head is read.
    pub fn read_pdf(&self, path: &str, max: u64) -> Result<(Vec<u8>, SystemTime), VaultError> {
        let path = VaultPath::parse(path)?;
        let is_pdf = |head: &[u8]| media_type(&path, head) == PDF;
        Ok(self.fs().read_bytes_if(&path, max, HEAD, is_pdf)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn p(s: &str) -> VaultPath {
        VaultPath::parse(s).unwrap()
    }

    #[test]
    fn the_content_must_agree_with_the_extension() {
        assert_eq!(media_type(&p("a.pdf"), b"%PDF-1.7\n"), PDF);
        assert_eq!(media_type(&p("a.PDF"), b"%PDF-1.4"), PDF);
        assert_eq!(media_type(&p("a.pdf"), b"\x89PNG\r\n\x1a\n"), OCTETS);
        assert_eq!(media_type(&p("a.png"), b"\x89PNG\r\n\x1a\nrest"), "image/png");
        assert_eq!(media_type(&p("a.png"), b"%PDF-1.7"), OCTETS);
        assert_eq!(media_type(&p("a.webp"), b"RIFF\0\0\0\0WEBPVP8 "), "image/webp");
        assert_eq!(media_type(&p("a.webp"), b"RIFF\0\0\0\0WAVEfmt "), OCTETS);
        assert_eq!(media_type(&p("data.csv"), b""), "text/csv");
        assert_eq!(media_type(&p("noext"), b"%PDF-"), OCTETS);
        assert_eq!(media_type(&p("a.exe"), b"MZ"), OCTETS);
    }
}
