//! The apply decision of docs/contract.md#proposals, checks 3–5, as one pure function of the engine's apply
//! transaction (whoever calls it: an MCP tool, the CLI, the review page): the engine gathers the facts (the hash the client sent, the content file,
//! the state of the paths involved), [`check`] decides.
//!
//! Checks 1–2 (the proposal exists and is pending; the tier may apply it) and 6 (the target is a
//! `*.md` under a notes folder with no symlink escape) need state and the file system, so they stay
//! with the caller, as does taking the vault's write lock before gathering the facts.

use crate::canonical::sha256_hex;
use crate::model::{Kind, Proposal};
use crate::seal::{Verdict, verify};

/// What is at a path when apply looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetState {
    /// Nothing there, and no path that differs only by case or Unicode normalization.
    Missing,
    /// A note whose bytes hash (lowercase SHA-256 hex) to `hash`.
    Present { hash: String },
    /// The path itself does not exist, but `existing` differs from it only by case or Unicode
    /// normalization (docs/contract.md#paths: refused so vaults stay portable).
    Collides { existing: String },
}

/// Why a proposal may not be applied. Each maps to one docs/contract.md#error-codes code (see the variants); none carries
/// note text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `PROPOSAL_HASH_MISMATCH`: the client's `proposalHash` is not the recorded one.
    #[error("proposalHash does not match this proposal")]
    HashMismatch,
    /// `PROPOSAL_TAMPERED`: the metadata or content changed since the proposal was made. The
    /// reason is for the log and the operator.
    #[error("proposal was altered: {0}")]
    Tampered(&'static str),
    /// `PROPOSAL_TARGET_EXISTS`: the note to create (or move to) exists, or collides by case or
    /// normalization with one that does.
    #[error("target already exists")]
    TargetExists,
    /// `PROPOSAL_STALE_BASE`: the note changed (or vanished: `actual: None`) since it was proposed.
    #[error(
        "note changed since the proposal was made (expected {expected}, found {})",
        actual.as_deref().unwrap_or("nothing")
    )]
    StaleBase {
        expected: String,
        actual: Option<String>,
    },
    /// `PROPOSAL_STALE_BASE` too: a note whose links a move rewrites changed (or vanished) since
    /// the rewrite was computed from it.
    #[error("{path} changed while the move was planned")]
    RewriteStale { path: String },
}

/// Check 3 on its own: the client's `proposalHash` is the recorded one. The one comparison of a
/// given proposal hash (the engine runs it early too, before it asks a person about a proposal).
/// The proposal hash is public, so a plain comparison is fine.
pub fn check_given_hash(recorded: &str, given: &str) -> Result<(), Refusal> {
    if given == recorded {
        Ok(())
    } else {
        Err(Refusal::HashMismatch)
    }
}

/// docs/contract.md#applying-a-proposal checks 3–5, in order; the first failure is the answer.
///
/// - `given_hash`: the `proposalHash` the client sent; must equal `p.proposal_hash` (`HashMismatch`).
/// - Then `Tampered`: the fields fit the kind ([`Proposal::check_shape`]); [`verify`] is `Ok` (the
///   proposal hash recomputes from the fields, the signature verifies); `content` — the bytes of
///   `new/<slug>.md` or `patch/<slug>.new.md`, `None` if the file is missing — hashes to
///   `content_hash` for new/patch, and is `None` for move/delete.
/// - Then the paths. `current` is the state of the note the proposal acts on: `p.target` for
///   new/patch/delete, **the source `p.from` for a move**. `destination` is the state of `p.target`
///   for a move and is ignored for other kinds.
///   - new: `current` must be `Missing` (`TargetExists`, also for `Collides`);
///   - patch/delete: `current` must be `Present` with `hash == base_hash` (`StaleBase`);
///   - move: the source likewise (`StaleBase`), then `destination` must be `Some(Missing)`, or
///     `Some(Collides)` with the source itself (`existing == from`: a case-only rename); anything
///     else is `TargetExists`, `None` too, since nothing then shows the destination free.
pub fn check(
    secret: &[u8],
    p: &Proposal,
    given_hash: &str,
    content: Option<&[u8]>,
    current: &TargetState,
    destination: Option<&TargetState>,
) -> Result<(), Refusal> {
    check_given_hash(&p.proposal_hash, given_hash)?;

    // Check 4.
    p.check_shape().map_err(Refusal::Tampered)?;
    match verify(secret, p) {
        Verdict::Ok => {}
        Verdict::HashMismatch => return Err(Refusal::Tampered("proposalHash does not match the fields")),
        Verdict::BadSignature => return Err(Refusal::Tampered("signature does not verify")),
    }
    match (p.content_hash.as_deref(), content) {
        (Some(expected), Some(bytes)) if sha256_hex(bytes) == expected => {}
        (Some(_), Some(_)) => return Err(Refusal::Tampered("content does not hash to contentHash")),
        (Some(_), None) => return Err(Refusal::Tampered("content file missing")),
        (None, Some(_)) => return Err(Refusal::Tampered("content file for a move or delete")),
        (None, None) => {}
    }

    // Check 5.
    match p.kind {
        Kind::New => match current {
            TargetState::Missing => Ok(()),
            TargetState::Present { .. } | TargetState::Collides { .. } => Err(Refusal::TargetExists),
        },
        Kind::Patch | Kind::Delete => base_matches(p, current),
        Kind::Move => {
            base_matches(p, current)?;
            match destination {
                Some(TargetState::Missing) => Ok(()),
                // Renaming `a.md` to `A.md`: the only note the destination collides with is the
                // source itself, which the move takes away.
                Some(TargetState::Collides { existing }) if p.from.as_ref() == Some(existing) => Ok(()),
                Some(TargetState::Present { .. } | TargetState::Collides { .. }) | None => {
                    Err(Refusal::TargetExists)
                }
            }
        }
    }
}

