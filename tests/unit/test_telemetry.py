"""The log and span sanitizers, unit by unit (B6).  The end-to-end sentinel run is in
test_sentinels.py."""

from __future__ import annotations

import io
import logging
import secrets

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from kagent_governed_memory import GovernanceError, ReasonCode
from kagent_governed_memory.telemetry import (
    ContentFreeSpanProcessor,
    check_adk_span_content,
    install_content_free_logging,
)


@pytest.fixture
def capture():
    """A root handler at DEBUG whose output includes tracebacks, stack info and extras."""
    root = logging.getLogger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    dicts: list[str] = []

    class Everything(logging.Handler):
        def emit(self, record):
            dicts.append(repr(record.__dict__) + self.format(record))

    every = Everything()
    old_level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    root.addHandler(every)
    yield lambda: stream.getvalue() + "\n".join(dicts)
    root.removeHandler(handler)
    root.removeHandler(every)
    root.setLevel(old_level)


@pytest.fixture
def sanitizer(capture):
    s = install_content_free_logging()
    yield s
    s.remove()


def _sentinel() -> str:
    return "SNT" + secrets.token_hex(8)


def _emit_everything(name: str, s: str) -> None:
    log = logging.getLogger(name)
    log.info("query: %s", s)
    log.warning(f"f-string {s}")
    log.debug("dict %(q)s", {"q": s})
    log.info("extra field", extra={"query": s})
    log.info("stack", stack_info=True, extra={"payload": {"q": s}})
    try:
        raise ValueError(f"provider said {s}")
    except ValueError:
        log.exception("failed")
    try:
        try:
            raise KeyError(s)
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError:
        log.error("chained", exc_info=True)  # noqa: G201 - exc_info path on purpose


@pytest.mark.parametrize("name", ["kagent.adk._memory_service",
                                  "kagent_adk.kagent.adk.tools.memory_tools",
                                  "google_adk.google.adk.flows.llm_flows.base_llm_flow",
                                  "httpx", "psycopg", "openai._base_client"])
def test_upstream_loggers_carry_no_content(sanitizer, capture, name):
    s = _sentinel()
    _emit_everything(name, s)
    out = capture()
    assert s not in out
    assert "content-free: " in out and "exc=ValueError" in out and "exc=RuntimeError" in out


def test_without_the_sanitizer_the_same_calls_leak(capture):
    s = _sentinel()
    _emit_everything("kagent.adk._memory_service", s)
    assert s in capture()  # so the test above can fail


def test_own_loggers_keep_codes_and_counts_but_not_content(sanitizer, capture):
    s = _sentinel()
    log = logging.getLogger("kagent_governed_memory.store")
    log.warning("erasure failed reason=%s scope=%s count=%d", "verification_failed",
                "sk_" + "0123abcd" * 4, 3)
    log.warning("oops %s", f"the user said {s}")
    log.info("with extra", extra={"kgm_reason": ReasonCode.ENTRY_CAP_REACHED, "text": s})
    out = capture()
    assert f"erasure failed reason=verification_failed scope=sk_{'0123abcd' * 4} count=3" in out
    assert s not in out and "<redacted>" in out


def test_handlers_added_later_and_non_root_handlers_are_covered(sanitizer):
    s = _sentinel()
    stream = io.StringIO()
    late = logging.StreamHandler(stream)
    logger = logging.getLogger("kagent.late")
    logger.addHandler(late)  # not on root, added after installation
    logger.propagate = False
    try:
        logger.warning("late %s", s)
        try:
            raise OSError(s)
        except OSError:
            logger.exception("late failure")
    finally:
        logger.removeHandler(late)
        logger.propagate = True
    assert s not in stream.getvalue() and "content-free" in stream.getvalue()


def test_records_built_before_installation_are_filtered_at_root_handlers(capture):
    s = _sentinel()
    record = logging.makeLogRecord({"name": "kagent.queue", "levelno": logging.WARNING,
                                    "levelname": "WARNING", "msg": "queued %s", "args": (s,)})
    installed = install_content_free_logging()
    try:
        logging.getLogger().handle(record)
    finally:
        installed.remove()
    assert s not in capture()


