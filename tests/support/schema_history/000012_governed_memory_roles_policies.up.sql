-- The database owns the policy and the request, not the caller (ADR 0023 §41-42, SPEC T1).
--
-- 1. Registered policies.  Until now memory_grant took the entry cap, fact size, TTL and consent
--    lifetime from its caller and memory_admit the bucket capacities and refill rates, so the
--    ADR's limits held for honest callers only.  A policy is now a row (memory_policy) that only
--    the owner or an operator writes (memory_register_policy), immutable once a consent refers
--    to it; memory_grant names a registered version the operator allows for the agent
--    (memory_allow_policy) and records exactly its limits; memory_admit reads the capacities of
--    the scope's recorded policy.  No entry point takes a limit as an argument.  The ADR 0023
--    prototype policy is registered here, allowed for every agent.
-- 2. Separate roles for separate callers (NOLOGIN, cluster-wide like kagent_memory_service):
--      kagent_memory_runtime   an agent's runtime: redeem a request, then the bound calls of
--                              that request (admit, save, search, search_many, forget);
--      kagent_memory_bridge    the bridge: grant, generation, status, inspect, forget, the
--                              withdrawal steps (disable, clear, verify, record failure) and
--                              recording the requests it relays;
--      kagent_memory_operator  configure the local server, register and allow policies,
--                              register runtime logins, offboard, purge, unblock, sweep, report.
--    kagent_memory_service keeps EXECUTE on what it had (the union of runtime and bridge, plus
--    configure, sweep, report and the unbound runtime calls) for one release: DEPRECATED, and
--    its logins get none of the protection of 3.
-- 3. Requests recorded by the bridge.  The database cannot verify the bridge's Ed25519
--    signature, but the bridge holds its own login: when it relays a request it records the
--    request's jti, exact scope key, classification, output audience and expiry
--    (memory_record_request).  The operator registers each agent's runtime login for that agent
--    (memory_register_runtime); such a login redeems only a recorded request, for the exact key
--    recorded, of an agent it is registered for (KGJ04 request_not_recorded otherwise), and every
--    bound call of the request must come from the login that redeemed it.  A login that
--    verifies the signatures itself (the kagent controller) is registered as a verifier
--    (memory_register_verifier) and may redeem requests nobody recorded.  NULL classification
--    or audience arguments are refused (22023), never read as "no check".
-- 4. One copy of a fact: memory_save answers the id of a live entry of the scope whose text is
--    identical after Unicode NFC normalisation (checked under the scope row lock) and stores
--    nothing for it; its expiry is not extended.  Needs a UTF8 database (normalize()).
-- 5. memory_schema_version() conforms: SECURITY DEFINER with the fixed search_path, like every
--    other entry point.
--
-- New SQLSTATEs: KGP01 policy_not_allowed (unregistered, not allowed for the agent, or an
-- embedding dimension it does not list), KGP02 policy_immutable, KGJ04 request_not_recorded,
-- KGR03 a role of 2 is missing and the migrating role may not create roles.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DO $$
DECLARE
    r TEXT;
BEGIN
    FOREACH r IN ARRAY ARRAY['kagent_memory_runtime', 'kagent_memory_bridge'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                            WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
                RAISE EXCEPTION 'role % is missing and the migrating role may not create roles', r
                    USING ERRCODE = 'KGR03',
                          HINT = format('have an administrator run: CREATE ROLE %I NOLOGIN', r);
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created concurrently by another database's migration
            END;
        END IF;
        IF NOT has_schema_privilege(r, current_schema(), 'USAGE') THEN
            EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), r);
        END IF;
    END LOOP;
END
$$;

