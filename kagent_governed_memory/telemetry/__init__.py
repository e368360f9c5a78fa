"""Content-free telemetry: span and log sanitizers (``_spans``), the OpenTelemetry log-record
processor (``_otel_logs``) and the content-free metering of memory operations (``_metering``).
Import the names below from here."""

from ._metering import Metering, Operation, attributes, traced
from ._otel_logs import ContentFreeLogRecordProcessor
from ._spans import (
    ContentFreeLogging,
    ContentFreeSpanProcessor,
    check_adk_span_content,
    install_content_free_logging,
)

__all__ = [
    "ContentFreeLogRecordProcessor",
    "ContentFreeLogging",
    "ContentFreeSpanProcessor",
    "Metering",
    "Operation",
    "attributes",
    "check_adk_span_content",
    "install_content_free_logging",
    "traced",
]
