"""Auto-save eligibility without clocks, through a real Runner: a turn is summarised only if it
started and is saved under the same valid generation.  The scripted model runs a control-room
action *while the agent answers* (consent granted, withdrawn and re-granted, forget all), and no
text from before that action reaches the summariser or the store."""

from __future__ import annotations

import asyncio
import secrets

from support.adk import build
from support.db import physical_rows
from support.scopes import make_key

from kagent_governed_memory import ReasonCode

PURPOSE = "personal_preferences"


def sentinel() -> str:
    return "SENTINEL-" + secrets.token_hex(8)


async def _five_more(h, key, start: int = 0) -> None:
    for i in range(start, start + 5):
        await h.turn(f"neutral turn {i}", key=key)
    await h.service.drain()


def _summarised(h) -> str:
    return "\n".join(h.summariser_prompts)


async def _fifth_turn_racing(store, key, action):
    """Consent, four turns, then a fifth whose text carries a sentinel while ``action`` runs
    in the control room as the agent answers it.  Returns the harness and the sentinel."""
    await store.grant(key, purpose=PURPOSE)
    secret_text = sentinel()
    h = build(store, summaries=['["likes tea"]'] * 3)
    for i in range(4):
        await h.turn(f"early turn {i}", key=key)

    async def control_room(text: str) -> None:
        if secret_text in text:
            await action()

    h.model.on_chat = control_room
    await h.turn(f"remember {secret_text}", key=key)  # the fifth turn of generation 1
    await h.service.drain()
    h.model.on_chat = None
    return h, secret_text


async def test_a_message_sent_before_consent_is_never_auto_saved(store, database):
    """'my bank PIN is …' with memory off; the control room grants consent while the agent
    answers; five turns later the auto-save summarises only turns that started with consent."""
    key = make_key()
    pin = sentinel()
    h = build(store, summaries=['["likes tea"]'] * 3)

    async def grant_now(text: str) -> None:
        if pin in text:
            await store.grant(key, purpose=PURPOSE)

    h.model.on_chat = grant_now
    await h.turn("hello", key=key)  # not the session's first turn: no prefetch captures early
    await h.turn(f"my bank PIN is {pin}", key=key)
    assert await store.generation(key) == 1  # consent arrived mid-turn
    await _five_more(h, key)
    assert len(h.summariser_prompts) == 1  # five eligible turns: one auto-save
    assert pin not in _summarised(h)
    assert "neutral turn 0" in _summarised(h) and "neutral turn 4" in _summarised(h)
    assert database.scalar("SELECT count(*) FROM memory_entry WHERE content LIKE %s",
                           [f"%{pin}%"]) == 0


async def test_a_turn_across_withdraw_and_regrant_is_never_auto_saved(store, database):
    key = make_key()

    async def withdraw_and_regrant() -> None:
        await store.withdraw(key)
        await store.grant(key, purpose=PURPOSE)

    h, secret_text = await _fifth_turn_racing(store, key, withdraw_and_regrant)
    assert await store.generation(key) == 3
    # The fifth turn started under generation 1: its save is fenced out (stale), and the
    # turns of generation 1 never count toward generation 3.
    assert physical_rows(database, key) == 0
    before = len(h.summariser_prompts)
    await _five_more(h, key)
    new_prompts = "\n".join(h.summariser_prompts[before:])
    assert secret_text not in new_prompts and "early turn" not in new_prompts
    assert database.scalar("SELECT count(*) FROM memory_entry WHERE content LIKE %s",
                           [f"%{secret_text}%"]) == 0


async def test_a_turn_across_forget_all_is_never_auto_saved(store, database):
    key = make_key()
    h, secret_text = await _fifth_turn_racing(store, key, lambda: store.forget_all(key))
    assert physical_rows(database, key) == 0  # stored under generation 1: fenced out
    # ... and refused before the summariser model: admission checks the fence
    assert h.summariser_prompts == []
    before = len(h.summariser_prompts)
    await _five_more(h, key)
    assert secret_text not in "\n".join(h.summariser_prompts[before:])
    assert database.scalar("SELECT count(*) FROM memory_entry WHERE content LIKE %s",
                           [f"%{secret_text}%"]) == 0
    assert physical_rows(database, key) == 1  # the later, eligible turns were saved


async def test_no_embedding_after_a_withdrawal_commits(store, database):
    """The auto-save is admitted again, inside the fence, right before embedding: a
    withdrawal that commits while the summariser runs stops it before the embedder."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    h = build(store, summaries=['["likes tea"]'])
    h.model.gate = asyncio.Event()
    for i in range(5):
        await h.turn(f"turn {i}", key=key)
    while not h.summariser_prompts:  # the background auto-save is inside the summariser
        await asyncio.sleep(0.01)
    embedded = h.embedder.calls
    await store.withdraw(key)
    h.model.gate.set()
    await h.service.drain()
    assert h.embedder.calls == embedded
    assert physical_rows(database, key) == 0
    assert any(attrs.get("kgm.memory.operation") == "save"
               and attrs.get("kgm.memory.outcome") == ReasonCode.STALE_GENERATION.value
               for _, attrs, _ in h.metrics())


async def test_generic_adk_hooks_do_not_bypass_the_five_turn_rule(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    h = build(store, summaries=['["likes tea"]'] * 5)
    await h.turn("one turn", key=key)
    session = await h.runner.session_service.get_session(
        app_name=h.service.agent.app_name, user_id="attribution-only",
        session_id=h.sessions["s1"])
    assert session is not None
    for _ in range(3):
        await h.service.add_session_to_memory(session)
        await h.service.add_events_to_memory(app_name="a", user_id="u", events=session.events)
    await h.service.drain()
    assert h.summariser_prompts == [] and physical_rows(database, key) == 0
    outcomes = [attrs.get("kgm.memory.outcome") for _, attrs, _ in h.metrics()]
    assert ReasonCode.AUTOSAVE_CALLBACK_ONLY.value in outcomes
