-- Operator evidence (SPEC L3, U5): content-free aggregates over every scope, and the store
-- invariants `verify` checks.  Entries are counted scope by scope through the same row-level
-- security binding as every other read; no statement here returns content or identities.

CREATE OR REPLACE FUNCTION memory_store_report()
RETURNS TABLE (scopes BIGINT, scopes_enabled BIGINT, scopes_failed BIGINT,
               entries_live BIGINT, entries_expired BIGINT, expired_readable BIGINT,
               stale_generation BIGINT, ttl_exceeded BIGINT, over_cap_scopes BIGINT,
               rows_in_disabled_scopes BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s        memory_scope%ROWTYPE;
    live     BIGINT;
    expired  BIGINT;
    readable BIGINT;
    stale    BIGINT;
    too_long BIGINT;
BEGIN
    scopes := 0; scopes_enabled := 0; scopes_failed := 0; entries_live := 0;
    entries_expired := 0; expired_readable := 0; stale_generation := 0; ttl_exceeded := 0;
    over_cap_scopes := 0; rows_in_disabled_scopes := 0;
    FOR s IN SELECT * FROM memory_scope ORDER BY id LOOP
        PERFORM memory_bind_scope(s.id);
        SELECT count(*) FILTER (WHERE e.expires_at > now()),
               count(*) FILTER (WHERE e.expires_at <= now()),
               count(*) FILTER (WHERE e.generation <> s.generation),
               count(*) FILTER (WHERE e.expires_at > e.created_at + s.max_ttl)
          INTO live, expired, stale, too_long
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
        entries_live := entries_live + live;
        entries_expired := entries_expired + expired;
        expired_readable := expired_readable + readable;
        stale_generation := stale_generation + stale;
        ttl_exceeded := ttl_exceeded + too_long;
    END LOOP;
    PERFORM memory_bind_scope(NULL);
    RETURN NEXT;
END
$$;
