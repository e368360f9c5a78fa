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
-- schema-qualified names, so the same files drop into go/core/pkg/migrations/vector/.
--
-- SQLSTATE class "KG" is ours: KGC01 consent_required, KGC02 consent_conflict, KGC03
-- erasure_pending, KGS01 stale_generation, KGE01 entry_cap_reached, KGF01 fact_too_large,
-- KGT01 ttl_exceeds_policy, KGI01 immutable_entry, KGD01 scope_denied.
-- Messages are reason codes only; no statement here formats a value into an error.

CREATE EXTENSION IF NOT EXISTS vector;

-- One row per typed scope key (S4): principal (complete MXID + origin), exact agent, scope.
-- Holds consent, the generation fence and the limits in force.  Never deleted: it is also the
-- durable record of the last verified erasure and of any failure (C5).
CREATE TABLE IF NOT EXISTS memory_scope (
    id                       UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    principal_mxid           TEXT        NOT NULL,
    principal_origin         TEXT        NOT NULL,
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
    last_verified_erasure_at TIMESTAMPTZ,
    failure_reason           TEXT,
    failure_at               TIMESTAMPTZ,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT memory_scope_key UNIQUE
        (principal_mxid, principal_origin, agent_namespace, agent_name, scope_kind, room_id),
    -- S5 / S3: only native local principals in a single-subject control room are storable.
    CONSTRAINT memory_scope_native_only CHECK (principal_origin = 'native_local'),
    CONSTRAINT memory_scope_kind_v1 CHECK (scope_kind = 'control_room'),
    CONSTRAINT memory_scope_mxid_shape CHECK (
        octet_length(principal_mxid) <= 255
        AND principal_mxid ~ '^@[!-9;-~]+:[A-Za-z0-9.:\[\]-]+$'),
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
        AND (failure_reason IS NULL OR failure_reason ~ '^[a-z][a-z0-9_]{0,63}$')),
    CONSTRAINT memory_scope_limits CHECK (
        entry_cap BETWEEN 1 AND 10000
        AND fact_max_bytes BETWEEN 1 AND 8192
        AND max_ttl BETWEEN INTERVAL '1 minute' AND INTERVAL '365 days'),
    CONSTRAINT memory_scope_generation_nonnegative CHECK (generation >= 0),
    CONSTRAINT memory_scope_enabled_has_consent CHECK (
        NOT enabled
        OR (purpose IS NOT NULL AND policy_version IS NOT NULL
            AND consent_expires_at IS NOT NULL AND failure_reason IS NULL))
);

CREATE INDEX IF NOT EXISTS idx_memory_scope_principal
    ON memory_scope (principal_mxid, principal_origin);

-- Memory content.  expires_at is NOT NULL and fixed at insert (B3); reads require
-- expires_at > now() (B2).  No ANN index on purpose: a scope holds at most entry_cap live rows,
-- so the exact (scope_id, expires_at) index scan + sort is both exact and fast, while a global
-- HNSW index lets the planner post-filter and return fewer than k rows (upstream's defect).
CREATE TABLE IF NOT EXISTS memory_entry (
    id          UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    UUID        NOT NULL REFERENCES memory_scope (id),
    content     TEXT        NOT NULL,
    embedding   vector(768) NOT NULL,
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
-- No free-text column exists, so no code path can put content here.
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

-- B3: a stored row is immutable, also for the table owner (triggers are not bypassed by
-- ownership).  Only session_replication_role = replica (superuser) skips this.
CREATE OR REPLACE FUNCTION memory_entry_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'immutable_entry' USING ERRCODE = 'KGI01';
END
$$;

CREATE OR REPLACE TRIGGER memory_entry_immutable
    BEFORE UPDATE ON memory_entry
    FOR EACH ROW EXECUTE FUNCTION memory_entry_refuse_update();

CREATE OR REPLACE FUNCTION memory_audit_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'immutable_entry' USING ERRCODE = 'KGI01';
END
$$;

CREATE OR REPLACE TRIGGER memory_audit_append_only
    BEFORE UPDATE ON memory_audit
    FOR EACH ROW EXECUTE FUNCTION memory_audit_refuse_update();

-- C3: the generation only ever increases and a scope's key never changes.
CREATE OR REPLACE FUNCTION memory_scope_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.generation < OLD.generation
       OR NEW.principal_mxid IS DISTINCT FROM OLD.principal_mxid
       OR NEW.principal_origin IS DISTINCT FROM OLD.principal_origin
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
-- VOLATILE), so two racing saves cannot both take the last slot.
CREATE OR REPLACE FUNCTION memory_entry_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
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

-- B7: defence in depth.  A connection sees and writes only the entries of the scope named by
-- the transaction-local setting `kagent.memory_scope` (set by the governed functions after
-- they resolve the typed key), so a query with a wrong or missing WHERE returns nothing of
-- another key.  FORCE applies it to the table owner too; superusers and BYPASSRLS roles are
-- exempt, so the service must not run as one.
ALTER TABLE memory_entry ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_entry FORCE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS memory_entry_scope_isolation ON memory_entry;
CREATE POLICY memory_entry_scope_isolation ON memory_entry
    USING (scope_id = nullif(current_setting('kagent.memory_scope', true), '')::uuid)
    WITH CHECK (scope_id = nullif(current_setting('kagent.memory_scope', true), '')::uuid);
