-- Reverts 000007: operator report.
DROP FUNCTION IF EXISTS memory_store_report();
