"""Smaller breaks found end to end: a forged cursor, a withdrawal during an outage, the room
check's agent, a typo in ``span_content``, an embedder that raises anything, and asyncio's
'never retrieved' report."""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import uuid

import pytest
from support.adk import AGENT, ISSUER, PUBLIC_KEYS, build, context_id, save_plan, sign
from support.db import physical_rows, save
from support.scopes import make_key
from support.controls import AGENTS, ALICE, OK, ROOM

from kagent_governed_memory import (
    AgentIdentity,
    ErasureFailed,
    InvalidInput,
    ReasonCode,
    StoreUnavailable,
)
from kagent_governed_memory.telemetry import install_content_free_logging
from kagent_governed_memory.adk import GovernedMemoryService
from kagent_governed_memory.controls import ErasureReply, MemoryControls, Notice
from kagent_governed_memory.embedding import HashingEmbedder
from kagent_governed_memory.telemetry import Operation
from kagent_governed_memory.scope import memory_request
from kagent_governed_memory.store import _CURSOR, _cursor_tag

PURPOSE = "personal_preferences"


async def test_a_forged_cursor_with_a_valid_tag_is_invalid_cursor(store):
    """The cursor's tag is keyed with the scope's public opaque id, so anyone can forge one:
    an out-of-range position is ``invalid_cursor``, not an OverflowError."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    payload = _CURSOR.pack(1, 2**62, uuid.uuid4().bytes)
    cursor = base64.urlsafe_b64encode(payload + _cursor_tag(key, payload)).decode().rstrip("=")
    with pytest.raises(InvalidInput) as err:
        await store.inspect(key, cursor=cursor)
    assert err.value.reason is ReasonCode.INVALID_CURSOR
    controls = MemoryControls(store, agents=AGENTS, secret=b"c" * 32)
    reply = await controls.handle(f"!memory inspect my-agent {cursor}", sender=ALICE,
                                  subject=ALICE, room_id=ROOM, room_check=lambda: OK)
    assert reply == Notice(reason=ReasonCode.INVALID_CURSOR)


class _Outage:
    """The store as seen during a database outage: the withdrawal's disable cannot commit."""

    def __init__(self, store) -> None:
        self._store, self.down = store, True

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def withdraw(self, key):
        if self.down:
            raise ErasureFailed(ReasonCode.ERASURE_FAILED, scope_id=key.opaque_id, step="disable")
        return await self._store.withdraw(key)


async def test_a_withdraw_that_changed_nothing_keeps_its_confirmation(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "fact")
    flaky = _Outage(store)
    controls = MemoryControls(flaky, agents=AGENTS, secret=b"c" * 32)  # type: ignore[arg-type]

    async def run(text):
        return await controls.handle(text, sender=ALICE, subject=ALICE, room_id=ROOM,
                                     room_check=lambda: OK)

    ask = await run("!memory off my-agent")
    failed = await run(f"!memory off my-agent {ask.token}")
    assert failed == Notice(reason=ReasonCode.ERASURE_FAILED)  # an honest, content-free reply
    flaky.down = False
    done = await run(f"!memory off my-agent {ask.token}")  # the same confirmation still works
    assert isinstance(done, ErasureReply) and done.receipt.verified
    assert physical_rows(database, key) == 0
    again = await run(f"!memory off my-agent {ask.token}")  # ... once
    assert again == Notice(reason=ReasonCode.CONFIRMATION_INVALID)


async def test_the_room_check_is_told_the_commands_agent(store):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    seen: list[AgentIdentity] = []

    async def check(agent: AgentIdentity):
        seen.append(agent)
        return OK

    controls = MemoryControls(store, agents=AGENTS, secret=b"c" * 32)
    await controls.handle("!memory inspect other", sender=ALICE, subject=ALICE, room_id=ROOM,
                          room_check=check)
    assert seen == [AGENTS["other"], AGENTS["other"]]  # at admission and before the content


async def test_a_typo_in_span_content_is_refused(store):
    with pytest.raises(InvalidInput):
        GovernedMemoryService(store, agent=AGENTS["my-agent"], embedder=HashingEmbedder(),
                              span_content="refuze")  # type: ignore[arg-type]


