-- Reverts 000016 to the version-15 schema exactly, where version 15 can hold the data: the
-- issuer registry goes (its rows are configuration: register them again after the next
-- upgrade), every key loses its issuer kind and scope_ref is room_id again, and the version-15
-- definitions of every changed function come back.  Refused (KGR05), with nothing changed, while
-- a scope or an offboarding block names a principal version 15 cannot hold: another issuer kind
-- than 'matrix' (e.g. an OIDC principal) or another issuer than the recorded local homeserver.
-- Offboard such principals first (memory_disable_principal, then memory_purge_principal) and
-- lift their blocks (memory_unblock_principal).  Requests recorded for such principals live a
-- minute and are dropped; lock rows hold no state and are dropped.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DO $$
BEGIN
    IF EXISTS (SELECT FROM memory_scope s
                WHERE s.principal_issuer_kind <> 'matrix'
                   OR s.principal_issuer IS DISTINCT FROM
                      (SELECT c.local_server FROM memory_config c))
       OR EXISTS (SELECT FROM memory_principal_block b
                   WHERE b.principal_issuer_kind <> 'matrix'
                      OR b.principal_issuer IS DISTINCT FROM
                         (SELECT c.local_server FROM memory_config c)) THEN
        RAISE EXCEPTION 'governed rows name principals version 15 cannot hold'
            USING ERRCODE = 'KGR05',
                  HINT = 'offboard every principal that is not a Matrix user of the local'
                         ' homeserver (memory_disable_principal, memory_purge_principal) and'
                         ' lift its block (memory_unblock_principal), then migrate down again';
    END IF;
END
$$;

-- The functions version 15 does not have (the generic signatures, the registry's, the helpers
-- of the 7-column key and the Matrix wrappers' helper).
DROP FUNCTION IF EXISTS memory_register_issuer(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_disable_issuer(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_get_issuer(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN);
DROP FUNCTION IF EXISTS memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]);
DROP FUNCTION IF EXISTS memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER);
DROP FUNCTION IF EXISTS memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER);
DROP FUNCTION IF EXISTS memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID);
DROP FUNCTION IF EXISTS memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER);
DROP FUNCTION IF EXISTS memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID);
DROP FUNCTION IF EXISTS memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN);
DROP FUNCTION IF EXISTS memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN);
DROP FUNCTION IF EXISTS memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_disable_principal(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_purge_principal(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_unblock_principal(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]);
DROP FUNCTION IF EXISTS memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER);
DROP FUNCTION IF EXISTS memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER);
DROP FUNCTION IF EXISTS memory_matrix_issuer(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_principal_lock(TEXT, TEXT, BYTEA, BOOLEAN);
DROP FUNCTION IF EXISTS memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT);

DROP TABLE IF EXISTS memory_issuer;

-- Recorded requests: back to version 15's key.
DELETE FROM memory_request
 WHERE principal_issuer_kind <> 'matrix'
    OR principal_issuer IS DISTINCT FROM (SELECT c.local_server FROM memory_config c);

UPDATE memory_request SET principal_issuer = principal_issuer_kind;

ALTER TABLE memory_request DROP COLUMN IF EXISTS principal_issuer_kind;

ALTER TABLE memory_request RENAME COLUMN scope_ref TO room_id;

-- The scope key and version 15's constraints (the guard trigger is off for the re-keying
-- statement, as in the upgrade).
ALTER TABLE memory_scope
    DROP CONSTRAINT IF EXISTS memory_scope_key,
    DROP CONSTRAINT IF EXISTS memory_scope_principal_shape,
    DROP CONSTRAINT IF EXISTS memory_scope_ref_shape;

ALTER TABLE memory_scope DISABLE TRIGGER memory_scope_guard;

UPDATE memory_scope SET principal_issuer = principal_issuer_kind;

ALTER TABLE memory_scope ENABLE TRIGGER memory_scope_guard;

DROP INDEX IF EXISTS idx_memory_scope_principal;

ALTER TABLE memory_scope DROP COLUMN IF EXISTS principal_issuer_kind;

ALTER TABLE memory_scope RENAME COLUMN scope_ref TO room_id;

ALTER TABLE memory_scope
    ADD CONSTRAINT memory_scope_key UNIQUE
        (principal_issuer, principal_subject, agent_namespace, agent_name, scope_kind, room_id),
    ADD CONSTRAINT memory_scope_issuer_v1 CHECK (principal_issuer = 'matrix'),
    ADD CONSTRAINT memory_scope_kind_v1 CHECK (scope_kind = 'control_room'),
    ADD CONSTRAINT memory_scope_subject_shape CHECK (
        octet_length(principal_subject) <= 255
        AND (principal_issuer <> 'matrix'
             OR principal_subject ~ '^@[!-9;-~]+:[A-Za-z0-9.:\[\]-]+$')),
    ADD CONSTRAINT memory_scope_room_shape CHECK (
        octet_length(room_id) <= 255
        AND room_id ~ '^![!-9;-~]+(:[A-Za-z0-9.:\[\]-]+)?$');

CREATE INDEX IF NOT EXISTS idx_memory_scope_principal
    ON memory_scope (principal_issuer, principal_subject);

-- Blocks keep their opaque reference, which is version 15's; lock rows are dropped.
ALTER TABLE memory_principal_block
    DROP CONSTRAINT IF EXISTS memory_principal_block_pkey,
    DROP COLUMN IF EXISTS principal_issuer_kind,
    DROP COLUMN IF EXISTS principal_issuer;

ALTER TABLE memory_principal_block ADD PRIMARY KEY (principal_ref);

DELETE FROM memory_principal_lock;

ALTER TABLE memory_principal_lock
    DROP CONSTRAINT IF EXISTS memory_principal_lock_pkey,
    DROP COLUMN IF EXISTS principal_issuer_kind,
    DROP COLUMN IF EXISTS principal_issuer;

ALTER TABLE memory_principal_lock ADD PRIMARY KEY (principal_ref);

-- Version 15's definitions, verbatim (000015_governed_memory_baseline.up.sql), of every
-- function 000016 changed, and its privileges for the helpers dropped above.
CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 15 $$;

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

REVOKE ALL ON FUNCTION
    memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_principal_lock(BYTEA, BOOLEAN),
    memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT)
FROM PUBLIC;
