"""C1-C5: nothing before consent; every read and write fenced by the consent generation in the
database transaction; withdrawal disables and advances before erasing."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import psycopg
import pytest
from support.db import migrated, open_store, physical_rows, save, scope_uuid
from support.scopes import make_key, vec

from kagent_governed_memory import (
    ConsentConflict,
    ConsentRequired,
    EntryCapReached,
    GovernanceError,
    MemoryPolicy,
    ReasonCode,
    StaleGeneration,
)

PURPOSE = "personal_preferences"


async def test_c2_nothing_before_consent(store, database):
    key = make_key()
    assert await store.generation(key) is None
    with pytest.raises(ConsentRequired) as err:
        await store.save(key, None, facts=["likes tea"], embeddings=[vec("likes tea")])
    assert err.value.reason is ReasonCode.CONSENT_REQUIRED
    # A guessed generation does not help either: the database refuses it.
    for guess in (0, 1, 2):
        with pytest.raises(ConsentRequired):
            await store.save(key, guess, facts=["likes tea"], embeddings=[vec("likes tea")])
        with pytest.raises(ConsentRequired):
            await store.search(key, guess, vec("tea"))
    assert physical_rows(database) == 0
    assert (await store.inspect(key)).entries == ()
    status = await store.status(key)
    assert status.enabled is False and status.entry_count == 0


async def test_c1_grant_is_explicit_versioned_and_idempotent(store, database):
    key = make_key()
    first = await store.grant(key, purpose=PURPOSE)
    assert first.generation >= 1
    assert first.policy_version == store.policy.version and first.purpose == PURPOSE
    assert first.expires_at - first.granted_at == store.policy.consent_max_age
    again = await store.grant(key, purpose=PURPOSE)
    assert again.generation == first.generation
    assert again.expires_at >= first.expires_at
    with pytest.raises(ConsentConflict) as err:
        await store.grant(key, purpose="work_notes")
    assert err.value.reason is ReasonCode.CONSENT_CONFLICT
    other_policy = await open_store(database, MemoryPolicy(version="adr0023-prototype-2"))
    try:
        with pytest.raises(ConsentConflict):
            await other_policy.grant(key, purpose=PURPOSE)
    finally:
        await other_policy.close()
    st = await store.status(key)
    assert (st.enabled, st.purpose, st.policy_version, st.generation) == (
        True, PURPOSE, store.policy.version, first.generation)
    assert database.scalar(
        "SELECT count(*) FROM memory_audit WHERE operation = 'grant'") == 2


async def test_c1_purpose_must_be_a_code(store):
    key = make_key()
    for bad in ("", "Personal Preferences", "x" * 80, "remember: I like tea", None):
        with pytest.raises(GovernanceError) as err:
            await store.grant(key, purpose=bad)  # type: ignore[arg-type]
        assert err.value.reason is ReasonCode.INVALID_ARGUMENT
    assert await store.generation(key) is None


async def test_c3_stale_generation_after_withdraw_and_forget_all(store, database):
    key = make_key()
    g1 = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "likes tea", generation=g1)

    await store.forget_all(key)
    g2 = await store.generation(key)
    assert g2 is not None and g2 > g1
    with pytest.raises(StaleGeneration):
        await save(store, key, "likes coffee", generation=g1)
    with pytest.raises(StaleGeneration):
        await store.search(key, g1, vec("tea"))
    await save(store, key, "likes coffee", generation=g2)

    await store.withdraw(key)
    assert await store.generation(key) is None
    for gen in (g1, g2):
        with pytest.raises(ConsentRequired):
            await save(store, key, "late", generation=gen)
        with pytest.raises(ConsentRequired):
            await store.search(key, gen, vec("coffee"))
    assert physical_rows(database, key) == 0

    g3 = (await store.grant(key, purpose=PURPOSE)).generation
    assert g3 > g2
    with pytest.raises(StaleGeneration):
        await save(store, key, "from before", generation=g2)
    assert physical_rows(database, key) == 0


async def test_c3_consent_expiry_closes_reads_and_writes(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "likes tea", generation=g)
    with database.admin() as conn:  # the clock moves past the consent's expiry
        conn.execute("UPDATE memory_scope SET consent_expires_at = now() - interval '1 second'")
    assert await store.generation(key) is None
    with pytest.raises(ConsentRequired):
        await store.search(key, g, vec("tea"))
    with pytest.raises(ConsentRequired):
        await save(store, key, "likes coffee", generation=g)
    assert (await store.status(key)).enabled is False
    # Renewing an expired consent is a new consent: a new generation.
    g2 = (await store.grant(key, purpose=PURPOSE)).generation
    assert g2 > g
    with pytest.raises(StaleGeneration):
        await store.search(key, g, vec("tea"))


async def test_c3_generation_only_increases_in_the_database(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    with database.admin() as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("UPDATE memory_scope SET generation = generation - 1")
    assert err.value.sqlstate == "KGI01"
    with database.admin() as conn, pytest.raises(psycopg.Error):
        conn.execute("UPDATE memory_scope SET principal_subject = '@mallory:example.org'")


async def test_c3_fence_is_in_the_database_not_python(store, database):
    """A client that skips the library (raw INSERT as the application role) is fenced too."""
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    sid = scope_uuid(database, key)
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('kagent.memory_scope', %s, false)", [sid])
        insert = ("INSERT INTO memory_entry (scope_id, content, embedding, generation)"
                  " VALUES (%s, 'raw', %s::vector, %s)")
        literal = "[" + ",".join(["0.5"] * 768) + "]"
        for bad_gen, state in ((g - 1, "KGS01"), (g + 1, "KGS01"), (None, "KGS01")):
            with pytest.raises(psycopg.Error) as err:
                conn.execute(insert, [sid, literal, bad_gen])
            assert err.value.sqlstate == state
        conn.execute(insert, [sid, literal, g])
    await store.withdraw(key)
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('kagent.memory_scope', %s, false)", [sid])
        with pytest.raises(psycopg.Error) as err:
            conn.execute(insert, [sid, literal, g + 1])  # the withdrawn scope's new generation
        assert err.value.sqlstate == "KGC01"
    assert physical_rows(database, key) == 0


async def test_c5_grant_refused_while_erasure_unverified(store, database):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    with database.admin() as conn:  # a withdrawal that died after its disable step
        conn.execute("SELECT memory_disable(%s, %s, %s, %s, %s, %s)",
                     ["matrix", key.principal.mxid, key.agent.namespace, key.agent.name,
                      "control_room", key.scope.room_id])
    st = await store.status(key)
    assert st.enabled is False and st.failure_reason is ReasonCode.ERASURE_PENDING
    with pytest.raises(ConsentRequired) as err:
        await store.grant(key, purpose=PURPOSE)
    assert err.value.reason is ReasonCode.ERASURE_PENDING
    await store.withdraw(key)
    assert (await store.status(key)).failure_reason is None
    assert (await store.grant(key, purpose=PURPOSE)).generation > st.generation


@pytest.mark.parametrize("round_", range(5))
async def test_c4_withdraw_racing_saves_leaves_zero_rows(database, round_):
    """>= 200 saves carrying the old generation race one withdrawal over several connections,
    in five rounds (this test runs 5x with 60 saves): after verification zero rows remain and
    every save either landed before the disable (and was erased) or was refused."""
    writers = await open_store(database, max_size=6, min_size=6)
    eraser = await open_store(database, max_size=2)
    await migrated(database)
    key = make_key(room=f"!race-{round_}:example.org")
    try:
        g = (await eraser.grant(key, purpose=PURPOSE)).generation

        async def one_save(i: int) -> str:
            await asyncio.sleep((i % 7) * 0.001)
            try:
                await writers.save(key, g, facts=[f"fact {i}"], embeddings=[vec(f"fact {i}")])
            except (ConsentRequired, EntryCapReached) as exc:
                return exc.reason.value
            return "stored"

        saves = [asyncio.create_task(one_save(i)) for i in range(60)]
        await asyncio.sleep(0.01)
        receipt = await eraser.withdraw(key)
        outcomes = await asyncio.gather(*saves)
        late = await asyncio.gather(*(one_save(i) for i in range(60, 70)))

        assert receipt.verified is True
        assert set(outcomes) <= {"stored", "stale_generation", "consent_required"}
        assert set(late) == {"stale_generation"}
        # the withdrawal really overlapped the saves: some were refused mid-flight
        assert len(outcomes) - outcomes.count("stored") >= 1
        assert physical_rows(database, key) == 0
        assert (await eraser.status(key)).entry_count == 0
        assert (await eraser.inspect(key)).entries == ()
    finally:
        await writers.close()
        await eraser.close()


async def test_b4_cap_holds_under_concurrent_saves(database):
    """Saves racing for the last slots: the count happens under the scope row lock."""
    policy = MemoryPolicy(version="cap-test", entry_cap=20)
    writers = await open_store(database, policy, min_size=8, max_size=8)
    await migrated(database)
    key = make_key()
    try:
        g = (await writers.grant(key, purpose=PURPOSE)).generation
        await writers.save(key, g, facts=[f"seed {i}" for i in range(15)],
                           embeddings=[vec(f"seed {i}") for i in range(15)])

        async def one(i: int) -> str:
            try:
                await writers.save(key, g, facts=[f"race {i}"], embeddings=[vec(f"race {i}")])
            except EntryCapReached:
                return "cap"
            return "stored"

        results = await asyncio.gather(*(one(i) for i in range(24)))
        assert results.count("stored") == 5 and results.count("cap") == 19
        assert physical_rows(database, key) == 20
        assert (await writers.status(key)).entry_count == 20
    finally:
        await writers.close()


async def test_c3_unknown_scope_id_in_raw_insert_is_refused(store, database):
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        sid = str(uuid.uuid4())
        conn.execute("SELECT set_config('kagent.memory_scope', %s, false)", [sid])
        with pytest.raises(psycopg.Error) as err:
            conn.execute(
                "INSERT INTO memory_entry (scope_id, content, embedding, generation)"
                " VALUES (%s, 'x', %s::vector, 1)", [sid, "[" + ",".join(["1"] * 768) + "]"])
        assert err.value.sqlstate == "KGC01"
    assert physical_rows(database) == 0


async def test_consent_max_age_is_recorded(database):
    policy = MemoryPolicy(version="short", consent_max_age=timedelta(minutes=5))
    s = await open_store(database, policy)
    try:
        await migrated(database)
        r = await s.grant(make_key(), purpose=PURPOSE)
        assert r.expires_at - r.granted_at == timedelta(minutes=5)
    finally:
        await s.close()
