-- Governed user-agent memory (ADR 0023): the whole schema as one baseline.
--
-- Read top to bottom: the roles, the tables, then every function once, grouped by the role that
-- calls it (every governed role, an agent's runtime, the bridge, the operator, the kagent
-- controller's runtime grants, the deprecated service role's unbound calls, the owner's internal
-- helpers, the triggers), then who may do what (privileges, row-level security) and the rows
-- this file inserts.  It replaced migrations 000004-000015, which defined functions again and
-- again; it builds exactly the catalog they built (the library's schema test compares the two
-- catalogs against the frozen history) and keeps their last version, 15, so a database they
-- brought to 000015 is at this baseline.  Later changes are later files.
--
-- Placement: NEW TABLES BESIDE upstream kagent's `memory` table (vector track 000001-000003),
-- not an extension of it.  Why:
--   * Old readers must not see governed rows.  Upstream's SearchAgentMemory/ListAgentMemories
--     never filter `expires_at`, and PruneExpiredMemories extends popular expired rows by 15 days.
--     Any governed row placed in `memory` would be readable past expiry, and without consent or
--     generation, by a controller one minor version back (the supported rollback window).
--   * The governed invariants need NOT NULL/CHECK constraints and triggers that old writers
--     (InsertMemory with a NULL generation, TTL from the controller's clock) would violate:
--     adding them to a shipped table is the "unsafe constraint" the migration policy forbids.
--   * Expand, don't break: `memory` is left byte-for-byte alone.
-- Files follow golang-migrate (`NNNNNN_name.{up,down}.sql`), `IF [NOT] EXISTS` everywhere and no
-- schema-qualified names, so the same file drops into kagent's governed migration track and into
-- any schema.  PostgreSQL 14 or later (`CREATE OR REPLACE TRIGGER`); a UTF8 database
-- (memory_save compares facts after normalize()).
--
-- Operations are functions: one statement = one transaction = one round trip, the same rules for
-- every client (this library, the Go controller), and the fence checked in the same transaction
-- as the read or write (C3).  Every function takes the typed scope key (S4) as six columns; none
-- trusts a caller-supplied scope id.  Clock: every check uses now(), the start of the calling
-- transaction (each entry point is called as its own single-statement transaction), except
-- where a function says otherwise.
--
-- Roles (docs/database-roles.md).  The role that runs this file OWNS every object and is the
-- trust root; no application may connect as it.  It needs CREATEROLE (or the roles below made
-- by an administrator) and pg_signal_backend.  Callers connect as logins that are members of
-- NOLOGIN roles (cluster-wide, shared by every database that holds this schema), which may
-- EXECUTE entry points and nothing else -- no table, sequence or internal helper:
--   kagent_memory_runtime   an agent's runtime: redeem a request, then the bound calls of that
--                           request (admit, save, search, search_many, forget);
--   kagent_memory_bridge    the bridge: grant, generation, status, inspect, forget, the
--                           withdrawal steps (disable, clear, verify, record failure) and
--                           recording the requests it relays;
--   kagent_memory_operator  configure the local server, register and allow policies, register
--                           logins, offboard, purge, unblock, sweep, report;
--   kagent_memory_grants    the kagent controller's runtime grants (mint, resolve, revoke) only;
--   kagent_memory_service   DEPRECATED: the union of runtime and bridge, plus configure, sweep,
--                           report and the unbound runtime calls; its logins get none of the
--                           protection of recorded requests.
-- Entry points are `SECURITY DEFINER SET search_path FROM CURRENT`; internal helpers run with
-- the entry point's fixed search_path.
--
-- SQLSTATE class "KG" is ours; messages are reason codes only, and no statement here formats a
-- value into an error:
--   KGC01 consent_required, KGC02 consent_conflict, KGC03 erasure_pending, KGC04
--   consent_policy_changed, KGS01 stale_generation, KGE01 entry_cap_reached, KGF01
--   fact_too_large, KGT01 ttl_exceeds_policy, KGI01 immutable_entry, KGD01 scope_denied, KGD02
--   remote_server_denied, KGD03 principal_offboarded, KGA01 audit_append_only, KGJ01
--   assertion_replayed, KGJ02 assertion_expired, KGJ03 request_not_redeemed, KGJ04
--   request_not_recorded, KGP01 policy_not_allowed, KGP02 policy_immutable, KGG01 grant_exists,
--   KGX01 a transaction that is not read committed or not fresh (memory_guard);
--   setup errors raised by this file: KGR01 kagent_memory_service, KGR02 kagent_memory_operator,
--   KGR03 another governed role is missing and the migrating role may not create roles; KGR04
--   the migrating role lacks pg_signal_backend.

CREATE EXTENSION IF NOT EXISTS vector;

-- Every function below runs with this search_path, captured by `SET search_path FROM CURRENT`:
-- this schema, then pgvector's, with pg_temp LAST (pg_catalog is implicitly first).  So a
-- temporary table or type cannot shadow a governed one, and functions and operators are never
-- looked up in pg_temp.  Transaction-local: it ends with this migration.
SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

-- ===============================================================================================
-- Roles
-- ===============================================================================================

-- The governed roles, each with USAGE on this schema (PUBLIC has it on `public` by default; a
-- dedicated schema must grant it).  Created when missing, if the migrating role may create roles.
DO $$
DECLARE
    r    TEXT;
    code TEXT;
BEGIN
    FOREACH r IN ARRAY ARRAY['kagent_memory_service', 'kagent_memory_operator',
                             'kagent_memory_runtime', 'kagent_memory_bridge',
                             'kagent_memory_grants'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                            WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
                code := CASE r WHEN 'kagent_memory_service' THEN 'KGR01'
                               WHEN 'kagent_memory_operator' THEN 'KGR02' ELSE 'KGR03' END;
                RAISE EXCEPTION 'role % is missing and the migrating role may not create roles', r
                    USING ERRCODE = code,
                          HINT = format('have an administrator run: CREATE ROLE %I NOLOGIN', r);
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created concurrently by another database's migration
            END;
        END IF;
        IF NOT has_schema_privilege(r, current_schema(), 'USAGE') THEN
            EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), r);
        END IF;
    END LOOP;
END
$$;

-- The owner ends a governed login's backend that holds a withdrawal's locks (memory_end_blockers).
DO $$
BEGIN
    IF NOT pg_catalog.pg_has_role(current_user, 'pg_signal_backend', 'USAGE') THEN
        RAISE EXCEPTION 'the migrating role lacks pg_signal_backend'
            USING ERRCODE = 'KGR04',
                  HINT = pg_catalog.format('have an administrator run: GRANT pg_signal_backend TO %I',
                                           current_user);
    END IF;
END
$$;

-- ===============================================================================================
-- Tables
-- ===============================================================================================

