//! Who acts: an authenticated MCP caller (a credential over a transport) or the operator (the OS
//! user, from the CLI or the review page), and how each is named in audit records, `createdBy`
//! and idempotency keys.

use inbox::Credential;

/// How a caller reached the gateway (recorded in the audit actor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// An authenticated MCP caller, valid for one request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub credential: Credential,
    pub transport: Transport,
}

/// Where the operator acts from: the terminal or the review page (docs/contract.md#the-command-line, docs/contract.md#the-review-page-and-in-client-approval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Cli,
    Review,
}

/// The OS user who owns the home, acting with full authority over its vaults from one surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    pub surface: Surface,
    pub user: String,
}

impl Operator {
    pub fn cli(user: &str) -> Operator {
        Operator {
            surface: Surface::Cli,
            user: user.to_owned(),
        }
    }

    pub fn review(user: &str) -> Operator {
        Operator {
            surface: Surface::Review,
            user: user.to_owned(),
        }
    }

    /// `cli:<user>` or `review:<user>`: the audit actor, `createdBy` and idempotency namespace.
    pub fn label(&self) -> String {
        match self.surface {
            Surface::Cli => format!("cli:{}", self.user),
            Surface::Review => format!("review:{}", self.user),
        }
    }

    /// The audit event of this surface's operations.
    pub fn event(&self) -> &'static str {
        match self.surface {
            Surface::Cli => "cli",
            Surface::Review => "review",
        }
    }

    pub fn audit_actor(&self) -> audit::Actor {
        let user = self.user.clone();
        match self.surface {
            Surface::Cli => audit::Actor::Cli { user },
            Surface::Review => audit::Actor::Review { user },
        }
    }
}

/// Who performs an operation: an authenticated MCP caller, or the operator (CLI or review page).
#[derive(Debug, Clone)]
pub enum Actor {
    Caller(Caller),
    Operator(Operator),
}

impl Actor {
    /// The idempotency-key namespace and the `createdBy` id.
    pub fn principal_id(&self) -> String {
        match self {
            Actor::Caller(c) => c.credential.id.as_str().to_owned(),
            Actor::Operator(o) => o.label(),
        }
    }

    /// A short human label (`decided_by`, `_applied.jsonl`).
    pub fn label(&self) -> String {
        match self {
            Actor::Caller(c) => format!("{} ({})", c.credential.name, c.credential.id.as_str()),
            Actor::Operator(o) => o.label(),
        }
    }

    pub fn audit_actor(&self) -> audit::Actor {
        match self {
            Actor::Caller(c) => c.actor(),
            Actor::Operator(o) => o.audit_actor(),
        }
    }
}

impl Caller {
    pub(crate) fn actor(&self) -> audit::Actor {
        audit::Actor::Credential {
            credential_id: self.credential.id.as_str().to_owned(),
            name: self.credential.name.clone(),
            tier: self.credential.tier.as_str().to_owned(),
            transport: self.transport.as_str().to_owned(),
        }
    }
}
