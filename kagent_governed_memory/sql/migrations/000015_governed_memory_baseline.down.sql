-- Reverts the baseline: every function, table (with its indexes, triggers and policies) and
-- privilege it created.  The rows go with the tables.  The governed roles are kept: they are
-- cluster-wide and other databases may use them (DROP ROLE them by hand); they lose USAGE on
-- this schema.  pgvector is kept.

-- The entry points and helpers (before the tables: memory_fence_check takes a memory_scope row).
DROP FUNCTION IF EXISTS memory_end_blockers(TEXT[]);
DROP FUNCTION IF EXISTS memory_lock_holders();
DROP FUNCTION IF EXISTS memory_sorted(TEXT[]);
DROP FUNCTION IF EXISTS memory_check_login(TEXT);
DROP FUNCTION IF EXISTS memory_redeemed_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT);
DROP FUNCTION IF EXISTS memory_audit_write(UUID, TEXT, TEXT, BIGINT, BIGINT);
DROP FUNCTION IF EXISTS memory_principal_lock(BYTEA, BOOLEAN);
DROP FUNCTION IF EXISTS memory_principal_ref(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_bind_scope(UUID);
DROP FUNCTION IF EXISTS memory_readable(UUID);
DROP FUNCTION IF EXISTS memory_fence_check(memory_scope, BIGINT, TEXT);
DROP FUNCTION IF EXISTS memory_scope_lock(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_scope_row(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_guard();
DROP FUNCTION IF EXISTS memory_search_many(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER);
DROP FUNCTION IF EXISTS memory_search(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER);
DROP FUNCTION IF EXISTS memory_save(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]);
DROP FUNCTION IF EXISTS memory_admit(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_grant_revoke(BYTEA);
DROP FUNCTION IF EXISTS memory_grant_resolve(BYTEA);
DROP FUNCTION IF EXISTS memory_grant_mint(BYTEA, TEXT, TEXT, TEXT, TEXT, BYTEA);
DROP FUNCTION IF EXISTS memory_store_report();
DROP FUNCTION IF EXISTS memory_sweep();
DROP FUNCTION IF EXISTS memory_unblock_principal(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_purge_principal(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_disable_principal(TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_unregister_login(TEXT);
DROP FUNCTION IF EXISTS memory_register_verifier(TEXT);
DROP FUNCTION IF EXISTS memory_register_runtime(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_disallow_policy(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_allow_policy(TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_register_policy(TEXT, INTERVAL, INTEGER, INTEGER, INTERVAL, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER[]);
DROP FUNCTION IF EXISTS memory_configure(TEXT);
DROP FUNCTION IF EXISTS memory_record_failure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_verify_erasure(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID, BOOLEAN);
DROP FUNCTION IF EXISTS memory_clear(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN);
DROP FUNCTION IF EXISTS memory_disable(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_forget(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, UUID);
DROP FUNCTION IF EXISTS memory_inspect(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, UUID, INTEGER);
DROP FUNCTION IF EXISTS memory_status(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION IF EXISTS memory_generation(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_grant(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, INTEGER, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_record_request(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_forget_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, UUID);
DROP FUNCTION IF EXISTS memory_search_many_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector[], INTEGER);
DROP FUNCTION IF EXISTS memory_search_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, vector, INTEGER);
DROP FUNCTION IF EXISTS memory_save_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT[], vector[]);
DROP FUNCTION IF EXISTS memory_admit_bound(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, INTEGER, BOOLEAN, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS memory_redeem_admit(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[], INTEGER, BOOLEAN);
DROP FUNCTION IF EXISTS memory_redeem_assertion(TEXT, TIMESTAMPTZ, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT[]);
DROP FUNCTION IF EXISTS memory_local_server();
DROP FUNCTION IF EXISTS memory_get_policy(TEXT);
DROP FUNCTION IF EXISTS memory_schema_version();

DROP TABLE IF EXISTS memory_runtime_grant;
DROP TABLE IF EXISTS memory_verifier_login;
DROP TABLE IF EXISTS memory_runtime_login;
DROP TABLE IF EXISTS memory_request;
DROP TABLE IF EXISTS memory_policy_allowance;
DROP TABLE IF EXISTS memory_policy;
DROP TABLE IF EXISTS memory_assertion_use;
DROP TABLE IF EXISTS memory_admission_bucket;
DROP TABLE IF EXISTS memory_principal_lock;
DROP TABLE IF EXISTS memory_principal_block;
DROP TABLE IF EXISTS memory_config;
DROP TABLE IF EXISTS memory_audit;
DROP TABLE IF EXISTS memory_entry;
DROP TABLE IF EXISTS memory_scope;

-- The trigger functions (after their tables' triggers).
DROP FUNCTION IF EXISTS memory_policy_immutable();
DROP FUNCTION IF EXISTS memory_entry_fence();
DROP FUNCTION IF EXISTS memory_scope_guard();
DROP FUNCTION IF EXISTS memory_audit_append_only();
DROP FUNCTION IF EXISTS memory_entry_refuse_update();

DO $$
DECLARE
    r TEXT;
BEGIN
    FOREACH r IN ARRAY ARRAY['kagent_memory_grants', 'kagent_memory_bridge', 'kagent_memory_runtime',
                             'kagent_memory_operator', 'kagent_memory_service'] LOOP
        IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM %I', current_schema(), r);
        END IF;
    END LOOP;
END
$$;
