"""Every "no memory for this request" is explainable (issue 15, item 2): the tool result carries
the content-free reason code, one INFO line per refused request and operation says reason,
operation and opaque scope id, a forgotten ``memory_request`` is ``no_binding``, and
configuration mistakes raise at start-up naming the fix.  Distinct sentinels in the query, the
fact, the identities, the token and the key material prove none of it reaches a log line or an
exception."""

from __future__ import annotations

import json
import logging
import secrets
from datetime import UTC, datetime

import pytest
from support.adk import AGENT, build, context_id, save_plan, sign
from support.scopes import make_key
from google.genai import types

from kagent_governed_memory import (
    GovernanceError,
    GovernedMemoryService,
    HashingEmbedder,
    memory_request,
)
from kagent_governed_memory.scope import load_private_key, load_public_keys, public_keys_from_env
from kagent_governed_memory.store import Admission
from kagent_governed_memory.adk import refusals as refusals_module
from kagent_governed_memory.controls import MemoryControls

PURPOSE = "personal_preferences"
LOGGER = "kagent_governed_memory"


def tool_result(out: list[str]) -> dict:
    [said] = [t for t in out if t.startswith("tool said ")]
    return json.loads(said.removeprefix("tool said "))


async def unbound_turn(h, text: str) -> list[str]:
    """A turn the runtime forgot to wrap in ``memory_request``."""
    s = await h.runner.session_service.create_session(app_name=AGENT.app_name, user_id="u")
    out = []
    async for event in h.runner.run_async(
            user_id="u", session_id=s.id,
            new_message=types.Content(role="user", parts=[types.Part(text=text)])):
        for part in (event.content.parts if event.content and event.content.parts else []):
            if part.text:
                out.append(part.text)
    return out


def refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith(LOGGER) and r.getMessage().startswith("memory refused")]


@pytest.fixture(autouse=True)
def first_refusals_unseen():
    """Each test starts as a fresh process would: no reason refused yet."""
    refusals_module._reset_for_tests()
    yield
    refusals_module._reset_for_tests()


@pytest.fixture
def sentinels() -> dict[str, str]:
    return {name: f"SENTINEL{name.upper()}{secrets.token_hex(6)}"
            for name in ("query", "fact", "user", "room", "secret")}


async def test_each_refusal_reason_is_in_the_tool_result_and_one_info_line(
        store, database, caplog, sentinels):
    caplog.set_level(logging.DEBUG)
    now = [datetime(2026, 11, 29, 12, 0, tzinfo=UTC)]
    h = build(store, plan=save_plan, admission=Admission(store, clock=lambda: now[0]))
    key = make_key(f"@{sentinels['user'].lower()}:example.org",
                   room=f"!{sentinels['room']}:example.org")
    q = sentinels["query"]

    # a forgotten memory_request: no_binding, plus one WARNING naming the fix
    assert tool_result(await unbound_turn(h, f"recall: {q}")) == {
        "reason": "no_binding", "status": "unavailable", "message": "no memory: no_binding"}
    assert any("memory_request" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records if r.name.startswith(LOGGER))
    # no assertion in this request
    assert tool_result(await h.turn(f"recall: {q}", key=None))["reason"] == "assertion_missing"
    # before consent
    assert tool_result(await h.turn(f"recall: {q}", key=key))["reason"] == "consent_required"
    await store.grant(key, purpose=PURPOSE)
    # the sender's explicit budget (burst 3): the 4th save says rate_limited, not just "denied"
    for i in range(3):
        assert tool_result(await h.turn(f"remember: {sentinels['fact']} {i}", key=key))[
            "status"] == "saved"
    assert tool_result(await h.turn(f"remember: {sentinels['fact']}", key=key)) == {
        "reason": "rate_limited", "status": "not_saved"}

    lines = refusals(caplog)
    reasons = [line.split("reason=")[1].split()[0] for line in lines]
    for reason in ("no_binding", "assertion_missing", "consent_required", "rate_limited"):
        assert reason in reasons, lines
    assert f"scope={key.opaque_id}" in " ".join(l for l in lines if "rate_limited" in l)
    assert "operation=save" in " ".join(lines)
    # one line per refused request, naming the operation that met the refusal first
    assert reasons.count("consent_required") == 1, lines
    # without a binding there is no request to key on: at most one line per asyncio task
    # (google-adk runs a turn's tools in a second one), not one per operation
    assert 1 <= reasons.count("no_binding") <= 2, lines
    everything = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    for value in sentinels.values():
        assert value not in everything and value.lower() not in everything
    assert key.principal.mxid not in everything and key.scope.room_id not in everything


async def test_a_token_without_keys_is_memory_not_configured(store, database, caplog):
    caplog.set_level(logging.INFO)
    h = build(store, plan=save_plan)
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    token = sign(key)
    s = await h.runner.session_service.create_session(app_name=AGENT.app_name, user_id="u")
    out = []
    with memory_request(token, context_id=context_id()):  # the runtime forgot the keys
        async for event in h.runner.run_async(
                user_id="u", session_id=s.id,
                new_message=types.Content(role="user", parts=[types.Part(text="recall: x")])):
            for part in (event.content.parts if event.content and event.content.parts else []):
                if part.text:
                    out.append(part.text)
    assert tool_result(out)["reason"] == "memory_not_configured"
    assert any("reason=memory_not_configured" in line for line in refusals(caplog))
    assert token not in caplog.text and token[-20:] not in caplog.text


