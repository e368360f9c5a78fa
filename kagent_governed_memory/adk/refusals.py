"""Refusals you can see: the first of each reason in a process is a WARNING naming the fix.

Python shows WARNING by default and hides INFO, so a refusal that only ever logged at INFO
looked like an empty memory.  Each reason's first refusal in this process is logged at WARNING
with what to change; the later ones stay at INFO (one line per refused request, as before).
Every line is content-free: the reason code, the operation, the opaque scope id and a fixed
sentence per reason (literal format strings: nothing from the request is formatted in).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from typing import Any

from ..errors import ReasonCode
from ..scope._request import current_request
from ..telemetry._metering import Operation

__all__ = ["NOTICE_AUTHOR", "RefusalLog", "fix_for", "log_refusal", "notice_text"]

_log = logging.getLogger("kagent_governed_memory.adk")
NOTICE_AUTHOR = "kagent-governed-memory"  # the author of a "no memory: <reason>" notice entry

_ASSERTION = ("the bridge's scope assertion does not fit this request: check the bridge's "
              "public key (KGM_ASSERTION_PUBLIC_KEYS), issuer, agent and A2A context id "
              "(docs/scope-assertions.md)")
_CONSENT = ("no current consent for this scope: the user says `!memory on <agent> <purpose>` "
            "in the control room (locally: the development bridge, docs/dev-bridge.md)")
_FIXES: dict[ReasonCode, str] = {
    ReasonCode.NO_BINDING: "wrap each request in memory_request(...) (kagent: the patched "
                           "runtime does; locally: the development bridge, docs/dev-bridge.md)",
    ReasonCode.NOT_CONFIGURED: "pass public_keys=, issuer= and agent= to memory_request",
    ReasonCode.ASSERTION_MISSING: _ASSERTION,
    ReasonCode.ASSERTION_INVALID: _ASSERTION,
    ReasonCode.ASSERTION_EXPIRED: "the assertion expired: the bridge signs one per request, "
                                  "at most 60 s before it reaches the runtime",
    ReasonCode.ASSERTION_UNKNOWN_KEY: _ASSERTION,
    ReasonCode.ASSERTION_REPLAYED: "an assertion serves one request: the bridge signs a new "
                                   "one for every request",
    ReasonCode.CONTEXT_MISMATCH: _ASSERTION,
    ReasonCode.AGENT_MISMATCH: _ASSERTION,
    ReasonCode.AUDIENCE_DENIED: "the assertion's output audience must be exactly the local "
                                "homeserver (local_server)",
    ReasonCode.CONSENT_REQUIRED: _CONSENT,
    ReasonCode.STALE_GENERATION: "consent changed while the request ran; the next request sees "
                                 "the current consent",
    ReasonCode.CONSENT_POLICY_CHANGED: "consent was given under another policy version: the "
                                       "user consents again (`!memory on`)",
    ReasonCode.RATE_LIMITED: "the sender's explicit-operation budget is spent: wait a minute, "
                             "or register a policy with a higher explicit_burst / "
                             "explicit_ops_per_minute (kagent-governed-memory policy register; "
                             "docs/database-roles.md)",
    ReasonCode.BUDGET_EXHAUSTED: "the scope's hourly budget is spent: wait, or register a "
                                 "policy with a higher scope_ops_per_hour "
                                 "(kagent-governed-memory policy register)",
    ReasonCode.EMBEDDING_FAILED: "the embedder raised or returned the wrong shape (a WARNING "
                                 "names its exception type); check the embedding endpoint",
    ReasonCode.REQUEST_NOT_REDEEMED: "kagent mode: this call's assertion was not redeemed by "
                                     "the controller for this scope and generation",
    ReasonCode.STORE_UNAVAILABLE: "the database or the kagent controller could not be reached",
    ReasonCode.DATABASE_ERROR: "the database failed the operation; its server log has the "
                               "SQLSTATE",
}
_DEFAULT_FIX = "see docs/refusals.md (why there is no memory)"

_warned: set[ReasonCode] = set()
_lock = threading.Lock()


def fix_for(reason: ReasonCode) -> str:
    """The fixed, content-free sentence that says what to change for ``reason``."""
    return _FIXES.get(reason, _DEFAULT_FIX)


def notice_text(reason: ReasonCode) -> str:
    """What a memory answer says instead of looking empty: ``no memory: <reason>``."""
    return f"no memory: {reason.value}"


def log_refusal(operation: Operation, reason: ReasonCode, scope: str | None) -> None:
    """One content-free line: WARNING with the fix the first time ``reason`` is met in this
    process, INFO afterwards."""
    with _lock:
        first = reason not in _warned
        _warned.add(reason)
    if first:
        # the fix is part of the format string (a fixed sentence from the table above), not an
        # argument: the log sanitizer lets only codes, counts and opaque ids through as arguments.
        # Its `%` are escaped, so a sentence saying "100%" can never take or break an argument.
        _log.warning("memory refused reason=%s operation=%s scope=%s; the first refusal for this "
                     "reason in this process (later ones are INFO): "
                     + fix_for(reason).replace("%", "%%"),
                     reason.value, operation.value, scope or "-")
    else:
        _log.info("memory refused reason=%s operation=%s scope=%s", reason.value,
                  operation.value, scope or "-")


def _reset_for_tests() -> None:
    with _lock:
        _warned.clear()


class RefusalLog:
    """One content-free line per refused request: the reason code, the operation that met it
    first and the opaque scope id (never text, user, room or token); the first of each reason
    in the process is a WARNING naming the fix (``log_refusal``).  A request without a binding
    is told apart by its asyncio task."""

    def __init__(self) -> None:
        self._unbound: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    def refused(self, operation: Operation, reason: ReasonCode, scope: str | None) -> None:
        binding = current_request()
        if scope is None and binding is not None and binding.assertion is not None:
            scope = binding.assertion.key.opaque_id
        if binding is not None:
            if reason in binding.logged:
                return
            binding.logged.add(reason)
        else:
            task = asyncio.current_task()
            if task is not None:
                if task in self._unbound:
                    return
                self._unbound.add(task)
        log_refusal(operation, reason, scope)
