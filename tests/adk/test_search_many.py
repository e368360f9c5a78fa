"""memory_search_many (000010): a prefetch's sub-queries in one fenced statement.

Equivalence with one ``search`` per query vector (same ids, same order, same distances), the
fence refusing the whole call exactly as ``search`` would, the limits, the role boundary, and
the round trips of a prefetch counted on the wire before (one search per sub-query) and after.
"""

from __future__ import annotations

import os
import tempfile

import psycopg
import pytest
from support.adk import build
from support.db import open_store, save, scope_uuid
from support.scopes import make_key, vec

from kagent_governed_memory import (
    ConsentRequired,
    GovernanceError,
    MemoryPolicy,
    ReasonCode,
    StaleGeneration,
)
from kagent_governed_memory.store import MAX_SEARCH_QUERIES

PURPOSE = "personal_preferences"
SIGNATURE = "memory_search_many(text,text,text,text,text,text,bigint,text,vector[],integer)"
FACTS = [f"fact {i}: {topic}" for i, topic in enumerate(
    ["green tea", "black coffee", "falconry", "lighthouse project", "sourdough", "jazz piano",
     "mountain bikes", "tea ceremonies", "espresso machines", "birds of prey", "coastal walks",
     "rye bread"])]
QUERIES = ["tea", "coffee", "birds", "bread", "music", "walks", "project", "bikes"]


async def _scope(store, key=None, facts=FACTS):
    key = key or make_key()
    gen = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, *facts, generation=gen)
    return key, gen


@pytest.mark.parametrize("n_queries", [1, 2, 5, 8])
@pytest.mark.parametrize("limit", [1, 3, 5, 50])
async def test_equals_one_search_per_query(store, n_queries, limit):
    key, gen = await _scope(store)
    queries = [vec(q) for q in QUERIES[:n_queries]]
    many = await store.search_many(key, gen, queries, limit=limit)
    assert len(many) == n_queries
    for q, got in zip(queries, many, strict=True):
        one = await store.search(key, gen, q, limit=limit)
        assert [(h.id, h.text) for h in got] == [(h.id, h.text) for h in one]
        assert [h.distance for h in got] == pytest.approx([h.distance for h in one])
        assert len(got) == min(limit, len(FACTS))


async def test_duplicate_queries_and_a_scope_of_its_own(store):
    """The same vector twice gives the same rows twice; another scope's rows never appear."""
    key, gen = await _scope(store)
    other, _ = await _scope(store, make_key("@bob:example.org", room="!control-b:example.org"),
                            ["bob's tea secret"])
    a, b = await store.search_many(key, gen, [vec("tea"), vec("tea")], limit=5)
    assert [h.id for h in a] == [h.id for h in b]
    assert "bob's tea secret" not in {h.text for h in a}
    assert all(h.scope == key for h in a)
    del other


async def test_empty_scope_answers_empty_lists(store):
    key = make_key()
    gen = (await store.grant(key, purpose=PURPOSE)).generation
    assert await store.search_many(key, gen, [vec("a"), vec("b")]) == [[], []]


async def test_fence_refuses_the_whole_call(store, database):
    key, gen = await _scope(store)
    qs = [vec("tea"), vec("coffee")]
    with pytest.raises(StaleGeneration):
        await store.search_many(key, gen + 1, qs)
    with pytest.raises(ConsentRequired):
        await store.search_many(make_key("@nobody:example.org"), 1, qs)
    # another policy version: the consent was given under this store's
    other = await open_store(database, MemoryPolicy(version="adr0023-prototype-2"))
    try:
        with pytest.raises(GovernanceError) as err:
            await other.search_many(key, gen, qs)
        assert err.value.reason is ReasonCode.CONSENT_POLICY_CHANGED
    finally:
        await other.close()
    # expired consent
    with database.admin() as conn:
        conn.execute("UPDATE memory_scope SET consent_expires_at = now() - interval '1 second'"
                     " WHERE id = %s", [scope_uuid(database, key)])
    with pytest.raises(ConsentRequired):
        await store.search_many(key, gen, qs)


