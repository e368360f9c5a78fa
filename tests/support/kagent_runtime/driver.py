"""Drive the real kagent-adk 0.9.11 runtime (patched or not) end to end; print a JSON report.

Runs inside the kagent venv with ``PYTHONPATH`` = the (patched or unpatched) copy of
``kagent/adk``, this repository and this folder.  Nothing here stubs the code under test:

* the agent comes from kagent's own ``AgentConfig.to_agent`` (memory tools, prefetch and the
  auto-save callback installed by ``_configure_memory``) with a scripted ``BaseLlm`` as its
  model;
* requests go through kagent's ``KAgentApp.build()`` FastAPI app -- the A2A JSON-RPC server,
  ``KAgentRequestContextBuilder`` and kagent's ``A2aAgentExecutor`` (where the patch reads the
  ``x-kagent-memory-scope`` header) -- and a real google-adk ``Runner``;
* kagent's ``KagentMemoryService`` talks over ``httpx.ASGITransport`` (no network) to the test
  controller (``controller.py``: the governed API on the library's store and the ephemeral
  PostgreSQL);
* embeddings go through kagent's ``KAgentEmbedding`` and the OpenAI SDK to a loopback
  OpenAI-compatible server started here (feature-hashing vectors).

Only one seam is replaced, in ``kagent.adk._a2a`` (and the governed service's module): the
controller HTTP client's transport.  kagent's own ``KAgentSessionService`` and
``KAgentTaskStore`` persist sessions, events and tasks through it to ``kagent_core_routes.py``
(kagent's session and task routes, stored in kagent's core tables in PostgreSQL), so a test can
read back everything kagent would have kept.  The root logger runs at DEBUG into a list; the
report says where each sentinel appeared.

Usage: ``python driver.py patched|unpatched`` with ``KGM_TEST_DSN`` / ``KGM_TEST_ADMIN_DSN``
(patched only) and optional ``KGM_TEST_LOG_FILE`` (the captured log, for a failing test).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import base64
import json
import logging
import os
import secrets
import shutil
import socket
import struct
import sys
import tempfile
import traceback
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

# patched: the patched package, memory.mode governed; legacy: the patched package, memory
# without a mode (legacy); unpatched: kagent-adk 0.9.11 as released.
RUNTIME = sys.argv[1] if len(sys.argv) > 1 else "patched"
LOCAL = "example.org"
ISSUER = "https://bridge.example.org"
# KGM_TEST_AGENT: the Agent this runtime serves (default my-agent; the compiled controller's
# overlay also knows kagent/bge-agent, whose memory.embeddingDimension is 1024).
NAMESPACE, AGENT = "kagent", os.environ.get("KGM_TEST_AGENT") or "my-agent"
APP_NAME = f"kagent__NS__{AGENT.replace('-', '_')}"

os.environ.update({
    "LOG_LEVEL": "DEBUG",
    "KAGENT_URL": "http://kagent-controller.test",
    # the governed listener (the controller sets it for governed agents only)
    "KAGENT_MEMORY_URL": "http://kagent-controller.test:8085",
    "KAGENT_NAMESPACE": NAMESPACE,
    "KAGENT_NAME": AGENT,
    "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER,
    "KAGENT_MEMORY_LOCAL_SERVER": LOCAL,
    "OPENAI_API_KEY": "sk-test-not-a-key",
})
if RUNTIME != "otel":
    os.environ["OTEL_SDK_DISABLED"] = "true"


class _Capture(logging.Handler):
    """Every record, formatted with its exception and stack, into memory."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str, str]] = []
        self.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - a broken record must not stop the run
            text = f"<unformattable record from {record.name}>"
        self.lines.append((record.name, record.levelname, text))


CAPTURE = _Capture()
logging.root.handlers[:] = [CAPTURE]
logging.root.setLevel(logging.DEBUG)

OTEL: dict[str, Any] = {}
if RUNTIME == "otel":
    # The OpenTelemetry SDK as kagent-core's configure_tracing sets it up with tracing and
    # logging enabled (a TracerProvider, a LoggerProvider, the OpenAI instrumentation emitting
    # GenAI events through it, httpx instrumented), exporting to in-memory exporters instead of
    # OTLP; plus a LoggingHandler, so Python log records become OpenTelemetry ones too, and a
    # MeterProvider with an InMemoryMetricReader.
    from opentelemetry import _logs, metrics, trace
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk._events import EventLoggerProvider
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    OTEL["spans"], OTEL["logs"] = InMemorySpanExporter(), InMemoryLogExporter()
    OTEL["metrics"] = InMemoryMetricReader()
    _tracer_provider = TracerProvider()
    _tracer_provider.add_span_processor(SimpleSpanProcessor(OTEL["spans"]))
    trace.set_tracer_provider(_tracer_provider)
    _logger_provider = LoggerProvider()
    _logger_provider.add_log_record_processor(SimpleLogRecordProcessor(OTEL["logs"]))
    _logs.set_logger_provider(_logger_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[OTEL["metrics"]]))
    OpenAIInstrumentor(use_legacy_attributes=False).instrument(
        event_logger_provider=EventLoggerProvider(_logger_provider))
    HTTPXClientInstrumentor().instrument()
    logging.root.addHandler(LoggingHandler(level=logging.DEBUG, logger_provider=_logger_provider))

# Imports after logging is set up: kagent.core configures logging at import (LOG_LEVEL=DEBUG).
import httpx
import kagent.adk._a2a as kagent_a2a
import uvicorn
from a2a.types import AgentCapabilities, AgentCard
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from kagent.adk import KAgentApp
from kagent.adk.types import AgentConfig
from pydantic import Field, PrivateAttr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kagent_governed_memory import (
    AgentIdentity,
    GovernedMemoryStore,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
)
from kagent_governed_memory.scope import sign_scope_assertion
from kagent_governed_memory.embedding import HashingEmbedder
from kagent_governed_memory.scope import (
    generate_private_key,
    key_id,
    load_private_key,
    public_key_pem,
)
from kagent_governed_memory.store import migrate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from controller import TestController
from kagent_core_routes import KagentCoreRoutes

