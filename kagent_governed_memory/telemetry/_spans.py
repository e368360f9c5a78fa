"""Content-free logs and traces (B6, A4): the sinks beside memory never carry its content.

Logs — ``install_content_free_logging()`` rewrites every record *when it is created*
(``logging.Logger.makeRecord``, so every handler sees the rewritten record, including handlers
added later and handlers on non-root loggers), and again in a filter on the root logger's
handlers (records built elsewhere, e.g. by ``logging.makeLogRecord`` in a queue listener):

* this library's loggers (``kagent_governed_memory.*``): the format string is our own literal;
  each argument must be a number, a ``ReasonCode`` or a bounded opaque token, else it becomes
  ``<redacted>``;
* the loggers that sit beside memory (kagent, kagent-adk, google-adk, httpx/httpcore, psycopg,
  openai, …): the message, its arguments, ``exc_info``/``exc_text``, ``stack_info`` and every
  ``extra=`` field are replaced by a summary — logger, level, and the exception's type name.
  f-strings are covered because the whole message is replaced, not parsed.

Not covered: records already written before installation; handlers that bypass
``Logger.makeRecord`` and are not on the root logger; ``print``/``sys.stderr`` writes;
PostgreSQL's own server log (see the README for the settings an operator must use).

Traces — ``ContentFreeSpanProcessor`` wraps the processor that exports: for memory-related
spans (this library's, google-adk's agent/LLM/tool spans, database spans) it keeps only
allow-listed attributes, reduces exception events to ``exception.type``, drops other event and
link attributes that are not allow-listed, and drops status descriptions.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import GovernanceError, InvalidInput, ReasonCode

__all__ = [
    "ContentFreeLogging",
    "ContentFreeSpanProcessor",
    "check_adk_span_content",
    "install_content_free_logging",
]

OWN_PREFIX = "kagent_governed_memory"
UPSTREAM_PREFIXES = (
    "kagent", "kagent_adk", "google_adk", "google.adk", "google_genai", "google.genai",
    "httpx", "httpcore", "psycopg", "psycopg_pool", "openai", "anthropic", "litellm", "LiteLLM",
    "a2a", "mcp", "opentelemetry",
    # "Task exception was never retrieved" carries the exception's text
    "asyncio",
)
# What this library's own log arguments may be: numbers, reason codes, operation names, opaque
# scope/principal ids and entry UUIDs.  Anything else — however harmless it looks — is redacted.
_OPAQUE = re.compile(r"(sk|pr)_[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# An exception's class name (never its message): "RuntimeError", "ReadTimeout", ...
_EXCEPTION_TYPE = re.compile(r"[A-Z][A-Za-z0-9]{0,58}(Error|Exception|Timeout|Exit|Failure)")
_OPERATIONS = frozenset({
    "open", "migrate", "schema_version", "grant", "generation", "save", "search", "inspect",
    "status", "forget", "forget_all", "withdraw", "erase", "verify", "record_failure",
    "offboard", "sweep", "admit", "embed", "summarise", "retrieve", "prefetch", "delete",
    "request", "report", "unblock", "add_session_to_memory", "add_events_to_memory",
})
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_REDACTED = "<redacted>"
_MARK = "_kgm_content_free"
_OWN, _UPSTREAM, _OTHER = object(), object(), object()


def _is(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _safe_arg(value: Any) -> Any:
    if isinstance(value, bool | int | float | ReasonCode) or value is None:
        return value
    if isinstance(value, str) and (
        value in _OPERATIONS or value in ReasonCode._value2member_map_ or _OPAQUE.fullmatch(value)
        or _EXCEPTION_TYPE.fullmatch(value)
    ):
        return value
    return _REDACTED


class ContentFreeLogging(logging.Filter):
    """The installed sanitizer; ``remove()`` restores logging exactly as it was."""

    def __init__(self, upstream: Sequence[str] = UPSTREAM_PREFIXES) -> None:
        super().__init__()
        self.upstream = tuple(upstream)
        self._original_make_record: Any = None
        self._handlers: list[logging.Handler] = []
        self._kinds: dict[str, object] = {}

    # -- the rewrite ------------------------------------------------------------------------

    def sanitize(self, record: logging.LogRecord) -> logging.LogRecord:
        fields = record.__dict__
        if _MARK in fields:
            return record
        kind = self._kind(record.name)
        if kind is _OWN:
            self._own(record)
        elif kind is _UPSTREAM:
            self._upstream(record)
        fields[_MARK] = True
        return record

    def _kind(self, name: str) -> object:
        """Which rule a logger follows, decided once per logger name."""
        kind = self._kinds.get(name)
        if kind is None:
            kind = (_OWN if _is(name, (OWN_PREFIX,)) else
                    _UPSTREAM if _is(name, self.upstream) else _OTHER)
            if len(self._kinds) < 4096:
                self._kinds[name] = kind
        return kind

    def _own(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str):
            record.msg = f"{record.name} event"
            record.args = ()
        elif isinstance(record.args, tuple):
            record.args = tuple([_safe_arg(a) for a in record.args])
        elif isinstance(record.args, dict):
            record.args = {k: _safe_arg(v) for k, v in record.args.items()}
        self._strip(record, keep_extra=True)

    def _upstream(self, record: logging.LogRecord) -> None:
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        record.msg = "content-free: %s %s" + (" exc=%s" if exc_type else "")
        record.args = (record.name, record.levelname.lower(),
                       *((exc_type,) if exc_type else ()))
        self._strip(record, keep_extra=False)

    @staticmethod
    def _strip(record: logging.LogRecord, *, keep_extra: bool) -> None:
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        fields = record.__dict__
        fields.pop("message", None)
        extras = fields.keys() - _STANDARD
        for name in extras:
            own = keep_extra and name.startswith("kgm_")
            fields[name] = _safe_arg(fields[name]) if own else _REDACTED

    def filter(self, record: logging.LogRecord) -> bool:
        self.sanitize(record)
        return True

    # -- installation -----------------------------------------------------------------------

    def _install(self) -> None:
        original = logging.Logger.makeRecord
        sanitizer = self

        def make_record(logger: logging.Logger, *args: Any, **kwargs: Any) -> logging.LogRecord:
            return sanitizer.sanitize(original(logger, *args, **kwargs))

        make_record.__kgm_sanitizer__ = self  # type: ignore[attr-defined]
        self._original_make_record = original
        logging.Logger.makeRecord = make_record  # type: ignore[method-assign, assignment]
        for handler in logging.getLogger().handlers:
            handler.addFilter(self)
            self._handlers.append(handler)

    def cover(self, handler: logging.Handler) -> None:
        """Also filter a handler that is not on the root logger (e.g. a queue listener's)."""
        handler.addFilter(self)
        self._handlers.append(handler)

    def remove(self) -> None:
        with _LOCK:
            global _INSTALLED
            if self._original_make_record is not None:
                logging.Logger.makeRecord = self._original_make_record  # type: ignore[method-assign]
                self._original_make_record = None
            for handler in self._handlers:
                handler.removeFilter(self)
            self._handlers.clear()
            if _INSTALLED is self:
                _INSTALLED = None


_LOCK = threading.Lock()
_INSTALLED: ContentFreeLogging | None = None


def install_content_free_logging(upstream: Sequence[str] = UPSTREAM_PREFIXES
                                 ) -> ContentFreeLogging:
    """Install the log sanitizer (idempotent: a second call returns the installed one, after
    covering root handlers added since)."""
    global _INSTALLED
    with _LOCK:
        if _INSTALLED is None:
            _INSTALLED = ContentFreeLogging(upstream)
            _INSTALLED._install()
        else:
            for handler in logging.getLogger().handlers:
                if _INSTALLED not in handler.filters:
                    _INSTALLED.cover(handler)
        return _INSTALLED


# -- traces ---------------------------------------------------------------------------------

_SPAN_NAME_PREFIXES = ("kgm.", "invoke_agent", "call_llm", "execute_tool", "invocation",
                       "agent_run", "generate_content", "send_data", "compact_events")
_CONTENT_KEY_PREFIXES = ("gcp.vertex.agent.", "gen_ai.", "kgm.", "db.", "llm.")
_ALLOWED_ATTRIBUTES = frozenset({
    "gen_ai.operation.name", "gen_ai.system", "gen_ai.provider.name", "gen_ai.request.model",
    "gen_ai.response.model", "gen_ai.agent.name", "gen_ai.tool.name", "gen_ai.tool.type",
    "gen_ai.tool.call.id", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons", "gen_ai.conversation.id", "gcp.vertex.agent.event_id",
    "gcp.vertex.agent.invocation_id", "gcp.vertex.agent.session_id", "error.type",
    "kgm.memory.operation", "kgm.memory.outcome", "kgm.memory.count", "db.system",
    "db.operation",
    "db.system.name", "db.operation.name",
})


def _is_memory_span(span: Any) -> bool:
    name = span.name or ""
    if name.startswith(_SPAN_NAME_PREFIXES):
        return True
    keys = list((span.attributes or {}).keys())
    return any(k.startswith(_CONTENT_KEY_PREFIXES) for k in keys)


def allowed_attributes(attributes: Any) -> dict[str, Any]:
    """The attributes of a memory-related span or log record that carry no content."""
    return {k: v for k, v in (attributes or {}).items() if k in _ALLOWED_ATTRIBUTES}


_allowed = allowed_attributes


if TYPE_CHECKING:  # typed as the SDK's span processor; at run time duck-typed (no SDK import)
    from opentelemetry.sdk.trace import SpanProcessor as _SpanProcessor
else:
    _SpanProcessor = object


class ContentFreeSpanProcessor(_SpanProcessor):
    """Wraps the exporting span processor: memory-related spans are passed on as sanitized
    copies.  Use it in place of the processor it wraps::

        provider.add_span_processor(ContentFreeSpanProcessor(BatchSpanProcessor(exporter)))
    """

    def __init__(self, wrapped: _SpanProcessor) -> None:
        self._wrapped = wrapped

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._wrapped.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Any) -> None:  # SDK >= 1.3x calls this on every processor
        hook = getattr(self._wrapped, "_on_ending", None)
        if hook is not None:
            hook(span)

    def on_end(self, span: Any) -> None:
        self._wrapped.on_end(self.sanitize(span) if _is_memory_span(span) else span)

    @staticmethod
    def sanitize(span: Any) -> Any:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import Link, Status

        events = []
        for event in span.events or ():
            if event.name == "exception":
                kept = {"exception.type": (event.attributes or {}).get("exception.type", "")}
            else:
                kept = _allowed(event.attributes)
            events.append(Event(event.name, kept, timestamp=event.timestamp))
        links = [Link(link.context, _allowed(link.attributes)) for link in span.links or ()]
        return ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=_allowed(span.attributes),
            events=events,
            links=links,
            kind=span.kind,
            status=Status(span.status.status_code),
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def shutdown(self) -> None:
        self._wrapped.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._wrapped.force_flush(timeout_millis))