-- One row per typed scope key (S4): principal (issuer + subject), exact agent, scope.
-- A principal is named by the identity system that issued it and its subject there, so another
-- issuer (e.g. an OIDC provider) can be admitted later by relaxing memory_scope_issuer_v1 alone,
-- without rewriting a key.  v1 admits the 'matrix' issuer only: the subject is a complete MXID
-- of the local homeserver (checked at grant, KGD02); only native local users are admitted, a
-- rule of that issuer applied from the bridge-signed origin before the database is reached.
-- Holds consent, the generation fence and the limits in force.  Never deleted: it is also the
-- durable record of the last verified erasure and of any failure (C5).
CREATE TABLE IF NOT EXISTS memory_scope (
    id                       UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    principal_issuer         TEXT        NOT NULL,
    principal_subject        TEXT        NOT NULL,
    agent_namespace          TEXT        NOT NULL,
    agent_name               TEXT        NOT NULL,
    scope_kind               TEXT        NOT NULL,
    room_id                  TEXT        NOT NULL,
    enabled                  BOOLEAN     NOT NULL DEFAULT false,
    purpose                  TEXT,
    policy_version           TEXT,
    generation               BIGINT      NOT NULL DEFAULT 0,
    consent_granted_at       TIMESTAMPTZ,
    consent_expires_at       TIMESTAMPTZ,
    max_ttl                  INTERVAL    NOT NULL DEFAULT INTERVAL '7 days',
    entry_cap                INTEGER     NOT NULL DEFAULT 100,
    fact_max_bytes           INTEGER     NOT NULL DEFAULT 512,
    -- what the deployment's embedder produces (BGE-M3: 1024; kagent-compatible: 768)
    embedding_dimension      INTEGER     NOT NULL DEFAULT 768,
    -- what the consent was given for (ADR decision 6): the conversation's classification and
    -- the output audience (sorted homeserver names the replies reach); a request with another
    -- classification or audience gets no memory
    classification           TEXT,
    output_audience          TEXT[],
    last_verified_erasure_at TIMESTAMPTZ,
    failure_reason           TEXT,
    failure_at               TIMESTAMPTZ,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT memory_scope_key UNIQUE
        (principal_issuer, principal_subject, agent_namespace, agent_name, scope_kind, room_id),
    -- S5 / S3: only native local principals in a single-subject control room are storable.
    CONSTRAINT memory_scope_issuer_v1 CHECK (principal_issuer = 'matrix'),
    CONSTRAINT memory_scope_kind_v1 CHECK (scope_kind = 'control_room'),
    CONSTRAINT memory_scope_subject_shape CHECK (
        octet_length(principal_subject) <= 255
        AND (principal_issuer <> 'matrix'
             OR principal_subject ~ '^@[!-9;-~]+:[A-Za-z0-9.:\[\]-]+$')),
    CONSTRAINT memory_scope_agent_shape CHECK (
        agent_namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
        AND length(agent_name) <= 253
        AND agent_name ~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'),
    CONSTRAINT memory_scope_room_shape CHECK (
        octet_length(room_id) <= 255
        AND room_id ~ '^![!-9;-~]+(:[A-Za-z0-9.:\[\]-]+)?$'),
    CONSTRAINT memory_scope_codes CHECK (
        (purpose IS NULL OR purpose ~ '^[a-z][a-z0-9_]{0,63}$')
        AND (policy_version IS NULL OR policy_version ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
        AND (failure_reason IS NULL OR failure_reason ~ '^[a-z][a-z0-9_]{0,63}$')
        AND (classification IS NULL OR classification ~ '^[a-z][a-z0-9_]{0,31}$')
        AND (output_audience IS NULL OR cardinality(output_audience) BETWEEN 1 AND 64)),
    CONSTRAINT memory_scope_limits CHECK (
        entry_cap BETWEEN 1 AND 10000
        AND fact_max_bytes BETWEEN 1 AND 8192
        AND max_ttl BETWEEN INTERVAL '1 minute' AND INTERVAL '365 days'
        AND embedding_dimension BETWEEN 1 AND 16000),
    CONSTRAINT memory_scope_generation_nonnegative CHECK (generation >= 0),
    CONSTRAINT memory_scope_enabled_has_consent CHECK (
        NOT enabled
        OR (purpose IS NOT NULL AND policy_version IS NOT NULL
            AND consent_expires_at IS NOT NULL AND failure_reason IS NULL))
);

CREATE INDEX IF NOT EXISTS idx_memory_scope_principal
    ON memory_scope (principal_issuer, principal_subject);

-- Memory content.  expires_at is NOT NULL and fixed at insert (B3); reads require
-- expires_at > now() (B2).  No ANN index on purpose: a scope holds at most entry_cap live rows,
-- so the exact (scope_id, expires_at) index scan + sort is both exact and fast, while a global
-- HNSW index lets the planner post-filter and return fewer than k rows (upstream's defect).
CREATE TABLE IF NOT EXISTS memory_entry (
    id          UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    UUID        NOT NULL REFERENCES memory_scope (id),
    content     TEXT        NOT NULL,
    embedding   vector      NOT NULL,  -- of the scope's embedding_dimension (insert trigger)
    generation  BIGINT      NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    CONSTRAINT memory_entry_expiry_after_creation CHECK (expires_at > created_at),
    CONSTRAINT memory_entry_content_bounds CHECK (
        content <> '' AND octet_length(content) <= 8192)
);

CREATE INDEX IF NOT EXISTS idx_memory_entry_scope_expires ON memory_entry (scope_id, expires_at);

CREATE INDEX IF NOT EXISTS idx_memory_entry_expires ON memory_entry (expires_at);

-- Embeddings are kept in the heap row.  pgvector's `vector` is STORAGE EXTERNAL and a 768-d
-- vector (3 KiB) is over the 2 KiB TOAST threshold, so every embedding would be stored out of
-- line in two TOAST chunks: reading one row's vector would cost the heap page, the TOAST index
-- and two TOAST pages, about 4 buffers a row (benchmarks/scaling.py).  STORAGE MAIN with
-- toast_tuple_target 8160 keeps it in the row (a long `content` is still moved out first, and a
-- vector larger than a page still goes out of line as a last resort).
ALTER TABLE memory_entry ALTER COLUMN embedding SET STORAGE MAIN;

ALTER TABLE memory_entry SET (toast_tuple_target = 8160);

-- Content-free governance evidence (B1): codes, counts, generations, opaque ids, times.
-- No free-text column exists, so no code path can put content here.  Append-only: no UPDATE,
-- no TRUNCATE, and DELETE only of rows older than the retention below (memory_sweep).
CREATE TABLE IF NOT EXISTS memory_audit (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    scope_id    UUID,
    operation   TEXT        NOT NULL,
    outcome     TEXT        NOT NULL,
    generation  BIGINT,
    count       BIGINT,
    CONSTRAINT memory_audit_codes CHECK (
        operation ~ '^[a-z][a-z_]{0,39}$' AND outcome ~ '^[a-z][a-z_]{0,39}$')
);

CREATE INDEX IF NOT EXISTS idx_memory_audit_scope ON memory_audit (scope_id, at);

CREATE INDEX IF NOT EXISTS idx_memory_audit_at ON memory_audit (at);

-- The deployment's settings, one row: the local homeserver (S5, set once by the first store
-- that opens, or at migration by the operator) and a random salt that makes a blocked
-- principal's reference opaque (not a dictionary-attackable hash of an MXID).
CREATE TABLE IF NOT EXISTS memory_config (
    singleton       BOOLEAN     PRIMARY KEY DEFAULT true,
    local_server    TEXT,
    principal_salt  BYTEA       NOT NULL
        DEFAULT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()),
    CONSTRAINT memory_config_one_row CHECK (singleton),
    CONSTRAINT memory_config_server_shape CHECK (
        local_server IS NULL
        OR (octet_length(local_server) <= 255 AND local_server ~ '^[A-Za-z0-9.:\[\]-]+$'))
);

-- Principals being or having been offboarded (L2): a grant is refused while a row exists, so a
-- grant racing the offboarding cannot be missed by it.  Keyed by an opaque salted reference,
-- never by the MXID.  Lifted only by the operator (memory_unblock_principal, owner only).
CREATE TABLE IF NOT EXISTS memory_principal_block (
    principal_ref BYTEA       PRIMARY KEY,
    blocked_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT memory_principal_block_ref CHECK (octet_length(principal_ref) = 32)
);

-- One row per principal that ever consented or was offboarded: the row a grant locks FOR SHARE
-- and an offboarding FOR UPDATE (memory_principal_lock), keyed by the same opaque reference.
CREATE TABLE IF NOT EXISTS memory_principal_lock (
    principal_ref BYTEA PRIMARY KEY,
    CONSTRAINT memory_principal_lock_ref CHECK (octet_length(principal_ref) = 32)
);

-- Cost admission (ADR 0023 §42, SPEC A1-A3): token buckets in the database, so every replica
-- and every restart shares them.  A bucket name is an opaque key ("scope:<id>", "sender:<id>"),
-- never an identity or content.  Idle buckets are swept (memory_sweep).
CREATE TABLE IF NOT EXISTS memory_admission_bucket (
    bucket      TEXT             PRIMARY KEY,
    tokens      DOUBLE PRECISION NOT NULL,
    updated_at  TIMESTAMPTZ      NOT NULL,
    CONSTRAINT memory_admission_bucket_name CHECK (bucket ~ '^[a-z]+:[A-Za-z0-9_.-]{1,128}$')
);

CREATE INDEX IF NOT EXISTS idx_memory_admission_bucket_updated
    ON memory_admission_bucket (updated_at);

-- Single-use scope assertions (SPEC T1): the bridge signs one JWT per request and its `jti` is
-- accepted once, by any replica, through this ledger (memory_redeem_assertion).  A row holds the
-- random `jti`, when it may be forgotten (work_until, at least a minute past `exp`, which replay
-- protection needs; swept by memory_sweep), and what the redemption admitted: the bound calls
-- of the request (memory_*_bound) serve only that redemption.
CREATE TABLE IF NOT EXISTS memory_assertion_use (
    jti             TEXT        PRIMARY KEY,
    forget_at       TIMESTAMPTZ NOT NULL,
    -- what the redemption admitted; a bound call is served only until work_until
    scope_id        UUID,
    generation      BIGINT,
    classification  TEXT,
    output_audience TEXT[],
    work_until      TIMESTAMPTZ,
    -- the login that redeemed it; the request's bound calls must come from it
    login           TEXT,
    CONSTRAINT memory_assertion_use_jti CHECK (jti ~ '^[A-Za-z0-9_-]{16,64}$')
);

CREATE INDEX IF NOT EXISTS idx_memory_assertion_use_forget_at
    ON memory_assertion_use (forget_at);

-- Registered policies (ADR 0023 §41-42): the limits a consent records and admission applies.
-- Only the owner or an operator writes one (memory_register_policy), and a policy a consent
-- refers to never changes (memory_policy_immutable).  No entry point takes a limit as an argument.
CREATE TABLE IF NOT EXISTS memory_policy (
    version                     TEXT        PRIMARY KEY,
    max_ttl                     INTERVAL    NOT NULL,
    entry_cap                   INTEGER     NOT NULL,
    fact_max_bytes              INTEGER     NOT NULL,
    consent_max_age             INTERVAL    NOT NULL,
    prefetch_max_subqueries     INTEGER     NOT NULL,
    prefetch_subquery_max_bytes INTEGER     NOT NULL,
    explicit_ops_per_minute     INTEGER     NOT NULL,
    explicit_burst              INTEGER     NOT NULL,
    scope_ops_per_hour          INTEGER     NOT NULL,
    autosave_every_user_turns   INTEGER     NOT NULL,
    summariser_input_max_bytes  INTEGER     NOT NULL,
    summariser_max_facts        INTEGER     NOT NULL,
    search_limit                INTEGER     NOT NULL,
    -- the embedding dimensions a consent under this policy may record (one per grant)
    embedding_dimensions        INTEGER[]   NOT NULL,
    registered_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT memory_policy_version CHECK (version ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    CONSTRAINT memory_policy_limits CHECK (
        max_ttl BETWEEN INTERVAL '1 minute' AND INTERVAL '365 days'
        AND consent_max_age BETWEEN INTERVAL '1 minute' AND INTERVAL '3650 days'
        AND entry_cap BETWEEN 1 AND 10000
        AND fact_max_bytes BETWEEN 1 AND 8192
        AND prefetch_max_subqueries BETWEEN 1 AND 8
        AND prefetch_subquery_max_bytes BETWEEN 1 AND 65536
        AND explicit_ops_per_minute BETWEEN 1 AND 100000
        AND explicit_burst BETWEEN 1 AND 100000
        AND scope_ops_per_hour BETWEEN 1 AND 1000000
        AND autosave_every_user_turns BETWEEN 1 AND 10000
        AND summariser_input_max_bytes BETWEEN 1 AND 1048576
        AND summariser_max_facts BETWEEN 1 AND 1000
        AND search_limit BETWEEN 1 AND 50
        AND array_ndims(embedding_dimensions) = 1
        AND cardinality(embedding_dimensions) BETWEEN 1 AND 8
        AND 1 <= ALL (embedding_dimensions) AND 16000 >= ALL (embedding_dimensions)
        AND array_position(embedding_dimensions, NULL) IS NULL)
);

-- Which agents may consent under which policy.  NULL agent: every agent of the namespace;
-- NULL namespace (and agent): every agent.
CREATE TABLE IF NOT EXISTS memory_policy_allowance (
    policy_version  TEXT NOT NULL REFERENCES memory_policy (version),
    agent_namespace TEXT,
    agent_name      TEXT,
    CONSTRAINT memory_policy_allowance_shape CHECK (agent_namespace IS NOT NULL OR agent_name IS NULL)
);

CREATE UNIQUE INDEX IF NOT EXISTS idx_memory_policy_allowance
    ON memory_policy_allowance (policy_version, coalesce(agent_namespace, ''), coalesce(agent_name, ''));

-- Requests recorded by the bridge (memory_record_request): the database cannot verify the
-- bridge's Ed25519 signature, but the bridge holds its own login, and a registered runtime
-- login redeems only a request recorded here, for the exact key, classification and audience.
CREATE TABLE IF NOT EXISTS memory_request (
    jti              TEXT        PRIMARY KEY,
    principal_issuer TEXT        NOT NULL,
    principal_subject TEXT       NOT NULL,
    agent_namespace  TEXT        NOT NULL,
    agent_name       TEXT        NOT NULL,
    scope_kind       TEXT        NOT NULL,
    room_id          TEXT        NOT NULL,
    classification   TEXT        NOT NULL,
    output_audience  TEXT[]      NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    forget_at        TIMESTAMPTZ NOT NULL,
    CONSTRAINT memory_request_jti CHECK (jti ~ '^[A-Za-z0-9_-]{16,64}$')
);

CREATE INDEX IF NOT EXISTS idx_memory_request_forget_at ON memory_request (forget_at);

-- Runtime logins the operator registered for an agent (memory_register_runtime), and logins
-- that verify the bridge's signatures themselves, the kagent controller's
-- (memory_register_verifier).
CREATE TABLE IF NOT EXISTS memory_runtime_login (
    login           TEXT NOT NULL,
    agent_namespace TEXT NOT NULL,
    agent_name      TEXT NOT NULL,
    PRIMARY KEY (login, agent_namespace, agent_name)
);

CREATE TABLE IF NOT EXISTS memory_verifier_login (
    login TEXT PRIMARY KEY
);

-- Runtime grants (kagent main): the controller's A2A transport mints a random, opaque grant for
-- one request that carries a bridge-signed scope assertion; its gRPC interceptor resolves the
-- grant a runtime presents.  Only the grant's SHA-256 is stored, bound to the agent (namespace,
-- name, SandboxAgent UID), the actor id and the SHA-256 of the scope assertion.
CREATE TABLE IF NOT EXISTS memory_runtime_grant (
    grant_hash        BYTEA       PRIMARY KEY,
    agent_namespace   TEXT        NOT NULL,
    agent_name        TEXT        NOT NULL,
    sandbox_agent_uid UUID        NOT NULL,
    actor_id          TEXT        NOT NULL,
    assertion_hash    BYTEA       NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    expires_at        TIMESTAMPTZ NOT NULL,
    revoked           BOOLEAN     NOT NULL DEFAULT false,
    CONSTRAINT memory_runtime_grant_hashes CHECK (
        octet_length(grant_hash) = 32 AND octet_length(assertion_hash) = 32),
    CONSTRAINT memory_runtime_grant_names CHECK (
        octet_length(agent_namespace) BETWEEN 1 AND 253 AND octet_length(agent_name) BETWEEN 1 AND 253
        AND octet_length(actor_id) BETWEEN 1 AND 512),
    CONSTRAINT memory_runtime_grant_lifetime CHECK (
        expires_at > created_at AND expires_at <= created_at + INTERVAL '10 minutes')
);

CREATE INDEX IF NOT EXISTS idx_memory_runtime_grant_expires_at ON memory_runtime_grant (expires_at);

-- ===============================================================================================
-- Every governed role (runtime, bridge, operator and the deprecated service; not grants)
-- ===============================================================================================

-- The governed schema's version (this file's: 15), readable by every governed role (none can
-- read the migration bookkeeping table); a later migration that changes the schema replaces it.
CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 15 $$;

