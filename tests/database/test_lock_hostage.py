"""Issue 25 item 5: no caller can hold a withdrawal hostage (migration 000013).

A squatting session holds the application login (``kgm_app``, a member of
kagent_memory_service) and undoes every timeout for itself (statement_timeout,
idle_in_transaction_session_timeout, transaction_timeout and lock_timeout all 0).  It holds

  (a) the victim's scope row, through a transaction left open after a governed call
      (``memory_save``);
  (b) the sweep's one-at-a-time lock (``memory_sweep`` in an open transaction), and the
      expired rows that sweep deleted;
  (c) the scope row inside one long statement (``memory_save`` and ``pg_sleep`` together).

The victim's withdraw, forget_all and sweep each finish within ``BOUND`` seconds (the bound of
docs/database-roles.md: at most 3 s of lock wait per governed call, three calls for a
withdrawal) and the scope ends disabled (or, for forget_all, emptied) and verified; the squatter
was ended, and the end was audited content-free.  Before 000013 each victim call waits forever
(or, for the sweep, sweeps nothing): the ``asyncio.wait_for`` below fails it.  Backends that are
not the application's -- here a superuser's -- are never ended: the withdrawal then fails
cleanly within the bound.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from support.db import migrated, physical_rows, save, scope_uuid
from support.scopes import make_key, vec
from support.settings import LOCAL
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from kagent_governed_memory import ErasureFailed, ReasonCode, StoreUnavailable
from kagent_governed_memory.store import migrate, migrations

PURPOSE = "personal_preferences"
BOUND = 10.0  # seconds, for a withdrawal (three calls); docs/database-roles.md
# how long the test waits for a victim call before calling it hostage (the old code waits
# forever behind the squatter)
HOSTAGE = BOUND + 5.0
UNDONE = ("statement_timeout", "idle_in_transaction_session_timeout", "transaction_timeout",
          "lock_timeout")


def _key_args(key) -> list:
    return [key.principal.issuer_kind, key.principal.subject, key.agent.namespace, key.agent.name,
            key.scope.kind.value, key.scope.room_id]


def _vector_literal(text: str) -> str:
    return "[" + ",".join(f"{v:.6f}" for v in vec(text)) + "]"


def _save_sql(store, key, generation: int, text: str) -> tuple[str, list]:
    return ("SELECT count(*) FROM memory_save(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " %s::vector[])",
            [*_key_args(key), generation, store.policy.version, [text], [_vector_literal(text)]])


@contextmanager
def squatter(db, *, autocommit: bool = False, dsn: str | None = None) -> Iterator[psycopg.Connection]:
    """The hostile session: the app login with every timeout undone for itself."""
    conn = psycopg.connect(dsn or db.dsn, autocommit=True)
    for name in UNDONE:
        conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(name)))
    conn.autocommit = autocommit
    pid = conn.info.backend_pid
    try:
        yield conn
    finally:
        with db.admin() as admin:  # never leave it behind, whatever the outcome
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        try:
            conn.close()
        except psycopg.Error:
            pass


def _alive(db, pid: int) -> bool:
    return bool(db.scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]))


def _ended_audits(db) -> int:
    return db.scalar("SELECT coalesce(sum(count), 0) FROM memory_audit"
                     " WHERE outcome = 'blocker_ended'")


async def _timed(coro) -> tuple[object, float]:
    started = time.monotonic()
    try:
        result = await asyncio.wait_for(coro, HOSTAGE)
    except TimeoutError:
        pytest.fail(f"held hostage: the call did not finish within {HOSTAGE:.0f} s")
    return result, time.monotonic() - started


async def _granted_with_facts(store, key) -> int:
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "likes tea", "lives in Lisbon")
    return g


async def _victim(store, database, key, op: str) -> float:
    """Run the victim's ``op`` and check its outcome; returns the elapsed seconds."""
    if op == "withdraw":
        receipt, took = await _timed(store.withdraw(key))
        assert receipt.verified and receipt.deleted == 2
        st = await store.status(key)
        assert not st.enabled and st.last_verified_erasure_at is not None
        assert st.failure_reason is None and st.entry_count == 0
    else:
        receipt, took = await _timed(store.forget_all(key))
        assert receipt.verified and receipt.deleted == 2
        st = await store.status(key)
        assert st.enabled and st.last_verified_erasure_at is not None and st.entry_count == 0
    assert physical_rows(database, key) == 0
    assert took < BOUND, f"{op} took {took:.1f} s"
    return took


@pytest.mark.parametrize("op", ["withdraw", "forget_all"])
async def test_a_open_transaction_after_a_governed_call(store, database, op):
    key = make_key()
    g = await _granted_with_facts(store, key)
    with squatter(database) as squat:
        pid = squat.info.backend_pid
        query, params = _save_sql(store, key, g, "squatted fact")
        squat.execute(query, params)  # the scope row is now locked; the transaction stays open
        await _victim(store, database, key, op)
        assert not _alive(database, pid)
        with pytest.raises(psycopg.OperationalError):
            squat.execute("SELECT 1")
    assert _ended_audits(database) >= 1


