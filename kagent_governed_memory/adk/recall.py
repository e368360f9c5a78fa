"""Recalled memory for the invocations in flight: inject, don't persist.

``load_memory`` answers the model with a count and opaque ids (its response is a session event,
and session stores keep events); the recalled texts wait here, keyed by invocation id, and are
added to that invocation's LLM requests only.  Entries leave when the invocation ends (the
after-agent callback) and, as a bound, when more than ``capacity`` invocations are in flight.
Nothing here is written anywhere.
"""

from __future__ import annotations

from collections import OrderedDict

from ..models import MemoryRecord

__all__ = ["Recalled"]


class Recalled:
    def __init__(self, capacity: int = 256) -> None:
        self._by_invocation: OrderedDict[str, list[MemoryRecord]] = OrderedDict()
        self._capacity = capacity

    def put(self, invocation_id: str, records: list[MemoryRecord]) -> None:
        seen = {r.id: r for r in self._by_invocation.pop(invocation_id, [])}
        seen.update((r.id, r) for r in records)
        self._by_invocation[invocation_id] = list(seen.values())
        while len(self._by_invocation) > self._capacity:
            self._by_invocation.popitem(last=False)

    def get(self, invocation_id: str) -> list[MemoryRecord]:
        return list(self._by_invocation.get(invocation_id, ()))

    def drop(self, invocation_id: str) -> None:
        self._by_invocation.pop(invocation_id, None)

    def __len__(self) -> int:
        return len(self._by_invocation)
