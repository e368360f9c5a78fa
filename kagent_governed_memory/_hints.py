"""What each reason code tells the reader to do: the fixed sentences ``errors`` renders.

Looked up in order: the (reason, field) cause, the reason's default, the field's hint.  Every
sentence is fixed text: an error never carries the value that caused it.
"""

from __future__ import annotations

from ._reasons import ReasonCode

__all__ = ["hint_for"]

_DEFAULT_HINT: dict[ReasonCode, str] = {
    ReasonCode.CONSENT_REQUIRED: "no enabled, unexpired consent for this scope; grant() it first",
    ReasonCode.STALE_GENERATION: "the consent generation changed; capture generation() again",
    ReasonCode.ENTRY_CAP_REACHED: "the scope holds its maximum number of live entries; nothing stored",
    ReasonCode.FACT_TOO_LARGE: "a fact exceeds the policy's byte cap; nothing stored",
    ReasonCode.ERASURE_PENDING: "an erasure has not been verified; withdraw() again before granting",
    ReasonCode.CONSENT_CONFLICT: "consent exists with another purpose or policy; withdraw() first",
    ReasonCode.STORE_UNAVAILABLE: "the database could not be reached; retry later",
    ReasonCode.SCHEMA_OUTDATED: "the governed schema is missing or old; run "
    "`kagent-governed-memory migrate --dsn <owner DSN>` (or migrate(owner_dsn))",
    ReasonCode.SCHEMA_BEFORE_BASELINE: "the database holds governed migrations older than the "
    "000015 baseline, which no release shipped: bring it to 000015 with the development "
    "version that wrote them, or drop its governed objects and migrate again",
    ReasonCode.CONSENT_POLICY_CHANGED: "consent was given under another policy version; "
    "the subject must consent again (withdraw, then grant)",
    ReasonCode.ISSUER_NOT_REGISTERED: "the principal's issuer is not one this store serves, or "
    "the database holds no enabled registration of it: an operator registers it "
    "(store.register_issuer, `kagent-governed-memory issuer register`) and the store is opened "
    "with it (open(issuers=...))",
    ReasonCode.SUBJECT_DENIED: "the subject does not match its issuer's registered subject pattern",
    ReasonCode.SCOPE_REF_DENIED: "the scope's reference is not one its issuer admits (an OIDC "
    "principal's scope is MemoryScope.principal(), without a room)",
    ReasonCode.SCHEMA_DATA_UNCONVERTIBLE: "a migration cannot convert the governed data: "
    "record the local homeserver before upgrading (migrate --local-server); offboard and "
    "unblock every principal of another issuer than the local Matrix one before migrating down",
    ReasonCode.PRINCIPAL_OFFBOARDED: "the principal was offboarded; an operator must lift the "
    "block (`kagent-governed-memory unblock` as the owner) before a new grant",
    ReasonCode.AUDIT_APPEND_ONLY: "audit rows are append-only within their 400-day retention",
    ReasonCode.LOGIN_REFUSED: "the database refused this login (wrong password, unknown role "
    "or database, or no pg_hba.conf entry): check the DSN's user, password and dbname; a "
    "local development database prints its DSNs with `kagent-governed-memory dev-db`",
    ReasonCode.PERMISSION_DENIED: "the database role lacks a privilege: applications connect as a "
    "member of kagent_memory_service, migrations run as the owner role",
    ReasonCode.PRIVILEGED_ROLE: "this login is a superuser, BYPASSRLS or the schema owner: "
    "connect as a member of kagent_memory_service (CREATE ROLE app LOGIN IN ROLE "
    "kagent_memory_service), or pass privileged=True for operator tooling",
    ReasonCode.SERVICE_ROLE_MISSING: "role kagent_memory_service does not exist and the "
    "migrating role may not create it: an administrator runs CREATE ROLE kagent_memory_service "
    "NOLOGIN, then migrate again",
    ReasonCode.CALLER_ROLE_MISSING: "role kagent_memory_runtime, kagent_memory_bridge or "
    "kagent_memory_grants does not exist and the migrating role may not create it: an "
    "administrator runs CREATE ROLE kagent_memory_runtime NOLOGIN; CREATE ROLE "
    "kagent_memory_bridge NOLOGIN; CREATE ROLE kagent_memory_grants NOLOGIN, then migrate again",
    ReasonCode.SIGNAL_PRIVILEGE_MISSING: "the migrating role lacks pg_signal_backend (migration "
    "000013 ends governed logins' backends that hold a withdrawal's locks): an administrator "
    "runs GRANT pg_signal_backend TO <owner>, then migrate again",
    ReasonCode.TRANSACTION_REFUSED: "governed functions run only in a fresh READ COMMITTED "
    "transaction (check default_transaction_isolation of the login role)",
    ReasonCode.LOCAL_SERVER_MISMATCH: "the database is configured for another local homeserver; "
    "pass the same local_server as every other store of this database",
    ReasonCode.LOG_SETTINGS_UNSAFE: "a server-log setting of this connection differs from its "
    "safe value, so PostgreSQL's log could receive statement parameters (facts, vectors), plans "
    "or parse trees: the library sends them as connection options (-c "
    "log_parameter_max_length_on_error=0, debug_print_parse/rewritten/plan=off, "
    "plpgsql.print_strict_params=off, local_preload_libraries empty), which something dropped or "
    "overrode (a pooler that ignores the options startup parameter, a SET after connecting): "
    "connect directly or let the pooler pass options; see docs/database-roles.md, Server log",
    ReasonCode.SPAN_CONTENT_CAPTURE: "google-adk captures message content in spans or logs; set "
    "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false and leave "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT unset, or wrap every exporter in "
    "ContentFreeSpanProcessor / ContentFreeLogRecordProcessor and pass span_content='warn'",
    ReasonCode.ASSERTION_EXPIRED: "the scope assertion has expired; the bridge must sign a new one",
    ReasonCode.ASSERTION_INVALID: "the scope assertion is malformed, from another issuer, not "
    "signed with EdDSA, or its signature is wrong",
    ReasonCode.ASSERTION_UNKNOWN_KEY: "the scope assertion's `kid` names no configured public "
    "key; add the bridge's new public key (kagent-governed-memory keys public-key)",
    ReasonCode.ASSERTION_REPLAYED: "the scope assertion was already used; the bridge signs one "
    "per request",
    ReasonCode.REQUEST_NOT_REDEEMED: "the controller serves a request's calls only for the "
    "scope and generation its assertion redeemed (at /generation), until 120 s past the "
    "assertion's exp; redeem the request's assertion first and send the generation it returned",
    ReasonCode.CONTEXT_MISMATCH: "the scope assertion was signed for another A2A context",
    ReasonCode.REQUEST_NOT_RECORDED: "this runtime login redeems only requests the bridge "
    "recorded (record_request) for an agent an operator registered it for "
    "(`kagent-governed-memory login register-runtime`)",
    ReasonCode.POLICY_NOT_ALLOWED: "the policy version is not registered, not allowed for this "
    "agent, or does not list this embedding dimension: an operator runs "
    "`kagent-governed-memory policy register` / `policy allow`",
    ReasonCode.POLICY_NOT_REGISTERED: "no policy of this version is registered in the database: "
    "an operator registers it (`kagent-governed-memory policy register --file POLICY.json`)",
    ReasonCode.POLICY_MISMATCH: "the registered policy of this version has other limits than "
    "the one passed: open the store with the registered policy (or register a new version)",
    ReasonCode.POLICY_IMMUTABLE: "a consent refers to this policy version, so it cannot change: "
    "register the new limits under a new version",
    ReasonCode.ROLE_NOT_PERMITTED: "this login's role may not run this operation: agent "
    "runtimes connect as members of kagent_memory_runtime, bridges of kagent_memory_bridge, "
    "operator tooling of kagent_memory_operator (docs/database-roles.md)",
    ReasonCode.NO_BINDING: "no memory_request() binding is active for this request: the "
    "runtime wraps each request in memory_request(token, public_keys=..., issuer=..., "
    "context_id=..., agent=...) (the patched kagent runtime does it from the "
    "x-kagent-memory-scope header)",
    ReasonCode.RATE_LIMITED: "the sender's per-minute budget of explicit memory operations "
    "is spent; it refills within a minute (MemoryPolicy.explicit_ops_per_minute)",
    ReasonCode.BUDGET_EXHAUSTED: "the scope's hourly budget of memory work is spent; it refills "
    "over the hour (MemoryPolicy.scope_ops_per_hour)",
    ReasonCode.UNAUTHENTICATED: "the controller did not accept this caller's ServiceAccount "
    "token: an agent pod needs its projected token with audience kagent-governed-memory "
    "(mounted at /var/run/secrets/kagent-governed-memory/token, or $KAGENT_MEMORY_TOKEN_FILE), "
    "the bridge its own ServiceAccount's token (token_file=, or --token-file)",
    ReasonCode.FORBIDDEN: "the controller refused this caller for this route: agent runtimes "
    "call the runtime routes for their own Agent, the bridge (a ServiceAccount listed in "
    "--governed-memory-bridge-service-accounts) the control routes",
    ReasonCode.CONTROLLER_ERROR: "the controller answered without a reason code this library "
    "knows (another API version, or not the governed memory listener): check the URL "
    "(KAGENT_MEMORY_URL, the controller's governed memory port, default 8085)",
    ReasonCode.NOT_CONFIGURED: "no public keys or issuer are configured for scope assertions; "
    "set KGM_ASSERTION_PUBLIC_KEYS (or _FILE) and the issuer",
}

