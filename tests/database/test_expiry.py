"""B2/B3/L3: expiry is an authorization boundary, fixed at insert, enforced by the database.

The clock is driven from the database: rows with a past created_at are planted through a
superuser-only path (session_replication_role = replica skips the insert trigger), which the
application role cannot take.  Nothing sleeps.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from support.db import physical_rows, save, scope_uuid
from support.scopes import make_key, vec

PURPOSE = "personal_preferences"


def _vector_literal(text: str) -> str:
    return "[" + ",".join(f"{v:.6f}" for v in vec(text)) + "]"


def plant(conn: psycopg.Connection, sid: str, generation: int, text: str, expires_sql: str) -> None:
    conn.execute("SET session_replication_role = replica")
    conn.execute(
        "INSERT INTO memory_entry (scope_id, content, embedding, generation, created_at, expires_at)"
        f" VALUES (%s, %s, %s::vector, %s, now() - interval '7 days', {expires_sql})",
        [sid, text, _vector_literal(text), generation],
    )
    conn.execute("SET session_replication_role = origin")


def _key_args(key) -> list:
    """A Matrix key as version 15's signatures take it (000016 keeps them as wrappers): the
    issuer KIND first, then subject, agent and room; the issuer is the local homeserver."""
    return [key.principal.issuer_kind, key.principal.subject, key.agent.namespace,
            key.agent.name, key.scope.kind.value, key.scope.room_id]


def _key7(key) -> list:
    """The seven key parameters of the issuer-generic signatures (000016)."""
    return [key.principal.issuer_kind, key.principal.issuer, key.principal.subject,
            key.agent.namespace, key.agent.name, key.scope.kind.value, key.scope.ref]


async def test_b3_expiry_fixed_at_insert_to_policy_max(store):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "likes tea")
    [entry] = (await store.inspect(key)).entries
    assert entry.expires_at - entry.created_at == store.policy.max_ttl


@pytest.mark.parametrize("column, value", [
    ("expires_at", "expires_at + interval '15 days'"),
    ("expires_at", "expires_at - interval '1 day'"),
    ("content", "'rewritten'"),
    ("created_at", "now()"),
])
async def test_b3_database_refuses_changes_to_stored_rows(store, database, column, value):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "likes tea")
    sid = scope_uuid(database, key)
    # as the application role, which owns the table ...
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('kagent.memory_scope', %s, false)", [sid])
        with pytest.raises(psycopg.Error) as err:
            conn.execute(f"UPDATE memory_entry SET {column} = {value}")
        assert err.value.sqlstate == "KGI01"
    # ... and as a superuser: the trigger still fires
    with database.admin() as conn, pytest.raises(psycopg.Error) as err:
        conn.execute(f"UPDATE memory_entry SET {column} = {value}")
    assert err.value.sqlstate == "KGI01"


async def test_b3_expiry_beyond_policy_refused(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    sid = scope_uuid(database, key)
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('kagent.memory_scope', %s, false)", [sid])
        with pytest.raises(psycopg.Error) as err:
            conn.execute(
                "INSERT INTO memory_entry (scope_id, content, embedding, generation, expires_at)"
                " VALUES (%s, 'x', %s::vector, %s, now() + interval '7 days 1 second')",
                [sid, _vector_literal("x"), g])
        assert err.value.sqlstate == "KGT01"
        # a client-supplied created_at in the past cannot stretch the window either
        conn.execute(
            "INSERT INTO memory_entry (scope_id, content, embedding, generation, created_at)"
            " VALUES (%s, 'y', %s::vector, %s, now() - interval '30 days')",
            [sid, _vector_literal("y"), g])
    [entry] = (await store.inspect(key)).entries
    assert entry.expires_at - entry.created_at == store.policy.max_ttl
    assert physical_rows(database, key) == 1


async def test_b2_unreadable_at_the_instant_of_expiry(store, database):
    """expires_at == now() is unreadable; now() + 1 µs is readable — in one transaction, so
    now() is the same instant for the planted rows and for the governed reads."""
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    sid = scope_uuid(database, key)
    with database.admin() as conn, conn.transaction():
        plant(conn, sid, g, "tea at the instant", "now()")
        plant(conn, sid, g, "tea a microsecond later", "now() + interval '1 microsecond'")
        plant(conn, sid, g, "tea long gone", "now() - interval '1 day'")
        found = conn.execute(
            "SELECT content FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,%s::vector,%s)",
            [*_key_args(key), g, store.policy.version, _vector_literal("tea"), 50]).fetchall()
        inspected = conn.execute(
            "SELECT content FROM memory_inspect(%s,%s,%s,%s,%s,%s,NULL,NULL,50)",
            _key_args(key)).fetchall()
        counted = conn.execute(
            "SELECT entry_count FROM memory_status(%s,%s,%s,%s,%s,%s)", _key_args(key)
        ).fetchone()[0]
    assert [r[0] for r in found] == ["tea a microsecond later"]
    assert [r[0] for r in inspected] == ["tea a microsecond later"]
    assert counted == 1


async def test_b2_expired_rows_invisible_before_sweep_then_swept(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "likes green tea")
    sid = scope_uuid(database, key)
    with database.admin() as conn:
        for i in range(3):
            plant(conn, sid, g, f"expired tea {i}", "now() - interval '1 second'")
    assert physical_rows(database, key) == 4
    hits = await store.search(key, g, vec("expired tea"), limit=50)
    assert [h.text for h in hits] == ["likes green tea"]
    assert [e.text for e in (await store.inspect(key, page_size=50)).entries] == ["likes green tea"]
    assert (await store.status(key)).entry_count == 1
    # popularity cannot revive them: there is no access counter and no extension path
    assert await store.sweep() == 3
    assert physical_rows(database, key) == 1
    assert await store.sweep() == 0


async def test_b4_expired_rows_do_not_count_toward_cap(database):
    from support.db import migrated, open_store

    from kagent_governed_memory import EntryCapReached, MemoryPolicy

    s = await open_store(database, MemoryPolicy(version="cap2", entry_cap=2))
    try:
        await migrated(database)
        key = make_key()
        g = (await s.grant(key, purpose=PURPOSE)).generation
        sid = scope_uuid(database, key)
        with database.admin() as conn:
            for i in range(5):
                plant(conn, sid, g, f"old {i}", "now() - interval '1 minute'")
        await save(s, key, "a", "b", generation=g)
        with pytest.raises(EntryCapReached):
            await save(s, key, "c", generation=g)
    finally:
        await s.close()


async def test_l3_sweep_is_safe_concurrently(store, database):
    keys = [make_key(room=f"!sweep-{i}:example.org") for i in range(4)]
    for key in keys:
        g = (await store.grant(key, purpose=PURPOSE)).generation
        await save(store, key, "live fact")
        with database.admin() as conn:
            for j in range(25):
                plant(conn, scope_uuid(database, key), g, f"stale {j}", "now() - interval '1 hour'")
    results = await asyncio.gather(*(store.sweep() for _ in range(4)))
    assert sum(results) == 100
    assert physical_rows(database) == 4
    ops = database.scalar("SELECT count(*) FROM memory_audit WHERE operation = 'sweep'")
    assert ops == 4
