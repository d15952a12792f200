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
    /// The worker could not sandbox itself (see [`SandboxStatus`]) and running without the
    /// sandbox was not allowed: it never read the document.
    Sandbox,
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

    pub(crate) fn sandbox(reason: impl Into<String>) -> Self {
        Self::new(FailureKind::Sandbox, reason)
    }
}

/// What the PDF worker gave up before it read the document (docs/contract.md#notes-as-data-and-attachments): the seccomp filter is the
/// sandbox (no network, no new process, no file opened); Landlock adds a second wall where the
/// kernel has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// The seccomp filter is in force (`Seccomp: 2` in `/proc/<pid>/status`).
    pub seccomp: bool,
    /// Why it is not, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_error: Option<String>,
    /// How much of the Landlock ruleset (no file, no TCP port, no signal or abstract socket out of
    /// the worker) the kernel enforces.
    pub landlock: Landlock,
    /// Why Landlock is off or partial, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_error: Option<String>,
}

/// How much of its Landlock ruleset the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Landlock {
    Full,
    Partial,
    Off,
}

impl SandboxStatus {
    /// Whether the worker may be trusted with a document: the seccomp filter holds (Landlock is
    /// the best effort beside it).
    pub fn in_force(&self) -> bool {
        self.seccomp
    }

    /// One line for a person: what holds, and why the rest does not.
    pub fn describe(&self) -> String {
        let seccomp = if self.seccomp {
            "seccomp filter in force".to_owned()
        } else {
            format!(
                "no seccomp filter ({})",
                self.seccomp_error.as_deref().unwrap_or("reason unknown")
            )
        };
        let landlock = match (self.landlock, &self.landlock_error) {
            (Landlock::Full, _) => "Landlock fully enforced".to_owned(),
            (Landlock::Partial, Some(why)) => format!("Landlock partly enforced ({why})"),
            (Landlock::Partial, None) => "Landlock partly enforced".to_owned(),
            (Landlock::Off, Some(why)) => format!("no Landlock ({why})"),
            (Landlock::Off, None) => "no Landlock".to_owned(),
        };
        format!("{seccomp}, {landlock}")
    }
}
