//! The review page's HTML (docs/contract.md#the-review-page-and-in-client-approval), rendered with maud: every interpolated value is escaped as
//! HTML by the template engine, and every text that came from an agent or a note also has its
//! control characters escaped first ([`t`]), so it can neither run nor hide what a reviewer reads.

use maud::{DOCTYPE, Markup, html};

use engine::api::{GetProposalOut, OverviewOut, ProposalItem};
use engine::diff::{DiffLine, Hunk, LineKind, Piece};
use engine::history::{HistoryEntryView, HistoryStatusOut};

/// Untrusted text as a reviewer may see it: control characters (other than newline and tab)
/// escaped; maud escapes the HTML.
// SECURITY(T-REVIEW4): agent and note text is inert on the page.
pub fn t(s: &str) -> String {
    policy::text::escape(s).into_owned()
}

/// What every page of a session knows.
pub struct Frame<'a> {
    /// `/review/s/<session path>`.
    pub base: &'a str,
    pub csrf: &'a str,
    pub user: &'a str,
    pub vaults: &'a [(String, String)],
    /// The vault of this page (the switcher's selection).
    pub vault: &'a str,
    pub here: &'a str,
}

impl Frame<'_> {
    /// The name of this page's vault (its id when unnamed).
    pub fn vault_name(&self) -> &str {
        self.vaults
            .iter()
            .find(|(id, _)| id == self.vault)
            .map_or(self.vault, |(_, name)| name.as_str())
    }

    pub fn v(&self) -> String {
        format!("{}/v/{}", self.base, self.vault)
    }

    fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf); }
    }
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · vaultgate review" }
            link rel="stylesheet" href="/review/static/style.css";
            script src="/review/static/app.js" defer {}
        }
    }
}

/// A page of a logged-in session: header with navigation, vault switcher and Logout.
pub fn page(f: &Frame<'_>, title: &str, body: Markup) -> Markup {
    let link = |id: &str, href: String, label: &str| {
        html! { a id={ "nav-" (id) } class=[(f.here == id).then_some("here")] href=(href) { (label) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header {
                    span.brand { "vaultgate review" }
                    nav #nav {
                        (link("inbox", format!("{}/inbox", f.v()), "Inbox"))
                        (link("history", format!("{}/history", f.v()), "History"))
                        (link("credentials", format!("{}/credentials", f.base), "Credentials"))
                        (link("audit", format!("{}/audit", f.base), "Audit"))
                        (link("vaults", format!("{}/vaults", f.base), "Vaults"))
                        (link("tunnel", format!("{}/tunnel", f.base), "Tunnel"))
                    }
                    form #vault-switch-form method="get" action={ (f.base) "/switch" } {
                        label for="vault-switch" { "Vault " }
                        select #vault-switch name="vault" {
                            @for (id, name) in f.vaults {
                                option value=(id) selected[id == f.vault] { (t(name)) " (" (id) ")" }
                            }
                        }
                        noscript { " " button type="submit" { "Switch" } }
                    }
                    form #logout method="post" action={ (f.base) "/logout" } {
                        (f.csrf_field())
                        span.muted { "review:" (t(f.user)) " " }
                        button #logout-button type="submit" { "Log out" }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page outside a session (login refused, logged out, not found).
pub fn bare(title: &str, message: &str, next: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                main {
                    h1 { (title) }
                    p #message { (message) }
                    p.muted { (next) }
                }
            }
        }
    }
}