/// The one base check (docs/contract.md#proposals), when proposing and when applying alike: the
/// note's hash now (`None`: it is gone) must be the base the change was made against.
pub fn check_base(expected: &str, now: Option<&str>) -> Result<(), Refusal> {
    match now {
        Some(hash) if hash == expected => Ok(()),
        _ => Err(Refusal::StaleBase {
            expected: expected.to_owned(),
            actual: now.map(str::to_owned),
        }),
    }
}

fn base_matches(p: &Proposal, current: &TargetState) -> Result<(), Refusal> {
    // check_shape has already required it; kept as a refusal rather than a panic.
    let Some(expected) = p.base_hash.as_deref() else {
        return Err(Refusal::Tampered("baseHash missing"));
    };
    let now = match current {
        TargetState::Present { hash } => Some(hash.as_str()),
        TargetState::Missing | TargetState::Collides { .. } => None,
    };
    check_base(expected, now)
}

/// What the engine found under the write lock, beyond what [`check`] takes.
#[derive(Debug, Clone, Default)]
pub struct ApplyFacts {
    /// For a delete: where the trash keeps the note (`.vaultgate/trash/...`).
    pub trash_path: Option<String>,
    /// For a move: the hash of the moved note's new bytes (its own links rewritten) and the link
    /// rewrites of other notes, each computed from the bytes whose hash it carries.
    pub moved_hash: Option<String>,
    pub rewrites: Vec<PlannedRewrite>,
    /// The proposal's inbox files: (path under the vault, archived path, hash).
    pub archive: Vec<(String, String, String)>,
}

/// One linking note a move rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRewrite {
    pub path: String,
    /// The hash of the bytes the rewrite was computed from.
    pub before: String,
    /// The hash of the note on disk now, under the lock (`None`: it is gone).
    pub now: Option<String>,
    pub after: String,
}

/// The decided plan: the operations, in order, and which of them are the note changes a history
/// entry keeps (the archive moves are the inbox's, not the notes').
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyPlan {
    pub ops: Vec<crate::ops::FileOp>,
    pub note_ops: usize,
}

