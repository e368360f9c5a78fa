-- Principals with pluggable issuers (issue 47): a principal is (issuer kind, issuer, subject),
-- and the issuers whose principals may consent are configuration, not code.
--
-- What changes:
--   * memory_issuer, the issuer registry: one row per (issuer kind, issuer) saying which scope
--     kind its principals get, the anchored patterns a subject and a scope reference must
--     match, and the one output audience a consent may name.  Written only through
--     memory_register_issuer / memory_disable_issuer (the owner or kagent_memory_operator);
--     read through memory_get_issuer.  This file inserts no issuer row of its own accord (see
--     the upgrade below for the one exception an existing consent needs).
--   * The scope key (S4) is the 7-tuple (principal_issuer_kind, principal_issuer,
--     principal_subject, agent_namespace, agent_name, scope_kind, scope_ref): memory_scope and
--     memory_request gain principal_issuer_kind, room_id becomes scope_ref (a Matrix control
--     room's id, '' for a scope that has no reference), and the Matrix-only CHECKs (issuer
--     'matrix', MXID and room shapes, scope kind 'control_room') leave the table: they are the
--     Matrix issuer's registry data, checked at grant.  Generic shape bounds stay.
--   * An offboarding block (and the lock row a grant shares) is keyed by the principal's
--     issuer kind and issuer in clear plus the opaque salted reference of (kind, subject), so a
--     block names no subject and two issuers' subjects never collide.
--   * Every entry point that takes a key gains a generic signature
--     (p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind, p_scope_ref, ...).
--     Grant checks the issuer: registered and enabled (KGD04 issuer_not_registered), the scope
--     kind its own (KGD01 scope_denied), the scope reference matching its pattern or '' when
--     it has none (KGD05 scope_ref_denied), the subject matching its pattern (KGD06
--     subject_denied), the output audience exactly its audience (KGD07 audience_denied).  A
--     request of a principal whose issuer is disabled captures no generation.
--   * LIBRARY ONLY: the version-15 signatures stay, as thin compatibility wrappers of the
--     Matrix issuer (kind 'matrix', issuer = the MXID's homeserver, which is the recorded
--     local homeserver for every principal version 15 could serve), so callers written
--     for 15 -- the kagent v0.9.11 carry series and the current kagent-main series -- keep
--     working unchanged, with 15's reason codes; memory_configure(local_server) also registers
--     the Matrix issuer of that server.  kagent's own governed baseline has neither.
--
-- Upgrade from 15 (an upgrade must not lose a consent, a generation, an entry or a block):
-- every existing principal is a Matrix principal of the recorded local homeserver, so its rows
-- become kind 'matrix', issuer = memory_config.local_server; their scope ids, generations,
-- consents and entries are untouched.  When consents exist (any memory_scope row), the Matrix
-- issuer of that server is registered here, because a consent whose issuer is unregistered
-- captures no generation; a database without one gets no issuer row.  Governed rows without a
-- recorded local server (only offboarding blocks can exist then) are refused (KGR05) rather than
-- guessed: record it first with memory_configure.
--
-- SQLSTATEs added: KGD04 issuer_not_registered, KGD05 scope_ref_denied, KGD06 subject_denied,
-- KGD07 audience_denied; setup: KGR05 (this upgrade or its down cannot convert the data).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

-- Version-15 rows name the 'matrix' issuer only; they need the local homeserver to be keyed.
DO $$
BEGIN
    IF (SELECT c.local_server FROM memory_config c) IS NULL
       AND (EXISTS (SELECT FROM memory_scope) OR EXISTS (SELECT FROM memory_principal_block)) THEN
        RAISE EXCEPTION 'governed rows name Matrix principals of an unrecorded local server'
            USING ERRCODE = 'KGR05',
                  HINT = 'record the local homeserver first: SELECT memory_configure(''<server>'')';
    END IF;
END
$$;

-- ===============================================================================================
-- Tables
-- ===============================================================================================

-- The issuers whose principals may consent (D2).  A subject must match subject_pattern, a
-- scope reference scope_ref_pattern (NULL: the reference must be ''), both anchored ARE
-- patterns, each applied as a whole ('^(?:' || pattern || ')$'); audience is sorted and
-- distinct.  A disabled issuer's principals can neither consent nor capture a generation;
-- their existing scopes stay withdrawable and are offboarded as any other.
CREATE TABLE IF NOT EXISTS memory_issuer (
    issuer_kind       TEXT        NOT NULL,
    issuer            TEXT        NOT NULL,
    scope_kind        TEXT        NOT NULL,
    subject_pattern   TEXT        NOT NULL,
    scope_ref_pattern TEXT,
    audience          TEXT[]      NOT NULL,
    enabled           BOOLEAN     NOT NULL DEFAULT true,
    registered_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer_kind, issuer),
    CONSTRAINT memory_issuer_shape CHECK (
        issuer_kind ~ '^[a-z][a-z0-9_]{0,31}$'
        AND octet_length(issuer) BETWEEN 1 AND 255
        AND scope_kind ~ '^[a-z][a-z0-9_]{0,31}$'
        AND octet_length(subject_pattern) BETWEEN 2 AND 1024
        AND subject_pattern ~ '^\^.*\$$'
        AND (scope_ref_pattern IS NULL
             OR (octet_length(scope_ref_pattern) BETWEEN 2 AND 1024
                 AND scope_ref_pattern ~ '^\^.*\$$'))
        AND array_ndims(audience) = 1
        AND cardinality(audience) BETWEEN 1 AND 64
        AND array_position(audience, NULL) IS NULL)
);

-- The scope key.  The guard trigger refuses any change of a key column, so it is off for the
-- one statement that re-keys version-15 rows (same transaction: nothing else sees it off).
-- Like every statement of this file, safe to run again on its own result (a row re-keyed
-- already has its issuer kind).
ALTER TABLE memory_scope
    DROP CONSTRAINT IF EXISTS memory_scope_key,
    DROP CONSTRAINT IF EXISTS memory_scope_issuer_v1,
    DROP CONSTRAINT IF EXISTS memory_scope_kind_v1,
    DROP CONSTRAINT IF EXISTS memory_scope_subject_shape,
    DROP CONSTRAINT IF EXISTS memory_scope_room_shape,
    DROP CONSTRAINT IF EXISTS memory_scope_principal_shape,
    DROP CONSTRAINT IF EXISTS memory_scope_ref_shape,
    ADD COLUMN IF NOT EXISTS principal_issuer_kind TEXT;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_attribute
                WHERE attrelid = 'memory_scope'::regclass AND attname = 'room_id'
                  AND NOT attisdropped) THEN
        ALTER TABLE memory_scope RENAME COLUMN room_id TO scope_ref;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_attribute
                WHERE attrelid = 'memory_request'::regclass AND attname = 'room_id'
                  AND NOT attisdropped) THEN
        ALTER TABLE memory_request RENAME COLUMN room_id TO scope_ref;
    END IF;
END
$$;

ALTER TABLE memory_scope DISABLE TRIGGER memory_scope_guard;

UPDATE memory_scope
   SET principal_issuer_kind = principal_issuer,
       principal_issuer = (SELECT c.local_server FROM memory_config c)
 WHERE principal_issuer_kind IS NULL;

ALTER TABLE memory_scope ENABLE TRIGGER memory_scope_guard;

ALTER TABLE memory_scope
    ALTER COLUMN principal_issuer_kind SET NOT NULL,
    ADD CONSTRAINT memory_scope_key UNIQUE (principal_issuer_kind, principal_issuer,
        principal_subject, agent_namespace, agent_name, scope_kind, scope_ref),
    ADD CONSTRAINT memory_scope_principal_shape CHECK (
        principal_issuer_kind ~ '^[a-z][a-z0-9_]{0,31}$'
        AND octet_length(principal_issuer) BETWEEN 1 AND 255
        AND octet_length(principal_subject) BETWEEN 1 AND 255),
    ADD CONSTRAINT memory_scope_ref_shape CHECK (
        scope_kind ~ '^[a-z][a-z0-9_]{0,31}$' AND octet_length(scope_ref) <= 255);

DROP INDEX IF EXISTS idx_memory_scope_principal;

CREATE INDEX IF NOT EXISTS idx_memory_scope_principal
    ON memory_scope (principal_issuer_kind, principal_issuer, principal_subject);

-- Recorded requests: the same key.  A request recorded while no local server was recorded
-- could never be served (no consent could exist) and lives a minute: it is dropped.
ALTER TABLE memory_request ADD COLUMN IF NOT EXISTS principal_issuer_kind TEXT;