/// The outcome of a decision: `div#result` with `data-outcome` and, on error, `data-code`.
pub fn result(f: &Frame<'_>, ok: Result<String, (String, String)>, back: &str, extra: Markup) -> Markup {
    let body = match ok {
        Ok(msg) => html! {
            div #result .result data-outcome="ok" { (msg) }
            (extra)
            p { a #back href=(back) { "Back" } }
        },
        Err((code, msg)) => html! {
            div #result .result data-outcome="error" data-code=(code) {
                strong { (code) } ": " (t(&msg))
            }
            (extra)
            p { a #back href=(back) { "Back" } }
        },
    };
    page(f, "Result", body)
}

fn age(created_at: &str, now: time::OffsetDateTime) -> String {
    let Ok(then) = time::OffsetDateTime::parse(created_at, &time::format_description::well_known::Rfc3339)
    else {
        return created_at.to_owned();
    };
    let s = (now - then).whole_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The inbox's rows (also answered alone for live updates).
pub fn inbox_rows(f: &Frame<'_>, items: &[ProposalItem], now: time::OffsetDateTime) -> Markup {
    html! {
        @for p in items {
            tr.proposal data-id=(p.id) data-kind=(p.kind) {
                td.kind { span.tag { (p.kind) } }
                td.target {
                    a.open href={ (f.v()) "/p/" (p.id) } {
                        @if let Some(from) = &p.from { (t(from)) " → " }
                        (t(&p.target))
                    }
                }
                td.author { (t(&p.created_by.name)) }
                td.age title=(p.created_at) { (age(&p.created_at, now)) }
                td.reason { (t(&p.reason)) }
            }
        }
    }
}

pub fn inbox(f: &Frame<'_>, items: &[ProposalItem], truncated: bool, now: time::OffsetDateTime) -> Markup {
    let body = html! {
        h1 { "Inbox of " (t(f.vault_name())) }
        table #inbox {
            thead { tr { th { "Kind" } th { "Target" } th { "Author" } th { "Age" } th { "Reason" } } }
            tbody #inbox-rows data-src={ (f.v()) "/inbox/rows" } { (inbox_rows(f, items, now)) }
        }
        p #inbox-empty .muted hidden[!items.is_empty()] { "No pending proposals. New ones appear here as agents make them." }
        @if truncated {
            p #inbox-truncated .warning { "These are the newest " (items.len()) " pending proposals; older ones appear here as these are decided." }
        }
    };
    page(f, "Inbox", body)
}

fn kind_label(kind: &str) -> &'static str {
    match kind {
        "new" => "New note",
        "patch" => "Patch",
        "move" => "Move",
        "delete" => "Delete",
        _ => "Proposal",
    }
}

/// An RFC 3339 time to the second, for reading (`2026-12-02 07:53:06 UTC`).
fn short_time(ts: &str) -> String {
    match time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => ts.to_owned(),
    }
}

fn ln(n: Option<u64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

fn unified(hunks: &[Hunk], marks: &[Marks]) -> Markup {
    html! {
        div #diff-unified .diff {
            @for (h, marks) in hunks.iter().zip(marks) {
                div.hunk { (h.header) }
                @for (i, l) in h.lines.iter().enumerate() {
                    @let (class, sign) = match l.kind {
                        LineKind::Added => ("line add", "+"),
                        LineKind::Removed => ("line del", "-"),
                        LineKind::Context => ("line ctx", " "),
                    };
                    div class=(class) {
                        span.ln { (ln(l.old)) }
                        span.ln { (ln(l.new)) }
                        span.sign { (sign) }
                        span.text {
                            @if let Some(p) = marks.get(&i) { (marked(p, l.kind == LineKind::Added)) } @else { (t(&l.text)) }
                            @if l.no_newline { span.muted { " (no newline at end of file)" } }
                        }
                    }
                }
            }
        }
    }
}

fn split(hunks: &[Hunk], marks: &[Marks]) -> Markup {
    let cell = |side: &str, l: Option<&DiffLine>, pieces: Option<&Vec<Piece>>| {
        let tint = match (side, l.map(|l| l.kind)) {
            (_, None) => "empty",
            ("old", Some(LineKind::Removed)) => "del",
            ("new", Some(LineKind::Added)) => "add",
            _ => "",
        };
        let num = l.and_then(|l| if side == "old" { l.old } else { l.new });
        let ln_class = format!("ln {tint}{}", if side == "new" { " new-side" } else { "" });
        html! {
            td class=(ln_class) { (ln(num)) }
            td class={ (side) " " (tint) } {
                @if let Some(p) = pieces { (marked(p, side == "new")) }
                @else if let Some(l) = l { (t(&l.text)) }
            }
        }
    };
    html! {
        table #diff-split .split.diff {
            @for (h, marks) in hunks.iter().zip(marks) {
                tr { td.hunk colspan="4" { (h.header) } }
                @for (o, n) in h.rows() {
                    tr {
                        (cell("old", o.map(|i| &h.lines[i]), o.and_then(|i| marks.get(&i))))
                        (cell("new", n.map(|j| &h.lines[j]), n.and_then(|j| marks.get(&j))))
                    }
                }
            }
        }
    }
}

