"""Content-free OpenTelemetry logs: with google-adk's GenAI content capture in every mode it
supports, no memory reaches an exported log record once ``ContentFreeLogRecordProcessor`` wraps
the exporting processor; without it, EVENT_ONLY and SPAN_AND_EVENT leak the prefetched fact
(the system instruction) into the logs pipeline: the test can fail."""

from __future__ import annotations

import secrets

import pytest
from support.adk import build
from support.scopes import make_key, vec
from opentelemetry import _logs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from kagent_governed_memory.telemetry import ContentFreeLogRecordProcessor

PURPOSE = "personal_preferences"
MODES = ["NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"]


class _Router:
    """The process-wide logger provider routes to whichever pipeline the running test set."""

    target = None

    def on_emit(self, log_data):
        if self.target is not None:
            self.target.on_emit(log_data)

    emit = on_emit

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


ROUTER = _Router()


@pytest.fixture(scope="module", autouse=True)
def logger_provider():
    provider = LoggerProvider()
    provider.add_log_record_processor(ROUTER)
    _logs.set_logger_provider(provider)
    if _logs.get_logger_provider() is not provider:
        pytest.fail("another global OpenTelemetry LoggerProvider was set first: this test "
                    "cannot observe the logs pipeline (NOT a pass)")
    yield provider


async def _run(store, mode: str, monkeypatch, *, sanitize: bool) -> tuple[str, int]:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
    exporter = InMemoryLogRecordExporter()
    inner = SimpleLogRecordProcessor(exporter)
    ROUTER.target = ContentFreeLogRecordProcessor(inner) if sanitize else inner
    try:
        key = make_key()
        g = (await store.grant(key, purpose=PURPOSE)).generation
        mark = "SENTINEL-" + secrets.token_hex(8)
        fact = f"{mark} tea with oat milk in the morning please"
        await store.save(key, g, facts=[fact], embeddings=[vec(fact)])
        h = build(store, span_content="warn")  # capture is on here on purpose
        await h.turn(fact, key=key)  # a new session: prefetch puts the fact in the instruction
        assert any(mark in str(r.config.system_instruction) for r in h.model.requests), \
            "the fact did not reach the model: nothing for the logs to leak"
    finally:
        ROUTER.target = None
    records = exporter.get_finished_logs()
    dump = "\n".join(f"{d.log_record.event_name} {d.log_record.body!r} "
                     f"{dict(d.log_record.attributes or {})!r}" for d in records)
    return (dump if mark in dump else ""), len(records)


@pytest.mark.parametrize("mode", MODES)
async def test_no_memory_in_otel_logs_in_any_capture_mode(store, monkeypatch, mode):
    leaked, records = await _run(store, mode, monkeypatch, sanitize=True)
    assert leaked == ""
    if mode in ("EVENT_ONLY", "SPAN_AND_EVENT"):
        assert records > 0, "google-adk emitted no log record: the check saw nothing"


@pytest.mark.parametrize("mode", ["EVENT_ONLY", "SPAN_AND_EVENT"])
async def test_without_the_processor_the_logs_pipeline_leaks(store, monkeypatch, mode):
    leaked, _ = await _run(store, mode, monkeypatch, sanitize=False)
    assert leaked, "expected google-adk to emit the system instruction into OTel logs"
