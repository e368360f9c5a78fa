"""Single use (T1): a verified scope assertion serves exactly one request, on any replica.

Redeeming inserts the assertion's ``jti`` into the database ledger and captures the request's
consent generation in the same transaction (``memory_redeem_assertion``, migration 000008), one
round trip — directly (``GovernedMemoryStore.redeem``) or through the controller
(``KagentControllerStore.redeem``, ``POST /generation``).  A token captured from a log-free but
observable place (a proxy, a compromised pod) and presented again -- to this process, another
replica or another agent -- finds its ``jti`` taken: ``ScopeDenied(assertion_replayed)``.  The
ledger holds only the random ``jti`` and when it may be forgotten: a minute after ``exp``.
"""

from __future__ import annotations

from .assertion import ScopeAssertion
from .repository import RuntimeRepository

__all__ = ["redeem_scope_assertion"]


async def redeem_scope_assertion(store: RuntimeRepository, assertion: ScopeAssertion
                                 ) -> int | None:
    """Consume ``assertion`` and return the generation its request captures: ``None`` without
    an enabled, unexpired consent for its key, policy version, classification and output
    audience (the ``jti`` is consumed either way).  Same as ``store.redeem(assertion)``.

    Raises ``ScopeDenied`` (``assertion_replayed``, or ``assertion_expired`` when the
    database's clock says so) and the store's usual errors.
    """
    return await store.redeem(assertion)