async def test_b_sweep_lock_held(store, database):
    key = make_key()
    g = await _granted_with_facts(store, key)
    sid = scope_uuid(database, key)
    with database.admin() as admin:  # one expired row for the sweeps to delete
        admin.execute("SET session_replication_role = replica")
        admin.execute(
            "INSERT INTO memory_entry (scope_id, content, embedding, generation, created_at,"
            " expires_at) VALUES (%s, 'expired fact', %s::vector, %s, now() - interval '8 days',"
            " now() - interval '1 day')", [sid, _vector_literal("expired fact"), g])
    with squatter(database) as squat:
        pid = squat.info.backend_pid
        # its sweep deleted the expired row (uncommitted) and holds the config row
        assert squat.execute("SELECT memory_sweep()").fetchone()[0] == 1
        swept, took = await _timed(store.sweep())
        assert swept == 1, "the victim's sweep deleted nothing"
        assert took < BOUND
        assert not _alive(database, pid)
    assert physical_rows(database, key) == 2
    assert database.scalar("SELECT count(*) FROM memory_audit WHERE operation = 'sweep'"
                           " AND outcome = 'blocker_ended'") == 1


async def test_b_sweep_lock_and_swept_rows_held_against_a_withdrawal(store, database):
    key = make_key()
    g = await _granted_with_facts(store, key)
    sid = scope_uuid(database, key)
    with database.admin() as admin:
        admin.execute("SET session_replication_role = replica")
        admin.execute(
            "INSERT INTO memory_entry (scope_id, content, embedding, generation, created_at,"
            " expires_at) VALUES (%s, 'expired fact', %s::vector, %s, now() - interval '8 days',"
            " now() - interval '1 day')", [sid, _vector_literal("expired fact"), g])
    with squatter(database) as squat:
        assert squat.execute("SELECT memory_sweep()").fetchone()[0] == 1
        receipt, took = await _timed(store.withdraw(key))
        assert receipt.verified and receipt.deleted == 3  # the expired row too
        assert took < BOUND
        st = await store.status(key)
        assert not st.enabled and st.last_verified_erasure_at is not None
    assert physical_rows(database, key) == 0


@pytest.mark.parametrize("op", ["withdraw", "forget_all"])
async def test_c_pg_sleep_in_the_same_statement(store, database, op):
    key = make_key()
    g = await _granted_with_facts(store, key)
    with squatter(database, autocommit=True) as squat:
        pid = squat.info.backend_pid
        query, params = _save_sql(store, key, g, "squatted fact")
        failed: list[BaseException] = []

        def hold() -> None:
            try:
                squat.execute(f"SELECT ({query}), pg_sleep(600)", params)
            except BaseException as exc:  # ended by the victim: expected
                failed.append(exc)

        t = threading.Thread(target=hold, daemon=True)
        t.start()
        for _ in range(200):
            if database.scalar("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                               [pid]) == "PgSleep":
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the squatter never reached pg_sleep")
        await _victim(store, database, key, op)
        t.join(5)
        assert not t.is_alive() and failed and not _alive(database, pid)
    assert _ended_audits(database) >= 1


async def test_a_runtime_login_in_an_open_transaction_after_a_bound_save(store, database):
    """The agent runtime's own login (kagent_memory_runtime, 000012) squats the scope row with
    a bound save of the request it redeemed."""
    from test_roles_and_policies import assertion_for, dsn_as

    from kagent_governed_memory import GovernedMemoryStore
    from kagent_governed_memory.dev import BRIDGE_ROLE, RUNTIME_ROLE
    from kagent_governed_memory.scope import memory_request

    key = make_key()
    await _granted_with_facts(store, key)
    async with await GovernedMemoryStore.open(database.operator_dsn, local_server=LOCAL,
                                              sweep_every=None) as op:
        await op.register_runtime_login(RUNTIME_ROLE, key.agent)
    a = assertion_for(key)
    async with await GovernedMemoryStore.open(dsn_as(database, BRIDGE_ROLE), local_server=LOCAL,
                                              sweep_every=None) as bridge:
        await bridge.record_request(a)
    async with await GovernedMemoryStore.open(dsn_as(database, RUNTIME_ROLE), local_server=LOCAL,
                                              sweep_every=None) as runtime:
        with memory_request(a):
            g = await runtime.redeem(a)
    with squatter(database, dsn=dsn_as(database, RUNTIME_ROLE)) as squat:
        pid = squat.info.backend_pid
        squat.execute(
            "SELECT count(*) FROM memory_save_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " %s::vector[])", [a.jti, *_key_args(key), g, store.policy.version,
                               ["squatted fact"], [_vector_literal("squatted fact")]])
        await _victim(store, database, key, "withdraw")
        assert not _alive(database, pid)
    assert _ended_audits(database) >= 1


