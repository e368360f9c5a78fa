-- Every statement the library runs, in sqlc's `-- name: Name :kind` format with $n parameters,
-- so the Go controller patches carry the same text (see patches/).  Each is one round trip and
-- one transaction; the rules live in the functions of the migrations (000015, 000016).
-- The statements down to the "issuer-generic" section are version 15's: key parameters $1..$6
-- principal_issuer (the issuer KIND, 'matrix'), principal_subject, agent_namespace,
-- agent_name, scope_kind, room_id; the kagent series call them.  The library calls the
-- issuer-generic ones (`...ByIssuer`, 000016), whose key has seven columns.  Each runs as a member of the role that may call it (000012):
-- kagent_memory_runtime (redeem and the bound calls), kagent_memory_bridge (consent, status,
-- inspect, forget, erasure, recording requests) or kagent_memory_operator (configure, policies,
-- logins, offboarding, sweep, report); kagent_memory_service (deprecated) holds the union of
-- the first two plus configure, sweep, report and the unbound runtime calls.

-- name: GrantMemoryScope :one
-- $7 purpose, $8 a registered policy version allowed for the agent, $9 an embedding dimension
-- it lists, $10 classification, $11 output audience; the limits are the policy's (000012).
SELECT scope_id, generation, granted_at, expires_at
FROM memory_grant($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: GetMemoryGeneration :one
SELECT memory_generation($1, $2, $3, $4, $5, $6, $7, $8, $9) AS generation;

-- name: RedeemScopeAssertion :one
-- $1 jti, $2 the assertion's exp; then the key, policy version, classification and output
-- audience as in GetMemoryGeneration.  Each jti once (000008).
SELECT memory_redeem_assertion($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS generation;

-- name: RedeemAndAdmitMemoryWork :one
-- RedeemScopeAssertion's $1..$11, then $12 units and $13 explicit: the redemption and, under
-- the generation it captured, the admission, in one transaction (000014).
SELECT generation, refused, admit_state
FROM memory_redeem_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);

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
SELECT memory_admit_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS refused;

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
-- $9 units of work, $10 explicit (one operation of the sender's rate too), $11 the clock (NULL:
-- the database's); capacities and refill rates are the scope's recorded policy's (000012).
SELECT memory_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS refused;

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

-- Requests, policies and logins (000012).

-- name: RecordMemoryRequest :exec
-- The bridge, for each request it relays: $1 jti, $2 exp, the key, $9 classification, $10 output
-- audience.  A runtime login redeems only what was recorded.
SELECT memory_record_request($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: GetMemoryPolicy :one
SELECT version, max_ttl, entry_cap, fact_max_bytes, consent_max_age, prefetch_max_subqueries,
       prefetch_subquery_max_bytes, explicit_ops_per_minute, explicit_burst, scope_ops_per_hour,
       autosave_every_user_turns, summariser_input_max_bytes, summariser_max_facts,
       search_limit, embedding_dimensions
FROM memory_get_policy($1);

-- name: RegisterMemoryPolicy :one
SELECT memory_register_policy($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
    AS outcome;

-- name: AllowMemoryPolicy :exec
SELECT memory_allow_policy($1, $2, $3);

-- name: DisallowMemoryPolicy :one
SELECT memory_disallow_policy($1, $2, $3) AS removed;

-- name: RegisterMemoryRuntimeLogin :exec
SELECT memory_register_runtime($1, $2, $3);

-- name: RegisterMemoryVerifierLogin :exec
SELECT memory_register_verifier($1);

-- name: UnregisterMemoryLogin :one
SELECT memory_unregister_login($1) AS removed;

-- name: GetMemoryLocalServer :one
SELECT memory_local_server() AS local_server;

-- The issuer-generic statements (000016): the library runs these.  Key parameters $1..$7 (after
-- a bound statement's $1 jti): principal_issuer_kind, principal_issuer, principal_subject,
-- agent_namespace, agent_name, scope_kind, scope_ref (a Matrix control room's id; '' for an
-- OIDC principal's scope); the rest as in the statement of the same name above, each shifted by
-- one.  The statements above call version 15's signatures, which 000016 keeps as library-only
-- wrappers of the Matrix issuer (issuer kind 'matrix', issuer = the recorded local homeserver)
-- for the kagent series that carry this file.

-- name: GrantMemoryScopeByIssuer :one
-- Refused unless the issuer is registered and enabled (KGD04), the scope kind is its (KGD01),
-- the policy allowed (KGP01), then scope_ref (KGD05), subject (KGD06) and audience (KGD07) are
-- what the issuer admits.
SELECT scope_id, generation, granted_at, expires_at
FROM memory_grant($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: GetMemoryGenerationByIssuer :one
SELECT memory_generation($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS generation;

-- name: RedeemScopeAssertionByIssuer :one
SELECT memory_redeem_assertion($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS generation;

-- name: RedeemAndAdmitMemoryWorkByIssuer :one
SELECT generation, refused, admit_state
FROM memory_redeem_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: SaveMemoryEntriesByIssuer :many
SELECT id, created_at, expires_at
FROM memory_save($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: SearchMemoryEntriesByIssuer :many
SELECT id, content, created_at, expires_at, distance
FROM memory_search($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: SearchMemoryEntriesManyByIssuer :many
SELECT query_ordinal, id, content, created_at, expires_at, distance
FROM memory_search_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: SaveMemoryEntriesBoundByIssuer :many
SELECT id, created_at, expires_at
FROM memory_save_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: SearchMemoryEntriesBoundByIssuer :many
SELECT id, content, created_at, expires_at, distance
FROM memory_search_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: SearchMemoryEntriesManyBoundByIssuer :many
SELECT query_ordinal, id, content, created_at, expires_at, distance
FROM memory_search_many_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: AdmitMemoryWorkBoundByIssuer :one
SELECT memory_admit_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) AS refused;

-- name: ForgetMemoryEntryBoundByIssuer :one
SELECT generation, deleted FROM memory_forget_bound($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: InspectMemoryEntriesByIssuer :many
SELECT id, content, created_at, expires_at
FROM memory_inspect($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: GetMemoryScopeStatusByIssuer :one
SELECT enabled, purpose, policy_version, generation, consent_expires_at, max_ttl, entry_cap,
       entry_count, last_verified_erasure_at, failure_reason
FROM memory_status($1, $2, $3, $4, $5, $6, $7);

-- name: ForgetMemoryEntryByIssuer :one
SELECT generation, deleted FROM memory_forget($1, $2, $3, $4, $5, $6, $7, $8);

-- name: DisableMemoryScopeByIssuer :one
SELECT scope_id, generation FROM memory_disable($1, $2, $3, $4, $5, $6, $7);

-- name: DisablePrincipalMemoryScopesByIssuer :many
SELECT scope_id, agent_namespace, agent_name, scope_kind, scope_ref, generation
FROM memory_disable_principal($1, $2, $3);

-- name: ClearMemoryScopeByIssuer :one
SELECT generation, deleted FROM memory_clear($1, $2, $3, $4, $5, $6, $7, $8);

-- name: VerifyMemoryErasureByIssuer :one
SELECT generation, verified_at
FROM memory_verify_erasure($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: RecordMemoryScopeFailureByIssuer :exec
SELECT memory_record_failure($1, $2, $3, $4, $5, $6, $7, $8);

-- name: AdmitMemoryWorkByIssuer :one
SELECT memory_admit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS refused;

-- name: PurgePrincipalMemoryScopesByIssuer :one
SELECT purged, kept FROM memory_purge_principal($1, $2, $3);

-- name: UnblockMemoryPrincipalByIssuer :one
SELECT memory_unblock_principal($1, $2, $3) AS lifted;

-- name: RecordMemoryRequestByIssuer :exec
SELECT memory_record_request($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- The issuer registry (000016): register (or replace) and disable as the owner or an operator;
-- every governed role reads it.

-- name: RegisterMemoryIssuer :one
-- $1 issuer kind, $2 issuer, $3 scope kind, $4 subject pattern, $5 scope_ref pattern (NULL: the
-- reference must be ''), $6 audience.  Outcome: registered, unchanged or replaced.
SELECT memory_register_issuer($1, $2, $3, $4, $5, $6) AS outcome;

-- name: DisableMemoryIssuer :one
SELECT memory_disable_issuer($1, $2) AS disabled;

-- name: GetMemoryIssuer :one
SELECT issuer_kind, issuer, scope_kind, subject_pattern, scope_ref_pattern, audience, enabled
FROM memory_get_issuer($1, $2);
