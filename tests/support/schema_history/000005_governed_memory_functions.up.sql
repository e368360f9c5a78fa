-- Governed memory operations as functions: one statement = one transaction = one round trip,
-- the same rules for every client (this library, the Go controller), and the fence checked in
-- the same transaction as the read or write (C3).  Every function takes the typed scope key
-- (S4) as six columns; none trusts a caller-supplied scope id.
--
-- Clock: every check uses now(), the start of the calling transaction.  Each function is called
-- as its own single-statement transaction, so that is the start of the operation.
--
-- Privileges: the ENTRY POINTS are `SECURITY DEFINER SET search_path FROM CURRENT` and
-- executable by `kagent_memory_service` only; the internal helpers are executable by nobody but
-- the owner and run with the entry point's fixed search_path.  The path is this schema, then
-- pgvector's, then pg_temp (see 000004): nothing a caller creates can shadow what they use.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

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

-- An opaque reference to a principal: salted, so the block table holds no MXID and no hash a
-- dictionary of MXIDs could reverse without the salt.
CREATE OR REPLACE FUNCTION memory_principal_ref(p_issuer TEXT, p_subject TEXT) RETURNS BYTEA
LANGUAGE sql STABLE AS $$
    SELECT sha256(c.principal_salt || convert_to(p_issuer, 'UTF8') || '\x00'::bytea
                  || convert_to(p_subject, 'UTF8'))
      FROM memory_config c
$$;

CREATE OR REPLACE FUNCTION memory_audit_write(
    p_scope UUID, p_operation TEXT, p_outcome TEXT, p_generation BIGINT, p_count BIGINT)
RETURNS void
LANGUAGE sql VOLATILE AS $$
    INSERT INTO memory_audit (scope_id, operation, outcome, generation, count)
    VALUES (p_scope, p_operation, p_outcome, p_generation, p_count)
$$;

-- C1: explicit, purpose-specific, versioned consent.  Same purpose + version on a valid consent
-- renews it (same generation); anything else needs a withdrawal first.  Enabling always
-- advances the generation, so work admitted under an earlier consent can never resume, and
-- starts from an empty scope.
CREATE OR REPLACE FUNCTION memory_grant(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_purpose TEXT, p_policy_version TEXT, p_max_ttl INTERVAL, p_entry_cap INTEGER,
    p_fact_max_bytes INTEGER, p_consent_max_age INTERVAL, p_embedding_dimension INTEGER,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS TABLE (scope_id UUID, generation BIGINT, granted_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
    server TEXT;
BEGIN
    PERFORM memory_guard();
    IF p_kind IS DISTINCT FROM 'control_room' OR p_issuer IS DISTINCT FROM 'matrix' THEN
        RAISE EXCEPTION 'scope_denied' USING ERRCODE = 'KGD01';
    END IF;
    IF p_consent_max_age IS NULL OR p_consent_max_age <= INTERVAL '0'
       OR p_consent_max_age > INTERVAL '3650 days' THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    p_output_audience := ARRAY(SELECT DISTINCT a FROM unnest(p_output_audience) a ORDER BY 1);
    -- S5: only principals (and rooms) of the local homeserver, stored once in memory_config.
    -- Unconfigured means nobody: fail closed.
    SELECT c.local_server INTO server FROM memory_config c;
    IF server IS NULL
       OR substr(p_subject, strpos(p_subject, ':') + 1) IS DISTINCT FROM server
       OR (strpos(p_room, ':') > 0 AND substr(p_room, strpos(p_room, ':') + 1) IS DISTINCT FROM server)
       -- and memory is never used where replies reach another homeserver (S5)
       OR p_output_audience IS DISTINCT FROM ARRAY[server]
    THEN
        RAISE EXCEPTION 'remote_server_denied' USING ERRCODE = 'KGD02';
    END IF;
    -- L2: shared with the offboarding's exclusive lock, so a grant either commits before the
    -- offboarding looks for scopes, or sees its block and is refused.
    PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), false);
    IF EXISTS (SELECT FROM memory_principal_block b
                WHERE b.principal_ref = memory_principal_ref(p_issuer, p_subject)) THEN
        RAISE EXCEPTION 'principal_offboarded' USING ERRCODE = 'KGD03';
    END IF;
    INSERT INTO memory_scope (principal_issuer, principal_subject, agent_namespace, agent_name,
                              scope_kind, room_id, max_ttl, entry_cap, fact_max_bytes)
    VALUES (p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
            p_max_ttl, p_entry_cap, p_fact_max_bytes)
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
        UPDATE memory_scope SET consent_expires_at = now() + p_consent_max_age
         WHERE id = s.id
        RETURNING * INTO s;
        PERFORM memory_audit_write(s.id, 'grant', 'renewed', s.generation, NULL);
    ELSE
        -- A new consent starts empty: rows kept from an earlier, expired consent are deleted
        -- in this transaction, so every stored row belongs to the current generation.
        PERFORM memory_bind_scope(s.id);
        DELETE FROM memory_entry WHERE memory_entry.scope_id = s.id;
        UPDATE memory_scope
           SET enabled = true, generation = memory_scope.generation + 1,
               purpose = p_purpose, policy_version = p_policy_version,
               max_ttl = p_max_ttl, entry_cap = p_entry_cap, fact_max_bytes = p_fact_max_bytes,
               embedding_dimension = p_embedding_dimension,
               classification = p_classification, output_audience = p_output_audience,
               consent_granted_at = now(), consent_expires_at = now() + p_consent_max_age
         WHERE id = s.id
        RETURNING * INTO s;
        PERFORM memory_audit_write(s.id, 'grant', 'enabled', s.generation, NULL);
    END IF;
    RETURN QUERY SELECT s.id, s.generation, s.consent_granted_at, s.consent_expires_at;
