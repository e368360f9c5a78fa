"""What the Matrix sentinel test probes: every log record raw (as created) and every span, for
the length of one flow (``capture``), then the sinks as text (``log_sinks``)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Captured:
    records: list[logging.LogRecord] = field(default_factory=list)
    exporter: Any = None

    def spans(self) -> str:
        return "\n".join(span.to_json() for span in self.exporter.get_finished_spans())


@contextmanager
def capture() -> Iterator[Captured]:
    """Every record at DEBUG and up, raw (the library's sanitizer, if a test installed it, is
    removed for the flow: the bridge and the library must be clean without it), and every span
    (``test_sentinels``' router, on an SDK tracer provider)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from support.sentinels import ROUTER

    from kagent_governed_memory.telemetry import _spans as telemetry
    from kagent_governed_memory.telemetry import install_content_free_logging

    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(ROUTER)  # type: ignore[arg-type]
        trace.set_tracer_provider(provider)
    got = Captured(exporter=InMemorySpanExporter())
    ROUTER.target = SimpleSpanProcessor(got.exporter)
    installed = telemetry._INSTALLED
    if installed is not None:
        installed.remove()

    class Everything(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.records.append(copy.copy(record))

    handler = Everything()
    root = logging.getLogger()
    old_level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield got
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        if installed is not None:
            install_content_free_logging()
        ROUTER.target = None


def log_sinks(got: Captured) -> tuple[str, str]:
    """(the bridge's and the library's raw records, every record as the library's sanitizer
    leaves it) as text: the agent's side (google-adk, a2a-sdk, uvicorn, httpx log requests at
    DEBUG) is a deployment's to sanitize."""
    from kagent_governed_memory.telemetry import ContentFreeLogging

    fmt = logging.Formatter("%(name)s %(levelname)s %(message)s %(args)r")

    def text(rs: list[logging.LogRecord]) -> str:
        return "\n".join(fmt.format(r) + " " + repr(r.__dict__) for r in rs)

    ours = ("kagent_governed_memory", "mau", "aiohttp")
    sanitizer = ContentFreeLogging()
    return (text([r for r in got.records if r.name.split(".")[0] in ours]),
            text([sanitizer.sanitize(copy.copy(r)) for r in got.records]))
