-- Reverts 000011: the bound entry points are dropped, memory_redeem_assertion records only the
-- `jti` again (its 000008 definition) and the redemption columns go.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DROP FUNCTION IF EXISTS memory_save_bound(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]);
DROP FUNCTION IF EXISTS memory_search_bound(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER);
DROP FUNCTION IF EXISTS memory_search_many_bound(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER);
DROP FUNCTION IF EXISTS memory_admit_bound(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
    DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_forget_bound(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID);
DROP FUNCTION IF EXISTS memory_redeemed_generation(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT);

CREATE OR REPLACE FUNCTION memory_redeem_assertion(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$' THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    INSERT INTO memory_assertion_use (jti, forget_at)
    VALUES (p_jti, p_expires_at + INTERVAL '1 minute')
    ON CONFLICT (jti) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'assertion_replayed' USING ERRCODE = 'KGJ01';
    END IF;
    DELETE FROM memory_assertion_use
     WHERE jti IN (SELECT u.jti FROM memory_assertion_use u
                    WHERE u.forget_at < now()
                    ORDER BY u.forget_at LIMIT 16 FOR UPDATE SKIP LOCKED);
    RETURN memory_generation(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                             p_policy_version, p_classification, p_output_audience);
END
$$;

ALTER TABLE memory_assertion_use
    DROP COLUMN IF EXISTS scope_id,
    DROP COLUMN IF EXISTS generation,
    DROP COLUMN IF EXISTS classification,
    DROP COLUMN IF EXISTS output_audience,
    DROP COLUMN IF EXISTS work_until;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 10 $$;