/// docs/contract.md#applying-a-proposal checks 3–6 and the file operations of the apply: the one place that decides whether
/// and how a proposal applies. `layout` decides check 6 (a `*.md` under a notes folder; the
/// engine reads every file without following links, so a symlink is never a target).
#[allow(clippy::too_many_arguments)]
pub fn decide(
    secret: &[u8],
    layout: &policy::Layout,
    p: &Proposal,
    given_hash: &str,
    content: Option<&[u8]>,
    current: &TargetState,
    destination: Option<&TargetState>,
    facts: &ApplyFacts,
) -> Result<ApplyPlan, Decision> {
    check(secret, p, given_hash, content, current, destination).map_err(Decision::Refused)?;
    let target = policy::VaultPath::parse(&p.target).map_err(Decision::Path)?;
    layout.check_write_target(&target).map_err(Decision::Path)?;
    if let Some(from) = &p.from {
        let from = policy::VaultPath::parse(from).map_err(Decision::Path)?;
        layout.check_write_target(&from).map_err(Decision::Path)?;
    }
    use crate::ops::{FileOp, Zone};
    let missing = |what: &'static str| Decision::Refused(Refusal::Tampered(what));
    let base = || p.base_hash.clone().ok_or_else(|| missing("baseHash missing"));
    let mut ops = Vec::new();
    match p.kind {
        Kind::New => ops.push(FileOp::Put {
            zone: Zone::Note,
            path: p.target.clone(),
            before: None,
            after: p
                .content_hash
                .clone()
                .ok_or_else(|| missing("contentHash missing"))?,
        }),
        Kind::Patch => ops.push(FileOp::Put {
            zone: Zone::Note,
            path: p.target.clone(),
            before: Some(base()?),
            after: p
                .content_hash
                .clone()
                .ok_or_else(|| missing("contentHash missing"))?,
        }),
        Kind::Delete => ops.push(FileOp::Rename {
            from_zone: Zone::Note,
            from: p.target.clone(),
            to_zone: Zone::Machine,
            to: facts.trash_path.clone().ok_or_else(|| missing("no trash path"))?,
            hash: base()?,
        }),
        Kind::Move => {
            let from = p.from.clone().ok_or_else(|| missing("a move without `from`"))?;
            ops.push(FileOp::Put {
                zone: Zone::Note,
                path: p.target.clone(),
                before: None,
                after: facts.moved_hash.clone().unwrap_or(base()?),
            });
            for r in facts.rewrites.iter().filter(|r| r.path != from) {
                // SECURITY(T-PROP7): each rewrite replaces exactly the bytes it was computed from.
                if r.now.as_deref() != Some(r.before.as_str()) {
                    return Err(Decision::Refused(Refusal::RewriteStale { path: r.path.clone() }));
                }
                ops.push(FileOp::Put {
                    zone: Zone::Note,
                    path: r.path.clone(),
                    before: Some(r.before.clone()),
                    after: r.after.clone(),
                });
            }
            ops.push(FileOp::Delete {
                zone: Zone::Note,
                path: from,
                before: base()?,
            });
        }
    }
    let note_ops = ops.len();
    for (from, to, hash) in &facts.archive {
        ops.push(FileOp::Rename {
            from_zone: Zone::Inbox,
            from: from.clone(),
            to_zone: Zone::Inbox,
            to: to.clone(),
            hash: hash.clone(),
        });
    }
    Ok(ApplyPlan { ops, note_ops })
}

