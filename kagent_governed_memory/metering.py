"""Metering (A4): bounded aggregate counters through the OpenTelemetry API.

Two attributes only, both from closed sets: ``operation`` and ``outcome`` (``ok`` or a
``ReasonCode``).  No scope, user, agent or room label exists, so none can be attached.
Counts of admitted work are evidence after admission, never the limit itself, and are kept
apart from chat-token metrics.
"""

from __future__ import annotations

from enum import StrEnum

from opentelemetry import metrics

from .errors import ReasonCode

__all__ = ["Metering", "Operation"]


class Operation(StrEnum):
    REQUEST = "request"  # a request's memory binding: ok, or why memory is absent
    RETRIEVE = "retrieve"
    PREFETCH = "prefetch"
    SAVE = "save"
    SUMMARISE = "summarise"
    EMBED = "embed"
    DELETE = "delete"


class Metering:
    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(
            "kagent_governed_memory"
        )
        self._operations = meter.create_counter(
            "kgm.memory.operations", unit="1",
            description="Governed memory operations by operation and outcome",
        )
        self._items = meter.create_counter(
            "kgm.memory.embedding.items", unit="1",
            description="Texts sent to the embedding provider after admission",
        )

    def count(self, operation: Operation, outcome: ReasonCode | str = "ok", n: int = 1) -> None:
        value = outcome.value if isinstance(outcome, ReasonCode) else "ok"
        self._operations.add(n, {"operation": operation.value, "outcome": value})

    def embedded(self, n: int) -> None:
        if n > 0:
            self._items.add(n, {"operation": Operation.EMBED.value, "outcome": "ok"})