-- 1. Policies ---------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS memory_policy (
    version                     TEXT        PRIMARY KEY,
    max_ttl                     INTERVAL    NOT NULL,
    entry_cap                   INTEGER     NOT NULL,
    fact_max_bytes              INTEGER     NOT NULL,
    consent_max_age             INTERVAL    NOT NULL,
    prefetch_max_subqueries     INTEGER     NOT NULL,
    prefetch_subquery_max_bytes INTEGER     NOT NULL,
    explicit_ops_per_minute     INTEGER     NOT NULL,
    explicit_burst              INTEGER     NOT NULL,
    scope_ops_per_hour          INTEGER     NOT NULL,
    autosave_every_user_turns   INTEGER     NOT NULL,
    summariser_input_max_bytes  INTEGER     NOT NULL,
    summariser_max_facts        INTEGER     NOT NULL,
    search_limit                INTEGER     NOT NULL,
    -- the embedding dimensions a consent under this policy may record (one per grant)
    embedding_dimensions        INTEGER[]   NOT NULL,
    registered_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT memory_policy_version CHECK (version ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    CONSTRAINT memory_policy_limits CHECK (
        max_ttl BETWEEN INTERVAL '1 minute' AND INTERVAL '365 days'
        AND consent_max_age BETWEEN INTERVAL '1 minute' AND INTERVAL '3650 days'
        AND entry_cap BETWEEN 1 AND 10000
        AND fact_max_bytes BETWEEN 1 AND 8192
        AND prefetch_max_subqueries BETWEEN 1 AND 8
        AND prefetch_subquery_max_bytes BETWEEN 1 AND 65536
        AND explicit_ops_per_minute BETWEEN 1 AND 100000
        AND explicit_burst BETWEEN 1 AND 100000
        AND scope_ops_per_hour BETWEEN 1 AND 1000000
        AND autosave_every_user_turns BETWEEN 1 AND 10000
        AND summariser_input_max_bytes BETWEEN 1 AND 1048576
        AND summariser_max_facts BETWEEN 1 AND 1000
        AND search_limit BETWEEN 1 AND 50
        AND array_ndims(embedding_dimensions) = 1
        AND cardinality(embedding_dimensions) BETWEEN 1 AND 8
        AND 1 <= ALL (embedding_dimensions) AND 16000 >= ALL (embedding_dimensions)
        AND array_position(embedding_dimensions, NULL) IS NULL)
);

-- Which agents may consent under which policy.  NULL agent: every agent of the namespace;
-- NULL namespace (and agent): every agent.
CREATE TABLE IF NOT EXISTS memory_policy_allowance (
    policy_version  TEXT NOT NULL REFERENCES memory_policy (version),
    agent_namespace TEXT,
    agent_name      TEXT,
    CONSTRAINT memory_policy_allowance_shape CHECK (agent_namespace IS NOT NULL OR agent_name IS NULL)
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_memory_policy_allowance
    ON memory_policy_allowance (policy_version, coalesce(agent_namespace, ''), coalesce(agent_name, ''));

-- A policy a consent refers to never changes, whoever tries (owner included).
CREATE OR REPLACE FUNCTION memory_policy_immutable() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT FROM memory_scope s WHERE s.policy_version = OLD.version) THEN
        RAISE EXCEPTION 'policy_immutable' USING ERRCODE = 'KGP02';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE OR REPLACE TRIGGER memory_policy_immutable
    BEFORE UPDATE OR DELETE ON memory_policy
    FOR EACH ROW EXECUTE FUNCTION memory_policy_immutable();

-- 3. Recorded requests and registered logins ----------------------------------------------------

CREATE TABLE IF NOT EXISTS memory_request (
    jti              TEXT        PRIMARY KEY,
    principal_issuer TEXT        NOT NULL,
    principal_subject TEXT       NOT NULL,
    agent_namespace  TEXT        NOT NULL,
    agent_name       TEXT        NOT NULL,
    scope_kind       TEXT        NOT NULL,
    room_id          TEXT        NOT NULL,
    classification   TEXT        NOT NULL,
    output_audience  TEXT[]      NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    forget_at        TIMESTAMPTZ NOT NULL,
    CONSTRAINT memory_request_jti CHECK (jti ~ '^[A-Za-z0-9_-]{16,64}$')
);
CREATE INDEX IF NOT EXISTS idx_memory_request_forget_at ON memory_request (forget_at);

CREATE TABLE IF NOT EXISTS memory_runtime_login (
    login           TEXT NOT NULL,
    agent_namespace TEXT NOT NULL,
    agent_name      TEXT NOT NULL,
    PRIMARY KEY (login, agent_namespace, agent_name)
);

CREATE TABLE IF NOT EXISTS memory_verifier_login (
    login TEXT PRIMARY KEY
);

-- The redemption records the login that redeemed it; its bound calls must come from it.
ALTER TABLE memory_assertion_use ADD COLUMN IF NOT EXISTS login TEXT;

REVOKE ALL ON memory_policy, memory_policy_allowance, memory_request, memory_runtime_login,
    memory_verifier_login FROM PUBLIC, kagent_memory_service, kagent_memory_runtime,
    kagent_memory_bridge, kagent_memory_operator;
REVOKE ALL ON FUNCTION memory_policy_immutable() FROM PUBLIC;
DO $$
DECLARE
    t TEXT;
BEGIN  -- the owner as a constant, as in 000004
    FOREACH t IN ARRAY ARRAY['memory_policy', 'memory_policy_allowance', 'memory_request',
                             'memory_runtime_login', 'memory_verifier_login'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('DROP POLICY IF EXISTS %I ON %I', t || '_owner_only', t);
        EXECUTE format('CREATE POLICY %I ON %I USING (current_user = %L)',
                       t || '_owner_only', t, current_user);
    END LOOP;
END
$$;

-- The ADR 0023 prototype policy (§41-42), allowed for every agent.  Its dimensions are the
-- common embedders': MiniLM 384, kagent-compatible 768, BGE-M3 1024, OpenAI 1536 and 3072.
INSERT INTO memory_policy (version, max_ttl, entry_cap, fact_max_bytes, consent_max_age,
                           prefetch_max_subqueries, prefetch_subquery_max_bytes,
                           explicit_ops_per_minute, explicit_burst, scope_ops_per_hour,
                           autosave_every_user_turns, summariser_input_max_bytes,
                           summariser_max_facts, search_limit, embedding_dimensions)
VALUES ('adr0023-prototype-1', INTERVAL '7 days', 100, 512, INTERVAL '90 days', 8, 512, 6, 3, 60,
        5, 16384, 10, 5, ARRAY[384, 768, 1024, 1536, 3072])
ON CONFLICT (version) DO NOTHING;
INSERT INTO memory_policy_allowance (policy_version, agent_namespace, agent_name)
SELECT 'adr0023-prototype-1', NULL, NULL
 WHERE NOT EXISTS (SELECT FROM memory_policy_allowance
                    WHERE policy_version = 'adr0023-prototype-1' AND agent_namespace IS NULL);

-- Register a policy (operator).  'registered' when new; 'unchanged' when identical; 'replaced'
-- when different and no consent refers to it yet; KGP02 when one does.
CREATE OR REPLACE FUNCTION memory_register_policy(
    p_version TEXT, p_max_ttl INTERVAL, p_entry_cap INTEGER, p_fact_max_bytes INTEGER,
    p_consent_max_age INTERVAL, p_prefetch_max_subqueries INTEGER,
    p_prefetch_subquery_max_bytes INTEGER, p_explicit_ops_per_minute INTEGER,
    p_explicit_burst INTEGER, p_scope_ops_per_hour INTEGER, p_autosave_every_user_turns INTEGER,
    p_summariser_input_max_bytes INTEGER, p_summariser_max_facts INTEGER, p_search_limit INTEGER,
    p_embedding_dimensions INTEGER[])
RETURNS TEXT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    old  memory_policy%ROWTYPE;
    dims INTEGER[];
BEGIN
    PERFORM memory_guard();
    dims := ARRAY(SELECT DISTINCT d FROM unnest(p_embedding_dimensions) d ORDER BY 1);
    IF p_version IS NULL OR p_embedding_dimensions IS NULL
       OR cardinality(dims) IS DISTINCT FROM cardinality(p_embedding_dimensions) THEN
        RAISE EXCEPTION 'invalid_policy' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO old FROM memory_policy WHERE version = p_version FOR UPDATE;
    IF FOUND THEN
        IF (old.max_ttl, old.entry_cap, old.fact_max_bytes, old.consent_max_age,
            old.prefetch_max_subqueries, old.prefetch_subquery_max_bytes,
            old.explicit_ops_per_minute, old.explicit_burst, old.scope_ops_per_hour,
            old.autosave_every_user_turns, old.summariser_input_max_bytes,
            old.summariser_max_facts, old.search_limit, old.embedding_dimensions)
           IS NOT DISTINCT FROM
           (p_max_ttl, p_entry_cap, p_fact_max_bytes, p_consent_max_age,
            p_prefetch_max_subqueries, p_prefetch_subquery_max_bytes,
            p_explicit_ops_per_minute, p_explicit_burst, p_scope_ops_per_hour,
            p_autosave_every_user_turns, p_summariser_input_max_bytes,
            p_summariser_max_facts, p_search_limit, dims) THEN
            RETURN 'unchanged';
        END IF;
    END IF;
    BEGIN
        INSERT INTO memory_policy AS m (version, max_ttl, entry_cap, fact_max_bytes,
            consent_max_age, prefetch_max_subqueries, prefetch_subquery_max_bytes,
            explicit_ops_per_minute, explicit_burst, scope_ops_per_hour,
            autosave_every_user_turns, summariser_input_max_bytes, summariser_max_facts,
            search_limit, embedding_dimensions)
        VALUES (p_version, p_max_ttl, p_entry_cap, p_fact_max_bytes, p_consent_max_age,
                p_prefetch_max_subqueries, p_prefetch_subquery_max_bytes,
                p_explicit_ops_per_minute, p_explicit_burst, p_scope_ops_per_hour,
                p_autosave_every_user_turns, p_summariser_input_max_bytes,
                p_summariser_max_facts, p_search_limit, dims)
        ON CONFLICT (version) DO UPDATE SET
            max_ttl = EXCLUDED.max_ttl, entry_cap = EXCLUDED.entry_cap,
            fact_max_bytes = EXCLUDED.fact_max_bytes, consent_max_age = EXCLUDED.consent_max_age,
            prefetch_max_subqueries = EXCLUDED.prefetch_max_subqueries,
            prefetch_subquery_max_bytes = EXCLUDED.prefetch_subquery_max_bytes,
            explicit_ops_per_minute = EXCLUDED.explicit_ops_per_minute,
            explicit_burst = EXCLUDED.explicit_burst,
            scope_ops_per_hour = EXCLUDED.scope_ops_per_hour,
            autosave_every_user_turns = EXCLUDED.autosave_every_user_turns,
            summariser_input_max_bytes = EXCLUDED.summariser_input_max_bytes,
            summariser_max_facts = EXCLUDED.summariser_max_facts,
            search_limit = EXCLUDED.search_limit,
            embedding_dimensions = EXCLUDED.embedding_dimensions,
            registered_at = now();
    EXCEPTION WHEN check_violation OR not_null_violation THEN
        RAISE EXCEPTION 'invalid_policy' USING ERRCODE = '22023';
    END;
    PERFORM memory_audit_write(NULL, 'policy', CASE WHEN old.version IS NULL THEN 'registered'
                                                    ELSE 'replaced' END, NULL, NULL);
    RETURN CASE WHEN old.version IS NULL THEN 'registered' ELSE 'replaced' END;
END
$$;

-- The registered policy (zero rows when unregistered): every caller reads the limits it must
-- apply early (the database applies them anyway).
CREATE OR REPLACE FUNCTION memory_get_policy(p_version TEXT)
RETURNS TABLE (version TEXT, max_ttl INTERVAL, entry_cap INTEGER, fact_max_bytes INTEGER,
               consent_max_age INTERVAL, prefetch_max_subqueries INTEGER,
               prefetch_subquery_max_bytes INTEGER, explicit_ops_per_minute INTEGER,
               explicit_burst INTEGER, scope_ops_per_hour INTEGER,
               autosave_every_user_turns INTEGER, summariser_input_max_bytes INTEGER,
               summariser_max_facts INTEGER, search_limit INTEGER,
               embedding_dimensions INTEGER[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT p.version, p.max_ttl, p.entry_cap, p.fact_max_bytes, p.consent_max_age,
           p.prefetch_max_subqueries, p.prefetch_subquery_max_bytes, p.explicit_ops_per_minute,
           p.explicit_burst, p.scope_ops_per_hour, p.autosave_every_user_turns,
           p.summariser_input_max_bytes, p.summariser_max_facts, p.search_limit,
           p.embedding_dimensions
      FROM memory_policy p WHERE p.version = p_version
$$;

CREATE OR REPLACE FUNCTION memory_allow_policy(p_version TEXT, p_namespace TEXT, p_agent TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF NOT EXISTS (SELECT FROM memory_policy WHERE version = p_version)
       OR (p_namespace IS NULL AND p_agent IS NOT NULL) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory_policy_allowance (policy_version, agent_namespace, agent_name)
    VALUES (p_version, p_namespace, p_agent) ON CONFLICT DO NOTHING;
    PERFORM memory_audit_write(NULL, 'policy', 'allowed', NULL, NULL);
END
$$;

CREATE OR REPLACE FUNCTION memory_disallow_policy(p_version TEXT, p_namespace TEXT, p_agent TEXT)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    n BIGINT;
BEGIN
    PERFORM memory_guard();
    DELETE FROM memory_policy_allowance
     WHERE policy_version = p_version
       AND agent_namespace IS NOT DISTINCT FROM p_namespace
       AND agent_name IS NOT DISTINCT FROM p_agent;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_audit_write(NULL, 'policy', 'disallowed', NULL, n);
    RETURN n;
END
$$;

-- Logins are named by role name; the role must exist.
CREATE OR REPLACE FUNCTION memory_check_login(p_login TEXT) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_login IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = p_login) THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION memory_register_runtime(p_login TEXT, p_namespace TEXT, p_agent TEXT)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    PERFORM memory_check_login(p_login);
    IF p_namespace IS NULL OR p_agent IS NULL
       OR p_namespace !~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
       OR length(p_agent) > 253 OR p_agent !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory_runtime_login (login, agent_namespace, agent_name)
    VALUES (p_login, p_namespace, p_agent) ON CONFLICT DO NOTHING;
    PERFORM memory_audit_write(NULL, 'login', 'runtime_registered', NULL, NULL);
END
$$;

CREATE OR REPLACE FUNCTION memory_register_verifier(p_login TEXT) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    PERFORM memory_check_login(p_login);
    INSERT INTO memory_verifier_login (login) VALUES (p_login) ON CONFLICT DO NOTHING;
    PERFORM memory_audit_write(NULL, 'login', 'verifier_registered', NULL, NULL);
END
$$;

CREATE OR REPLACE FUNCTION memory_unregister_login(p_login TEXT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    a BIGINT;
    b BIGINT;
BEGIN
    PERFORM memory_guard();
    DELETE FROM memory_runtime_login WHERE login = p_login;
    GET DIAGNOSTICS a = ROW_COUNT;
    DELETE FROM memory_verifier_login WHERE login = p_login;
    GET DIAGNOSTICS b = ROW_COUNT;
    PERFORM memory_audit_write(NULL, 'login', 'unregistered', NULL, a + b);
    RETURN a + b;
END
$$;

-- The local homeserver, for a login that may not configure it (runtime, bridge).
CREATE OR REPLACE FUNCTION memory_local_server() RETURNS TEXT
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT c.local_server FROM memory_config c
$$;

-- Sorted, distinct audience; NULL in, NULL out.
CREATE OR REPLACE FUNCTION memory_sorted(p_values TEXT[]) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_values IS NULL THEN NULL
                ELSE ARRAY(SELECT DISTINCT a FROM unnest(p_values) a ORDER BY 1) END
$$;

-- The bridge records a request it relays (one round trip per request).
CREATE OR REPLACE FUNCTION memory_record_request(
    p_jti TEXT, p_expires_at TIMESTAMPTZ,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_guard();
    IF p_jti IS NULL OR p_jti !~ '^[A-Za-z0-9_-]{16,64}$'
       OR p_issuer IS NULL OR p_subject IS NULL OR p_namespace IS NULL OR p_agent IS NULL
       OR p_kind IS NULL OR p_room IS NULL
       OR p_classification IS NULL OR p_output_audience IS NULL
       OR cardinality(p_output_audience) = 0 THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL OR p_expires_at < now() - INTERVAL '30 seconds'
       OR p_expires_at > now() + INTERVAL '90 seconds' THEN
        RAISE EXCEPTION 'assertion_expired' USING ERRCODE = 'KGJ02';
    END IF;
    INSERT INTO memory_request (jti, principal_issuer, principal_subject, agent_namespace,
                                agent_name, scope_kind, room_id, classification,
                                output_audience, expires_at, forget_at)
    VALUES (p_jti, p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room, p_classification,
            memory_sorted(p_output_audience), p_expires_at, p_expires_at + INTERVAL '1 minute')
    ON CONFLICT (jti) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'assertion_replayed' USING ERRCODE = 'KGJ01';
    END IF;
    DELETE FROM memory_request
     WHERE jti IN (SELECT r.jti FROM memory_request r WHERE r.forget_at < now()
                    ORDER BY r.forget_at LIMIT 16 FOR UPDATE SKIP LOCKED);
END
$$;

-- 1 (cont.). Consent names a registered, allowed policy --------------------------------------

DROP FUNCTION IF EXISTS memory_grant(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER,
    TEXT, TEXT[]);

-- C1 as in 000005; the limits recorded are the registered policy's, never the caller's.
CREATE OR REPLACE FUNCTION memory_grant(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_purpose TEXT, p_policy_version TEXT, p_embedding_dimension INTEGER,
    p_classification TEXT, p_output_audience TEXT[])
RETURNS TABLE (scope_id UUID, generation BIGINT, granted_at TIMESTAMPTZ, expires_at TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    s      memory_scope%ROWTYPE;
    pol    memory_policy%ROWTYPE;
    server TEXT;
BEGIN
    PERFORM memory_guard();
    IF p_kind IS DISTINCT FROM 'control_room' OR p_issuer IS DISTINCT FROM 'matrix' THEN
        RAISE EXCEPTION 'scope_denied' USING ERRCODE = 'KGD01';
    END IF;
    IF p_purpose IS NULL OR p_classification IS NULL OR p_output_audience IS NULL
       OR p_embedding_dimension IS NULL THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
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
    -- S5: only principals (and rooms) of the local homeserver, stored once in memory_config.
    SELECT c.local_server INTO server FROM memory_config c;
    IF server IS NULL
       OR substr(p_subject, strpos(p_subject, ':') + 1) IS DISTINCT FROM server
       OR (strpos(p_room, ':') > 0 AND substr(p_room, strpos(p_room, ':') + 1) IS DISTINCT FROM server)
       OR p_output_audience IS DISTINCT FROM ARRAY[server]
    THEN
        RAISE EXCEPTION 'remote_server_denied' USING ERRCODE = 'KGD02';
    END IF;
    PERFORM memory_principal_lock(memory_principal_ref(p_issuer, p_subject), false);
    IF EXISTS (SELECT FROM memory_principal_block b
                WHERE b.principal_ref = memory_principal_ref(p_issuer, p_subject)) THEN
        RAISE EXCEPTION 'principal_offboarded' USING ERRCODE = 'KGD03';
    END IF;
    INSERT INTO memory_scope (principal_issuer, principal_subject, agent_namespace, agent_name,
                              scope_kind, room_id, max_ttl, entry_cap, fact_max_bytes)
    VALUES (p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
            pol.max_ttl, pol.entry_cap, pol.fact_max_bytes)
    ON CONFLICT ON CONSTRAINT memory_scope_key DO NOTHING;

    s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);

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

-- As 000005, but the classification and output audience are always checked: NULL is refused.
CREATE OR REPLACE FUNCTION memory_generation(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
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
          FROM memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room) s
         WHERE s.enabled AND s.consent_expires_at > now() AND s.policy_version = p_policy_version
           AND s.classification = p_classification
           AND s.output_audience = memory_sorted(p_output_audience));
END
$$;

-- 4. Fenced save, one copy of a fact ------------------------------------------------------------

-- As 000005, and a fact whose NFC form equals a live entry's of the scope (or an earlier fact
-- of the same call) answers that entry and stores nothing.  The scope row is locked first, so
-- two racing saves of one text cannot both insert it.
CREATE OR REPLACE FUNCTION memory_save(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
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
    s := memory_scope_lock(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
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

-- As 000010, and no more query vectors than the scope's policy prefetches.
CREATE OR REPLACE FUNCTION memory_search_many(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
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
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
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

-- 1 (cont.). Admission from the scope's recorded policy ----------------------------------------

DROP FUNCTION IF EXISTS memory_admit_bound(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
    DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_admit(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
    DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ);

-- After the fence (as memory_save), consume p_units from the scope's hourly bucket and, when
-- p_explicit, one explicit operation from the sender's per-minute bucket, all-or-nothing, with
-- the capacities and refill rates of the scope's recorded policy.  Returns 0 when admitted,
-- 1 when the scope's budget refused, 2 when the sender's rate did (nothing consumed then).
-- Buckets are locked in name order, so concurrent admissions cannot deadlock.  p_now NULL
-- means the database clock (never later than it: tests pass an earlier instant).
CREATE OR REPLACE FUNCTION memory_admit(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
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
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
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
        names := names || ('sender:' || left(encode(sha256(convert_to(
            p_subject || '/' || p_namespace || '/' || p_agent, 'UTF8')), 'hex'), 32));
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

-- 3 (cont.). Redemption: recorded requests, registered logins ---------------------------------

-- As 000011, and who may redeem depends on the login (session_user: the authenticated login,
-- whatever role it has SET): a registered runtime only a request the bridge recorded, for the
-- exact key, classification and audience recorded, of an agent it is registered for; a
-- registered verifier, or a kagent_memory_service member (deprecated), any verified request.
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
           OR (req.principal_issuer, req.principal_subject, req.agent_namespace, req.agent_name,
               req.scope_kind, req.room_id, req.classification, req.output_audience,
               req.expires_at)
              IS DISTINCT FROM
              (p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room, p_classification,
               memory_sorted(p_output_audience), p_expires_at) THEN
            RAISE EXCEPTION 'request_not_recorded' USING ERRCODE = 'KGJ04';
        END IF;
    ELSIF NOT pg_has_role(who, 'kagent_memory_service', 'MEMBER') THEN
        RAISE EXCEPTION 'request_not_recorded' USING ERRCODE = 'KGJ04';
    END IF;
    g := memory_generation(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room,
                           p_policy_version, p_classification, p_output_audience);
    sid := (memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room)).id;
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

-- As 000011, and only for the login that redeemed the request.
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
       OR u.login IS DISTINCT FROM session_user::TEXT
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

CREATE OR REPLACE FUNCTION memory_admit_bound(
    p_jti TEXT,
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT, p_units INTEGER, p_explicit BOOLEAN,
    p_now TIMESTAMPTZ)
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
                        p_generation, p_policy_version, p_units, p_explicit, p_now);
END
$$;

-- 5. The schema version, as every entry point.
CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 12 $$;

-- 2 (cont.). Privileges ---------------------------------------------------------------------------

REVOKE ALL ON FUNCTION
    memory_check_login(TEXT),
    memory_sorted(TEXT[]),
    memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT),
    memory_register_policy(TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, INTEGER, INTEGER,
                           INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER[]),
    memory_get_policy(TEXT),
    memory_allow_policy(TEXT, TEXT, TEXT),
    memory_disallow_policy(TEXT, TEXT, TEXT),
    memory_register_runtime(TEXT, TEXT, TEXT),
    memory_register_verifier(TEXT),
    memory_unregister_login(TEXT),
    memory_local_server(),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN,
                       TIMESTAMPTZ)
FROM PUBLIC;

-- kagent_memory_service loses what it no longer needs to hold directly, then gets the union
-- back below (deprecated).
DO $$
BEGIN
    EXECUTE format('REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA %I FROM kagent_memory_service',
                   current_schema());
END
$$;

GRANT EXECUTE ON FUNCTION
    memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN,
                       TIMESTAMPTZ),
    memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_schema_version()
TO kagent_memory_runtime, kagent_memory_service;

GRANT EXECUTE ON FUNCTION
    memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]),
    memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER),
    memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID),
    memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_schema_version()
TO kagent_memory_bridge, kagent_memory_service;

GRANT EXECUTE ON FUNCTION
    memory_configure(TEXT),
    memory_register_policy(TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, INTEGER, INTEGER,
                           INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER[]),
    memory_allow_policy(TEXT, TEXT, TEXT),
    memory_disallow_policy(TEXT, TEXT, TEXT),
    memory_register_runtime(TEXT, TEXT, TEXT),
    memory_register_verifier(TEXT),
    memory_unregister_login(TEXT),
    memory_disable_principal(TEXT, TEXT),
    memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN),
    memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN),
    memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
    memory_purge_principal(TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT),
    memory_sweep(),
    memory_store_report(),
    memory_get_policy(TEXT),
    memory_local_server(),
    memory_schema_version()
TO kagent_memory_operator;

-- The deprecated union's remainder: what kagent_memory_service could call before, minus nothing.
GRANT EXECUTE ON FUNCTION
    memory_configure(TEXT),
    memory_sweep(),
    memory_store_report(),
    memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]),
    memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER),
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER),
    memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ)
TO kagent_memory_service;
