"""Issue 29: a request's first call redeems and admits in one round trip (migration 000014,
``memory_redeem_admit``), for the runtime roles only (and the deprecated service union), with the same refusals as the two
separate entry points and the admission always under the generation the redemption captured.

A hostile SQL client holding the runtime login: another scope's request, a made-up jti, a
replayed one, another classification — each refused with the reason code the separate
``memory_redeem_assertion`` gives, and nothing admitted.  A refused or failed admission
leaves the redemption in place (the request keeps its captured generation), as a separate
``/admit`` after ``/generation`` did.
"""

from __future__ import annotations

import psycopg
import pytest
from support.scopes import make_key
from support.settings import LOCAL
from test_expiry import _key_args, _vector_literal
from test_roles_and_policies import (
    AUDIENCE,
    PURPOSE,
    VERSION,
    _redeem_sql,
    assertion_for,
    connect,
    dsn_as,
    executable,
    operator_store,
)

from kagent_governed_memory import GovernedMemoryStore
from kagent_governed_memory.dev import BRIDGE_ROLE, RUNTIME_ROLE

_CALL = ("SELECT generation, refused, admit_state FROM memory_redeem_admit(%s, %s, %s, %s, %s,"
         " %s, %s, %s, %s, %s, " + AUDIENCE + ", %s, %s)")
_SEARCH = ("SELECT count(*) FROM memory_search_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
           " %s::vector, 5)")


def _redeem_admit(conn, a, *, key=None, units: int = 2, explicit: bool = False,
                  classification: str | None = None):
    key = key or a.key
    return conn.execute(_CALL, [a.jti, a.expires_at, *_key_args(key), VERSION,
                                classification or a.classification, units,
                                explicit]).fetchone()


def _sqlstate(fn) -> str:
    with pytest.raises(psycopg.Error) as err:
        fn()
    return err.value.sqlstate or ""


def _tokens(database) -> list:
    return database.scalar("SELECT coalesce(array_agg(tokens ORDER BY bucket), '{}')"
                           " FROM memory_admission_bucket")


async def _recorded(database, *keys, runtime_for=None):
    """Register the runtime login for ``runtime_for`` (default: the first key's agent) and have
    the bridge record one request per key."""
    async with await operator_store(database) as op:
        await op.register_runtime_login(RUNTIME_ROLE, (runtime_for or keys[0]).agent)
    out = [assertion_for(k) for k in keys]
    async with await GovernedMemoryStore.open(dsn_as(database, BRIDGE_ROLE), local_server=LOCAL,
                                              sweep_every=None) as bridge:
        for a in out:
            await bridge.record_request(a)
    return out


async def test_only_the_runtime_roles_may_redeem_and_admit(store, database):
    # the runtime role and, as for every runtime entry point (000012), the deprecated service
    # union: a controller serving as a service login calls it on /generation with "admit"
    for role in ("kagent_memory_runtime", RUNTIME_ROLE, "kagent_memory_service"):
        assert "memory_redeem_admit" in executable(database, role)
    for role in ("kagent_memory_bridge", "kagent_memory_operator", BRIDGE_ROLE):
        assert "memory_redeem_admit" not in executable(database, role)


async def test_one_call_redeems_and_admits_under_the_captured_generation(store, database):
    alice = make_key()
    await store.grant(alice, purpose=PURPOSE)
    g = await store.generation(alice)
    (a,) = await _recorded(database, alice)
    with connect(database, RUNTIME_ROLE) as conn:
        assert _redeem_admit(conn, a, units=4) == (g, 0, None)
        # 4 units of the scope's 60 consumed, in the same call
        assert _tokens(database) == [pytest.approx(56, abs=0.1)]
        # the request's later calls are bound to that redemption
        assert conn.execute(_SEARCH, [a.jti, *_key_args(alice), g, VERSION,
                                      _vector_literal("x")]).fetchone()[0] == 0
        # a replay is refused as the separate redemption refuses it (the record is spent)
        assert _sqlstate(lambda: _redeem_admit(conn, a)) == "KGJ04"
        assert _sqlstate(lambda: _redeem_sql(conn, a)) == "KGJ04"
    assert _tokens(database) == [pytest.approx(56, abs=0.1)]


async def test_a_hostile_runtime_gets_the_separate_calls_reason_codes(store, database):
    """Another user's recorded request presented for this scope, another agent's, a made-up
    jti, another classification, a malformed admission: refused as before, nothing admitted
    and nothing redeemed (the honest request still redeems once afterwards)."""
    alice = make_key()
    bob = make_key("@bob:example.org", room="!control-b:example.org")
    other = make_key(agent="other-agent", room="!control-c:example.org")
    for k in (alice, bob, other):
        await store.grant(k, purpose=PURPOSE)
    a, b, o = await _recorded(database, alice, bob, other)
    made_up = assertion_for(alice)
    with connect(database, RUNTIME_ROLE) as conn:
        assert _sqlstate(lambda: _redeem_admit(conn, b, key=alice)) == "KGJ04"
        assert _sqlstate(lambda: _redeem_admit(conn, o)) == "KGJ04"
        assert _sqlstate(lambda: _redeem_admit(conn, made_up)) == "KGJ04"
        assert _sqlstate(lambda: _redeem_admit(conn, a, classification="work")) == "KGJ04"
        assert _sqlstate(lambda: _redeem_admit(conn, a, units=0)) == "22023"
        assert _sqlstate(lambda: _redeem_admit(conn, a, units=1001)) == "22023"
        assert _tokens(database) == []
        assert database.scalar("SELECT count(*) FROM memory_assertion_use") == 0
        g = await store.generation(alice)
        assert _redeem_admit(conn, a) == (g, 0, None)