/// The word marks of each hunk's changed lines, by line index (docs/contract.md#the-review-page-and-in-client-approval: changed
/// words are marked inside a changed line), within one diff's budget.
type Marks = std::collections::HashMap<usize, Vec<Piece>>;

fn hunk_marks(hunks: &[Hunk]) -> Vec<Marks> {
    let mut budget = engine::diff::MAX_MARKED_BYTES;
    hunks.iter().map(|h| h.marks(&mut budget)).collect()
}

/// A changed line's pieces, the changed words in `<del>` (old) or `<ins>` (new), each escaped.
fn marked(pieces: &[Piece], new: bool) -> Markup {
    html! {
        @for p in pieces {
            @if !p.changed { (t(&p.text)) }
            @else if new { ins.w { (t(&p.text)) } }
            @else { del.w { (t(&p.text)) } }
        }
    }
}

pub struct ProposalView<'a> {
    pub p: &'a GetProposalOut,
    pub hunks: &'a [Hunk],
    /// Frontmatter changes key by key, and a move's rewritten links.
    pub shown: &'a engine::proposing::Shown,
    /// The note's text for a delete (what goes).
    pub deleted_text: Option<String>,
}

/// What a proposal's view is made of, gathered once for the review page and the card alike.
pub struct Parts {
    hunks: Vec<Hunk>,
    shown: engine::proposing::Shown,
    deleted_text: Option<String>,
}

impl Parts {
    pub fn of(
        core: &engine::Core,
        v: &engine::VaultHandle,
        p: &GetProposalOut,
    ) -> Result<Parts, engine::GatewayError> {
        let hunks = engine::diff::hunks(&p.diff);
        let shown = core.proposals().shown(v, p)?;
        let deleted_text = (p.item.kind == "delete").then(|| {
            hunks
                .iter()
                .flat_map(|h| &h.lines)
                .map(|l| format!("{}\n", l.text))
                .collect::<String>()
        });
        Ok(Parts {
            hunks,
            shown,
            deleted_text,
        })
    }

    pub fn view<'a>(&'a self, p: &'a GetProposalOut) -> ProposalView<'a> {
        ProposalView {
            p,
            hunks: &self.hunks,
            shown: &self.shown,
            deleted_text: self.deleted_text.clone(),
        }
    }
}

