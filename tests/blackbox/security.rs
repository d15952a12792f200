//! Attacks: the path corpus, token forgery and revocation, the audit chain.