END
$$;

-- The generation a request captures at admission: NULL unless enabled, unexpired, consented
-- under the caller's policy version, and for the request's classification and output audience
-- (ADR decision 6; each checked when given -- the runtime passes the verified assertion's).
CREATE OR REPLACE FUNCTION memory_generation(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    RETURN (
        SELECT s.generation
          FROM memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room) s
         WHERE s.enabled AND s.consent_expires_at > now() AND s.policy_version = p_policy_version
           AND (p_classification IS NULL OR s.classification = p_classification)
           AND (p_output_audience IS NULL
                OR s.output_audience
                   = ARRAY(SELECT DISTINCT a FROM unnest(p_output_audience) a ORDER BY 1)));
END
$$;

-- Fenced save (C3, B3, B4): all facts or none.  The insert trigger re-checks the fence under
-- the scope row lock, fixes created_at/expires_at and enforces both caps.
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
       OR cardinality(p_contents) IS DISTINCT FROM cardinality(p_embeddings) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO memory_entry (scope_id, content, embedding, generation)
        SELECT s.id, u.content, u.embedding, p_generation
          FROM unnest(p_contents, p_embeddings) WITH ORDINALITY AS u(content, embedding, n)
         ORDER BY u.n
        RETURNING memory_entry.id, memory_entry.created_at, memory_entry.expires_at
    )
    SELECT inserted.id, inserted.created_at, inserted.expires_at FROM inserted;
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

