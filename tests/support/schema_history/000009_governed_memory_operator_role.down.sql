-- Reverts 000009: the operator entry points are the owner's alone again.  The role itself is
-- cluster-wide and may serve other databases: it is left in place.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kagent_memory_operator') THEN
        REVOKE EXECUTE ON FUNCTION
            memory_disable_principal(TEXT, TEXT),
            memory_purge_principal(TEXT, TEXT),
            memory_unblock_principal(TEXT, TEXT)
        FROM kagent_memory_operator;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 8 $$;