# The bridge's key stays in this "bridge" half; the runtime (and a compiled controller) get the
# public PEM only.  KGM_TEST_BRIDGE_KEY: a private PEM shared with the test that started one.
BRIDGE_KEY = (load_private_key(os.environ["KGM_TEST_BRIDGE_KEY"])
              if os.environ.get("KGM_TEST_BRIDGE_KEY") else generate_private_key())
# KGM_TEST_CONTROLLER_URL: the patched kagent controller compiled from the Go series
# (tests/support/go_controller.py); unset: the Python stand-in (controller.py), in process.
CONTROLLER_URL = os.environ.get("KGM_TEST_CONTROLLER_URL") or None
PUBLIC_KEYS = {key_id(BRIDGE_KEY): BRIDGE_KEY.public_key()}
os.environ["KAGENT_MEMORY_SCOPE_PUBLIC_KEYS"] = public_key_pem(BRIDGE_KEY).decode("ascii")

# dim1024: the patched package, governed, with memory.embedding_dimension 1024 (a consent
# recorded at 1024 by the stand-in controller's store), on a database of its own.
# otel: the patched package, governed, with the OpenTelemetry SDK on (in-memory exporters).
PATCHED = RUNTIME in ("patched", "dim1024", "otel")  # governed memory
DIMENSION = 1024 if RUNTIME == "dim1024" else None
# The pod's projected ServiceAccount token (audience "kagent"), which kagent's
# KAgentTokenService reads from /var/run/secrets/tokens/kagent-token; the stand-in controller's
# fake TokenReview knows it as kagent/my-agent.
POD_TOKEN = f"kgm-test-sa:kagent:{AGENT}"  # the compiled overlay's fake TokenReview format
# The pod's governed memory token (audience "kagent-governed-memory"), which the patched runtime
# reads from KAGENT_MEMORY_TOKEN_FILE for every governed memory call: whatever the test passes in
# KGM_TEST_MEMORY_TOKEN (tests/support/go_controller.py's service_account_token), else the pod token.
MEMORY_TOKEN = os.environ.get("KGM_TEST_MEMORY_TOKEN") or POD_TOKEN
BRIDGE_TOKEN = "kgm-test-sa:kagent:matrix-bridge"  # a bridge ServiceAccount of the overlay
SUMMARY_MARKER = "Summary (JSON List):"
DRIVER_MEMORY_DEADLINE = 60.0  # the memory deadline the scenarios run under (see build())
STALL_SECONDS = 3.0  # a stalled call's wait before the client's read timeout
SENTINELS = {name: f"{name.upper()}-{secrets.token_hex(8)}" for name in
             ("query", "summary", "model_error", "embedding_error", "recall")}


# -- the scripted model ------------------------------------------------------------------------

class ScriptedLlm(BaseLlm):
    """Chat: ``SAVE <fact>`` / ``LOAD <query>`` / ``LOAD-SECRET`` ask for a tool call; after
    the tool answers, the reply echoes its result.  Summariser requests pop ``summaries``
    (a string, or an exception to raise)."""

    model: str = "scripted"
    summaries: list[Any] = Field(default_factory=list)
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _instructions: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["scripted"]

    async def generate_content_async(self, llm_request, stream: bool = False):
        last = llm_request.contents[-1] if llm_request.contents else None
        parts = (last.parts or []) if last else []
        text = " ".join(p.text or "" for p in parts)
        if "Conversation:" in text and text.rstrip().endswith(SUMMARY_MARKER):
            self._prompts.append(text)
            reply = self.summaries.pop(0) if self.summaries else "[]"
            if isinstance(reply, BaseException):
                raise reply
            yield _text(reply)
            return
        config = llm_request.config
        self._instructions.append(str(config.system_instruction or "") if config else "")
        responses = [p.function_response for p in parts if p.function_response]
        if responses:
            yield _text("tool said " + json.dumps(responses[0].response, sort_keys=True))
            return
        call = _plan(text)
        if call:
            name, args = call
            yield LlmResponse(content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(name=name, args=args))]))
            return
        yield _text("ok")


def _plan(text: str) -> tuple[str, dict[str, Any]] | None:
    text = text.strip()
    if text == "LOAD-SECRET":  # the sentinel is only ever in the model's tool call
        return "load_memory", {"query": f"what does the user like {SENTINELS['query']}"}
    if text.startswith("SAVE "):
        return "save_memory", {"content": text[5:]}
    if text.startswith("LOAD "):
        return "load_memory", {"query": text[5:]}
    return None


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


# -- the loopback embedding provider (OpenAI-compatible) -----------------------------------------

