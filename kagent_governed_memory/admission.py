"""Cost admission before any model or embedding work (A1–A3).

Two token buckets, both in PostgreSQL (``memory_admit``), consumed all-or-nothing in one round
trip:

* per scope: ``scope_ops_per_hour`` units, refilled continuously over an hour.  Every
  summarisation, prefetch sub-query, explicit load/save *and* every embedded item is one unit
  (ADR 0023 §42), so an explicit save of one fact costs 2 and a prefetch of 8 sub-queries 16;
* per (sender, agent), explicit load/save only: ``explicit_ops_per_minute`` refill with a burst
  of ``explicit_burst``.

Bucket names are opaque hashes of the typed key, never identities.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

from ._validate import _generation
from .errors import AdmissionDenied, InvalidInput, ReasonCode
from .identity import ScopeKey
from .policy import MemoryPolicy
from .store import GovernedMemoryStore, _key

__all__ = ["Admission"]


class Admission:
    """Admits units of memory work for a key, or raises ``AdmissionDenied``."""

    def __init__(
        self,
        store: GovernedMemoryStore,
        policy: MemoryPolicy | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._store = store
        self.policy = policy or store.policy
        self._clock = clock  # None: the database's clock, shared by every replica

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False) -> None:
        """Consume ``units`` from the scope's hourly budget (and one explicit operation from
        the sender's per-minute budget when ``explicit``), or consume nothing and refuse.

        The consent fence is checked in the same transaction: a withdrawn, stale, expired or
        re-versioned ``generation`` raises ``ConsentRequired``/``StaleGeneration`` and admits
        no work."""
        generation = _generation(generation)
        if not isinstance(units, int) or isinstance(units, bool) or units < 1:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="units")
        p = self.policy
        buckets = [("scope:" + key.opaque_id[3:], float(units), float(p.scope_ops_per_hour),
                    float(p.scope_ops_per_hour), 3600.0)]
        if explicit:
            buckets.append(("sender:" + _sender_id(key), 1.0, float(p.explicit_burst),
                            float(p.explicit_ops_per_minute), 60.0))
        names, costs, capacities, refills, periods = (list(col) for col in zip(*buckets, strict=True))
        now = self._clock() if self._clock else None
        row = await self._store._one(
            "admit", "AdmitMemoryWork",
            [*_key(key), generation, self._store.policy.version,
             names, costs, capacities, refills, periods, now],
        )
        refused = int(row[0]) if row else 1
        if refused:
            reason = ReasonCode.BUDGET_EXHAUSTED if refused == 1 else ReasonCode.RATE_LIMITED
            raise AdmissionDenied(reason, scope_id=key.opaque_id)


def _sender_id(key: ScopeKey) -> str:
    h = hashlib.sha256(b"sender")
    for part in (key.principal.opaque_id, key.agent.namespace, key.agent.name):
        h.update(len(part).to_bytes(4, "big") + part.encode())
    return h.hexdigest()[:32]