async def test_span_content_capture_fails_closed_by_default(store, monkeypatch):
    from kagent_governed_memory import GovernanceError

    monkeypatch.setenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "true")
    with pytest.raises(GovernanceError) as err:
        GovernedMemoryService(store, agent=AGENTS["my-agent"], embedder=HashingEmbedder())
    assert err.value.reason is ReasonCode.SPAN_CONTENT_CAPTURE
    assert "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false" in str(err.value)
    monkeypatch.setenv("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "false")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    with pytest.raises(GovernanceError):
        GovernedMemoryService(store, agent=AGENTS["my-agent"], embedder=HashingEmbedder())
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    GovernedMemoryService(store, agent=AGENTS["my-agent"], embedder=HashingEmbedder())


class _RaisingEmbedder(HashingEmbedder):
    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    async def embed(self, texts):
        raise RuntimeError(f'tokenizer failed on input ["{self.marker} {texts}"]')


async def test_an_embedder_raising_anything_never_reaches_the_chat(store, database, caplog):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    marker = "SENTINEL-" + secrets.token_hex(8)
    h = build(store, plan=save_plan, embedder=_RaisingEmbedder(marker),
              summaries=['["likes tea"]'])
    caplog.set_level(logging.DEBUG)
    out = await h.turn(f"recall: {marker}", key=key)
    assert any('"embedding_failed"' in t for t in out), out  # the chat answered, with a reason
    out = await h.turn(f"remember: {marker} likes tea", key=key)
    assert any("embedding_failed" in t for t in out), out
    for i in range(5):  # a background auto-save whose embedder raises
        await h.turn(f"turn {i}", key=key)
    await h.service.drain()
    assert physical_rows(database, key) == 0
    assert marker not in caplog.text


def test_asyncio_never_retrieved_reports_are_content_free():
    marker = "SENTINEL-" + secrets.token_hex(8)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    root = logging.getLogger()
    root.addHandler(handler)
    sanitizer = install_content_free_logging()
    try:
        try:
            raise RuntimeError(f"tokenizer failed on input [{marker}]")
        except RuntimeError as exc:
            logging.getLogger("asyncio").error("Task exception was never retrieved\nfuture: %r",
                                               marker, exc_info=exc)
    finally:
        sanitizer.remove()
        root.removeHandler(handler)
    assert records and not any(marker in r for r in records)


async def test_a_run_config_that_captures_content_means_no_memory(store, database):
    """google-adk 2.x: RunConfig.telemetry can switch capture on for one request."""
    telemetry = pytest.importorskip("google.adk.telemetry.context",
                                    reason="NOT RUN: this google-adk has no RunConfig.telemetry")
    from google.adk.agents.run_config import RunConfig

    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    h = build(store, plan=save_plan)
    await h.turn("hello", key=key)
    before = h.embedder.calls
    config = RunConfig(telemetry=telemetry.TelemetryConfig(
        capture_message_content=telemetry.ContentCapturingMode.SPAN_AND_EVENT))
    out = await h.turn("recall: tea", key=key, run_config=config)
    assert any('"span_content_capture"' in t for t in out), out
    assert h.embedder.calls == before
    out = await h.turn("recall: tea", key=key)  # the next request, without the override
    assert not any("span_content_capture" in t for t in out), out


class _StalledRedemption:
    """The store as seen through a controller that fails every redemption (a read timeout
    after a long wait, say), counting the attempts."""

    def __init__(self, store) -> None:
        self._store, self.redeemed = store, 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def redeem(self, assertion):
        self.redeemed += 1
        raise StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation="generation")

    async def redeem_admit(self, assertion, *, units, explicit=False):
        """A first turn redeems and admits its prefetch in one call (000014): it fails too."""
        await self.redeem(assertion)


async def test_a_failed_redemption_is_final_for_its_request(store, database):
    """One redemption per request, whatever the controller answers: the first turn of a
    session prefetches, recalls, saves and runs the auto-save callback, and a failed
    redemption used to be tried again by each (four waits for one slow controller)."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    stalled = _StalledRedemption(store)
    h = build(stalled, plan=save_plan)
    out = await h.turn("remember: likes tea. And what else do I like, can you recall that?",
                       key=key)
    assert any('"store_unavailable"' in t for t in out), out
    await h.service.drain()
    assert stalled.redeemed == 1
    assert physical_rows(database, key) == 0
    await h.turn("remember: likes tea", key=key)  # a new request redeems its own assertion
    assert stalled.redeemed == 2


class _SlowFailingRedemption(_StalledRedemption):
    """Fails each redemption only after every other operation of the request has queued."""

    async def redeem(self, assertion):
        self.redeemed += 1
        for _ in range(5):
            await asyncio.sleep(0)  # let the concurrent operations reach the binding's lock
        raise StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation="generation")


async def test_a_failed_redemption_is_final_for_operations_already_queued(store, database):
    """Operations of one request that wait on the binding's lock while the first redemption
    fails (load_memory and save_memory in one model response, say) do not redeem again."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    slow = _SlowFailingRedemption(store)
    h = build(slow, plan=save_plan)
    with memory_request(sign(key), public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                        context_id=context_id()) as binding:
        assert binding.assertion is not None
        reasons = await asyncio.gather(*(h.service.resolve(Operation.RETRIEVE) for _ in range(3)))
    assert reasons == [ReasonCode.STORE_UNAVAILABLE] * 3
    assert slow.redeemed == 1