async def test_embedding_failure_is_explained(store, database, caplog, sentinels):
    caplog.set_level(logging.INFO)

    class Broken(HashingEmbedder):
        async def embed(self, texts):
            raise RuntimeError(f"provider echoed {texts[0]}")

    h = build(store, plan=save_plan, embedder=Broken())
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    result = tool_result(await h.turn(f"recall: {sentinels['query']}", key=key))
    assert result == {"reason": "embedding_failed", "status": "unavailable",
                      "message": "no memory: embedding_failed"}
    # the first operation to meet it is the first turn's prefetch; one line for the request
    [line] = [l for l in refusals(caplog) if "reason=embedding_failed" in l]
    assert line.startswith(
        f"memory refused reason=embedding_failed operation=prefetch scope={key.opaque_id}")
    assert sentinels["query"] not in caplog.text


def _message(exc: BaseException) -> str:
    return f"{exc}\n{exc!r}\n{exc.args}"


async def test_configuration_mistakes_raise_at_start_naming_the_fix(store, sentinels, monkeypatch):
    # the embedder's dimension differs from the policy's
    with pytest.raises(GovernanceError) as wrong_dim:
        GovernedMemoryService(store, agent=AGENT, embedder=HashingEmbedder(dimension=384))
    text = _message(wrong_dim.value)
    assert "embedding_dimension" in text and "expected=768" in text and "got=384" in text
    # a too-short confirmation secret
    with pytest.raises(GovernanceError) as short:
        MemoryControls(store, agents={"a": AGENT}, secret=sentinels["secret"][:5].encode())
    text = _message(short.value)
    assert "at least 32" in text and "token_bytes" in text
    assert sentinels["secret"][:5] not in text
    # bad key material: named, never echoed
    for loader, material, fix in (
            (load_public_keys, f"-----BEGIN PUBLIC KEY-----\n{sentinels['secret']}\n", "keys public-key"),
            (load_private_key, f"-----BEGIN PRIVATE KEY-----\n{sentinels['secret']}\n", "keys generate")):
        with pytest.raises(GovernanceError) as bad:
            loader(material.encode())
        text = _message(bad.value)
        assert fix in text and sentinels["secret"] not in text
    # no public keys in the environment
    monkeypatch.delenv("KGM_ASSERTION_PUBLIC_KEYS", raising=False)
    monkeypatch.delenv("KGM_ASSERTION_PUBLIC_KEYS_FILE", raising=False)
    with pytest.raises(GovernanceError) as missing:
        public_keys_from_env()
    assert "KGM_ASSERTION_PUBLIC_KEYS" in _message(missing.value)


async def test_the_first_refusal_of_each_reason_is_a_warning_that_names_the_fix(
        store, caplog, sentinels):
    """Python hides INFO by default: the first ``rate_limited`` (a scripted session's fourth
    explicit operation under the prototype policy) must be visible and say which policy field
    to raise; the next one of the same reason is INFO again."""
    caplog.set_level(logging.INFO)
    h = build(store, plan=save_plan)
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    for i in range(3):
        assert tool_result(await h.turn(f"remember: {sentinels['fact']} {i}", key=key))[
            "status"] == "saved"
    for _ in range(2):
        assert tool_result(await h.turn(f"remember: {sentinels['fact']}", key=key))[
            "reason"] == "rate_limited"
    limited = [r for r in caplog.records if r.name.startswith(LOGGER)
               and "reason=rate_limited" in r.getMessage()]
    assert [r.levelno for r in limited] == [logging.WARNING, logging.INFO], limited
    assert "explicit_burst" in limited[0].getMessage()
    assert "policy register" in limited[0].getMessage()
    assert "explicit_burst" not in limited[1].getMessage()
    assert sentinels["fact"] not in caplog.text and key.principal.mxid not in caplog.text


async def test_adks_own_load_memory_says_no_memory_and_why(store, caplog):
    """An agent that kept google-adk's own ``load_memory`` (no configure_governed_memory) on
    the governed service: a refusal is a notice, never an empty memory."""
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools import load_memory

    from support.adk import ScriptedLlm

    model = ScriptedLlm(plan=lambda text: ("load_memory", {"query": text}))
    service = GovernedMemoryService(store, agent=AGENT, embedder=HashingEmbedder())
    agent = LlmAgent(name="assistant", model=model, tools=[load_memory])
    runner = Runner(app_name=AGENT.app_name, agent=agent,
                    session_service=InMemorySessionService(), memory_service=service)
    key = make_key()  # no consent
    s = await runner.session_service.create_session(app_name=AGENT.app_name, user_id="u")
    out = []
    from support.adk import ISSUER, PUBLIC_KEYS

    with memory_request(sign(key, session="adk-own"), public_keys=PUBLIC_KEYS, issuer=ISSUER,
                        agent=AGENT, context_id=context_id("adk-own")):
        async for event in runner.run_async(
                user_id="u", session_id=s.id,
                new_message=types.Content(role="user", parts=[types.Part(text="what?")])):
            for part in (event.content.parts if event.content and event.content.parts else []):
                if part.text:
                    out.append(part.text)
    said = tool_result(out)["result"]  # google-adk wraps a non-dict answer
    assert "memories" in said, said
    [memory] = said["memories"]
    assert memory["author"] == "kagent-governed-memory"
    assert memory["content"]["parts"][0]["text"] == "no memory: consent_required"
