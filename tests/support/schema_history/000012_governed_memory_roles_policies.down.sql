-- Reverts 000012: the caller-chosen limits and the single service role come back (the
-- 000005/000006/000010/000011 definitions), the policy, request and login tables go.  The
-- roles kagent_memory_runtime and kagent_memory_bridge are kept: other databases may use them.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DROP FUNCTION IF EXISTS memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_register_policy(TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER[]);
DROP FUNCTION IF EXISTS memory_get_policy(TEXT);
DROP FUNCTION IF EXISTS memory_allow_policy(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_disallow_policy(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_register_runtime(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_register_verifier(TEXT);
DROP FUNCTION IF EXISTS memory_unregister_login(TEXT);
DROP FUNCTION IF EXISTS memory_check_login(TEXT);
DROP FUNCTION IF EXISTS memory_local_server();

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

CREATE OR REPLACE FUNCTION memory_admit(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT,
    p_buckets TEXT[], p_costs DOUBLE PRECISION[], p_capacities DOUBLE PRECISION[],
    p_refill DOUBLE PRECISION[], p_period_seconds DOUBLE PRECISION[], p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    -- never later than the database clock: a bucket cannot be stamped into the future
    t       TIMESTAMPTZ := least(coalesce(p_now, now()), now());
    n       INTEGER := coalesce(cardinality(p_buckets), 0);
    s       memory_scope%ROWTYPE;
    names   TEXT[] := ARRAY[]::TEXT[];
    b       memory_admission_bucket%ROWTYPE;
    avail   DOUBLE PRECISION[] := ARRAY[]::DOUBLE PRECISION[];
    stamp   TIMESTAMPTZ[] := ARRAY[]::TIMESTAMPTZ[];
    refused INTEGER := 0;
BEGIN
    PERFORM memory_guard();
    IF n = 0 OR n > 8
       OR cardinality(p_costs) IS DISTINCT FROM n OR cardinality(p_capacities) IS DISTINCT FROM n
       OR cardinality(p_refill) IS DISTINCT FROM n
       OR cardinality(p_period_seconds) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    FOR i IN 1..n LOOP
        IF p_costs[i] < 0 OR p_capacities[i] <= 0 OR p_refill[i] < 0
           OR p_period_seconds[i] <= 0 OR p_period_seconds[i] > 86400 THEN
            RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    -- The bucket names are the fenced key's, derived here: a caller names only the kind, so
    -- it can never spend or exhaust another key's budget.
    FOR i IN 1..n LOOP
        IF p_buckets[i] LIKE 'scope:%' THEN
            names := names || ('scope:' || replace(s.id::text, '-', ''));
        ELSIF p_buckets[i] LIKE 'sender:%' THEN
            names := names || ('sender:' || left(encode(sha256(convert_to(
                p_subject || '/' || p_namespace || '/' || p_agent, 'UTF8')), 'hex'), 32));
        ELSE
            RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF (SELECT count(DISTINCT x) FROM unnest(names) x) <> n THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory_admission_bucket (bucket, tokens, updated_at)
    SELECT u.bucket, u.capacity, t FROM unnest(names, p_capacities) AS u(bucket, capacity)
    ON CONFLICT (bucket) DO NOTHING;
    PERFORM 1 FROM memory_admission_bucket WHERE bucket = ANY (names)
     ORDER BY bucket FOR UPDATE;
    FOR i IN 1..n LOOP
        SELECT * INTO b FROM memory_admission_bucket WHERE bucket = names[i];
        avail := avail || least(
            p_capacities[i],
            b.tokens + greatest(0, extract(epoch FROM t - b.updated_at)::DOUBLE PRECISION)
                       * p_refill[i] / p_period_seconds[i]);
        stamp := stamp || greatest(b.updated_at, t);
        IF refused = 0 AND avail[i] + 1e-9 < p_costs[i] THEN
            refused := i;
        END IF;
    END LOOP;
    IF refused = 0 THEN
        FOR i IN 1..n LOOP
            UPDATE memory_admission_bucket
               SET tokens = avail[i] - p_costs[i], updated_at = stamp[i]
             WHERE bucket = names[i];
        END LOOP;
    END IF;
    RETURN refused;
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
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$' THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    g := memory_generation(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                           p_policy_version, p_classification, p_output_audience);
    sid := (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id;
    until := p_expires_at + INTERVAL '120 seconds';
    INSERT INTO memory_assertion_use (jti, forget_at, scope_id, generation, classification,
                                      output_audience, work_until)
    VALUES (p_jti, greatest(p_expires_at + INTERVAL '1 minute', until), sid, g,
            p_classification,
            ARRAY(SELECT DISTINCT a FROM unnest(p_output_audience) a ORDER BY 1), until)
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

CREATE OR REPLACE FUNCTION memory_admit_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT,
    p_buckets TEXT[], p_costs DOUBLE PRECISION[], p_capacities DOUBLE PRECISION[],
    p_refill DOUBLE PRECISION[], p_period_seconds DOUBLE PRECISION[], p_now TIMESTAMPTZ)
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
                        p_generation, p_policy_version, p_buckets, p_costs, p_capacities,
                        p_refill, p_period_seconds, p_now);
END
$$;

DROP FUNCTION IF EXISTS memory_sorted(TEXT[]);
DROP TABLE IF EXISTS memory_policy_allowance;
DROP TABLE IF EXISTS memory_policy;
DROP FUNCTION IF EXISTS memory_policy_immutable();
DROP TABLE IF EXISTS memory_request;
DROP TABLE IF EXISTS memory_runtime_login;
DROP TABLE IF EXISTS memory_verifier_login;
ALTER TABLE memory_assertion_use DROP COLUMN IF EXISTS login;

DROP FUNCTION IF EXISTS memory_schema_version();
CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 11 $$;
REVOKE ALL ON FUNCTION memory_schema_version() FROM PUBLIC;

DO $$
BEGIN
    EXECUTE format('REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA %I FROM kagent_memory_runtime, kagent_memory_bridge',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION memory_configure(TEXT), memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT), memory_sweep(),
    memory_store_report(), memory_schema_version() FROM kagent_memory_operator;
REVOKE ALL ON FUNCTION
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, TEXT, TEXT[]),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
                 DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[],
                       DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[],
                       DOUBLE PRECISION[], TIMESTAMPTZ)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_configure(TEXT),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
                 DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ),
    memory_store_report(), memory_sweep(), memory_schema_version(),
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[],
                       DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[],
                       DOUBLE PRECISION[], TIMESTAMPTZ),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID)
TO kagent_memory_service;
