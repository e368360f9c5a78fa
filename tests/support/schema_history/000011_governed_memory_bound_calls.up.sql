-- Every runtime call bound to its redemption (kagent mode).  The controller redeems a request's
-- scope assertion once, at /generation (memory_redeem_assertion, 000008): that checks the
-- assertion's classification and output audience against the consent and captures the
-- generation.  Before this migration the later calls of the request (/admit, /entries,
-- /search, /forget) were fenced by the generation the caller sent, so an assertion redeemed
-- for one scope could be sent again with a guessed generation and read or write the scope
-- whatever its classification.  Now the redemption row records what was admitted -- the scope
-- id, the generation captured, the classification and output audience -- and `work_until`,
-- the assertion's `exp` plus a fixed allowance of 120 seconds for the request's background
-- work (an auto-save summarising after the reply).  The bound entry points (memory_*_bound)
-- take the request's `jti` and serve only that redemption, checked here, in the operation's
-- own transaction, before the fence:
--   KGJ03 request_not_redeemed  no redemption of this `jti`, for another scope, past
--         work_until, or a generation other than the one captured -- an answer that depends
--         only on the redemption, never on the scope's current generation;
--   KGC01 consent_required      the redemption captured no generation (no valid consent for
--         the assertion's classification and audience when it was redeemed);
-- then the operation's own fence (KGS01 stale_generation when consent has moved on since).
-- A redemption row lives until work_until (at least one minute past `exp`, which replay
-- protection needs) and is swept after that by memory_sweep (forget_at, 000008).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

-- Rows redeemed before this migration have no work_until: no bound call serves them.
ALTER TABLE memory_assertion_use
    ADD COLUMN IF NOT EXISTS scope_id        UUID,
    ADD COLUMN IF NOT EXISTS generation      BIGINT,
    ADD COLUMN IF NOT EXISTS classification  TEXT,
    ADD COLUMN IF NOT EXISTS output_audience TEXT[],
    ADD COLUMN IF NOT EXISTS work_until      TIMESTAMPTZ;

-- As 000008, and the row records what the redemption admitted.  The allowance (120 s past
-- `exp`) is this function's constant: work_until = exp + 120 s, and the row is forgotten then.
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

-- The generation a bound call may use: the one its redemption captured (see the top).
-- p_generation NULL (forget, which sends none) accepts the captured one, NULL included.
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

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 11 $$;

REVOKE ALL ON FUNCTION
    memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[],
                       DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[],
                       DOUBLE PRECISION[], TIMESTAMPTZ),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID)
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[],
                       DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[],
                       DOUBLE PRECISION[], TIMESTAMPTZ),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID)
TO kagent_memory_service;
