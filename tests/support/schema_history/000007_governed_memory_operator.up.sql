-- Operator evidence and housekeeping (SPEC L3, U5): content-free aggregates over every scope,
-- the store invariants `verify` checks, and the sweep.  Entries are counted scope by scope
-- through the same row-level security binding as every other read; no statement here returns
-- content or identities (scope ids are random UUIDs).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

-- The governed schema's version, readable by the service role (which cannot read any
-- migration bookkeeping table).  Every later migration replaces it.
CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 7 $$;

-- expired_overdue counts rows expired more than 24 hours ago and still stored (ADR decision
-- 27: physical deletion within 24 hours); overdue_scope_ids names up to 100 such scopes.
DROP FUNCTION IF EXISTS memory_store_report();
CREATE OR REPLACE FUNCTION memory_store_report()
RETURNS TABLE (scopes BIGINT, scopes_enabled BIGINT, scopes_failed BIGINT,
               entries_live BIGINT, entries_expired BIGINT, expired_readable BIGINT,
               stale_generation BIGINT, ttl_exceeded BIGINT, over_cap_scopes BIGINT,
               rows_in_disabled_scopes BIGINT, expired_overdue BIGINT,
               overdue_scope_ids UUID[], violating_scope_ids UUID[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    s        memory_scope%ROWTYPE;
    live     BIGINT;
    expired  BIGINT;
    overdue  BIGINT;
    readable BIGINT;
    stale    BIGINT;
    too_long BIGINT;
BEGIN
    PERFORM memory_guard();
    scopes := 0; scopes_enabled := 0; scopes_failed := 0; entries_live := 0;
    entries_expired := 0; expired_readable := 0; stale_generation := 0; ttl_exceeded := 0;
    over_cap_scopes := 0; rows_in_disabled_scopes := 0; expired_overdue := 0;
    overdue_scope_ids := ARRAY[]::UUID[];
    -- the scopes (random ids, at most 100) behind every other invariant verify checks
    violating_scope_ids := ARRAY[]::UUID[];
    FOR s IN SELECT * FROM memory_scope ORDER BY id LOOP
        PERFORM memory_bind_scope(s.id);
        SELECT count(*) FILTER (WHERE e.expires_at > now()),
               count(*) FILTER (WHERE e.expires_at <= now()),
               count(*) FILTER (WHERE e.expires_at <= now() - INTERVAL '24 hours'),
               count(*) FILTER (WHERE e.generation <> s.generation),
               count(*) FILTER (WHERE e.expires_at > e.created_at + s.max_ttl)
          INTO live, expired, overdue, stale, too_long
          FROM memory_entry e WHERE e.scope_id = s.id;
        SELECT count(*) INTO readable FROM memory_readable(s.id) r WHERE r.expires_at <= now();
        scopes := scopes + 1;
        IF s.enabled AND s.consent_expires_at > now() THEN
            scopes_enabled := scopes_enabled + 1;
        END IF;
        IF NOT s.enabled THEN  -- withdrawn or offboarded: only an unfinished erasure leaves rows
            rows_in_disabled_scopes := rows_in_disabled_scopes + live + expired;
        END IF;
        IF s.failure_reason IS NOT NULL THEN
            scopes_failed := scopes_failed + 1;
        END IF;
        IF live > s.entry_cap THEN
            over_cap_scopes := over_cap_scopes + 1;
        END IF;
        IF overdue > 0 AND cardinality(overdue_scope_ids) < 100 THEN
            overdue_scope_ids := overdue_scope_ids || s.id;
        END IF;
        IF (readable > 0 OR stale > 0 OR too_long > 0 OR live > s.entry_cap
            OR (NOT s.enabled AND live + expired > 0) OR s.failure_reason IS NOT NULL)
           AND cardinality(violating_scope_ids) < 100 THEN
            violating_scope_ids := violating_scope_ids || s.id;
        END IF;
        entries_live := entries_live + live;
        entries_expired := entries_expired + expired;
        expired_overdue := expired_overdue + overdue;
        expired_readable := expired_readable + readable;
        stale_generation := stale_generation + stale;
        ttl_exceeded := ttl_exceeded + too_long;
    END LOOP;
    PERFORM memory_bind_scope(NULL);
    RETURN NEXT;
END
$$;

-- L3: physical deletion of expired rows, scope by scope through the same row-level security
-- binding (no bypass policy exists); then audit rows past their 400-day retention (000004) and
-- admission buckets idle for a day (full again by then, so dropping one changes no decision).
-- One sweep at a time across replicas: a second concurrent call returns 0 at once.  Idempotent.
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

REVOKE ALL ON FUNCTION memory_store_report(), memory_sweep(), memory_schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memory_store_report(), memory_sweep(), memory_schema_version()
    TO kagent_memory_service;
