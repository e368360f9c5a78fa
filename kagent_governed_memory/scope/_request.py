"""Per-request scope binding (S6, T1): one request's verified assertion, or the reason it has none.

The memory service, tools and callbacks read the binding from a context variable; ADK's
``app_name`` / ``user_id`` (attribution, e.g. ``X-User-Id``) are never used as the key.
Background tasks created inside the request inherit it, since asyncio copies the context.
A request without a valid binding simply has no memory; nothing is raised into the chat.

The runtime holds public keys only: it can check an assertion, never make one.  The binding
is single-use in the database as well (the store's ``redeem``): the first memory operation of
the request redeems the assertion's ``jti``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import GovernanceError, ReasonCode
from ..identity import AgentIdentity
from ._assertion import ScopeAssertion, verify_scope_assertion

__all__ = ["ASSERTION_HEADER", "GRANT_HEADER", "RequestBinding", "current_request", "memory_request"]

# The A2A request header that carries the bridge-signed assertion to the agent runtime.
ASSERTION_HEADER = "x-kagent-memory-scope"
# The A2A request header that carries kagent main's per-request runtime grant to the agent.
GRANT_HEADER = "x-kagent-memory-grant"


@dataclass
class RequestBinding:
    assertion: ScopeAssertion | None
    reason: ReasonCode | None = None  # why memory is absent, when it is
    room_id: str | None = None  # the room the runtime itself observed, if it knows it
    generation: int | None = None  # captured once, when the assertion is redeemed
    captured: bool = False
    counted: bool = False  # the request's memory outcome is metered once
    # units admitted with the redemption (a first turn's prefetch, ``redeem_admit``) and why
    # that admission was refused; the prefetch takes them instead of admitting again
    preadmitted: int = 0
    preadmit_refusal: ReasonCode | None = None
    logged: set[ReasonCode] = field(default_factory=set, repr=False)  # refusals logged once
    # the verified token itself, for a backend that presents it again (the kagent controller
    # verifies it on every call); a bearer credential: never logged, never in repr
    token: str | None = field(default=None, repr=False)
    # the runtime grant kagent main's controller minted for this request
    # (``x-kagent-memory-grant``), presented on governed gRPC calls; a credential like ``token``
    grant: str | None = field(default=None, repr=False)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def __repr__(self) -> str:
        who = self.assertion.key.opaque_id if self.assertion else None
        return f"RequestBinding(scope={who}, reason={self.reason}, generation={self.generation})"


_current: ContextVar[RequestBinding | None] = ContextVar("kgm_memory_request", default=None)


@contextmanager
def memory_request(
    assertion: ScopeAssertion | str | None = None,
    *,
    public_keys: Mapping[str, Ed25519PublicKey] | None = None,
    issuer: str | None = None,
    context_id: str | None = None,
    agent: AgentIdentity | None = None,
    room_id: str | None = None,
    now: datetime | None = None,
    grant: str | None = None,
) -> Iterator[RequestBinding]:
    """Bind one request's scope: a verified ``ScopeAssertion``, a token to verify with the
    bridge's ``public_keys`` and ``issuer`` for this ``agent`` and this request's A2A
    ``context_id``, or ``None`` (memory absent).  A token that fails verification binds no
    assertion and records the content-free reason; so does a token without
    ``public_keys``/``issuer``/``agent`` (``memory_not_configured``) or without the request's
    ``context_id`` (``context_mismatch``).  ``grant`` is the request's runtime grant
    (``GRANT_HEADER``), which a gRPC controller store presents; kept only with a bound
    assertion."""
    binding = _bind(assertion, public_keys=public_keys, issuer=issuer, context_id=context_id,
                    agent=agent, room_id=room_id, now=now)
    if binding.assertion is not None and isinstance(grant, str) and grant:
        binding.grant = grant
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
    public_keys: Mapping[str, Ed25519PublicKey] | None,
    issuer: str | None,
    context_id: str | None,
    agent: AgentIdentity | None,
    room_id: str | None,
    now: datetime | None,
) -> RequestBinding:
    if assertion is None or assertion == "":
        return RequestBinding(None, ReasonCode.ASSERTION_MISSING, room_id)
    if isinstance(assertion, ScopeAssertion):
        if context_id is not None and assertion.context_id != context_id:
            return RequestBinding(None, ReasonCode.CONTEXT_MISMATCH, room_id)
        return RequestBinding(assertion, None, room_id)
    if public_keys is None or issuer is None or agent is None:
        return RequestBinding(None, ReasonCode.NOT_CONFIGURED, room_id)
    if context_id is None:  # fail closed: an unbound token would serve any conversation
        return RequestBinding(None, ReasonCode.CONTEXT_MISMATCH, room_id)
    verified: ScopeAssertion | None = None
    reason: ReasonCode | None = None
    try:
        verified = verify_scope_assertion(assertion, public_keys=public_keys, issuer=issuer,
                                          agent=agent, context_id=context_id, now=now)
    except GovernanceError as exc:
        reason = exc.reason
    return RequestBinding(verified, reason, room_id,
                          token=assertion if verified is not None else None)