def test_install_is_idempotent_and_removable(capture):
    original = logging.Logger.makeRecord
    a = install_content_free_logging()
    b = install_content_free_logging()
    assert a is b and logging.Logger.makeRecord is not original
    a.remove()
    assert logging.Logger.makeRecord is original
    assert all(a not in h.filters for h in logging.getLogger().handlers)
    s = _sentinel()
    logging.getLogger("kagent.x").warning("after removal %s", s)
    assert s in capture()


def test_span_processor_strips_memory_spans_and_leaves_others():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ContentFreeSpanProcessor(SimpleSpanProcessor(exporter)))
    tracer = provider.get_tracer("test")
    s = _sentinel()
    with tracer.start_as_current_span("execute_tool load_memory") as span:
        span.set_attribute("gen_ai.tool.name", "load_memory")
        span.set_attribute("gcp.vertex.agent.tool_call_args", f'{{"query": "{s}"}}')
        span.set_attribute("gen_ai.tool.call.arguments", s)
        span.add_event("tool.io", {"gen_ai.prompt": s, "gen_ai.tool.name": "load_memory"})
        span.record_exception(ValueError(s))
        span.set_status(Status(StatusCode.ERROR, f"failed with {s}"))
    with tracer.start_as_current_span("unrelated http call") as span:
        span.set_attribute("http.route", "/healthz")
    with tracer.start_as_current_span("some span") as span:
        span.set_attribute("gen_ai.prompt", s)  # content-bearing key marks it as memory-related
    spans = {sp.name: sp for sp in exporter.get_finished_spans()}
    dumped = "".join(sp.to_json() for sp in spans.values())
    assert s not in dumped
    tool = spans["execute_tool load_memory"]
    assert dict(tool.attributes) == {"gen_ai.tool.name": "load_memory"}
    assert [e.name for e in tool.events] == ["tool.io", "exception"]
    assert dict(tool.events[1].attributes) == {"exception.type": "ValueError"}
    assert tool.status.status_code is StatusCode.ERROR and not tool.status.description
    assert dict(spans["unrelated http call"].attributes) == {"http.route": "/healthz"}


def test_adk_span_content_check(monkeypatch, capture):
    monkeypatch.delenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", raising=False)
    assert check_adk_span_content("warn") is False
    assert "span_content_capture" in capture()
    with pytest.raises(GovernanceError) as err:
        check_adk_span_content("refuse")
    assert err.value.reason is ReasonCode.SPAN_CONTENT_CAPTURE
    monkeypatch.setenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "false")
    assert check_adk_span_content("refuse") is True
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    assert check_adk_span_content("ignore") is False


def _adk_puts_content_in_legacy_spans() -> bool:
    """google-adk's own answer, whichever major version is installed."""
    try:  # 2.x
        from google.adk.telemetry.context import TelemetryConfig
        return TelemetryConfig().should_add_content_to_legacy_spans
    except ImportError:  # 1.28-1.31
        from google.adk.telemetry.tracing import _should_add_request_response_to_spans
        return _should_add_request_response_to_spans()


@pytest.mark.parametrize("value", ["false", "FALSE", "0", "no", "off", " false", "true", ""])
def test_adk_span_content_check_agrees_with_adk(monkeypatch, value):
    monkeypatch.setenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", value)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    # never "off" while ADK still writes content into its spans
    assert not (check_adk_span_content("ignore") and _adk_puts_content_in_legacy_spans())


def test_metric_and_span_attributes_follow_otel_semantic_conventions() -> None:
    """error.type on failure only; gen_ai.operation.name where an OTel GenAI operation fits;
    our own attributes namespaced (kgm.memory.*); closed sets, no content."""
    from kagent_governed_memory.telemetry import Operation, attributes

    assert attributes(Operation.SAVE) == {"kgm.memory.operation": "save",
                                          "kgm.memory.outcome": "ok"}
    assert attributes(Operation.EMBED, "rate_limited") == {
        "kgm.memory.operation": "embed", "kgm.memory.outcome": "rate_limited",
        "error.type": "rate_limited", "gen_ai.operation.name": "embeddings"}
    assert attributes(Operation.SUMMARISE)["gen_ai.operation.name"] == "chat"
    for op in Operation:
        assert set(attributes(op, "consent_required")) <= {
            "kgm.memory.operation", "kgm.memory.outcome", "error.type", "gen_ai.operation.name"}
