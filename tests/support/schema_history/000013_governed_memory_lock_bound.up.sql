-- No caller can hold a withdrawal hostage (issue 25 item 5).  Every erasure-side entry point
-- -- memory_disable, memory_clear, memory_verify_erasure, memory_disable_principal,
-- memory_purge_principal and memory_sweep -- finishes within a bound whatever another session
-- of a governed login (a member of kagent_memory_service, kagent_memory_runtime or
-- kagent_memory_bridge) does: an open transaction after a governed call, `pg_sleep` inside
-- the same statement, its own statement_timeout / idle_in_transaction_session_timeout /
-- transaction_timeout / lock_timeout set to 0.
--
-- How: each function first takes every row lock its body needs (the "lock prelude") with a
-- function-level `lock_timeout` of 1 s.  On lock_not_available (55P03) it records the
-- governed-login backends holding a lock on a governed table (pg_locks: pid and virtual
-- transaction), waits once more (1 s), and on a second timeout ends (pg_terminate_backend) the
-- backends of that list still in the SAME transaction -- each has held a governed lock for
-- more than the 1 s bound -- and tries a third and last time (1 s).  Never ended: this backend,
-- the owner (and any login that has the owner's privileges), superusers, and every login that
-- is not a member of one of those three roles.  Then the unchanged body runs with the locks
-- held.  Bound: at most 3 s of lock wait per call (a withdrawal is three calls: at most 9 s),
-- plus the work itself.  A third timeout raises 55P03 (the caller sees a clean failure; a
-- withdrawal stays disabled with its erasure pending).  memory_sweep answers 0 instead when
-- the one-sweep-at-a-time lock is still held then (another sweep younger than the bound).
-- The ended backend's later statements were refused anyway (memory_guard: transaction older
-- than 5 s).  Each end is audited content-free: (scope, 'withdraw' | 'offboard' | 'sweep',
-- 'blocker_ended', generation, number of backends ended).
--
-- pg_signal_backend: the owner needs it to end another login's backend.  KGR04 (raised by this
-- file) when the migrating role lacks it, as KGR01 in 000004.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DO $$
BEGIN
    IF NOT pg_catalog.pg_has_role(current_user, 'pg_signal_backend', 'USAGE') THEN
        RAISE EXCEPTION 'the migrating role lacks pg_signal_backend'
            USING ERRCODE = 'KGR04',
                  HINT = pg_catalog.format('have an administrator run: GRANT pg_signal_backend TO %I',
                                           current_user);
    END IF;
END
$$;

-- The governed-login backends (pid, virtual transaction) holding a lock on a governed table:
-- the tables named memory_* of this schema that the owner owns.  Owner, superusers, logins
-- with the owner's privileges, logins of no governed role and this backend are never listed.
CREATE OR REPLACE FUNCTION memory_lock_holders() RETURNS TEXT[]
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(array_agg(DISTINCT l.pid::text || '/' || l.virtualtransaction), ARRAY[]::TEXT[])
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
      JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
     WHERE l.granted
       AND l.locktype = 'relation'
       AND l.pid <> pg_catalog.pg_backend_pid()
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
       AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
                           WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_catalog.pg_class t
                                                    WHERE t.oid = 'memory_scope'::regclass)
                             AND c.relkind IN ('r', 'p')
                             AND c.relowner = (SELECT u.oid FROM pg_catalog.pg_roles u
                                                WHERE u.rolname = current_user)
                             AND c.relname LIKE 'memory\_%')
       AND NOT r.rolsuper
       AND NOT pg_catalog.pg_has_role(r.oid, (SELECT u.oid FROM pg_catalog.pg_roles u
                                              WHERE u.rolname = current_user), 'MEMBER')
       AND EXISTS (SELECT FROM pg_catalog.pg_roles g
                    WHERE g.rolname IN ('kagent_memory_service', 'kagent_memory_runtime',
                                        'kagent_memory_bridge')
                      AND pg_catalog.pg_has_role(r.oid, g.oid, 'MEMBER'))
$$;

-- End the backends of p_seen still in the same transaction (they have held a governed lock
-- since p_seen was taken); returns how many were signalled.
CREATE OR REPLACE FUNCTION memory_end_blockers(p_seen TEXT[]) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    holder TEXT;
    n      BIGINT := 0;
BEGIN
    FOR holder IN SELECT h FROM unnest(memory_lock_holders()) h
                   WHERE h = ANY (p_seen) ORDER BY h LOOP
        IF pg_catalog.pg_terminate_backend(split_part(holder, '/', 1)::INTEGER) THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- U4/C4 step 1 of a withdrawal (000005), lock-bounded.