async def test_a_bridge_login_in_an_open_transaction_after_a_forget(store, database):
    """The bridge's login (kagent_memory_bridge, 000012) squats an entry row: its forget of
    one entry is left uncommitted."""
    from test_roles_and_policies import dsn_as

    from kagent_governed_memory.dev import BRIDGE_ROLE

    key = make_key()
    await _granted_with_facts(store, key)
    [entry] = (await store.inspect(key)).entries[:1]
    with squatter(database, dsn=dsn_as(database, BRIDGE_ROLE)) as squat:
        pid = squat.info.backend_pid
        assert squat.execute("SELECT deleted FROM memory_forget(%s, %s, %s, %s, %s, %s, %s)",
                             [*_key_args(key), entry.id]).fetchone()[0] == 1
        await _victim(store, database, key, "withdraw")
        assert not _alive(database, pid)
    assert _ended_audits(database) >= 1


async def test_superuser_holder_is_never_ended_and_the_withdrawal_fails_cleanly(store, database):
    key = make_key()
    await _granted_with_facts(store, key)
    sid = scope_uuid(database, key)
    with squatter(database, dsn=database.admin_dsn) as squat:
        pid = squat.info.backend_pid
        squat.execute("SELECT 1 FROM memory_scope WHERE id = %s FOR UPDATE", [sid])
        started = time.monotonic()
        with pytest.raises(ErasureFailed) as err:
            await asyncio.wait_for(store.withdraw(key), HOSTAGE)
        assert time.monotonic() - started < BOUND
        assert err.value.ids.get("step") == "disable"  # nothing changed
        assert _alive(database, pid)
    st = await store.status(key)
    assert st.enabled and st.entry_count == 2
    assert _ended_audits(database) == 0
    receipt = await store.withdraw(key)  # once the holder is gone, the withdrawal completes
    assert receipt.verified


async def test_only_governed_logins_are_listed(store, database):
    """memory_lock_holders lists the backends of the service, runtime and bridge logins and
    never a superuser's or the owner's."""
    key = make_key()
    g = await _granted_with_facts(store, key)
    sid = scope_uuid(database, key)
    from test_roles_and_policies import dsn_as

    from kagent_governed_memory.dev import BRIDGE_ROLE, RUNTIME_ROLE

    with squatter(database) as app, squatter(database, dsn=database.admin_dsn) as admin, \
            squatter(database, dsn=database.owner_dsn) as owner, \
            squatter(database, dsn=dsn_as(database, RUNTIME_ROLE)) as runtime, \
            squatter(database, dsn=dsn_as(database, BRIDGE_ROLE)) as bridge:
        query, params = _save_sql(store, key, g, "squatted fact")
        app.execute(query, params)
        runtime.execute("SELECT count(*) FROM memory_get_policy(%s)", [store.policy.version])
        bridge.execute("SELECT * FROM memory_status(%s, %s, %s, %s, %s, %s)", _key_args(key))
        admin.execute("SELECT 1 FROM memory_entry WHERE scope_id = %s LIMIT 1", [sid])
        owner.execute("SELECT memory_schema_version()")
        owner.execute("LOCK TABLE memory_audit IN ACCESS SHARE MODE")
        with database.admin() as conn:
            conn.execute("SET ROLE kgm_owner")
            conn.execute("BEGIN")
            conn.execute("SELECT set_config('search_path', 'public', true)")
            listed = conn.execute("SELECT memory_lock_holders()").fetchone()[0]
            conn.execute("ROLLBACK")
        pids = {int(h.split("/")[0]) for h in listed}
        assert pids == {app.info.backend_pid, runtime.info.backend_pid,
                        bridge.info.backend_pid}


async def test_migration_refuses_an_owner_without_pg_signal_backend(database):
    await migrated(database)  # the governed roles exist in this cluster
    role = f"kgm_nosig_{uuid.uuid4().hex[:8]}"
    name = f"t_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(database.admin_dsn, dbname="postgres")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE")
                     .format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name),
                                                                      sql.Identifier(role)))
    target = make_conninfo(base, dbname=name)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    dsn = make_conninfo(target, user=role)
    try:
        with pytest.raises(StoreUnavailable) as err:
            await migrate(dsn, local_server=LOCAL)
        assert err.value.reason is ReasonCode.SIGNAL_PRIVILEGE_MISSING
        with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as raw:
            for m in migrations():
                conn.execute(m.up)
        assert raw.value.sqlstate == "KGR04"
        assert "pg_signal_backend" in raw.value.diag.message_primary
        assert f"GRANT pg_signal_backend TO {role}" in raw.value.diag.message_hint
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(sql.SQL("GRANT pg_signal_backend TO {}").format(sql.Identifier(role)))
        applied = await migrate(dsn, local_server=LOCAL)
        assert applied[-1] == migrations()[-1].version >= 13
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    assert conninfo_to_dict(dsn)["user"] == role
