"""B5/U3/U4/C4/C5/L2: exact erasure, verified by reading through the search path; failures
leave the scope disabled and reported, never re-enabled."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from support.db import migrated, open_store, physical_rows, save, scope_uuid
from support.scopes import make_key, vec

from kagent_governed_memory import (
    ConsentRequired,
    ErasureFailed,
    Principal,
    ReasonCode,
    ScopeDenied,
)

PURPOSE = "personal_preferences"


async def test_u3_forget_exactly_one_entry(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    ids = await save(store, key, "likes tea", "lives in Lisbon", "project Lighthouse")
    receipt = await store.forget(key, ids[1])
    assert (receipt.deleted, receipt.verified, receipt.scope_id) == (1, True, key.opaque_id)
    remaining = {e.id for e in (await store.inspect(key)).entries}
    assert remaining == {ids[0], ids[2]}
    hits = await store.search(key, g, vec("lives in Lisbon"), limit=50)
    assert ids[1] not in {h.id for h in hits} and len(hits) == 2
    st = await store.status(key)
    assert st.enabled and st.last_verified_erasure_at is not None and st.entry_count == 2
    assert await store.generation(key) == g  # forgetting one fact does not withdraw consent


async def test_u3_forget_has_no_existence_oracle(store, database):
    alice, bob = make_key(), make_key("@bob:example.org")
    await store.grant(alice, purpose=PURPOSE)
    await store.grant(bob, purpose=PURPOSE)
    [bobs] = await save(store, bob, "bob fact")
    [gone] = await save(store, alice, "alice fact")
    await store.forget(alice, gone)
    receipts = [
        await store.forget(alice, candidate)
        for candidate in (str(uuid.uuid4()), gone, bobs, "not-a-uuid", "' OR 1=1 --", "x" * 5000)
    ]
    shapes = {(r.deleted, r.verified, r.generation, r.scope_id) for r in receipts}
    assert len(shapes) == 1 and next(iter(shapes))[0] == 0
    assert physical_rows(database, bob) == 1


async def test_u4_forget_all_clears_advances_and_stays_enabled(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, *(f"fact {i}" for i in range(12)))
    receipt = await store.forget_all(key)
    assert receipt.deleted == 12 and receipt.verified and receipt.generation > g
    assert physical_rows(database, key) == 0
    g2 = await store.generation(key)
    assert g2 == receipt.generation
    await save(store, key, "fresh start", generation=g2)
    assert (await store.status(key)).entry_count == 1


async def test_c4_withdraw_disables_before_clearing_and_records_receipts(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "one", "two", "three")
    receipt = await store.withdraw(key)
    assert (receipt.deleted, receipt.verified) == (3, True) and receipt.generation > g
    st = await store.status(key)
    assert (st.enabled, st.entry_count, st.failure_reason) == (False, 0, None)
    assert st.last_verified_erasure_at is not None
    with database.admin() as conn:
        ops = conn.execute("SELECT operation, outcome, count FROM memory_audit"
                           " WHERE scope_id = %s ORDER BY id", [scope_uuid(database, key)]).fetchall()
        cols = conn.execute("SELECT column_name, data_type FROM information_schema.columns"
                            " WHERE table_name = 'memory_audit'").fetchall()
    assert [o[:2] for o in ops][-3:] == [("disable", "disabled"), ("clear", "deleted"),
                                          ("verify", "verified")]
    assert ops[-2][2] == 3
    # content-free by construction: only codes, counts, generations, ids and times
    assert {t for _, t in cols} <= {"bigint", "uuid", "text", "timestamp with time zone"}
    assert {c for c, t in cols if t == "text"} == {"operation", "outcome"}
    # withdrawing twice is fine and changes nothing
    again = await store.withdraw(key)
    assert again.deleted == 0 and again.verified


async def test_c5_verification_failure_leaves_scope_disabled_and_reported(store, database):
    """Inject a fault: a trigger makes deletes silently keep the rows."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "sticky fact")
    with database.admin() as conn:
        conn.execute("CREATE FUNCTION keep_rows() RETURNS trigger LANGUAGE plpgsql"
                     " AS $$ BEGIN RETURN NULL; END $$")
        conn.execute("CREATE TRIGGER keep_rows BEFORE DELETE ON memory_entry"
                     " FOR EACH ROW EXECUTE FUNCTION keep_rows()")
    with pytest.raises(ErasureFailed) as err:
        await store.forget_all(key)
    assert err.value.reason is ReasonCode.VERIFICATION_FAILED
    st = await store.status(key)
    assert st.enabled is False and st.failure_reason is ReasonCode.VERIFICATION_FAILED
    assert await store.generation(key) is None
    with pytest.raises(ConsentRequired):  # no best-effort resumption
        await store.grant(key, purpose=PURPOSE)
    with pytest.raises(ErasureFailed):
        await store.withdraw(key)
    assert (await store.status(key)).enabled is False
    with database.admin() as conn:
        conn.execute("DROP TRIGGER keep_rows ON memory_entry")
    receipt = await store.withdraw(key)
    assert receipt.verified and receipt.deleted == 1
    assert (await store.status(key)).failure_reason is None
    assert (await store.grant(key, purpose=PURPOSE)).generation > st.generation


