//! The schema `vaultgate`, as ordered migrations (docs/contract.md#team-mode): each runs once, in
//! order, under the migration lock; `schema_version` says how many ran. Append only: a migration
//! that shipped is never edited.

/// Ordered migrations of the schema `vaultgate`; `schema_version` says how many ran. Append only.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: what a write's commit point touches.
    "CREATE TABLE vaultgate.proposals (
        id text PRIMARY KEY,
        vault text NOT NULL,
        slug text NOT NULL,
        kind text NOT NULL,
        target text NOT NULL,
        created_by text NOT NULL,
        created_at text NOT NULL,
        meta jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending',
        decided_by text,
        decided_at text,
        result jsonb
    );
    CREATE TABLE vaultgate.apply_intents (
        id bigserial PRIMARY KEY,
        vault text NOT NULL,
        proposal_id text NOT NULL UNIQUE,
        plan jsonb NOT NULL,
        step text NOT NULL,
        started_at text NOT NULL,
        updated_at text NOT NULL
    );
    CREATE TABLE vaultgate.vault_revisions (vault text PRIMARY KEY, revision bigint NOT NULL);
    CREATE TABLE vaultgate.vault_fingerprints (vault text PRIMARY KEY, fingerprint text NOT NULL);
    CREATE TABLE vaultgate.vault_writes (
        vault text NOT NULL, path text NOT NULL, hash text, PRIMARY KEY (vault, path)
    );
    CREATE TABLE vaultgate.history (
        id text NOT NULL,
        vault text NOT NULL,
        seq bigint NOT NULL,
        label text NOT NULL,
        kind text NOT NULL,
        created_by text NOT NULL,
        created_at text NOT NULL,
        paths jsonb NOT NULL,
        state text NOT NULL,
        barrier boolean NOT NULL,
        PRIMARY KEY (vault, id),
        UNIQUE (vault, seq)
    );
    CREATE TABLE vaultgate.idempotency_keys (
        credential_id text NOT NULL,
        key text NOT NULL,
        tool text NOT NULL,
        args_hash text NOT NULL,
        result jsonb NOT NULL,
        created_at text NOT NULL,
        PRIMARY KEY (credential_id, key)
    );
    CREATE TABLE vaultgate.jobs (
        id bigserial PRIMARY KEY,
        vault text NOT NULL,
        principal text NOT NULL,
        idem_key text NOT NULL,
        state text NOT NULL,
        finished_at timestamptz
    );
    CREATE UNIQUE INDEX jobs_queued_key ON vaultgate.jobs (principal, idem_key) WHERE state = 'queued';
    CREATE TABLE vaultgate.challenges (
        id text PRIMARY KEY,
        vault text NOT NULL,
        consumed_at bigint,
        intent jsonb,
        result jsonb
    );
    CREATE TABLE vaultgate.audit_head (
        one boolean PRIMARY KEY CHECK (one), seq bigint NOT NULL, hash text NOT NULL
    );",
    // 2: the team's audit chain (chain.rs): every record as its line, and the head appends lock.
    "CREATE TABLE vaultgate.audit (
        seq bigint PRIMARY KEY CHECK (seq > 0),
        hash text NOT NULL,
        gateway text NOT NULL,
        line text NOT NULL
    );
    CREATE TABLE vaultgate.audit_chain_head (
        one boolean PRIMARY KEY CHECK (one), seq bigint NOT NULL, hash text NOT NULL
    );
    INSERT INTO vaultgate.audit_chain_head VALUES (true, 0, repeat('0', 64));",
    // 3: the team's credentials (credentials.rs): the SHA-256 of each token's jti, never the jti.
    "CREATE TABLE vaultgate.credentials (
        id text PRIMARY KEY,
        name text NOT NULL UNIQUE,
        tier text NOT NULL,
        vaults jsonb NOT NULL,
        jti_sha256 text NOT NULL,
        created_at bigint NOT NULL,
        expires_at bigint,
        revoked_at bigint,
        approve_in_client boolean NOT NULL
    );
    CREATE TABLE vaultgate.credential_generation (
        one boolean PRIMARY KEY CHECK (one), n bigint NOT NULL
    );
    INSERT INTO vaultgate.credential_generation VALUES (true, 0);",
    // 4: the team and its gateways (team.rs), the tables only admins write (the vault
    // registrations and the team's settings, filled by later pieces), and the chain's guard.
    // SECURITY(T-TEAM2): every record inserted must follow the head (seq, prev), hash to its
    // `hash` and, unless the tables' owner inserts it, name the gateway of the inserting role;
    // the trigger moves the head, so no gateway role needs to write it. The owner gives up
    // UPDATE, DELETE and TRUNCATE on the audit (a mistake's guard; an owner can take them back).
    "CREATE TABLE vaultgate.team (
        one boolean PRIMARY KEY CHECK (one),
        id text NOT NULL,
        key_check text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE vaultgate.gateways (
        name text PRIMARY KEY,
        role text NOT NULL DEFAULT 'reviewer' CHECK (role IN ('admin', 'reviewer')),
        db_role text NOT NULL DEFAULT session_user,
        joined_at timestamptz NOT NULL DEFAULT now(),
        last_seen timestamptz NOT NULL DEFAULT now(),
        version text NOT NULL
    );
    CREATE TABLE vaultgate.vaults (id text PRIMARY KEY, remote text NOT NULL, branch text NOT NULL);
    CREATE TABLE vaultgate.settings (key text PRIMARY KEY, value jsonb NOT NULL);
    CREATE FUNCTION vaultgate.audit_head_locked() RETURNS TABLE (seq bigint, hash text)
        LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS
        'SELECT h.seq, h.hash FROM vaultgate.audit_chain_head h WHERE h.one FOR UPDATE';
    CREATE FUNCTION vaultgate.audit_follows() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
    DECLARE
        h record;
        body jsonb := NEW.line::jsonb;
        owner name;
    BEGIN
        SELECT c.seq, c.hash INTO h FROM vaultgate.audit_chain_head c WHERE c.one FOR UPDATE;
        IF NEW.seq <> h.seq + 1
           OR (body ->> 'seq')::bigint IS DISTINCT FROM NEW.seq
           OR body ->> 'prev' IS DISTINCT FROM h.hash
           OR body ->> 'hash' IS DISTINCT FROM NEW.hash
           OR body ->> 'gateway' IS DISTINCT FROM NEW.gateway
           OR encode(sha256(convert_to(replace(NEW.line, ',\"hash\":\"' || NEW.hash || '\"', ''), 'UTF8')), 'hex')
              IS DISTINCT FROM NEW.hash THEN
            RAISE EXCEPTION 'an audit record must follow the chain head and hash to its hash'
                USING ERRCODE = 'check_violation';
        END IF;
        SELECT tableowner INTO owner FROM pg_tables WHERE schemaname = 'vaultgate' AND tablename = 'audit';
        IF session_user <> owner AND NOT EXISTS (
            SELECT 1 FROM vaultgate.gateways g WHERE g.name = NEW.gateway AND g.db_role = session_user
        ) THEN
            RAISE EXCEPTION 'a gateway appends only its own records' USING ERRCODE = 'insufficient_privilege';
        END IF;
        UPDATE vaultgate.audit_chain_head SET seq = NEW.seq, hash = NEW.hash WHERE one;
        RETURN NEW;
    END $$;
    CREATE TRIGGER audit_follows BEFORE INSERT ON vaultgate.audit
        FOR EACH ROW EXECUTE FUNCTION vaultgate.audit_follows();
    REVOKE EXECUTE ON FUNCTION vaultgate.audit_head_locked() FROM PUBLIC;
    REVOKE EXECUTE ON FUNCTION vaultgate.audit_follows() FROM PUBLIC;
    REVOKE UPDATE, DELETE, TRUNCATE ON vaultgate.audit FROM CURRENT_USER;",
    // 5: a team vault's name and layout (vaults.rs); admins alone write it (T-TEAM1).
    "ALTER TABLE vaultgate.vaults
        ADD COLUMN name text NOT NULL DEFAULT '',
        ADD COLUMN notes jsonb NOT NULL DEFAULT '[\".\"]',
        ADD COLUMN standards jsonb NOT NULL DEFAULT '[]',
        ADD COLUMN added_at timestamptz NOT NULL DEFAULT now();",
    // 6: the chain's guard checks a statement's records together (one head lock and one move of
    // the head per batch, not per record), with the same rules and errors as 4's per-row check.
    // SECURITY(T-TEAM2): the records of one INSERT, in seq order, must continue the head (seq,
    // prev), each hash to its `hash` and, unless the owner inserts them, name the gateway the
    // inserting role joined as; then the head moves to the last.
    "CREATE FUNCTION vaultgate.audit_follows_batch() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
    DECLARE
        h record;
        last record;
        broken bigint;
    BEGIN
        SELECT c.seq, c.hash INTO h FROM vaultgate.audit_chain_head c WHERE c.one FOR UPDATE;
        SELECT count(*) INTO broken FROM (
            SELECT r.seq, r.hash, r.gateway, r.line, r.line::jsonb AS body,
                   row_number() OVER (ORDER BY r.seq) AS k,
                   lag(r.hash) OVER (ORDER BY r.seq) AS before
            FROM new_records r
        ) x
        WHERE x.seq <> h.seq + x.k
           OR (x.body ->> 'seq')::bigint IS DISTINCT FROM x.seq
           OR x.body ->> 'prev' IS DISTINCT FROM coalesce(x.before, h.hash)
           OR x.body ->> 'hash' IS DISTINCT FROM x.hash
           OR x.body ->> 'gateway' IS DISTINCT FROM x.gateway
           OR encode(sha256(convert_to(replace(x.line, ',\"hash\":\"' || x.hash || '\"', ''), 'UTF8')), 'hex')
              IS DISTINCT FROM x.hash;
        IF broken > 0 THEN
            RAISE EXCEPTION 'an audit record must follow the chain head and hash to its hash'
                USING ERRCODE = 'check_violation';
        END IF;
        IF session_user <> (SELECT pg_get_userbyid(c.relowner) FROM pg_class c
                            WHERE c.oid = 'vaultgate.audit'::regclass)
           AND EXISTS (
               SELECT 1 FROM new_records r WHERE NOT EXISTS (
                   SELECT 1 FROM vaultgate.gateways g WHERE g.name = r.gateway AND g.db_role = session_user))
        THEN
            RAISE EXCEPTION 'a gateway appends only its own records' USING ERRCODE = 'insufficient_privilege';
        END IF;
        SELECT r.seq, r.hash INTO last FROM new_records r ORDER BY r.seq DESC LIMIT 1;
        IF FOUND THEN
            UPDATE vaultgate.audit_chain_head SET seq = last.seq, hash = last.hash WHERE one;
        END IF;
        RETURN NULL;
    END $$;
    DROP TRIGGER audit_follows ON vaultgate.audit;
    CREATE TRIGGER audit_follows AFTER INSERT ON vaultgate.audit
        REFERENCING NEW TABLE AS new_records
        FOR EACH STATEMENT EXECUTE FUNCTION vaultgate.audit_follows_batch();
    REVOKE EXECUTE ON FUNCTION vaultgate.audit_follows_batch() FROM PUBLIC;",
    // 7: proposals made through any gateway (proposals.rs): the content lives in the row (a team
    // has no inbox folder), and the job applying one, if any (who, on which base, which commit,
    // for whose idempotency key).
    // `n` orders the listing (an identity: inserting needs no right on its sequence).
    "ALTER TABLE vaultgate.proposals
        ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY,
        ADD COLUMN content text,
        ADD COLUMN diff text,
        ADD COLUMN bytes bigint NOT NULL DEFAULT 0,
        ADD COLUMN reject_reason text,
        ADD COLUMN job text,
        ADD COLUMN job_gateway text,
        ADD COLUMN job_base text,
        ADD COLUMN job_commit text,
        ADD COLUMN job_key jsonb,
        ADD COLUMN job_at timestamptz;
    CREATE INDEX proposals_listing ON vaultgate.proposals (vault, status, created_at DESC, n DESC);",
    // 8: each team vault's registered head (the newest commit the team knows its branch at) and,
    // once a fetch found the branch not descending from it, the head seen then. Every gateway
    // role writes it (applies and fetches move it): granted to the roles already granted the
    // proposals.
    "CREATE TABLE vaultgate.vault_heads (
        vault text PRIMARY KEY,
        head text,
        rewritten text,
        at timestamptz NOT NULL DEFAULT now()
    );
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
                 WHERE table_schema = 'vaultgate' AND table_name = 'proposals'
                   AND privilege_type = 'INSERT' AND grantee <> current_user
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON vaultgate.vault_heads TO %I', r.grantee);
        END LOOP;
    END $$;",
    // 9: every commit any job of a proposal pushed (kept when a job is dropped): a push that
    // lands late is recognized as the proposal's apply by its id, which no one else can make.
    "ALTER TABLE vaultgate.proposals ADD COLUMN pushed jsonb NOT NULL DEFAULT '[]';",
    // 10: a critical tool's challenge, issued by any gateway and executed once by whichever
    // receives its second call (challenges.rs): the plan its hash covers, who may execute it,
    // and every commit an execution was about to push (a late landing is recognized by its id).
    "ALTER TABLE vaultgate.challenges
        ADD COLUMN credential_id text NOT NULL DEFAULT '',
        ADD COLUMN tool text NOT NULL DEFAULT '',
        ADD COLUMN args_hash text NOT NULL DEFAULT '',
        ADD COLUMN idempotency_key text NOT NULL DEFAULT '',
        ADD COLUMN plan jsonb NOT NULL DEFAULT 'null',
        ADD COLUMN plan_hash text NOT NULL DEFAULT '',
        ADD COLUMN revision bigint NOT NULL DEFAULT 0,
        ADD COLUMN expires_at bigint NOT NULL DEFAULT 0,
        ADD COLUMN created_at bigint NOT NULL DEFAULT 0,
        ADD COLUMN gateway text,
        ADD COLUMN pushed jsonb NOT NULL DEFAULT '[]';",
    // 11: the nonces of approvals a person gave in a client or on the card, used once across the
    // team (approvals.rs); every gateway role writes them: granted to the roles already granted
    // the proposals.
    "CREATE TABLE vaultgate.approvals_used (nonce text PRIMARY KEY, expires_at bigint NOT NULL);
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
                 WHERE table_schema = 'vaultgate' AND table_name = 'proposals'
                   AND privilege_type = 'INSERT' AND grantee <> current_user
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON vaultgate.approvals_used TO %I', r.grantee);
        END LOOP;
    END $$;",
    // 12: each vault's lease (lease.rs), replacing the session advisory lock: who may write the
    // vault's remote now, until when (the database's clock) and under which epoch; every gateway
    // role takes, renews and releases it. And when a proposal's job last began a push (never
    // cleared): a push under way may land a while after its gateway lost the lease.
    "ALTER TABLE vaultgate.proposals ADD COLUMN pushed_at timestamptz;
    CREATE TABLE vaultgate.leases (
        vault text PRIMARY KEY,
        epoch bigint NOT NULL,
        holder text NOT NULL,
        since timestamptz NOT NULL,
        expires_at timestamptz NOT NULL
    );
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
                 WHERE table_schema = 'vaultgate' AND table_name = 'proposals'
                   AND privilege_type = 'INSERT' AND grantee <> current_user
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON vaultgate.leases TO %I', r.grantee);
        END LOOP;
    END $$;",
    // 13: the line of gateways waiting for a vault's lease (lease.rs): each gateway's first waiter
    // holds a ticket, refreshed while it waits; a lease is taken only by the live ticket queued
    // first (or when no live ticket waits), so gateways take turns instead of racing.
    "CREATE TABLE vaultgate.lease_queue (
        ticket text PRIMARY KEY,
        vault text NOT NULL,
        holder text NOT NULL,
        queued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        seen_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX lease_queue_vault ON vaultgate.lease_queue (vault, queued_at);
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
                 WHERE table_schema = 'vaultgate' AND table_name = 'proposals'
                   AND privilege_type = 'INSERT' AND grantee <> current_user
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON vaultgate.lease_queue TO %I', r.grantee);
        END LOOP;
    END $$;",
    // 14: calls handed to the vault's applier (calls.rs): a gateway that receives an apply while
    // another gateway holds the vault's lease queues the call here; the holder runs it as its
    // caller and writes the answer back; the receiver answers it and forgets the row.
    "CREATE TABLE vaultgate.calls (
        id text PRIMARY KEY,
        vault text NOT NULL,
        gateway text NOT NULL,
        credential text NOT NULL,
        transport text NOT NULL,
        tool text NOT NULL,
        args jsonb NOT NULL,
        queued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        taken_by text,
        taken_at timestamptz,
        answer jsonb
    );
    CREATE INDEX calls_queued ON vaultgate.calls (vault, queued_at) WHERE taken_by IS NULL;
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
                 WHERE table_schema = 'vaultgate' AND table_name = 'proposals'
                   AND privilege_type = 'INSERT' AND grantee <> current_user
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON vaultgate.calls TO %I', r.grantee);
        END LOOP;
    END $$;",
    // 15: what a job's commit is made of besides the proposal and its base (its date, history
    // entry, actor, receiving gateway and intent record), noted with the commit before its push:
    // whichever gateway settles the job builds the same commit again from the row.
    "ALTER TABLE vaultgate.proposals ADD COLUMN job_meta jsonb;",
];
