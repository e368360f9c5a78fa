-- Every statement the library runs, in sqlc's `-- name: Name :kind` format with $n parameters,
-- so the Go controller patch carries the same text (see patches/).  Each is one round trip and
-- one transaction; the rules live in the functions of migrations 000004-000011.
-- Key parameters $1..$6: principal_issuer, principal_subject, agent_namespace, agent_name,
-- scope_kind, room_id.  Run as a member of kagent_memory_service (EXECUTE on these functions,
-- nothing else), except UnblockMemoryPrincipal, which only the owner may run.

-- name: GrantMemoryScope :one
SELECT scope_id, generation, granted_at, expires_at
FROM memory_grant($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15);

-- name: GetMemoryGeneration :one
SELECT memory_generation($1, $2, $3, $4, $5, $6, $7, $8, $9) AS generation;

-- name: RedeemScopeAssertion :one
-- $1 jti, $2 the assertion's exp; then the key, policy version, classification and output
-- audience as in GetMemoryGeneration.  Each jti once (000008).
SELECT memory_redeem_assertion($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS generation;

-- name: SaveMemoryEntries :many
SELECT id, created_at, expires_at
FROM memory_save($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: SearchMemoryEntries :many
SELECT id, content, created_at, expires_at, distance
FROM memory_search($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: SearchMemoryEntriesMany :many
-- $9 vector[] of 1..8 query vectors (a prefetch's sub-queries): one statement, fenced once;
-- each row is tagged with the 1-based ordinal of its query (000010).
SELECT query_ordinal, id, content, created_at, expires_at, distance
FROM memory_search_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- The runtime calls of one request, bound to its redemption (000011): $1 is the request's
-- assertion `jti` (redeemed by RedeemScopeAssertion), then the parameters of the unbound
-- statement above.  Served only for that redemption's scope and generation, until its
-- work_until (`exp` + 120 s).  The kagent controller calls these.

-- name: SaveMemoryEntriesBound :many
SELECT id, created_at, expires_at
FROM memory_save_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: SearchMemoryEntriesBound :many
SELECT id, content, created_at, expires_at, distance
FROM memory_search_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: SearchMemoryEntriesManyBound :many
SELECT query_ordinal, id, content, created_at, expires_at, distance
FROM memory_search_many_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: AdmitMemoryWorkBound :one
SELECT memory_admit_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
    AS refused;

-- name: ForgetMemoryEntryBound :one
-- $8 the generation the request sends, or NULL for the one its redemption captured.
SELECT generation, deleted FROM memory_forget_bound($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: InspectMemoryEntries :many
SELECT id, content, created_at, expires_at
FROM memory_inspect($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: GetMemoryScopeStatus :one
SELECT enabled, purpose, policy_version, generation, consent_expires_at, max_ttl, entry_cap,
       entry_count, last_verified_erasure_at, failure_reason
FROM memory_status($1, $2, $3, $4, $5, $6);

-- name: ForgetMemoryEntry :one
SELECT generation, deleted FROM memory_forget($1, $2, $3, $4, $5, $6, $7);

-- name: DisableMemoryScope :one
SELECT scope_id, generation FROM memory_disable($1, $2, $3, $4, $5, $6);

-- name: DisablePrincipalMemoryScopes :many
SELECT scope_id, agent_namespace, agent_name, scope_kind, room_id, generation
FROM memory_disable_principal($1, $2);

-- name: ClearMemoryScope :one
SELECT generation, deleted FROM memory_clear($1, $2, $3, $4, $5, $6, $7);

-- name: VerifyMemoryErasure :one
SELECT generation, verified_at FROM memory_verify_erasure($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: RecordMemoryScopeFailure :exec
SELECT memory_record_failure($1, $2, $3, $4, $5, $6, $7);

-- name: SweepExpiredMemory :one
SELECT memory_sweep() AS deleted;

-- name: AdmitMemoryWork :one
SELECT memory_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) AS refused;

-- name: GetMemoryStoreReport :one
SELECT scopes, scopes_enabled, scopes_failed, entries_live, entries_expired, expired_readable,
       stale_generation, ttl_exceeded, over_cap_scopes, rows_in_disabled_scopes, expired_overdue,
       overdue_scope_ids, violating_scope_ids
FROM memory_store_report();

-- name: ConfigureMemoryStore :one
SELECT memory_configure($1) AS local_server;

-- name: GetMemorySchemaVersion :one
SELECT memory_schema_version() AS version;

-- name: PurgePrincipalMemoryScopes :one
SELECT purged, kept FROM memory_purge_principal($1, $2);

-- name: UnblockMemoryPrincipal :one
SELECT memory_unblock_principal($1, $2) AS lifted;
