"""What the service answers about a request: who may use memory, and what a save did."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ReasonCode
from ..identity import ScopeKey


@dataclass(frozen=True)
class Admitted:
    """A request that may use memory: its key and the generation captured at admission."""

    key: ScopeKey
    generation: int


@dataclass(frozen=True)
class SaveOutcome:
    saved: tuple[str, ...] = ()
    reason: ReasonCode | None = None
    dropped: int = 0


def _bounded_query(query: object, max_bytes: int) -> str:
    """Queries are never stored, so an over-long one is cut (on a UTF-8 boundary), not refused."""
    if not isinstance(query, str):
        return ""
    raw = query.replace("\x00", " ").strip().encode("utf-8", "ignore")[:max_bytes]
    return raw.decode("utf-8", "ignore").strip()