async def test_withdrawn_scope_refused(store):
    key, gen = await _scope(store)
    await store.withdraw(key)
    with pytest.raises((ConsentRequired, StaleGeneration)):
        await store.search_many(key, gen, [vec("tea")])


async def test_expired_rows_are_cut_before_the_limit(store, database):
    """Read-time expiry before LIMIT: expiring the 3 nearest rows moves the next 3 up."""
    key, gen = await _scope(store)
    [before] = await store.search_many(key, gen, [vec("tea")], limit=6)
    gone = [h.id for h in before[:3]]
    with database.admin() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE memory_entry SET expires_at = now() - interval '1 second',"
                     " created_at = now() - interval '2 seconds' WHERE id = ANY(%s::uuid[])",
                     [gone])
    [after] = await store.search_many(key, gen, [vec("tea")], limit=3)
    assert [h.id for h in after] == [h.id for h in before[3:6]]


async def test_limits_checked_in_python_and_in_sql(store, database):
    key, gen = await _scope(store)
    for bad in ([], [vec("x")] * (MAX_SEARCH_QUERIES + 1), "tea", None):
        with pytest.raises(GovernanceError) as err:
            await store.search_many(key, gen, bad)  # type: ignore[arg-type]
        assert err.value.reason is ReasonCode.INVALID_ARGUMENT
    for bad_limit in (0, 51, True, "5"):
        with pytest.raises(GovernanceError) as err:
            await store.search_many(key, gen, [vec("x")], limit=bad_limit)  # type: ignore[arg-type]
        assert err.value.reason is ReasonCode.INVALID_LIMIT
    with pytest.raises(GovernanceError) as err:
        await store.search_many(key, gen, [vec("x"), [0.5] * 3])
    assert err.value.reason is ReasonCode.INVALID_EMBEDDING

    lit = "[" + ",".join(["0.1"] * 768) + "]"
    short = "[0.1,0.2]"
    args = [key.principal.issuer_kind, key.principal.subject, key.agent.namespace, key.agent.name,
            key.scope.kind.value, key.scope.room_id, gen, store.policy.version]
    call = f"SELECT * FROM {SIGNATURE.split('(')[0]}(%s,%s,%s,%s,%s,%s,%s,%s,%s::vector[],%s)"
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        for arr, limit, state in (
            ([lit] * 9, 5, "22023"), ([], 5, "22023"), (None, 5, "22023"), ([lit], 0, "22023"),
            ([lit], 51, "22023"), ([lit, None], 5, "22023"), ([lit, short], 5, "22000"),
        ):
            with pytest.raises(psycopg.Error) as e:
                conn.execute(call, [*args, arr, limit])
            assert e.value.sqlstate == state, (arr and len(arr), limit)
            # content-free: the message is the code's name, no vector or key text
            assert "0.1" not in str(e.value) and key.principal.subject not in str(e.value)
        with pytest.raises(psycopg.Error) as e:  # two-dimensional array
            conn.execute(call.replace("%s::vector[],", "ARRAY[[%s::vector]],"), [*args, lit, 5])
        assert e.value.sqlstate == "22023"
        rows = conn.execute(call, [*args, [lit] * 8, 50]).fetchall()
        assert {r[0] for r in rows} == set(range(1, 9)) and len(rows) == 8 * len(FACTS)


async def test_only_the_service_role_may_execute(store, database):
    with database.admin() as conn:
        row = conn.execute(
            "SELECT p.prosecdef, p.proconfig,"
            " has_function_privilege('kagent_memory_service', p.oid, 'EXECUTE'),"
            " has_function_privilege('kgm_app', p.oid, 'EXECUTE'),"
            " has_function_privilege('kagent_memory_operator', p.oid, 'EXECUTE'),"
            " EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
            "          WHERE a.grantee = 0)"
            " FROM pg_proc p WHERE p.oid = %s::regprocedure", [SIGNATURE]).fetchone()
        secdef, config, service, app_login, operator, public = row
        assert secdef and any(c.startswith("search_path=") for c in config)
        assert service and app_login and not public
        assert not operator  # the operator role gets the operator entry points only
        conn.execute("CREATE ROLE kgm_nobody_i16 LOGIN")
        assert not conn.execute("SELECT has_function_privilege('kgm_nobody_i16', %s::regprocedure,"
                                " 'EXECUTE')", [SIGNATURE]).fetchone()[0]
        conn.execute("DROP ROLE kgm_nobody_i16")
    key, gen = await _scope(store)
    # RLS is bound to this scope only: the function reads nothing of another scope even
    # though it runs as the owner (tested above by content); the app login still reads no table
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT count(*) FROM memory_entry")
        assert e.value.sqlstate == "42501"
    assert await store.search_many(key, gen, [vec("tea")])