DELETE FROM memory_request
 WHERE principal_issuer_kind IS NULL AND (SELECT c.local_server FROM memory_config c) IS NULL;

UPDATE memory_request
   SET principal_issuer_kind = principal_issuer,
       principal_issuer = (SELECT c.local_server FROM memory_config c)
 WHERE principal_issuer_kind IS NULL;

ALTER TABLE memory_request ALTER COLUMN principal_issuer_kind SET NOT NULL;

-- Offboarding blocks: (issuer kind, issuer, opaque reference of kind and subject).  Version 15's
-- reference was already salted over ('matrix', subject), so a block converts without knowing
-- its subject.  Lock rows hold no state (they exist to be locked; the next grant or offboarding
-- inserts its row again), so they are dropped rather than converted.
ALTER TABLE memory_principal_block
    DROP CONSTRAINT IF EXISTS memory_principal_block_pkey,
    ADD COLUMN IF NOT EXISTS principal_issuer_kind TEXT,
    ADD COLUMN IF NOT EXISTS principal_issuer TEXT;

UPDATE memory_principal_block
   SET principal_issuer_kind = 'matrix',
       principal_issuer = (SELECT c.local_server FROM memory_config c)
 WHERE principal_issuer_kind IS NULL;

ALTER TABLE memory_principal_block
    ADD PRIMARY KEY (principal_issuer_kind, principal_issuer, principal_ref);

DELETE FROM memory_principal_lock;

ALTER TABLE memory_principal_lock
    DROP CONSTRAINT IF EXISTS memory_principal_lock_pkey,
    ADD COLUMN IF NOT EXISTS principal_issuer_kind TEXT,
    ADD COLUMN IF NOT EXISTS principal_issuer TEXT;

ALTER TABLE memory_principal_lock
    ADD PRIMARY KEY (principal_issuer_kind, principal_issuer, principal_ref);

-- The one issuer row this file may write: the Matrix issuer of the recorded local server, and
-- only when version-15 consents exist (the same row memory_configure registers; see there).
INSERT INTO memory_issuer (issuer_kind, issuer, scope_kind, subject_pattern, scope_ref_pattern,
                           audience)
SELECT 'matrix', c.local_server, 'control_room',
       '^@[!-9;-~]+:' || regexp_replace(c.local_server, '([.\[\]])', '\\\1', 'g') || '$',
       '^![!-9;-~]+(:' || regexp_replace(c.local_server, '([.\[\]])', '\\\1', 'g') || ')?$',
       ARRAY[c.local_server]
  FROM memory_config c
 WHERE c.local_server IS NOT NULL AND EXISTS (SELECT FROM memory_scope)
ON CONFLICT DO NOTHING;

-- The helpers whose key changed (owner only; recreated below with the 7-column key).
-- memory_principal_ref(TEXT, TEXT) stays as version 15 defined it: its first argument, named
-- p_issuer there, is the issuer KIND (version 15's only issuer was the 'matrix' kind).
DROP FUNCTION IF EXISTS memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_principal_lock(BYTEA, BOOLEAN);
DROP FUNCTION IF EXISTS memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT);

-- ===============================================================================================
-- The generic entry points and their helpers (the 7-column key)
-- ===============================================================================================