async def test_c5_connection_killed_mid_withdraw(database):
    """pg_terminate_backend on the withdrawal's connection while its delete waits: the scope
    stays disabled and reported, never re-enabled; a second withdrawal completes it."""
    store = await open_store(database, max_size=2)
    await migrated(database)
    key = make_key()
    try:
        g = (await store.grant(key, purpose=PURPOSE)).generation
        await save(store, key, "fact one", "fact two", generation=g)
        sid = scope_uuid(database, key)
        blocker = await database.admin_async()
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT 1 FROM memory_entry WHERE scope_id = %s LIMIT 1 FOR UPDATE",
                              [sid])
        withdraw = asyncio.create_task(store.withdraw(key))
        killer = await database.admin_async()
        pid = None
        for _ in range(1500):  # up to 30 s (a loaded machine), done as soon as it waits
            cur = await killer.execute(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND wait_event_type = 'Lock'",
                ["%memory_clear(%"])
            row = await cur.fetchone()
            if row:
                pid = row[0]
                break
            await asyncio.sleep(0.02)
        assert pid is not None, "the withdrawal's delete never waited on the planted lock"
        await killer.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(ErasureFailed) as err:
            await withdraw
        assert err.value.reason is ReasonCode.ERASURE_FAILED
        await blocker.execute("ROLLBACK")
        await blocker.close()
        await killer.close()

        st = await store.status(key)
        assert st.enabled is False
        assert st.failure_reason in (ReasonCode.ERASURE_FAILED, ReasonCode.ERASURE_PENDING)
        assert await store.generation(key) is None
        with pytest.raises(ConsentRequired):
            await store.search(key, g, vec("fact"))
        with pytest.raises(ConsentRequired):
            await store.grant(key, purpose=PURPOSE)
        assert physical_rows(database, key) == 2  # still there, but unreadable

        receipt = await store.withdraw(key)
        assert receipt.verified and receipt.deleted == 2
        assert physical_rows(database, key) == 0
        assert (await store.status(key)).failure_reason is None
    finally:
        await store.close()


async def test_c4_disable_step_is_retried_when_the_connection_dies(database):
    store = await open_store(database, max_size=1, min_size=1)
    await migrated(database)
    key = make_key()
    try:
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, "fact")
        with database.admin() as conn:  # kill the store's only idle connection
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE usename = 'kgm_app' AND datname = current_database()")
        receipt = await store.withdraw(key)
        assert receipt.verified and receipt.deleted == 1
        assert (await store.status(key)).enabled is False
    finally:
        await store.close()


