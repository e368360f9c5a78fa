"""ADR 0023 §44, SPEC B6: distinct random sentinels are injected into a prefetch query, a
load_memory query, a fact being saved, a malformed summariser output, a failed model
response, a failed embedding-provider response body (HTTP 500 from a loopback server) and a
failed database response (a CHECK violation whose DETAIL echoes the row).  The real Runner
flow runs with root logging at DEBUG, the OpenTelemetry SDK (in-memory spans and metrics),
and the audit tables; no sentinel — nor its hex, base64 or JSON-escaped form — may reach any
log line, span, metric attribute, audit row, returned tool message or raised error.

The same flow without the sanitizers leaks at least one sentinel: the test can fail.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.adk import build, save_plan
from support.scopes import make_key
from support.sentinels import ROUTER, leaks, make_sentinels
from support.settings import EMBEDDER_TIMEOUT
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kagent_governed_memory import (
    GovernanceError,
    HashingEmbedder,
    MemoryPolicy,
    OpenAICompatibleEmbedder,
    ProviderError,
)
from kagent_governed_memory.store import Admission
from kagent_governed_memory.telemetry import ContentFreeSpanProcessor, install_content_free_logging

PURPOSE = "personal_preferences"


@pytest.fixture(autouse=True)
def adk_captures_content(monkeypatch):
    """The worst case: google-adk writes messages, tool arguments and results into spans."""
    monkeypatch.setenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "true")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")


@pytest.fixture(scope="module", autouse=True)
def tracer_provider():
    provider = TracerProvider()
    provider.add_span_processor(ROUTER)
    trace.set_tracer_provider(provider)
    yield provider


class _Provider(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/embeddings on loopback: 1024-d vectors (so the truncation path
    runs), or a 500 whose body echoes a sentinel when an input contains FAILEMBED."""

    failure_body = b""
    failures = 0
    _embedder = HashingEmbedder(768)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if any("FAILEMBED" in text for text in body["input"]):
            type(self).failures += 1
            self._send(500, self.failure_body)
            return
        data = [{"index": i, "embedding": self._embedder.embed_one(t) + [0.0] * 256}
                for i, t in enumerate(body["input"])]
        self._send(200, json.dumps({"data": data}).encode())

    def _send(self, status, payload):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def _run_flow(store, database, provider_url, sentinels, *, sanitized: bool):
    s = sentinels
    _Provider.failure_body = json.dumps({"error": f"upstream echoed {s['embed_body']}"}).encode()
    _Provider.failures = 0

    root = logging.getLogger()
    stream = io.StringIO()
    text_handler = logging.StreamHandler(stream)
    text_handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    dicts: list[str] = []

    class Everything(logging.Handler):
        def emit(self, record):
            dicts.append(repr(record.__dict__) + "\n" + self.format(record))

    old_level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(text_handler)
    root.addHandler(Everything())
    sanitizer = install_content_free_logging() if sanitized else None
    exporter = InMemorySpanExporter()
    ROUTER.target = (ContentFreeSpanProcessor(SimpleSpanProcessor(exporter)) if sanitized
                     else SimpleSpanProcessor(exporter))

    def kagent_style_logging(tool, args, tool_context):
        # verbatim shape of kagent 0.9.11's memory_tools / _memory_service log lines
        if tool.name == "load_memory":
            logging.getLogger("kagent_adk.kagent.adk.tools.memory_tools").info(
                "Loading memory for query: %s", args.get("query"))

    with database.admin() as conn:
        conn.execute("ALTER TABLE memory_entry ADD CONSTRAINT sentinel_probe"
                     " CHECK (content NOT LIKE 'DBFAIL%')")
    embedder = OpenAICompatibleEmbedder(provider_url, "bge-m3", fit="truncate",  # 1024 -> 768
                                        timeout=EMBEDDER_TIMEOUT)
    raised: list[BaseException] = []
    h = build(store, plan=save_plan, embedder=embedder, before_tool=kagent_style_logging,
              admission=Admission(store), span_content="warn",  # capture forced on
              summaries=[f"Sure! Facts: {s['summary']}", RuntimeError(f"model said {s['model']}")])
    key = make_key()
    try:
        await store.grant(key, purpose=PURPOSE)
        turns = [
            f"Please tell me what you remember about {s['prefetch_query']} and my morning drink.",
            f"remember: {s['fact']} prefers green tea with honey",
            f"recall: {s['load_query']}",
            f"recall: FAILEMBED {s['embed_query']}",
            f"remember: DBFAIL {s['db']}",
            *(f"Plain turn number {i}." for i in range(5)),
        ]
        for text in turns:
            await h.turn(text, key=key)
        await h.service.drain()
        await h.turn("What do I like to drink in the morning, green tea with honey maybe?",
                     key=key, session="s2")
        # the failure paths really ran
        assert _Provider.failures >= 1
        assert h.model.calls.count("summarise") == 2
        assert "<memory>" in str(h.model.requests[-1].config.system_instruction)
        # errors raised to a direct caller
        g = await store.generation(key)
        for attempt in (
            lambda: store.save(key, g, facts=[f"DBFAIL {s['db']}"],
                               embeddings=[HashingEmbedder().embed_one("x")]),
            lambda: embedder.embed([f"FAILEMBED {s['embed_query']}"]),
        ):
            try:
                await attempt()
            except GovernanceError as exc:
                raised.append(exc)
        assert [type(e) for e in raised][1] is ProviderError and len(raised) == 2

        tool_messages = []
        for session_id in h.sessions.values():
            session = await h.runner.session_service.get_session(
                app_name=h.runner.app_name, user_id="attribution-only", session_id=session_id)
            for event in session.events:
                for part in (event.content.parts or []) if event.content else []:
                    if part.function_response and part.function_response.name == "save_memory":
                        tool_messages.append(json.dumps(part.function_response.response))
                    if part.function_response and part.function_response.name == "load_memory" \
                            and part.function_response.response.get("status") != "ok":
                        tool_messages.append(json.dumps(part.function_response.response))
        assert any("invalid_argument" in m for m in tool_messages), tool_messages
    finally:
        await embedder.aclose()
        if sanitizer is not None:
            sanitizer.remove()
        ROUTER.target = None
        root.removeHandler(text_handler)
        for handler in [x for x in root.handlers if type(x).__name__ == "Everything"]:
            root.removeHandler(handler)
        root.setLevel(old_level)

    with database.admin() as conn:
        audit = "\n".join(
            str(r) for table in ("memory_audit", "memory_scope", "memory_admission_bucket")
            for r in conn.execute(f"SELECT row_to_json(t)::text FROM {table} t").fetchall())
    errors = "\n".join(
        "".join(traceback.format_exception(e)) + str(e) + repr(e) + repr(e.args) for e in raised)
    return {
        "logs": stream.getvalue() + "\n".join(dicts),
        "spans": "\n".join(span.to_json() for span in exporter.get_finished_spans()),
        "metrics": json.dumps(h.metrics()),
        "audit": audit,
        "tool messages": "\n".join(tool_messages),
        "errors": errors,
    }, exporter


