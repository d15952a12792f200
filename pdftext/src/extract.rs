//! Text out of a PDF, with lopdf. Only the worker process calls this.

use std::collections::BTreeSet;

use lopdf::{DecompressError, Error as PdfError, LoadOptions, ParseError};

use crate::wire::{Document, Failure, Page, Request};

/// The most any one stream may inflate to while the document loads (object and cross-reference
/// streams), and the most one page's content streams may inflate to in total.
pub(crate) const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

const LIMIT_REASON: &str = "a stream in the PDF inflates to more than 64 MiB";

pub(crate) fn extract(pdf: &[u8], req: &Request) -> Result<Document, Failure> {
    let options = LoadOptions {
        max_decompressed_size: Some(MAX_DECOMPRESSED_BYTES),
        ..LoadOptions::default()
    };
    let doc = lopdf::Document::load_mem_with_options(pdf, options).map_err(|e| load_failure(&e))?;
    // lopdf tries the empty user password itself and, when it opens the document, decrypts it
    // and drops /Encrypt from the trailer. Still encrypted here means a real password is needed.
    if doc.is_encrypted() {
        return Err(Failure::encrypted());
    }
    let page_ids = doc.get_pages();
    if page_ids.is_empty() {
        return Err(Failure::corrupt("the PDF has no pages"));
    }
    let page_count = u32::try_from(page_ids.len()).unwrap_or(u32::MAX);
    drop(page_ids);

    let wanted = wanted_pages(req, page_count);
    let budget = req.max_total_bytes;
    let mut used: u64 = 0;
    let mut truncated = false;
    let mut pages = Vec::with_capacity(wanted.len());
    let mut failures: Vec<PageFailure> = Vec::new();

    for number in wanted.iter().copied() {
        if used >= budget {
            // The budget is spent: this page and every later one are left out.
            truncated = true;
            break;
        }
        let (raw, error) = match page_text(&doc, number) {
            Ok(raw) => (raw, None),
            Err(failure) => {
                failures.push(failure);
                (String::new(), Some(failure.reason().to_owned()))
            }
        };
        let mut text = normalise(&raw);
        let mut cut = cut_chars(&mut text, usize::try_from(req.max_chars).unwrap_or(usize::MAX));
        let remaining = budget - used;
        if u64::try_from(text.len()).unwrap_or(u64::MAX) > remaining {
            cut_bytes(&mut text, usize::try_from(remaining).unwrap_or(usize::MAX));
            cut = true;
        }
        used += u64::try_from(text.len()).unwrap_or(u64::MAX);
        truncated |= cut;
        pages.push(Page {
            page: number,
            text,
            truncated: cut,
            error,
        });
    }

    if !pages.is_empty() && failures.len() == pages.len() {
        // Not one page gave text: the document, not a page, is the problem.
        return Err(if failures.contains(&PageFailure::Limit) {
            Failure::limit(LIMIT_REASON)
        } else {
            Failure::corrupt("no page of the PDF could be read")
        });
    }

    Ok(Document {
        page_count,
        pages,
        truncated,
    })
}

/// The requested pages that exist, ascending, each once.
fn wanted_pages(req: &Request, page_count: u32) -> Vec<u32> {
    match &req.pages {
        None => (1..=req.default_pages.min(page_count)).collect(),
        Some(list) => list
            .iter()
            .copied()
            .filter(|n| (1..=page_count).contains(n))
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageFailure {
    /// A content stream would inflate past the limit.
    Limit,
    /// Anything else lopdf could not read.
    Unreadable,
}

impl PageFailure {
    fn reason(self) -> &'static str {
        match self {
            PageFailure::Limit => "this page would inflate past the worker's limit",
            PageFailure::Unreadable => "this page could not be read",
        }
    }
}

/// The raw text of one page. lopdf answers in chunks, one per font run; a chunk it could not
/// decode is skipped, and the page fails only when nothing but errors came back. A page whose
/// own dictionary did not load (lopdf skips an object it cannot parse, so the page would read as
/// blank) fails too.
fn page_text(doc: &lopdf::Document, number: u32) -> Result<String, PageFailure> {
    let loaded = doc
        .get_pages()
        .get(&number)
        .is_some_and(|id| doc.get_dictionary(*id).is_ok());
    if !loaded {
        return Err(PageFailure::Unreadable);
    }
    let chunks = doc.extract_text_chunks_with_limit(&[number], MAX_DECOMPRESSED_BYTES);
    let mut text = String::new();
    let mut any_ok = false;
    let mut failure = None;
    for chunk in chunks {
        match chunk {
            Ok(s) => {
                any_ok = true;
                text.push_str(&s);
            }
            Err(e) => {
                let this = if is_size_limit(&e) {
                    PageFailure::Limit
                } else {
                    PageFailure::Unreadable
                };
                if failure != Some(PageFailure::Limit) {
                    failure = Some(this);
                }
            }
        }
    }
    match failure {
        Some(f) if !any_ok => Err(f),
        _ => Ok(text),
    }
}

fn is_size_limit(e: &PdfError) -> bool {
    matches!(
        e,
        PdfError::Decompress(DecompressError::MemoryLimitExceeded { .. })
    )
}

/// A short reason for a document lopdf would not load; never lopdf's own message, which may
/// quote the file.
fn load_failure(e: &PdfError) -> Failure {
    match e {
        PdfError::Decompress(DecompressError::MemoryLimitExceeded { .. }) => Failure::limit(LIMIT_REASON),
        PdfError::InvalidPassword | PdfError::Decryption(_) => Failure::encrypted(),
        PdfError::Parse(ParseError::InvalidFileHeader) => Failure::corrupt("the file is not a PDF"),
        _ => Failure::corrupt("the PDF is damaged and could not be read"),
    }
}

/// Control characters dropped from the text: C0 but `\n` and `\t`, DEL, and C1.
fn is_dropped_control(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// Light normalisation: `\r\n` and lone `\r` become `\n`; control characters but `\n` and `\t`
/// go; lines lose trailing whitespace; at most one blank line in a row; no blank lines at the
/// start or the end.
pub(crate) fn normalise(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut blank_run = 0usize;
    let unified = raw.replace("\r\n", "\n").replace('\r', "\n");
    let mut line = String::new();
    for raw_line in unified.split('\n') {
        line.clear();
        line.extend(raw_line.chars().filter(|c| !is_dropped_control(*c)));
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            blank_run += 1;
            if blank_run > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(trimmed);
        out.push('\n');
    }
    let end = out.trim_end().len();
    out.truncate(end);
    out
}

/// Cuts `text` to at most `max_chars` chars; true if it was cut.
pub(crate) fn cut_chars(text: &mut String, max_chars: usize) -> bool {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => {
            text.truncate(at);
            true
        }
        None => false,
    }
}

/// Cuts `text` to at most `max_bytes` bytes, on a char boundary.
pub(crate) fn cut_bytes(text: &mut String, max_bytes: usize) {
    if text.len() <= max_bytes {
        return;
    }
    let mut at = max_bytes;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
}
