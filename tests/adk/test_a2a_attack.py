"""Attacks on ``governed_a2a_app`` (issue 26): concurrent requests keep their own binding, a
token smuggled in the A2A message metadata binds nothing, the token never reaches the answer
(the task store's task) or the session."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from support.adk import AGENT
from support.scopes import make_key
from test_a2a import a2a, bridge_sign, send  # noqa: F401  (a2a: the fixture)

from kagent_governed_memory.scope import ASSERTION_HEADER


async def test_concurrent_requests_keep_their_own_binding(a2a):  # noqa: F811
    """Six users' requests served at once: each one's fact lands in its own scope only (the
    binding is a context variable of the request's own task)."""
    keys = [make_key(f"@user{i}:example.org") for i in range(6)]
    for key in keys:
        await a2a.store.grant(key, purpose="personal_preferences")
    contexts = [f"ctx-{uuid.uuid4().hex}" for _ in keys]
    tokens = [bridge_sign(k, c) for k, c in zip(keys, contexts, strict=True)]
    results = await asyncio.gather(*(
        send(a2a.client, a2a.url, f"remember: fact number {i}", context_id=c, token=t)
        for i, (c, t) in enumerate(zip(contexts, tokens, strict=True))))
    for i, (key, (state, texts)) in enumerate(zip(keys, results, strict=True)):
        assert state == "completed" and any('"status": "saved"' in t for t in texts), texts
        assert [r.text for r in (await a2a.store.inspect(key)).entries] == [f"fact number {i}"]
        assert not any(tok in " ".join(texts) for tok in tokens)
    for key, ctx in zip(keys, contexts, strict=True):
        session = await a2a.sessions.get_session(app_name=AGENT.app_name,
                                                 user_id=f"A2A_USER_{ctx}", session_id=ctx)
        dumped = json.dumps(session.model_dump(mode="json"))
        assert not any(tok in dumped for tok in tokens) and ASSERTION_HEADER not in dumped


@pytest.mark.parametrize("where", ["message", "params"])
async def test_a_token_in_the_message_metadata_binds_nothing(a2a, where):  # noqa: F811
    key = make_key()
    await a2a.store.grant(key, purpose="personal_preferences")
    ctx = f"ctx-{uuid.uuid4().hex}"
    token = bridge_sign(key, ctx)
    message = {"kind": "message", "role": "user", "messageId": uuid.uuid4().hex,
               "contextId": ctx, "parts": [{"kind": "text", "text": "remember: smuggled"}]}
    params: dict = {"message": message}
    (message if where == "message" else params)["metadata"] = {ASSERTION_HEADER: token,
                                                              "headers": {ASSERTION_HEADER: token}}
    body = {"jsonrpc": "2.0", "id": "1", "method": "message/send", "params": params}
    answer = await a2a.client.post(a2a.url + "/", json=body, timeout=120)
    texts = json.dumps(answer.json())
    assert "assertion_missing" in texts, texts[-500:]
    assert (await a2a.store.inspect(key)).entries == ()


def test_the_header_given_twice_in_different_case_binds_nothing():
    """Two spellings of the header in one request's headers (a raw mapping, or a proxy that
    added its own next to the client's): which one is the bridge's is unknowable, so neither
    binds; both are removed."""
    from types import SimpleNamespace
    from typing import Any

    from kagent_governed_memory.adk.a2a import _take_assertion

    state = {"headers": {"X-Kagent-Memory-Scope": "from-client", "x-kagent-memory-scope": "b",
                         "x-user-id": "u"}}
    context: Any = SimpleNamespace(call_context=SimpleNamespace(state=state))
    assert _take_assertion(context) is None
    assert state["headers"] == {"x-user-id": "u"}


async def test_the_header_sent_twice_over_http_binds_nothing(a2a):  # noqa: F811
    """Over HTTP the server lower-cases header names and the A2A server keeps the first of two
    values: a client's header in front of the one a proxy appends would choose the token.
    Sent twice, the header binds nothing, whichever one is valid."""
    key = make_key()
    await a2a.store.grant(key, purpose="personal_preferences")
    ctx = f"ctx-{uuid.uuid4().hex}"
    body = {"jsonrpc": "2.0", "id": "1", "method": "message/send",
            "params": {"message": {"kind": "message", "role": "user",
                                   "messageId": uuid.uuid4().hex, "contextId": ctx,
                                   "parts": [{"kind": "text", "text": "remember: twice"}]}}}
    headers = [(ASSERTION_HEADER, bridge_sign(key, ctx)), (ASSERTION_HEADER.upper(), "forged")]
    answer = await a2a.client.post(a2a.url + "/", json=body, headers=headers, timeout=120)
    texts = json.dumps(answer.json())
    assert "assertion_missing" in texts, texts[-500:]
    assert (await a2a.store.inspect(key)).entries == ()
