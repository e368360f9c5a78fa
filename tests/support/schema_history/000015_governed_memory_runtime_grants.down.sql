-- Reverts 000015: the runtime grant entry points and their table go (every stored grant with
-- them: a runtime then cannot authenticate on kagent main); memory_schema_version() answers 14.
-- The role kagent_memory_grants is cluster-wide and stays, as the roles of 000012 do.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DROP FUNCTION IF EXISTS memory_grant_mint(BYTEA, TEXT, TEXT, TEXT, TEXT, BYTEA);
DROP FUNCTION IF EXISTS memory_grant_resolve(BYTEA);
DROP FUNCTION IF EXISTS memory_grant_revoke(BYTEA);
DROP TABLE IF EXISTS memory_runtime_grant;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$ SELECT 14 $$;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kagent_memory_grants') THEN
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM kagent_memory_grants', current_schema());
    END IF;
END
$$;
