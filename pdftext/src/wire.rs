//! What the gateway and its PDF worker say to each other. The same types are the result of
//! [`crate::extract`] and [`crate::worker::run`]. In JSON, field names are camelCase.

use serde::{Deserialize, Serialize};

/// What the parent asks of one worker run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// 1-based pages wanted; None = the first `default_pages` pages. Pages past the end are
    /// simply absent from the answer.
    pub pages: Option<Vec<u32>>,
    /// How many pages `pages: None` means (10 in vaultgate).
    pub default_pages: u32,
    /// Per page: text beyond this many chars (Unicode scalar values) is cut and the page
    /// marked truncated.
    pub max_chars: u32,
    /// Total budget over all pages' text in bytes (UTF-8); pages after the budget is reached
    /// are left out and Document.truncated is set. The page that reaches the budget is cut to
    /// fit it (and marked truncated).
    pub max_total_bytes: u64,
}

/// The text of one page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// 1-based page number.
    pub page: u32,
    /// The page's text, lightly normalised: lines without trailing whitespace, at most one
    /// blank line in a row, no control characters but `\n` and `\t`.
    pub text: String,
    /// The text was cut (at `max_chars`, or at the total budget).
    pub truncated: bool,
    /// Why this page has no text although the document opened (its objects could not be read);
    /// absent for a page that was read, blank or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The text of the pages asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    /// How many pages the PDF has.
    pub page_count: u32,
    /// The pages asked for that exist, ascending.
    pub pages: Vec<Page>,
    /// Any page cut, or pages left out for the budget.
    pub truncated: bool,
}

/// Why there is no text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureKind {
    /// Encrypted, and the empty user password does not open it.
    Encrypted,
    /// Not a PDF, or one too damaged to read.
    Corrupt,
    /// Too big, too slow, too hungry for the worker's limits; or the worker itself failed.
    Limit,
}

/// Why there is no text; `reason` is one short sentence for a person, never containing
/// document text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{reason}")]
pub struct Failure {
    pub kind: FailureKind,
    pub reason: String,
}

impl Failure {
    /// A failure of `kind` for `reason`.
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(reason: impl Into<String>) -> Self {
        Self::new(FailureKind::Corrupt, reason)
    }

    pub(crate) fn limit(reason: impl Into<String>) -> Self {
        Self::new(FailureKind::Limit, reason)
    }

    pub(crate) fn encrypted() -> Self {
        Self::new(FailureKind::Encrypted, "the PDF is encrypted")
    }
}
