"""The development bridge (issue 26 item 2): ``DevBridge`` on a real dev-db and the real ADK
Runner with the scripted model, its refusals and its WARNING, production verifiers and stores
refusing its tokens, and ``adk api_server`` serving the documented agent folder over HTTP."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from psycopg.conninfo import make_conninfo

from kagent_governed_memory import (
    DEV_POLICY,
    PROTOTYPE_POLICY,
    AgentIdentity,
    DevBridge,
    GovernedMemoryStore,
    HashingEmbedder,
    InvalidInput,
    ReasonCode,
    ScopeDenied,
    dev_database,
    memory_request,
)
from kagent_governed_memory.dev import DEV_ISSUER, DevDatabase
from kagent_governed_memory.scope import verify_scope_assertion
from kagent_governed_memory.dev import BRIDGE_ROLE, OPERATOR_ROLE, RUNTIME_ROLE
from kagent_governed_memory.adk import GovernedMemoryService, configure_governed_memory
from kagent_governed_memory.adk.dev import DevMemory
from kagent_governed_memory.testing import ScriptedModel

from support.adk import ISSUER, PUBLIC_KEYS
from support.db import migrated
from support.settings import LOCAL

ROOT = Path(__file__).resolve().parents[2]
# The documented agent folder: the first ```python block of this file is its agent.py (the lead
# may move the text into the README: change this one constant).
DOC = ROOT / "docs" / "dev-bridge.md"
ME = AgentIdentity(namespace="dev", name="my-agent")
FACT = "I prefer green tea."
ON = "!memory on my-agent personal_preferences"
_ENABLED = {"KGM_DEV_BRIDGE": "1"}


SAMPLE = ROOT / "samples" / "adk-dev" / "my_agent"  # the shipped folder: adk web samples/adk-dev


def documented_agent_py() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert blocks and "dev_app(" in blocks[0], f"{DOC} no longer starts with the agent.py block"
    return str(blocks[0])


def test_the_shipped_agent_folder_is_the_documented_one() -> None:
    assert (SAMPLE / "agent.py").read_text() == documented_agent_py()
    assert (SAMPLE / "__init__.py").read_text() == "from . import agent\n"


class Chat:
    """The real ADK Runner over an agent with governed memory on ``bridge.runtime``."""

    def __init__(self, bridge: DevBridge) -> None:
        self.bridge = bridge
        self.model = ScriptedModel()
        self.service = GovernedMemoryService(bridge.runtime, agent=ME, embedder=HashingEmbedder())
        agent = LlmAgent(name="my_agent", model=self.model, instruction="Be helpful.")
        configure_governed_memory(agent, self.service)
        self.runner = Runner(app_name="my_agent", agent=agent,
                             session_service=InMemorySessionService())

    async def session(self) -> str:
        s = await self.runner.session_service.create_session(app_name="my_agent", user_id="u")
        return s.id

    async def turn(self, session_id: str, text: str) -> list[str]:
        out: list[str] = []
        async with self.bridge.request(session_id):
            async for event in self.runner.run_async(
                    user_id="u", session_id=session_id,
                    new_message=types.Content(role="user", parts=[types.Part(text=text)])):
                for part in (event.content.parts or []) if event.content else []:
                    if part.text:
                        out.append(part.text)
        await self.service.drain()
        return out


async def test_the_development_bridge_end_to_end_on_the_real_runner():
    async with dev_database() as db, await DevBridge.open(db, agent=ME, enable=True) as bridge:
        assert bridge.user.mxid == f"@dev:{db.local_server}"
        assert bridge.room == f"!dev-control-room:{db.local_server}"
        assert bridge.issuer == DEV_ISSUER == "urn:kagent-governed-memory:dev-bridge"
        assert bridge.key.agent == ME and bridge.key.scope.room_id == bridge.room
        assert bridge.runtime.policy == DEV_POLICY and RUNTIME_ROLE in db.runtime_dsn
        chat = Chat(bridge)

        asked = await bridge.command(ON)
        assert asked.startswith(f"confirm with: {ON} c1.")
        assert await bridge.command(asked.removeprefix("confirm with: ")) == (
            "memory on: my-agent, purpose personal_preferences, generation 1")

        first = await chat.session()
        assert await chat.turn(first, f"Remember that {FACT}") == ["Saved."]
        # a new session recalls it: the fact reached that session's model request
        second = await chat.session()
        before = len(chat.model.requests)
        answer = await chat.turn(second, "What do I like to drink?")
        assert answer == [f"From memory: {FACT}"]
        assert any(FACT in str(r.model_dump()) for r in chat.model.requests[before:])

        # the development policy: a hand-typed session's 4th..8th save is not rate_limited
        for n in range(2, 8):
            assert await chat.turn(first, f"Remember that fact number {n} is true.") == ["Saved."]

        entries = await bridge.entries()
        assert len(entries) == 7 and FACT in [e.text for e in entries]
        listing = await bridge.command("!memory inspect my-agent")
        assert listing.startswith("inspect: 7 entries\n") and f": {FACT}" in listing
        tea = next(e.id for e in entries if e.text == FACT)
        assert f"- {tea}: {FACT}" in listing.splitlines()

        assert await bridge.command(f"!memory forget my-agent {tea}") == f"forgot {tea}: verified"
        assert FACT not in [e.text for e in await bridge.entries()]
        assert "status: my-agent, memory on" in await bridge.command("!memory status my-agent")

        assert await bridge.command("!memory off my-agent", confirm=True) == (
            "memory off: my-agent, 6 entries erased and verified")
        assert await bridge.entries() == []
        assert await chat.turn(await chat.session(), "What do I like to drink?") != [
            f"From memory: {FACT}"]
        assert await bridge.command("!memory inspect my-agent") == "inspect: 0 entries"


def _unreachable(tmp_path: Path) -> DevDatabase:
    dsn = f"host={tmp_path} port=1 user=kgm_app dbname=kgm"
    return DevDatabase(dsn=dsn, operator_dsn=dsn, owner_dsn=dsn, admin_dsn=dsn,
                       local_server=LOCAL, runtime_dsn=dsn, bridge_dsn=dsn)


@pytest.mark.parametrize(("environ", "enable", "field", "fix"), [
    ({}, False, "dev_bridge_enable", "KGM_DEV_BRIDGE=1"),
    ({"KGM_DEV_BRIDGE": "true"}, False, "dev_bridge_enable", "KGM_DEV_BRIDGE=1"),
    ({"KGM_DEV_BRIDGE": "1", "KAGENT_MEMORY_URL": "http://kagent-controller.kagent:8085"},
     False, "dev_bridge_kagent", "KAGENT_MEMORY_URL"),
    ({"KAGENT_NAME": "my-agent"}, True, "dev_bridge_kagent", "KAGENT_NAME"),
    ({"KAGENT_NAMESPACE": "kagent"}, True, "dev_bridge_kagent", "KAGENT_NAMESPACE"),
])
async def test_refused_unless_enabled_and_under_kagent_mode(tmp_path, caplog, environ, enable,
                                                            field, fix):
    with pytest.raises(InvalidInput) as refused:
        await DevBridge.open(_unreachable(tmp_path), agent=ME, enable=enable, environ=environ)
    assert refused.value.reason is ReasonCode.DEV_BRIDGE_REFUSED
    assert refused.value.ids["field"] == field and fix in str(refused.value)
    assert "development bridge enabled" not in caplog.text


async def test_refused_on_a_database_dev_db_did_not_create(database):
    """The conftest database has dev-db's logins and schema but not its marker: nothing is
    registered there, no store is opened."""
    await migrated(database)
    as_login = lambda user: make_conninfo(database.dsn, user=user)  # noqa: E731
    db = DevDatabase(dsn=database.dsn, operator_dsn=database.operator_dsn,
                     owner_dsn=database.owner_dsn, admin_dsn=database.admin_dsn,
                     local_server=LOCAL, runtime_dsn=as_login(RUNTIME_ROLE),
                     bridge_dsn=as_login(BRIDGE_ROLE))
    with pytest.raises(InvalidInput) as refused:
        await DevBridge.open(db, agent=ME, enable=True)
    assert refused.value.reason is ReasonCode.DEV_BRIDGE_REFUSED
    assert refused.value.ids["field"] == "dev_bridge_database"
    assert "dev-db" in str(refused.value)
    assert database.scalar("SELECT count(*) FROM memory_runtime_login") == 0


async def test_refused_when_the_marker_is_removed_and_announced_once_when_open(caplog):
    caplog.set_level(logging.INFO, logger="kagent_governed_memory.devbridge")
    async with dev_database() as db:
        assert OPERATOR_ROLE in db.operator_dsn and BRIDGE_ROLE in db.bridge_dsn
        async with await DevBridge.open(db, agent=ME, environ=_ENABLED) as bridge:
            pass
        records = [r for r in caplog.records if r.name == "kagent_governed_memory.devbridge"]
        assert [r.levelno for r in records] == [logging.WARNING]
        message = records[0].getMessage()
        assert message.startswith("development bridge enabled:")
        assert "never in production" in message and DEV_ISSUER in message
        assert bridge.user.mxid not in message and bridge.room not in message  # content-free
        with psycopg.connect(db.admin_dsn, autocommit=True) as conn:
            conn.execute("COMMENT ON DATABASE kgm IS NULL")
        with pytest.raises(InvalidInput) as refused:
            await DevBridge.open(db, agent=ME, enable=True)
        assert refused.value.ids["field"] == "dev_bridge_database"


async def test_production_verifiers_and_stores_reject_its_tokens(database):
    """A production runtime verifies with its own bridge's keys and issuer: a dev token fails
    verification (no assertion is bound); and a dev assertion its runtime login was never
    recorded for cannot be redeemed in a production database."""
    async with dev_database() as db, await DevBridge.open(db, agent=ME, enable=True) as bridge:
        token = bridge.sign("ctx-1")
        for keys, issuer, reason in ((PUBLIC_KEYS, ISSUER, ReasonCode.ASSERTION_UNKNOWN_KEY),
                                     ({**PUBLIC_KEYS, **bridge.public_keys}, ISSUER,
                                      ReasonCode.ASSERTION_INVALID)):
            with pytest.raises(ScopeDenied) as rejected:
                verify_scope_assertion(token, public_keys=keys, issuer=issuer, agent=ME,
                                       context_id="ctx-1")
            assert rejected.value.reason is reason
            with memory_request(token, public_keys=keys, issuer=issuer, agent=ME,
                                context_id="ctx-1") as binding:
                assert binding.assertion is None and binding.reason is reason
        dev_assertion = verify_scope_assertion(token, public_keys=bridge.public_keys,
                                               issuer=DEV_ISSUER, agent=ME, context_id="ctx-1")

    # the production path: its own database, the runtime login registered for this agent
    await migrated(database)
    async with await GovernedMemoryStore.open(database.operator_dsn, local_server=LOCAL,
                                              sweep_every=None) as operator:
        await operator.register_runtime_login(RUNTIME_ROLE, ME)
    async with await GovernedMemoryStore.open(
            make_conninfo(database.dsn, user=RUNTIME_ROLE), local_server=LOCAL,
            policy=PROTOTYPE_POLICY, sweep_every=None) as runtime:
        with pytest.raises(ScopeDenied) as refused:
            await runtime.redeem(dev_assertion)
        assert refused.value.reason is ReasonCode.REQUEST_NOT_RECORDED


# -- the ADK plugin, in process --------------------------------------------------------------


async def _plugin_turns(dev: DevMemory, *texts: str) -> list[list[str]]:
    model = ScriptedModel()
    agent = LlmAgent(name="my_agent", model=model, instruction="Be helpful.")
    configure_governed_memory(agent, dev.service)
    runner = Runner(app=App(name="my_agent", root_agent=agent, plugins=[dev.plugin]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="my_agent", user_id="u")
    answers = []
    for text in texts:
        out = []
        async for event in runner.run_async(
                user_id="u", session_id=session.id,
                new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            for part in (event.content.parts or []) if event.content else []:
                if part.text:
                    out.append(part.text)
        answers.append(out)
    await runner.close()
    return answers


@pytest.mark.parametrize(("extra", "field"), [
    ({"KGM_DEV_BRIDGE": "0"}, "dev_bridge_enable"),
    ({"KAGENT_NAME": "my-agent"}, "dev_bridge_kagent"),
    ({"KGM_DSN": "kgm+http://kagent-controller.kagent:8085"}, "dev_bridge_kagent"),
    ({}, "dev_bridge_database"),  # the conftest database: no dev-db marker
])
async def test_the_plugin_keeps_memory_off_and_says_why(database, caplog, extra, field):
    await migrated(database)
    environ = {"KGM_DEV_BRIDGE": "1", "KGM_DSN": database.dsn, "KGM_LOCAL_SERVER": LOCAL,
               **extra}
    dev = DevMemory(ME, environ=environ)
    answers = await _plugin_turns(dev, ON + " yes", f"Remember that {FACT}")
    assert dev.refused == field
    assert answers[0] == [f"refused: dev_bridge_refused ({field}): memory is off; the "
                          "server's log says why"]
    assert answers[1] == ["Not saved: dev_bridge_refused."]
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "kagent_governed_memory.devbridge" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "development bridge refused, memory stays off: dev_bridge_refused: ")
    assert database.scalar("SELECT count(*) FROM memory_runtime_login") == 0


# -- adk api_server, in a subprocess, over HTTP ----------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="GET" if data is None
                                     else "POST", headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())

    def session(self) -> str:
        return str(self.call("/apps/my_agent/users/dev/sessions", {})["id"])

    def say(self, session_id: str, text: str) -> list[str]:
        events = self.call("/run", {"app_name": "my_agent", "user_id": "dev",
                                    "session_id": session_id,
                                    "new_message": {"role": "user", "parts": [{"text": text}]}})
        return [p["text"] for e in events for p in (e.get("content") or {}).get("parts") or []
                if p.get("text")]


async def test_adk_api_server_serves_the_documented_agent_folder_with_memory(tmp_path):
    folder = tmp_path / "agents" / "my_agent"  # a copy of the shipped sample folder (adk web
    folder.mkdir(parents=True)                  # writes its sessions into the agents folder)
    (folder / "__init__.py").write_text((SAMPLE / "__init__.py").read_text())
    (folder / "agent.py").write_text((SAMPLE / "agent.py").read_text())
    port = _free_port()
    log = tmp_path / "adk.log"
    async with dev_database() as db:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGENT_", "KGM_"))}
        env.update(KGM_DEV_BRIDGE="1", KGM_DSN=db.dsn, KGM_LOCAL_SERVER=db.local_server,
                   ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS="false", PYTHONUNBUFFERED="1")
        adk = Path(sys.executable).parent / "adk"
        with log.open("wb") as out:
            proc = subprocess.Popen([str(adk), "api_server", "--host", "127.0.0.1", "--port",
                                     str(port), str(tmp_path / "agents")], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            server = Server(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + 180
            while True:
                try:
                    assert server.call("/list-apps") == ["my_agent"]
                    break
                except OSError:
                    assert proc.poll() is None, log.read_text()[-3000:]
                    assert time.monotonic() < deadline, log.read_text()[-3000:]
                    time.sleep(0.5)

            first = server.session()
            assert server.say(first, ON + " yes") == [
                "memory on: my-agent, purpose personal_preferences, generation 1"]
            assert server.say(first, f"Remember that {FACT}") == ["Saved."]
            second = server.session()  # a NEW session: the model's request carried the fact
            assert server.say(second, "What do I like to drink?") == [f"From memory: {FACT}"]
            listing = server.say(second, "!memory inspect my-agent")
            assert len(listing) == 1 and listing[0].startswith("inspect: 1 entry\n- ")
            entry = listing[0].splitlines()[1].removeprefix("- ").split(":")[0]
            assert server.say(second, f"!memory forget my-agent {entry}") == [
                f"forgot {entry}: verified"]
            assert server.say(second, "!memory inspect my-agent") == ["inspect: 0 entries"]
            assert server.say(second, "!memory off my-agent yes") == [
                "memory off: my-agent, 0 entries erased and verified"]
            assert server.say(second, "!memory status my-agent") == [
                "status: my-agent, memory off"]
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        text = log.read_text()
        assert text.count("development bridge enabled:") == 1, text[-3000:]
        assert FACT not in text and "@dev:" not in text  # the server's log stays content-free