async def test_l2_offboarding_enumerates_exactly_one_principal(store, operator, database):
    alice = Principal(mxid="@alice:example.org", origin="native_local")
    alice_keys = [
        make_key(agent="planner"),
        make_key(agent="coder", room="!control-b:example.org"),
        make_key(namespace="team-b", agent="planner"),
    ]
    others = [make_key("@bob:example.org", agent="planner", room="!bob-room:example.org"),
              make_key("@alice2:example.org", agent="planner", room="!a2-room:example.org")]
    for i, key in enumerate(alice_keys + others):
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, *(f"fact {j}" for j in range(i + 1)))
    await store.withdraw(alice_keys[2])  # already-disabled scopes are enumerated too

    before = database.scalar("SELECT max(id) FROM memory_audit")
    alice_sids = [scope_uuid(database, k) for k in alice_keys]
    report = await operator.offboard(alice)
    assert report.principal_id == alice.opaque_id and report.ok
    assert {s.scope_id for s in report.scopes} == {k.opaque_id for k in alice_keys}
    assert sorted(s.deleted for s in report.scopes) == [0, 1, 2]
    for key in alice_keys:
        st = await store.status(key)
        assert (st.enabled, st.entry_count or 0, st.failure_reason) == (False, 0, None)
    for i, key in enumerate(others, start=3):
        assert (await store.status(key)).enabled
        assert physical_rows(database, key) == i + 1
    with database.admin() as conn:
        # every scope was disabled before any was cleared, and purged last
        ops = [r[0] for r in conn.execute(
            "SELECT operation FROM memory_audit WHERE id > %s AND scope_id = ANY(%s::uuid[])"
            " ORDER BY id", [before, alice_sids]).fetchall()]
        # no governed row names alice or her rooms any more (ids in clear or as text)
        for table in ("memory_scope", "memory_entry", "memory_audit", "memory_config",
                      "memory_principal_block", "memory_admission_bucket"):
            dump = " ".join(r[0] for r in conn.execute(f"SELECT t::text FROM {table} t"))
            for needle in ("@alice:example.org", "!control-a:example.org",
                           "!control-b:example.org"):
                assert needle not in dump, table
    first_clear = ops.index("clear")
    assert ops[:first_clear].count("offboard_disable") == 3 and "offboard_disable" not in ops[first_clear:]
    assert ops[-3:] == ["offboard"] * 3  # purged after every clear and verify
    # a grant racing or following the offboarding is refused until the operator lifts the block
    with pytest.raises(ScopeDenied) as err:
        await store.grant(alice_keys[0], purpose=PURPOSE)
    assert err.value.reason is ReasonCode.PRINCIPAL_OFFBOARDED
    assert (await store.status(alice_keys[0])).enabled is False


async def test_l2_partial_offboarding_failure_is_reported_and_stays_disabled(store, operator,
                                                                           database):
    alice = Principal(mxid="@alice:example.org", origin="native_local")
    good, bad = make_key(agent="planner"), make_key(agent="coder")
    for key in (good, bad):
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, "fact")
    bad_sid = scope_uuid(database, bad)
    with database.admin() as conn:
        conn.execute("CREATE FUNCTION keep_rows() RETURNS trigger LANGUAGE plpgsql"
                     " AS $$ BEGIN RETURN NULL; END $$")
        conn.execute(f"CREATE TRIGGER keep_rows BEFORE DELETE ON memory_entry FOR EACH ROW"
                     f" WHEN (OLD.scope_id = '{bad_sid}') EXECUTE FUNCTION keep_rows()")
    good_sid = scope_uuid(database, good)
    report = await operator.offboard(alice)
    outcomes = {s.scope_id: s.outcome for s in report.scopes}
    assert outcomes == {good.opaque_id: "cleared", bad.opaque_id: ReasonCode.VERIFICATION_FAILED}
    assert report.ok is False
    st = await store.status(bad)
    assert st.enabled is False and st.failure_reason is ReasonCode.VERIFICATION_FAILED
    # the failed scope is kept (and still names its key) for the next run; the good one is gone
    assert scope_uuid(database, bad) == bad_sid and scope_uuid(database, good) is None
    assert good_sid is not None
    with pytest.raises(ScopeDenied):
        await store.grant(bad, purpose=PURPOSE)


async def test_l2_offboarding_a_principal_with_nothing(operator):
    report = await operator.offboard(Principal(mxid="@nobody:example.org", origin="native_local"))
    assert report.scopes == () and report.ok


async def test_l1_erasure_and_consent_are_separate_operations(store, database):
    """forget_all keeps consent; withdraw ends it; neither touches other agents' scopes."""
    a, b = make_key(agent="planner"), make_key(agent="coder")
    for key in (a, b):
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, "fact")
    await store.forget_all(a)
    assert (await store.status(a)).enabled and (await store.status(b)).entry_count == 1
    await store.withdraw(a)
    assert not (await store.status(a)).enabled and (await store.status(b)).enabled
    with psycopg.connect(database.admin_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memory_entry").fetchone()[0] == 1