async def test_no_consent_redeems_and_admits_nothing(store, database):
    alice = make_key()  # no grant
    (a,) = await _recorded(database, alice)
    with connect(database, RUNTIME_ROLE) as conn:
        assert _redeem_admit(conn, a) == (None, None, None)
    assert _tokens(database) == []
    assert database.scalar("SELECT count(*) FROM memory_assertion_use"
                           " WHERE generation IS NULL") == 1  # redeemed: a replay is refused


async def test_a_refused_admission_keeps_the_redemption(store, database):
    """Over the scope's budget (1) and over the sender's rate (2): nothing consumed, and the
    request keeps its captured generation for its later calls, as after /generation + /admit."""
    alice = make_key()
    await store.grant(alice, purpose=PURPOSE)
    g = await store.generation(alice)
    first, second, third, fourth, fifth = await _recorded(database, *[alice] * 5)
    with connect(database, RUNTIME_ROLE) as conn:
        assert _redeem_admit(conn, first, units=1000) == (g, 1, None)
        assert _tokens(database) == [pytest.approx(60, abs=0.1)]
        assert conn.execute(_SEARCH, [first.jti, *_key_args(alice), g, VERSION,
                                      _vector_literal("x")]).fetchone()[0] == 0
        for a in (second, third, fourth):  # the sender's burst of 3 explicit operations
            assert _redeem_admit(conn, a, units=1, explicit=True) == (g, 0, None)
        assert _redeem_admit(conn, fifth, units=1, explicit=True) == (g, 2, None)
        assert _sqlstate(lambda: _redeem_admit(conn, fifth)) == "KGJ04"  # it was redeemed


async def test_an_admission_that_raises_keeps_the_redemption(store, database):
    """The admission's own errors (here: its function replaced by the owner to raise the
    fence's KGS01) are answered as admit_state; the redemption commits all the same."""
    alice = make_key()
    await store.grant(alice, purpose=PURPOSE)
    g = await store.generation(alice)
    (a,) = await _recorded(database, alice)
    with psycopg.connect(database.owner_dsn, autocommit=True) as owner:
        owner.execute(  # the issuer-generic signature (000016), which memory_redeem_admit calls
            "CREATE OR REPLACE FUNCTION memory_admit_bound(p_jti TEXT, p_issuer_kind TEXT,"
            " p_issuer TEXT, p_subject TEXT, p_namespace TEXT, p_agent TEXT, p_kind TEXT,"
            " p_scope_ref TEXT, p_generation BIGINT, p_policy_version TEXT, p_units INTEGER,"
            " p_explicit BOOLEAN, p_now TIMESTAMPTZ) RETURNS INTEGER"
            " LANGUAGE plpgsql AS $$ BEGIN"
            " RAISE EXCEPTION 'stale_generation' USING ERRCODE = 'KGS01'; END $$")
    with connect(database, RUNTIME_ROLE) as conn:
        assert _redeem_admit(conn, a) == (g, None, "KGS01")
        assert conn.execute(_SEARCH, [a.jti, *_key_args(alice), g, VERSION,
                                      _vector_literal("x")]).fetchone()[0] == 0
    assert _tokens(database) == []


async def test_the_direct_store_redeems_and_admits_in_one_round_trip(store, database):
    """``GovernedMemoryStore.redeem_admit`` on a runtime login: one statement; on the
    deprecated service login (which may not call memory_redeem_admit): the two calls, with the
    same answers."""
    from kagent_governed_memory import ReasonCode
    from kagent_governed_memory.scope import memory_request

    alice = make_key()
    await store.grant(alice, purpose=PURPOSE)
    g = await store.generation(alice)
    a, b = await _recorded(database, alice, alice)
    async with await GovernedMemoryStore.open(dsn_as(database, RUNTIME_ROLE), local_server=LOCAL,
                                              sweep_every=None) as runtime:
        statements: list[str] = []
        real = runtime._all

        async def counted(op, name, params):
            statements.append(name)
            return await real(op, name, params)

        runtime._all = counted  # type: ignore[method-assign]
        with memory_request(a):
            assert await runtime.redeem_admit(a, units=4) == (g, None)
        assert statements == ["RedeemAndAdmitMemoryWorkByIssuer"]
        with memory_request(b):
            assert await runtime.redeem_admit(b, units=1000) == (g, ReasonCode.BUDGET_EXHAUSTED)
    service_a = assertion_for(alice)
    assert await store.redeem_admit(service_a, units=2) == (g, None)
    assert await store.redeem_admit(assertion_for(make_key("@carol:example.org")), units=2) \
        == (None, None)