async def test_down_of_the_baseline_removes_it_and_up_restores_it(store, database):
    """memory_search_many came with migration 000010, now part of the one baseline: its down
    removes the function, its up restores it with the embedding kept in the row."""
    from support.settings import LOCAL

    from kagent_governed_memory import store as governed_sql
    from kagent_governed_memory.store import migrate

    assert await store.schema_version() == governed_sql.migrations()[-1].version >= 15
    storage = ("SELECT a.attstorage FROM pg_attribute a"
               " WHERE a.attrelid = 'memory_entry'::regclass AND a.attname = 'embedding'")
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        assert conn.execute(storage).fetchone()[0] == "m"  # STORAGE MAIN: in the row
        with conn.transaction():
            for m in reversed(governed_sql.migrations()):
                conn.execute(m.down)
            conn.execute("DELETE FROM governed_memory_schema_migrations")
            assert conn.execute("SELECT to_regprocedure(%s)", [SIGNATURE]).fetchone()[0] is None
    assert await migrate(database.owner_dsn, local_server=LOCAL) == [
        m.version for m in governed_sql.migrations()]
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regprocedure(%s)", [SIGNATURE]).fetchone()[0] is not None
        assert conn.execute(storage).fetchone()[0] == "m"
        assert conn.execute("SELECT memory_schema_version()").fetchone()[0] == \
            governed_sql.migrations()[-1].version
    assert await store.search_many(*(await _scope(store)), [vec("tea")])


# -- round trips of a prefetch, counted on the wire ----------------------------------------


class _Trace:
    """libpq's protocol trace of one connection: a round trip ends with Sync or a Query."""

    def __init__(self, conn: psycopg.AsyncConnection, where) -> None:
        # in the test's own tmp_path: the trace holds the statements' parameters
        self.conn = conn
        fd, self.path = tempfile.mkstemp(prefix="kgm-i16-trace-", dir=where)
        os.close(fd)

    def __enter__(self):
        self.fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
        self.conn.pgconn.trace(self.fd)
        self.conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return self

    def __exit__(self, *exc) -> None:
        self.conn.pgconn.untrace()
        os.close(self.fd)

    def round_trips(self) -> int:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            parts = (line.split("\t") for line in f)
            return sum(1 for p in parts if len(p) > 2 and p[0] == "F"
                       and p[2].strip() in ("Sync", "Query"))


async def test_prefetch_round_trips_before_and_after(database, store, tmp_path):
    """A new session's first turn with 8 sub-queries: before, one memory_search each (8 round
    trips for the sub-queries); now one memory_search_many.  The whole turn is redeem +
    admit + search_many = 3 round trips."""
    single = await open_store(database, min_size=1, max_size=1)
    try:
        key, gen = await _scope(single)
        async with single._pool.connection() as conn:
            pooled = conn
        pooled.prepare_threshold = None
        queries = [vec(q) for q in QUERIES]
        with _Trace(pooled, tmp_path) as before:
            for q in queries:
                await single.search(key, gen, q)
        with _Trace(pooled, tmp_path) as after:
            await single.search_many(key, gen, queries)
        assert (before.round_trips(), after.round_trips()) == (8, 1)

        h = build(single)
        sentences = " ".join(f"Sentence number {i} is about {q} and more things." for i, q in
                             enumerate(QUERIES))
        with _Trace(pooled, tmp_path) as turn:
            out = await h.turn(sentences, key=key)
        assert out and h.embedder.items == 8
        assert turn.round_trips() == 3  # redeem, admit, search_many
        assert "<memory>" in str(h.model.requests[-1].config.system_instruction)
    finally:
        await single.close()
