"""The admission buckets of one unit of memory work (A1-A3), shared by every backend.

Bucket names are opaque hashes of the typed key, never identities; the patched controller
derives the same names (``scope:<32 hex>``, ``sender:<32 hex>``).
"""

from __future__ import annotations

import hashlib

from .errors import InvalidInput, ReasonCode
from .identity import ScopeKey
from .policy import MemoryPolicy

Bucket = tuple[str, float, float, float, float]  # name, cost, capacity, refill, period seconds


def admission_buckets(key: ScopeKey, policy: MemoryPolicy, *, units: int,
                      explicit: bool) -> list[Bucket]:
    """The scope's hourly bucket for ``units``, and the sender's per-minute bucket for one
    explicit operation when ``explicit``."""
    if not isinstance(units, int) or isinstance(units, bool) or units < 1:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="units")
    p = policy
    buckets: list[Bucket] = [("scope:" + key.opaque_id[3:], float(units),
                              float(p.scope_ops_per_hour), float(p.scope_ops_per_hour), 3600.0)]
    if explicit:
        buckets.append(("sender:" + sender_id(key), 1.0, float(p.explicit_burst),
                        float(p.explicit_ops_per_minute), 60.0))
    return buckets


def sender_id(key: ScopeKey) -> str:
    h = hashlib.sha256(b"sender")
    for part in (key.principal.opaque_id, key.agent.namespace, key.agent.name):
        h.update(len(part).to_bytes(4, "big") + part.encode())
    return h.hexdigest()[:32]