-- The registered policy (zero rows when unregistered): every caller reads the limits it must
-- apply early (the database applies them anyway).
CREATE OR REPLACE FUNCTION memory_get_policy(p_version TEXT)
RETURNS TABLE (version TEXT, max_ttl INTERVAL, entry_cap INTEGER, fact_max_bytes INTEGER,
               consent_max_age INTERVAL, prefetch_max_subqueries INTEGER,
               prefetch_subquery_max_bytes INTEGER, explicit_ops_per_minute INTEGER,
               explicit_burst INTEGER, scope_ops_per_hour INTEGER,
               autosave_every_user_turns INTEGER, summariser_input_max_bytes INTEGER,
               summariser_max_facts INTEGER, search_limit INTEGER,
               embedding_dimensions INTEGER[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT p.version, p.max_ttl, p.entry_cap, p.fact_max_bytes, p.consent_max_age,
           p.prefetch_max_subqueries, p.prefetch_subquery_max_bytes, p.explicit_ops_per_minute,
           p.explicit_burst, p.scope_ops_per_hour, p.autosave_every_user_turns,
           p.summariser_input_max_bytes, p.summariser_max_facts, p.search_limit,
           p.embedding_dimensions
      FROM memory_policy p WHERE p.version = p_version
$$;

-- The local homeserver, for a login that may not configure it (runtime, bridge).
CREATE OR REPLACE FUNCTION memory_local_server() RETURNS TEXT
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT c.local_server FROM memory_config c
$$;


-- ===============================================================================================
-- An agent's runtime (kagent_memory_runtime; also the deprecated kagent_memory_service)
-- ===============================================================================================

-- Redeem one verified assertion and return the generation the request captures (as
-- memory_generation: NULL without a matching consent).  p_expires_at is the assertion's `exp`.
-- Refused, in this order and with nothing written:
--   KGJ02 an `exp` already past by the database clock (beyond the verifiers' 30 s skew bound)
--         or further ahead than a 60 s lifetime plus that skew (a ledger row must not be
--         pinned for long);
--   KGJ01 a `jti` already redeemed (the replay).
-- Who may redeem depends on the login (session_user: the authenticated login, whatever role
-- it has SET): a registered runtime only a request the bridge recorded (KGJ04 otherwise), for
-- the exact key, classification and audience recorded, of an agent it is registered for; a
-- registered verifier, or a kagent_memory_service member (deprecated), any verified request.
-- The row records what the redemption admitted (scope, generation, classification, audience,
-- login) and is kept until work_until = exp + 120 s (this function's constant: the request's
-- background work, e.g. an auto-save after the reply); from 30 s past `exp` on, KGJ02 refuses
-- the token here whatever any verifier's clock says, so a swept row can never be redeemed
-- again.  Each call also forgets up to 16 such rows (the sweep does the rest).
CREATE OR REPLACE FUNCTION memory_redeem_assertion(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    g     BIGINT;
    sid   UUID;
    until TIMESTAMPTZ;
    req   memory_request%ROWTYPE;
    who   TEXT := session_user;
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$'
       OR p_classification IS NULL OR p_output_audience IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    IF EXISTS (SELECT FROM memory_verifier_login v WHERE v.login = who) THEN
        NULL;  -- verifies the bridge's signature itself
    ELSIF EXISTS (SELECT FROM memory_runtime_login r WHERE r.login = who) THEN
        DELETE FROM memory_request r WHERE r.jti = p_jti RETURNING * INTO req;
        IF req.jti IS NULL
           OR NOT EXISTS (SELECT FROM memory_runtime_login r
                           WHERE r.login = who AND r.agent_namespace = p_namespace
                             AND r.agent_name = p_agent)
           OR (req.principal_issuer, req.principal_subject, req.agent_namespace, req.agent_name,
               req.scope_kind, req.room_id, req.classification, req.output_audience,
               req.expires_at)
              IS DISTINCT FROM
              (p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room, p_classification,
               memory_sorted(p_output_audience), p_expires_at) THEN
            RAISE EXCEPTION 'request_not_recorded' USING ERRCODE = 'KGJ04';
        END IF;
    ELSIF NOT pg_has_role(who, 'kagent_memory_service', 'MEMBER') THEN
        RAISE EXCEPTION 'request_not_recorded' USING ERRCODE = 'KGJ04';
    END IF;
    g := memory_generation(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                           p_policy_version, p_classification, p_output_audience);
    sid := (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id;
    until := p_expires_at + INTERVAL '120 seconds';
    INSERT INTO memory_assertion_use (jti, forget_at, scope_id, generation, classification,
                                      output_audience, work_until, login)
    VALUES (p_jti, greatest(p_expires_at + INTERVAL '1 minute', until), sid, g,
            p_classification, memory_sorted(p_output_audience), until, who)
    ON CONFLICT (jti) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'assertion_replayed' USING ERRCODE = 'KGJ01';
    END IF;
    DELETE FROM memory_assertion_use
     WHERE jti IN (SELECT u.jti FROM memory_assertion_use u
                    WHERE u.forget_at < now()
                    ORDER BY u.forget_at LIMIT 16 FOR UPDATE SKIP LOCKED);
    RETURN g;
END
$$;

-- A request's first call in one round trip (kagent mode): redeems the request's scope
-- assertion exactly as memory_redeem_assertion does -- same checks, same reason codes -- and,
-- when the redemption captured a generation, admits p_units of work under THAT generation
-- (never a caller's) exactly as memory_admit_bound does, in the same transaction.  One row:
--   generation   what the redemption captured (NULL: no valid consent; nothing admitted);
--   refused      memory_admit's answer, 0 admitted, 1 the scope's budget, 2 the sender's rate
--                (nothing consumed), NULL when no admission was attempted or it raised;
--   admit_state  the SQLSTATE the admission raised (KGC01, KGS01, KGP01, ...), else NULL.
-- A refused or failed admission leaves the redemption in place: the request keeps its captured
-- generation and simply gets no admitted work from this call.  A failed redemption raises and
-- admits nothing.
CREATE OR REPLACE FUNCTION memory_redeem_admit(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[],
    p_units INTEGER, p_explicit BOOLEAN)
RETURNS TABLE (generation BIGINT, refused INTEGER, admit_state TEXT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    g BIGINT;
    r INTEGER;
BEGIN
    PERFORM memory_guard();
    -- A malformed admission is refused before anything is redeemed.
    IF p_units IS NULL OR p_units < 1 OR p_units > 1000 OR p_explicit IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    g := memory_redeem_assertion(p_jti, p_expires_at, p_issuer, p_subject, p_namespace,
                                 p_agent, p_kind, p_room, p_policy_version, p_classification,
                                 p_output_audience);
    IF g IS NULL THEN
        RETURN QUERY SELECT NULL::BIGINT, NULL::INTEGER, NULL::TEXT;
        RETURN;
    END IF;
    BEGIN  -- a subtransaction: an admission that raises leaves the redemption in place
        r := memory_admit_bound(p_jti, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                                p_room, g, p_policy_version, p_units, p_explicit, NULL);
    EXCEPTION WHEN OTHERS THEN
        RETURN QUERY SELECT g, NULL::INTEGER, SQLSTATE::TEXT;
        RETURN;
    END;
    RETURN QUERY SELECT g, r, NULL::TEXT;
END
$$;

-- The bound calls of a request (kagent mode): each takes the request's `jti` and serves only
-- its redemption, checked in the operation's own transaction before the fence
-- (memory_redeemed_generation):
--   KGJ03 request_not_redeemed  no redemption of this `jti` by this login, for another scope,
--         past work_until, or a generation other than the one captured -- an answer that depends
--         only on the redemption, never on the scope's current generation;
--   KGC01 consent_required      the redemption captured no generation;
-- then the operation itself, as its unbound twin (memory_admit, memory_save, memory_search,
-- memory_search_many, memory_forget) with its own fence (KGS01 when consent has moved on).
CREATE OR REPLACE FUNCTION memory_admit_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_generation IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_redeemed_generation(p_jti, p_issuer, p_subject, p_namespace, p_agent,
                                       p_kind, p_room, p_generation);
    RETURN memory_admit(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                        p_generation, p_policy_version, p_units, p_explicit, p_now);
END
$$;

CREATE OR REPLACE FUNCTION memory_save_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_contents TEXT[], p_embeddings vector[])
RETURNS TABLE (id UUID, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    PERFORM memory_guard();
    IF p_generation IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_redeemed_generation(p_jti, p_issuer, p_subject, p_namespace, p_agent,
                                       p_kind, p_room, p_generation);
    RETURN QUERY
    SELECT m.id, m.created_at, m.expires_at
      FROM memory_save(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                       p_generation, p_policy_version, p_contents, p_embeddings) m;
END
$$;

CREATE OR REPLACE FUNCTION memory_search_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embedding vector, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
               distance DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    PERFORM memory_guard();
    IF p_generation IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_redeemed_generation(p_jti, p_issuer, p_subject, p_namespace, p_agent,
                                       p_kind, p_room, p_generation);
    RETURN QUERY
    SELECT m.id, m.content, m.created_at, m.expires_at, m.distance
      FROM memory_search(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                         p_generation, p_policy_version, p_embedding, p_limit) m;
END
$$;

CREATE OR REPLACE FUNCTION memory_search_many_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embeddings vector[], p_limit INTEGER)
RETURNS TABLE (query_ordinal INTEGER, id UUID, content TEXT, created_at TIMESTAMPTZ,
               expires_at TIMESTAMPTZ, distance DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    PERFORM memory_guard();
    IF p_generation IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_redeemed_generation(p_jti, p_issuer, p_subject, p_namespace, p_agent,
                                       p_kind, p_room, p_generation);
    RETURN QUERY
    SELECT m.query_ordinal, m.id, m.content, m.created_at, m.expires_at, m.distance
      FROM memory_search_many(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                              p_generation, p_policy_version, p_embeddings, p_limit) m;
END
$$;

-- An agent's forget within its request: the redemption's scope, and (when the redemption
-- captured a generation) only while that consent holds; p_generation, when sent, must be the
-- captured one.  A redemption without consent may still forget (memory_forget works whether or
-- not the scope is enabled: there is nothing to forget, or the withdrawal clears it).
CREATE OR REPLACE FUNCTION memory_forget_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_entry_id UUID)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    g BIGINT;
BEGIN
    PERFORM memory_guard();
    g := memory_redeemed_generation(p_jti, p_issuer, p_subject, p_namespace, p_agent,
                                    p_kind, p_room, p_generation);
    IF g IS NOT NULL AND g IS DISTINCT FROM
       (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).generation
    THEN
        RAISE EXCEPTION 'stale_generation' USING ERRCODE = 'KGS01';
    END IF;
    RETURN QUERY
    SELECT f.generation, f.deleted
      FROM memory_forget(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                         p_entry_id) f;
END
$$;


-- ===============================================================================================
-- The bridge (kagent_memory_bridge; also the deprecated kagent_memory_service; the withdrawal
-- steps memory_clear, memory_verify_erasure, memory_record_failure also kagent_memory_operator)
-- ===============================================================================================

-- The bridge records a request it relays (one round trip per request).
CREATE OR REPLACE FUNCTION memory_record_request(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$'
       OR p_issuer IS NULL OR p_subject IS NULL OR p_namespace IS NULL OR p_agent IS NULL
       OR p_kind IS NULL OR p_room IS NULL
       OR p_classification IS NULL OR p_output_audience IS NULL
       OR cardinality(p_output_audience) = 0 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    INSERT INTO memory_request (jti, principal_issuer, principal_subject, agent_namespace,
                                agent_name, scope_kind, room_id, classification,
                                output_audience, expires_at, forget_at)
    VALUES (p_jti, p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room, p_classification,
            memory_sorted(p_output_audience), p_expires_at, p_expires_at + INTERVAL '1 minute')
    ON CONFLICT (jti) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'assertion_replayed' USING ERRCODE = 'KGJ01';
    END IF;
    DELETE FROM memory_request
     WHERE jti IN (SELECT r.jti FROM memory_request r WHERE r.forget_at < now()
                    ORDER BY r.forget_at LIMIT 16 FOR UPDATE SKIP LOCKED);
END
$$;

-- C1: explicit, purpose-specific, versioned consent under a registered policy the operator
-- allows for the agent (KGP01 otherwise); the limits recorded are the policy's, never the
-- caller's.  Same purpose + version on a valid consent renews it (same generation); anything
-- else needs a withdrawal first.  Enabling always advances the generation, so work admitted
-- under an earlier consent can never resume, and starts from an empty scope.
CREATE OR REPLACE FUNCTION memory_grant(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_purpose TEXT, p_policy_version TEXT, p_embedding_dimension INTEGER,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS TABLE (scope_id UUID, generation BIGINT, granted_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s      memory_scope%ROWTYPE;
    pol    memory_policy%ROWTYPE;
    server TEXT;
BEGIN
    PERFORM memory_guard();
    IF p_kind IS DISTINCT FROM 'control_room' OR p_issuer IS DISTINCT FROM 'matrix' THEN
        RAISE EXCEPTION 'scope_denied' USING ERRCODE = 'KGD01';
    END IF;
    IF p_purpose IS NULL OR p_classification IS NULL OR p_output_audience IS NULL
       OR p_embedding_dimension IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO pol FROM memory_policy WHERE version = p_policy_version;
    IF NOT FOUND
       OR NOT (p_embedding_dimension = ANY (pol.embedding_dimensions))
       OR NOT EXISTS (SELECT FROM memory_policy_allowance a
                       WHERE a.policy_version = pol.version
                         AND (a.agent_namespace IS NULL
                              OR (a.agent_namespace = p_namespace
                                  AND (a.agent_name IS NULL OR a.agent_name = p_agent)))) THEN
        RAISE EXCEPTION 'policy_not_allowed' USING ERRCODE = 'KGP01';
    END IF;
    p_output_audience := memory_sorted(p_output_audience);
    -- S5: only principals (and rooms) of the local homeserver, stored once in memory_config.
    SELECT c.local_server INTO server FROM memory_config c;
    IF server IS NULL
       OR substr(p_subject, strpos(p_subject, ':') + 1) IS DISTINCT FROM server
       OR (strpos(p_room, ':') > 0 AND substr(p_room, strpos(p_room, ':') + 1) IS DISTINCT FROM server)
       OR p_output_audience IS DISTINCT FROM ARRAY[server]
    THEN
        RAISE EXCEPTION 'remote_server_denied' USING ERRCODE = 'KGD02';
    END IF;
    PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), false);
    IF EXISTS (SELECT FROM memory_principal_block b
                WHERE b.principal_ref = memory_principal_ref(p_issuer, p_subject)) THEN
        RAISE EXCEPTION 'principal_offboarded' USING ERRCODE = 'KGD03';
    END IF;
    INSERT INTO memory_scope (principal_issuer, principal_subject, agent_namespace, agent_name,
                              scope_kind, room_id, max_ttl, entry_cap, fact_max_bytes)
    VALUES (p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
            pol.max_ttl, pol.entry_cap, pol.fact_max_bytes)
    ON CONFLICT ON CONSTRAINT memory_scope_key DO NOTHING;

    s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);

    IF s.failure_reason IS NOT NULL THEN
        RAISE EXCEPTION 'erasure_pending' USING ERRCODE = 'KGC03';
    END IF;
    IF s.enabled AND s.consent_expires_at > now() THEN
        IF s.purpose IS DISTINCT FROM p_purpose
           OR s.policy_version IS DISTINCT FROM p_policy_version
           OR s.embedding_dimension IS DISTINCT FROM p_embedding_dimension
           OR s.classification IS DISTINCT FROM p_classification
           OR s.output_audience IS DISTINCT FROM p_output_audience THEN
            RAISE EXCEPTION 'consent_conflict' USING ERRCODE = 'KGC02';
        END IF;
        UPDATE memory_scope SET consent_expires_at = now() + pol.consent_max_age
         WHERE id = s.id
        RETURNING * INTO s;
        PERFORM memory_audit_write(s.id, 'grant', 'renewed', s.generation, NULL);
    ELSE
        PERFORM memory_bind_scope(s.id);
        DELETE FROM memory_entry WHERE memory_entry.scope_id = s.id;
        UPDATE memory_scope
           SET enabled = true, generation = memory_scope.generation + 1,
               purpose = p_purpose, policy_version = pol.version,
               max_ttl = pol.max_ttl, entry_cap = pol.entry_cap,
               fact_max_bytes = pol.fact_max_bytes,
               embedding_dimension = p_embedding_dimension,
               classification = p_classification, output_audience = p_output_audience,
               consent_granted_at = now(), consent_expires_at = now() + pol.consent_max_age
         WHERE id = s.id
        RETURNING * INTO s;
        PERFORM memory_audit_write(s.id, 'grant', 'enabled', s.generation, NULL);
    END IF;
    RETURN QUERY SELECT s.id, s.generation, s.consent_granted_at, s.consent_expires_at;
END
$$;

-- The generation a request captures at admission: NULL unless enabled, unexpired, consented
-- under the caller's policy version, and for the request's classification and output audience
-- (ADR decision 6), which are always checked: NULL is refused (22023), never read as "no check".
CREATE OR REPLACE FUNCTION memory_generation(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_classification IS NULL OR p_output_audience IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    RETURN (
        SELECT s.generation
          FROM memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room) s
         WHERE s.enabled AND s.consent_expires_at > now() AND s.policy_version = p_policy_version
           AND s.classification = p_classification
           AND s.output_audience = memory_sorted(p_output_audience));
END
$$;

-- Content-free status (U1): one row, or none for a key that was never granted.
CREATE OR REPLACE FUNCTION memory_status(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS TABLE (enabled BOOLEAN, purpose TEXT, policy_version TEXT, generation BIGINT,
               consent_expires_at TIMESTAMPTZ, max_ttl INTERVAL, entry_cap INTEGER,
               entry_count BIGINT, last_verified_erasure_at TIMESTAMPTZ, failure_reason TEXT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT s.enabled AND s.consent_expires_at > now(), s.purpose, s.policy_version,
           s.generation, s.consent_expires_at, s.max_ttl, s.entry_cap,
           (SELECT count(*) FROM memory_readable(s.id)),
           s.last_verified_erasure_at, s.failure_reason;
END
$$;

-- The subject's own view (U2): needs no generation, never returns expired rows.  Keyset
-- pagination, newest first; returns at most p_limit rows after (p_after_created, p_after_id).
CREATE OR REPLACE FUNCTION memory_inspect(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_after_created TIMESTAMPTZ, p_after_id UUID, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 51 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT r.id, r.content, r.created_at, r.expires_at
      FROM memory_readable(s.id) r
     WHERE p_after_created IS NULL OR (r.created_at, r.id) < (p_after_created, p_after_id)
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT p_limit;
END
$$;

-- U3: delete one entry of this key.  Same answer for an absent, foreign or already-deleted id
-- (no existence oracle): deleted = 0.  Works whether or not the scope is enabled.
CREATE OR REPLACE FUNCTION memory_forget(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_entry_id UUID)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
    n BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    IF s.id IS NOT NULL THEN
        PERFORM memory_bind_scope(s.id);
        DELETE FROM memory_entry WHERE memory_entry.id = p_entry_id AND scope_id = s.id;
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM memory_audit_write(s.id, 'forget', 'deleted', s.generation, n);
    END IF;
    RETURN QUERY SELECT s.generation, n;
END
$$;

-- No caller can hold a withdrawal hostage.  Every erasure-side entry point -- memory_disable,
-- memory_clear, memory_verify_erasure, memory_disable_principal, memory_purge_principal and
-- memory_sweep -- finishes within a bound whatever another session of a governed login (a
-- member of kagent_memory_service, kagent_memory_runtime or kagent_memory_bridge) does: an
-- open transaction after a governed call, `pg_sleep` inside the same statement, its own
-- statement_timeout / idle_in_transaction_session_timeout / transaction_timeout /
-- lock_timeout set to 0.  How: each function first takes every row lock its body needs (the
-- "lock prelude") with a function-level `lock_timeout` of 1 s.  On lock_not_available (55P03)
-- it records the governed-login backends holding a lock on a governed table
-- (memory_lock_holders), waits once more (1 s), and on a second timeout ends the backends of
-- that list still in the SAME transaction (memory_end_blockers) and tries a third and last
-- time (1 s).  Never ended: this backend, the owner (and any login with the owner's
-- privileges), superusers, and every login that is not a member of one of those three roles.
-- Then the body runs with the locks held.  Bound: at most 3 s of lock wait per call, plus the
-- work itself; a third timeout raises 55P03 (a withdrawal stays disabled with its erasure
-- pending).  Each end is audited content-free: (scope, 'withdraw' | 'offboard' | 'sweep',
-- 'blocker_ended', generation, number of backends ended).

-- U4/C4 step 1 of a withdrawal, lock-bounded: disable and advance the generation, marking the
-- erasure as pending until it is verified.  Committed on its own, before any delete.
CREATE OR REPLACE FUNCTION memory_disable(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS TABLE (scope_id UUID, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    s     memory_scope%ROWTYPE;
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    UPDATE memory_scope
       SET enabled = false, generation = memory_scope.generation + 1,
           failure_reason = 'erasure_pending', failure_at = now()
     WHERE id = (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id
    RETURNING * INTO s;
    IF s.id IS NOT NULL THEN
        IF ended > 0 THEN
            PERFORM memory_audit_write(s.id, 'withdraw', 'blocker_ended', s.generation, ended);
        END IF;
        PERFORM memory_audit_write(s.id, 'disable', 'disabled', s.generation, NULL);
        RETURN QUERY SELECT s.id, s.generation;
    END IF;
END
$$;

-- Delete every entry of a scope, lock-bounded: the scope row and every entry row of the scope
-- are taken first.  p_advance (forget_all) advances the generation in the same transaction, so
-- saves in flight under the old generation are fenced out; a withdrawal has advanced it
-- already in memory_disable.
CREATE OR REPLACE FUNCTION memory_clear(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_advance BOOLEAN)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    s     memory_scope%ROWTYPE;
    n     BIGINT := 0;
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    FOR attempt IN 1..3 LOOP
        BEGIN
            s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
            IF s.id IS NOT NULL THEN
                PERFORM memory_bind_scope(s.id);
                PERFORM 1 FROM memory_entry WHERE scope_id = s.id FOR UPDATE;
            END IF;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    IF p_advance THEN
        UPDATE memory_scope SET generation = memory_scope.generation + 1
         WHERE id = s.id
        RETURNING * INTO s;
    END IF;
    IF ended > 0 THEN
        PERFORM memory_audit_write(s.id, 'withdraw', 'blocker_ended', s.generation, ended);
    END IF;
    PERFORM memory_bind_scope(s.id);
    DELETE FROM memory_entry WHERE scope_id = s.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(s.id, 'clear', 'deleted', s.generation, n);
    RETURN QUERY SELECT s.generation, n;
END
$$;

-- B5 read-after-delete verification, in a new transaction after the delete committed,
-- lock-bounded on the scope row.  Counts rows written under a generation older than
-- p_generation (or the one entry) that are still readable through memory_readable or still
-- physically present.  Zero: records the verified erasure (and, for a complete erasure, clears
-- the pending marker).  Otherwise the scope is disabled with failure_reason =
-- verification_failed (C5) and verified_at is NULL.
CREATE OR REPLACE FUNCTION memory_verify_erasure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_entry_id UUID, p_complete BOOLEAN)
RETURNS TABLE (generation BIGINT, verified_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    s         memory_scope%ROWTYPE;
    readable  BIGINT;
    remaining BIGINT;
    seen      TEXT[];
    ended     BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    IF p_complete AND p_entry_id IS NOT NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    FOR attempt IN 1..3 LOOP
        BEGIN
            s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF s.id IS NULL THEN
        RETURN QUERY SELECT NULL::BIGINT, now();
        RETURN;
    END IF;
    IF ended > 0 THEN
        PERFORM memory_audit_write(s.id, 'withdraw', 'blocker_ended', s.generation, ended);
    END IF;
    -- A complete erasure is verified against the scope's own current generation, never a
    -- caller's number: every row written before it must be gone.
    IF p_complete THEN
        p_generation := s.generation;
    END IF;
    PERFORM memory_bind_scope(s.id);
    SELECT count(*) INTO readable FROM memory_readable(s.id) r
     WHERE (p_entry_id IS NULL AND r.generation < p_generation) OR r.id = p_entry_id;
    SELECT count(*) INTO remaining FROM memory_entry e
     WHERE e.scope_id = s.id
       AND ((p_entry_id IS NULL AND e.generation < p_generation) OR e.id = p_entry_id);
    IF readable + remaining > 0 THEN
        UPDATE memory_scope
           SET enabled = false, generation = memory_scope.generation + 1,
               failure_reason = 'verification_failed', failure_at = now()
         WHERE id = s.id;
        PERFORM memory_audit_write(s.id, 'verify', 'verification_failed', s.generation, remaining);
        -- Not raised here: that would roll back the disable.  A NULL verified_at tells the
        -- caller to raise ErasureFailed once this transaction has committed.
        RETURN QUERY SELECT s.generation + 1, NULL::TIMESTAMPTZ;
        RETURN;
    END IF;
    UPDATE memory_scope
       SET last_verified_erasure_at = now(),
           failure_reason = CASE WHEN p_complete AND failure_reason IN
                                      ('erasure_pending', 'erasure_failed', 'verification_failed')
                                 THEN NULL ELSE failure_reason END,
           failure_at = CASE WHEN p_complete THEN NULL ELSE failure_at END
     WHERE id = s.id
    RETURNING * INTO s;
    PERFORM memory_audit_write(s.id, 'verify', 'verified', s.generation, 0);
    RETURN QUERY SELECT s.generation, s.last_verified_erasure_at;
END
$$;

-- C5: a content-free failure (a reason code) on a scope that stays disabled.  The withdrawal's
-- last resort: it waits for the scope row within the same 1 s bound (nothing is ended for it;
-- the erasure stays pending).
CREATE OR REPLACE FUNCTION memory_record_failure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_reason TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT
SET lock_timeout = '1s' AS $$
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    UPDATE memory_scope
       SET enabled = false, failure_reason = p_reason, failure_at = now()
     WHERE id = (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id
    RETURNING * INTO s;
    IF s.id IS NOT NULL THEN
        PERFORM memory_audit_write(s.id, 'failure', p_reason, s.generation, NULL);
    END IF;
END
$$;


-- ===============================================================================================
-- The operator (kagent_memory_operator; memory_configure, memory_sweep, memory_store_report also
-- the deprecated kagent_memory_service)
-- ===============================================================================================

-- S5 configuration: the local homeserver is set once (by the first store that opens, or by the
-- operator at migration) and returned, so a store configured for another server refuses to start.
CREATE OR REPLACE FUNCTION memory_configure(p_local_server TEXT) RETURNS TEXT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    server TEXT;
BEGIN
    PERFORM memory_guard();
    UPDATE memory_config SET local_server = p_local_server
     WHERE local_server IS NULL AND p_local_server IS NOT NULL
    RETURNING local_server INTO server;
    IF FOUND THEN
        PERFORM memory_audit_write(NULL, 'configure', 'local_server_set', NULL, NULL);
        RETURN server;
    END IF;
    SELECT c.local_server INTO server FROM memory_config c;
    RETURN server;
END
$$;

-- Register a policy (operator).  'registered' when new; 'unchanged' when identical; 'replaced'
-- when different and no consent refers to it yet; KGP02 when one does.
CREATE OR REPLACE FUNCTION memory_register_policy(
    p_version TEXT, p_max_ttl INTERVAL, p_entry_cap INTEGER, p_fact_max_bytes INTEGER,
    p_consent_max_age INTERVAL, p_prefetch_max_subqueries INTEGER,
    p_prefetch_subquery_max_bytes INTEGER, p_explicit_ops_per_minute INTEGER,
    p_explicit_burst INTEGER, p_scope_ops_per_hour INTEGER, p_autosave_every_user_turns INTEGER,
    p_summariser_input_max_bytes INTEGER, p_summariser_max_facts INTEGER, p_search_limit INTEGER,
    p_embedding_dimensions INTEGER[])
RETURNS TEXT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    old  memory_policy%ROWTYPE;
    dims INTEGER[];
BEGIN
    PERFORM memory_guard();
    dims := ARRAY(SELECT DISTINCT d FROM unnest(p_embedding_dimensions) d ORDER BY 1);
    IF p_version IS NULL OR p_embedding_dimensions IS NULL
       OR cardinality(dims) IS DISTINCT FROM cardinality(p_embedding_dimensions) THEN
        RAISE EXCEPTION 'invalid_policy' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO old FROM memory_policy WHERE version = p_version FOR UPDATE;
    IF FOUND THEN
        IF (old.max_ttl, old.entry_cap, old.fact_max_bytes, old.consent_max_age,
            old.prefetch_max_subqueries, old.prefetch_subquery_max_bytes,
            old.explicit_ops_per_minute, old.explicit_burst, old.scope_ops_per_hour,
            old.autosave_every_user_turns, old.summariser_input_max_bytes,
            old.summariser_max_facts, old.search_limit, old.embedding_dimensions)
           IS NOT DISTINCT FROM
           (p_max_ttl, p_entry_cap, p_fact_max_bytes, p_consent_max_age,
            p_prefetch_max_subqueries, p_prefetch_subquery_max_bytes,
            p_explicit_ops_per_minute, p_explicit_burst, p_scope_ops_per_hour,
            p_autosave_every_user_turns, p_summariser_input_max_bytes,
            p_summariser_max_facts, p_search_limit, dims) THEN
            RETURN 'unchanged';
        END IF;
    END IF;
    BEGIN
        INSERT INTO memory_policy AS m (version, max_ttl, entry_cap, fact_max_bytes,
            consent_max_age, prefetch_max_subqueries, prefetch_subquery_max_bytes,
            explicit_ops_per_minute, explicit_burst, scope_ops_per_hour,
            autosave_every_user_turns, summariser_input_max_bytes, summariser_max_facts,
            search_limit, embedding_dimensions)
        VALUES (p_version, p_max_ttl, p_entry_cap, p_fact_max_bytes, p_consent_max_age,
                p_prefetch_max_subqueries, p_prefetch_subquery_max_bytes,
                p_explicit_ops_per_minute, p_explicit_burst, p_scope_ops_per_hour,
                p_autosave_every_user_turns, p_summariser_input_max_bytes,
                p_summariser_max_facts, p_search_limit, dims)
        ON CONFLICT (version) DO UPDATE SET
            max_ttl = EXCLUDED.max_ttl, entry_cap = EXCLUDED.entry_cap,
            fact_max_bytes = EXCLUDED.fact_max_bytes, consent_max_age = EXCLUDED.consent_max_age,
            prefetch_max_subqueries = EXCLUDED.prefetch_max_subqueries,
            prefetch_subquery_max_bytes = EXCLUDED.prefetch_subquery_max_bytes,
            explicit_ops_per_minute = EXCLUDED.explicit_ops_per_minute,
            explicit_burst = EXCLUDED.explicit_burst,
            scope_ops_per_hour = EXCLUDED.scope_ops_per_hour,
            autosave_every_user_turns = EXCLUDED.autosave_every_user_turns,
            summariser_input_max_bytes = EXCLUDED.summariser_input_max_bytes,
            summariser_max_facts = EXCLUDED.summariser_max_facts,
            search_limit = EXCLUDED.search_limit,
            embedding_dimensions = EXCLUDED.embedding_dimensions,
            registered_at = now();
    EXCEPTION WHEN check_violation OR not_null_violation THEN
        RAISE EXCEPTION 'invalid_policy' USING ERRCODE = '22023';
    END;
    PERFORM memory_audit_write(NULL, 'policy', CASE WHEN old.version IS NULL THEN 'registered'
                                                    ELSE 'replaced' END, NULL, NULL);
    RETURN CASE WHEN old.version IS NULL THEN 'registered' ELSE 'replaced' END;
END
$$;

-- Allow a registered policy for every agent (NULL namespace), a namespace or one agent.
CREATE OR REPLACE FUNCTION memory_allow_policy(p_version TEXT, p_namespace TEXT, p_agent TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF NOT EXISTS (SELECT FROM memory_policy WHERE version = p_version)
       OR (p_namespace IS NULL AND p_agent IS NOT NULL) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory_policy_allowance (policy_version, agent_namespace, agent_name)
    VALUES (p_version, p_namespace, p_agent) ON CONFLICT DO NOTHING;
    PERFORM memory_audit_write(NULL, 'policy', 'allowed', NULL, NULL);
END
$$;

-- Withdraw such an allowance; returns how many were removed.  Consents keep their policy.
CREATE OR REPLACE FUNCTION memory_disallow_policy(p_version TEXT, p_namespace TEXT, p_agent TEXT)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    n BIGINT;
BEGIN
    PERFORM memory_guard();
    DELETE FROM memory_policy_allowance
     WHERE policy_version = p_version
       AND agent_namespace IS NOT DISTINCT FROM p_namespace
       AND agent_name IS NOT DISTINCT FROM p_agent;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(NULL, 'policy', 'disallowed', NULL, n);
    RETURN n;
END
$$;

-- Register an existing login as the runtime of one agent: it may redeem only requests the
-- bridge recorded for that agent.
CREATE OR REPLACE FUNCTION memory_register_runtime(p_login TEXT, p_namespace TEXT, p_agent TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    PERFORM memory_check_login(p_login);
    IF p_namespace IS NULL OR p_agent IS NULL
       OR p_namespace !~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
       OR length(p_agent) > 253 OR p_agent !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory_runtime_login (login, agent_namespace, agent_name)
    VALUES (p_login, p_namespace, p_agent) ON CONFLICT DO NOTHING;
    PERFORM memory_audit_write(NULL, 'login', 'runtime_registered', NULL, NULL);
END
$$;

-- Register an existing login as a verifier (the kagent controller's): it checks the bridge's
-- signatures itself and may redeem requests nobody recorded.
CREATE OR REPLACE FUNCTION memory_register_verifier(p_login TEXT) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    PERFORM memory_check_login(p_login);
    INSERT INTO memory_verifier_login (login) VALUES (p_login) ON CONFLICT DO NOTHING;
    PERFORM memory_audit_write(NULL, 'login', 'verifier_registered', NULL, NULL);
END
$$;

-- Remove every runtime and verifier registration of a login; returns how many.
CREATE OR REPLACE FUNCTION memory_unregister_login(p_login TEXT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    a BIGINT;
    b BIGINT;
BEGIN
    PERFORM memory_guard();
    DELETE FROM memory_runtime_login WHERE login = p_login;
    GET DIAGNOSTICS a = ROW_COUNT;
    DELETE FROM memory_verifier_login WHERE login = p_login;
    GET DIAGNOSTICS b = ROW_COUNT;
    PERFORM memory_audit_write(NULL, 'login', 'unregistered', NULL, a + b);
    RETURN a + b;
END
$$;

-- L2 step 1, lock-bounded: block the principal's grants and disable every scope of the
-- principal in one transaction, before any clearing.  The principal's lock row, its block row
-- and every scope row of the principal are taken first.
CREATE OR REPLACE FUNCTION memory_disable_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (scope_id UUID, agent_namespace TEXT, agent_name TEXT, scope_kind TEXT,
               room_id TEXT, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    FOR attempt IN 1..3 LOOP
        BEGIN
            -- Block first, under the lock every grant of this principal shares: grants in
            -- flight commit before the UPDATE below takes its snapshot, later ones see the block.
            PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), true);
            INSERT INTO memory_principal_block (principal_ref)
            VALUES (memory_principal_ref(p_issuer, p_subject))
            ON CONFLICT (principal_ref) DO NOTHING;
            PERFORM 1 FROM memory_scope
              WHERE principal_issuer = p_issuer AND principal_subject = p_subject
              ORDER BY id FOR NO KEY UPDATE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF ended > 0 THEN
        PERFORM memory_audit_write(NULL, 'offboard', 'blocker_ended', NULL, ended);
    END IF;
    RETURN QUERY
    WITH disabled AS (
        UPDATE memory_scope
           SET enabled = false, generation = memory_scope.generation + 1,
               failure_reason = 'erasure_pending', failure_at = now()
         WHERE principal_issuer = p_issuer AND principal_subject = p_subject
        RETURNING memory_scope.id, memory_scope.agent_namespace, memory_scope.agent_name,
                  memory_scope.scope_kind, memory_scope.room_id, memory_scope.generation
    ), audited AS (
        INSERT INTO memory_audit (scope_id, operation, outcome, generation)
        SELECT d.id, 'offboard_disable', 'disabled', d.generation FROM disabled d
    )
    SELECT d.id, d.agent_namespace, d.agent_name, d.scope_kind, d.room_id, d.generation
      FROM disabled d
     ORDER BY d.id;
END
$$;

-- L2 last step, lock-bounded (every scope row of the principal is taken first): once every
-- scope of an offboarded principal is cleared and verified, its scope rows (the only rows that
-- name the principal and its rooms) are deleted.  Scopes with an unverified erasure or rows
-- left are kept, and counted, for the next offboarding run.  Content-free evidence stays in
-- memory_audit, keyed by the scopes' random ids.
CREATE OR REPLACE FUNCTION memory_purge_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (purged BIGINT, kept BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
DECLARE
    s      memory_scope%ROWTYPE;
    done   BIGINT := 0;
    kept_n BIGINT := 0;
    seen   TEXT[];
    ended  BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    IF NOT EXISTS (SELECT FROM memory_principal_block b
                    WHERE b.principal_ref = memory_principal_ref(p_issuer, p_subject)) THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';  -- not being offboarded
    END IF;
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM 1 FROM memory_scope
              WHERE principal_issuer = p_issuer AND principal_subject = p_subject
              ORDER BY id FOR UPDATE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF ended > 0 THEN
        PERFORM memory_audit_write(NULL, 'offboard', 'blocker_ended', NULL, ended);
    END IF;
    FOR s IN SELECT * FROM memory_scope
              WHERE principal_issuer = p_issuer AND principal_subject = p_subject
              ORDER BY id FOR UPDATE LOOP
        PERFORM memory_bind_scope(s.id);
        IF s.enabled OR s.failure_reason IS NOT NULL
           OR EXISTS (SELECT FROM memory_entry e WHERE e.scope_id = s.id) THEN
            kept_n := kept_n + 1;
            CONTINUE;
        END IF;
        DELETE FROM memory_scope WHERE id = s.id;
        PERFORM memory_audit_write(s.id, 'offboard', 'purged', s.generation, NULL);
        done := done + 1;
    END LOOP;
    PERFORM memory_bind_scope(NULL);
    RETURN QUERY SELECT done, kept_n;
END
$$;

-- The operator lifts an offboarding block (owner only: not granted to the service role).
CREATE OR REPLACE FUNCTION memory_unblock_principal(p_issuer TEXT, p_subject TEXT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    n BIGINT;
BEGIN
    PERFORM memory_guard();
    PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), true);
    DELETE FROM memory_principal_block
     WHERE principal_ref = memory_principal_ref(p_issuer, p_subject);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(NULL, 'unblock', CASE WHEN n > 0 THEN 'lifted' ELSE 'none' END,
                               NULL, n);
    RETURN n;
END
$$;

-- L3: physical deletion of expired rows, scope by scope through the same row-level security
-- binding (no bypass policy exists); then audit rows past their 400-day retention, admission
-- buckets idle for a day (full again by then, so dropping one changes no decision) and
-- redeemed assertions once they can no longer verify.  One sweep at a time across replicas:
-- the lock (the config row) is waited for within the 1 s bound, and a call that does not get
-- it returns 0.  Rows another transaction holds (entries, buckets, ledger rows) are skipped and
-- left for the next sweep, never waited for.  Idempotent.
CREATE OR REPLACE FUNCTION memory_sweep() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
DECLARE
    sid   UUID;
    n     BIGINT;
    total BIGINT := 0;
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    -- One sweep at a time: the config row's lock (a row lock, which no caller can hold
    -- outside a governed function's transaction, unlike an advisory lock).
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM 1 FROM memory_config WHERE singleton FOR UPDATE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RETURN 0;  -- another sweep, younger than the bound, holds it
            END IF;
        END;
    END LOOP;
    IF ended > 0 THEN
        PERFORM memory_audit_write(NULL, 'sweep', 'blocker_ended', NULL, ended);
    END IF;
    FOR sid IN SELECT id FROM memory_scope ORDER BY id LOOP
        PERFORM memory_bind_scope(sid);
        DELETE FROM memory_entry
         WHERE id IN (SELECT e.id FROM memory_entry e
                       WHERE e.scope_id = sid AND e.expires_at <= now()
                         FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
    END LOOP;
    PERFORM memory_bind_scope(NULL);
    DELETE FROM memory_audit WHERE at < now() - INTERVAL '400 days';
    DELETE FROM memory_admission_bucket
     WHERE bucket IN (SELECT b.bucket FROM memory_admission_bucket b
                       WHERE b.updated_at < now() - INTERVAL '1 day' FOR UPDATE SKIP LOCKED);
    DELETE FROM memory_assertion_use
     WHERE jti IN (SELECT u.jti FROM memory_assertion_use u
                    WHERE u.forget_at < now() FOR UPDATE SKIP LOCKED);
    PERFORM memory_audit_write(NULL, 'sweep', 'deleted', NULL, total);
    RETURN total;
END
$$;

-- Operator evidence (SPEC L3, U5): content-free aggregates over every scope and the store
-- invariants `verify` checks, counted scope by scope through the same row-level security
-- binding as every other read.  expired_overdue counts rows expired more than 24 hours ago and
-- still stored (ADR decision 27: physical deletion within 24 hours); overdue_scope_ids names up
-- to 100 such scopes (random UUIDs).
CREATE OR REPLACE FUNCTION memory_store_report()
RETURNS TABLE (scopes BIGINT, scopes_enabled BIGINT, scopes_failed BIGINT,
               entries_live BIGINT, entries_expired BIGINT, expired_readable BIGINT,
               stale_generation BIGINT, ttl_exceeded BIGINT, over_cap_scopes BIGINT,
               rows_in_disabled_scopes BIGINT, expired_overdue BIGINT,
               overdue_scope_ids UUID[], violating_scope_ids UUID[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    s        memory_scope%ROWTYPE;
    live     BIGINT;
    expired  BIGINT;
    overdue  BIGINT;
    readable BIGINT;
    stale    BIGINT;
    too_long BIGINT;
BEGIN
    PERFORM memory_guard();
    scopes := 0; scopes_enabled := 0; scopes_failed := 0; entries_live := 0;
    entries_expired := 0; expired_readable := 0; stale_generation := 0; ttl_exceeded := 0;
    over_cap_scopes := 0; rows_in_disabled_scopes := 0; expired_overdue := 0;
    overdue_scope_ids := ARRAY[]::UUID[];
    -- the scopes (random ids, at most 100) behind every other invariant verify checks
    violating_scope_ids := ARRAY[]::UUID[];
    FOR s IN SELECT * FROM memory_scope ORDER BY id LOOP
        PERFORM memory_bind_scope(s.id);
        SELECT count(*) FILTER (WHERE e.expires_at > now()),
               count(*) FILTER (WHERE e.expires_at <= now()),
               count(*) FILTER (WHERE e.expires_at <= now() - INTERVAL '24 hours'),
               count(*) FILTER (WHERE e.generation <> s.generation),
               count(*) FILTER (WHERE e.expires_at > e.created_at + s.max_ttl)
          INTO live, expired, overdue, stale, too_long
          FROM memory_entry e WHERE e.scope_id = s.id;
        SELECT count(*) INTO readable FROM memory_readable(s.id) r WHERE r.expires_at <= now();
        scopes := scopes + 1;
        IF s.enabled AND s.consent_expires_at > now() THEN
            scopes_enabled := scopes_enabled + 1;
        END IF;
        IF NOT s.enabled THEN  -- withdrawn or offboarded: only an unfinished erasure leaves rows
            rows_in_disabled_scopes := rows_in_disabled_scopes + live + expired;
        END IF;
        IF s.failure_reason IS NOT NULL THEN
            scopes_failed := scopes_failed + 1;
        END IF;
        IF live > s.entry_cap THEN
            over_cap_scopes := over_cap_scopes + 1;
        END IF;
        IF overdue > 0 AND cardinality(overdue_scope_ids) < 100 THEN
            overdue_scope_ids := overdue_scope_ids || s.id;
        END IF;
        IF (readable > 0 OR stale > 0 OR too_long > 0 OR live > s.entry_cap
            OR (NOT s.enabled AND live + expired > 0) OR s.failure_reason IS NOT NULL)
           AND cardinality(violating_scope_ids) < 100 THEN
            violating_scope_ids := violating_scope_ids || s.id;
        END IF;
        entries_live := entries_live + live;
        entries_expired := entries_expired + expired;
        expired_overdue := expired_overdue + overdue;
        expired_readable := expired_readable + readable;
        stale_generation := stale_generation + stale;
        ttl_exceeded := ttl_exceeded + too_long;
    END LOOP;
    PERFORM memory_bind_scope(NULL);
    RETURN NEXT;
END
$$;


-- ===============================================================================================
-- Runtime grants on kagent main (kagent_memory_grants only)
-- ===============================================================================================

-- Store a grant that expires 10 minutes after the statement: the caller cannot choose or
-- extend the lifetime, and a hash already stored (live, expired or revoked) is refused (KGG01
-- grant_exists), so a revoked grant never comes back.  A hash or assertion hash that is not
-- exactly 32 bytes, a NULL, an empty or oversized name, a UID that is not a UUID: 22023.  Each
-- mint also deletes grants expired for more than a day (the day keeps a late duplicate
-- refused), so the table stays small without a sweeper.  Times here are statement_timestamp(),
-- and memory_guard() refuses an old transaction (KGX01): none can resolve a grant as of its start.
CREATE OR REPLACE FUNCTION memory_grant_mint(
    p_grant_hash BYTEA, p_namespace TEXT, p_agent TEXT, p_sandbox_agent_uid TEXT,
    p_actor_id TEXT, p_assertion_hash BYTEA)
RETURNS TIMESTAMPTZ
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    t TIMESTAMPTZ := statement_timestamp();
    uid UUID;
BEGIN
    PERFORM memory_guard();
    IF p_grant_hash IS NULL OR octet_length(p_grant_hash) <> 32
       OR p_assertion_hash IS NULL OR octet_length(p_assertion_hash) <> 32
       OR p_namespace IS NULL OR octet_length(p_namespace) NOT BETWEEN 1 AND 253
       OR p_agent IS NULL OR octet_length(p_agent) NOT BETWEEN 1 AND 253
       OR p_actor_id IS NULL OR octet_length(p_actor_id) NOT BETWEEN 1 AND 512
       OR p_sandbox_agent_uid IS NULL
       OR p_sandbox_agent_uid !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    uid := p_sandbox_agent_uid::UUID;
    DELETE FROM memory_runtime_grant g WHERE g.expires_at < t - INTERVAL '1 day';
    INSERT INTO memory_runtime_grant (grant_hash, agent_namespace, agent_name, sandbox_agent_uid,
                                      actor_id, assertion_hash, created_at, expires_at)
    VALUES (p_grant_hash, p_namespace, p_agent, uid, p_actor_id, p_assertion_hash,
            t, t + INTERVAL '10 minutes')
    ON CONFLICT (grant_hash) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'grant_exists' USING ERRCODE = 'KGG01';
    END IF;
    RETURN t + INTERVAL '10 minutes';
END
$$;

-- The grant's binding (one row) only while it is unexpired and unrevoked, otherwise no row.
CREATE OR REPLACE FUNCTION memory_grant_resolve(p_grant_hash BYTEA)
RETURNS TABLE (agent_namespace TEXT, agent_name TEXT, sandbox_agent_uid UUID, actor_id TEXT,
               assertion_hash BYTEA, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    RETURN QUERY
    SELECT g.agent_namespace, g.agent_name, g.sandbox_agent_uid, g.actor_id, g.assertion_hash,
           g.expires_at
      FROM memory_runtime_grant g
     WHERE g.grant_hash = p_grant_hash AND octet_length(p_grant_hash) = 32
       AND NOT g.revoked AND g.expires_at > statement_timestamp();
END
$$;

-- Idempotent: whether a live grant was revoked.
CREATE OR REPLACE FUNCTION memory_grant_revoke(p_grant_hash BYTEA) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_grant_hash IS NULL OR octet_length(p_grant_hash) <> 32 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    UPDATE memory_runtime_grant g SET revoked = true
     WHERE g.grant_hash = p_grant_hash AND NOT g.revoked;
    RETURN FOUND;
END
$$;


-- ===============================================================================================
-- Unbound runtime calls (kagent_memory_service only, deprecated)
-- ===============================================================================================

-- Cost admission (ADR 0023 §42, SPEC A1-A3), consulted before any model or embedding work.
-- After the fence (as memory_save), consume p_units from the scope's hourly bucket and, when
-- p_explicit, one explicit operation from the sender's per-minute bucket, all-or-nothing, with
-- the capacities and refill rates of the scope's recorded policy.  Returns 0 when admitted,
-- 1 when the scope's budget refused, 2 when the sender's rate did (nothing consumed then).
-- Buckets are locked in name order, so concurrent admissions cannot deadlock.  p_now NULL
-- means the database clock (never later than it: tests pass an earlier instant).
CREATE OR REPLACE FUNCTION memory_admit(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    t       TIMESTAMPTZ := least(coalesce(p_now, now()), now());
    s       memory_scope%ROWTYPE;
    pol     memory_policy%ROWTYPE;
    names   TEXT[];
    costs   DOUBLE PRECISION[];
    caps    DOUBLE PRECISION[];
    refill  DOUBLE PRECISION[];
    periods DOUBLE PRECISION[];
    n       INTEGER;
    b       memory_admission_bucket%ROWTYPE;
    avail   DOUBLE PRECISION[] := ARRAY[]::DOUBLE PRECISION[];
    stamp   TIMESTAMPTZ[] := ARRAY[]::TIMESTAMPTZ[];
    refused INTEGER := 0;
BEGIN
    PERFORM memory_guard();
    IF p_units IS NULL OR p_units < 1 OR p_units > 1000 OR p_explicit IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    SELECT * INTO pol FROM memory_policy WHERE version = s.policy_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'policy_not_allowed' USING ERRCODE = 'KGP01';
    END IF;
    names := ARRAY['scope:' || replace(s.id::text, '-', '')];
    costs := ARRAY[p_units::DOUBLE PRECISION];
    caps := ARRAY[pol.scope_ops_per_hour::DOUBLE PRECISION];
    refill := ARRAY[pol.scope_ops_per_hour::DOUBLE PRECISION];
    periods := ARRAY[3600.0::DOUBLE PRECISION];
    IF p_explicit THEN
        names := names || ('sender:' || left(encode(sha256(convert_to(
            p_subject || '/' || p_namespace || '/' || p_agent, 'UTF8')), 'hex'), 32));
        costs := costs || 1.0::DOUBLE PRECISION;
        caps := caps || pol.explicit_burst::DOUBLE PRECISION;
        refill := refill || pol.explicit_ops_per_minute::DOUBLE PRECISION;
        periods := periods || 60.0::DOUBLE PRECISION;
    END IF;
    n := cardinality(names);
    INSERT INTO memory_admission_bucket (bucket, tokens, updated_at)
    SELECT u.bucket, u.capacity, t FROM unnest(names, caps) AS u(bucket, capacity)
    ON CONFLICT (bucket) DO NOTHING;
    PERFORM 1 FROM memory_admission_bucket WHERE bucket = ANY (names)
     ORDER BY bucket FOR UPDATE;
    FOR i IN 1..n LOOP
        SELECT * INTO b FROM memory_admission_bucket WHERE bucket = names[i];
        avail := avail || least(
            caps[i],
            b.tokens + greatest(0, extract(epoch FROM t - b.updated_at)::DOUBLE PRECISION)
                       * refill[i] / periods[i]);
        stamp := stamp || greatest(b.updated_at, t);
        IF refused = 0 AND avail[i] + 1e-9 < costs[i] THEN
            refused := i;
        END IF;
    END LOOP;
    IF refused = 0 THEN
        FOR i IN 1..n LOOP
            UPDATE memory_admission_bucket
               SET tokens = avail[i] - costs[i], updated_at = stamp[i]
             WHERE bucket = names[i];
        END LOOP;
    END IF;
    RETURN refused;
END
$$;

-- Fenced save (C3, B3, B4): all facts or none.  The insert trigger re-checks the fence under
-- the scope row lock, fixes created_at/expires_at and enforces both caps.  A fact whose NFC
-- form equals a live entry's of the scope (or an earlier fact of the same call) answers that
-- entry and stores nothing (its expiry is not extended).  The scope row is locked first, so
-- two racing saves of one text cannot both insert it.
CREATE OR REPLACE FUNCTION memory_save(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_contents TEXT[], p_embeddings vector[])
RETURNS TABLE (id UUID, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    IF coalesce(cardinality(p_contents), 0) = 0
       OR cardinality(p_contents) IS DISTINCT FROM cardinality(p_embeddings)
       OR array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    -- every vector is checked, also a duplicate's that stores nothing (the insert trigger
    -- checks only what it inserts)
    IF EXISTS (SELECT 1 FROM unnest(p_embeddings) AS q(e)
                WHERE e IS NULL OR vector_dims(e) <> s.embedding_dimension) THEN
        RAISE EXCEPTION 'invalid_embedding' USING ERRCODE = '22000';
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    WITH facts AS (
        SELECT u.content, u.embedding, u.n, normalize(u.content, NFC) AS norm
          FROM unnest(p_contents, p_embeddings) WITH ORDINALITY AS u(content, embedding, n)
    ), live AS (
        SELECT DISTINCT ON (normalize(r.content, NFC))
               normalize(r.content, NFC) AS norm, r.id, r.created_at, r.expires_at
          FROM memory_readable(s.id) r
         ORDER BY normalize(r.content, NFC), r.created_at, r.id
    ), fresh AS (
        SELECT DISTINCT ON (f.norm) f.content, f.embedding, f.n, f.norm
          FROM facts f
         WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.norm = f.norm)
         ORDER BY f.norm, f.n
    ), inserted AS (
        INSERT INTO memory_entry (scope_id, content, embedding, generation)
        SELECT s.id, x.content, x.embedding, p_generation FROM fresh x ORDER BY x.n
        RETURNING memory_entry.id, memory_entry.created_at, memory_entry.expires_at,
                  normalize(memory_entry.content, NFC) AS norm
    ), answers AS (
        SELECT l.norm, l.id, l.created_at, l.expires_at FROM live l
        UNION ALL
        SELECT i.norm, i.id, i.created_at, i.expires_at FROM inserted i
    )
    SELECT a.id, a.created_at, a.expires_at
      FROM facts f JOIN answers a ON a.norm = f.norm
     ORDER BY f.n;
END
$$;

-- Fenced exact search (C3, B2): cosine top-k among the scope's readable rows.  The fence is
-- repeated inside the read's own snapshot, so a withdrawal that commits between the check and
-- the read yields nothing rather than stale content.
CREATE OR REPLACE FUNCTION memory_search(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embedding vector, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
               distance DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 50 OR p_embedding IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    IF vector_dims(p_embedding) <> s.embedding_dimension THEN
        RAISE EXCEPTION 'invalid_embedding' USING ERRCODE = '22000';
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT r.id, r.content, r.created_at, r.expires_at, r.embedding <=> p_embedding
      FROM memory_readable(s.id) r
     WHERE EXISTS (SELECT 1 FROM memory_scope f
                    WHERE f.id = s.id AND f.enabled AND f.generation = p_generation
                      AND f.consent_expires_at > now() AND f.policy_version = p_policy_version)
     ORDER BY r.embedding <=> p_embedding, r.id
     LIMIT p_limit;
END
$$;

-- Prefetch in one round trip: up to the scope's policy's prefetch_max_subqueries query vectors
-- (at most 8) for one scope in one statement.  The scope is fenced once (guard, fence,
-- dimension check, RLS binding), then each query ordinal gets exactly what memory_search would
-- return for it: cosine top-p_limit among the scope's readable rows (read-time expiry before
-- the LIMIT, through memory_readable), ordered by distance then id, with the fence repeated
-- inside the read's own snapshot.  Rows are tagged with the 1-based ordinal of their query
-- vector in p_embeddings.  22023 for a limit outside 1..50 or no, NULL, too many or
-- multi-dimensional query vectors; 22000 for a vector of another dimension than the consent's.
CREATE OR REPLACE FUNCTION memory_search_many(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embeddings vector[], p_limit INTEGER)
RETURNS TABLE (query_ordinal INTEGER, id UUID, content TEXT, created_at TIMESTAMPTZ,
               expires_at TIMESTAMPTZ, distance DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s        memory_scope%ROWTYPE;
    has_null BOOLEAN;
    bad_dims BOOLEAN;
BEGIN
    PERFORM memory_guard();
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 50 OR p_embeddings IS NULL
       OR array_ndims(p_embeddings) IS DISTINCT FROM 1
       OR cardinality(p_embeddings) NOT BETWEEN 1 AND 8 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    SELECT bool_or(e IS NULL) INTO has_null FROM unnest(p_embeddings) AS q(e);
    IF has_null THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    IF cardinality(p_embeddings) > coalesce(
           (SELECT p.prefetch_max_subqueries FROM memory_policy p
             WHERE p.version = s.policy_version), 0) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    SELECT bool_or(vector_dims(e) <> s.embedding_dimension) INTO bad_dims
      FROM unnest(p_embeddings) AS q(e);
    IF bad_dims THEN
        RAISE EXCEPTION 'invalid_embedding' USING ERRCODE = '22000';
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT q.ord::INTEGER, h.id, h.content, h.created_at, h.expires_at, h.distance
      FROM unnest(p_embeddings) WITH ORDINALITY AS q(embedding, ord)
     CROSS JOIN LATERAL (
           SELECT r.id, r.content, r.created_at, r.expires_at,
                  r.embedding <=> q.embedding AS distance
             FROM memory_readable(s.id) r
            ORDER BY r.embedding <=> q.embedding, r.id
            LIMIT p_limit) h
     WHERE EXISTS (SELECT 1 FROM memory_scope f
                    WHERE f.id = s.id AND f.enabled AND f.generation = p_generation
                      AND f.consent_expires_at > now() AND f.policy_version = p_policy_version)
     ORDER BY q.ord, h.distance, h.id;
END
$$;


-- ===============================================================================================
-- Owner only: helpers of the entry points
-- ===============================================================================================

-- Every entry point first requires a READ COMMITTED transaction whose current statement is its
-- first moments: a caller holding a REPEATABLE READ / SERIALIZABLE snapshot, or a transaction
-- kept open, would otherwise read, count and fence through an old snapshot and an old now()
-- (consent and entry expiry, the entry cap, a verified erasure).
CREATE OR REPLACE FUNCTION memory_guard() RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
       OR statement_timestamp() - now() > INTERVAL '5 seconds' THEN
        RAISE EXCEPTION 'transaction_refused' USING ERRCODE = 'KGX01';
    END IF;
END
$$;

-- The scope row for a typed key (NULL row when absent).
CREATE OR REPLACE FUNCTION memory_scope_row(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS memory_scope
LANGUAGE sql STABLE AS $$
    SELECT *
      FROM memory_scope
     WHERE principal_issuer = p_issuer AND principal_subject = p_subject
       AND agent_namespace = p_namespace AND agent_name = p_agent
       AND scope_kind = p_kind AND room_id = p_room
$$;

-- The same row, locked against concurrent writers of this scope (grant, clear, verify, and the
-- insert fence, which takes the same lock) until the calling transaction ends.
CREATE OR REPLACE FUNCTION memory_scope_lock(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS memory_scope
LANGUAGE sql VOLATILE AS $$
    SELECT *
      FROM memory_scope
     WHERE principal_issuer = p_issuer AND principal_subject = p_subject
       AND agent_namespace = p_namespace AND agent_name = p_agent
       AND scope_kind = p_kind AND room_id = p_room
       FOR NO KEY UPDATE
$$;

-- Raises unless the scope is enabled, its consent unexpired, p_generation current (C2, C3) and
-- the consent given under the caller's policy version (a store on policy v2 does not read or
-- write what was consented under v1: re-consent is the path).
CREATE OR REPLACE FUNCTION memory_fence_check(
    s memory_scope, p_generation BIGINT, p_policy_version TEXT) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF s.id IS NULL THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';
    END IF;
    IF p_generation IS DISTINCT FROM s.generation THEN
        RAISE EXCEPTION 'stale_generation' USING ERRCODE = 'KGS01';
    END IF;
    IF NOT s.enabled OR s.consent_expires_at IS NULL OR s.consent_expires_at <= now() THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';
    END IF;
    IF s.policy_version IS DISTINCT FROM p_policy_version THEN
        RAISE EXCEPTION 'consent_policy_changed' USING ERRCODE = 'KGC04';
    END IF;
END
$$;

-- The one read path (B2, B5): search, inspect, status counts and erasure verification all read
-- through it, so "verified unreadable" means unreadable by search.
CREATE OR REPLACE FUNCTION memory_readable(p_scope UUID)
RETURNS SETOF memory_entry
LANGUAGE sql STABLE AS $$
    SELECT * FROM memory_entry WHERE scope_id = p_scope AND expires_at > now()
$$;

-- Binds the transaction to one scope for row-level security (B7).
CREATE OR REPLACE FUNCTION memory_bind_scope(p_scope UUID) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT set_config('kagent.memory_scope', coalesce(p_scope::text, ''), true)
$$;

-- An opaque reference to a principal: salted, so the block table holds no MXID and no hash a
-- dictionary of MXIDs could reverse without the salt.
CREATE OR REPLACE FUNCTION memory_principal_ref(p_issuer TEXT, p_subject TEXT) RETURNS BYTEA
LANGUAGE sql STABLE AS $$
    SELECT sha256(c.principal_salt || convert_to(p_issuer, 'UTF8') || '\x00'::bytea
                  || convert_to(p_subject, 'UTF8'))
      FROM memory_config c
$$;

-- The per-principal lock row a grant shares and an offboarding takes exclusively (row locks,
-- not advisory locks: no caller can take or hold them outside these functions).
CREATE OR REPLACE FUNCTION memory_principal_lock(p_ref BYTEA, p_exclusive BOOLEAN) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO memory_principal_lock (principal_ref) VALUES (p_ref) ON CONFLICT DO NOTHING;
    IF p_exclusive THEN
        PERFORM 1 FROM memory_principal_lock WHERE principal_ref = p_ref FOR UPDATE;
    ELSE
        PERFORM 1 FROM memory_principal_lock WHERE principal_ref = p_ref FOR SHARE;
    END IF;
END
$$;

-- One content-free audit row: scope id, operation, outcome, generation, count.
CREATE OR REPLACE FUNCTION memory_audit_write(
    p_scope UUID, p_operation TEXT, p_outcome TEXT, p_generation BIGINT, p_count BIGINT)
RETURNS void
LANGUAGE sql VOLATILE AS $$
    INSERT INTO memory_audit (scope_id, operation, outcome, generation, count)
    VALUES (p_scope, p_operation, p_outcome, p_generation, p_count)
$$;

-- The generation a bound call may use: the one its redemption captured, only for the login
-- that redeemed the request (KGJ03 otherwise).  p_generation NULL (forget, which sends none)
-- accepts the captured one, NULL included.
CREATE OR REPLACE FUNCTION memory_redeemed_generation(
    p_jti TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_room TEXT, p_generation BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    u memory_assertion_use%ROWTYPE;
BEGIN
    SELECT * INTO u FROM memory_assertion_use WHERE jti = p_jti;
    IF u.jti IS NULL OR u.work_until IS NULL OR u.work_until <= now()
       OR u.login IS DISTINCT FROM session_user::TEXT
       OR u.scope_id IS DISTINCT FROM
          (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id THEN
        RAISE EXCEPTION 'request_not_redeemed' USING ERRCODE = 'KGJ03';
    END IF;
    IF p_generation IS NULL THEN
        RETURN u.generation;
    END IF;
    IF u.generation IS NULL THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';
    END IF;
    IF p_generation IS DISTINCT FROM u.generation THEN
        RAISE EXCEPTION 'request_not_redeemed' USING ERRCODE = 'KGJ03';
    END IF;
    RETURN u.generation;
END
$$;

-- Logins are named by role name; the role must exist.
CREATE OR REPLACE FUNCTION memory_check_login(p_login TEXT) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_login IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = p_login) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
END
$$;

-- Sorted, distinct audience; NULL in, NULL out.
CREATE OR REPLACE FUNCTION memory_sorted(p_values TEXT[]) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_values IS NULL THEN NULL
                ELSE ARRAY(SELECT DISTINCT a FROM unnest(p_values) a ORDER BY 1) END
$$;

-- The governed-login backends (pid, virtual transaction) holding a lock on a governed table:
-- the tables named memory_* of this schema that the owner owns.  Owner, superusers, logins
-- with the owner's privileges, logins of no governed role and this backend are never listed.
CREATE OR REPLACE FUNCTION memory_lock_holders() RETURNS TEXT[]
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(array_agg(DISTINCT l.pid::text || '/' || l.virtualtransaction), ARRAY[]::TEXT[])
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
      JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
     WHERE l.granted
       AND l.locktype = 'relation'
       AND l.pid <> pg_catalog.pg_backend_pid()
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
       AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
                           WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_catalog.pg_class t
                                                    WHERE t.oid = 'memory_scope'::regclass)
                             AND c.relkind IN ('r', 'p')
                             AND c.relowner = (SELECT u.oid FROM pg_catalog.pg_roles u
                                                WHERE u.rolname = current_user)
                             AND c.relname LIKE 'memory\_%')
       AND NOT r.rolsuper
       AND NOT pg_catalog.pg_has_role(r.oid, (SELECT u.oid FROM pg_catalog.pg_roles u
                                              WHERE u.rolname = current_user), 'MEMBER')
       AND EXISTS (SELECT FROM pg_catalog.pg_roles g
                    WHERE g.rolname IN ('kagent_memory_service', 'kagent_memory_runtime',
                                        'kagent_memory_bridge')
                      AND pg_catalog.pg_has_role(r.oid, g.oid, 'MEMBER'))
$$;

-- End the backends of p_seen still in the same transaction (they have held a governed lock
-- since p_seen was taken); returns how many were signalled.
CREATE OR REPLACE FUNCTION memory_end_blockers(p_seen TEXT[]) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    holder TEXT;
    n      BIGINT := 0;
BEGIN
    FOR holder IN SELECT h FROM unnest(memory_lock_holders()) h
                   WHERE h = ANY (p_seen) ORDER BY h LOOP
        IF pg_catalog.pg_terminate_backend(split_part(holder, '/', 1)::INTEGER) THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;


-- ===============================================================================================
-- Owner only: trigger functions and their triggers
-- ===============================================================================================

-- B3: a stored row is immutable, also for the table owner (triggers are not bypassed by
-- ownership).  Only session_replication_role = replica (superuser) skips this.
CREATE OR REPLACE FUNCTION memory_entry_refuse_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'immutable_entry' USING ERRCODE = 'KGI01';
END
$$;

-- Audit retention: 400 days (13 months).  Long enough to answer, a year later, "when was my
-- memory erased, and was it verified?"; bounded, so the evidence is not kept forever.  The rows
-- are content-free, so keeping them carries no memory.  The same trigger refuses UPDATE and
-- any DELETE of a younger row, whoever issues it (owner included).
CREATE OR REPLACE FUNCTION memory_audit_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.at < now() - INTERVAL '400 days' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_append_only' USING ERRCODE = 'KGA01';
END
$$;

-- C3: the generation only ever increases and a scope's key never changes.
CREATE OR REPLACE FUNCTION memory_scope_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.generation < OLD.generation
       OR NEW.principal_issuer IS DISTINCT FROM OLD.principal_issuer
       OR NEW.principal_subject IS DISTINCT FROM OLD.principal_subject
       OR NEW.agent_namespace IS DISTINCT FROM OLD.agent_namespace
       OR NEW.agent_name IS DISTINCT FROM OLD.agent_name
       OR NEW.scope_kind IS DISTINCT FROM OLD.scope_kind
       OR NEW.room_id IS DISTINCT FROM OLD.room_id THEN
        RAISE EXCEPTION 'immutable_entry' USING ERRCODE = 'KGI01';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

-- C2/C3/B3/B4: the fence for every insert, whoever issues it.  The scope row is locked first,
-- so a withdrawal that committed while we waited is seen, and concurrent inserts into one scope
-- serialise; the cap is counted after the lock in a fresh statement snapshot (this function is
-- VOLATILE), so two racing saves cannot both take the last slot.  Its fixed search_path means a
-- temporary table named memory_scope cannot stand in for the real one.
CREATE OR REPLACE FUNCTION memory_entry_fence() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    s    memory_scope%ROWTYPE;
    live BIGINT;
BEGIN
    SELECT * INTO s FROM memory_scope WHERE id = NEW.scope_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';
    END IF;
    IF NEW.generation IS DISTINCT FROM s.generation THEN
        RAISE EXCEPTION 'stale_generation' USING ERRCODE = 'KGS01';
    END IF;
    IF NOT s.enabled OR s.consent_expires_at IS NULL OR s.consent_expires_at <= now() THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';
    END IF;
    IF octet_length(NEW.content) > s.fact_max_bytes THEN
        RAISE EXCEPTION 'fact_too_large' USING ERRCODE = 'KGF01';
    END IF;
    IF vector_dims(NEW.embedding) <> s.embedding_dimension THEN
        RAISE EXCEPTION 'invalid_embedding' USING ERRCODE = '22000';
    END IF;
    NEW.created_at := now();
    IF NEW.expires_at IS NULL THEN
        NEW.expires_at := NEW.created_at + s.max_ttl;
    ELSIF NEW.expires_at > NEW.created_at + s.max_ttl THEN
        RAISE EXCEPTION 'ttl_exceeds_policy' USING ERRCODE = 'KGT01';
    END IF;
    SELECT count(*) INTO live
      FROM memory_entry
     WHERE scope_id = NEW.scope_id AND expires_at > now();
    IF live >= s.entry_cap THEN
        RAISE EXCEPTION 'entry_cap_reached' USING ERRCODE = 'KGE01';
    END IF;
    RETURN NEW;
END
$$;

-- A policy a consent refers to never changes, whoever tries (owner included).
CREATE OR REPLACE FUNCTION memory_policy_immutable() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT FROM memory_scope s WHERE s.policy_version = OLD.version) THEN
        RAISE EXCEPTION 'policy_immutable' USING ERRCODE = 'KGP02';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;

CREATE OR REPLACE TRIGGER memory_entry_immutable
    BEFORE UPDATE ON memory_entry
    FOR EACH ROW EXECUTE FUNCTION memory_entry_refuse_update();

CREATE OR REPLACE TRIGGER memory_audit_append_only
    BEFORE UPDATE OR DELETE ON memory_audit
    FOR EACH ROW EXECUTE FUNCTION memory_audit_append_only();

CREATE OR REPLACE TRIGGER memory_audit_no_truncate
    BEFORE TRUNCATE ON memory_audit
    FOR EACH STATEMENT EXECUTE FUNCTION memory_audit_append_only();

CREATE OR REPLACE TRIGGER memory_scope_guard
    BEFORE UPDATE ON memory_scope
    FOR EACH ROW EXECUTE FUNCTION memory_scope_guard();

CREATE OR REPLACE TRIGGER memory_entry_fence
    BEFORE INSERT ON memory_entry
    FOR EACH ROW EXECUTE FUNCTION memory_entry_fence();

CREATE OR REPLACE TRIGGER memory_policy_immutable
    BEFORE UPDATE OR DELETE ON memory_policy
    FOR EACH ROW EXECUTE FUNCTION memory_policy_immutable();

-- ===============================================================================================
-- Privileges and row-level security
-- ===============================================================================================

-- Nobody but the owner touches a table or the sequence.
REVOKE ALL ON memory_scope, memory_entry, memory_audit, memory_config, memory_principal_block,
    memory_principal_lock, memory_admission_bucket, memory_assertion_use, memory_policy,
    memory_policy_allowance, memory_request, memory_runtime_login, memory_verifier_login,
    memory_runtime_grant
    FROM PUBLIC, kagent_memory_service, kagent_memory_runtime, kagent_memory_bridge,
    kagent_memory_operator, kagent_memory_grants;
REVOKE ALL ON SEQUENCE memory_audit_id_seq FROM PUBLIC, kagent_memory_service;

-- PUBLIC loses the default EXECUTE on every function here, trigger functions included; each
-- role gets EXECUTE on its entry points and nothing else.
REVOKE ALL ON FUNCTION
    memory_schema_version(),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_configure(TEXT),
    memory_register_policy(TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER[]),
    memory_allow_policy(TEXT, TEXT, TEXT),
    memory_disallow_policy(TEXT, TEXT, TEXT),
    memory_register_runtime(TEXT, TEXT, TEXT),
    memory_register_verifier(TEXT),
    memory_unregister_login(TEXT),
    memory_disable_principal(TEXT, TEXT),
    memory_purge_principal(TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT),
    memory_sweep(),
    memory_store_report(),
    memory_grant_mint(BYTEA, TEXT, TEXT, TEXT, TEXT, BYTEA),
    memory_grant_resolve(BYTEA),
    memory_grant_revoke(BYTEA),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_guard(),
    memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_fence_check(memory_scope, BIGINT, TEXT),
    memory_readable(UUID),
    memory_bind_scope(UUID),
    memory_principal_ref(TEXT, TEXT),
    memory_principal_lock(BYTEA, BOOLEAN),
    memory_audit_write(UUID, TEXT, TEXT, BIGINT, BIGINT),
    memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT),
    memory_check_login(TEXT),
    memory_sorted(TEXT[]),
    memory_lock_holders(),
    memory_end_blockers(TEXT[]),
    memory_entry_refuse_update(),
    memory_audit_append_only(),
    memory_scope_guard(),
    memory_entry_fence(),
    memory_policy_immutable()
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    memory_schema_version(),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID)
TO kagent_memory_runtime;

GRANT EXECUTE ON FUNCTION
    memory_schema_version(),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT)
TO kagent_memory_bridge;

GRANT EXECUTE ON FUNCTION
    memory_schema_version(),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_configure(TEXT),
    memory_register_policy(TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER[]),
    memory_allow_policy(TEXT, TEXT, TEXT),
    memory_disallow_policy(TEXT, TEXT, TEXT),
    memory_register_runtime(TEXT, TEXT, TEXT),
    memory_register_verifier(TEXT),
    memory_unregister_login(TEXT),
    memory_disable_principal(TEXT, TEXT),
    memory_purge_principal(TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT),
    memory_sweep(),
    memory_store_report()
TO kagent_memory_operator;

GRANT EXECUTE ON FUNCTION
    memory_grant_mint(BYTEA, TEXT, TEXT, TEXT, TEXT, BYTEA),
    memory_grant_resolve(BYTEA),
    memory_grant_revoke(BYTEA)
TO kagent_memory_grants;

GRANT EXECUTE ON FUNCTION
    memory_schema_version(),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_configure(TEXT),
    memory_sweep(),
    memory_store_report(),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER)
TO kagent_memory_service;

-- B7: row-level security as defence in depth, FORCEd so it binds the owner too.  Rows are
-- visible only to the owning role (current_user is the owner only inside the governed
-- SECURITY DEFINER functions, or for the owner itself, the trust root) -- never to a role that
-- was granted a table by mistake, whatever it sets.  Entries additionally need the scope bound
-- for this transaction (`kagent.memory_scope`, set by the functions after they resolve the
-- typed key), so a query with a wrong or missing WHERE returns nothing of another key.
-- Superusers and BYPASSRLS roles are exempt: no governed login may be one (backups may).
-- The owner is named in the policies as a constant (the role running this migration, which
-- owns every governed object): looking it up per statement cost ~0.1 ms per governed call.
-- After a change of owner or a rename, run these policies again.
DO $$
DECLARE
    owner_is TEXT := format('current_user = %L', current_user);
    bound    TEXT := 'scope_id = nullif(current_setting(''kagent.memory_scope'', true), '''')::uuid';
    t        TEXT;
BEGIN
    ALTER TABLE memory_entry ENABLE ROW LEVEL SECURITY;
    ALTER TABLE memory_entry FORCE ROW LEVEL SECURITY;
    EXECUTE 'DROP POLICY IF EXISTS memory_entry_scope_isolation ON memory_entry';
    EXECUTE format('CREATE POLICY memory_entry_scope_isolation ON memory_entry'
                   ' USING (%s AND %s) WITH CHECK (%s AND %s)', owner_is, bound, owner_is, bound);
    FOREACH t IN ARRAY ARRAY['memory_scope', 'memory_audit', 'memory_config',
                             'memory_principal_block', 'memory_principal_lock',
                             'memory_admission_bucket', 'memory_assertion_use', 'memory_policy',
                             'memory_policy_allowance', 'memory_request', 'memory_runtime_login',
                             'memory_verifier_login', 'memory_runtime_grant'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('DROP POLICY IF EXISTS %I ON %I', t || '_owner_only', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (%s)', t || '_owner_only', t, owner_is);
    END LOOP;
END
$$;

-- ===============================================================================================
-- Rows
-- ===============================================================================================

-- The configuration singleton (the local homeserver is set later, by memory_configure).
INSERT INTO memory_config (singleton) VALUES (true) ON CONFLICT DO NOTHING;

-- The ADR 0023 prototype policy (§41-42), allowed for every agent.  Its dimensions are the
-- common embedders': MiniLM 384, kagent-compatible 768, BGE-M3 1024, OpenAI 1536 and 3072.
INSERT INTO memory_policy (version, max_ttl, entry_cap, fact_max_bytes, consent_max_age,
                           prefetch_max_subqueries, prefetch_subquery_max_bytes,
                           explicit_ops_per_minute, explicit_burst, scope_ops_per_hour,
                           autosave_every_user_turns, summariser_input_max_bytes,
                           summariser_max_facts, search_limit, embedding_dimensions)
VALUES ('adr0023-prototype-1', INTERVAL '7 days', 100, 512, INTERVAL '90 days', 8, 512, 6, 3, 60,
        5, 16384, 10, 5, ARRAY[384, 768, 1024, 1536, 3072])
ON CONFLICT (version) DO NOTHING;

INSERT INTO memory_policy_allowance (policy_version, agent_namespace, agent_name)
SELECT 'adr0023-prototype-1', NULL, NULL
 WHERE NOT EXISTS (SELECT FROM memory_policy_allowance
                    WHERE policy_version = 'adr0023-prototype-1' AND agent_namespace IS NULL);
