-- Reverts 000007: operator report, sweep and schema version.
DROP FUNCTION IF EXISTS memory_sweep();
DROP FUNCTION IF EXISTS memory_store_report();
DROP FUNCTION IF EXISTS memory_schema_version();
