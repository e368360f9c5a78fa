"""Reason codes and the error hierarchy: the one place a database error becomes ours.

Every error carries a stable ``ReasonCode`` and, at most, bounded opaque ids.  Its ``str()``,
``repr()`` and ``args`` never contain memory content, identities or database text: PostgreSQL's
``DETAIL`` ("Failing row contains (...)") and trigger messages echo row values, so database
errors are mapped by SQLSTATE alone and re-raised with the original chain cut.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = [
    "AdmissionDenied",
    "ConsentConflict",
    "ConsentRequired",
    "EntryCapReached",
    "ErasureFailed",
    "FactTooLarge",
    "GovernanceError",
    "InvalidIdentity",
    "InvalidInput",
    "ProviderError",
    "ReasonCode",
    "ScopeDenied",
    "StaleGeneration",
    "StoreUnavailable",
    "from_database_error",
]


class ReasonCode(StrEnum):
    """Stable, content-free reason codes (safe for logs, metrics, audit rows and users)."""

    # identity and scope
    INVALID_IDENTITY = "invalid_identity"
    FEDERATION_DENIED = "federation_denied"
    REMOTE_SERVER_DENIED = "remote_server_denied"
    SCOPE_KIND_RESERVED = "scope_kind_reserved"
    SCOPE_MISMATCH = "scope_mismatch"
    PRINCIPAL_OFFBOARDED = "principal_offboarded"
    # consent and fence
    CONSENT_REQUIRED = "consent_required"
    CONSENT_CONFLICT = "consent_conflict"
    STALE_GENERATION = "stale_generation"
    ERASURE_PENDING = "erasure_pending"
    CONSENT_POLICY_CHANGED = "consent_policy_changed"
    # caps and input
    ENTRY_CAP_REACHED = "entry_cap_reached"
    FACT_TOO_LARGE = "fact_too_large"
    TTL_EXCEEDS_POLICY = "ttl_exceeds_policy"
    IMMUTABLE_ENTRY = "immutable_entry"
    AUDIT_APPEND_ONLY = "audit_append_only"
    INVALID_TEXT = "invalid_text"
    INVALID_EMBEDDING = "invalid_embedding"
    INVALID_PAGE_SIZE = "invalid_page_size"
    INVALID_CURSOR = "invalid_cursor"
    INVALID_LIMIT = "invalid_limit"
    INVALID_POLICY = "invalid_policy"
    POLICY_NOT_ALLOWED = "policy_not_allowed"
    POLICY_NOT_REGISTERED = "policy_not_registered"
    POLICY_MISMATCH = "policy_mismatch"
    POLICY_IMMUTABLE = "policy_immutable"
    INVALID_ARGUMENT = "invalid_argument"
    # per-request scope binding (S6)
    ASSERTION_MISSING = "assertion_missing"
    ASSERTION_INVALID = "assertion_invalid"
    ASSERTION_EXPIRED = "assertion_expired"
    ASSERTION_UNKNOWN_KEY = "assertion_unknown_key"
    ASSERTION_REPLAYED = "assertion_replayed"
    REQUEST_NOT_REDEEMED = "request_not_redeemed"
    REQUEST_NOT_RECORDED = "request_not_recorded"
    CONTEXT_MISMATCH = "context_mismatch"
    NOT_CONFIGURED = "memory_not_configured"
    NO_BINDING = "no_binding"
    AGENT_MISMATCH = "agent_mismatch"
    AUDIENCE_DENIED = "audience_denied"
    # admission (A1-A3)
    ADMISSION_DENIED = "admission_denied"
    RATE_LIMITED = "rate_limited"
    BUDGET_EXHAUSTED = "budget_exhausted"
    # model and embedding work
    EMBEDDING_FAILED = "embedding_failed"
    MODEL_FAILED = "model_failed"
    NO_SUMMARISER = "no_summariser"
    SUMMARY_MALFORMED = "summary_malformed"
    SUMMARY_TOO_MANY_FACTS = "summary_too_many_facts"
    NOTHING_TO_SAVE = "nothing_to_save"
    AUTOSAVE_CALLBACK_ONLY = "autosave_callback_only"
    # telemetry
    SPAN_CONTENT_CAPTURE = "span_content_capture"
    # control room (U6) and commands (U1-U5)
    ROOM_STATE_INVALID = "room_state_invalid"
    ROOM_STATE_TOO_LARGE = "room_state_too_large"
    ROOM_VERSION_UNSUPPORTED = "room_version_unsupported"
    JOIN_RULE_NOT_INVITE = "join_rule_not_invite"
    HISTORY_NOT_JOINED = "history_not_joined"
    ROOM_ENCRYPTED = "room_encrypted"
    SERVER_ACL_NOT_LOCAL = "server_acl_not_local"
    MEMBERS_MISMATCH = "members_mismatch"
    MEMBERSHIP_PENDING = "membership_pending"
    SUBJECT_NOT_LOCAL = "subject_not_local"
    NOT_SUBJECT = "not_subject"
    COMMAND_INVALID = "command_invalid"
    UNKNOWN_AGENT = "unknown_agent"
    CONFIRMATION_REQUIRED = "confirmation_required"
    CONFIRMATION_INVALID = "confirmation_invalid"
    CONFIRMATION_EXPIRED = "confirmation_expired"
    # operator verification
    STORE_INVARIANT_VIOLATED = "store_invariant_violated"
    # erasure
    ERASURE_FAILED = "erasure_failed"
    VERIFICATION_FAILED = "verification_failed"
    # infrastructure
    STORE_UNAVAILABLE = "store_unavailable"
    DATABASE_ERROR = "database_error"
    SCHEMA_OUTDATED = "schema_outdated"
    # database roles and configuration
    LOGIN_REFUSED = "login_refused"
    PERMISSION_DENIED = "permission_denied"
    PRIVILEGED_ROLE = "privileged_role"
    ROLE_NOT_PERMITTED = "role_not_permitted"
    SERVICE_ROLE_MISSING = "service_role_missing"
    OPERATOR_ROLE_MISSING = "operator_role_missing"
    CALLER_ROLE_MISSING = "caller_role_missing"
    SIGNAL_PRIVILEGE_MISSING = "signal_privilege_missing"
    LOCAL_SERVER_MISMATCH = "local_server_mismatch"
    LOG_SETTINGS_UNSAFE = "log_settings_unsafe"
    TRANSACTION_REFUSED = "transaction_refused"
    # the kagent controller's governed API (kagent mode)
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    CONTROLLER_ERROR = "controller_error"
    # the development bridge (issue 26): refused unless enabled, outside kagent mode, on dev-db
    DEV_BRIDGE_REFUSED = "dev_bridge_refused"


_ID_VALUE = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")
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
    ReasonCode.CONSENT_POLICY_CHANGED: "consent was given under another policy version; "
    "the subject must consent again (withdraw, then grant)",
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
    ReasonCode.CALLER_ROLE_MISSING: "role kagent_memory_runtime or kagent_memory_bridge does "
    "not exist and the migrating role may not create it: an administrator runs CREATE ROLE "
    "kagent_memory_runtime NOLOGIN; CREATE ROLE kagent_memory_bridge NOLOGIN, then migrate again",
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
    # the development bridge (issue 26)
    "dev_bridge_enable": "the development bridge signs its own scope assertions and is for "
    "local development only: enable it explicitly with KGM_DEV_BRIDGE=1 (or enable=True)",
    "dev_bridge_kagent": "the development bridge never runs in kagent mode: unset "
    "KAGENT_MEMORY_URL, KAGENT_NAME and KAGENT_NAMESPACE (and use a kgm+postgresql URI), or use "
    "the real bridge there",
    "dev_bridge_database": "the development bridge works only on a database "
    "`kagent-governed-memory dev-db` (or dev_database()) created: start one and use its DSNs",
}


# Where one reason has several real causes, the cause named by ``field=``: what to do about it
# (checked before the reason's and the field's own hints).  Fixed text only.
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
    (ReasonCode.INVALID_ARGUMENT, "public_keys_env"): "the variable named by setting= and its "
    "_FILE variant are both set: set exactly one of the two",
    (ReasonCode.INVALID_ARGUMENT, "public_keys_file"): "the public keys file that the variable "
    "named by setting= points to could not be read (missing, unreadable or a directory)",
    (ReasonCode.NOT_CONFIGURED, "private_key_env"): "the variable named by setting= is not "
    "set: give it the bridge's Ed25519 private key (`kagent-governed-memory keys generate --out "
    "bridge.pem`), or give its _FILE variant that file's path",
    (ReasonCode.INVALID_ARGUMENT, "private_key_env"): "the variable named by setting= and its "
    "_FILE variant are both set: set exactly one of the two",
    (ReasonCode.INVALID_ARGUMENT, "private_key_file"): "the private key file that the variable "
    "named by setting= points to could not be read (missing, unreadable or a directory)",
    (ReasonCode.STORE_UNAVAILABLE, "controller"): "the kagent controller could not be reached, or "
    "did not answer in time: check its URL (KAGENT_MEMORY_URL; CLI: --controller), that it runs "
    "with governed memory on and listens on that port (default 8085); retry later",
}


class GovernanceError(Exception):
    """Base of every error the library raises; content-free by construction.

    ``ids`` may only hold bounded opaque identifiers (scope ids, SQLSTATEs, operation names);
    anything else is dropped rather than risk echoing content.
    """

    default_reason: ReasonCode = ReasonCode.DATABASE_ERROR

    def __init__(self, reason: ReasonCode | None = None, **ids: str | int) -> None:
        # An unknown reason (e.g. a message passed the usual way) is dropped, never echoed.
        code = ReasonCode._value2member_map_.get(reason) if isinstance(reason, str) else None
        self.reason: ReasonCode = code or self.default_reason  # type: ignore[assignment]
        self.ids: Mapping[str, str] = {
            k: str(v)
            for k, v in ids.items()
            if _ID_VALUE.fullmatch(str(v)) and _ID_VALUE.fullmatch(k)
        }
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.reason.value
        field = self.ids.get("field", "")
        hint = (_CAUSE_HINT.get((self.reason, field)) or _DEFAULT_HINT.get(self.reason)
                or _FIELD_HINT.get(field))
        if hint:
            text += f": {hint}"
        if self.ids:
            text += " (" + ", ".join(f"{k}={v}" for k, v in sorted(self.ids.items())) + ")"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._render()!r})"

    def __reduce__(self) -> tuple[Any, tuple[type[GovernanceError], str, dict[str, str]]]:
        # keep pickling content-free and lossless
        return (_rebuild, (type(self), self.reason.value, dict(self.ids)))


def _rebuild(cls: type[GovernanceError], reason: str, ids: dict[str, str]) -> GovernanceError:
    return cls(ReasonCode(reason), **ids)


class InvalidInput(GovernanceError):
    default_reason = ReasonCode.INVALID_ARGUMENT


class InvalidIdentity(InvalidInput):
    default_reason = ReasonCode.INVALID_IDENTITY


class ScopeDenied(GovernanceError):
    default_reason = ReasonCode.SCOPE_MISMATCH


class ConsentRequired(GovernanceError):
    default_reason = ReasonCode.CONSENT_REQUIRED


class ConsentConflict(ConsentRequired):
    default_reason = ReasonCode.CONSENT_CONFLICT


class StaleGeneration(ConsentRequired):
    default_reason = ReasonCode.STALE_GENERATION


class EntryCapReached(GovernanceError):
    default_reason = ReasonCode.ENTRY_CAP_REACHED


class FactTooLarge(GovernanceError):
    default_reason = ReasonCode.FACT_TOO_LARGE


class AdmissionDenied(GovernanceError):
    default_reason = ReasonCode.ADMISSION_DENIED


class ErasureFailed(GovernanceError):
    default_reason = ReasonCode.ERASURE_FAILED


class StoreUnavailable(GovernanceError):
    default_reason = ReasonCode.STORE_UNAVAILABLE


class ProviderError(GovernanceError):
    """A model or embedding provider failed; its response body is never kept."""

    default_reason = ReasonCode.EMBEDDING_FAILED


# SQLSTATEs raised by the governed schema (class "KG"; see sql/migrations) and the standard
# ones worth a specific answer.  Everything else becomes DATABASE_ERROR with its SQLSTATE only.
_SQLSTATE: dict[str, tuple[type[GovernanceError], ReasonCode]] = {
    "KGC01": (ConsentRequired, ReasonCode.CONSENT_REQUIRED),
    "KGC02": (ConsentConflict, ReasonCode.CONSENT_CONFLICT),
    "KGC03": (ConsentRequired, ReasonCode.ERASURE_PENDING),
    "KGS01": (StaleGeneration, ReasonCode.STALE_GENERATION),
    "KGE01": (EntryCapReached, ReasonCode.ENTRY_CAP_REACHED),
    "KGF01": (FactTooLarge, ReasonCode.FACT_TOO_LARGE),
    "KGT01": (InvalidInput, ReasonCode.TTL_EXCEEDS_POLICY),
    "KGI01": (InvalidInput, ReasonCode.IMMUTABLE_ENTRY),
    "KGD01": (ScopeDenied, ReasonCode.SCOPE_KIND_RESERVED),
    "KGC04": (ConsentRequired, ReasonCode.CONSENT_POLICY_CHANGED),
    "KGD02": (ScopeDenied, ReasonCode.REMOTE_SERVER_DENIED),
    "KGD03": (ScopeDenied, ReasonCode.PRINCIPAL_OFFBOARDED),
    "KGA01": (InvalidInput, ReasonCode.AUDIT_APPEND_ONLY),
    "KGR01": (StoreUnavailable, ReasonCode.SERVICE_ROLE_MISSING),
    "KGR02": (StoreUnavailable, ReasonCode.OPERATOR_ROLE_MISSING),
    "KGR04": (StoreUnavailable, ReasonCode.SIGNAL_PRIVILEGE_MISSING),
    "KGJ01": (ScopeDenied, ReasonCode.ASSERTION_REPLAYED),
    "KGJ02": (ScopeDenied, ReasonCode.ASSERTION_EXPIRED),
    "KGJ03": (ScopeDenied, ReasonCode.REQUEST_NOT_REDEEMED),
    "KGJ04": (ScopeDenied, ReasonCode.REQUEST_NOT_RECORDED),
    "KGP01": (ScopeDenied, ReasonCode.POLICY_NOT_ALLOWED),
    "KGP02": (InvalidInput, ReasonCode.POLICY_IMMUTABLE),
    "KGR03": (StoreUnavailable, ReasonCode.CALLER_ROLE_MISSING),
    "42501": (StoreUnavailable, ReasonCode.PERMISSION_DENIED),  # insufficient_privilege
    "KGX01": (InvalidInput, ReasonCode.TRANSACTION_REFUSED),
    "22021": (InvalidInput, ReasonCode.INVALID_TEXT),  # character_not_in_repertoire
    "22P05": (InvalidInput, ReasonCode.INVALID_TEXT),  # untranslatable_character
    "22000": (InvalidInput, ReasonCode.INVALID_EMBEDDING),  # pgvector: dimensions / NaN
    "22003": (InvalidInput, ReasonCode.INVALID_EMBEDDING),  # a value beyond float4
    "22023": (InvalidInput, ReasonCode.INVALID_ARGUMENT),  # invalid_parameter_value
    "23514": (InvalidInput, ReasonCode.INVALID_ARGUMENT),  # check_violation
    "42P01": (StoreUnavailable, ReasonCode.SCHEMA_OUTDATED),  # undefined_table
    "42883": (StoreUnavailable, ReasonCode.SCHEMA_OUTDATED),  # undefined_function
}
# The class of every reason code that has one beyond ``GovernanceError``: the SQLSTATE table's,
# plus the codes that reach a caller another way (admission, erasure steps, a request's binding,
# the controller's API).  ``error_for_reason`` is how an API answer's code becomes an error.
_CLASS_OF_REASON: dict[ReasonCode, type[GovernanceError]] = {
    **{reason: cls for cls, reason in _SQLSTATE.values()},
    ReasonCode.BUDGET_EXHAUSTED: AdmissionDenied,
    ReasonCode.RATE_LIMITED: AdmissionDenied,
    ReasonCode.ERASURE_FAILED: ErasureFailed,
    ReasonCode.VERIFICATION_FAILED: ErasureFailed,
    ReasonCode.STORE_UNAVAILABLE: StoreUnavailable,
    **dict.fromkeys((
        ReasonCode.UNAUTHENTICATED, ReasonCode.FORBIDDEN, ReasonCode.AGENT_MISMATCH,
        ReasonCode.SCOPE_MISMATCH, ReasonCode.FEDERATION_DENIED, ReasonCode.ASSERTION_MISSING,
        ReasonCode.ASSERTION_INVALID, ReasonCode.ASSERTION_UNKNOWN_KEY,
        ReasonCode.CONTEXT_MISMATCH), ScopeDenied),
}


def error_for_reason(reason: ReasonCode, fallback: type[GovernanceError] = GovernanceError,
                     **ids: str | int) -> GovernanceError:
    """The error of ``reason``: its class if it has one, else ``fallback``."""
    return _CLASS_OF_REASON.get(reason, fallback)(reason, **ids)


_CONNECTION_CLASSES = ("08", "53", "57", "58")
# libpq reports a login the server refused (SQLSTATE 28000/28P01/3D000 on the wire) with no
# SQLSTATE, only its message; these fixed words of that message are matched -- the message is
# never kept or echoed.  A server with translated messages falls back to store_unavailable.
_LOGIN_REFUSED = re.compile(
    r"FATAL:\s+(?:password authentication failed|role \"[^\"]*\" does not exist"
    r"|database \"[^\"]*\" does not exist|no pg_hba\.conf entry|\w+ authentication failed"
    r"|permission denied for database)|fe_sendauth: no password supplied")


def from_database_error(exc: BaseException, operation: str) -> GovernanceError:
    """Translate any psycopg / pool error into a content-free ``GovernanceError``.

    Only the SQLSTATE is read; message, ``DETAIL``, ``HINT`` and the diagnostic fields that echo
    row values are never touched.  Callers ``raise from_database_error(e, op) from None``.
    """
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if not isinstance(sqlstate, str) or not re.fullmatch(r"[0-9A-Z]{5}", sqlstate):
        sqlstate = ""
    if sqlstate in _SQLSTATE:
        cls, reason = _SQLSTATE[sqlstate]
        return cls(reason, operation=operation)
    if sqlstate in ("28000", "28P01", "3D000") or (not sqlstate and _login_refused(exc)):
        return InvalidInput(ReasonCode.LOGIN_REFUSED, operation=operation)
    if not sqlstate or sqlstate[:2] in _CONNECTION_CLASSES:
        return StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation,
                                **({"sqlstate": sqlstate} if sqlstate else {}))
    return GovernanceError(ReasonCode.DATABASE_ERROR, operation=operation, sqlstate=sqlstate)


def _login_refused(exc: BaseException) -> bool:
    try:
        return _LOGIN_REFUSED.search(str(exc)) is not None
    except Exception:  # noqa: BLE001 - a broken __str__ is just not a refused login
        return False
