"""Recall through kagent's real session path, then forget and withdraw; print a JSON report.

Runs inside the kagent venv (as ``driver.py``, whose harness pieces it reuses) with
``PYTHONPATH`` = the patched copy of ``kagent/adk``, this repository and this folder, against the
patched kagent controller compiled from the Go series, serving both its governed memory
listener (``KGM_TEST_CONTROLLER_URL``) and kagent's own main API (``KGM_TEST_SESSIONS_URL``:
``/api/sessions``, ``/api/tasks`` on kagent's database client, see
``tests/support/go_overlay/kagent_sessions_testserver_test.go``).  Nothing of the session path is
replaced: kagent's ``KAgentApp`` builds its ``KAgentSessionService`` and ``KAgentTaskStore`` on
its own controller client (``KAGENT_URL``), the A2A executor persists the session's events and
the task there, and the governed memory service talks to ``KAGENT_MEMORY_URL``.  The only seam
is the pod's token file path (``kagent.adk._token.KAGENT_TOKEN_PATH``), as in ``driver.py``.

Scenario (a governed agent, memory.mode governed, a scripted model that never repeats what a
tool said):

1. the bridge grants consent (its ``/consent`` route); the agent saves two sentinel facts in an
   earlier request (its own ``save_memories`` -> ``/entries``), outside the chat session;
2. a chat session: a first turn (its prefetch is behind us), then a turn whose model calls
   ``load_memory`` with a query naming no sentinel; the report says whether each sentinel
   reached the model's LLM requests after the call (contents or instructions);
3. the bridge forgets the first fact (``/forget``), then withdraws consent (``/withdraw``);

after each step, as the PostgreSQL superuser, every table of the database (all schemas but
pg_catalog, information_schema and pg_toast), each row cast to text, is searched for each
sentinel; a hit in a JSON value is located (is it inside a ``load_memory`` function response?).
The report holds table names, counts and locations only, never a row.

Usage: ``python sessions_driver.py`` with ``KGM_TEST_CONTROLLER_URL``, ``KGM_TEST_SESSIONS_URL``,
``KGM_TEST_ADMIN_DSN`` (superuser), ``KGM_TEST_BRIDGE_TOKEN`` (the bridge's ServiceAccount token),
``KGM_TEST_BRIDGE_KEY`` (the bridge's private PEM; the controller has its public key) and
optional ``KGM_TEST_LOG_FILE``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import sys
import traceback
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import driver as base  # its import sets the runtime's environment and logging
import httpx
import kagent.adk._a2a as kagent_a2a
import kagent.adk._token as kagent_token
import psycopg
from a2a.types import AgentCapabilities, AgentCard
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from kagent.adk import KAgentApp
from kagent.adk.types import AgentConfig
from pydantic import PrivateAttr

from kagent_governed_memory.kagent import KagentBridgeStore

CONTROLLER_URL = os.environ["KGM_TEST_CONTROLLER_URL"]  # the governed listener
SESSIONS_URL = os.environ["KGM_TEST_SESSIONS_URL"]  # kagent's main API: sessions, tasks
ADMIN_DSN = os.environ["KGM_TEST_ADMIN_DSN"]
BRIDGE_TOKEN = os.environ["KGM_TEST_BRIDGE_TOKEN"]  # the bridge's ServiceAccount token
POD_TOKEN = base.POD_TOKEN  # the agent pod's (kagent/my-agent)
USER_ID = "alice@example.org"
PURPOSE = "personal_preferences"
RECALL = "RECALL"
QUERY = "what tea does the user prefer"  # names no sentinel: the call's args are persisted
SENTINELS = {step: f"{step.upper()}-SENTINEL-{secrets.token_hex(8)}"
             for step in ("forget", "withdraw")}
FACTS = {"forget": f"{SENTINELS['forget']} prefers green tea in the morning",
         "withdraw": f"{SENTINELS['withdraw']} prefers oolong tea in the evening"}
# not a secret: proves the search reaches kagent's event and task tables
MARKER = f"MARKER-{secrets.token_hex(8)}"

# kagent's controller client (sessions, tasks) and the governed memory client, un-shimmed
os.environ["KAGENT_URL"] = SESSIONS_URL
os.environ["KAGENT_MEMORY_URL"] = CONTROLLER_URL
kagent_a2a.kagent_url_override = SESSIONS_URL  # _a2a read KAGENT_URL when driver.py imported it


class RecallLlm(BaseLlm):
    """``RECALL ...`` asks for ``load_memory``; after any tool answer it says ``noted`` (never
    the tool's words); anything else gets ``ok``.  Every request is kept as text."""

    model: str = "scripted"
    _requests: list[dict[str, str]] = PrivateAttr(default_factory=list)

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["scripted"]

    async def generate_content_async(self, llm_request, stream: bool = False):
        config = llm_request.config
        self._requests.append({
            "contents": "\n".join(c.model_dump_json() for c in llm_request.contents or []),
            "instruction": str(config.system_instruction or "") if config else "",
        })
        last = llm_request.contents[-1] if llm_request.contents else None
        parts = (last.parts or []) if last else []
        if any(p.function_response for p in parts):
            yield _text("noted")
            return
        text = " ".join(p.text or "" for p in parts).strip()
        if text.startswith(RECALL):
            yield LlmResponse(content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(name="load_memory",
                                                            args={"query": QUERY}))]))
            return
        yield _text("ok")


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def _pod_token_file() -> str:
    """The pod's projected token, where kagent's KAgentTokenService reads it."""
    path = os.path.join(base._scratch("kgm-token-"), "kagent-token")
    with open(path, "w") as f:
        f.write(POD_TOKEN + "\n")
    return path


