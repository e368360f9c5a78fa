"""S4/S5/B7: the typed key isolates; the database keeps isolating when a query is wrong."""

from __future__ import annotations

import psycopg
import pytest
from support.db import physical_rows, save, scope_uuid
from support.scopes import make_key, vec

from kagent_governed_memory import (
    ConsentRequired,
    InvalidIdentity,
    OriginKind,
    ReasonCode,
    ScopeDenied,
    StaleGeneration,
)

PURPOSE = "personal_preferences"

NEIGHBOURS = {
    "other user": make_key("@bob:example.org"),
    "other agent": make_key(agent="my-agent-2"),
    "other namespace": make_key(namespace="team-b"),
    "other room": make_key(room="!control-b:example.org"),
    "v12 room id": make_key(room="!control-a"),
}


@pytest.mark.parametrize("name", sorted(NEIGHBOURS))
async def test_s4_no_reuse_across_keys(store, database, name):
    alice = make_key()
    other = NEIGHBOURS[name]
    ga = (await store.grant(alice, purpose=PURPOSE)).generation
    [secret_id] = await save(store, alice, "alice keeps her spare key under the mat")

    # the neighbour without consent: nothing
    assert await store.generation(other) is None
    with pytest.raises(ConsentRequired):
        await store.search(other, ga, vec("spare key mat"))
    assert (await store.inspect(other)).entries == ()

    # the neighbour with its own consent: its own (empty) memory, never alice's
    go = (await store.grant(other, purpose=PURPOSE)).generation
    assert await store.search(other, go, vec("spare key under the mat"), limit=50) == []
    receipt = await store.forget(other, secret_id)
    assert receipt.deleted == 0
    await store.forget_all(other)
    await store.withdraw(other)
    assert physical_rows(database, alice) == 1
    [hit] = await store.search(alice, ga, vec("spare key"), limit=5)
    assert hit.id == secret_id and hit.scope == alice


async def test_s2_hyphen_and_underscore_agents_are_not_conflated(store, database):
    """kagent's app_name maps `my-agent` to `my_agent`; the typed key never does.  The database
    refuses a name that is not a Kubernetes name, so `my_agent` cannot alias `my-agent`."""
    with pytest.raises(InvalidIdentity):
        make_key(agent="my_agent")
    key = make_key(agent="my-agent")
    await store.grant(key, purpose=PURPOSE)
    with database.admin() as conn, pytest.raises(psycopg.Error) as err:
        conn.execute(
            "SELECT memory_grant('matrix','@alice:example.org','kagent','my_agent',"
            "'control_room','!control-a:example.org','personal_preferences','adr0023-prototype-1',"
            "768,'personal',ARRAY['example.org'])")
    assert err.value.sqlstate == "23514"
    assert database.scalar("SELECT count(*) FROM memory_scope") == 1


@pytest.mark.parametrize("origin", [o for o in OriginKind if o is not OriginKind.NATIVE_LOCAL])
async def test_s5_same_mxid_other_origin_is_refused_before_storage(store, database, origin):
    native = make_key()
    await store.grant(native, purpose=PURPOSE)
    await save(store, native, "native fact")
    bridged = make_key(origin=origin)
    for call in (
        store.grant(bridged, purpose=PURPOSE),
        store.generation(bridged),
        store.search(bridged, 1, vec("native fact")),
        store.save(bridged, 1, facts=["x"], embeddings=[vec("x")]),
        store.inspect(bridged),
        store.status(bridged),
        store.forget(bridged, "00000000-0000-0000-0000-000000000000"),
        store.forget_all(bridged),
        store.withdraw(bridged),
    ):
        with pytest.raises(ScopeDenied) as err:
            await call
        assert err.value.reason is ReasonCode.FEDERATION_DENIED
    assert database.scalar("SELECT count(*) FROM memory_scope") == 1
    # The origin kind is a rule of the Matrix issuer, applied before the database (here, and
    # by the controller from the bridge-signed ``org`` claim); the database keys principals by
    # (issuer, subject) and admits the 'matrix' issuer only, so no other identity system's
    # subject can be stored under v1 either.
    with database.admin() as conn, pytest.raises(psycopg.Error) as err:
        conn.execute(
            "SELECT memory_grant(%s,%s,'kagent','my-agent','control_room','!r:example.org',"
            "'personal_preferences','adr0023-prototype-1',768,'personal',ARRAY['example.org'])",
            [f"{origin.value}.example", native.principal.mxid])
    assert err.value.sqlstate == "KGD01"