# Configuration mistakes raised at start-up, by the argument they concern (``field=``): what to
# do about it.  Fixed text only; the value given is never echoed.
_FIELD_HINT: dict[str, str] = {
    "secret": "the confirmation secret must be bytes, at least 32 of them: "
    "secrets.token_bytes(32), kept in a Kubernetes Secret",
    "embedder_dimension": "the embedder's dimension differs from the policy's "
    "embedding_dimension: use an embedder of that dimension, or a MemoryPolicy with "
    "embedding_dimension set to the embedder's (OpenAICompatibleEmbedder(dimension=...))",
    "public_keys": "no usable Ed25519 public key: give PEM, JWK or JWK Set public keys "
    "(`kagent-governed-memory keys public-key --private bridge.pem`), never the private key; "
    "from the environment: KGM_ASSERTION_PUBLIC_KEYS or KGM_ASSERTION_PUBLIC_KEYS_FILE",
    "private_key": "not an unencrypted Ed25519 private key (PKCS#8 PEM or JWK): make one with "
    "`kagent-governed-memory keys generate --out bridge.pem`; from the environment: "
    "KGM_ASSERTION_PRIVATE_KEY or KGM_ASSERTION_PRIVATE_KEY_FILE",
    "issuer": "the bridge's issuer URL (the `iss` it signs with) is required",
    "agent": "the AgentIdentity(namespace=..., name=...) this runtime serves is required",
    "context_id": "the request's A2A context id (in kagent, the ADK session id) is required",
    "local_server": "local_server is the local Matrix homeserver's name, e.g. example.org",
    "dsn": "dsn is a PostgreSQL connection string (libpq keywords or a postgresql:// URL)",
    "memory_service_uri": "a governed memory service URI is kgm+postgresql://<application "
    "login>@<host>/<db>?local_server=...&agent=<namespace>/<name>&embedding_url=...&"
    "embedding_model=... in direct mode, or kgm+http://<controller>:8085?local_server=...&"
    "agent=...&embedding_url=...&embedding_model=... in kagent mode (see "
    "kagent_governed_memory.adk.uri)",
    "uri_agent": "the URI needs agent=<namespace>/<name>, the exact kagent agent it serves",
    "uri_local_server": "the URI needs local_server=<your Matrix homeserver name>",
    "embedding_url": "the URI needs embedding_url and embedding_model (an OpenAI-compatible "
    "endpoint), or embedder=hashing for an offline trial",
    "dimension": "dimension is the embedding model's vector length, 1-16000 (default 768)",
    "span_content": "span_content is refuse (default), warn or ignore",
    "controller_url": "the controller's governed memory URL is http(s)://<controller>:<port> "
    "(kagent sets KAGENT_MEMORY_URL for governed Agents, e.g. http://kagent-controller.kagent:8085)",
    "http_client": "pass an httpx.AsyncClient made with trust_env=False: proxies taken from "
    "the environment would see every fact and token (or pass none: the client makes its own)",
    "deadline": "deadline is the most seconds one controller call may take, retries included "
    "(0 < deadline <= 300; default 15)",
    "admission_policy": "a custom admission policy or clock works on the direct store only: "
    "the kagent controller applies its own policy and the database's clock",
    "withdraw": "this runtime's store cannot withdraw consent (kagent mode: the bridge does, "
    "through KagentBridgeStore); cancel_autosaves(key) stops this runtime's pending saves",
    "classification": "classification and output_audience are checked when the runtime redeems "
    "its assertion; through the bridge API generation() reports the scope's consent only",
    # the development bridge
    "dev_bridge_enable": "the development bridge signs its own scope assertions and is for "
    "local development only: enable it explicitly with KGM_DEV_BRIDGE=1 (or enable=True)",
    "dev_bridge_kagent": "the development bridge never runs in kagent mode: unset "
    "KAGENT_MEMORY_URL, KAGENT_NAME and KAGENT_NAMESPACE (and use a kgm+postgresql URI), or use "
    "the real bridge there",
    "dev_bridge_dsn": "KGM_DSN is not set: export KGM_DSN='<what dev-db printed>' (start one "
    "with `kagent-governed-memory dev-db --data-dir .kgm-dev` in another terminal)",
    "dev_bridge_database": "the development bridge works only on a database "
    "`kagent-governed-memory dev-db` (or dev_database()) created: start one and use its DSNs",
    "dev_bridge_user": "the development bridge has one dev user, the first ADK user id this "
    "server served; other user ids get no memory: use that user id, or restart the server",
}