/// Why [`decide`] said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Decision {
    #[error(transparent)]
    Refused(Refusal),
    #[error(transparent)]
    Path(policy::PathError),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::model::{CreatedBy, Draft};
    use crate::seal::seal;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const CONTENT: &[u8] = "# Attention\n注意\n".as_bytes();
    const BASE: &[u8] = b"# Attention\nold\n";

    const ID: &str = "0193a5b0-0000-7000-8000-00003f9a1c2e";

    fn draft(kind: Kind) -> Draft {
        Draft {
            kind,
            vault: "main".into(),
            target: "z/attention.md".into(),
            from: (kind == Kind::Move).then(|| "z/old.md".into()),
            content_hash: matches!(kind, Kind::New | Kind::Patch).then(|| sha256_hex(CONTENT)),
            base_hash: (kind != Kind::New).then(|| sha256_hex(BASE)),
            reason: "r".into(),
            created_by: CreatedBy {
                credential_id: "cred-1".into(),
                name: "claude".into(),
            },
            created_at: "2026-11-29T10:00:00Z".into(),
        }
    }

    fn sealed(kind: Kind) -> Proposal {
        seal(draft(kind), ID.into(), SECRET)
    }

    fn present(bytes: &[u8]) -> TargetState {
        TargetState::Present {
            hash: sha256_hex(bytes),
        }
    }

    fn collides() -> TargetState {
        TargetState::Collides {
            existing: "Z/Attention.md".into(),
        }
    }

    /// Arguments of one `check` call, starting from the one that succeeds for the kind.
    struct Case {
        p: Proposal,
        given: String,
        content: Option<Vec<u8>>,
        current: TargetState,
        destination: Option<TargetState>,
    }

    impl Case {
        fn ok(kind: Kind) -> Case {
            let p = sealed(kind);
            Case {
                given: p.proposal_hash.clone(),
                content: matches!(kind, Kind::New | Kind::Patch).then(|| CONTENT.to_vec()),
                current: if kind == Kind::New {
                    TargetState::Missing
                } else {
                    present(BASE)
                },
                destination: (kind == Kind::Move).then_some(TargetState::Missing),
                p,
            }
        }

        fn run(&self) -> Result<(), Refusal> {
            check(
                SECRET,
                &self.p,
                &self.given,
                self.content.as_deref(),
                &self.current,
                self.destination.as_ref(),
            )
        }
    }

    fn stale(actual: Option<&[u8]>) -> Refusal {
        Refusal::StaleBase {
            expected: sha256_hex(BASE),
            actual: actual.map(sha256_hex),
        }
    }

    type Breaks = fn(&mut Case);

    #[test]
    fn every_refusal_for_every_kind() {
        let table: &[(Kind, &str, Breaks, Refusal)] = &[
            (
                Kind::New,
                "wrong given hash",
                |c| c.given = sha256_hex(b"x"),
                Refusal::HashMismatch,
            ),
            (
                Kind::New,
                "empty given hash",
                |c| c.given.clear(),
                Refusal::HashMismatch,
            ),
            (
                Kind::New,
                "reason edited",
                |c| c.p.reason.push('!'),
                Refusal::Tampered("signature does not verify"),
            ),
            (
                Kind::New,
                "target edited, hash not updated",
                |c| c.p.target = "z/other.md".into(),
                Refusal::Tampered("proposalHash does not match the fields"),
            ),
            (
                Kind::New,
                "content edited",
                |c| c.content = Some(b"evil".to_vec()),
                Refusal::Tampered("content does not hash to contentHash"),
            ),
            (
                Kind::New,
                "content missing",
                |c| c.content = None,
                Refusal::Tampered("content file missing"),
            ),
            (
                Kind::New,
                "target exists",
                |c| c.current = present(b"x"),
                Refusal::TargetExists,
            ),
            (
                Kind::New,
                "target collides",
                |c| c.current = collides(),
                Refusal::TargetExists,
            ),
            (
                Kind::Patch,
                "wrong given hash",
                |c| c.given = sha256_hex(b"x"),
                Refusal::HashMismatch,
            ),
            (
                Kind::Patch,
                "vault edited",
                |c| c.p.vault = "other".into(),
                Refusal::Tampered("signature does not verify"),
            ),
            (
                Kind::Patch,
                "content edited",
                |c| c.content = Some(b"evil".to_vec()),
                Refusal::Tampered("content does not hash to contentHash"),
            ),
            (
                Kind::Patch,
                "note changed",
                |c| c.current = present(b"changed"),
                stale(Some(b"changed")),
            ),
            (
                Kind::Patch,
                "note gone",
                |c| c.current = TargetState::Missing,
                stale(None),
            ),
            (
                Kind::Patch,
                "note renamed by case",
                |c| c.current = collides(),
                stale(None),
            ),
            (
                Kind::Delete,
                "wrong given hash",
                |c| c.given = sha256_hex(b"x"),
                Refusal::HashMismatch,
            ),
            (
                Kind::Delete,
                "content file appeared",
                |c| c.content = Some(CONTENT.to_vec()),
                Refusal::Tampered("content file for a move or delete"),
            ),
            (
                Kind::Delete,
                "note changed",
                |c| c.current = present(b"changed"),
                stale(Some(b"changed")),
            ),
            (
                Kind::Delete,
                "note gone",
                |c| c.current = TargetState::Missing,
                stale(None),
            ),
            (
                Kind::Move,
                "wrong given hash",
                |c| c.given = sha256_hex(b"x"),
                Refusal::HashMismatch,
            ),
            (
                Kind::Move,
                "from edited",
                |c| c.p.from = Some("z/else.md".into()),
                Refusal::Tampered("proposalHash does not match the fields"),
            ),
            (
                Kind::Move,
                "source changed",
                |c| c.current = present(b"changed"),
                stale(Some(b"changed")),
            ),
            (
                Kind::Move,
                "source gone",
                |c| c.current = TargetState::Missing,
                stale(None),
            ),
            (
                Kind::Move,
                "destination exists",
                |c| c.destination = Some(present(b"x")),
                Refusal::TargetExists,
            ),
            (
                Kind::Move,
                "destination collides",
                |c| c.destination = Some(collides()),
                Refusal::TargetExists,
            ),
            (
                Kind::Move,
                "destination not looked at",
                |c| c.destination = None,
                Refusal::TargetExists,
            ),
        ];
        for kind in Kind::ALL {
            assert_eq!(Case::ok(kind).run(), Ok(()), "{kind} baseline");
        }
        for (kind, name, breaks, want) in table {
            let mut case = Case::ok(*kind);
            breaks(&mut case);
            assert_eq!(case.run(), Err(want.clone()), "{kind}: {name}");
        }
    }

    #[test]
    fn refusals_come_in_spec_order() {
        // Everything wrong at once: each fix reveals the next refusal in SPEC order.
        let mut c = Case::ok(Kind::Patch);
        c.given = sha256_hex(b"x");
        c.p.reason.push('!');
        c.content = Some(b"evil".to_vec());
        c.current = present(b"changed");
        assert_eq!(
            c.run(),
            Err(Refusal::HashMismatch),
            "hash mismatch wins over tampered"
        );
        c.given = c.p.proposal_hash.clone();
        assert_eq!(
            c.run(),
            Err(Refusal::Tampered("signature does not verify")),
            "signature before content"
        );
        c.p = sealed(Kind::Patch);
        assert_eq!(
            c.run(),
            Err(Refusal::Tampered("content does not hash to contentHash")),
            "tampered wins over stale base"
        );
        c.content = Some(CONTENT.to_vec());
        assert_eq!(c.run(), Err(stale(Some(b"changed"))));
        c.current = present(BASE);
        assert_eq!(c.run(), Ok(()));

        // A move: a stale source is reported before an occupied destination.
        let mut m = Case::ok(Kind::Move);
        m.current = TargetState::Missing;
        m.destination = Some(present(b"x"));
        assert_eq!(m.run(), Err(stale(None)));
        m.current = present(BASE);
        assert_eq!(m.run(), Err(Refusal::TargetExists));

        // New: tampered content wins over an existing target.
        let mut n = Case::ok(Kind::New);
        n.content = None;
        n.current = present(b"x");
        assert_eq!(n.run(), Err(Refusal::Tampered("content file missing")));
    }

    #[test]
    fn another_secret_is_tampered() {
        let c = Case::ok(Kind::New);
        let got = check(b"other", &c.p, &c.given, c.content.as_deref(), &c.current, None);
        assert_eq!(got, Err(Refusal::Tampered("signature does not verify")));
    }

    #[test]
    fn a_malformed_but_signed_proposal_is_tampered() {
        // seal signs whatever it is given; check still refuses a shape that fits no kind.
        let mut c = Case::ok(Kind::New);
        let mut malformed = draft(Kind::New);
        malformed.base_hash = Some(sha256_hex(BASE));
        c.p = seal(malformed, ID.into(), SECRET);
        c.given = c.p.proposal_hash.clone();
        assert_eq!(c.run(), Err(Refusal::Tampered("baseHash on a new note")));
    }

    #[test]
    fn a_move_may_collide_only_with_its_own_source() {
        let mut c = Case::ok(Kind::Move);
        c.destination = Some(TargetState::Collides {
            existing: "z/old.md".into(),
        });
        assert_eq!(c.run(), Ok(()));
        c.destination = Some(TargetState::Collides {
            existing: "z/Old.md".into(),
        });
        assert_eq!(c.run(), Err(Refusal::TargetExists));
    }

    #[test]
    fn destination_is_ignored_for_kinds_other_than_move() {
        let mut c = Case::ok(Kind::Patch);
        c.destination = Some(present(b"x"));
        assert_eq!(c.run(), Ok(()));
    }

    #[test]
    fn refusal_messages_carry_hashes_not_text() {
        let msg = stale(Some(b"secret body")).to_string();
        assert!(msg.contains(&sha256_hex(BASE)) && !msg.contains("secret"));
    }

    /// A move's rewrite of another note applies only over the bytes it was computed from: the
    /// decision, not the engine, compares (T-PROP7).
    #[test]
    fn a_rewrite_computed_from_other_bytes_is_stale() {
        let c = Case::ok(Kind::Move);
        let inbox = policy::VaultPath::parse("inbox").unwrap();
        let layout = policy::Layout::new(vec![policy::FolderPath::Root], vec![], inbox, None);
        let rewrite = |now: Option<&[u8]>| PlannedRewrite {
            path: "z/linker.md".into(),
            before: sha256_hex(b"[[old]]"),
            now: now.map(sha256_hex),
            after: sha256_hex(b"[[attention]]"),
        };
        let facts = |now| ApplyFacts {
            rewrites: vec![rewrite(now)],
            ..ApplyFacts::default()
        };
        let run = |f: &ApplyFacts| {
            decide(
                SECRET,
                &layout,
                &c.p,
                &c.given,
                None,
                &c.current,
                c.destination.as_ref(),
                f,
            )
        };
        assert!(run(&facts(Some(b"[[old]]"))).is_ok());
        for now in [Some(&b"[[old]] edited"[..]), None] {
            assert_eq!(
                run(&facts(now)),
                Err(Decision::Refused(Refusal::RewriteStale {
                    path: "z/linker.md".into()
                }))
            );
        }
    }
}
