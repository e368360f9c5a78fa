"""Inject, don't persist: recalled memory reaches the model through the current invocation's
LLM requests only.  google-adk's persistent ``SqliteSessionService`` holds the chat session, and
after a recall turn, a forget and a withdrawal no session table holds the recalled text."""

from __future__ import annotations

import json
import secrets
import sqlite3

from support.adk import build, save_plan
from support.scopes import make_key, vec
from google.adk.sessions.sqlite_session_service import SqliteSessionService

PURPOSE = "personal_preferences"


def session_dump(path) -> str:
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables, "the session store wrote nothing: the test could not fail"
        return "\n".join(repr(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"'))


def last_tool_result(out: list[str]) -> dict:
    said = [t for t in out if t.startswith("tool said ")][-1]
    return json.loads(said.removeprefix("tool said "))


async def test_recalled_text_reaches_the_model_but_no_session_table(store, tmp_path):
    db = tmp_path / "sessions.db"
    h = build(store, plan=save_plan, session_service=SqliteSessionService(str(db)))
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    mark = "SENTINEL-" + secrets.token_hex(8)
    fact = f"{mark} prefers green tea"
    [entry] = await store.save(key, g, facts=[fact], embeddings=[vec(fact)])

    await h.turn("hello", key=key)  # the session's first turn (prefetch) is behind us
    seen_before = len(h.model.requests)
    out = await h.turn("recall: green tea", key=key)
    assert last_tool_result(out) == {"status": "ok", "count": 1, "ids": [entry],
                                     "note": "the recalled facts are in your instructions "
                                             "for this turn"}
    # within the turn, the model's follow-up request carried the recalled text ...
    during = h.model.requests[seen_before:]
    assert any(mark in str(r.config.system_instruction) for r in during[1:])
    assert h.service.recalled.get("any") == [] and len(h.service.recalled) == 0  # turn over
    # ... the next turn's requests do not, and neither does any persisted event
    await h.turn("what else?", key=key)
    assert all(mark not in str(r.config.system_instruction) and mark not in str(r.contents)
               for r in h.model.requests[len(h.model.requests) - 1:])
    assert mark not in session_dump(db)

    await store.forget(key, entry)
    assert mark not in session_dump(db)
    await store.withdraw(key)
    assert mark not in session_dump(db)


async def test_an_unavailable_recall_says_why(store, tmp_path):
    h = build(store, plan=save_plan)
    key = make_key()
    await h.turn("hello", key=key)
    out = await h.turn("recall: anything", key=key)
    assert last_tool_result(out) == {"status": "unavailable", "reason": "consent_required",
                                     "message": "no memory: consent_required"}