-- Redeem one verified assertion and return the generation the request captures (as
-- memory_generation: NULL without a matching consent).  p_expires_at is the assertion's `exp`.
-- Refused, in this order and with nothing written:
--   KGJ02 an `exp` already past by the database clock (beyond the verifiers' 30 s skew bound)
--         or further ahead than a 60 s lifetime plus that skew (a ledger row must not be
--         pinned for long);
--   KGJ01 a `jti` already redeemed (the replay).
-- Who may redeem depends on the login (session_user: the authenticated login, whatever role
-- it has SET): a registered runtime only a request the bridge recorded (KGJ04 otherwise), for
-- the exact key, classification and audience recorded, of an agent it is registered for; a
-- registered verifier, or a kagent_memory_service member (deprecated), any verified request.
-- The row records what the redemption admitted (scope, generation, classification, audience,
-- login) and is kept until work_until = exp + 120 s (this function's constant: the request's
-- background work, e.g. an auto-save after the reply); from 30 s past `exp` on, KGJ02 refuses
-- the token here whatever any verifier's clock says, so a swept row can never be redeemed
-- again.  Each call also forgets up to 16 such rows (the sweep does the rest).
CREATE OR REPLACE FUNCTION memory_redeem_assertion(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    g     BIGINT;
    sid   UUID;
    until TIMESTAMPTZ;
    req   memory_request%ROWTYPE;
    who   TEXT := session_user;
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$'
       OR p_classification IS NULL OR p_output_audience IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    IF EXISTS (SELECT FROM memory_verifier_login v WHERE v.login = who) THEN
        NULL;  -- verifies the bridge's signature itself
    ELSIF EXISTS (SELECT FROM memory_runtime_login r WHERE r.login = who) THEN
        DELETE FROM memory_request r WHERE r.jti = p_jti RETURNING * INTO req;
        IF req.jti IS NULL
           OR NOT EXISTS (SELECT FROM memory_runtime_login r
                           WHERE r.login = who AND r.agent_namespace = p_namespace
                             AND r.agent_name = p_agent)
           OR (req.principal_issuer_kind, req.principal_issuer, req.principal_subject,
               req.agent_namespace, req.agent_name, req.scope_kind, req.scope_ref,
               req.classification, req.output_audience, req.expires_at)
              IS DISTINCT FROM
              (p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind, p_scope_ref,
               p_classification, memory_sorted(p_output_audience), p_expires_at) THEN
            RAISE EXCEPTION 'request_not_recorded' USING ERRCODE = 'KGJ04';
        END IF;
    ELSIF NOT pg_has_role(who, 'kagent_memory_service', 'MEMBER') THEN
        RAISE EXCEPTION 'request_not_recorded' USING ERRCODE = 'KGJ04';
    END IF;
    g := memory_generation(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                           p_scope_ref, p_policy_version, p_classification, p_output_audience);
    sid := (memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                             p_kind, p_scope_ref)).id;
    until := p_expires_at + INTERVAL '120 seconds';
    INSERT INTO memory_assertion_use (jti, forget_at, scope_id, generation, classification,
                                      output_audience, work_until, login)
    VALUES (p_jti, greatest(p_expires_at + INTERVAL '1 minute', until), sid, g,
            p_classification, memory_sorted(p_output_audience), until, who)
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

-- A request's first call in one round trip (kagent mode): redeems the request's scope
-- assertion exactly as memory_redeem_assertion does -- same checks, same reason codes -- and,
-- when the redemption captured a generation, admits p_units of work under THAT generation
-- (never a caller's) exactly as memory_admit_bound does, in the same transaction.  One row:
--   generation   what the redemption captured (NULL: no valid consent; nothing admitted);
--   refused      memory_admit's answer, 0 admitted, 1 the scope's budget, 2 the sender's rate
--                (nothing consumed), NULL when no admission was attempted or it raised;
--   admit_state  the SQLSTATE the admission raised (KGC01, KGS01, KGP01, ...), else NULL.
-- A refused or failed admission leaves the redemption in place: the request keeps its captured
-- generation and simply gets no admitted work from this call.  A failed redemption raises and
-- admits nothing.
CREATE OR REPLACE FUNCTION memory_redeem_admit(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
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
    g := memory_redeem_assertion(p_jti, p_expires_at, p_issuer_kind, p_issuer, p_subject,
                                 p_namespace, p_agent, p_kind, p_scope_ref, p_policy_version,
                                 p_classification, p_output_audience);
    IF g IS NULL THEN
        RETURN QUERY SELECT NULL::BIGINT, NULL::INTEGER, NULL::TEXT;
        RETURN;
    END IF;
    BEGIN  -- a subtransaction: an admission that raises leaves the redemption in place
        r := memory_admit_bound(p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                p_kind, p_scope_ref, g, p_policy_version, p_units, p_explicit,
                                NULL);
    EXCEPTION WHEN OTHERS THEN
        RETURN QUERY SELECT g, NULL::INTEGER, SQLSTATE::TEXT;
        RETURN;
    END;
    RETURN QUERY SELECT g, r, NULL::TEXT;
END
$$;

-- The bound calls of a request (kagent mode): each takes the request's `jti` and serves only
-- its redemption, checked in the operation's own transaction before the fence
-- (memory_redeemed_generation):
--   KGJ03 request_not_redeemed  no redemption of this `jti` by this login, for another scope,
--         past work_until, or a generation other than the one captured -- an answer that depends
--         only on the redemption, never on the scope's current generation;
--   KGC01 consent_required      the redemption captured no generation;
-- then the operation itself, as its unbound twin (memory_admit, memory_save, memory_search,
-- memory_search_many, memory_forget) with its own fence (KGS01 when consent has moved on).
CREATE OR REPLACE FUNCTION memory_admit_bound(
    p_jti TEXT,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_generation IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_redeemed_generation(p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace,
                                       p_agent, p_kind, p_scope_ref, p_generation);
    RETURN memory_admit(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                        p_scope_ref, p_generation, p_policy_version, p_units, p_explicit, p_now);
END
$$;

CREATE OR REPLACE FUNCTION memory_save_bound(
    p_jti TEXT,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_contents TEXT[], p_embeddings vector[])
RETURNS TABLE (id UUID, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    PERFORM memory_guard();
    IF p_generation IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_redeemed_generation(p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace,
                                       p_agent, p_kind, p_scope_ref, p_generation);
    RETURN QUERY
    SELECT m.id, m.created_at, m.expires_at
      FROM memory_save(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                       p_scope_ref, p_generation, p_policy_version, p_contents, p_embeddings) m;
END
$$;

CREATE OR REPLACE FUNCTION memory_search_bound(
    p_jti TEXT,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
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
    PERFORM memory_redeemed_generation(p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace,
                                       p_agent, p_kind, p_scope_ref, p_generation);
    RETURN QUERY
    SELECT m.id, m.content, m.created_at, m.expires_at, m.distance
      FROM memory_search(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                         p_scope_ref, p_generation, p_policy_version, p_embedding, p_limit) m;
END
$$;

CREATE OR REPLACE FUNCTION memory_search_many_bound(
    p_jti TEXT,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
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
    PERFORM memory_redeemed_generation(p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace,
                                       p_agent, p_kind, p_scope_ref, p_generation);
    RETURN QUERY
    SELECT m.query_ordinal, m.id, m.content, m.created_at, m.expires_at, m.distance
      FROM memory_search_many(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                              p_scope_ref, p_generation, p_policy_version, p_embeddings, p_limit) m;
END
$$;

-- An agent's forget within its request: the redemption's scope, and (when the redemption
-- captured a generation) only while that consent holds; p_generation, when sent, must be the
-- captured one.  A redemption without consent may still forget (memory_forget works whether or
-- not the scope is enabled: there is nothing to forget, or the withdrawal clears it).
CREATE OR REPLACE FUNCTION memory_forget_bound(
    p_jti TEXT,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_generation BIGINT, p_entry_id UUID)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    g BIGINT;
BEGIN
    PERFORM memory_guard();
    g := memory_redeemed_generation(p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                    p_kind, p_scope_ref, p_generation);
    IF g IS NOT NULL AND g IS DISTINCT FROM
       (memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                         p_kind, p_scope_ref)).generation
    THEN
        RAISE EXCEPTION 'stale_generation' USING ERRCODE = 'KGS01';
    END IF;
    RETURN QUERY
    SELECT f.generation, f.deleted
      FROM memory_forget(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind,
                         p_scope_ref, p_entry_id) f;
END
$$;

-- The bridge records a request it relays (one round trip per request).
CREATE OR REPLACE FUNCTION memory_record_request(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$'
       OR p_issuer_kind IS NULL OR p_issuer IS NULL OR p_subject IS NULL
       OR p_namespace IS NULL OR p_agent IS NULL OR p_kind IS NULL OR p_scope_ref IS NULL
       OR p_classification IS NULL OR p_output_audience IS NULL
       OR cardinality(p_output_audience) = 0 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    INSERT INTO memory_request (jti, principal_issuer_kind, principal_issuer, principal_subject,
                                agent_namespace, agent_name, scope_kind, scope_ref,
                                classification, output_audience, expires_at, forget_at)
    VALUES (p_jti, p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind, p_scope_ref,
            p_classification, memory_sorted(p_output_audience), p_expires_at,
            p_expires_at + INTERVAL '1 minute')
    ON CONFLICT (jti) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'assertion_replayed' USING ERRCODE = 'KGJ01';
    END IF;
    DELETE FROM memory_request
     WHERE jti IN (SELECT r.jti FROM memory_request r WHERE r.forget_at < now()
                    ORDER BY r.forget_at LIMIT 16 FOR UPDATE SKIP LOCKED);
END
$$;

-- C1: explicit, purpose-specific, versioned consent under a registered policy the operator
-- allows for the agent (KGP01 otherwise), for a principal of a registered, enabled issuer, in
-- the scope kind, with the scope reference, subject and output audience that issuer admits
-- (D2; KGD04, KGD01, KGD05, KGD06, KGD07 in the order checked, after 22023 for a NULL and
-- KGP01 between the scope kind and the rest); the limits recorded are the policy's, never the
-- caller's.  Same purpose + version on a valid consent renews it (same generation); anything
-- else needs a withdrawal first.  Enabling always advances the generation, so work admitted
-- under an earlier consent can never resume, and starts from an empty scope.
CREATE OR REPLACE FUNCTION memory_grant(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_purpose TEXT, p_policy_version TEXT, p_embedding_dimension INTEGER,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS TABLE (scope_id UUID, generation BIGINT, granted_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s   memory_scope%ROWTYPE;
    pol memory_policy%ROWTYPE;
    iss memory_issuer%ROWTYPE;
    ref BYTEA;
BEGIN
    PERFORM memory_guard();
    IF p_issuer_kind IS NULL OR p_issuer IS NULL OR p_subject IS NULL OR p_namespace IS NULL
       OR p_agent IS NULL OR p_kind IS NULL OR p_scope_ref IS NULL
       OR p_purpose IS NULL OR p_classification IS NULL OR p_output_audience IS NULL
       OR p_embedding_dimension IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO iss FROM memory_issuer i
     WHERE i.issuer_kind = p_issuer_kind AND i.issuer = p_issuer AND i.enabled;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'issuer_not_registered' USING ERRCODE = 'KGD04';
    END IF;
    IF p_kind IS DISTINCT FROM iss.scope_kind THEN
        RAISE EXCEPTION 'scope_denied' USING ERRCODE = 'KGD01';
    END IF;
    SELECT * INTO pol FROM memory_policy WHERE version = p_policy_version;
    IF NOT FOUND
       OR NOT (p_embedding_dimension = ANY (pol.embedding_dimensions))
       OR NOT EXISTS (SELECT FROM memory_policy_allowance a
                       WHERE a.policy_version = pol.version
                         AND (a.agent_namespace IS NULL
                              OR (a.agent_namespace = p_namespace
                                  AND (a.agent_name IS NULL OR a.agent_name = p_agent)))) THEN
        RAISE EXCEPTION 'policy_not_allowed' USING ERRCODE = 'KGP01';
    END IF;
    p_output_audience := memory_sorted(p_output_audience);
    -- The issuer's rules (S5 for the Matrix issuer: only its own users, and rooms, under its
    -- patterns), each pattern applied to the whole value.
    IF (iss.scope_ref_pattern IS NULL AND p_scope_ref <> '')
       OR (iss.scope_ref_pattern IS NOT NULL
           AND p_scope_ref !~ ('^(?:' || iss.scope_ref_pattern || ')$')) THEN
        RAISE EXCEPTION 'scope_ref_denied' USING ERRCODE = 'KGD05';
    END IF;
    IF p_subject !~ ('^(?:' || iss.subject_pattern || ')$') THEN
        RAISE EXCEPTION 'subject_denied' USING ERRCODE = 'KGD06';
    END IF;
    IF p_output_audience IS DISTINCT FROM iss.audience THEN
        RAISE EXCEPTION 'audience_denied' USING ERRCODE = 'KGD07';
    END IF;
    ref := memory_principal_ref(p_issuer_kind, p_subject);
    PERFORM memory_principal_lock(p_issuer_kind, p_issuer, ref, false);
    IF EXISTS (SELECT FROM memory_principal_block b
                WHERE b.principal_issuer_kind = p_issuer_kind AND b.principal_issuer = p_issuer
                  AND b.principal_ref = ref) THEN
        RAISE EXCEPTION 'principal_offboarded' USING ERRCODE = 'KGD03';
    END IF;
    INSERT INTO memory_scope (principal_issuer_kind, principal_issuer, principal_subject,
                              agent_namespace, agent_name, scope_kind, scope_ref, max_ttl,
                              entry_cap, fact_max_bytes)
    VALUES (p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent, p_kind, p_scope_ref,
            pol.max_ttl, pol.entry_cap, pol.fact_max_bytes)
    ON CONFLICT ON CONSTRAINT memory_scope_key DO NOTHING;

    s := memory_scope_lock(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                           p_kind, p_scope_ref);

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
        UPDATE memory_scope SET consent_expires_at = now() + pol.consent_max_age
         WHERE id = s.id
        RETURNING * INTO s;
        PERFORM memory_audit_write(s.id, 'grant', 'renewed', s.generation, NULL);
    ELSE
        PERFORM memory_bind_scope(s.id);
        DELETE FROM memory_entry WHERE memory_entry.scope_id = s.id;
        UPDATE memory_scope
           SET enabled = true, generation = memory_scope.generation + 1,
               purpose = p_purpose, policy_version = pol.version,
               max_ttl = pol.max_ttl, entry_cap = pol.entry_cap,
               fact_max_bytes = pol.fact_max_bytes,
               embedding_dimension = p_embedding_dimension,
               classification = p_classification, output_audience = p_output_audience,
               consent_granted_at = now(), consent_expires_at = now() + pol.consent_max_age
         WHERE id = s.id
        RETURNING * INTO s;
        PERFORM memory_audit_write(s.id, 'grant', 'enabled', s.generation, NULL);
    END IF;
    RETURN QUERY SELECT s.id, s.generation, s.consent_granted_at, s.consent_expires_at;
END
$$;

-- The generation a request captures at admission: NULL unless enabled, unexpired, consented
-- under the caller's policy version, and for the request's classification and output audience
-- (ADR decision 6), which are always checked: NULL is refused (22023), never read as "no check";
-- and NULL while the principal's issuer is not registered and enabled (a disabled issuer's
-- principals get no memory; their consents stay withdrawable).
CREATE OR REPLACE FUNCTION memory_generation(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_classification IS NULL OR p_output_audience IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    RETURN (
        SELECT s.generation
          FROM memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                p_kind, p_scope_ref) s
         WHERE s.enabled AND s.consent_expires_at > now() AND s.policy_version = p_policy_version
           AND s.classification = p_classification
           AND s.output_audience = memory_sorted(p_output_audience)
           AND EXISTS (SELECT FROM memory_issuer i
                        WHERE i.issuer_kind = s.principal_issuer_kind
                          AND i.issuer = s.principal_issuer AND i.enabled));
END
$$;

-- Content-free status (U1): one row, or none for a key that was never granted.
CREATE OR REPLACE FUNCTION memory_status(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT)
RETURNS TABLE (enabled BOOLEAN, purpose TEXT, policy_version TEXT, generation BIGINT,
               consent_expires_at TIMESTAMPTZ, max_ttl INTERVAL, entry_cap INTEGER,
               entry_count BIGINT, last_verified_erasure_at TIMESTAMPTZ, failure_reason TEXT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    s := memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                          p_kind, p_scope_ref);
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT s.enabled AND s.consent_expires_at > now(), s.purpose, s.policy_version,
           s.generation, s.consent_expires_at, s.max_ttl, s.entry_cap,
           (SELECT count(*) FROM memory_readable(s.id)),
           s.last_verified_erasure_at, s.failure_reason;
END
$$;

-- The subject's own view (U2): needs no generation, never returns expired rows.  Keyset
-- pagination, newest first; returns at most p_limit rows after (p_after_created, p_after_id).
CREATE OR REPLACE FUNCTION memory_inspect(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_after_created TIMESTAMPTZ, p_after_id UUID, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 51 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                          p_kind, p_scope_ref);
    IF s.id IS NULL THEN
        RETURN;
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT r.id, r.content, r.created_at, r.expires_at
      FROM memory_readable(s.id) r
     WHERE p_after_created IS NULL OR (r.created_at, r.id) < (p_after_created, p_after_id)
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT p_limit;
END
$$;

-- U3: delete one entry of this key.  Same answer for an absent, foreign or already-deleted id
-- (no existence oracle): deleted = 0.  Works whether or not the scope is enabled.
CREATE OR REPLACE FUNCTION memory_forget(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_entry_id UUID)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
    n BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    s := memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                          p_kind, p_scope_ref);
    IF s.id IS NOT NULL THEN
        PERFORM memory_bind_scope(s.id);
        DELETE FROM memory_entry WHERE memory_entry.id = p_entry_id AND scope_id = s.id;
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM memory_audit_write(s.id, 'forget', 'deleted', s.generation, n);
    END IF;
    RETURN QUERY SELECT s.generation, n;
END
$$;

-- U4/C4 step 1 of a withdrawal, lock-bounded: disable and advance the generation, marking the
-- erasure as pending until it is verified.  Committed on its own, before any delete.
CREATE OR REPLACE FUNCTION memory_disable(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT)
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
            PERFORM memory_scope_lock(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                      p_kind, p_scope_ref);
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
     WHERE id = (memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                  p_kind, p_scope_ref)).id
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

-- Delete every entry of a scope, lock-bounded: the scope row and every entry row of the scope
-- are taken first.  p_advance (forget_all) advances the generation in the same transaction, so
-- saves in flight under the old generation are fenced out; a withdrawal has advanced it
-- already in memory_disable.
CREATE OR REPLACE FUNCTION memory_clear(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
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
            s := memory_scope_lock(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                   p_kind, p_scope_ref);
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

-- B5 read-after-delete verification, in a new transaction after the delete committed,
-- lock-bounded on the scope row.  Counts rows written under a generation older than
-- p_generation (or the one entry) that are still readable through memory_readable or still
-- physically present.  Zero: records the verified erasure (and, for a complete erasure, clears
-- the pending marker).  Otherwise the scope is disabled with failure_reason =
-- verification_failed (C5) and verified_at is NULL.
CREATE OR REPLACE FUNCTION memory_verify_erasure(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
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
            s := memory_scope_lock(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                   p_kind, p_scope_ref);
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

-- C5: a content-free failure (a reason code) on a scope that stays disabled.  The withdrawal's
-- last resort: it waits for the scope row within the same 1 s bound (nothing is ended for it;
-- the erasure stays pending).
CREATE OR REPLACE FUNCTION memory_record_failure(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_reason TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT
SET lock_timeout = '1s' AS $$
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    UPDATE memory_scope
       SET enabled = false, failure_reason = p_reason, failure_at = now()
     WHERE id = (memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                                  p_kind, p_scope_ref)).id
    RETURNING * INTO s;
    IF s.id IS NOT NULL THEN
        PERFORM memory_audit_write(s.id, 'failure', p_reason, s.generation, NULL);
    END IF;
END
$$;

-- L2 step 1, lock-bounded: block the principal's grants and disable every scope of the
-- principal in one transaction, before any clearing.  The principal's lock row, its block row
-- and every scope row of the principal are taken first.
CREATE OR REPLACE FUNCTION memory_disable_principal(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (scope_id UUID, agent_namespace TEXT, agent_name TEXT, scope_kind TEXT,
               scope_ref TEXT, generation BIGINT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    seen  TEXT[];
    ended BIGINT := 0;
BEGIN
    PERFORM memory_guard();
    IF p_issuer_kind IS NULL OR p_issuer IS NULL OR p_subject IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    FOR attempt IN 1..3 LOOP
        BEGIN
            -- Block first, under the lock every grant of this principal shares: grants in
            -- flight commit before the UPDATE below takes its snapshot, later ones see the block.
            PERFORM memory_principal_lock(p_issuer_kind, p_issuer,
                                          memory_principal_ref(p_issuer_kind, p_subject), true);
            INSERT INTO memory_principal_block (principal_issuer_kind, principal_issuer,
                                                principal_ref)
            VALUES (p_issuer_kind, p_issuer, memory_principal_ref(p_issuer_kind, p_subject))
            ON CONFLICT DO NOTHING;
            PERFORM 1 FROM memory_scope
              WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
                AND principal_subject = p_subject
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
         WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
           AND principal_subject = p_subject
        RETURNING memory_scope.id, memory_scope.agent_namespace, memory_scope.agent_name,
                  memory_scope.scope_kind, memory_scope.scope_ref, memory_scope.generation
    ), audited AS (
        INSERT INTO memory_audit (scope_id, operation, outcome, generation)
        SELECT d.id, 'offboard_disable', 'disabled', d.generation FROM disabled d
    )
    SELECT d.id, d.agent_namespace, d.agent_name, d.scope_kind, d.scope_ref, d.generation
      FROM disabled d
     ORDER BY d.id;
END
$$;

-- L2 last step, lock-bounded (every scope row of the principal is taken first): once every
-- scope of an offboarded principal is cleared and verified, its scope rows (the only rows that
-- name the principal and its rooms) are deleted.  Scopes with an unverified erasure or rows
-- left are kept, and counted, for the next offboarding run.  Content-free evidence stays in
-- memory_audit, keyed by the scopes' random ids.
CREATE OR REPLACE FUNCTION memory_purge_principal(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT)
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
                    WHERE b.principal_issuer_kind = p_issuer_kind AND b.principal_issuer = p_issuer
                      AND b.principal_ref = memory_principal_ref(p_issuer_kind, p_subject)) THEN
        RAISE EXCEPTION 'consent_required' USING ERRCODE = 'KGC01';  -- not being offboarded
    END IF;
    FOR attempt IN 1..3 LOOP
        BEGIN
            PERFORM 1 FROM memory_scope
              WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
                AND principal_subject = p_subject
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
              WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
                AND principal_subject = p_subject
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

-- The operator lifts an offboarding block (owner only: not granted to the service role).
CREATE OR REPLACE FUNCTION memory_unblock_principal(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    n BIGINT;
BEGIN
    PERFORM memory_guard();
    IF p_issuer_kind IS NULL OR p_issuer IS NULL OR p_subject IS NULL THEN
        RETURN 0;  -- nothing can be blocked under a NULL key
    END IF;
    PERFORM memory_principal_lock(p_issuer_kind, p_issuer,
                                  memory_principal_ref(p_issuer_kind, p_subject), true);
    DELETE FROM memory_principal_block
     WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
       AND principal_ref = memory_principal_ref(p_issuer_kind, p_subject);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(NULL, 'unblock', CASE WHEN n > 0 THEN 'lifted' ELSE 'none' END,
                               NULL, n);
    RETURN n;
END
$$;

-- Cost admission (ADR 0023 §42, SPEC A1-A3), consulted before any model or embedding work.
-- After the fence (as memory_save), consume p_units from the scope's hourly bucket and, when
-- p_explicit, one explicit operation from the sender's per-minute bucket, all-or-nothing, with
-- the capacities and refill rates of the scope's recorded policy.  Returns 0 when admitted,
-- 1 when the scope's budget refused, 2 when the sender's rate did (nothing consumed then).
-- Buckets are locked in name order, so concurrent admissions cannot deadlock.  p_now NULL
-- means the database clock (never later than it: tests pass an earlier instant).
CREATE OR REPLACE FUNCTION memory_admit(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    t       TIMESTAMPTZ := least(coalesce(p_now, now()), now());
    s       memory_scope%ROWTYPE;
    pol     memory_policy%ROWTYPE;
    names   TEXT[];
    costs   DOUBLE PRECISION[];
    caps    DOUBLE PRECISION[];
    refill  DOUBLE PRECISION[];
    periods DOUBLE PRECISION[];
    n       INTEGER;
    b       memory_admission_bucket%ROWTYPE;
    avail   DOUBLE PRECISION[] := ARRAY[]::DOUBLE PRECISION[];
    stamp   TIMESTAMPTZ[] := ARRAY[]::TIMESTAMPTZ[];
    refused INTEGER := 0;
BEGIN
    PERFORM memory_guard();
    IF p_units IS NULL OR p_units < 1 OR p_units > 1000 OR p_explicit IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                          p_kind, p_scope_ref);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    SELECT * INTO pol FROM memory_policy WHERE version = s.policy_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'policy_not_allowed' USING ERRCODE = 'KGP01';
    END IF;
    names := ARRAY['scope:' || replace(s.id::text, '-', '')];
    costs := ARRAY[p_units::DOUBLE PRECISION];
    caps := ARRAY[pol.scope_ops_per_hour::DOUBLE PRECISION];
    refill := ARRAY[pol.scope_ops_per_hour::DOUBLE PRECISION];
    periods := ARRAY[3600.0::DOUBLE PRECISION];
    IF p_explicit THEN
        -- the principal (its issuer length-prefixed: an issuer may contain '/') and the agent
        names := names || ('sender:' || left(encode(sha256(convert_to(
            p_issuer_kind || '/' || octet_length(p_issuer) || '/' || p_issuer || '/'
            || p_subject || '/' || p_namespace || '/' || p_agent, 'UTF8')), 'hex'), 32));
        costs := costs || 1.0::DOUBLE PRECISION;
        caps := caps || pol.explicit_burst::DOUBLE PRECISION;
        refill := refill || pol.explicit_ops_per_minute::DOUBLE PRECISION;
        periods := periods || 60.0::DOUBLE PRECISION;
    END IF;
    n := cardinality(names);
    INSERT INTO memory_admission_bucket (bucket, tokens, updated_at)
    SELECT u.bucket, u.capacity, t FROM unnest(names, caps) AS u(bucket, capacity)
    ON CONFLICT (bucket) DO NOTHING;
    PERFORM 1 FROM memory_admission_bucket WHERE bucket = ANY (names)
     ORDER BY bucket FOR UPDATE;
    FOR i IN 1..n LOOP
        SELECT * INTO b FROM memory_admission_bucket WHERE bucket = names[i];
        avail := avail || least(
            caps[i],
            b.tokens + greatest(0, extract(epoch FROM t - b.updated_at)::DOUBLE PRECISION)
                       * refill[i] / periods[i]);
        stamp := stamp || greatest(b.updated_at, t);
        IF refused = 0 AND avail[i] + 1e-9 < costs[i] THEN
            refused := i;
        END IF;
    END LOOP;
    IF refused = 0 THEN
        FOR i IN 1..n LOOP
            UPDATE memory_admission_bucket
               SET tokens = avail[i] - costs[i], updated_at = stamp[i]
             WHERE bucket = names[i];
        END LOOP;
    END IF;
    RETURN refused;
END
$$;

-- Fenced save (C3, B3, B4): all facts or none.  The insert trigger re-checks the fence under
-- the scope row lock, fixes created_at/expires_at and enforces both caps.  A fact whose NFC
-- form equals a live entry's of the scope (or an earlier fact of the same call) answers that
-- entry and stores nothing (its expiry is not extended).  The scope row is locked first, so
-- two racing saves of one text cannot both insert it.
CREATE OR REPLACE FUNCTION memory_save(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_contents TEXT[], p_embeddings vector[])
RETURNS TABLE (id UUID, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    IF coalesce(cardinality(p_contents), 0) = 0
       OR cardinality(p_contents) IS DISTINCT FROM cardinality(p_embeddings)
       OR array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_lock(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                           p_kind, p_scope_ref);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    -- every vector is checked, also a duplicate's that stores nothing (the insert trigger
    -- checks only what it inserts)
    IF EXISTS (SELECT 1 FROM unnest(p_embeddings) AS q(e)
                WHERE e IS NULL OR vector_dims(e) <> s.embedding_dimension) THEN
        RAISE EXCEPTION 'invalid_embedding' USING ERRCODE = '22000';
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    WITH facts AS (
        SELECT u.content, u.embedding, u.n, normalize(u.content, NFC) AS norm
          FROM unnest(p_contents, p_embeddings) WITH ORDINALITY AS u(content, embedding, n)
    ), live AS (
        SELECT DISTINCT ON (normalize(r.content, NFC))
               normalize(r.content, NFC) AS norm, r.id, r.created_at, r.expires_at
          FROM memory_readable(s.id) r
         ORDER BY normalize(r.content, NFC), r.created_at, r.id
    ), fresh AS (
        SELECT DISTINCT ON (f.norm) f.content, f.embedding, f.n, f.norm
          FROM facts f
         WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.norm = f.norm)
         ORDER BY f.norm, f.n
    ), inserted AS (
        INSERT INTO memory_entry (scope_id, content, embedding, generation)
        SELECT s.id, x.content, x.embedding, p_generation FROM fresh x ORDER BY x.n
        RETURNING memory_entry.id, memory_entry.created_at, memory_entry.expires_at,
                  normalize(memory_entry.content, NFC) AS norm
    ), answers AS (
        SELECT l.norm, l.id, l.created_at, l.expires_at FROM live l
        UNION ALL
        SELECT i.norm, i.id, i.created_at, i.expires_at FROM inserted i
    )
    SELECT a.id, a.created_at, a.expires_at
      FROM facts f JOIN answers a ON a.norm = f.norm
     ORDER BY f.n;
END
$$;

-- Fenced exact search (C3, B2): cosine top-k among the scope's readable rows.  The fence is
-- repeated inside the read's own snapshot, so a withdrawal that commits between the check and
-- the read yields nothing rather than stale content.
CREATE OR REPLACE FUNCTION memory_search(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embedding vector, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
               distance DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s memory_scope%ROWTYPE;
BEGIN
    PERFORM memory_guard();
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 50 OR p_embedding IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    s := memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                          p_kind, p_scope_ref);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    IF vector_dims(p_embedding) <> s.embedding_dimension THEN
        RAISE EXCEPTION 'invalid_embedding' USING ERRCODE = '22000';
    END IF;
    PERFORM memory_bind_scope(s.id);
    RETURN QUERY
    SELECT r.id, r.content, r.created_at, r.expires_at, r.embedding <=> p_embedding
      FROM memory_readable(s.id) r
     WHERE EXISTS (SELECT 1 FROM memory_scope f
                    WHERE f.id = s.id AND f.enabled AND f.generation = p_generation
                      AND f.consent_expires_at > now() AND f.policy_version = p_policy_version)
     ORDER BY r.embedding <=> p_embedding, r.id
     LIMIT p_limit;
END
$$;

-- Prefetch in one round trip: up to the scope's policy's prefetch_max_subqueries query vectors
-- (at most 8) for one scope in one statement.  The scope is fenced once (guard, fence,
-- dimension check, RLS binding), then each query ordinal gets exactly what memory_search would
-- return for it: cosine top-p_limit among the scope's readable rows (read-time expiry before
-- the LIMIT, through memory_readable), ordered by distance then id, with the fence repeated
-- inside the read's own snapshot.  Rows are tagged with the 1-based ordinal of their query
-- vector in p_embeddings.  22023 for a limit outside 1..50 or no, NULL, too many or
-- multi-dimensional query vectors; 22000 for a vector of another dimension than the consent's.
CREATE OR REPLACE FUNCTION memory_search_many(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT,
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
    s := memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                          p_kind, p_scope_ref);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    IF cardinality(p_embeddings) > coalesce(
           (SELECT p.prefetch_max_subqueries FROM memory_policy p
             WHERE p.version = s.policy_version), 0) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
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

-- ===============================================================================================
-- Owner only: helpers of the entry points (the 7-column key)
-- ===============================================================================================

-- The scope row for a typed key (NULL row when absent).
CREATE OR REPLACE FUNCTION memory_scope_row(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT)
RETURNS memory_scope
LANGUAGE sql STABLE AS $$
    SELECT *
      FROM memory_scope
     WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
       AND principal_subject = p_subject
       AND agent_namespace = p_namespace AND agent_name = p_agent
       AND scope_kind = p_kind AND scope_ref = p_scope_ref
$$;

-- The same row, locked against concurrent writers of this scope (grant, clear, verify, and the
-- insert fence, which takes the same lock) until the calling transaction ends.
CREATE OR REPLACE FUNCTION memory_scope_lock(
    p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_scope_ref TEXT)
RETURNS memory_scope
LANGUAGE sql VOLATILE AS $$
    SELECT *
      FROM memory_scope
     WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
       AND principal_subject = p_subject
       AND agent_namespace = p_namespace AND agent_name = p_agent
       AND scope_kind = p_kind AND scope_ref = p_scope_ref
       FOR NO KEY UPDATE
$$;

-- memory_principal_ref(kind, subject), unchanged from version 15: the opaque part of a
-- principal's block and lock rows, salted over (issuer kind, subject); the issuer itself is
-- those rows' other key column.

-- The per-principal lock row a grant shares and an offboarding takes exclusively (row locks,
-- not advisory locks: no caller can take or hold them outside these functions).
CREATE OR REPLACE FUNCTION memory_principal_lock(
    p_issuer_kind TEXT, p_issuer TEXT, p_ref BYTEA, p_exclusive BOOLEAN) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO memory_principal_lock (principal_issuer_kind, principal_issuer, principal_ref)
    VALUES (p_issuer_kind, p_issuer, p_ref) ON CONFLICT DO NOTHING;
    IF p_exclusive THEN
        PERFORM 1 FROM memory_principal_lock
          WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
            AND principal_ref = p_ref
            FOR UPDATE;
    ELSE
        PERFORM 1 FROM memory_principal_lock
          WHERE principal_issuer_kind = p_issuer_kind AND principal_issuer = p_issuer
            AND principal_ref = p_ref
            FOR SHARE;
    END IF;
END
$$;

-- The generation a bound call may use: the one its redemption captured, only for the login
-- that redeemed the request (KGJ03 otherwise).  p_generation NULL (forget, which sends none)
-- accepts the captured one, NULL included.
CREATE OR REPLACE FUNCTION memory_redeemed_generation(
    p_jti TEXT, p_issuer_kind TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT,
    p_agent TEXT, p_kind TEXT, p_scope_ref TEXT, p_generation BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    u memory_assertion_use%ROWTYPE;
BEGIN
    SELECT * INTO u FROM memory_assertion_use WHERE jti = p_jti;
    IF u.jti IS NULL OR u.work_until IS NULL OR u.work_until <= now()
       OR u.login IS DISTINCT FROM session_user::TEXT
       OR u.scope_id IS DISTINCT FROM
          (memory_scope_row(p_issuer_kind, p_issuer, p_subject, p_namespace, p_agent,
                            p_kind, p_scope_ref)).id THEN
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

-- C3: the generation only ever increases and a scope's key never changes.
CREATE OR REPLACE FUNCTION memory_scope_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.generation < OLD.generation
       OR NEW.principal_issuer_kind IS DISTINCT FROM OLD.principal_issuer_kind
       OR NEW.principal_issuer IS DISTINCT FROM OLD.principal_issuer
       OR NEW.principal_subject IS DISTINCT FROM OLD.principal_subject
       OR NEW.agent_namespace IS DISTINCT FROM OLD.agent_namespace
       OR NEW.agent_name IS DISTINCT FROM OLD.agent_name
       OR NEW.scope_kind IS DISTINCT FROM OLD.scope_kind
       OR NEW.scope_ref IS DISTINCT FROM OLD.scope_ref THEN
        RAISE EXCEPTION 'immutable_entry' USING ERRCODE = 'KGI01';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;


-- ===============================================================================================
-- The issuer registry (the owner and kagent_memory_operator; every governed role reads it)
-- ===============================================================================================

-- Register or replace an issuer: 'registered' when new; 'unchanged' when identical and enabled;
-- 'replaced' otherwise (a disabled issuer registered again is enabled).  The audience is stored
-- sorted and distinct; a pattern must be anchored ('^...$') and compile as a whole
-- ('^(?:' || pattern || ')$'); 22023 invalid_issuer otherwise.  A replacement applies from the
-- next grant on: a consent keeps what it was given for (its output audience included), and a
-- consent whose audience the issuer no longer admits captures nothing new only after it is
-- renewed, which then needs a withdrawal first.
CREATE OR REPLACE FUNCTION memory_register_issuer(
    p_issuer_kind TEXT, p_issuer TEXT, p_scope_kind TEXT, p_subject_pattern TEXT,
    p_scope_ref_pattern TEXT, p_audience TEXT[])
RETURNS TEXT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    old memory_issuer%ROWTYPE;
    aud TEXT[] := memory_sorted(p_audience);
    outcome TEXT;
BEGIN
    PERFORM memory_guard();
    IF p_issuer_kind IS NULL OR p_issuer IS NULL OR p_scope_kind IS NULL
       OR p_subject_pattern IS NULL OR aud IS NULL THEN
        RAISE EXCEPTION 'invalid_issuer' USING ERRCODE = '22023';
    END IF;
    BEGIN
        PERFORM '' ~ ('^(?:' || p_subject_pattern || ')$'),
                '' ~ ('^(?:' || coalesce(p_scope_ref_pattern, '') || ')$');
    EXCEPTION WHEN invalid_regular_expression THEN
        RAISE EXCEPTION 'invalid_issuer' USING ERRCODE = '22023';
    END;
    SELECT * INTO old FROM memory_issuer
     WHERE issuer_kind = p_issuer_kind AND issuer = p_issuer FOR UPDATE;
    IF FOUND AND old.enabled
       AND (old.scope_kind, old.subject_pattern, old.scope_ref_pattern, old.audience)
           IS NOT DISTINCT FROM (p_scope_kind, p_subject_pattern, p_scope_ref_pattern, aud) THEN
        RETURN 'unchanged';
    END IF;
    outcome := CASE WHEN old.issuer_kind IS NULL THEN 'registered' ELSE 'replaced' END;
    BEGIN
        INSERT INTO memory_issuer AS m (issuer_kind, issuer, scope_kind, subject_pattern,
                                        scope_ref_pattern, audience, enabled)
        VALUES (p_issuer_kind, p_issuer, p_scope_kind, p_subject_pattern, p_scope_ref_pattern,
                aud, true)
        ON CONFLICT (issuer_kind, issuer) DO UPDATE SET
            scope_kind = EXCLUDED.scope_kind, subject_pattern = EXCLUDED.subject_pattern,
            scope_ref_pattern = EXCLUDED.scope_ref_pattern, audience = EXCLUDED.audience,
            enabled = true, registered_at = now();
    EXCEPTION WHEN check_violation OR not_null_violation THEN
        RAISE EXCEPTION 'invalid_issuer' USING ERRCODE = '22023';
    END;
    PERFORM memory_audit_write(NULL, 'issuer', outcome, NULL, NULL);
    RETURN outcome;
END
$$;

-- Disable an issuer: its principals can no longer consent, and their requests capture no
-- generation; withdrawal, forget, status, inspect and offboarding keep working.  Returns
-- whether an enabled issuer was disabled.  Registering it again enables it.
CREATE OR REPLACE FUNCTION memory_disable_issuer(p_issuer_kind TEXT, p_issuer TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    done BOOLEAN;
BEGIN
    PERFORM memory_guard();
    UPDATE memory_issuer SET enabled = false
     WHERE issuer_kind = p_issuer_kind AND issuer = p_issuer AND enabled;
    done := FOUND;
    PERFORM memory_audit_write(NULL, 'issuer', CASE WHEN done THEN 'disabled' ELSE 'none' END,
                               NULL, NULL);
    RETURN done;
END
$$;

-- The registered issuer (zero rows when unregistered), for every governed role: a caller
-- checks its own issuer configuration against it early (the grant checks it anyway).
CREATE OR REPLACE FUNCTION memory_get_issuer(p_issuer_kind TEXT, p_issuer TEXT)
RETURNS TABLE (issuer_kind TEXT, issuer TEXT, scope_kind TEXT, subject_pattern TEXT,
               scope_ref_pattern TEXT, audience TEXT[], enabled BOOLEAN)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT i.issuer_kind, i.issuer, i.scope_kind, i.subject_pattern, i.scope_ref_pattern,
           i.audience, i.enabled
      FROM memory_issuer i WHERE i.issuer_kind = p_issuer_kind AND i.issuer = p_issuer
$$;


-- ===============================================================================================
-- LIBRARY ONLY: the Matrix issuer's conveniences and version 15's signatures
-- ===============================================================================================
-- None of this is in kagent's own governed baseline.  It keeps callers written for version 15
-- (the kagent v0.9.11 carry series, the current kagent-main series) working unchanged: their
-- `issuer` argument is the issuer KIND ('matrix'), and the issuer is the MXID's homeserver
-- (memory_matrix_issuer).  Each wrapper answers what version 15 answered, reason codes
-- included (a principal or room of another server, or no recorded local server: KGD02).

-- S5 configuration: the local homeserver is set once (by the first store that opens, or by the
-- operator at migration) and returned, so a store configured for another server refuses to
-- start.  Called with the recorded server, it also registers the Matrix issuer of that server
-- when none is registered ('matrix', server, 'control_room', its users' MXIDs, its rooms, the
-- audience [server]); an issuer the operator disabled or replaced is left as it is.
CREATE OR REPLACE FUNCTION memory_configure(p_local_server TEXT) RETURNS TEXT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    server TEXT;
    esc    TEXT;
BEGIN
    PERFORM memory_guard();
    UPDATE memory_config SET local_server = p_local_server
     WHERE local_server IS NULL AND p_local_server IS NOT NULL
    RETURNING local_server INTO server;
    IF FOUND THEN
        PERFORM memory_audit_write(NULL, 'configure', 'local_server_set', NULL, NULL);
    ELSE
        SELECT c.local_server INTO server FROM memory_config c;
    END IF;
    IF server IS NOT NULL AND server = p_local_server THEN
        esc := regexp_replace(server, '([.\[\]])', '\\\1', 'g');
        INSERT INTO memory_issuer (issuer_kind, issuer, scope_kind, subject_pattern,
                                   scope_ref_pattern, audience)
        VALUES ('matrix', server, 'control_room', '^@[!-9;-~]+:' || esc || '$',
                '^![!-9;-~]+(:' || esc || ')?$', ARRAY[server])
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM memory_audit_write(NULL, 'issuer', 'registered', NULL, NULL);
        END IF;
    END IF;
    RETURN server;
END
$$;

-- The issuer of a version-15 key: for the 'matrix' kind, the homeserver of the subject (a
-- complete MXID names its server after the first ':', which a localpart cannot hold) -- for
-- every principal version 15 could serve, the recorded local homeserver -- else NULL (no scope
-- matches a NULL issuer).  So a wrapper keys a principal exactly as the issuer-generic
-- signatures and the library do ('matrix', <homeserver>, <MXID>).
CREATE OR REPLACE FUNCTION memory_matrix_issuer(p_issuer TEXT, p_subject TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_issuer = 'matrix' AND strpos(p_subject, ':') > 0
                THEN substr(p_subject, strpos(p_subject, ':') + 1) END
$$;

-- Version 15's grant: its own first check (KGD01 for another issuer or scope kind), then the
-- generic grant, whose issuer refusals are version 15's KGD02 remote_server_denied (a remote
-- principal or room, a foreign audience, no local server recorded: its issuer is unregistered).
CREATE OR REPLACE FUNCTION memory_grant(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_purpose TEXT, p_policy_version TEXT, p_embedding_dimension INTEGER,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS TABLE (scope_id UUID, generation BIGINT, granted_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_kind IS DISTINCT FROM 'control_room' OR p_issuer IS DISTINCT FROM 'matrix' THEN
        RAISE EXCEPTION 'scope_denied' USING ERRCODE = 'KGD01';
    END IF;
    BEGIN
        RETURN QUERY
        SELECT * FROM memory_grant(p_issuer,
                                   coalesce(memory_matrix_issuer(p_issuer, p_subject), ''),
                                   p_subject, p_namespace, p_agent, p_kind, p_room, p_purpose,
                                   p_policy_version, p_embedding_dimension, p_classification,
                                   p_output_audience);
    EXCEPTION WHEN SQLSTATE 'KGD04' OR SQLSTATE 'KGD05' OR SQLSTATE 'KGD06'
                   OR SQLSTATE 'KGD07' THEN
        RAISE EXCEPTION 'remote_server_denied' USING ERRCODE = 'KGD02';
    END;
END
$$;

CREATE OR REPLACE FUNCTION memory_disable_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (scope_id UUID, agent_namespace TEXT, agent_name TEXT, scope_kind TEXT,
               room_id TEXT, generation BIGINT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_disable_principal(p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                          p_subject)
$$;

CREATE OR REPLACE FUNCTION memory_purge_principal(p_issuer TEXT, p_subject TEXT)
RETURNS TABLE (purged BIGINT, kept BIGINT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_purge_principal(p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                          p_subject)
$$;

CREATE OR REPLACE FUNCTION memory_unblock_principal(p_issuer TEXT, p_subject TEXT) RETURNS BIGINT
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_unblock_principal(p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                          p_subject)
$$;

CREATE OR REPLACE FUNCTION memory_redeem_assertion(
    p_jti TEXT, p_expires_at TIMESTAMPTZ, p_issuer TEXT, p_subject TEXT, p_namespace TEXT,
    p_agent TEXT, p_kind TEXT, p_room TEXT, p_policy_version TEXT, p_classification TEXT,
    p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_redeem_assertion(p_jti, p_expires_at, p_issuer, memory_matrix_issuer(p_issuer,
                                   p_subject), p_subject, p_namespace, p_agent, p_kind, p_room,
                                   p_policy_version, p_classification, p_output_audience)
$$;

CREATE OR REPLACE FUNCTION memory_redeem_admit(
    p_jti TEXT, p_expires_at TIMESTAMPTZ, p_issuer TEXT, p_subject TEXT, p_namespace TEXT,
    p_agent TEXT, p_kind TEXT, p_room TEXT, p_policy_version TEXT, p_classification TEXT,
    p_output_audience TEXT[], p_units INTEGER, p_explicit BOOLEAN)
RETURNS TABLE (generation BIGINT, refused INTEGER, admit_state TEXT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_redeem_admit(p_jti, p_expires_at, p_issuer, memory_matrix_issuer(p_issuer,
                                      p_subject), p_subject, p_namespace, p_agent, p_kind, p_room,
                                      p_policy_version, p_classification, p_output_audience,
                                      p_units, p_explicit)
$$;

CREATE OR REPLACE FUNCTION memory_admit_bound(
    p_jti TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_room TEXT, p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_admit_bound(p_jti, p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                              p_subject, p_namespace, p_agent, p_kind, p_room, p_generation,
                              p_policy_version, p_units, p_explicit, p_now)
$$;

CREATE OR REPLACE FUNCTION memory_save_bound(
    p_jti TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_room TEXT, p_generation BIGINT, p_policy_version TEXT, p_contents TEXT[],
    p_embeddings vector[])
RETURNS TABLE (id UUID, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_save_bound(p_jti, p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                    p_subject, p_namespace, p_agent, p_kind, p_room, p_generation,
                                    p_policy_version, p_contents, p_embeddings)
$$;

CREATE OR REPLACE FUNCTION memory_search_bound(
    p_jti TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_room TEXT, p_generation BIGINT, p_policy_version TEXT, p_embedding vector, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
               distance DOUBLE PRECISION)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_search_bound(p_jti, p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                      p_subject, p_namespace, p_agent, p_kind, p_room,
                                      p_generation, p_policy_version, p_embedding, p_limit)
$$;

CREATE OR REPLACE FUNCTION memory_search_many_bound(
    p_jti TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_room TEXT, p_generation BIGINT, p_policy_version TEXT, p_embeddings vector[], p_limit INTEGER)
RETURNS TABLE (query_ordinal INTEGER, id UUID, content TEXT, created_at TIMESTAMPTZ,
               expires_at TIMESTAMPTZ, distance DOUBLE PRECISION)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_search_many_bound(p_jti, p_issuer, memory_matrix_issuer(p_issuer,
                                           p_subject), p_subject, p_namespace, p_agent, p_kind,
                                           p_room, p_generation, p_policy_version, p_embeddings,
                                           p_limit)
$$;

CREATE OR REPLACE FUNCTION memory_forget_bound(
    p_jti TEXT, p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,
    p_room TEXT, p_generation BIGINT, p_entry_id UUID)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_forget_bound(p_jti, p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                      p_subject, p_namespace, p_agent, p_kind, p_room,
                                      p_generation, p_entry_id)
$$;

CREATE OR REPLACE FUNCTION memory_record_request(
    p_jti TEXT, p_expires_at TIMESTAMPTZ, p_issuer TEXT, p_subject TEXT, p_namespace TEXT,
    p_agent TEXT, p_kind TEXT, p_room TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_record_request(p_jti, p_expires_at, p_issuer, memory_matrix_issuer(p_issuer,
                                 p_subject), p_subject, p_namespace, p_agent, p_kind, p_room,
                                 p_classification, p_output_audience)
$$;

CREATE OR REPLACE FUNCTION memory_generation(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_policy_version TEXT, p_classification TEXT, p_output_audience TEXT[])
RETURNS BIGINT
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_generation(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                             p_namespace, p_agent, p_kind, p_room, p_policy_version,
                             p_classification, p_output_audience)
$$;

CREATE OR REPLACE FUNCTION memory_status(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS TABLE (enabled BOOLEAN, purpose TEXT, policy_version TEXT, generation BIGINT,
               consent_expires_at TIMESTAMPTZ, max_ttl INTERVAL, entry_cap INTEGER,
               entry_count BIGINT, last_verified_erasure_at TIMESTAMPTZ, failure_reason TEXT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_status(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                                p_namespace, p_agent, p_kind, p_room)
$$;

CREATE OR REPLACE FUNCTION memory_inspect(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_after_created TIMESTAMPTZ, p_after_id UUID, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_inspect(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                                 p_namespace, p_agent, p_kind, p_room, p_after_created, p_after_id,
                                 p_limit)
$$;

CREATE OR REPLACE FUNCTION memory_forget(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_entry_id UUID)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_forget(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                                p_namespace, p_agent, p_kind, p_room, p_entry_id)
$$;

CREATE OR REPLACE FUNCTION memory_disable(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT)
RETURNS TABLE (scope_id UUID, generation BIGINT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_disable(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                                 p_namespace, p_agent, p_kind, p_room)
$$;

CREATE OR REPLACE FUNCTION memory_clear(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_advance BOOLEAN)
RETURNS TABLE (generation BIGINT, deleted BIGINT)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_clear(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                               p_namespace, p_agent, p_kind, p_room, p_advance)
$$;

CREATE OR REPLACE FUNCTION memory_verify_erasure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_entry_id UUID, p_complete BOOLEAN)
RETURNS TABLE (generation BIGINT, verified_at TIMESTAMPTZ)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_verify_erasure(p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                        p_subject, p_namespace, p_agent, p_kind, p_room,
                                        p_generation, p_entry_id, p_complete)
$$;

CREATE OR REPLACE FUNCTION memory_record_failure(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_reason TEXT)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_record_failure(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                                 p_namespace, p_agent, p_kind, p_room, p_reason)
$$;

CREATE OR REPLACE FUNCTION memory_admit(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT memory_admit(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                        p_namespace, p_agent, p_kind, p_room, p_generation, p_policy_version,
                        p_units, p_explicit, p_now)
$$;

CREATE OR REPLACE FUNCTION memory_save(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_contents TEXT[], p_embeddings vector[])
RETURNS TABLE (id UUID, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_save(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                              p_namespace, p_agent, p_kind, p_room, p_generation, p_policy_version,
                              p_contents, p_embeddings)
$$;

CREATE OR REPLACE FUNCTION memory_search(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embedding vector, p_limit INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
               distance DOUBLE PRECISION)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_search(p_issuer, memory_matrix_issuer(p_issuer, p_subject), p_subject,
                                p_namespace, p_agent, p_kind, p_room, p_generation,
                                p_policy_version, p_embedding, p_limit)
$$;

CREATE OR REPLACE FUNCTION memory_search_many(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_embeddings vector[], p_limit INTEGER)
RETURNS TABLE (query_ordinal INTEGER, id UUID, content TEXT, created_at TIMESTAMPTZ,
               expires_at TIMESTAMPTZ, distance DOUBLE PRECISION)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT * FROM memory_search_many(p_issuer, memory_matrix_issuer(p_issuer, p_subject),
                                     p_subject, p_namespace, p_agent, p_kind, p_room, p_generation,
                                     p_policy_version, p_embeddings, p_limit)
$$;


-- ===============================================================================================
-- The schema version, privileges and row-level security
-- ===============================================================================================

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 16 $$;

-- The version-15 signatures keep their privileges (CREATE OR REPLACE keeps a function's ACL).
-- Nobody but the owner touches the registry table.
REVOKE ALL ON memory_issuer
    FROM PUBLIC, kagent_memory_service, kagent_memory_runtime, kagent_memory_bridge,
    kagent_memory_operator, kagent_memory_grants;

REVOKE ALL ON FUNCTION
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_disable_principal(TEXT, TEXT, TEXT),
    memory_purge_principal(TEXT, TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT, TEXT),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_register_issuer(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_disable_issuer(TEXT, TEXT),
    memory_get_issuer(TEXT, TEXT),
    memory_matrix_issuer(TEXT, TEXT),
    memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_principal_lock(TEXT, TEXT, BYTEA, BOOLEAN),
    memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT)
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    memory_get_issuer(TEXT, TEXT),
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID)
TO kagent_memory_runtime;

GRANT EXECUTE ON FUNCTION
    memory_get_issuer(TEXT, TEXT),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT)
TO kagent_memory_bridge;

GRANT EXECUTE ON FUNCTION
    memory_get_issuer(TEXT, TEXT),
    memory_register_issuer(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_disable_issuer(TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_disable_principal(TEXT, TEXT, TEXT),
    memory_purge_principal(TEXT, TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT, TEXT)
TO kagent_memory_operator;

GRANT EXECUTE ON FUNCTION
    memory_get_issuer(TEXT, TEXT),
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER)
TO kagent_memory_service;

-- B7 for the new table, as for every governed table (000015): owner only, FORCEd.
DO $$
BEGIN
    ALTER TABLE memory_issuer ENABLE ROW LEVEL SECURITY;
    ALTER TABLE memory_issuer FORCE ROW LEVEL SECURITY;
    EXECUTE 'DROP POLICY IF EXISTS memory_issuer_owner_only ON memory_issuer';
    EXECUTE format('CREATE POLICY memory_issuer_owner_only ON memory_issuer USING (current_user = %L)',
                   current_user);
END
$$;
