-- Single-use scope assertions (SPEC T1): the bridge signs one JWT per request and its `jti`
-- is accepted once, by any replica, through this ledger.  The runtime (direct mode) or the
-- controller (kagent mode) verifies the signature, then redeems the assertion in the
-- transaction that admits the request to memory (memory_redeem_assertion): the `jti` is
-- inserted and the request's generation captured together, so a token replayed to another
-- request or another replica finds its `jti` taken and gets no memory.  Rows hold only the
-- random `jti` and when it may be forgotten (a minute after `exp`).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

CREATE TABLE IF NOT EXISTS memory_assertion_use (
    jti         TEXT        PRIMARY KEY,
    forget_at   TIMESTAMPTZ NOT NULL,
    CONSTRAINT memory_assertion_use_jti CHECK (jti ~ '^[A-Za-z0-9_-]{16,64}$')
);

CREATE INDEX IF NOT EXISTS idx_memory_assertion_use_forget_at
    ON memory_assertion_use (forget_at);

REVOKE ALL ON memory_assertion_use FROM PUBLIC, kagent_memory_service;
ALTER TABLE memory_assertion_use ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_assertion_use FORCE ROW LEVEL SECURITY;
DO $$
BEGIN  -- the owner as a constant, as in 000004
    EXECUTE 'DROP POLICY IF EXISTS memory_assertion_use_owner_only ON memory_assertion_use';
    EXECUTE format('CREATE POLICY memory_assertion_use_owner_only ON memory_assertion_use'
                   ' USING (current_user = %L)', current_user);
END
$$;

-- Redeem one verified assertion and return the generation the request captures (as
-- memory_generation: NULL without a matching consent).  p_expires_at is the assertion's `exp`.
-- Refused, in this order and with nothing written:
--   KGJ02 an `exp` already past by the database clock (beyond the verifiers' 30 s skew bound)
--         or further ahead than a 60 s lifetime plus that skew (a ledger row must not be
--         pinned for long);
--   KGJ01 a `jti` already redeemed (the replay).
-- The row is kept one minute past `exp`: from 30 s past `exp` on, KGJ02 refuses the token here
-- whatever any verifier's clock says, so a swept row can never be redeemed again.  Each call
-- also forgets up to 16 such rows (the sweep does the rest), which keeps the ledger about as
-- large as the last minute and a half of requests.
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

-- memory_sweep (000007) also forgets redeemed assertions once they can no longer verify.
CREATE OR REPLACE FUNCTION memory_sweep() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    sid   UUID;
    n     BIGINT;
    total BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    -- One sweep at a time: the config row's lock (a row lock, which no caller can hold
    -- outside this function's transaction, unlike an advisory lock).
    PERFORM 1 FROM memory_config WHERE singleton FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
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
    DELETE FROM memory_admission_bucket WHERE updated_at < now() - INTERVAL '1 day';
    DELETE FROM memory_assertion_use WHERE forget_at < now();
    PERFORM memory_audit_write(NULL, 'sweep', 'deleted', NULL, total);
    RETURN total;
END
$$;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 8 $$;

REVOKE ALL ON FUNCTION memory_redeem_assertion(
    TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memory_redeem_assertion(
    TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[])
    TO kagent_memory_service;
