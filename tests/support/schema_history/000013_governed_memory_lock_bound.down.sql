-- Reverts 000013: the erasure-side entry points get their unbounded bodies back (000005,
-- 000008) and the two internal helpers go.  memory_schema_version() answers 12.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

-- memory_disable: as in 000005
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

-- memory_disable_principal: as in 000005
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

-- memory_clear: as in 000005
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

-- memory_verify_erasure: as in 000005
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

-- memory_purge_principal: as in 000005
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

-- memory_sweep: as in 000008
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

ALTER FUNCTION memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT)
    RESET lock_timeout;
DROP FUNCTION IF EXISTS memory_end_blockers(TEXT[]);
DROP FUNCTION IF EXISTS memory_lock_holders();

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 12 $$;
