"""Per-request scope binding (S6): one request's verified assertion, or the reason it has none.

The memory service, tools and callbacks read the binding from a context variable; ADK's
``app_name`` / ``user_id`` (attribution, e.g. ``X-User-Id``) are never used as the key.
Background tasks created inside the request inherit it, since asyncio copies the context.
A request without a valid binding simply has no memory; nothing is raised into the chat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from .assertion import ScopeAssertion, verify_scope_assertion
from .errors import GovernanceError, ReasonCode

__all__ = ["ASSERTION_HEADER", "RequestBinding", "current_request", "memory_request"]

# The A2A request header that carries the bridge-signed assertion to the agent runtime.
ASSERTION_HEADER = "x-kagent-memory-scope"


@dataclass
class RequestBinding:
    assertion: ScopeAssertion | None
    reason: ReasonCode | None = None  # why memory is absent, when it is
    room_id: str | None = None  # the room the runtime itself observed, if it knows it
    generation: int | None = None  # captured once, at the request's first memory operation
    captured: bool = False
    counted: bool = False  # the request's memory outcome is metered once
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def __repr__(self) -> str:
        who = self.assertion.key.opaque_id if self.assertion else None
        return f"RequestBinding(scope={who}, reason={self.reason}, generation={self.generation})"


_current: ContextVar[RequestBinding | None] = ContextVar("kgm_memory_request", default=None)


@contextmanager
def memory_request(
    assertion: ScopeAssertion | str | None = None,
    *,
    secret: bytes | None = None,
    room_id: str | None = None,
    now: datetime | None = None,
) -> Iterator[RequestBinding]:
    """Bind one request's scope: a verified ``ScopeAssertion``, a token to verify with
    ``secret``, or ``None`` (memory absent).  A token that fails verification binds no
    assertion and records the content-free reason."""
    binding = _bind(assertion, secret=secret, room_id=room_id, now=now)
    token = _current.set(binding)
    try:
        yield binding
    finally:
        _current.reset(token)


def current_request() -> RequestBinding | None:
    return _current.get()


def _bind(
    assertion: ScopeAssertion | str | None,
    *,
    secret: bytes | None,
    room_id: str | None,
    now: datetime | None,
) -> RequestBinding:
    if assertion is None:
        return RequestBinding(None, ReasonCode.ASSERTION_MISSING, room_id)
    if isinstance(assertion, ScopeAssertion):
        return RequestBinding(assertion, None, room_id)
    if not isinstance(secret, bytes | bytearray):
        return RequestBinding(None, ReasonCode.ASSERTION_INVALID, room_id)
    verified: ScopeAssertion | None = None
    reason: ReasonCode | None = None
    try:
        verified = verify_scope_assertion(assertion, secret=bytes(secret), now=now)
    except GovernanceError as exc:
        reason = exc.reason
    return RequestBinding(verified, reason, room_id)
