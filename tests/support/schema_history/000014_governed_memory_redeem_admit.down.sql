-- Reverts 000014: memory_redeem_admit goes (runtimes fall back to /generation then /admit);
-- memory_schema_version() answers 13.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DROP FUNCTION IF EXISTS memory_redeem_admit(
    TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN);

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 13 $$;