class EmbeddingServer:
    def __init__(self) -> None:
        self.calls = 0
        self.items: list[int] = []
        self.fail_with: str | None = None
        self.requested_dimensions: list[Any] = []  # the "dimensions" of each request
        self.force_dimension: int | None = None  # a provider answering another dimension
        self.app = Starlette(routes=[Route("/v1/embeddings", self._embed, methods=["POST"])])

    async def _embed(self, request: Request) -> JSONResponse:
        body = await request.json()
        texts = body.get("input") or []
        texts = [texts] if isinstance(texts, str) else texts
        self.calls += 1
        self.items.append(len(texts))
        self.requested_dimensions.append(body.get("dimensions"))
        hashing = HashingEmbedder(self.force_dimension or body.get("dimensions") or 768)
        if self.fail_with is not None:  # a provider error whose body echoes something secret
            return JSONResponse({"error": {"message": f"bad input near {self.fail_with}",
                                           "type": "invalid_request_error"}}, status_code=400)
        data = []
        for i, text in enumerate(texts):
            vec = hashing.embed_one(text)
            if body.get("encoding_format") == "base64":
                emb: Any = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            else:
                emb = vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return JSONResponse({"object": "list", "data": data, "model": body.get("model"),
                             "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    async def start(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve(sockets=[sock]))
        while not self.server.started:
            await asyncio.sleep(0.01)
        return f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


# -- the harness -------------------------------------------------------------------------------

class CompiledController:
    """Stands where ``TestController`` stands when the compiled Go controller serves the calls:
    the same counters, taken from the requests on their way out."""

    def __init__(self, url: str, admin_dsn: str) -> None:
        self.url, self.admin_dsn = url, admin_dsn
        self.calls: collections.Counter[str] = collections.Counter()
        self.unverified_calls = 0
        self.legacy_items: list[dict[str, Any]] = []
        self.admission = None  # the Go controller's policy is its own
        self.reset_budgets = True  # fresh admission buckets before each turn (a long scenario)

    def transport(self) -> httpx.AsyncBaseTransport:
        controller, inner = self, httpx.AsyncHTTPTransport()

        class Counting(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                if "/api/memories/governed/" in request.url.path:
                    controller.calls[request.url.path.rsplit("/", 1)[-1]] += 1
                    if not request.headers.get("x-kagent-memory-scope"):
                        controller.unverified_calls += 1
                return await inner.handle_async_request(request)

        return Counting()

    def before_turn(self) -> None:
        if self.reset_budgets:
            import psycopg
            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM memory_admission_bucket")

_SCRATCH: list[str] = []


def _scratch(prefix: str) -> str:
    """A temporary directory (token files) removed when the driver exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    _SCRATCH.append(path)
    return path


atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in _SCRATCH])


def make_key(mxid: str = "@alice:example.org", *, agent: str = AGENT,
             origin: OriginKind = OriginKind.NATIVE_LOCAL,
             room: str = "!control-a:example.org") -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=mxid, origin=origin),
                    agent=AgentIdentity(namespace=NAMESPACE, name=agent),
                    scope=MemoryScope.control_room(room))


def token_for(key: ScopeKey, *, context: str, audience=(LOCAL,), private_key=None,
              now: datetime | None = None) -> str:
    """The bridge signs one request of A2A context ``context`` (kid: the bridge key's)."""
    return sign_scope_assertion(key, private_key=private_key or BRIDGE_KEY, issuer=ISSUER,
                                audience=list(audience), context_id=context,
                                kid=key_id(BRIDGE_KEY), lifetime=timedelta(seconds=60), now=now)


class Harness:
    def __init__(self, controller: TestController, embedder: EmbeddingServer,
                 model: ScriptedLlm) -> None:
        self.controller = controller
        self.embedder = embedder
        self.model = model
        self.services: list[Any] = []
        self.tokens: list[str] = []
        # kagent's own session and task routes, in kagent's core tables (a schema per driver)
        self.core = KagentCoreRoutes(os.environ["KGM_TEST_ADMIN_DSN"], f"kagent_core_{RUNTIME}")
        # A stalled governed listener: calls are counted, then answered never (until the
        # client gives up after STALL_SECONDS with a read timeout, as httpx would).
        self.stall = False
        self.stalled: collections.Counter[str] = collections.Counter()

    async def build(self, embedding_url: str) -> None:
        controller_app = getattr(self.controller, "app", None)
        real_httpx = httpx
        harness = self

        class Routing(httpx.AsyncBaseTransport):
            """kagent's session/task routes to the core stand-in; the rest to the controller."""

            def __init__(self, controller: httpx.AsyncBaseTransport) -> None:
                self.controller = controller
                self.core = real_httpx.ASGITransport(app=harness.core.app)

            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                path = request.url.path
                if path.startswith(("/api/sessions", "/api/tasks")):
                    return await self.core.handle_async_request(request)
                if harness.stall and "/api/memories/governed/" in path:
                    harness.stalled[path.rsplit("/", 1)[-1]] += 1
                    await asyncio.sleep(STALL_SECONDS)
                    raise httpx.ReadTimeout("stalled", request=request)
                return await self.controller.handle_async_request(request)

        class _HttpxShim:  # kagent's controller client, routed in-process to the test controller
            def __getattr__(self, name):
                return getattr(real_httpx, name)

            @staticmethod
            def AsyncClient(**kwargs):
                if isinstance(harness.controller, CompiledController):
                    kwargs["base_url"] = harness.controller.url
                    return real_httpx.AsyncClient(
                        transport=Routing(harness.controller.transport()), **kwargs)
                return real_httpx.AsyncClient(
                    transport=Routing(real_httpx.ASGITransport(app=controller_app)), **kwargs)

        def recording(real_service):
            def memory_service(**kwargs):
                service = real_service(**kwargs)
                if hasattr(service, "memory_deadline"):
                    # five drivers share two cores here: a cold first turn may take longer
                    # than the production deadline; section 10 injects a short one
                    service.memory_deadline = DRIVER_MEMORY_DEADLINE
                harness.services.append(service)
                return service
            return memory_service

        kagent_a2a.KagentMemoryService = recording(kagent_a2a.KagentMemoryService)
        if hasattr(kagent_a2a, "GovernedMemoryService"):
            kagent_a2a.GovernedMemoryService = recording(kagent_a2a.GovernedMemoryService)
        import kagent.adk._token as kagent_token
        token_file = os.path.join(_scratch("kgm-token-"), "kagent-token")
        with open(token_file, "w") as f:
            f.write(POD_TOKEN + "\n")
        kagent_token.KAGENT_TOKEN_PATH = token_file
        # the translator's kagent-governed-memory-token mount, for the patched runtime
        memory_token_file = os.path.join(_scratch("kgm-memory-token-"), "token")
        with open(memory_token_file, "w") as f:
            f.write(MEMORY_TOKEN + "\n")
        os.environ["KAGENT_MEMORY_TOKEN_FILE"] = memory_token_file

        kagent_a2a.httpx = _HttpxShim()
        try:  # the governed memory service's own client (KAGENT_MEMORY_URL)
            import kagent.adk._governed_memory_service as governed_module
            governed_module.httpx = _HttpxShim()
        except ImportError:  # the unpatched runtime
            pass

        config = AgentConfig.model_validate({
            "model": {"type": "openai", "model": "gpt-4o-mini"},
            "description": "test agent",
            "instruction": "You are a test agent.",
            "memory": {**({"mode": "governed"} if PATCHED else {}),
                       **({"embedding_dimension": DIMENSION} if DIMENSION else {}),
                       "embedding": {"provider": "openai", "model": "text-embedding-3-small",
                                     "base_url": embedding_url}},
        })

        def root_agent_factory():
            agent = config.to_agent("my_agent")
            agent.model = self.model  # the callback reads agent.model at call time
            return agent

        card = AgentCard(name="my_agent", description="test agent", url="http://agent.test/",
                         version="0.0.1", capabilities=AgentCapabilities(),
                         default_input_modes=["text"], default_output_modes=["text"], skills=[])
        app = KAgentApp(root_agent_factory, card, "http://kagent-controller.test", APP_NAME,
                        agent_config=config).build()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                        base_url="http://agent.test", timeout=60)
        # kagent's lifespan (as uvicorn runs it): the token service reads the pod token
        self.lifespan = app.router.lifespan_context(app)
        await self.lifespan.__aenter__()
        self.baseline = set(asyncio.all_tasks())

    @property
    def service(self):
        return self.services[0]

    async def turn(self, session: str, text: str, *, key: ScopeKey | None = None,
                   token: str | None = None) -> str:
        """One A2A ``message/send``; returns the agent's text.  Waits for background work."""
        if token is None and key is not None:
            token = token_for(key, context=session)
        if hasattr(self.controller, "before_turn"):
            self.controller.before_turn()
        headers = {"x-user-id": "alice@example.org"}
        if token is not None:
            headers["x-kagent-memory-scope"] = token
            self.tokens.append(token)
        payload = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send",
                   "params": {"message": {"kind": "message", "role": "user",
                                          "messageId": str(uuid.uuid4()), "contextId": session,
                                          "parts": [{"kind": "text", "text": text}]}}}
        response = await self.client.post("/", json=payload, headers=headers)
        body = response.json()
        await self.drain()
        if "error" in body:
            return "A2A-ERROR " + json.dumps(body["error"])
        result = body.get("result") or {}
        texts = [p.get("text", "") for a in result.get("artifacts") or []
                 for p in a.get("parts") or [] if p.get("kind") == "text"]
        status = (result.get("status") or {}).get("message") or {}
        texts += [p.get("text", "") for p in status.get("parts") or [] if p.get("kind") == "text"]
        return "\n".join(texts)

    async def drain(self) -> None:
        if PATCHED:
            for service in self.services:
                await service.wait_for_background_tasks()
        for _ in range(200):  # the unpatched runtime's untracked create_task()
            pending = [t for t in asyncio.all_tasks() - self.baseline
                       if t is not asyncio.current_task() and not t.done()]
            if not pending:
                return
            await asyncio.wait(pending, timeout=0.05)


# -- scenarios ---------------------------------------------------------------------------------

def leaks(extra: dict[str, str]) -> dict[str, list[str]]:
    """Sentinel (and its base64 / hex forms) → ``logger:LEVEL`` of every line carrying it."""
    found: dict[str, list[str]] = {}
    for name, value in {**SENTINELS, **extra}.items():
        forms = {value, base64.b64encode(value.encode()).decode().rstrip("="),
                 value.encode().hex()}
        found[name] = sorted({f"{logger}:{level}" for logger, level, line in CAPTURE.lines
                              if any(form in line for form in forms)})
    return found


async def common_before_consent(h: Harness, key: ScopeKey, marker: str) -> dict[str, Any]:
    """Five turns of one session, with a valid assertion, before any consent: a long first
    message (prefetch), an explicit save, a load_memory, chat -- and a malformed summary
    queued for the auto-save at the fifth turn."""
    h.model.summaries.append(f"Sure! Here is what I remember: {SENTINELS['summary']} and more")
    replies = [
        await h.turn("pre", f"{marker} I am planning a long trip to Lisbon next spring. "
                            f"Please remember that my favourite colour is teal.", key=key),
        await h.turn("pre", f"SAVE I prefer aisle seats {marker}", key=key),
        await h.turn("pre", "LOAD-SECRET", key=key),
        await h.turn("pre", f"{marker} chat four", key=key),
        await h.turn("pre", f"{marker} chat five", key=key),
    ]
    return {
        "replies": replies,
        "embedding_calls": h.embedder.calls,
        "summariser_calls": len(h.model._prompts),
        "legacy_items": len(h.controller.legacy_items),
        "raw_transcript_stored": any(marker in (i.get("content") or "")
                                     and "chat five" in (i.get("content") or "")
                                     for i in h.controller.legacy_items),
        "controller_calls": dict(h.controller.calls),
    }


async def run_unpatched(h: Harness) -> dict[str, Any]:
    """Upstream's memory (the unpatched runtime, or the patched one in legacy mode)."""
    marker = f"PRECONSENT-{secrets.token_hex(4)}"
    before = await common_before_consent(h, make_key(), marker)
    h.model.summaries.clear()
    before["replies"] = [r.replace(marker, "<marker>") for r in before["replies"]]
    saved = await h.turn("legacy", "SAVE I like green tea")
    loaded = await h.turn("legacy", "LOAD green tea")
    return {"before_consent": before, "leaks": leaks({}),
            "legacy": {"saved": saved, "loaded_has_fact": "I like green tea" in loaded,
                       "service": type(h.service).__name__,
                       "service_module": type(h.service).__module__,
                       "controller_calls": dict(h.controller.calls),
                       "governed_calls": sum(v for k, v in h.controller.calls.items()
                                             if not k.startswith("legacy"))}}


async def run_patched(h: Harness, store: GovernedMemoryStore, admin_dsn: str) -> dict[str, Any]:
    import psycopg

    report: dict[str, Any] = {}
    key = make_key()
    marker = f"PRECONSENT-{secrets.token_hex(4)}"

    # 1. Nothing before consent (C2): a valid assertion, but no consent yet.
    before = await common_before_consent(h, key, marker)
    h.model.summaries.clear()
    before["rows"] = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")
    report["before_consent"] = before

    # 2. Consent (the bridge's route), then the per-request disable gate (S4-S6).
    await store.grant(key, purpose="personal_preferences")
    replayed = token_for(key, context="gate-replayed")
    # the token's one request, which redeems it; the gate below presents it again
    report["replay_first_use"] = await h.turn("gate-replayed", "LOAD warm up", token=replayed)
    embed_before = h.embedder.calls
    # Each token is signed right before its request (lambdas), and the replay comes right after
    # the first use: on a loaded machine the whole gate can outlast a 60 s assertion, and an
    # expired token would answer assertion_expired before the check under test is reached.
    gate_tokens: dict[str, Any] = {
        "replayed": lambda: replayed,
        "no_header": lambda: None,
        # a pod's own key under the bridge's kid: no process but the bridge can mint
        "forged": lambda: token_for(key, context="gate-forged",
                                    private_key=generate_private_key()),
        "expired": lambda: token_for(key, context="gate-expired",
                                     now=datetime.now(UTC) - timedelta(minutes=10)),
        "other_agent": lambda: token_for(make_key(agent="other-agent"),
                                         context="gate-other_agent"),
        "other_context": lambda: token_for(key, context="another-conversation"),
        "audience_remote": lambda: token_for(key, context="gate-audience_remote",
                                             audience=(LOCAL, "evil.org")),
        "bridged_origin": lambda: token_for(make_key(origin=OriginKind.EXTERNAL_APPSERVICE),
                                            context="gate-bridged_origin"),
        "remote_principal": lambda: token_for(make_key("@mallory:evil.org"),
                                              context="gate-remote_principal"),
    }
    gate: dict[str, Any] = {}
    for name, sign_it in gate_tokens.items():
        tok = sign_it()
        gate[name] = {
            "save": await h.turn(f"gate-{name}", f"SAVE gate fact {name}", token=tok),
            "load": await h.turn(f"gate-{name}", "LOAD gate fact", token=tok),
        }
    report["gate"] = gate
    report["gate_embedding_calls"] = h.embedder.calls - embed_before
    report["gate_rows"] = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")

    # 3. Consented use: explicit save and load, read-time expiry, prefetch, per-entry forget.
    saved = [await h.turn("main", "SAVE I like green tea", key=key),
             await h.turn("main", "SAVE My cat is called Miso", key=key)]
    loaded = await h.turn("main", "LOAD green tea", key=key)
    loaded_request = h.model._instructions[-1] if h.model._instructions else ""
    secret_load = await h.turn("main", "LOAD-SECRET", key=key)
    generation = await store.generation(key)
    expired_marker, live_marker = f"EXPIRED-{secrets.token_hex(4)}", f"LIVE-{secrets.token_hex(4)}"
    sid = _scalar(admin_dsn, "SELECT id::text FROM memory_scope WHERE principal_subject = %s",
                  [key.principal.mxid])
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for text, expires in ((f"{expired_marker} I like durian", "now() - interval '1 minute'"),
                              (f"{live_marker} I like durian sorbet", "now() + interval '1 day'")):
            _plant(conn, sid, generation, text, expires)
    durian = await h.turn("main", "LOAD durian", key=key)
    durian_request = h.model._instructions[-1] if h.model._instructions else ""
    calls_before_prefetch = h.embedder.calls
    searches_before_prefetch = h.controller.calls["search"]
    many = " ".join(f"Sentence number {i} asks what I like about durian desserts." for i in range(12))
    calls_before = collections.Counter(h.controller.calls)
    await h.turn("prefetch", many, key=key)
    prefetch_instruction = h.model._instructions[-1] if h.model._instructions else ""
    first_turn_calls = dict(collections.Counter(h.controller.calls) - calls_before)
    calls_before = collections.Counter(h.controller.calls)
    await h.turn("prefetch", "Thanks, that is all for now.", key=key)
    later_turn_calls = dict(collections.Counter(h.controller.calls) - calls_before)
    report["consented"] = {
        "saved": saved,
        "loaded": loaded,
        # the model request after load_memory answered (where governed recall is injected)
        "loaded_request": loaded_request,
        "secret_load": secret_load,
        "durian": durian,
        "durian_request": durian_request,
        "expired_marker": expired_marker,
        "live_marker": live_marker,
        "prefetch_instruction_has_live": live_marker in prefetch_instruction,
        "prefetch_instruction_has_expired": expired_marker in prefetch_instruction,
        "prefetch_embedding_items": h.embedder.items[calls_before_prefetch:],
        "prefetch_search_calls": h.controller.calls["search"] - searches_before_prefetch,
        # the governed calls of a session's first turn (its prefetch) and of a later turn
        "first_turn_calls": first_turn_calls,
        "later_turn_calls": later_turn_calls,
    }

    page = await store.inspect(key, page_size=50)
    by_text = {e.text: e.id for e in page.entries}
    tea_id, cat_id = by_text.get("I like green tea"), by_text.get("My cat is called Miso")
    from kagent.adk._memory_scope import bind_memory_scope, reset_memory_scope

    scope_token = bind_memory_scope({"x-kagent-memory-scope": token_for(key, context="forget")},
                                    context_id="forget")
    try:
        await h.service.delete_memory(app_name=APP_NAME, user_id="alice@example.org",
                                      memory_id=tea_id)
    finally:
        reset_memory_scope(scope_token)
    after_forget = await h.turn("main", "LOAD green tea", key=key)
    after_forget_request = h.model._instructions[-1] if h.model._instructions else ""
    report["forget"] = {
        "tea_id": tea_id,
        "cat_id": cat_id,
        "tea_rows": _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE id::text = %s",
                            [tea_id]),
        "cat_rows": _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE id::text = %s",
                            [cat_id]),
        "load_after": after_forget,
        "load_after_request": after_forget_request,
        "forget_calls": h.controller.calls["forget"],
    }

    # 4. Auto-save (C6): the 'pre' session continues under consent.  Its five pre-consent turns
    #    are not eligible; five eligible turns trigger one summary; a malformed one stores
    #    nothing; the next window starts after the last summarised turn.
    rows_before = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")
    prompts_before = len(h.model._prompts)
    h.model.summaries.append(f"I could not do it: {SENTINELS['summary']}")
    window1 = [f"POST1-{i}-{secrets.token_hex(3)}" for i in range(5)]
    per_turn_calls = []
    for i, m in enumerate(window1):
        await h.turn("pre", f"{m} I am learning Portuguese, lesson {i}", key=key)
        per_turn_calls.append(len(h.model._prompts) - prompts_before)
    rows_after_malformed = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")
    transcript_rows = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE content LIKE %s",
                              [f"%{window1[0]}%"])
    h.model.summaries.append(json.dumps(["User is learning Portuguese", "x" * 600]))
    window2 = [f"POST2-{i}-{secrets.token_hex(3)}" for i in range(5)]
    for i, m in enumerate(window2):
        await h.turn("pre", f"{m} I practise every morning, day {i}", key=key)
    rows_after_valid = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")
    learned = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE content = %s",
                      ["User is learning Portuguese"])
    h.model.summaries.append(RuntimeError(f"provider exploded: {SENTINELS['model_error']}"))
    for i in range(5):
        await h.turn("pre", f"POST3-{i} more chat", key=key)
    rows_after_failure = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")
    prompts = h.model._prompts[prompts_before:]
    report["autosave"] = {
        "summariser_calls_per_turn": per_turn_calls,
        "prompts": len(prompts),
        "prompt1_has_preconsent": marker in prompts[0] if prompts else None,
        "prompt1_has_window1": all(m in prompts[0] for m in window1) if prompts else None,
        "prompt2_has_window1": any(m in prompts[1] for m in window1) if len(prompts) > 1 else None,
        "prompt2_has_window2": all(m in prompts[1] for m in window2) if len(prompts) > 1 else None,
        "rows_before": rows_before,
        "rows_after_malformed": rows_after_malformed,
        "transcript_rows": transcript_rows,
        "rows_after_valid": rows_after_valid,
        "learned_rows": learned,
        "rows_after_model_failure": rows_after_failure,
    }

    # 5. A failing embedding provider: nothing stored, the error body never logged.
    h.embedder.fail_with = SENTINELS["embedding_error"]
    report["embedding_failure"] = {
        "save": await h.turn("main", "SAVE I like oolong", key=key),
        "load": await h.turn("main", "LOAD oolong", key=key),
    }
    h.embedder.fail_with = None

    # 6. Admission comes before any model or embedding work (A1): a fresh scope whose
    #    sender has spent the policy's burst of explicit operations.
    key_b = make_key(room="!control-b:example.org")
    await store.grant(key_b, purpose="personal_preferences")
    if hasattr(h.controller, "before_turn"):
        # The scope's registered policy: a burst of 3 explicit operations per sender.
        h.controller.before_turn()
        h.controller.reset_budgets = False
        for i in range(3):
            await h.turn("budget", f"LOAD warm {i}", key=key_b)
    calls_before = h.embedder.calls
    report["admission"] = {
        "save": await h.turn("budget", "SAVE I like chamomile", key=key_b),
        "load": await h.turn("budget", "LOAD chamomile", key=key_b),
        "embedding_calls": h.embedder.calls - calls_before,
        "rows": _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE content LIKE %s",
                        ["%chamomile%"]),
    }

    # 7. The controller authenticates the pod: no token -> 401; another agent's scope -> 403.
    other_scope = {"principal": {"issuer": "matrix", "subject": "@alice:example.org"},
                   "agent_namespace": NAMESPACE, "agent_name": "other-agent",
                   "kind": "control_room", "room_id": "!control-a:example.org"}
    own_scope = {**other_scope, "agent_name": AGENT}
    bare = kagent_a2a.httpx.AsyncClient(base_url=os.environ["KAGENT_MEMORY_URL"])
    auth: dict[str, Any] = {}
    try:
        for name, client, scope in (("no_token", bare, own_scope),
                                    ("other_agent", h.service.client, other_scope)):
            response = await client.post("/api/memories/governed/generation",
                                         json={"scope": scope},
                                         headers={"x-kagent-memory-scope": token_for(
                                             key, context=f"auth-{name}")})
            auth[name] = {"status": response.status_code, "body": response.json()}
    finally:
        await bare.aclose()
    report["auth"] = auth
    refused = getattr(h.controller, "refused_auth", None)  # the stand-in's own count
    report["refused_auth"] = dict(refused) if refused is not None else None

    # 9. Inject, don't persist: a fact (planted in the scoped store, as an earlier
    #    conversation would have saved it) recalled by load_memory reaches the model's request,
    #    and nothing of it reaches what kagent persists (events, tasks).
    if hasattr(h.controller, "before_turn"):  # section 6's budgets no longer apply
        h.controller.reset_budgets = True
    key_r = make_key(room="!control-recall:example.org")
    await store.grant(key_r, purpose="personal_preferences")
    recall_fact = f"{SENTINELS['recall']} is the codename of my project"
    await store.save(key_r, await store.generation(key_r), facts=[recall_fact],
                     embeddings=[HashingEmbedder().embed_one(recall_fact)])
    await h.turn("recall", "hello there", key=key_r)
    instructions_before = len(h.model._instructions)
    recall_reply = await h.turn("recall", "LOAD codename of my project", key=key_r)
    recall_instructions = h.model._instructions[instructions_before:]
    report["recall"] = {
        "reply": recall_reply,
        "model_requests": len(recall_instructions),
        # the request after load_memory answered: the model saw the fact there
        "fact_in_model_request": bool(recall_instructions)
        and SENTINELS["recall"] in recall_instructions[-1],
        "fact_in_first_request": bool(recall_instructions)
        and SENTINELS["recall"] in recall_instructions[0],
        "fact_in_reply": SENTINELS["recall"] in recall_reply,
        "persisted": h.core.tables_containing([SENTINELS["recall"]]),
        "persisted_rows": h.core.row_counts(),
        "in_scoped_store": _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE content = %s",
                                   [recall_fact]),
    }

    # 10. A stalled controller: one /generation for the turn, whatever the turn does (prefetch,
    #     save_memory, auto-save), and the turn answers without memory past the deadline.
    deadline_was = getattr(h.service, "memory_deadline", None)
    h.service.memory_deadline = 0.5  # injected: a short deadline, the stall is 3 s per call
    h.stall = True
    lines_before = len(CAPTURE.lines)
    try:
        stalled_reply = await h.turn("stalled", "SAVE I like stalled tea", key=key)
    finally:
        h.stall = False
        if deadline_was is None:
            del h.service.memory_deadline
        else:
            h.service.memory_deadline = deadline_was
    report["stalled"] = {
        "reply": stalled_reply,
        "calls": dict(h.stalled),
        "deadline_logged": any("reason=memory_deadline_exceeded" in line
                               for _, _, line in CAPTURE.lines[lines_before:]),
    }

    # 8. Where the assertion went: only to the controller, never into what kagent persists
    #    (session events, their state deltas, tasks) or logs.
    persisted_with_token = h.core.tables_containing([*h.tokens, "x-kagent-memory-scope"])
    report["assertion"] = {
        "in_session_state": any(persisted_with_token.values()),
        "persisted_rows": h.core.row_counts(),
        "unverified_controller_calls": h.controller.unverified_calls,
    }
    report["background_tasks_tracked"] = hasattr(h.service, "_background_tasks")
    report["controller_calls"] = dict(h.controller.calls)
    token_forms = {f"token{i}": t for i, t in enumerate(h.tokens[:3])}
    report["leaks"] = leaks(token_forms)
    return report