@pytest.mark.parametrize("mxid, room", [
    ("@alice:remote.example", "!control-a:example.org"),
    ("@alice:example.org", "!control-a:remote.example"),
    ("@alice:example.org:8448", "!control-a:example.org"),
])
async def test_s5_other_homeserver_refused(store, database, mxid, room):
    key = make_key(mxid, room=room)
    with pytest.raises(ScopeDenied) as err:
        await store.grant(key, purpose=PURPOSE)
    assert err.value.reason is ReasonCode.REMOTE_SERVER_DENIED
    assert database.scalar("SELECT count(*) FROM memory_scope") == 0


async def test_s3_cross_room_scope_refused(store, database):
    from kagent_governed_memory import AgentIdentity, MemoryScope, Principal, ScopeKey, ScopeKind

    key = ScopeKey(principal=Principal(mxid="@alice:example.org", origin="native_local"),
                   agent=AgentIdentity(namespace="kagent", name="my-agent"),
                   scope=MemoryScope(kind=ScopeKind.CROSS_ROOM))
    with pytest.raises(ScopeDenied) as err:
        await store.grant(key, purpose=PURPOSE)
    assert err.value.reason is ReasonCode.SCOPE_KIND_RESERVED
    assert database.scalar("SELECT count(*) FROM memory_scope") == 0


async def test_b7_rls_blocks_wrong_where_for_the_application_role(store, database):
    """The library's own role, querying the table directly with a wrong or missing WHERE,
    sees and touches only the rows of the scope its transaction is bound to."""
    alice, bob = make_key(), make_key("@bob:example.org")
    for key, facts in ((alice, ["alice one", "alice two"]), (bob, ["bob secret"])):
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, *facts)
    a_id, b_id = scope_uuid(database, alice), scope_uuid(database, bob)
    b_gen = await store.generation(bob)  # valid for the fence: only RLS stands in the way
    assert physical_rows(database) == 3  # the superuser sees all three

    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        role = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles"
                            " WHERE rolname = current_user").fetchone()
        assert role == (False, False)
        # unbound: nothing at all, whatever the WHERE
        assert conn.execute("SELECT count(*) FROM memory_entry").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM memory_entry WHERE scope_id = %s",
                            [b_id]).fetchone()[0] == 0
        with conn.transaction():
            conn.execute("SELECT memory_bind_scope(%s)", [a_id])
            rows = conn.execute("SELECT content FROM memory_entry WHERE true").fetchall()
            assert sorted(r[0] for r in rows) == ["alice one", "alice two"]
            assert conn.execute("SELECT count(*) FROM memory_entry WHERE scope_id = %s",
                                [b_id]).fetchone()[0] == 0
            # a DELETE without WHERE removes only the bound scope's rows
            conn.execute("DELETE FROM memory_entry")
        with conn.transaction():
            conn.execute("SELECT memory_bind_scope(%s)", [a_id])
            with pytest.raises(psycopg.Error) as err:  # cannot write into another scope
                conn.execute(
                    "INSERT INTO memory_entry (scope_id, content, embedding, generation)"
                    " VALUES (%s, 'planted', %s::vector, %s)",
                    [b_id, "[" + ",".join(["1"] * 768) + "]", b_gen])
            assert err.value.sqlstate == "42501"  # insufficient_privilege: the RLS WITH CHECK
        # the binding is transaction-local: it does not leak to the next transaction
        assert conn.execute("SELECT count(*) FROM memory_entry").fetchone()[0] == 0
    assert physical_rows(database, alice) == 0
    assert physical_rows(database, bob) == 1


async def test_b7_pooled_connections_do_not_keep_a_binding(store, database):
    """The binding is set per transaction inside each function; after a governed call the
    same pooled connection holds no binding, and could not read the table anyway."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "fact")
    async with store._pool.connection() as conn:  # white-box: the store's own pool
        cur = await conn.execute("SELECT current_setting('kagent.memory_scope', true)")
        (setting,) = await cur.fetchone()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("SELECT count(*) FROM memory_entry")
    assert setting in ("", None)


async def test_s4_stale_generation_from_another_key_is_useless(store):
    a, b = make_key(), make_key("@bob:example.org")
    ga = (await store.grant(a, purpose=PURPOSE)).generation
    await store.grant(b, purpose=PURPOSE)
    await store.forget_all(b)  # b is now at a higher generation than a
    with pytest.raises(StaleGeneration):
        await save(store, b, "x", generation=ga)
