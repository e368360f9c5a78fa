"""Metering (A4): bounded aggregate counters through the OpenTelemetry API.

Attributes come from closed sets only, named after OpenTelemetry's semantic conventions where
one fits: ``kgm.memory.operation`` and ``kgm.memory.outcome`` (``ok`` or a ``ReasonCode``);
``error.type`` (the reason code) when the operation did not succeed; ``gen_ai.operation.name``
(``embeddings``, ``chat``) for the operations that call a model or an embedding provider.  No
scope, user, agent or room label exists, so none can be attached.  Counts of admitted work are
evidence after admission, never the limit itself, and are kept apart from chat-token metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

from opentelemetry import metrics, trace

from ..errors import ReasonCode

__all__ = ["Metering", "Operation", "attributes", "traced"]

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


# OpenTelemetry GenAI semantic conventions' operation names, for ours that are one of them.
_GEN_AI_OPERATION = {Operation.EMBED: "embeddings", Operation.SUMMARISE: "chat"}


def attributes(operation: Operation, outcome: str = "ok") -> dict[str, str]:
    """The metric (and span) attributes of one operation's outcome: closed sets only."""
    attrs = {"kgm.memory.operation": operation.value, "kgm.memory.outcome": outcome}
    if outcome != "ok":
        attrs["error.type"] = outcome
    if operation in _GEN_AI_OPERATION:
        attrs["gen_ai.operation.name"] = _GEN_AI_OPERATION[operation]
    return attrs


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
        self._operations.add(n, attributes(operation, value))
        span = trace.get_current_span()
        if span.is_recording() and getattr(span, "name", "").startswith("kgm."):
            span.set_attributes({"kgm.memory.outcome": value, "kgm.memory.count": n,
                                 **({"error.type": value} if value != "ok" else {})})

    def embedded(self, n: int) -> None:
        if n > 0:
            self._items.add(n, attributes(Operation.EMBED))


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
                f"kgm.memory.{operation.value}",
                attributes={k: v for k, v in attributes(operation).items()
                            if k != "kgm.memory.outcome"},
                record_exception=False, set_status_on_exception=False,
            ):
                return await fn(*args, **kwargs)

        return run

    return wrap
