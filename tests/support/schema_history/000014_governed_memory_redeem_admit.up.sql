-- A request's first call in one round trip (issue 29, kagent mode).  A first turn used to be
-- three controller calls: /generation (memory_redeem_assertion), /admit (memory_admit_bound)
-- and /search.  memory_redeem_admit redeems the request's scope assertion exactly as
-- memory_redeem_assertion (000012) does -- same checks, same reason codes (KGJ01 replayed,
-- KGJ02 expired, KGJ04 not recorded, 22023) -- and, when the redemption captured a
-- generation, admits p_units of work under THAT generation (never a caller's) exactly as
-- memory_admit_bound does, in the same transaction.
--
-- The answer is one row (generation, refused, admit_state):
--   generation   what the redemption captured (NULL: no valid consent; nothing admitted);
--   refused      memory_admit's answer, 0 admitted, 1 the scope's budget, 2 the sender's rate
--                (nothing consumed), NULL when no admission was attempted or it raised;
--   admit_state  the SQLSTATE the admission raised (KGC01, KGS01, KGP01, ...), else NULL.
-- A refused or failed admission leaves the redemption in place, as a separate /admit after
-- /generation did: the request keeps its captured generation (its later calls are bound to
-- it) and simply gets no admitted work from this call.  A failed redemption raises and admits
-- nothing.  Granted to kagent_memory_runtime and, as every runtime entry point is (000012), to
-- the deprecated kagent_memory_service, the union of the runtime and bridge roles: a
-- controller still serving as a service login would otherwise be refused the combined call.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

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

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 14 $$;

REVOKE ALL ON FUNCTION memory_redeem_admit(
    TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memory_redeem_admit(
    TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN)
TO kagent_memory_runtime, kagent_memory_service;
