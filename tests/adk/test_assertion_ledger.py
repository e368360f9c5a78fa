"""Single use (T1): each assertion's ``jti`` is redeemed once, in the database, on any replica.

A captured token replayed to a second request, to a second service instance (another replica
on the same database) or raced from two connections gets no memory; the ledger is invisible
to the application role; the sweep forgets redeemed ``jti``s once they cannot verify.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from support.adk import BRIDGE_KEY, ISSUER, PUBLIC_KEYS, build, context_id, save_plan, sign
from support.db import open_store, save
from support.scopes import make_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kagent_governed_memory import (
    AgentIdentity,
    ReasonCode,
    ScopeDenied,
    memory_request,
)
from kagent_governed_memory.scope import verify_scope_assertion
from kagent_governed_memory.adk import GovernedMemoryService

PURPOSE = "personal_preferences"
AGENT = AgentIdentity(namespace="kagent", name="my-agent")


def verified(token: str, session: str = "s1"):
    return verify_scope_assertion(token, public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                                  context_id=context_id(session))


async def test_t1_a_token_is_redeemed_once(store):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    a = verified(sign(key))
    assert await store.redeem(a) == 1
    with pytest.raises(ScopeDenied) as info:
        await store.redeem(a)
    assert info.value.reason == ReasonCode.ASSERTION_REPLAYED
    assert await store.redeem(verified(sign(key))) == 1  # a new token: fine


async def test_t1_without_consent_the_jti_is_still_consumed(store):
    a = verified(sign(make_key()))
    assert await store.redeem(a) is None
    with pytest.raises(ScopeDenied) as info:
        await store.redeem(a)
    assert info.value.reason == ReasonCode.ASSERTION_REPLAYED


async def test_t1_replay_on_a_second_replica_is_refused(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    a = verified(sign(key))
    replica = await open_store(database)
    try:
        assert await replica.redeem(a) == 1
        with pytest.raises(ScopeDenied) as info:
            await store.redeem(a)
        assert info.value.reason == ReasonCode.ASSERTION_REPLAYED
    finally:
        await replica.close()


async def test_t1_two_replicas_racing_one_token_admit_it_once(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    replicas = [await open_store(database) for _ in range(4)]
    try:
        for _ in range(5):
            a = verified(sign(key))
            results = await asyncio.gather(*(r.redeem(a) for r in replicas),
                                           return_exceptions=True)
            assert results.count(1) == 1, results
            assert all(isinstance(r, ScopeDenied) and r.reason == ReasonCode.ASSERTION_REPLAYED
                       for r in results if r != 1)
    finally:
        for r in replicas:
            await r.close()


async def test_t1_the_database_clock_refuses_an_expired_or_far_future_exp(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    a = verified(sign(key))
    # a verifier refuses these; the database must too, on its own clock (a buggy caller)
    for exp in (datetime.now(UTC) - timedelta(seconds=45), datetime.now(UTC) + timedelta(hours=1)):
        forged = a.model_copy(update={"expires_at": exp})
        with pytest.raises(ScopeDenied) as info:
            await store.redeem(forged)
        assert info.value.reason == ReasonCode.ASSERTION_EXPIRED
    assert database.scalar("SELECT count(*) FROM memory_assertion_use") == 0


async def test_t1_the_application_role_cannot_read_or_clear_the_ledger(store, database):
    await store.redeem(verified(sign(make_key())))
    async with await psycopg.AsyncConnection.connect(database.dsn, autocommit=True) as conn:
        for sql in ("SELECT jti FROM memory_assertion_use",
                    "DELETE FROM memory_assertion_use",
                    "TRUNCATE memory_assertion_use",
                    "UPDATE memory_assertion_use SET forget_at = now() - interval '1 day'",
                    "INSERT INTO memory_assertion_use VALUES ('aaaaaaaaaaaaaaaaaaaa', now())"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(sql)
    assert database.scalar("SELECT count(*) FROM memory_assertion_use") == 1


async def test_t1_the_sweep_forgets_a_jti_only_after_it_can_no_longer_verify(store, database):
    a = verified(sign(make_key()))
    await store.redeem(a)
    await store.sweep()
    assert database.scalar("SELECT count(*) FROM memory_assertion_use") == 1
    forget_at = database.scalar("SELECT forget_at FROM memory_assertion_use")
    assert forget_at - a.expires_at == timedelta(seconds=120)  # work_until (000011)
    with database.admin() as conn:  # a minute past exp, as far as the row is concerned
        conn.execute("UPDATE memory_assertion_use SET forget_at = now() - interval '1 second'")
    await store.sweep()
    assert database.scalar("SELECT count(*) FROM memory_assertion_use") == 0


async def test_t1_the_same_token_on_a_second_request_gets_no_memory(store, database):
    """Through the real Runner: the first request remembers, the replay of its token does not."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "prefers green tea")
    h = build(store, plan=save_plan)
    token = sign(key)
    first = await h.turn("recall: tea", key=None, token=token)
    assert any('"count": 1' in t for t in first), first
    before = h.embedder.calls
    replay = await h.turn("recall: tea", key=None, token=token)
    assert any('"assertion_replayed"' in t for t in replay), replay
    assert h.embedder.calls == before
    # and on a second service instance (another replica of the same agent)
    other = build(store, plan=save_plan)
    again = await other.turn("recall: tea", key=None, token=token)
    assert any('"assertion_replayed"' in t for t in again), again


async def test_t1_the_runtime_holds_no_private_key(store):
    """Whatever the runtime side is given -- the service, the request binding -- no object in
    it is a private key, and a private key offered as a verification key is refused."""
    h = build(store)
    token = sign(make_key())
    with memory_request(token, public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                        context_id=context_id()) as binding:
        assert binding.assertion is not None

    def walk(obj, seen, depth=0):
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        assert not isinstance(obj, Ed25519PrivateKey), type(obj)
        children = []
        if isinstance(obj, dict):
            children = [*obj.keys(), *obj.values()]
        elif isinstance(obj, list | tuple | set | frozenset):
            children = list(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("kagent_governed"):
            children = list(vars(obj).values())
        for child in children:
            walk(child, seen, depth + 1)

    for root in (h.service, binding, PUBLIC_KEYS):
        walk(root, set())
    with memory_request(token, public_keys={"k": BRIDGE_KEY},  # type: ignore[dict-item]
                        issuer=ISSUER, agent=AGENT, context_id=context_id()) as refused:
        assert refused.assertion is None and refused.reason == ReasonCode.INVALID_ARGUMENT
    assert isinstance(h.service, GovernedMemoryService)
    json.dumps(list(PUBLIC_KEYS))  # kids are plain strings


async def test_t1_each_redemption_forgets_a_few_spent_jtis(store, database):
    """The ledger stays about a minute and a half of requests long without a sweep."""
    spent = [verified(sign(make_key(f"@u{i}:example.org"))) for i in range(20)]
    for a in spent:
        await store.redeem(a)
    with database.admin() as conn:
        conn.execute("UPDATE memory_assertion_use SET forget_at = now() - interval '1 second'")
    await store.redeem(verified(sign(make_key())))
    assert database.scalar("SELECT count(*) FROM memory_assertion_use") == 20 - 16 + 1
    assert database.scalar("SELECT count(*) FROM memory_assertion_use"
                           " WHERE forget_at > now()") == 1
