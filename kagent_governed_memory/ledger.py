"""Single use (T1): a verified scope assertion serves exactly one request, on any replica.

``redeem_scope_assertion`` inserts the assertion's ``jti`` into the database ledger and
captures the request's consent generation in the same transaction (``memory_redeem_assertion``,
migration 000008), one round trip.  A token captured from a log-free but observable place (a
proxy, a compromised pod) and presented again -- to this process, another replica or another
agent -- finds its ``jti`` taken: ``ScopeDenied(assertion_replayed)``.  The ledger holds only
the random ``jti`` and when it may be forgotten: a minute after ``exp``.
"""

from __future__ import annotations

from .assertion import ScopeAssertion
from .errors import InvalidInput, ReasonCode
from .store import GovernedMemoryStore, _audience, _key

__all__ = ["redeem_scope_assertion"]


async def redeem_scope_assertion(store: GovernedMemoryStore, assertion: ScopeAssertion
                                 ) -> int | None:
    """Consume ``assertion`` and return the generation its request captures: ``None`` without
    an enabled, unexpired consent for its key, policy version, classification and output
    audience (the ``jti`` is consumed either way).

    Raises ``ScopeDenied`` (``assertion_replayed``, or ``assertion_expired`` when the
    database's clock says so) and the store's usual errors.
    """
    if not isinstance(assertion, ScopeAssertion):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion")
    key = assertion.key
    store._servable(key)
    row = await store._one(
        "redeem", "RedeemScopeAssertion",
        [assertion.jti, assertion.expires_at, *_key(key), store.policy.version,
         assertion.classification, _audience(assertion.audience, store.local_server)],
    )
    return None if row is None else row[0]
