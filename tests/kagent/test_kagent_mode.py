"""Kagent mode: the same agent, through the compiled controller, with no database credentials.

Every governance test here runs twice (``mode``): ``direct`` — ``GovernedMemoryService`` on
``GovernedMemoryStore`` with the application's database login — and ``kagent`` —
``GovernedMemoryService`` on ``KagentControllerStore`` (the agent pod's ServiceAccount token and
the request's scope assertion) with the bridge's controls on ``KagentBridgeStore``, both talking
HTTP to the patched kagent controller compiled from the Go series (``go_controller``), which
holds the only database login.  A real google-adk ``Runner`` drives every turn; the model is
scripted.

The fault tests (kagent only) stop, crash and restart the real controller process, make its
database refuse it (a real 5xx) and hold a lock so its answer times out.

Without Go or kagent's source the kagent runs are reported as NOT RUN (skipped, with the reason).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from support.adk import AGENT, BRIDGE_KEY, ISSUER, PUBLIC_KEYS, build, save_plan, sign
from support.db import Db, migrated, open_store, physical_rows
from support.scopes import make_key, vec
from support.settings import CONTROLLER_BUDGETS, LOCAL
from support.go_controller import (
    BRIDGE_SERVICE_ACCOUNT,
    ControllerProcess,
    Unavailable,
    controller,
    service_account_token,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService

from kagent_governed_memory import (
    ControlRepository,
    GovernanceError,
    KagentControllerStore,
    ReasonCode,
    RuntimeRepository,
    StoreUnavailable,
    memory_request,
)
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.dev import CONTROLLER_ROLE
from kagent_governed_memory.scope import public_key_pem

PURPOSE = "personal_preferences"
FIVE_TURNS = ["I drink green tea every morning.", "My project is called Lighthouse.",
              "I live in Lisbon.", "I cycle to work.", "That is all for today."]
ENV = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(BRIDGE_KEY).decode(),
       "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
AGENT_TOKEN = service_account_token(AGENT.namespace, AGENT.name)
BRIDGE_TOKEN = service_account_token(*BRIDGE_SERVICE_ACCOUNT)


@dataclass
class Mode:
    name: str
    runtime: RuntimeRepository  # what the agent's GovernedMemoryService is given
    controls: ControlRepository  # what the bridge's MemoryControls is given
    db: Db
    process: ControllerProcess | None = None


# kagent mode runs the compiled controller stand-in (docs/testing.md: markers)
KAGENT = pytest.param("kagent", marks=pytest.mark.controller)


@pytest.fixture(params=["direct", KAGENT])
async def mode(request: pytest.FixtureRequest, database: Db) -> AsyncIterator[Mode]:
    await migrated(database)
    if request.param == "direct":
        store = await open_store(database)
        yield Mode("direct", store, store, database)
        await store.close()
        return
    running = controller(database.controller_dsn, local_server=LOCAL, env=ENV)
    try:
        process = running.__enter__()
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")
    runtime = KagentControllerStore(process.url, agent=AGENT, local_server=LOCAL,
                                    token=AGENT_TOKEN, **CONTROLLER_BUDGETS)
    bridge = KagentBridgeStore(process.url, local_server=LOCAL, token=BRIDGE_TOKEN,
                               **CONTROLLER_BUDGETS)
    try:
        yield Mode("kagent", runtime, bridge, database, process)
    finally:
        await runtime.aclose()
        await bridge.aclose()
        running.__exit__(None, None, None)


kagent_only = pytest.mark.parametrize("mode", [KAGENT], indirect=True)


def tool_result(out: list[str]) -> dict[str, Any]:
    said = [t for t in out if t.startswith("tool said ")][-1]
    return json.loads(said.removeprefix("tool said "))


def outcomes(h: Any) -> set[tuple[str, str]]:
    return {(m[1]["kgm.memory.operation"], m[1]["kgm.memory.outcome"]) for m in h.metrics()
            if "kgm.memory.operation" in m[1]}


async def _until(condition: Any, timeout: float = 60.0) -> None:  # returns when reached
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


# -- the same governance, both backends ----------------------------------------------------------


async def test_the_agent_pod_holds_no_database_credentials(mode: Mode) -> None:
    h = build(mode.runtime)  # type: ignore[arg-type]
    if mode.name == "kagent":
        held = repr(vars(h.service)) + repr(vars(mode.runtime)) + repr(vars(mode.runtime._http))
        assert "postgres" not in held.lower() and mode.db.dsn not in held
        assert not hasattr(mode.runtime, "_pool")
    assert isinstance(mode.runtime, RuntimeRepository)
    assert isinstance(mode.controls, ControlRepository)


async def test_nothing_is_collected_before_consent(mode: Mode) -> None:
    h = build(mode.runtime, plan=save_plan,  # type: ignore[arg-type]
              summaries=['["must never be asked for"]'])
    key = make_key()
    for text in ["remember: I like green tea", "recall: tea", *FIVE_TURNS]:
        assert await h.turn(text, key=key), "the chat answers regardless of memory"
    await h.service.drain()
    assert h.embedder.calls == 0 and "summarise" not in h.model.calls
    assert physical_rows(mode.db) == 0
    assert await mode.controls.generation(key) is None
    assert ("request", "consent_required") in outcomes(h)


async def test_consent_then_autosave_of_eligible_turns_then_prefetch(mode: Mode) -> None:
    h = build(mode.runtime, plan=save_plan,  # type: ignore[arg-type]
              summaries=['["Prefers green tea in the morning", "Works on project Lighthouse"]'])
    key = make_key()
    await h.turn("Before consent I mention my secret hobby: falconry.", key=key)
    await mode.controls.grant(key, purpose=PURPOSE)
    for text in FIVE_TURNS:
        await h.turn(text, key=key)
    await h.service.drain()
    assert h.model.calls.count("summarise") == 1
    assert physical_rows(mode.db, key) == 2
    [prompt] = h.summariser_prompts  # the turn sent before consent is never summarised
    assert "falconry" not in prompt and "Lighthouse" in prompt
    await h.turn("What should I drink this morning? I usually like green tea.", key=key,
                 session="s2")
    instruction = str(h.model.requests[-1].config.system_instruction)
    assert "<memory>" in instruction and "Prefers green tea in the morning" in instruction
    assert (await mode.controls.status(key)).entry_count == 2


async def test_recalled_facts_are_injected_not_persisted(mode: Mode, tmp_path: Any) -> None:
    path = tmp_path / "sessions.db"
    h = build(mode.runtime, plan=save_plan,  # type: ignore[arg-type]
              session_service=SqliteSessionService(str(path)))
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    mark = "SENTINEL-" + secrets.token_hex(8)
    [entry] = await _seed(mode, key, f"{mark} prefers green tea")  # saved in another request
    await h.turn("hello", key=key)  # the session's first turn (its prefetch) is behind us
    before = len(h.model.requests)
    out = await h.turn("recall: green tea", key=key)
    assert tool_result(out)["count"] == 1
    assert any(mark in str(r.config.system_instruction) for r in h.model.requests[before + 1:])

    def dump() -> str:
        with sqlite3.connect(path) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master "
                                                 "WHERE type='table'")]
            assert tables
            return "\n".join(repr(row) for t in tables
                             for row in conn.execute(f'SELECT * FROM "{t}"'))

    assert mark not in dump()
    receipt = await mode.controls.forget(key, entry)
    assert (receipt.deleted, receipt.verified) == (1, True)
    assert physical_rows(mode.db, key) == 0 and mark not in dump()
    assert tool_result(await h.turn("recall: green tea", key=key))["count"] == 0


async def test_a_withdrawal_racing_a_background_autosave_wins(mode: Mode) -> None:
    h = build(mode.runtime, summaries=['["A fact saved after withdrawal must not land"]'])  # type: ignore[arg-type]
    h.model.gate = asyncio.Event()
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    for text in FIVE_TURNS:
        await h.turn(text, key=key)
    await _until(lambda: h.model.calls.count("summarise") == 1)
    assert (await mode.controls.withdraw(key)).verified
    h.model.gate.set()
    await h.service.drain()
    assert physical_rows(mode.db, key) == 0
    assert outcomes(h) & {("save", "stale_generation"), ("save", "consent_required")}


async def test_a_token_serves_one_request_and_one_key(mode: Mode) -> None:
    key, other = make_key(), make_key("@bob:example.org", room="!control-b:example.org")
    await mode.controls.grant(key, purpose=PURPOSE)
    token = sign(key)
    with memory_request(token, public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                        context_id="a2a-context-s1") as binding:
        assert binding.assertion is not None
        assert await mode.runtime.redeem(binding.assertion) == 1
        with pytest.raises(GovernanceError) as replayed:
            await mode.runtime.redeem(binding.assertion)
        assert replayed.value.reason is ReasonCode.ASSERTION_REPLAYED
        if mode.name == "kagent":  # the controller needs this request's assertion for its key
            with pytest.raises(GovernanceError) as crossed:
                await mode.runtime.search(other, 1, [0.1] * 768)
            assert crossed.value.reason is ReasonCode.SCOPE_MISMATCH
    if mode.name == "kagent":
        with pytest.raises(GovernanceError) as unbound:
            await mode.runtime.search(key, 1, [0.1] * 768)
        assert unbound.value.reason is ReasonCode.ASSERTION_MISSING


async def _seed(mode: Mode, key: Any, *facts: str) -> list[str]:
    """Facts saved by an earlier request of the agent, outside this chat session."""
    with memory_request(sign(key, session="seed"), public_keys=PUBLIC_KEYS, issuer=ISSUER,
                        agent=AGENT, context_id="a2a-context-seed") as binding:
        assert binding.assertion is not None
        generation = await mode.runtime.redeem(binding.assertion)
        return await mode.runtime.save(key, generation, facts=list(facts),
                                       embeddings=[vec(f) for f in facts])


# -- faults over HTTP (kagent mode) ----------------------------------------------------------------


async def _remember(h: Any, key: Any, text: str) -> dict[str, Any]:
    return tool_result(await h.turn(f"remember: {text}", key=key))


@kagent_only
async def test_controller_unreachable_then_restarted(mode: Mode, caplog: Any) -> None:
    assert mode.process is not None
    h = build(mode.runtime, plan=save_plan)  # type: ignore[arg-type]
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    mark = "SENTINEL-" + secrets.token_hex(8)
    mode.process.kill()
    with caplog.at_level(logging.DEBUG):
        out = await h.turn(f"remember: {mark} likes tea", key=key)
    assert out and tool_result(out)["status"] != "saved"  # the chat answered, nothing was saved
    assert ("request", "store_unavailable") in outcomes(h)
    assert mark not in caplog.text and "reason=store_unavailable" in caplog.text
    with pytest.raises(StoreUnavailable):
        await mode.controls.status(key)
    mode.process.start()  # the same address: the clients need no change
    assert (await _remember(h, key, "likes tea"))["status"] == "saved"
    assert physical_rows(mode.db, key) == 1


@kagent_only
async def test_a_controller_5xx_means_no_memory_and_the_chat_answers(mode: Mode) -> None:
    h = build(mode.runtime, plan=save_plan)  # type: ignore[arg-type]
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    with mode.db.admin() as conn:  # the controller's database login stops working
        conn.execute(f'ALTER ROLE "{CONTROLLER_ROLE}" NOLOGIN')
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE usename = %s", [CONTROLLER_ROLE])
    try:
        out = await h.turn("remember: likes tea", key=key)
        assert out and tool_result(out)["status"] != "saved"
        assert outcomes(h) & {("request", "store_unavailable"), ("request", "database_error")}
        with pytest.raises(GovernanceError) as failed:
            await mode.controls.status(key)
        assert failed.value.reason in (ReasonCode.STORE_UNAVAILABLE, ReasonCode.DATABASE_ERROR)
        assert int(failed.value.ids["status"]) >= 500
    finally:
        with mode.db.admin() as conn:
            conn.execute(f'ALTER ROLE "{CONTROLLER_ROLE}" LOGIN')
    assert physical_rows(mode.db, key) == 0
    assert (await _remember(h, key, "likes tea"))["status"] == "saved"


@kagent_only
async def test_timeouts_are_bounded_and_only_idempotent_calls_retry(mode: Mode) -> None:
    assert mode.process is not None
    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request.url.path.rsplit("/", 1)[-1])

    client = httpx.AsyncClient(timeout=httpx.Timeout(0.5), event_hooks={"request": [count]},
                               trust_env=False)
    runtime = KagentControllerStore(mode.process.url, agent=AGENT, local_server=LOCAL,
                                    token=AGENT_TOKEN, client=client)
    key = make_key()
    generation = (await mode.controls.grant(key, purpose=PURPOSE)).generation
    lock = psycopg.connect(mode.db.admin_dsn)
    try:  # the controller's statements wait on this lock: its answer cannot come in time
        lock.execute("LOCK TABLE memory_scope IN ACCESS EXCLUSIVE MODE")
        with memory_request(sign(key), public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                            context_id="a2a-context-s1"):
            with pytest.raises(StoreUnavailable):
                await runtime.admit(key, generation, units=1)
            assert sent == ["admit"]  # may have taken effect: reported, never repeated
            sent.clear()
            with pytest.raises(StoreUnavailable):
                await runtime.search(key, generation, [0.1] * 768)
            assert sent == ["search"] * 3  # a read: retried, then reported
    finally:
        lock.rollback()
        lock.close()
        await client.aclose()


@kagent_only
async def test_a_controller_crash_during_withdrawal_stays_fail_closed(mode: Mode) -> None:
    assert mode.process is not None
    h = build(mode.runtime, plan=save_plan)  # type: ignore[arg-type]
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    for fact in ("likes tea", "cycles to work"):
        assert (await _remember(h, key, fact))["status"] == "saved"
    lock = psycopg.connect(mode.db.admin_dsn)
    lock.execute("LOCK TABLE memory_entry IN ACCESS EXCLUSIVE MODE")  # step 2 (delete) waits
    withdrawal = asyncio.create_task(mode.controls.withdraw(key))
    try:
        await _until(lambda: mode.db.scalar(
            "SELECT NOT enabled FROM memory_scope WHERE principal_subject = %s",
            [key.principal.subject]) is True)  # step 1 (disable) committed
        mode.process.kill()  # the controller dies between disabling and erasing
    finally:
        lock.rollback()
        lock.close()
    with pytest.raises(GovernanceError) as failed:
        await withdrawal
    assert failed.value.reason in (ReasonCode.STORE_UNAVAILABLE, ReasonCode.ERASURE_FAILED)
    mode.process.start()
    # fail-closed: the scope is disabled, whatever the erasure's state
    assert (await _remember(h, key, "after the crash"))["status"] != "saved"
    assert await mode.controls.generation(key) is None
    receipt = await mode.controls.withdraw(key)  # finishing it is safe to repeat
    assert receipt.verified and physical_rows(mode.db, key) == 0
    assert (await mode.controls.status(key)).enabled is False


# -- sinks that keep things (both modes; kagent adds the controller's own log) ---------------------


async def test_no_sentinel_reaches_any_sink(mode: Mode, monkeypatch: Any) -> None:
    import io
    import traceback

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from support.sentinels import ROUTER, leaks, make_sentinels

    from kagent_governed_memory.telemetry import (
        ContentFreeSpanProcessor,
        install_content_free_logging,
    )

    monkeypatch.setenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "true")  # the worst case
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(ROUTER)  # type: ignore[arg-type]
        trace.set_tracer_provider(provider)
    s = make_sentinels()
    root, stream = logging.getLogger(), io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s %(args)r"))
    old_level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    sanitizer = install_content_free_logging()
    exporter = InMemorySpanExporter()
    ROUTER.target = ContentFreeSpanProcessor(SimpleSpanProcessor(exporter))
    with mode.db.admin() as conn:
        conn.execute("ALTER TABLE memory_entry ADD CONSTRAINT sentinel_probe"
                     " CHECK (content NOT LIKE 'DBFAIL%')")
    h = build(mode.runtime, plan=save_plan, span_content="warn",  # type: ignore[arg-type]
              summaries=[f"Sure! Facts: {s['summary']}"])
    key = make_key()
    raised: list[BaseException] = []
    try:
        await mode.controls.grant(key, purpose=PURPOSE)
        for text in [f"Tell me what you remember about {s['prefetch_query']} and my drink.",
                     f"remember: {s['fact']} prefers green tea with honey",
                     f"recall: {s['load_query']}",
                     f"remember: DBFAIL {s['db']}",
                     "Plain turn one.", "Plain turn two."]:
            assert await h.turn(text, key=key)
        await h.service.drain()
        assert h.model.calls.count("summarise") == 1
        assert physical_rows(mode.db, key) == 1  # the fact; not the refused one
        with memory_request(sign(key, session="direct"), public_keys=PUBLIC_KEYS,
                            issuer=ISSUER, agent=AGENT, context_id="a2a-context-direct") as b:
            assert b.assertion is not None
            generation = await mode.runtime.redeem(b.assertion)
            try:
                await mode.runtime.save(key, generation, facts=[f"DBFAIL {s['db']}"],
                                        embeddings=[vec("x")])
            except GovernanceError as exc:
                raised.append(exc)
        assert [e.reason for e in raised] == [ReasonCode.INVALID_ARGUMENT]  # type: ignore[attr-defined]
    finally:
        sanitizer.remove()
        ROUTER.target = None
        root.removeHandler(handler)
        root.setLevel(old_level)
    if mode.process is not None:
        mode.process.stop()  # flush the controller's log
    with mode.db.admin() as conn:
        audit = "\n".join(str(r) for table in ("memory_audit", "memory_scope")
                          for r in conn.execute(f"SELECT row_to_json(t)::text FROM {table} t"))
    sinks = {
        "logs": stream.getvalue(),
        "spans": "\n".join(span.to_json() for span in exporter.get_finished_spans()),
        "metrics": json.dumps(h.metrics()),
        "audit": audit,
        "errors": "\n".join("".join(traceback.format_exception(e)) + repr(e) for e in raised),
    }
    if mode.process is not None:
        sinks["controller log"] = mode.process.log.read_text()
        assert "Governed memory operation" in sinks["controller log"]  # it logged, and ...
    assert "controller" in sinks["logs"] or mode.name == "direct"
    for sink, text in sinks.items():
        assert text, f"the {sink} sink captured nothing"
        assert leaks(text, s) == [], sink


# -- the bridge's controls and the CLI on either backend -------------------------------------------


async def test_the_bridges_memory_commands_work_on_either_backend(mode: Mode) -> None:
    from kagent_governed_memory import Principal
    from kagent_governed_memory.controls import ControlRoomCheck, MemoryControls
    from kagent_governed_memory.controls import (
        ConfirmationRequired,
        ErasureReply,
        ForgetReply,
        InspectReply,
        StatusReply,
    )

    alice = Principal(mxid="@alice:example.org", origin="native_local")
    controls = MemoryControls(mode.controls, agents={"my-agent": AGENT}, secret=b"c" * 32)

    async def ok() -> ControlRoomCheck:
        return ControlRoomCheck(allowed=True)

    async def run(text: str) -> Any:
        return await controls.handle(text, sender=alice, subject=alice,
                                     room_id="!control-a:example.org", room_check=ok)

    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    ids = await _seed(mode, key, *(f"alice fact {i}" for i in range(12)))
    status = await run("!memory status my-agent")
    assert isinstance(status, StatusReply) and status.status.entry_count == 12
    page = await run("!memory inspect my-agent")
    assert isinstance(page, InspectReply) and len(page.entries) == 10 and page.next_cursor
    rest = await run(f"!memory inspect my-agent {page.next_cursor}")
    assert isinstance(rest, InspectReply) and len(rest.entries) == 2
    assert {e.id for e in page.entries + rest.entries} == set(ids)
    forgot = await run(f"!memory forget my-agent {ids[0]}")
    assert isinstance(forgot, ForgetReply) and forgot.receipt.deleted == 1
    ask = await run("!memory off my-agent")
    assert isinstance(ask, ConfirmationRequired)
    done = await run(f"!memory off my-agent {ask.token}")
    assert isinstance(done, ErasureReply) and done.receipt.deleted == 11
    assert physical_rows(mode.db, key) == 0


@kagent_only
async def test_the_cli_speaks_to_the_controller_as_the_bridge(mode: Mode, tmp_path: Any) -> None:
    import subprocess
    import sys

    assert mode.process is not None
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    await _seed(mode, key, "likes tea")
    token = tmp_path / "token"
    token.write_text(BRIDGE_TOKEN + "\n")

    def cli(*args: str, token_file: Any = token) -> tuple[int, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "kagent_governed_memory", *args, "--json",
             "--controller", mode.process.url, "--token-file", str(token_file),  # type: ignore[union-attr]
             "--local-server", LOCAL], capture_output=True, text=True, check=False,
            env={k: v for k, v in __import__("os").environ.items() if k != "KGM_DSN"})
        return done.returncode, json.loads(done.stdout)

    scope = ["--principal", key.principal.subject, "--namespace", "kagent", "--agent",
             "my-agent", "--room", key.scope.room_id or ""]
    code, body = cli("status", *scope)
    assert code == 0 and body["enabled"] is True and body["entry_count"] == 1
    code, body = cli("status")
    assert code == 2 and body["error"] == "invalid_argument"  # store-wide needs the database
    bad = tmp_path / "bad-token"
    bad.write_text("not-a-token")
    code, body = cli("status", *scope, token_file=bad)
    assert code == 4 and body["error"] == "unauthenticated"
    code, body = cli("offboard", "--principal", key.principal.subject)
    assert code == 0 and body["ok"] is True and [s["deleted"] for s in body["scopes"]] == [1]
    assert physical_rows(mode.db, key) == 0


async def test_an_autosave_that_outlives_its_requests_assertion(mode: Mode) -> None:
    """An auto-save still summarising when its request's assertion expires (its lifetime, here
    1 s, plus the controller's 5 s leeway) is stored in both modes: the controller serves a
    redeemed request's calls until 120 s past the assertion's exp (its redemption's
    work_until, vector migration 000011); directly, the generation fence alone decides."""
    from datetime import timedelta

    h = build(mode.runtime, summaries=['["Cycles to work"]'])  # type: ignore[arg-type]
    h.model.gate = asyncio.Event()
    key = make_key()
    await mode.controls.grant(key, purpose=PURPOSE)
    for text in FIVE_TURNS:
        await h.turn(text, key=key, token=sign(key, lifetime=timedelta(seconds=1)))
    await _until(lambda: h.model.calls.count("summarise") == 1)
    await asyncio.sleep(7.0)
    h.model.gate.set()
    await h.service.drain()
    assert physical_rows(mode.db, key) == 1
    assert ("save", "assertion_expired") not in outcomes(h)


# -- the README's bring-your-own agent, as written, against the compiled controller ---------------


@kagent_only
async def test_the_readmes_byo_agent_runs_in_kagent_mode(mode: Mode, tmp_path: Any,
                                                        monkeypatch: Any) -> None:
    """The README's kagent-mode snippet, executed as written, with the environment the BYO
    manifest gives the pod (no database login anywhere in it), an OpenAI-compatible embedding
    endpoint on loopback and kagent's token file: a turn the bridge signed saves a fact."""
    import re
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    from support.adk import ScriptedLlm
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from kagent_governed_memory import HashingEmbedder
    from kagent_governed_memory.scope import public_key_pem, sign_scope_assertion

    class Embeddings(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = [{"index": i, "embedding": HashingEmbedder().embed_one(t)}
                    for i, t in enumerate(body["input"])]
            raw = json.dumps({"data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    assert mode.process is not None
    token = tmp_path / "kagent-token"
    token.write_text(AGENT_TOKEN)
    monkeypatch.setenv("KAGENT_MEMORY_TOKEN_FILE", str(token))
    env = {"KAGENT_MEMORY_URL": mode.process.url, "KAGENT_MEMORY_LOCAL_SERVER": LOCAL,
           "KAGENT_NAMESPACE": AGENT.namespace, "KAGENT_NAME": AGENT.name,
           "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER,
           "KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(BRIDGE_KEY).decode(),
           "KGM_EMBEDDING_URL": f"http://127.0.0.1:{server.server_address[1]}/v1",
           "KGM_EMBEDDING_MODEL": "test-embedding"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KGM_DSN", raising=False)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "modes.md").read_text()
    [snippet] = [b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
                 if "KagentControllerStore.from_env()" in b]
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "docs/modes.md (kagent mode)", "exec"), namespace)  # noqa: S102
    try:
        model = ScriptedLlm(plan=save_plan, summaries=[])
        llm_agent = LlmAgent(name="assistant", model=model, instruction="You help the user.")
        memory, store = namespace["governed"](llm_agent, model)
        assert "postgres" not in repr(vars(store)).lower()
        runner = Runner(app_name=store.agent.app_name, agent=llm_agent,
                        session_service=InMemorySessionService(), memory_service=memory)
        key = make_key()
        await mode.controls.grant(key, purpose=PURPOSE)  # the bridge, after "!memory on"
        session = await runner.session_service.create_session(app_name=store.agent.app_name,
                                                              user_id="u")
        headers = {"x-kagent-memory-scope": sign_scope_assertion(
            key, private_key=BRIDGE_KEY, issuer=ISSUER, audience=[LOCAL],
            context_id=session.id)}
        said: list[str] = []

        async def run() -> None:
            async for event in runner.run_async(
                    user_id="u", session_id=session.id,
                    new_message=types.Content(role="user", parts=[types.Part(
                        text="remember: cycles to work")])):
                if event.content:
                    said.extend(p.text for p in event.content.parts or [] if p.text)

        await namespace["serve_request"](store, headers, session.id, run)
        assert tool_result(said)["status"] == "saved"
        assert physical_rows(mode.db, key) == 1
        await memory.aclose()
        await store.aclose()
    finally:
        server.shutdown()
        server.server_close()


@kagent_only
async def test_a_first_turn_is_two_controller_calls_and_a_later_turn_one(mode: Mode) -> None:
    """Issue 29 on the compiled controller: a session's first turn redeems and admits its
    prefetch in one ``/generation`` (the controller answers ``admission``), then one batched
    ``/search``; nothing is embedded before the first answer; a later turn is one
    ``/generation``.  Fails against a controller that ignores ``admit`` (three calls)."""
    assert mode.process is not None
    routes: list[str] = []
    embedded_at: list[int] = []

    async def record(request: httpx.Request) -> None:
        routes.append(request.url.path.rsplit("/", 1)[-1])

    client = httpx.AsyncClient(trust_env=False, event_hooks={"request": [record]})
    runtime = KagentControllerStore(mode.process.url, agent=AGENT, local_server=LOCAL,
                                    token=AGENT_TOKEN, client=client, **CONTROLLER_BUDGETS)
    try:
        h = build(runtime)  # type: ignore[arg-type]
        real = h.embedder.embed

        async def embed(texts: list[str]) -> list[list[float]]:
            embedded_at.append(len(routes))
            return await real(texts)

        h.embedder.embed = embed  # type: ignore[method-assign]
        key = make_key()
        await mode.controls.grant(key, purpose=PURPOSE)
        await h.turn("I drink green tea every morning. What should I try next?", key=key)
        assert routes == ["generation", "search"], routes
        assert embedded_at == [1]  # after the redemption and its admission, before the search
        routes.clear()
        await h.turn("Thanks, that is all.", key=key)
        assert routes == ["generation"], routes
    finally:
        await runtime.aclose()
        await client.aclose()