CREATE OR REPLACE FUNCTION memory_disable(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS TABLE (scope_id UUID, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    s     memory_scope%ROWTYPE;
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    UPDATE memory_scope
       SET enabled = false, generation = memory_scope.generation + 1,
           failure_reason = 'erasure_pending', failure_at = now()
     WHERE id = (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id
    RETURNING * INTO s;
    IF s.id IS NOT NULL THEN
        IF ended > 0 THEN
            PERFORM memory_audit_write(s.id, 'withdraw', 'blocker_ended', s.generation, ended);
        END IF;
        PERFORM memory_audit_write(s.id, 'disable', 'disabled', s.generation, NULL);
        RETURN QUERY SELECT s.id, s.generation;
    END IF;
END
$$;

-- L2 step 1 (000005), lock-bounded: the principal's lock row, its block row and every scope
-- row of the principal are taken first.
CREATE OR REPLACE FUNCTION memory_disable_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (scope_id UUID, agent_namespace TEXT, agent_name TEXT, scope_kind TEXT,
               room_id TEXT, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    FOR attempt IN 1..3 LOOP
        BEGIN
            -- Block first, under the lock every grant of this principal shares: grants in
            -- flight commit before the UPDATE below takes its snapshot, later ones see the block.
            PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), true);
            INSERT INTO memory_principal_block (principal_ref)
            VALUES (memory_principal_ref(p_issuer, p_subject))
            ON CONFLICT (principal_ref) DO NOTHING;
            PERFORM 1 FROM memory_scope
              WHERE principal_issuer = p_issuer AND principal_subject = p_subject
              ORDER BY id FOR NO KEY UPDATE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF ended > 0 THEN
        PERFORM memory_audit_write(NULL, 'offboard', 'blocker_ended', NULL, ended);
    END IF;
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

-- Delete every entry of a scope (000005), lock-bounded: the scope row and every entry row of
-- the scope are taken first.
CREATE OR REPLACE FUNCTION memory_clear(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_advance BOOLEAN)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    s     memory_scope%ROWTYPE;
    n     BIGINT := 0;
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    FOR attempt IN 1..3 LOOP
        BEGIN
            s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
            IF s.id IS NOT NULL THEN
                PERFORM memory_bind_scope(s.id);
                PERFORM 1 FROM memory_entry WHERE scope_id = s.id FOR UPDATE;
            END IF;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    IF p_advance THEN
        UPDATE memory_scope SET generation = memory_scope.generation + 1
         WHERE id = s.id
        RETURNING * INTO s;
    END IF;
    IF ended > 0 THEN
        PERFORM memory_audit_write(s.id, 'withdraw', 'blocker_ended', s.generation, ended);
    END IF;
    PERFORM memory_bind_scope(s.id);
    DELETE FROM memory_entry WHERE scope_id = s.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(s.id, 'clear', 'deleted', s.generation, n);
    RETURN QUERY SELECT s.generation, n;
END
$$;

-- B5 read-after-delete verification (000005), lock-bounded on the scope row.
CREATE OR REPLACE FUNCTION memory_verify_erasure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_entry_id UUID, p_complete BOOLEAN)
RETURNS TABLE (generation BIGINT, verified_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    s         memory_scope%ROWTYPE;
    readable  BIGINT;
    remaining BIGINT;
    seen      TEXT[];
    ended     BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    IF p_complete AND p_entry_id IS NOT NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    FOR attempt IN 1..3 LOOP
        BEGIN
            s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF s.id IS NULL THEN
        RETURN QUERY SELECT NULL::BIGINT, now();
        RETURN;
    END IF;
    IF ended > 0 THEN
        PERFORM memory_audit_write(s.id, 'withdraw', 'blocker_ended', s.generation, ended);
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

-- L2 last step (000005), lock-bounded: every scope row of the principal is taken first.
CREATE OR REPLACE FUNCTION memory_purge_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (purged BIGINT, kept BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
DECLARE
    s      memory_scope%ROWTYPE;
    done   BIGINT := 0;
    kept_n BIGINT := 0;
    seen   TEXT[];
    ended  BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    IF NOT EXISTS (SELECT FROM memory_principal_block b
                    WHERE b.principal_ref = memory_principal_ref(p_issuer, p_subject)) THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';  -- not being offboarded
    END IF;
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM 1 FROM memory_scope
              WHERE principal_issuer = p_issuer AND principal_subject = p_subject
              ORDER BY id FOR UPDATE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RAISE;
            END IF;
        END;
    END LOOP;
    IF ended > 0 THEN
        PERFORM memory_audit_write(NULL, 'offboard', 'blocker_ended', NULL, ended);
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

-- L3 sweep (000008), lock-bounded: the one-sweep-at-a-time lock (the config row) is waited for
-- within the bound instead of skipped at once, so a session holding it cannot stop every
-- sweep; rows another transaction holds (entries, buckets, ledger rows) are skipped and left
-- for the next sweep, never waited for.
CREATE OR REPLACE FUNCTION memory_sweep() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
DECLARE
    sid   UUID;
    n     BIGINT;
    total BIGINT := 0;
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    -- One sweep at a time: the config row's lock (a row lock, which no caller can hold
    -- outside a governed function's transaction, unlike an advisory lock).
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM 1 FROM memory_config WHERE singleton FOR UPDATE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt = 1 THEN
                seen := memory_lock_holders();
            ELSIF attempt = 2 THEN
                ended := memory_end_blockers(seen);
            ELSE
                RETURN 0;  -- another sweep, younger than the bound, holds it
            END IF;
        END;
    END LOOP;
    IF ended > 0 THEN
        PERFORM memory_audit_write(NULL, 'sweep', 'blocker_ended', NULL, ended);
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
    DELETE FROM memory_admission_bucket
     WHERE bucket IN (SELECT b.bucket FROM memory_admission_bucket b
                       WHERE b.updated_at < now() - INTERVAL '1 day' FOR UPDATE SKIP LOCKED);
    DELETE FROM memory_assertion_use
     WHERE jti IN (SELECT u.jti FROM memory_assertion_use u
                    WHERE u.forget_at < now() FOR UPDATE SKIP LOCKED);
    PERFORM memory_audit_write(NULL, 'sweep', 'deleted', NULL, total);
    RETURN total;
END
$$;

REVOKE ALL ON FUNCTION memory_lock_holders(), memory_end_blockers(TEXT[]) FROM PUBLIC;

-- Executable by every governed role, SECURITY DEFINER with the pinned search_path (item 6).
CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 13 $$;

-- Recording a failure (000005) is the withdrawal's last resort: it waits for the scope row
-- within the same bound (nothing is ended for it; the withdrawal's erasure stays pending).
ALTER FUNCTION memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT)
    SET lock_timeout = '1s';
