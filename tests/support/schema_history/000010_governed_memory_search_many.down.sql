-- Reverts 000010: prefetch goes back to one memory_search per sub-query, and new rows'
-- embeddings go back to pgvector's default storage (out of line).

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DROP FUNCTION IF EXISTS memory_search_many(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER);

ALTER TABLE memory_entry ALTER COLUMN embedding SET STORAGE EXTERNAL;
ALTER TABLE memory_entry RESET (toast_tuple_target);

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 9 $$;