def _scalar(dsn: str, query: str, params: list | None = None):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params or []).fetchone()
        return None if row is None else row[0]


def _plant(conn, sid: str, generation: int, text: str, expires_sql: str) -> None:
    """Superuser-only test path (as tests/database/test_expiry.py): the insert trigger is skipped."""
    vec = "[" + ",".join(f"{v:.6f}" for v in HashingEmbedder().embed_one(text)) + "]"
    conn.execute("SET session_replication_role = replica")
    conn.execute(
        "INSERT INTO memory_entry (scope_id, content, embedding, generation, created_at,"
        f" expires_at) VALUES (%s, %s, %s::vector, %s, now() - interval '7 days', {expires_sql})",
        [sid, text, vec, generation])
    conn.execute("SET session_replication_role = origin")


async def run_dimension(h: Harness, store: GovernedMemoryStore, admin_dsn: str
                        ) -> dict[str, Any]:
    """memory.embedding_dimension 1024, a consent recorded at 1024: saved and recalled end to
    end with 1024-d vectors; a provider answering 768-d vectors is refused, never fitted."""
    key = make_key()
    if CONTROLLER_URL:  # the bridge grants through the controller: the Agent's dimension
        await _bridge_grant(key)
    else:
        await store.grant(key, purpose="personal_preferences")
    saved = await h.turn("dim", "SAVE I like white tea", key=key)
    loaded = await h.turn("dim", "LOAD white tea", key=key)
    loaded_request = h.model._instructions[-1] if h.model._instructions else ""
    dims = _scalar(admin_dsn, "SELECT array_agg(DISTINCT vector_dims(embedding)) FROM memory_entry")
    consented = _scalar(admin_dsn, "SELECT array_agg(DISTINCT embedding_dimension) FROM memory_scope")
    h.embedder.force_dimension = 768
    rows_before = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry")
    mismatch = {"save": await h.turn("dim2", "SAVE I like black tea", key=key),
                "load": await h.turn("dim2", "LOAD white tea", key=key)}
    mismatch["rows"] = _scalar(admin_dsn, "SELECT count(*) FROM memory_entry") - rows_before
    h.embedder.force_dimension = None
    return {"dimension": {"saved": saved, "loaded": loaded,
                          "fact_in_model_request": "I like white tea" in loaded_request,
                          "stored_dims": dims, "consented_dims": consented,
                          "requested": sorted(set(h.embedder.requested_dimensions) - {None}),
                          "mismatch": mismatch},
            "leaks": leaks({})}


