-- Reverts 000004.  Drops governed memory content and its consent records; upstream's `memory`
-- table and the `vector` extension (owned by 000001) are left alone.
DROP TABLE IF EXISTS memory_entry;
DROP TABLE IF EXISTS memory_audit;
DROP TABLE IF EXISTS memory_scope;
DROP FUNCTION IF EXISTS memory_entry_fence();
DROP FUNCTION IF EXISTS memory_scope_guard();
DROP FUNCTION IF EXISTS memory_audit_refuse_update();
DROP FUNCTION IF EXISTS memory_entry_refuse_update();