pub fn proposal(f: &Frame<'_>, view: &ProposalView<'_>) -> Markup {
    let p = view.p;
    let it = &p.item;
    let action = format!("{}/p/{}", f.v(), it.id);
    let (added, removed) = engine::diff::counts(view.hunks);
    let body = html! {
        h1 #proposal-title { (kind_label(&it.kind)) " · " (t(&it.target)) }
        dl #proposal-meta .meta {
            dt { "Status" } dd #proposal-status { (it.status) }
            dt { "Proposed by" } dd { (t(&it.created_by.name)) " " span.muted { "(" (it.created_by.credential_id) ")" } }
            dt { "Proposed" } dd title=(it.created_at) { (short_time(&it.created_at)) " (" (age(&it.created_at, time::OffsetDateTime::now_utc())) " ago)" }
            dt { "Changes" } dd { "+" (added) " −" (removed) " lines" }
            dt { "Proposal hash" } dd { code { (it.proposal_hash) } }
            @if let Some(b) = &p.base_hash { dt { "Base hash" } dd { code { (b) } } }
            @if let Some(d) = &p.decided_at { dt { "Decided at" } dd { (d) } }
            @if let Some(r) = &p.reject_reason { dt { "Rejected because" } dd #reject-reason-shown { (t(r)) } }
        }
        h2 { "Reason" }
        pre #reason .prose { (t(&it.reason)) }
        (extras(view))
        @if !view.hunks.is_empty() {
            h2 { "Side by side" }
            @let marks = hunk_marks(view.hunks);
            (split(view.hunks, &marks))
            h2 { "Unified" }
            (unified(view.hunks, &marks))
        } @else if it.kind != "move" {
            p.muted { "No difference against the note as it is now." }
        }
        @if it.kind == "new" {
            @if let Some(c) = &p.content { h2 { "The new note" } pre #content { (t(c)) } }
        }
        @if it.kind == "delete" {
            @if let Some(c) = &view.deleted_text { h2 { "The note that goes" } pre #content { (t(c)) } }
        }
        @if it.status == "pending" {
            div.actions {
                form #apply method="post" action={ (action) "/apply" } {
                    (f.csrf_field())
                    input type="hidden" name="proposalHash" value=(it.proposal_hash);
                    button #apply-button .primary type="submit" { "Apply" }
                }
                form #reject method="post" action={ (action) "/reject" } {
                    (f.csrf_field())
                    label for="reject-reason" { "Reason for rejecting" } br;
                    textarea #reject-reason name="reason" required maxlength="4000" {} br;
                    button #reject-button .reject type="submit" { "Reject" }
                }
            }
        }
    };
    page(f, &format!("{} {}", kind_label(&it.kind), t(&it.target)), body)
}

/// What a person reads beyond the diff, one account for the review page and the card: a
/// move's source, target and rewritten links, frontmatter keys, links changed.
fn extras(view: &ProposalView<'_>) -> Markup {
    let it = &view.p.item;
    html! {
        @if it.kind == "move" {
            h2 { "Move" }
            p { "From " code #move-from { (t(it.from.as_deref().unwrap_or(""))) } " to " code #move-to { (t(&it.target)) } }
            h2 { "Links rewritten" }
            ul #link-rewrites {
                @for r in &view.shown.rewrites {
                    li {
                        code { (t(&r.path)) } " — " (r.count) " link(s)"
                        @if !r.links.is_empty() {
                            ul.rewritten { @for l in &r.links { li { code { (t(&l.to_string())) } } } }
                        }
                    }
                }
            }
            @if view.shown.rewrites.is_empty() { p.muted { "No note links to it." } }
        }
        @if !view.shown.fields.is_empty() {
            h2 { "Frontmatter changed" }
            ul #field-changes {
                @for fc in &view.shown.fields { li { code { (t(&fc.to_string())) } } }
            }
        }
        @let links = engine::diff::link_changes(view.hunks);
        @if !links.is_empty() {
            h2 { "Links changed" }
            ul #link-changes {
                @for l in &links { li { code { (t(&l.to_string())) } } }
            }
        }
    }
}