def _memory_token_file() -> str:
    """The pod's governed memory token (audience kagent-governed-memory), where the patched
    runtime reads it (KAGENT_MEMORY_TOKEN_FILE)."""
    path = os.path.join(base._scratch("kgm-memory-token-"), "token")
    with open(path, "w") as f:
        f.write(base.MEMORY_TOKEN + "\n")
    return path


class SessionHarness:
    """kagent's own ``KAgentApp`` on kagent's real session and task routes."""

    def __init__(self, model: RecallLlm) -> None:
        self.model = model
        self.services: list[Any] = []

    async def build(self, embedding_url: str) -> None:
        harness, real = self, kagent_a2a.GovernedMemoryService

        def recording(**kwargs):
            service = real(**kwargs)
            harness.services.append(service)
            return service

        kagent_a2a.GovernedMemoryService = recording
        kagent_token.KAGENT_TOKEN_PATH = _pod_token_file()
        os.environ["KAGENT_MEMORY_TOKEN_FILE"] = _memory_token_file()
        config = AgentConfig.model_validate({
            "model": {"type": "openai", "model": "gpt-4o-mini"},
            "description": "test agent",
            "instruction": "You are a test agent.",
            "memory": {"mode": "governed",
                       "embedding": {"provider": "openai", "model": "text-embedding-3-small",
                                     "base_url": embedding_url}},
        })

        def root_agent_factory():
            agent = config.to_agent("my_agent")
            agent.model = self.model
            return agent

        card = AgentCard(name="my_agent", description="test agent", url="http://agent.test/",
                         version="0.0.1", capabilities=AgentCapabilities(),
                         default_input_modes=["text"], default_output_modes=["text"], skills=[])
        app = KAgentApp(root_agent_factory, card, SESSIONS_URL, base.APP_NAME,
                        agent_config=config).build()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                        base_url="http://agent.test", timeout=60)
        self.lifespan = app.router.lifespan_context(app)
        await self.lifespan.__aenter__()

    @property
    def service(self):
        return self.services[0]

    async def turn(self, context: str, text: str, *, key) -> dict[str, Any]:
        """One A2A ``message/send`` with a fresh assertion; the reply's state and text."""
        headers = {"x-user-id": USER_ID,
                   "x-kagent-memory-scope": base.token_for(key, context=context)}
        payload = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send",
                   "params": {"message": {"kind": "message", "role": "user",
                                          "messageId": str(uuid.uuid4()), "contextId": context,
                                          "parts": [{"kind": "text", "text": text}]}}}
        body = (await self.client.post("/", json=payload, headers=headers)).json()
        await self.service.wait_for_background_tasks()
        if "error" in body:
            return {"error": body["error"]}
        result = body.get("result") or {}
        return {"state": (result.get("status") or {}).get("state"), "task_id": result.get("id")}

    async def close(self) -> None:
        await self.lifespan.__aexit__(None, None, None)
        await self.client.aclose()


# -- the search of every table ---------------------------------------------------------------

def _forms(value: str) -> set[str]:
    return {value, base64.b64encode(value.encode()).decode().rstrip("="), value.encode().hex()}


