-- Governed user-agent memory (ADR 0023): scope/consent records, memory entries, content-free audit.
--
-- Placement: NEW TABLES BESIDE upstream's `memory` table (vector track 000001-000003), not an
-- extension of it.  Why:
--   * Old readers must not see governed rows.  Upstream's SearchAgentMemory/ListAgentMemories
--     never filter `expires_at`, and PruneExpiredMemories extends popular expired rows by 15 days.
--     Any governed row placed in `memory` would be readable past expiry, and without consent or
--     generation, by a controller one minor version back (the supported rollback window).
--   * The governed invariants need NOT NULL/CHECK constraints and triggers that old writers
--     (InsertMemory with a NULL generation, TTL from the controller's clock) would violate:
--     adding them to a shipped table is the "unsafe constraint" the migration policy forbids.
--   * Expand, don't break: `memory` is left byte-for-byte alone; its rows keep working for old
--     code until an operator migrates or drops them (contract step, a later release).
-- Files follow golang-migrate (`NNNNNN_name.{up,down}.sql`), `IF [NOT] EXISTS` everywhere and no
-- schema-qualified names, so the same files drop into go/core/pkg/migrations/vector/ and into
-- any schema.  PostgreSQL 14 or later (`CREATE OR REPLACE TRIGGER`).
--
-- Roles (docs/database-roles.md): the role that runs these files OWNS every object and is the
-- trust root; no application may connect as it.  Applications connect as a login role that is a
-- member of the NOLOGIN role `kagent_memory_service`, which holds EXECUTE on the governed entry
-- points (000005-000007) and no privilege on any table, sequence or internal helper.
--
-- SQLSTATE class "KG" is ours: KGC01 consent_required, KGC02 consent_conflict, KGC03
-- erasure_pending, KGC04 consent_policy_changed, KGS01 stale_generation, KGE01
-- entry_cap_reached, KGF01 fact_too_large, KGT01 ttl_exceeds_policy, KGI01 immutable_entry,
-- KGD01 scope_denied, KGD02 remote_server_denied, KGD03 principal_offboarded, KGA01
-- audit_append_only, KGR01 service role missing (a setup error, raised by this file).
-- Messages are reason codes only; no statement here formats a value into an error.

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

-- The service role (cluster-wide, shared by every database that holds this schema).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kagent_memory_service') THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                        WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
            RAISE EXCEPTION 'role kagent_memory_service is missing and the migrating role may not create roles'
                USING ERRCODE = 'KGR01',
                      HINT = 'have an administrator run: CREATE ROLE kagent_memory_service NOLOGIN';
        END IF;
        BEGIN
            CREATE ROLE kagent_memory_service NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created concurrently by another database's migration
        END;
    END IF;
END
$$;

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
INSERT INTO memory_config (singleton) VALUES (true) ON CONFLICT DO NOTHING;

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

-- B3: a stored row is immutable, also for the table owner (triggers are not bypassed by
-- ownership).  Only session_replication_role = replica (superuser) skips this.
CREATE OR REPLACE FUNCTION memory_entry_refuse_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    RAISE EXCEPTION 'immutable_entry' USING ERRCODE = 'KGI01';
END
$$;

CREATE OR REPLACE TRIGGER memory_entry_immutable
    BEFORE UPDATE ON memory_entry
    FOR EACH ROW EXECUTE FUNCTION memory_entry_refuse_update();

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

DROP TRIGGER IF EXISTS memory_audit_append_only ON memory_audit;
DROP FUNCTION IF EXISTS memory_audit_refuse_update();
CREATE OR REPLACE TRIGGER memory_audit_append_only
    BEFORE UPDATE OR DELETE ON memory_audit
    FOR EACH ROW EXECUTE FUNCTION memory_audit_append_only();
CREATE OR REPLACE TRIGGER memory_audit_no_truncate
    BEFORE TRUNCATE ON memory_audit
    FOR EACH STATEMENT EXECUTE FUNCTION memory_audit_append_only();

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

CREATE OR REPLACE TRIGGER memory_scope_guard
    BEFORE UPDATE ON memory_scope
    FOR EACH ROW EXECUTE FUNCTION memory_scope_guard();

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

CREATE OR REPLACE TRIGGER memory_entry_fence
    BEFORE INSERT ON memory_entry
    FOR EACH ROW EXECUTE FUNCTION memory_entry_fence();

-- Privileges: nobody but the owner touches a table.  The service role gets EXECUTE on the
-- entry points only (000005-000007); PUBLIC gets nothing, trigger functions included.
REVOKE ALL ON memory_scope, memory_entry, memory_audit, memory_config, memory_principal_block,
    memory_principal_lock FROM PUBLIC, kagent_memory_service;
REVOKE ALL ON SEQUENCE memory_audit_id_seq FROM PUBLIC, kagent_memory_service;
REVOKE ALL ON FUNCTION memory_entry_refuse_update(), memory_audit_append_only(),
    memory_scope_guard(), memory_entry_fence() FROM PUBLIC;

-- B7: row-level security as defence in depth, FORCEd so it binds the owner too.  Rows are
-- visible only to the owning role (current_user is the owner only inside the governed
-- SECURITY DEFINER functions, or for the owner itself, the trust root) -- never to a role that
-- was granted a table by mistake, whatever it sets.  Entries additionally need the scope bound
-- for this transaction (`kagent.memory_scope`, set by the functions after they resolve the
-- typed key), so a query with a wrong or missing WHERE returns nothing of another key.
-- Superusers and BYPASSRLS roles are exempt: the service must not be one (backups may).
ALTER TABLE memory_entry ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_entry FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_scope ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_scope FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_audit FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_config ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_config FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_principal_block ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_principal_block FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_principal_lock ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_principal_lock FORCE ROW LEVEL SECURITY;

-- The owner is named in the policies as a constant (the role running this migration, which
-- owns every governed object): looking it up per statement cost ~0.1 ms per governed call.
-- After a change of owner or a rename, run this migration's policies again.
DO $$
DECLARE
    owner_is TEXT := format('current_user = %L', current_user);
    bound    TEXT := 'scope_id = nullif(current_setting(''kagent.memory_scope'', true), '''')::uuid';
    t        TEXT;
BEGIN
    EXECUTE 'DROP POLICY IF EXISTS memory_entry_scope_isolation ON memory_entry';
    EXECUTE format('CREATE POLICY memory_entry_scope_isolation ON memory_entry'
                   ' USING (%s AND %s) WITH CHECK (%s AND %s)', owner_is, bound, owner_is, bound);
    FOREACH t IN ARRAY ARRAY['memory_scope', 'memory_audit', 'memory_config',
                             'memory_principal_block', 'memory_principal_lock'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS %I ON %I', t || '_owner_only', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (%s)', t || '_owner_only', t, owner_is);
    END LOOP;
END
$$;