-- U4/C4 step 1 of a withdrawal: disable and advance the generation, marking the erasure as
-- pending until it is verified.  Committed on its own, before any delete.
CREATE OR REPLACE FUNCTION memory_disable(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS TABLE (scope_id UUID, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    UPDATE memory_scope
       SET enabled = false, generation = memory_scope.generation + 1,
           failure_reason = 'erasure_pending', failure_at = now()
     WHERE id = (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id
    RETURNING * INTO s;
    IF s.id IS NOT NULL THEN
        PERFORM memory_audit_write(s.id, 'disable', 'disabled', s.generation, NULL);
        RETURN QUERY SELECT s.id, s.generation;
    END IF;
END
$$;

-- L2 step 1: block the principal's grants and disable every scope of the principal in one
-- transaction, before any clearing.
CREATE OR REPLACE FUNCTION memory_disable_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (scope_id UUID, agent_namespace TEXT, agent_name TEXT, scope_kind TEXT,
               room_id TEXT, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    PERFORM memory_guard();
    -- Block first, under the lock every grant of this principal shares: grants in flight
    -- commit before the UPDATE below takes its snapshot, later ones see the block.
    PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), true);
    INSERT INTO memory_principal_block (principal_ref)
    VALUES (memory_principal_ref(p_issuer, p_subject))
    ON CONFLICT (principal_ref) DO NOTHING;
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

-- Delete every entry of a scope.  p_advance (forget_all) advances the generation in the same
-- transaction, so saves in flight under the old generation are fenced out; a withdrawal has
-- advanced it already in memory_disable.
CREATE OR REPLACE FUNCTION memory_clear(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_advance BOOLEAN)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
    n BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    IF p_advance THEN
        UPDATE memory_scope SET generation = memory_scope.generation + 1
         WHERE id = s.id
        RETURNING * INTO s;
    END IF;
    PERFORM memory_bind_scope(s.id);
    DELETE FROM memory_entry WHERE scope_id = s.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(s.id, 'clear', 'deleted', s.generation, n);
    RETURN QUERY SELECT s.generation, n;
END
$$;

-- B5 read-after-delete verification, in a new transaction after the delete committed.  Counts
-- rows written under a generation older than p_generation (or the one entry) that are still
-- readable through memory_readable or still physically present.  Zero: records the verified
-- erasure (and, for a complete erasure, clears the pending marker).  Otherwise the scope is
-- disabled with failure_reason = verification_failed (C5) and verified_at is NULL.
CREATE OR REPLACE FUNCTION memory_verify_erasure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_entry_id UUID, p_complete BOOLEAN)
RETURNS TABLE (generation BIGINT, verified_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s         memory_scope%ROWTYPE;
    readable  BIGINT;
    remaining BIGINT;
BEGIN
    PERFORM memory_guard();
    IF p_complete AND p_entry_id IS NOT NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    IF s.id IS NULL THEN
        RETURN QUERY SELECT NULL::BIGINT, now();
        RETURN;
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

-- C5: a content-free failure (a reason code) on a scope that stays disabled.
CREATE OR REPLACE FUNCTION memory_record_failure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_reason TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
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

-- L2 last step: once every scope of an offboarded principal is cleared and verified, its scope
-- rows (the only rows that name the principal and its rooms) are deleted.  Scopes with an
-- unverified erasure or rows left are kept, and counted, for the next offboarding run.  Content-
-- free evidence stays in memory_audit, keyed by the scopes' random ids.
CREATE OR REPLACE FUNCTION memory_purge_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (purged BIGINT, kept BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    s    memory_scope%ROWTYPE;
    done BIGINT := 0;
    kept_n BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    IF NOT EXISTS (SELECT FROM memory_principal_block b
                    WHERE b.principal_ref = memory_principal_ref(p_issuer, p_subject)) THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';  -- not being offboarded
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

-- Privileges.  PUBLIC loses the default EXECUTE on every function here; the service role may
-- call the entry points and nothing else.
REVOKE ALL ON FUNCTION
    memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_readable(UUID),
    memory_bind_scope(UUID),
    memory_fence_check(memory_scope, BIGINT, TEXT),
    memory_principal_ref(TEXT, TEXT),
    memory_audit_write(UUID, TEXT, TEXT, BIGINT, BIGINT),
    memory_guard(),
    memory_principal_lock(BYTEA, BOOLEAN),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_disable_principal(TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_configure(TEXT),
    memory_purge_principal(TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT)
FROM PUBLIC;

-- The service role needs USAGE on this schema to reach the functions (PUBLIC has it on
-- `public` by default; a dedicated schema must grant it).
DO $$
BEGIN
    IF NOT has_schema_privilege('kagent_memory_service', current_schema(), 'USAGE') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO kagent_memory_service', current_schema());
    END IF;
END
$$;

GRANT EXECUTE ON FUNCTION
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_configure(TEXT)
TO kagent_memory_service;
-- Offboarding (memory_disable_principal, memory_purge_principal) and lifting a block
-- (memory_unblock_principal) are operator paths: the owner's, not the service role's.  The
-- first returns every key of a principal, which the service role must not learn from an MXID.