def _locate(node: Any, forms: set[str], path: str, in_response: bool, out: list[dict]) -> None:
    """Every string leaf holding a form, with whether it sits inside a load_memory function
    response (an ADK event part's ``function_response``, or an A2A data part marked
    ``function_response``); JSON held in a string is parsed and searched too."""
    if isinstance(node, dict):
        for k, v in node.items():
            inside = in_response
            if k in ("function_response", "functionResponse") and isinstance(v, dict) \
                    and v.get("name") == "load_memory":
                inside = True
            meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
            if k == "data" and isinstance(v, dict) and v.get("name") == "load_memory" and \
                    "function_response" in (meta.get("kagent_type"), meta.get("adk_type")):
                inside = True
            _locate(v, forms, f"{path}.{k}", inside, out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _locate(v, forms, f"{path}[{i}]", in_response, out)
    elif isinstance(node, str) and any(f in node for f in forms):
        try:
            parsed = json.loads(node)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            _locate(parsed, forms, path, in_response, out)
        else:
            out.append({"path": path, "in_load_memory_response": in_response})


def search_every_table(names: list[str]) -> dict[str, Any]:
    """As the superuser: each sentinel's hits, by table (rows and located leaves)."""
    hits: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        tables = [(s, t) for s, t in conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'm')"
            " AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
            " AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1, 2").fetchall()]
        rows_per_table = {}
        for schema, table in tables:
            name = f'"{schema}"."{table}"'
            rows = conn.execute(f"SELECT t::text, to_jsonb(t) FROM {name} t").fetchall()
            rows_per_table[f"{schema}.{table}"] = len(rows)
            for sentinel_name in names:
                forms = _forms(SENTINELS.get(sentinel_name) or MARKER)
                for text, row in rows:
                    if any(f in text for f in forms):
                        leaves: list[dict] = []
                        _locate(row, forms, "row", False, leaves)
                        hits[sentinel_name].append({"table": f"{schema}.{table}", "leaves": leaves})
    return {"tables": rows_per_table, "hits": hits}


# -- the scenario ----------------------------------------------------------------------------

async def run(h: SessionHarness, bridge: KagentBridgeStore, embedder) -> dict[str, Any]:
    from kagent.adk._memory_scope import bind_memory_scope, reset_memory_scope

    report: dict[str, Any] = {"sentinel_names": sorted(SENTINELS)}
    key = base.make_key()
    consent = await bridge.grant(key, purpose=PURPOSE)
    report["consent_generation"] = consent.generation

    # 1. Saved in an earlier request of the agent (its own service, the controller's /entries)
    scope = bind_memory_scope({"x-kagent-memory-scope": base.token_for(key, context="seed")},
                              context_id="seed")
    try:
        ids = {}
        for step, fact in FACTS.items():
            saved = await h.service.save_memories([MemoryEntry(
                content=types.Content(role="user", parts=[types.Part(text=fact)]))])
            ids[step] = list(saved.ids)
            report.setdefault("seed_reasons", {})[step] = saved.reason
    finally:
        reset_memory_scope(scope)
    report["seeded"] = {step: len(v) for step, v in ids.items()}

    # 2. The chat session: a first turn, then the recall turn
    session = f"chat-{secrets.token_hex(4)}"
    report["first_turn"] = await h.turn(session, f"hello {MARKER}", key=key)
    before = len(h.model._requests)
    report["recall_turn"] = await h.turn(session, f"{RECALL} {MARKER} what do I like?", key=key)
    after = h.model._requests[before:]
    report["recall_requests"] = len(after)
    report["reached_model"] = {
        step: {"contents": any(SENTINELS[step] in r["contents"] for r in after[1:]),
               "instruction": any(SENTINELS[step] in r["instruction"] for r in after[1:])}
        for step in SENTINELS}
    report["tool_called"] = any('"load_memory"' in r["contents"] for r in after[1:])
    report["after_recall"] = search_every_table([*SENTINELS, "marker"])

    # 3. The bridge forgets the first fact, then withdraws consent
    receipt = await bridge.forget(key, ids["forget"][0])
    report["forget_receipt"] = {"deleted": receipt.deleted, "verified": receipt.verified}
    report["after_forget"] = search_every_table(["forget"])
    withdrawal = await bridge.withdraw(key)
    report["withdraw_receipt"] = {"verified": withdrawal.verified}
    report["after_withdraw"] = search_every_table([*SENTINELS])
    report["embedding_calls"] = embedder.calls
    return report


async def main() -> dict[str, Any]:
    embedder = base.EmbeddingServer()
    url = await embedder.start()
    h = SessionHarness(RecallLlm())
    # generous budgets (docs/testing.md), not the production 10 s read / 15 s per call
    bridge = KagentBridgeStore(CONTROLLER_URL, local_server=base.LOCAL, token=BRIDGE_TOKEN,
                               timeout=60.0, deadline=120.0)
    try:
        await h.build(url)
        return await run(h, bridge, embedder)
    finally:
        await bridge.aclose()
        if hasattr(h, "lifespan"):
            await h.close()
        await embedder.stop()


if __name__ == "__main__":
    try:
        result = asyncio.run(main())
    except BaseException:  # noqa: BLE001 - report, don't hide
        result = {"driver_error": traceback.format_exc()}
    import kagent.adk._governed_memory_service as governed_module

    result["memory_service_file"] = governed_module.__file__
    result["session_service"] = f"{kagent_a2a.KAgentSessionService.__module__}." \
                                f"{kagent_a2a.KAgentSessionService.__name__}"
    log_file = os.environ.get("KGM_TEST_LOG_FILE")
    if log_file:
        with open(log_file, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for _, _, line in base.CAPTURE.lines)
    sys.stdout.write("KGM-REPORT " + json.dumps(result, default=str) + "\n")
