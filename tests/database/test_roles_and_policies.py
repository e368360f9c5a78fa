"""The database owns the policy, the request and the role (migration 000012): attacks by a
hostile SQL client holding each application login — runtime, bridge, the deprecated service
login — on every argument an entry point takes, and the library's own refusals.
"""

from __future__ import annotations

import secrets
import unicodedata
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from support.db import migrated, open_store, register_policy, save
from support.scopes import make_key, vec
from support.settings import LOCAL
from psycopg.conninfo import make_conninfo
from test_expiry import _key_args, _vector_literal

from kagent_governed_memory import (
    GovernedMemoryStore,
    InvalidInput,
    MemoryPolicy,
    ReasonCode,
    ScopeDenied,
    StoreUnavailable,
)
from kagent_governed_memory.dev import BRIDGE_ROLE, RUNTIME_ROLE
from kagent_governed_memory.scope import ScopeAssertion
from kagent_governed_memory.policy import PROTOTYPE_POLICY
from kagent_governed_memory.scope import memory_request

PURPOSE = "personal_preferences"
VERSION = PROTOTYPE_POLICY.version
AUDIENCE = "ARRAY['example.org']"

# What each role may EXECUTE (and nothing else): pinned, by name (000016's issuer-generic
# signature and version 15's, where a name has both, are pinned by test_issuers).
RUNTIME = {"memory_redeem_assertion", "memory_redeem_admit", "memory_save_bound", "memory_search_bound",
           "memory_search_many_bound", "memory_admit_bound", "memory_forget_bound",
           "memory_get_policy", "memory_get_issuer", "memory_local_server",
           "memory_schema_version"}
BRIDGE = {"memory_grant", "memory_generation", "memory_status", "memory_inspect",
          "memory_forget", "memory_disable", "memory_clear", "memory_verify_erasure",
          "memory_record_failure", "memory_record_request", "memory_get_policy",
          "memory_get_issuer", "memory_local_server", "memory_schema_version"}
OPERATOR = {"memory_configure", "memory_register_policy", "memory_allow_policy",
            "memory_disallow_policy", "memory_register_runtime", "memory_register_verifier",
            "memory_unregister_login", "memory_disable_principal", "memory_clear",
            "memory_verify_erasure", "memory_record_failure", "memory_purge_principal",
            "memory_unblock_principal", "memory_sweep", "memory_store_report",
            "memory_get_policy", "memory_get_issuer", "memory_register_issuer",
            "memory_disable_issuer", "memory_local_server", "memory_schema_version"}
SERVICE = RUNTIME | BRIDGE | {"memory_configure", "memory_sweep", "memory_store_report",
                              "memory_save", "memory_search", "memory_search_many",
                              "memory_admit"}


def dsn_as(database, user: str) -> str:
    return make_conninfo(database.dsn, user=user)


def connect(database, user: str) -> psycopg.Connection:
    return psycopg.connect(dsn_as(database, user), autocommit=True)


def refused(conn: psycopg.Connection, statement: str, params: list | None = None) -> str:
    with pytest.raises(psycopg.Error) as err:
        conn.execute(statement, params or [])
    return err.value.sqlstate or ""


def executable(database, role: str) -> set[str]:
    with database.admin() as conn:
        rows = conn.execute(
            "SELECT DISTINCT p.proname FROM pg_proc p"
            " WHERE p.pronamespace = current_schema()::regnamespace"
            "   AND p.proname LIKE 'memory\\_%%'"
            "   AND has_function_privilege(%s, p.oid, 'EXECUTE')", [role]).fetchall()
    return {r[0] for r in rows}


def assertion_for(key, *, jti: str | None = None, classification: str = "personal",
                  lifetime: int = 60) -> ScopeAssertion:
    now = datetime.now(UTC).replace(microsecond=0)
    return ScopeAssertion(principal=key.principal, agent=key.agent, room_id=key.scope.room_id,
                          audience=[LOCAL], issued_at=now,
                          expires_at=now + timedelta(seconds=lifetime),
                          issuer="https://bridge.example.org", context_id="ctx-1",
                          jti=jti or secrets.token_urlsafe(16), classification=classification)


async def operator_store(database) -> GovernedMemoryStore:
    return await GovernedMemoryStore.open(database.operator_dsn, local_server=LOCAL,
                                          sweep_every=None)


# -- 1. registered policies: no entry point takes a limit -------------------------------------