# Where one reason has several real causes, the cause named by ``field=``: what to do about it
# (checked before the reason's and the field's own hints).  Fixed text only.
_BOTH_SET = "the variable named by setting= and its _FILE variant are both set: set exactly one"
_FILE_UNREADABLE = ("file that the variable named by setting= points to could not be read "
                    "(missing, unreadable or a directory)")
_CAUSE_HINT: dict[tuple[ReasonCode, str], str] = {
    # kagent mode (issue 26): each missing setting of KagentControllerStore.from_env() names itself
    (ReasonCode.NOT_CONFIGURED, "KAGENT_MEMORY_URL"): "KAGENT_MEMORY_URL is not set: it is the "
    "controller's governed memory URL, http(s)://<controller>:<port> (kagent sets it for a "
    "governed Agent's pod, e.g. http://kagent-controller.kagent:8085)",
    (ReasonCode.NOT_CONFIGURED, "KAGENT_NAMESPACE"): "KAGENT_NAMESPACE is not set: it is the "
    "namespace of the Agent this runtime serves (kagent sets it in the agent's pod)",
    (ReasonCode.NOT_CONFIGURED, "KAGENT_NAME"): "KAGENT_NAME is not set: it is the name of the "
    "Agent this runtime serves (kagent sets it in the agent's pod)",
    (ReasonCode.NOT_CONFIGURED, "KAGENT_MEMORY_LOCAL_SERVER"): "KAGENT_MEMORY_LOCAL_SERVER is not "
    "set: it is the local Matrix homeserver's name, e.g. example.org (the same as the bridge's)",
    (ReasonCode.UNAUTHENTICATED, "token_file"): "the ServiceAccount token file could not be read "
    "(missing, unreadable, not a regular file, empty, or not a token), so nothing was sent to the "
    "controller: an agent pod mounts its projected token with audience kagent-governed-memory at "
    "/var/run/secrets/kagent-governed-memory/token (or names the file in "
    "$KAGENT_MEMORY_TOKEN_FILE); the bridge passes token_file= (CLI: --token-file)",
    (ReasonCode.UNAUTHENTICATED, "token"): "the token given (token=, a string or a callable) is "
    "empty, failed, or is not a printable token, so nothing was sent to the controller",
    # keys from the environment (public_keys_from_env / private_key_from_env): the setting the
    # caller named is the error's ``setting=``
    (ReasonCode.NOT_CONFIGURED, "public_keys_env"): "the variable named by setting= is not "
    "set: give it the bridge's public keys (PEM, JWK or JWK Set: `kagent-governed-memory keys "
    "public-key`), or give its _FILE variant a file that holds them",
    (ReasonCode.INVALID_ARGUMENT, "public_keys_env"): _BOTH_SET,
    (ReasonCode.INVALID_ARGUMENT, "public_keys_file"): "the public keys " + _FILE_UNREADABLE,
    (ReasonCode.NOT_CONFIGURED, "private_key_env"): "the variable named by setting= is not "
    "set: give it the bridge's Ed25519 private key (`kagent-governed-memory keys generate --out "
    "bridge.pem`), or give its _FILE variant that file's path",
    (ReasonCode.INVALID_ARGUMENT, "private_key_env"): _BOTH_SET,
    (ReasonCode.INVALID_ARGUMENT, "private_key_file"): "the private key " + _FILE_UNREADABLE,
    (ReasonCode.STORE_UNAVAILABLE, "controller"): "the kagent controller could not be reached, or "
    "did not answer in time: check its URL (KAGENT_MEMORY_URL; CLI: --controller), that it runs "
    "with governed memory on and listens on that port (default 8085); retry later",
    # an agent's identity is its Kubernetes object's (fixed text: the value is never echoed)
    (ReasonCode.INVALID_IDENTITY, "agent_name"): "an agent's name is a Kubernetes name (DNS-1123): "
    "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most "
    "253 characters; underscores are not allowed: use '-' (trip-planner, not trip_planner)",
    (ReasonCode.INVALID_IDENTITY, "namespace"): "a namespace is a Kubernetes namespace name "
    "(DNS-1123 label): lowercase letters, digits and '-', starting and ending with a letter or "
    "digit, at most 63 characters",
}


def hint_for(reason: ReasonCode, field: str) -> str | None:
    return _CAUSE_HINT.get((reason, field)) or _DEFAULT_HINT.get(reason) or _FIELD_HINT.get(field)
