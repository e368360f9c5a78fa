"""PostgreSQL plumbing of the direct store: a binary ``vector[]`` parameter, and the probe
that tells a refused login from an outage."""

from __future__ import annotations

import struct
from typing import Any

import psycopg
from psycopg.adapt import Dumper

from ..errors import GovernanceError, ReasonCode, from_database_error
from ._logpin import pinned_dsn


class _Vectors(list):  # type: ignore[type-arg]
    """Validated ``Vector``s sent as one binary ``vector[]``: psycopg would send a list of
    them as text (768 floats formatted and parsed per vector, ~1 ms each)."""

    __slots__ = ()


class _VectorArrayDumper(Dumper):
    format = psycopg.pq.Format.BINARY
    element_oid = 0

    def dump(self, obj: Any) -> bytes:
        # one dimension, no NULLs, the element type, (length, lower bound 1), then each
        # element as (byte length, pgvector's binary form)
        parts = [struct.pack("!iiIii", 1, 0, self.element_oid, len(obj), 1)]
        for v in obj:
            raw = v.to_binary()
            parts.append(struct.pack("!i", len(raw)))
            parts.append(bytes(raw))
        return b"".join(parts)


async def _login_probe(dsn: str, timeout: float) -> GovernanceError | None:
    """After the pool gave up: one direct connection, which reports a refused login
    (``login_refused``, a configuration error) instead of a timeout."""
    try:
        conn = await psycopg.AsyncConnection.connect(pinned_dsn(dsn),
                                                     connect_timeout=max(1, int(timeout)))
    except (psycopg.Error, OSError) as exc:
        found = from_database_error(exc, "open")
        return found if found.reason is ReasonCode.LOGIN_REFUSED else None
    await conn.close()
    return None
