-- Runtime grants (kagent main).  On main a runtime's ServiceAccount token does not identify a
-- request: every pod of the namespace under that account can present it, it is not projected
-- with an audience, and the A2A proxy forwards a caller's own Authorization header to the agent,
-- which can replay it.  So when the controller's A2A transport forwards a request that carries a
-- bridge-signed scope assertion, it mints a random, opaque grant for that one request and sends
-- it to the agent (x-kagent-memory-grant); the controller's gRPC interceptor resolves the grant
-- a runtime presents on its governed calls; the transport revokes it when the response body
-- closes.  The database stores only the grant's SHA-256, bound to the agent (namespace, name,
-- SandboxAgent UID), the actor id and the SHA-256 of the scope assertion it was minted for.
--
-- 1. A fourth NOLOGIN role, kagent_memory_grants, held by the controller's login (its transport
--    mints, its interceptor resolves).  It may EXECUTE only the three entry points below: no
--    memory_* function, no table.  No other role may call them.
-- 2. memory_runtime_grant: only the owner has a privilege on it (row level security, owner only).
-- 3. memory_grant_mint(hash, namespace, name, uid, actor, assertion_hash) stores a grant that
--    expires 10 minutes after the statement: the caller cannot choose or extend the lifetime,
--    and a hash already stored (live, expired or revoked) is refused (KGG01 grant_exists), so a
--    revoked grant never comes back.  A hash or assertion hash that is not exactly 32 bytes, a
--    NULL, an empty or oversized name, a UID that is not a UUID: 22023.  Each mint also deletes
--    grants expired for more than a day (the day keeps a late duplicate refused), so the table
--    stays small without a sweeper.
--    memory_grant_resolve(hash) answers the binding (one row) only while the grant is unexpired
--    and unrevoked, otherwise no row; one statement.  memory_grant_revoke(hash) is idempotent and
--    answers whether a live grant was revoked.  Times are statement_timestamp(), never the
--    transaction's start, and memory_guard() refuses a transaction that is not read committed or
--    started more than 5 seconds before the statement (KGX01): an old transaction cannot resolve
--    a grant as of its start.
--
-- New SQLSTATE: KGG01 grant_exists.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DO $$
DECLARE
    r TEXT := 'kagent_memory_grants';
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                        WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
            RAISE EXCEPTION 'role % is missing and the migrating role may not create roles', r
                USING ERRCODE = 'KGR03',
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
END
$$;

-- 2. Grants --------------------------------------------------------------------------------------

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

REVOKE ALL ON memory_runtime_grant FROM PUBLIC, kagent_memory_service, kagent_memory_runtime,
    kagent_memory_bridge, kagent_memory_operator, kagent_memory_grants;
DO $$
BEGIN  -- the owner as a constant, as in 000004
    ALTER TABLE memory_runtime_grant ENABLE ROW LEVEL SECURITY;
    ALTER TABLE memory_runtime_grant FORCE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS memory_runtime_grant_owner_only ON memory_runtime_grant;
    EXECUTE format('CREATE POLICY memory_runtime_grant_owner_only ON memory_runtime_grant'
                   ' USING (current_user = %L)', current_user);
END
$$;

-- 3. Entry points --------------------------------------------------------------------------------

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

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 15 $$;

REVOKE ALL ON FUNCTION
    memory_grant_mint(BYTEA, TEXT, TEXT, TEXT, TEXT, BYTEA),
    memory_grant_resolve(BYTEA),
    memory_grant_revoke(BYTEA)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    memory_grant_mint(BYTEA, TEXT, TEXT, TEXT, TEXT, BYTEA),
    memory_grant_resolve(BYTEA),
    memory_grant_revoke(BYTEA)
TO kagent_memory_grants;
