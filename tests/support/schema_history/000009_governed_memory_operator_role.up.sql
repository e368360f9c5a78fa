-- The operator role (least privilege for offboarding): `kagent_memory_operator` (NOLOGIN) may
-- call the three operator entry points -- block and disable every scope of a principal
-- (memory_disable_principal), delete its verified-clean scope rows (memory_purge_principal) and
-- lift the block (memory_unblock_principal) -- and nothing else.  Until now only the owner,
-- the trust root, could; an operator job or the kagent controller (whose login is a member of
-- both kagent_memory_service and this role) no longer needs it.  Agent runtimes that hold a
-- database login get kagent_memory_service only: memory_disable_principal returns every key of
-- a principal, which a service login must not learn from an MXID.
--
-- KGR02 operator role missing (a setup error, raised by this file), as KGR01 in 000004.

SELECT pg_catalog.set_config('search_path', pg_catalog.concat_ws(', ',
           pg_catalog.quote_ident(pg_catalog.current_schema()),
           (SELECT pg_catalog.quote_ident(n.nspname)
              FROM pg_catalog.pg_extension e
              JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector'),
           'pg_temp'), true);

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kagent_memory_operator') THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                        WHERE rolname = current_user AND (rolcreaterole OR rolsuper)) THEN
            RAISE EXCEPTION 'role kagent_memory_operator is missing and the migrating role may not create roles'
                USING ERRCODE = 'KGR02',
                      HINT = 'have an administrator run: CREATE ROLE kagent_memory_operator NOLOGIN';
        END IF;
        BEGIN
            CREATE ROLE kagent_memory_operator NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created concurrently by another database's migration
        END;
    END IF;
    IF NOT has_schema_privilege('kagent_memory_operator', current_schema(), 'USAGE') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO kagent_memory_operator', current_schema());
    END IF;
END
$$;

GRANT EXECUTE ON FUNCTION
    memory_disable_principal(TEXT, TEXT),
    memory_purge_principal(TEXT, TEXT),
    memory_unblock_principal(TEXT, TEXT)
TO kagent_memory_operator;

CREATE OR REPLACE FUNCTION memory_schema_version() RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT 9 $$;
