-- Reverts 000008: the single-use assertion ledger.  memory_sweep and memory_schema_version
-- return to their 000007 definitions.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DROP FUNCTION IF EXISTS memory_redeem_assertion(
    TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);

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
    PERFORM memory_audit_write(NULL, 'sweep', 'deleted', NULL, total);
    RETURN total;
END
$$;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 7 $$;

DROP TABLE IF EXISTS memory_assertion_use;