@pytest.fixture
async def roomy_store(database):
    """A store under a policy with room for the scripted session's explicit operations (the
    budgets are the scope's registered policy's)."""
    from support.db import open_store

    s = await open_store(database, MemoryPolicy(version="sentinel-run", explicit_burst=20,
                                                explicit_ops_per_minute=60))
    yield s
    await s.close()


async def test_no_sentinel_reaches_any_sink(roomy_store, database, provider_url):
    store = roomy_store
    sentinels = make_sentinels()
    sinks, exporter = await _run_flow(store, database, provider_url, sentinels, sanitized=True)
    assert exporter.get_finished_spans(), "spans were exported"
    assert any(sp.name.startswith("kgm.memory.") for sp in exporter.get_finished_spans())
    assert "content-free" in sinks["logs"], "upstream log lines were captured (and sanitized)"
    for sink, text in sinks.items():
        assert text, f"the {sink} sink captured nothing"
        assert leaks(text, sentinels) == [], sink


async def test_without_the_sanitizers_sentinels_leak(roomy_store, database, provider_url):
    store = roomy_store
    sentinels = make_sentinels()
    sinks, _ = await _run_flow(store, database, provider_url, sentinels, sanitized=False)
    leaked = {sink: leaks(text, sentinels) for sink, text in sinks.items()}
    assert leaked["logs"] and leaked["spans"], leaked
    # the library's own sinks stay clean even then
    for sink in ("metrics", "audit", "tool messages", "errors"):
        assert leaked[sink] == [], sink
