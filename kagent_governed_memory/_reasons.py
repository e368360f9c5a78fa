"""The stable, content-free reason codes (re-exported by ``errors``)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ReasonCode"]


class ReasonCode(StrEnum):
    """Stable, content-free reason codes (safe for logs, metrics, audit rows and users)."""

    # identity and scope
    INVALID_IDENTITY = "invalid_identity"
    FEDERATION_DENIED = "federation_denied"
    REMOTE_SERVER_DENIED = "remote_server_denied"
    SCOPE_KIND_RESERVED = "scope_kind_reserved"
    SCOPE_MISMATCH = "scope_mismatch"
    ISSUER_NOT_REGISTERED = "issuer_not_registered"
    SUBJECT_DENIED = "subject_denied"
    SCOPE_REF_DENIED = "scope_ref_denied"
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
    AGENT_UNREACHABLE = "agent_unreachable"  # the bridge's relay to the agent (A2A)
    AGENT_HTTP_ERROR = "agent_http_error"
    AGENT_ANSWER_INVALID = "agent_answer_invalid"
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
    SCHEMA_BEFORE_BASELINE = "schema_before_baseline"
    SCHEMA_DATA_UNCONVERTIBLE = "schema_data_unconvertible"
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
    # the development bridge: refused unless enabled, outside kagent mode, on dev-db
    DEV_BRIDGE_REFUSED = "dev_bridge_refused"
