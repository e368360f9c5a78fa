-- Cost admission (ADR 0023 §42, SPEC A1-A3): token buckets in the database, so every replica
-- and every restart shares them.  A bucket name is an opaque key ("scope:<id>", "sender:<id>"),
-- never an identity or content.  Admission is consulted before any model or embedding work and
-- checks the consent fence in the same transaction, so no work is admitted for a withdrawn,
-- stale, expired or re-versioned scope.  Idle buckets are swept (memory_sweep, 000007).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

CREATE TABLE IF NOT EXISTS memory_admission_bucket (
    bucket      TEXT             PRIMARY KEY,
    tokens      DOUBLE PRECISION NOT NULL,
    updated_at  TIMESTAMPTZ      NOT NULL,
    CONSTRAINT memory_admission_bucket_name CHECK (bucket ~ '^[a-z]+:[A-Za-z0-9_.-]{1,128}$')
);

CREATE INDEX IF NOT EXISTS idx_memory_admission_bucket_updated
    ON memory_admission_bucket (updated_at);

REVOKE ALL ON memory_admission_bucket FROM PUBLIC, kagent_memory_service;
ALTER TABLE memory_admission_bucket ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_admission_bucket FORCE ROW LEVEL SECURITY;
DO $$
BEGIN  -- the owner as a constant, as in 000004
    EXECUTE 'DROP POLICY IF EXISTS memory_admission_bucket_owner_only ON memory_admission_bucket';
    EXECUTE format('CREATE POLICY memory_admission_bucket_owner_only ON memory_admission_bucket'
                   ' USING (current_user = %L)', current_user);
END
$$;

-- After the fence for the typed key (p_generation under p_policy_version, as in memory_save),
-- consume p_costs[i] from every bucket p_buckets[i] (capacity p_capacities[i], refilled by
-- p_refill[i] tokens every p_period_seconds[i], at most a day: the sweep drops buckets idle for
-- a day, which are full again by then) all-or-nothing.  Returns 0 when admitted,
-- else the 1-based index of the first bucket that refused (nothing is consumed then).
-- Buckets are locked in name order, so concurrent admissions cannot deadlock.  p_now NULL
-- means the database clock (shared by all replicas); tests pass an explicit instant.
CREATE OR REPLACE FUNCTION memory_admit(
    p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT, p_room TEXT,
    p_generation BIGINT, p_policy_version TEXT,
    p_buckets TEXT[], p_costs DOUBLE PRECISION[], p_capacities DOUBLE PRECISION[],
    p_refill DOUBLE PRECISION[], p_period_seconds DOUBLE PRECISION[], p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    -- never later than the database clock: a bucket cannot be stamped into the future
    t       TIMESTAMPTZ := least(coalesce(p_now, now()), now());
    n       INTEGER := coalesce(cardinality(p_buckets), 0);
    s       memory_scope%ROWTYPE;
    names   TEXT[] := ARRAY[]::TEXT[];
    b       memory_admission_bucket%ROWTYPE;
    avail   DOUBLE PRECISION[] := ARRAY[]::DOUBLE PRECISION[];
    stamp   TIMESTAMPTZ[] := ARRAY[]::TIMESTAMPTZ[];
    refused INTEGER := 0;
BEGIN
    PERFORM memory_guard();
    IF n = 0 OR n > 8
       OR cardinality(p_costs) IS DISTINCT FROM n OR cardinality(p_capacities) IS DISTINCT FROM n
       OR cardinality(p_refill) IS DISTINCT FROM n
       OR cardinality(p_period_seconds) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    FOR i IN 1..n LOOP
        IF p_costs[i] < 0 OR p_capacities[i] <= 0 OR p_refill[i] < 0
           OR p_period_seconds[i] <= 0 OR p_period_seconds[i] > 86400 THEN
            RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    s := memory_scope_row(p_issuer, p_subject, p_namespace, p_agent, p_kind, p_room);
    PERFORM memory_fence_check(s, p_generation, p_policy_version);
    -- The bucket names are the fenced key's, derived here: a caller names only the kind, so
    -- it can never spend or exhaust another key's budget.
    FOR i IN 1..n LOOP
        IF p_buckets[i] LIKE 'scope:%' THEN
            names := names || ('scope:' || replace(s.id::text, '-', ''));
        ELSIF p_buckets[i] LIKE 'sender:%' THEN
            names := names || ('sender:' || left(encode(sha256(convert_to(
                p_subject || '/' || p_namespace || '/' || p_agent, 'UTF8')), 'hex'), 32));
        ELSE
            RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF (SELECT count(DISTINCT x) FROM unnest(names) x) <> n THEN
        RAISE EXCEPTION 'invalid_argument' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory_admission_bucket (bucket, tokens, updated_at)
    SELECT u.bucket, u.capacity, t FROM unnest(names, p_capacities) AS u(bucket, capacity)
    ON CONFLICT (bucket) DO NOTHING;
    PERFORM 1 FROM memory_admission_bucket WHERE bucket = ANY (names)
     ORDER BY bucket FOR UPDATE;
    FOR i IN 1..n LOOP
        SELECT * INTO b FROM memory_admission_bucket WHERE bucket = names[i];
        avail := avail || least(
            p_capacities[i],
            b.tokens + greatest(0, extract(epoch FROM t - b.updated_at)::DOUBLE PRECISION)
                       * p_refill[i] / p_period_seconds[i]);
        stamp := stamp || greatest(b.updated_at, t);
        IF refused = 0 AND avail[i] + 1e-9 < p_costs[i] THEN
            refused := i;
        END IF;
    END LOOP;
    IF refused = 0 THEN
        FOR i IN 1..n LOOP
            UPDATE memory_admission_bucket
               SET tokens = avail[i] - p_costs[i], updated_at = stamp[i]
             WHERE bucket = names[i];
        END LOOP;
    END IF;
    RETURN refused;
END
$$;

REVOKE ALL ON FUNCTION memory_admit(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
    DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memory_admit(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], DOUBLE PRECISION[],
    DOUBLE PRECISION[], DOUBLE PRECISION[], DOUBLE PRECISION[], TIMESTAMPTZ)
    TO kagent_memory_service;
