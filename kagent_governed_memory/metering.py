"""Metering (A4): bounded aggregate counters through the OpenTelemetry API.

Two attributes only, both from closed sets: ``operation`` and ``outcome`` (``ok`` or a
``ReasonCode``).  No scope, user, agent or room label exists, so none can be attached.
Counts of admitted work are evidence after admission, never the limit itself, and are kept
apart from chat-token metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

from opentelemetry import metrics, trace

from .errors import ReasonCode

__all__ = ["Metering", "Operation", "traced"]

_tracer = trace.get_tracer("kagent_governed_memory")

_P = ParamSpec("_P")
_R = TypeVar("_R")


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
        span = trace.get_current_span()
        if span.is_recording() and getattr(span, "name", "").startswith("kgm."):
            span.set_attributes({"kgm.outcome": value, "kgm.count": n})

    def embedded(self, n: int) -> None:
        if n > 0:
            self._items.add(n, {"operation": Operation.EMBED.value, "outcome": "ok"})


def traced(
    operation: Operation,
) -> Callable[[Callable[_P, Awaitable[_R]]], Callable[_P, Coroutine[Any, Any, _R]]]:
    """Run a coroutine method inside a ``kgm.memory.<operation>`` span whose only attributes
    are the operation, its outcome and a count (set by ``Metering.count``).  The decorated
    method keeps its signature (``ParamSpec``)."""
    def wrap(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Coroutine[Any, Any, _R]]:
        @functools.wraps(fn)
        async def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with _tracer.start_as_current_span(
                f"kgm.memory.{operation.value}", attributes={"kgm.operation": operation.value},
                record_exception=False, set_status_on_exception=False,
            ):
                return await fn(*args, **kwargs)

        return run

    return wrap