/// The approval card's proposal (docs/contract.md#the-review-page-and-in-client-approval): the
/// fixed fields first (vault, kind, targets, `+N −M`, the hash's first 12 hex digits, state),
/// then what the review page shows beyond the diff, the unified diff with its word marks, and
/// the agent's reason last. Rendered here, escaped as the page is; the card only places it.
/// `full: false` (a diff too large for a card) leaves the diff and texts to the review page.
pub fn card(view: &ProposalView<'_>, (added, removed): (u64, u64), state: &str, full: bool) -> Markup {
    let p = view.p;
    let it = &p.item;
    let hash12: String = it.proposal_hash.chars().take(12).collect();
    html! {
        dl #card-fields .meta {
            dt { "Vault" } dd #card-vault { (t(&p.vault)) }
            dt { "Kind" } dd #card-kind { (kind_label(&it.kind)) }
            @if let (true, Some(from)) = (it.kind == "move", &it.from) {
                dt { "From" } dd { code #card-from { (t(from)) } }
                dt { "To" } dd { code #card-target { (t(&it.target)) } }
            } @else {
                dt { "Target" } dd { code #card-target { (t(&it.target)) } }
            }
            dt { "Changes" } dd #card-size { "+" (added) " \u{2212}" (removed) " lines" }
            dt { "Proposal" } dd { code #card-hash title=(it.proposal_hash) { (hash12) } }
            dt { "State" } dd { span #card-state .state data-state=(state) { (state) } }
        }
        @if full {
            (extras(view))
            @if !view.hunks.is_empty() {
                @let marks = hunk_marks(view.hunks);
                (unified(view.hunks, &marks))
            }
            @if it.kind == "new" {
                @if let Some(c) = &p.content { h2 { "The new note" } pre #content { (t(c)) } }
            }
            @if it.kind == "delete" {
                @if let Some(c) = &view.deleted_text { h2 { "The note that goes" } pre #content { (t(c)) } }
            }
        } @else {
            p #card-too-large .muted { "This change is too large to show here: open it in the review page." }
        }
        h2 { "Reason given by " (t(&it.created_by.name)) }
        pre #reason .prose { (t(&it.reason)) }
    }
}

fn entry(id: &str, e: Option<&HistoryEntryView>) -> Markup {
    html! {
        div id=(id) {
            @match e {
                Some(e) => {
                    strong { (t(&e.label)) } " " span.muted { "by " (t(&e.created_by)) " at " (e.created_at) " · " code { (e.id) } }
                    ul { @for c in &e.paths { li { code { (t(&c.path)) } } } }
                }
                None => { span.muted { "nothing" } }
            }
        }
    }
}

pub fn history(
    f: &Frame<'_>,
    status: &HistoryStatusOut,
    undo: Option<&HistoryEntryView>,
    redo: Option<&HistoryEntryView>,
) -> Markup {
    let body = html! {
        h1 { "History of " (t(f.vault_name())) }
        @if status.transition_in_progress { p.warning { "An undo or redo was interrupted; the next one finishes it first." } }
        h2 { "Undo would revert" }
        (entry("undo-top", undo))
        @if let Some(s) = &status.stale_top { p.warning { "A file of " code { (s) } " changed since: undo is refused (HISTORY_STALE)." } }
        @if let Some(e) = undo {
            form #undo method="post" action={ (f.v()) "/history/undo" } {
                (f.csrf_field())
                input type="hidden" name="expected" value=(e.id);
                button #undo-button type="submit" { "Undo" }
            }
        }
        h2 { "Redo would restore" }
        (entry("redo-top", redo))
        @if let Some(e) = redo {
            form #redo method="post" action={ (f.v()) "/history/redo" } {
                (f.csrf_field())
                input type="hidden" name="expected" value=(e.id);
                button #redo-button type="submit" { "Redo" }
            }
        }
    };
    page(f, "History", body)
}

pub struct CredentialRow {
    pub id: String,
    pub name: String,
    pub tier: String,
    pub scope: String,
    pub last_used: String,
    pub expires: String,
    pub status: &'static str,
    pub revoked: bool,
    pub approve_in_client: bool,
}

const TIERS: [&str; 4] = ["read", "propose", "auto", "full"];

pub fn credentials(f: &Frame<'_>, rows: &[CredentialRow]) -> Markup {
    let body = html! {
        h1 { "Credentials" }
        p.muted { "One per client. A token is shown once, when it is issued; revoking takes effect on the client's next request." }
        @if rows.iter().any(|c| c.approve_in_client && !c.revoked) {
            p.warning.approve-in-client-warning { "Credentials marked “in-client approval” may apply one tier above their own whenever their client says its user approved. The client program is trusted to ask honestly: treat them as that higher tier." }
        }
        table #credentials {
            thead { tr { th { "Name" } th { "Tier" } th { "Vaults" } th { "Last use" } th { "Expires" } th { "Status" } th { "Change tier" } th {} } }
            tbody {
                @for c in rows {
                    tr.credential data-id=(c.id) data-name=(t(&c.name)) data-tier=(c.tier) data-revoked=(c.revoked) {
                        td.name { (t(&c.name)) br; span.muted { code { (c.id) } } }
                        td.tier {
                            (c.tier)
                            @if c.approve_in_client {
                                br;
                                span.tag.approve-in-client title="its client may ask a person to approve an apply one tier above this one" { "+ in-client approval" }
                            }
                        }
                        td.scope { (t(&c.scope)) }
                        td.last-used { (c.last_used) }
                        td.expires { (c.expires) }
                        td.status { (c.status) }
                        td {
                            @if !c.revoked {
                                form.set-tier method="post" action={ (f.base) "/credentials/" (c.id) "/tier" } {
                                    (f.csrf_field())
                                    select name="tier" aria-label="tier" {
                                        @for tier in TIERS { option value=(tier) selected[tier == c.tier] { (tier) } }
                                    }
                                    " " button.set-tier-button type="submit" { "Set" }
                                }
                            }
                        }
                        td {
                            @if !c.revoked {
                                form.revoke method="post" action={ (f.base) "/credentials/" (c.id) "/revoke" } {
                                    (f.csrf_field())
                                    button.revoke-button.danger type="submit" { "Revoke" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Issue a credential" }
        form #issue method="post" action={ (f.base) "/credentials/issue" } {
            (f.csrf_field())
            p { label { "Name " input #issue-name name="name" required maxlength="128" placeholder="claude-desktop"; } }
            p { label { "Tier " select #issue-tier name="tier" {
                @for tier in TIERS { option value=(tier) selected[tier == "propose"] { (tier) } }
            } } }
            p { "Vaults (none ticked: every vault) "
                @for (id, name) in f.vaults {
                    label { input type="checkbox" name="vault" value=(id); " " (t(name)) } " "
                }
            }
            p { label { "Expires after " input name="expires" placeholder="30d" size="6"; } span.muted { " e.g. 90s, 12h, 30d; empty: never" } }
            p { label { input #issue-approve-in-client type="checkbox" name="approveInClient" value="yes"; " Allow approval inside the client" } }
            p.warning.approve-in-client-warning { "In-client approval trusts the client program to ask its user honestly before it applies: a propose credential can then apply its own proposals, an auto credential anyone's. Whoever holds the token gets that tier raise. It has no effect on read or full." }
            p.warning { "Tier full lets the client apply anyone's proposals and run critical operations. It needs a second confirmation." }
            button #issue-button .primary type="submit" { "Issue" }
        }
    };
    page(f, "Credentials", body)
}

/// The second, red confirmation before `full` (docs/contract.md#the-review-page-and-in-client-approval).
pub fn confirm_full(f: &Frame<'_>, action: &str, what: &str, fields: &[(&str, &str)]) -> Markup {
    let body = html! {
        div #confirm-full .warning {
            h1 { "Give " (t(what)) " full access?" }
            p { "A full credential can apply anyone's proposals, delete notes permanently and undo other people's changes. Whoever holds its token can do all of that." }
        }
        form #confirm-full-form method="post" action=(action) {
            (f.csrf_field())
            @for (k, v) in fields { input type="hidden" name=(k) value=(v); }
            input type="hidden" name="confirm" value="yes";
            p { button #confirm-full-button .danger type="submit" { "Yes, give full access" } }
        }
        p { a #back href={ (f.base) "/credentials" } { "Cancel" } }
    };
    page(f, "Confirm full access", body)
}

/// The token, once, with a copy button per client configuration.
pub fn issued(f: &Frame<'_>, name: &str, token: &str, configs: &[(String, String)]) -> Markup {
    let extra = html! {
        h2 { "Token" }
        p.warning { "This is the only time the token is shown. Copy it into the client now." }
        p { code #token { (token) } " " button.copy type="button" data-copy="token" hidden { "Copy" } }
        @for (i, (label, text)) in configs.iter().enumerate() {
            h2 { (label) }
            pre.client-config id={ "config-" (i) } { (text) }
            button.copy type="button" data-copy={ "config-" (i) } hidden { "Copy" }
        }
    };
    result(
        f,
        Ok(format!("issued credential '{}'", t(name))),
        &format!("{}/credentials", f.base),
        extra,
    )
}

pub struct AuditRow {
    pub seq: u64,
    pub ts: String,
    pub actor: String,
    pub event: String,
    pub vault: String,
    pub tool: String,
    pub target: String,
    pub outcome: String,
    pub code: String,
}

pub struct AuditFilter<'a> {
    pub credential: &'a str,
    pub vault: &'a str,
    pub outcome: &'a str,
}

pub fn audit(
    f: &Frame<'_>,
    chain: (bool, &str),
    offer_verify: bool,
    filter: &AuditFilter<'_>,
    rows: &[AuditRow],
    scanned: usize,
) -> Markup {
    let body = html! {
        h1 { "Audit log" }
        p #chain-status class=(if chain.0 { "result" } else { "warning" }) data-outcome=(if chain.0 { "ok" } else { "error" }) { (chain.1) }
        @if offer_verify {
            form #verify-form method="get" action={ (f.base) "/audit" } {
                input type="hidden" name="verify" value="1";
                button #verify-button type="submit" { "Verify the whole chain" }
            }
        }
        form #audit-filter method="get" action={ (f.base) "/audit" } {
            label { "Credential " input name="credential" value=(filter.credential) placeholder="id or name"; } " "
            label { "Vault " input name="vault" value=(filter.vault) size="10"; } " "
            label { "Outcome " select name="outcome" {
                @for o in ["", "ok", "denied", "error"] { option value=(o) selected[o == filter.outcome] { (if o.is_empty() { "any" } else { o }) } }
            } } " "
            button type="submit" { "Filter" }
        }
        p.muted { "The newest " (rows.len()) " matching of the last " (scanned) " records, newest first." }
        table #audit {
            thead { tr { th { "Seq" } th { "Time" } th { "Actor" } th { "Event" } th { "Vault" } th { "Tool" } th { "Target" } th { "Outcome" } } }
            tbody {
                @for r in rows {
                    tr.record data-seq=(r.seq) data-actor=(t(&r.actor)) data-event=(t(&r.event)) data-outcome=(r.outcome) {
                        td { (r.seq) } td { (r.ts) } td { (t(&r.actor)) } td { (t(&r.event)) } td { (t(&r.vault)) }
                        td { (t(&r.tool)) } td { (t(&r.target)) }
                        td { (r.outcome) @if !r.code.is_empty() { " " code { (t(&r.code)) } } }
                    }
                }
            }
        }
    };
    page(f, "Audit", body)
}

/// One row of the Vaults page: id, name, overview, git status (docs/contract.md#git-history), PDF text on (docs/contract.md#notes-as-data-and-attachments).
pub type VaultRow = (
    String,
    String,
    Result<OverviewOut, String>,
    Result<engine::changelog::GitStatus, String>,
    bool,
);

pub fn vaults(f: &Frame<'_>, rows: &[VaultRow]) -> Markup {
    let body = html! {
        h1 { "Vaults" }
        table #vaults {
            thead { tr { th { "Vault" } th { "Notes" } th { "Standards" } th { "Tags" } th { "Pending" } th { "Revision" } th { "Index" } th { "Undo top" } th { "Git" } th { "PDF text" } } }
            tbody {
                @for (id, name, o, git, pdf) in rows {
                    tr.vault data-id=(id) {
                        td { a href={ (f.base) "/v/" (id) "/inbox" } { (t(name)) } br; span.muted { (id) } }
                        @match o {
                            Ok(o) => {
                                td { (o.notes) } td { (o.standards) } td { (o.tags) } td { (o.pending_proposals) } td { (o.revision) }
                                td { @if o.index.fresh { "fresh" } @else { "stale: " (o.index.stale_files) " file(s)" } }
                                td { @if let Some(u) = &o.history.undo_top { code { (u) } } @else { span.muted { "—" } } }
                            }
                            Err(e) => { td colspan="7" .warning { (t(e)) } }
                        }
                        @match git {
                            Ok(g) if g.git == "on" => {
                                td.git data-git="on" data-queued=(g.queued) {
                                    "on"
                                    @if g.queued > 0 {
                                        br; span.warning { (g.queued) " commit(s) queued" }
                                        @if let Some(b) = &g.busy { br; span.muted { (t(b)) } }
                                    }
                                    @if let Some(h) = &g.head { br; code title=(h) { (h.get(..12).unwrap_or(h)) } }
                                }
                            }
                            Ok(g) => {
                                td.git.muted data-git="off" data-queued=(g.queued) {
                                    "off"
                                    @if g.repository.is_some() { br; span { "in a git work tree: " code { "vaultgate vault git " (id) " on" } } }
                                }
                            }
                            Err(e) => { td.git.warning { (t(e)) } }
                        }
                        // Turning it on sends document text to clients (a tunnel included).
                        td.pdf data-pdf-text=(if *pdf { "on" } else { "off" }) {
                            form.pdf-text method="post" action={ (f.base) "/vaults/" (id) "/pdf-text" } {
                                (f.csrf_field())
                                @if *pdf {
                                    "on" br;
                                    input type="hidden" name="on" value="0";
                                    button.reject type="submit" { "Turn off" }
                                } @else {
                                    span.muted { "off" } br;
                                    input type="hidden" name="on" value="1";
                                    button type="submit" title="Agents may then read the text of this vault's PDFs; it leaves this machine through their client" { "Turn on" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page(f, "Vaults", body)
}

pub fn tunnel(f: &Frame<'_>, status: Option<&crate::tunnel::Status>) -> Markup {
    use crate::tunnel::Phase;
    let body = html! {
        h1 { "ChatGPT tunnel" }
        @match status {
            None => p #tunnel-phase data-phase="unavailable" { "unavailable: this server has no place for a tunnel profile" },
            Some(s) => {
                p { "Phase: " strong #tunnel-phase data-phase=(s.phase.as_str()) { (s.phase.as_str()) }
                    @if let Some(pid) = s.pid { span.muted { " (pid " (pid) ")" } } }
                @if !s.set_up {
                    p #tunnel-setup { "Not set up on this home: run " code { "vaultgate tunnel setup --tunnel-id tunnel_… --api-key-file FILE" } "." }
                }
                @if let Some(cmd) = &s.command { p.muted { "tunnel-client: " code { (t(&cmd.to_string_lossy())) } } }
                @if let Some(i) = &s.install { p.warning #tunnel-install { (t(i)) } }
                @if let Some(e) = &s.last_error { p #tunnel-error { "Last error: " (t(e)) } }
                p.muted { "Connected means tunnel-client's last health check saw a successful poll of OpenAI's control plane. In ChatGPT, add the connector with Connection: Tunnel and No authentication." }
                form method="post" action={ (f.base) "/tunnel/start" } {
                    (f.csrf_field())
                    button #tunnel-start .primary type="submit" disabled[s.phase == Phase::Missing || !s.set_up] { "Start" }
                }
                form method="post" action={ (f.base) "/tunnel/stop" } {
                    (f.csrf_field())
                    button #tunnel-stop type="submit" disabled[!matches!(s.phase, Phase::Starting | Phase::Connected)] { "Stop" }
                }
            }
        }
    };
    page(f, "Tunnel", body)
}

/// Embedded assets (docs/contract.md#the-review-page-and-in-client-approval: served from the binary).
pub const STYLE: &str = include_str!("assets/style.css");
pub const SCRIPT: &str = include_str!("assets/app.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_as_html_and_its_controls_shown() {
        let m = html! { pre { (t("<script>x</script> \"><img onerror=a> \u{1b}[2K \u{9b} \u{202e}1-2\u{202c}")) } };
        let s = m.into_string();
        assert!(!s.contains("<script>") && !s.contains("<img"), "{s}");
        assert!(
            s.contains("&lt;script&gt;")
                && s.contains("\\u{001B}[2K")
                && s.contains("\\u{009B}")
                && s.contains("\\u{202E}1-2\\u{202C}"),
            "{s}"
        );
    }
}
