-- Reverts 000004.  Drops governed memory content, its consent records and audit; upstream's
-- `memory` table and the `vector` extension (owned by 000001) are left alone.  The cluster-wide
-- role kagent_memory_service is kept: other databases may use it (DROP ROLE it by hand).
DROP TABLE IF EXISTS memory_entry;
DROP TABLE IF EXISTS memory_audit;
DROP TABLE IF EXISTS memory_scope;
DROP TABLE IF EXISTS memory_config;
DROP TABLE IF EXISTS memory_principal_block;
DROP TABLE IF EXISTS memory_principal_lock;
DROP FUNCTION IF EXISTS memory_entry_fence();
DROP FUNCTION IF EXISTS memory_scope_guard();
DROP FUNCTION IF EXISTS memory_audit_append_only();
DROP FUNCTION IF EXISTS memory_entry_refuse_update();