async def _bridge_grant(key: ScopeKey) -> int:
    """Consent granted by the bridge on the compiled controller's /consent route, which records
    it at the dimension of the scope's Agent (memory.embeddingDimension)."""
    body = {"purpose": "personal_preferences",
            "scope": {"principal": {"issuer": key.principal.issuer_kind,
                                    "subject": key.principal.subject},
                      "agent_namespace": key.agent.namespace, "agent_name": key.agent.name,
                      "kind": key.scope.kind.value, "room_id": key.scope.room_id or ""}}
    async with httpx.AsyncClient(base_url=CONTROLLER_URL, timeout=30) as client:
        r = await client.post("/api/memories/governed/consent", json=body,
                              headers={"Authorization": f"Bearer {BRIDGE_TOKEN}"})
    r.raise_for_status()
    return int(r.json()["generation"])


async def run_otel(h: Harness, store: GovernedMemoryStore, admin_dsn: str) -> dict[str, Any]:
    """A sentinel fact saved and recalled with tracing and OpenTelemetry logging on: it must
    appear in no span (attributes, events, status) and no log record (body, attributes); the
    metrics count the work with bounded labels; content capture switched on by the operator
    means no memory."""
    key = make_key()
    await store.grant(key, purpose="personal_preferences")
    fact = f"{SENTINELS['recall']} is my locker code"
    capture_env = {name: os.environ.get(name) for name in
                   ("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "TRACELOOP_TRACE_CONTENT",
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")}
    saved = await h.turn("otel-save", f"SAVE {fact}", key=key)
    await h.turn("otel-recall", "hello there", key=key)
    loaded = await h.turn("otel-recall", "LOAD what is my locker code", key=key)
    recalled_into_request = bool(h.model._instructions) and SENTINELS["recall"] in h.model._instructions[-1]
    # An operator switching google-adk's span content capture on: no memory.
    previous = os.environ.get("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS")
    os.environ["ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"] = "true"
    try:
        capture_on = {"save": await h.turn("otel-on", "SAVE I like capture tea", key=key),
                      "load": await h.turn("otel-on", "LOAD locker code", key=key)}
    finally:
        if previous is None:
            os.environ.pop("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", None)
        else:
            os.environ["ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"] = previous
    from opentelemetry import _logs, trace

    trace.get_tracer_provider().force_flush()
    _logs.get_logger_provider().force_flush()
    needles = _forms(SENTINELS["recall"])
    spans = OTEL["spans"].get_finished_spans()
    span_hits = []
    for span in spans:
        texts = {f"attr:{k}": str(v) for k, v in (span.attributes or {}).items()}
        for event in span.events or ():
            texts.update({f"event:{event.name}:{k}": str(v)
                          for k, v in (event.attributes or {}).items()})
        texts["status"] = str(span.status.description or "")
        span_hits += [f"{span.name}/{where}" for where, text in texts.items()
                      if any(n in text for n in needles)]
    records = [d.log_record for d in OTEL["logs"].get_finished_logs()]
    log_hits = [f"{getattr(r, 'event_name', None) or '-'}" for r in records
                if any(n in str(r.body) + json.dumps(dict(r.attributes or {}), default=str)
                       for n in needles)]
    points = []
    for rm in OTEL["metrics"].get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name.startswith("kagent.memory."):
                    points += [{"scope": sm.scope.name, "name": metric.name,
                                "attributes": dict(p.attributes), "value": p.value}
                               for p in metric.data.data_points]
    return {"otel": {
        "capture_env": capture_env,  # as the runtime left it (the driver sets none of them)
        "saved": saved, "loaded": loaded, "recalled_into_request": recalled_into_request,
        "in_scoped_store": _scalar(admin_dsn, "SELECT count(*) FROM memory_entry WHERE content = %s",
                                   [fact]),
        "capture_on": capture_on,
        "spans": len(spans), "span_names": sorted({s.name for s in spans}),
        "span_hits": span_hits,
        "log_records": len(records), "gen_ai_events": sum(
            1 for r in records if str(getattr(r, "event_name", "") or "").startswith("gen_ai.")),
        "log_hits": log_hits,
        "metric_points": points,
        "metric_labels_have_content": any(n in json.dumps(points) for n in needles)
        or any(t in json.dumps(points) for t in h.tokens),
    }, "leaks": leaks({})}


def _forms(value: str) -> set[str]:
    return {value, base64.b64encode(value.encode()).decode().rstrip("="), value.encode().hex()}


async def main() -> dict[str, Any]:
    store = None
    if PATCHED:
        from kagent_governed_memory.policy import PROTOTYPE_POLICY
        await migrate(os.environ["KGM_TEST_OWNER_DSN"], local_server=LOCAL)
        policy = (PROTOTYPE_POLICY.model_copy(update={"embedding_dimension": DIMENSION})
                  if DIMENSION else PROTOTYPE_POLICY)
        store = await GovernedMemoryStore.open(os.environ["KGM_TEST_DSN"], local_server=LOCAL,
                                               policy=policy, sweep_every=None)
    # Full budgets before each turn; section 6 lets the policy's burst run out.
    if CONTROLLER_URL and PATCHED:
        controller: Any = CompiledController(CONTROLLER_URL, os.environ["KGM_TEST_ADMIN_DSN"])
    else:
        controller = TestController(store, PUBLIC_KEYS, ISSUER,
                                    admin_dsn=os.environ.get("KGM_TEST_ADMIN_DSN"))
    embedder = EmbeddingServer()
    url = await embedder.start()
    harness = Harness(controller, embedder, ScriptedLlm())
    try:
        await harness.build(url)
        if DIMENSION:
            report = await run_dimension(harness, store, os.environ["KGM_TEST_ADMIN_DSN"])
        elif RUNTIME == "otel":
            report = await run_otel(harness, store, os.environ["KGM_TEST_ADMIN_DSN"])
        elif PATCHED:
            report = await run_patched(harness, store, os.environ["KGM_TEST_ADMIN_DSN"])
        else:
            report = await run_unpatched(harness)
    finally:
        if hasattr(harness, "lifespan"):
            await harness.lifespan.__aexit__(None, None, None)
        await harness.client.aclose() if hasattr(harness, "client") else None
        await embedder.stop()
        if store is not None:
            await store.close()
    import kagent.adk._memory_service as memory_module

    report["runtime"] = RUNTIME
    report["controller"] = "compiled" if isinstance(controller, CompiledController) else "stand-in"
    report["memory_service_file"] = memory_module.__file__
    report["log_lines"] = len(CAPTURE.lines)
    return report


if __name__ == "__main__":
    try:
        result = asyncio.run(main())
    except BaseException:  # noqa: BLE001 - report, don't hide
        result = {"runtime": RUNTIME, "driver_error": traceback.format_exc()}
    log_file = os.environ.get("KGM_TEST_LOG_FILE")
    if log_file:
        with open(log_file, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for _, _, line in CAPTURE.lines)
    sys.stdout.write("KGM-REPORT " + json.dumps(result, default=str) + "\n")