async def test_a_grant_cannot_choose_its_limits(store, database):
    """The review's break: a 15-argument grant with 10,000 entries, 8 KiB facts, a 365-day TTL
    and 3,650 days of consent.  That entry point is gone; the grant that remains records
    exactly the registered policy's limits."""
    key = make_key()
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        assert refused(conn, "SELECT * FROM memory_grant(%s, %s, %s, %s, %s, %s, %s, %s,"
                             " interval '365 days', 10000, 8192, interval '3650 days', 768,"
                             " 'personal', " + AUDIENCE + ")",
                       [*_key_args(key), PURPOSE, VERSION]) == "42883"
        conn.execute("SELECT * FROM memory_grant(%s, %s, %s, %s, %s, %s, %s, %s, 768,"
                     " 'personal', " + AUDIENCE + ")", [*_key_args(key), PURPOSE, VERSION])
    with database.admin() as conn:
        row = conn.execute("SELECT entry_cap, fact_max_bytes, max_ttl,"
                           " consent_expires_at - consent_granted_at FROM memory_scope").fetchone()
    assert row == (100, 512, timedelta(days=7), timedelta(days=90))


async def test_a_grant_names_a_registered_allowed_policy_and_dimension(store, database):
    key = make_key()
    call = ("SELECT * FROM memory_grant(%s, %s, %s, %s, %s, %s, %s, %s, %s, 'personal', "
            + AUDIENCE + ")")
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        assert refused(conn, call, [*_key_args(key), PURPOSE, "made-up-1", 768]) == "KGP01"
        assert refused(conn, call, [*_key_args(key), PURPOSE, VERSION, 16000]) == "KGP01"
        assert refused(conn, call.replace("'personal'", "NULL"),
                       [*_key_args(key), PURPOSE, VERSION, 768]) == "22023"
    roomy = MemoryPolicy(version="roomy-1", entry_cap=10_000)
    async with await GovernedMemoryStore.open(database.owner_dsn, local_server=LOCAL,
                                              privileged=True, sweep_every=None) as owner:
        assert await owner.register_policy(roomy) == "registered"
        with psycopg.connect(database.dsn, autocommit=True) as conn:  # not allowed yet
            assert refused(conn, call, [*_key_args(key), PURPOSE, "roomy-1", 768]) == "KGP01"
        await owner.allow_policy("roomy-1", namespace="kagent", agent="other-agent")
        with psycopg.connect(database.dsn, autocommit=True) as conn:  # another agent's
            assert refused(conn, call, [*_key_args(key), PURPOSE, "roomy-1", 768]) == "KGP01"
        await owner.allow_policy("roomy-1", namespace="kagent")
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute(call, [*_key_args(key), PURPOSE, "roomy-1", 768])


