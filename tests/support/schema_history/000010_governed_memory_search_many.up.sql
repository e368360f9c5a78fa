-- Prefetch in one round trip: memory_search_many answers up to 8 query vectors for one scope in
-- one statement.  The scope is fenced once (guard, fence, dimension check, RLS binding), then
-- each query ordinal gets exactly what memory_search would return for it: cosine top-p_limit
-- among the scope's readable rows (read-time expiry before the LIMIT, through memory_readable),
-- ordered by distance then id, with the fence repeated inside the read's own snapshot.  Rows
-- are tagged with the 1-based ordinal of their query vector in p_embeddings.
--
-- Errors are content-free SQLSTATEs, as in 000005: 22023 invalid_argument (limit outside
-- 1..50; no, NULL, more than 8 or multi-dimensional query vectors), KGC01/KGS01/KGC04 from the
-- fence, 22000 invalid_embedding (a vector of another dimension than the consent's).
--
-- Storage: embeddings are kept in the heap row.  pgvector's `vector` is STORAGE EXTERNAL and a
-- 768-d vector (3 KiB) is over the 2 KiB TOAST threshold, so every embedding was stored out of
-- line in two TOAST chunks: reading one row's vector cost the heap page, the TOAST index and
-- two TOAST pages, about 4 buffers a row (benchmarks/scaling.py).  STORAGE MAIN with
-- toast_tuple_target 8160 keeps it in the row (a long `content` is still moved out first, and a
-- vector larger than a page still goes out of line as a last resort).  Both are catalog-only
-- changes: rows written before keep their layout until rewritten (VACUUM FULL or CLUSTER, by
-- the owner, at a quiet time).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

ALTER TABLE memory_entry ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE memory_entry SET (toast_tuple_target = 8160);

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

REVOKE ALL ON FUNCTION
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER)
FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER)
TO kagent_memory_service;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 10 $$;