SpanContentMode = Literal["warn", "refuse", "ignore"]


def check_adk_span_content(mode: SpanContentMode = "warn") -> bool:
    """google-adk writes tool arguments and responses (``load_memory`` queries, retrieved
    facts) into spans unless ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS`` is false (legacy spans,
    default on) and ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is unset or
    ``NO_CONTENT`` (GenAI semconv spans and events).  Returns True when both are off;
    otherwise warns (content-free) or, with ``mode="refuse"``, raises
    ``GovernanceError(ReasonCode.SPAN_CONTENT_CAPTURE)``."""
    if mode not in ("warn", "refuse", "ignore"):  # a typo must not switch the check off
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="span_content")
    # Parsed exactly as google-adk does (1.28-1.31: ``.lower() in ('false', '0')``, no strip;
    # 2.x also strips).  Any other spelling ("no", "off", " false" on 1.x) leaves ADK capturing.
    legacy = os.environ.get("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "true").lower()
    semconv = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    if legacy in ("false", "0") and semconv.strip().upper() in (
            "", "NO_CONTENT", "FALSE", "0"):
        return True
    if mode == "refuse":
        raise GovernanceError(ReasonCode.SPAN_CONTENT_CAPTURE)
    if mode == "warn":
        logging.getLogger(f"{OWN_PREFIX}.telemetry").warning(
            "adk span content capture is on reason=%s: google-adk writes tool results "
            "(recalled memory) into spans and GenAI log events; they leave the process "
            "content-free only through exporters wrapped in ContentFreeSpanProcessor and "
            "ContentFreeLogRecordProcessor. To stop the capture, set "
            "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false and leave "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT unset",
            ReasonCode.SPAN_CONTENT_CAPTURE.value)
    return False
