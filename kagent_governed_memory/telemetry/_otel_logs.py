"""Content-free OpenTelemetry *logs*: the logs-SDK twin of ``ContentFreeSpanProcessor``.

google-adk's GenAI semantic conventions can emit prompts, system instructions (which hold
prefetched memories) and tool results as log records (``gen_ai.client.inference.operation
.details`` with ``gen_ai.system_instructions``, ``gen_ai.input.messages`` …) when content capture
is ``EVENT_ONLY`` or ``SPAN_AND_EVENT``; a span processor never sees them.  Wrap the processor
that exports your log records::

    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    provider.add_log_record_processor(ContentFreeLogRecordProcessor(BatchLogRecordProcessor(exp)))

Every record that is memory-related (a ``gen_ai.*`` event or attribute) or comes from an
instrumentation scope of the libraries around memory (google-adk, google-genai, kagent, …) loses
its body and keeps only allow-listed attributes (operation, model, token counts, ids, error
type) before the wrapped processor sees it.  Other records pass unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._spans import UPSTREAM_PREFIXES, _is, allowed_attributes

__all__ = ["ContentFreeLogRecordProcessor"]

_CONTENT_FREE_BODY = "content-free"


if TYPE_CHECKING:  # typed as the SDK's processor; at run time duck-typed (no SDK import)
    from opentelemetry.sdk._logs import LogRecordProcessor as _LogRecordProcessor
else:
    _LogRecordProcessor = object


class ContentFreeLogRecordProcessor(_LogRecordProcessor):
    """A ``LogRecordProcessor`` that makes memory-related records content-free, then hands
    them to ``inner`` (duck-typed, so importing this needs no OpenTelemetry SDK)."""

    def __init__(self, inner: _LogRecordProcessor) -> None:
        self._inner = inner

    def on_emit(self, log_data: Any) -> None:
        record = getattr(log_data, "log_record", log_data)
        scope = getattr(getattr(log_data, "instrumentation_scope", None), "name", "") or ""
        attributes = getattr(record, "attributes", None) or {}
        event = getattr(record, "event_name", None) or ""
        if (event.startswith("gen_ai.") or _is(scope, UPSTREAM_PREFIXES)
                or any(str(k).startswith("gen_ai.") for k in attributes)):
            kept = allowed_attributes(attributes)
            for name in [k for k in attributes if k not in kept]:
                del attributes[name]
            record.body = _CONTENT_FREE_BODY
        self._inner.on_emit(log_data)

    emit = on_emit  # SDK releases before on_emit called it emit

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))