@pytest.mark.parametrize("login", ["app", RUNTIME_ROLE, BRIDGE_ROLE])
async def test_only_the_operator_registers_a_policy(store, database, login):
    user = {"app": "kgm_app"}.get(login, login)
    args = ("'evil-1', interval '365 days', 10000, 8192, interval '3650 days', 8, 512, 6000,"
            " 1000, 100000, 5, 16384, 10, 50, ARRAY[768]")
    with connect(database, user) as conn:
        assert refused(conn, f"SELECT memory_register_policy({args})") == "42501"
        assert refused(conn, "SELECT memory_allow_policy('adr0023-prototype-1', NULL, NULL)") \
            == "42501"
    with psycopg.connect(database.operator_dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT memory_register_policy({args})").fetchone()[0] \
            == "registered"


async def test_a_policy_a_consent_refers_to_is_immutable(store, database):
    policy = MemoryPolicy(version="frozen-1", entry_cap=5)
    await register_policy(database, policy)
    s = await open_store(database, policy)
    try:
        await s.grant(make_key(), purpose=PURPOSE)
        changed = MemoryPolicy(version="frozen-1", entry_cap=6)
        async with await operator_store(database) as op:
            assert await op.register_policy(policy) == "unchanged"
            with pytest.raises(InvalidInput) as err:
                await op.register_policy(changed)
            assert err.value.reason is ReasonCode.POLICY_IMMUTABLE
        with database.admin() as conn:  # not even the owner's own statements
            with psycopg.connect(database.owner_dsn, autocommit=True) as owner:
                assert refused(owner, "UPDATE memory_policy SET entry_cap = 6") == "KGP02"
                assert refused(owner, "DELETE FROM memory_policy WHERE version = 'frozen-1'") \
                    == "KGP02"
            assert conn.execute("SELECT entry_cap FROM memory_policy"
                                " WHERE version = 'frozen-1'").fetchone()[0] == 5
    finally:
        await s.close()


async def test_admission_reads_the_scopes_policy_not_the_caller(store, database):
    """memory_admit takes no capacity: the 14-argument form that took capacities and refill
    rates is gone, and a caller asking for 1,000 units at once is refused by the policy's
    60 per hour."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    g = await store.generation(key)
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        assert refused(conn, "SELECT memory_admit(%s, %s, %s, %s, %s, %s, %s, %s,"
                             " ARRAY['scope:x'], ARRAY[1.0::float8], ARRAY[1e9::float8],"
                             " ARRAY[1e9::float8], ARRAY[1.0::float8], NULL)",
                       [*_key_args(key), g, VERSION]) == "42883"
        admit = "SELECT memory_admit(%s, %s, %s, %s, %s, %s, %s, %s, %s, false, NULL)"
        assert conn.execute(admit, [*_key_args(key), g, VERSION, 1000]).fetchone()[0] == 1
        assert conn.execute(admit, [*_key_args(key), g, VERSION, 60]).fetchone()[0] == 0
        assert conn.execute(admit, [*_key_args(key), g, VERSION, 1]).fetchone()[0] == 1


async def test_a_store_refuses_a_policy_the_database_does_not_hold(store, database):
    with pytest.raises(InvalidInput) as err:
        await GovernedMemoryStore.open(database.dsn, local_server=LOCAL, sweep_every=None,
                                       policy=MemoryPolicy(version="never-registered"))
    assert err.value.reason is ReasonCode.POLICY_NOT_REGISTERED
    with pytest.raises(InvalidInput) as err:
        await GovernedMemoryStore.open(
            database.dsn, local_server=LOCAL, sweep_every=None,
            policy=MemoryPolicy(version=VERSION, entry_cap=10_000))
    assert err.value.reason is ReasonCode.POLICY_MISMATCH


# -- 2. separate roles for separate callers ---------------------------------------------------


async def test_each_role_executes_exactly_its_entry_points(store, database):
    assert executable(database, "kagent_memory_runtime") == RUNTIME
    assert executable(database, "kagent_memory_bridge") == BRIDGE
    assert executable(database, "kagent_memory_operator") == OPERATOR
    assert executable(database, "kagent_memory_service") == SERVICE
    assert executable(database, RUNTIME_ROLE) == RUNTIME
    assert executable(database, BRIDGE_ROLE) == BRIDGE


@pytest.mark.parametrize("call", [
    "SELECT * FROM memory_grant(%s, %s, %s, %s, %s, %s, 'personal_preferences',"
    " 'adr0023-prototype-1', 768, 'personal', ARRAY['example.org'])",
    "SELECT * FROM memory_inspect(%s, %s, %s, %s, %s, %s, NULL, NULL, 10)",
    "SELECT * FROM memory_status(%s, %s, %s, %s, %s, %s)",
    "SELECT memory_generation(%s, %s, %s, %s, %s, %s, 'adr0023-prototype-1', 'personal',"
    " ARRAY['example.org'])",
    "SELECT * FROM memory_save(%s, %s, %s, %s, %s, %s, 1, 'adr0023-prototype-1',"
    " ARRAY['x'], ARRAY[NULL::vector])",
])
async def test_a_runtime_login_cannot_grant_inspect_or_read_a_generation(store, database, call):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    with connect(database, RUNTIME_ROLE) as conn:
        assert refused(conn, call, _key_args(key)) == "42501"
        assert refused(conn, "SELECT memory_configure('evil.example')") == "42501"
        assert refused(conn, "SELECT memory_sweep()") == "42501"


async def test_a_bridge_login_cannot_redeem_save_or_sweep(store, database):
    key = make_key()
    with connect(database, BRIDGE_ROLE) as conn:
        assert refused(conn, "SELECT memory_redeem_assertion(%s, now() + interval '60 s',"
                             " %s, %s, %s, %s, %s, %s, %s, 'personal', " + AUDIENCE + ")",
                       [secrets.token_urlsafe(16), *_key_args(key), VERSION]) == "42501"
        assert refused(conn, "SELECT memory_sweep()") == "42501"
        assert refused(conn, "SELECT * FROM memory_store_report()") == "42501"


async def test_open_says_which_roles_and_refuses_before_any_round_trip(store, database):
    runtime = await GovernedMemoryStore.open(dsn_as(database, RUNTIME_ROLE), local_server=LOCAL,
                                             sweep_every=None)
    try:
        assert runtime.roles == {"kagent_memory_runtime"}
        calls = 0
        real = runtime._with_conn

        async def counting(op, work):
            nonlocal calls
            calls += 1
            return await real(op, work)

        runtime._with_conn = counting  # type: ignore[method-assign]
        for attempt in (runtime.grant(make_key(), purpose=PURPOSE),
                        runtime.inspect(make_key()), runtime.status(make_key()),
                        runtime.generation(make_key()), runtime.sweep(),
                        runtime.withdraw(make_key())):
            with pytest.raises(StoreUnavailable) as err:
                await attempt
            assert err.value.reason is ReasonCode.ROLE_NOT_PERMITTED
        assert calls == 0
    finally:
        await runtime.close()
    async with await GovernedMemoryStore.open(dsn_as(database, BRIDGE_ROLE), local_server=LOCAL,
                                              sweep_every=None) as bridge:
        assert bridge.roles == {"kagent_memory_bridge"}
        with pytest.raises(StoreUnavailable) as err:
            await bridge.redeem(assertion_for(make_key()))
        assert err.value.reason is ReasonCode.ROLE_NOT_PERMITTED


# -- 3. requests recorded by the bridge, served to the registered runtime login ---------------


def _redeem_sql(conn, a: ScopeAssertion, *, key=None, classification: str | None = None):
    key = key or a.key
    return conn.execute(
        "SELECT memory_redeem_assertion(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
        + AUDIENCE + ")",
        [a.jti, a.expires_at, *_key_args(key), VERSION,
         classification or a.classification]).fetchone()[0]


async def test_a_runtime_login_redeems_only_recorded_requests_of_its_agent(store, database):
    """The holder of one agent's runtime login: a made-up jti, a request recorded for another
    user's scope presented for this one, another agent's request, an unregistered runtime
    login — all KGJ04; the recorded request of its own agent redeems once."""
    alice = make_key()
    bob = make_key("@bob:example.org", room="!control-b:example.org")
    other_agent = make_key(agent="other-agent", room="!control-c:example.org")
    for k in (alice, bob, other_agent):
        await store.grant(k, purpose=PURPOSE)
    with connect(database, RUNTIME_ROLE) as conn:  # not registered yet
        a = assertion_for(alice)
        with pytest.raises(psycopg.Error) as err:
            _redeem_sql(conn, a)
        assert err.value.sqlstate == "KGJ04"
    async with await operator_store(database) as op:
        await op.register_runtime_login(RUNTIME_ROLE, alice.agent)
    async with await GovernedMemoryStore.open(dsn_as(database, BRIDGE_ROLE), local_server=LOCAL,
                                              sweep_every=None) as bridge:
        made_up = assertion_for(alice)
        recorded_bob = assertion_for(bob)
        recorded_other = assertion_for(other_agent)
        recorded_alice = assertion_for(alice)
        for r in (recorded_bob, recorded_other, recorded_alice):
            await bridge.record_request(r)
        with pytest.raises(ScopeDenied) as err:
            await bridge.record_request(recorded_alice)  # a jti is recorded once
        assert err.value.reason is ReasonCode.ASSERTION_REPLAYED
    with connect(database, RUNTIME_ROLE) as conn:
        for a, key in ((made_up, alice), (recorded_bob, alice), (recorded_other, other_agent)):
            with pytest.raises(psycopg.Error) as err:
                _redeem_sql(conn, a, key=key)
            assert err.value.sqlstate == "KGJ04", a
        with pytest.raises(psycopg.Error) as err:  # recorded, but another classification
            _redeem_sql(conn, recorded_alice, classification="work")
        assert err.value.sqlstate == "KGJ04"
        assert _redeem_sql(conn, recorded_alice) == await store.generation(alice)
        with pytest.raises(psycopg.Error) as err:
            _redeem_sql(conn, recorded_alice)
        assert err.value.sqlstate == "KGJ04"  # the record is spent with the redemption
    with connect(database, RUNTIME_ROLE) as conn:
        assert refused(conn, "SELECT memory_redeem_assertion(%s, now() + interval '60 s',"
                             " %s, %s, %s, %s, %s, %s, %s, NULL, NULL)",
                       [secrets.token_urlsafe(16), *_key_args(alice), VERSION]) == "22023"


async def test_a_redeemed_request_serves_only_the_login_that_redeemed_it(store, database):
    alice = make_key()
    await store.grant(alice, purpose=PURPOSE)
    g = await store.generation(alice)
    async with await operator_store(database) as op:
        await op.register_runtime_login(RUNTIME_ROLE, alice.agent)
    a = assertion_for(alice)
    async with await GovernedMemoryStore.open(dsn_as(database, BRIDGE_ROLE), local_server=LOCAL,
                                              sweep_every=None) as bridge:
        await bridge.record_request(a)
    search = ("SELECT count(*) FROM memory_search_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
              " %s::vector, 5)")
    with connect(database, RUNTIME_ROLE) as conn:
        _redeem_sql(conn, a)
        assert conn.execute(search, [a.jti, *_key_args(alice), g, VERSION,
                                     _vector_literal("x")]).fetchone()[0] == 0
    with psycopg.connect(database.dsn, autocommit=True) as conn:  # another login, same jti
        assert refused(conn, search, [a.jti, *_key_args(alice), g, VERSION,
                                      _vector_literal("x")]) == "KGJ03"


async def test_direct_mode_runtime_store_end_to_end(store, database):
    """The library as the three callers: the bridge grants and records the request, the
    runtime redeems it and saves and searches bound to it; outside the request, nothing."""
    alice = make_key()
    async with await operator_store(database) as op:
        await op.register_runtime_login(RUNTIME_ROLE, alice.agent)
    bridge = await GovernedMemoryStore.open(dsn_as(database, BRIDGE_ROLE), local_server=LOCAL,
                                            sweep_every=None)
    runtime = await GovernedMemoryStore.open(dsn_as(database, RUNTIME_ROLE),
                                             local_server=LOCAL, sweep_every=None)
    try:
        await bridge.grant(alice, purpose=PURPOSE)
        a = assertion_for(alice)
        await bridge.record_request(a)
        with memory_request(a):
            g = await runtime.redeem(a)
            assert g is not None
            await runtime.admit(alice, g, units=2, explicit=True)
            ids = await runtime.save(alice, g, facts=["likes tea"], embeddings=[vec("likes tea")])
            hits = await runtime.search(alice, g, vec("likes tea"))
            assert [h.id for h in hits] == ids
            receipt = await runtime.forget(alice, ids[0])
            assert receipt.deleted == 1
        with pytest.raises(ScopeDenied) as err:  # no request: no bound call
            await runtime.search(alice, g, vec("likes tea"))
        assert err.value.reason is ReasonCode.REQUEST_NOT_REDEEMED
        unrecorded = assertion_for(alice)
        with memory_request(unrecorded), pytest.raises(ScopeDenied) as err:
            await runtime.redeem(unrecorded)
        assert err.value.reason is ReasonCode.REQUEST_NOT_RECORDED
    finally:
        await bridge.close()
        await runtime.close()


# -- 6. every entry point as documented -------------------------------------------------------


async def test_every_entry_point_is_security_definer_with_a_fixed_path(store, database):
    entry_points = RUNTIME | BRIDGE | OPERATOR | SERVICE
    with database.admin() as conn:
        rows = conn.execute(
            "SELECT p.proname, p.oid::regprocedure::text, p.prosecdef, p.proconfig"
            "  FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace"
            "   AND p.proname = ANY(%s)", [sorted(entry_points)]).fetchall()
    assert {r[0] for r in rows} == entry_points
    for _name, signature, secdef, config in rows:
        assert secdef, signature
        assert config and any(c.startswith("search_path=") and c.endswith("pg_temp")
                              for c in config), signature


# -- 7. one copy of a fact --------------------------------------------------------------------


async def test_the_same_fact_is_stored_once(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    composed = "prefers caf\u00e9 au lait"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    first = await save(store, key, composed)
    with database.admin() as conn:
        expires = conn.execute("SELECT expires_at FROM memory_entry").fetchone()[0]
    again = await save(store, key, composed)
    variant = await save(store, key, decomposed)
    batch = await save(store, key, "other fact", composed, "other fact")
    assert first == again == variant == [batch[1]]
    assert batch[0] == batch[2] != batch[1]
    with database.admin() as conn:
        assert conn.execute("SELECT count(*) FROM memory_entry").fetchone()[0] == 2
        assert conn.execute("SELECT expires_at FROM memory_entry WHERE id = %s",
                            [first[0]]).fetchone()[0] == expires  # not extended
    hits = await store.search_many(key, await store.generation(key),
                                   [vec(composed), vec(decomposed)], limit=5)
    assert all(len({h.text for h in q}) == len(q) for q in hits)


async def test_prefetch_bound_is_the_scopes_policy(store, database):
    narrow = MemoryPolicy(version="narrow-1", prefetch_max_subqueries=2)
    s = await open_store(database, narrow)
    try:
        key = make_key()
        await s.grant(key, purpose=PURPOSE)
        g = await s.generation(key)
        with psycopg.connect(database.dsn, autocommit=True) as conn:
            assert refused(conn, "SELECT * FROM memory_search_many(%s, %s, %s, %s, %s, %s, %s,"
                                 " %s, ARRAY[%s::vector, %s::vector, %s::vector], 5)",
                           [*_key_args(key), g, "narrow-1", *[_vector_literal("q")] * 3]) \
                == "22023"
    finally:
        await s.close()


async def test_migrations_register_the_adr_prototype(database):
    await migrated(database)
    with database.admin() as conn:
        row = conn.execute("SELECT max_ttl, entry_cap, fact_max_bytes, consent_max_age,"
                           " explicit_burst, explicit_ops_per_minute, scope_ops_per_hour"
                           " FROM memory_policy WHERE version = %s", [VERSION]).fetchone()
    assert row == (timedelta(days=7), 100, 512, timedelta(days=90), 3, 6, 60)


def test_cli_registers_policies_and_logins(database, tmp_path, capsys):
    import asyncio
    import json

    from kagent_governed_memory.cli import main

    asyncio.run(migrated(database))
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"version": "tight-1", "entry_cap": 20, "max_ttl": 86400}))
    op = ["--dsn", database.operator_dsn, "--local-server", LOCAL, "--json"]
    assert main(["policy", "register", "--file", str(policy), "--dimensions", "768,1024",
                 *op]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "registered"
    assert main(["policy", "allow", "--version", "tight-1", "--namespace", "kagent", *op]) == 0
    assert main(["login", "register-runtime", "--login", RUNTIME_ROLE, "--namespace", "kagent",
                 "--agent", "my-agent", *op]) == 0
    capsys.readouterr()
    # an application login is refused, naming the role it lacks
    assert main(["policy", "register", "--file", str(policy), "--dsn", database.dsn,
                 "--local-server", LOCAL, "--json"]) != 0
    assert json.loads(capsys.readouterr().out)["error"] == "role_not_permitted"
    with database.admin() as conn:
        assert conn.execute("SELECT entry_cap, max_ttl, embedding_dimensions FROM memory_policy"
                            " WHERE version = 'tight-1'").fetchone() \
            == (20, timedelta(days=1), [768, 1024])
        assert conn.execute("SELECT agent_namespace, agent_name FROM memory_policy_allowance"
                            " WHERE policy_version = 'tight-1'").fetchall() == [("kagent", None)]
        assert conn.execute("SELECT login, agent_name FROM memory_runtime_login").fetchall() \
            == [(RUNTIME_ROLE, "my-agent")]


async def test_the_sweep_is_the_operators_not_the_runtimes(store, database):
    """A runtime or bridge store starts no sweeper (it may not sweep); an operator store does."""
    for user in (RUNTIME_ROLE, BRIDGE_ROLE):
        async with await GovernedMemoryStore.open(dsn_as(database, user), local_server=LOCAL,
                                                  sweep_every=60.0) as s:
            assert s._sweeper is None
    async with await GovernedMemoryStore.open(database.operator_dsn, local_server=LOCAL,
                                              sweep_every=60.0) as s:
        assert s._sweeper is not None


async def test_a_duplicate_with_a_wrong_vector_is_refused(store, database):
    """The dedupe answers an existing entry only for a valid save: a vector of another length
    is refused even when its text is already stored."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "likes tea")
    g = await store.generation(key)
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        assert refused(conn, "SELECT * FROM memory_save(%s, %s, %s, %s, %s, %s, %s, %s,"
                             " ARRAY['likes tea'], ARRAY['[1,2,3]'::vector])",
                       [*_key_args(key), g, VERSION]) == "22000"
