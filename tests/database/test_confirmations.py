"""Confirmations shared by bridge replicas (issue 28 item 2, ADR 0023 §21).

Two ledger objects on one SQLite file, or on one PostgreSQL database, stand for two bridge
replicas: a confirmation one replica gave is honoured by the other once, then by neither.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from support.controls import AGENTS, ALICE, OK, PURPOSE, ROOM, checks

from kagent_governed_memory import ReasonCode
from kagent_governed_memory.controls import (
    InMemoryLedger,
    PostgresConfirmationLedger,
    SQLiteConfirmationLedger,
)
from kagent_governed_memory.controls import (
    ConfirmationRequired,
    ConsentReply,
    MemoryControls,
    Notice,
)
from kagent_governed_memory.errors import StoreUnavailable

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=2)
SENTINEL = "nonce-SENTINEL-7f3a"


@pytest.fixture
async def pg_replicas(database):
    pools = [AsyncConnectionPool(database.admin_dsn, min_size=1, max_size=4, open=False)
             for _ in range(2)]
    for pool in pools:
        await pool.open()
    ledgers = [PostgresConfirmationLedger(pool) for pool in pools]
    await ledgers[0].setup()
    await ledgers[1].setup()  # idempotent
    yield ledgers
    for pool in pools:
        await pool.close()


@pytest.fixture
def sqlite_replicas(tmp_path):
    path = tmp_path / "bridge.sqlite"
    return [SQLiteConfirmationLedger(path), SQLiteConfirmationLedger(path)]


@pytest.fixture(params=["sqlite", "pg"])
def replicas(request):
    return request.getfixturevalue(f"{request.param}_replicas")


async def test_a_confirmation_is_honoured_once_by_any_replica(replicas):
    a, b = replicas
    assert await a.consume("n1", LATER, NOW) is True
    assert await b.consume("n1", LATER, NOW) is False
    assert await a.consume("n1", LATER, NOW) is False
    assert await b.consume("n2", LATER, NOW) is True


async def test_concurrent_consumes_of_one_nonce_yield_exactly_one_winner(replicas):
    a, b = replicas
    results = await asyncio.gather(*(r.consume("raced", LATER, NOW)
                                     for _ in range(10) for r in (a, b)))
    assert results.count(True) == 1, results


async def test_release_makes_it_redeemable_again_on_any_replica(replicas):
    a, b = replicas
    assert await a.consume("n", LATER, NOW)
    await a.release("n")
    assert await b.consume("n", LATER, NOW) is True
    assert await a.consume("n", LATER, NOW) is False


async def test_expired_rows_are_purged_as_new_ones_are_written(replicas):
    a, b = replicas
    assert await a.consume("old", NOW + timedelta(seconds=30), NOW)
    # after its expiry the row is gone (the token itself is refused before the ledger is asked)
    assert await b.consume("new", LATER + timedelta(minutes=5), LATER)
    assert await b.consume("old", LATER + timedelta(minutes=5), LATER) is True


async def test_rows_hold_no_nonce_in_clear(sqlite_replicas, tmp_path):
    a, _ = sqlite_replicas
    assert await a.consume(SENTINEL, LATER, NOW)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("bridge.sqlite*"))
    assert SENTINEL.encode() not in raw
    with sqlite3.connect(tmp_path / "bridge.sqlite") as db:
        rows = db.execute("SELECT nonce_hash, expires_at FROM bridge_confirmations").fetchall()
    assert len(rows) == 1 and len(rows[0][0]) == 32


async def test_postgres_rows_hold_no_nonce_in_clear(pg_replicas, database):
    assert await pg_replicas[0].consume(SENTINEL, LATER, NOW)
    with psycopg.connect(database.admin_dsn) as conn:
        rows = conn.execute("SELECT nonce_hash::text, expires_at::text "
                            "FROM bridge_confirmations").fetchall()
    assert len(rows) == 1 and SENTINEL not in repr(rows)


async def test_an_unreachable_ledger_is_a_content_free_refusal(tmp_path):
    ledger = SQLiteConfirmationLedger(tmp_path / "missing-dir" / "bridge.sqlite")
    with pytest.raises(StoreUnavailable) as raised:
        await ledger.consume(SENTINEL, LATER, NOW)
    assert raised.value.reason == ReasonCode.STORE_UNAVAILABLE
    assert SENTINEL not in str(raised.value) and raised.value.__cause__ is None


async def test_two_bridge_replicas_share_a_confirmation(store, replicas):
    """Replica A asks for the confirmation of `on`; the user's repeat lands on replica B, which
    carries it out; the same token on either replica afterwards does nothing."""
    now = [NOW]
    a, b = (MemoryControls(store, agents=AGENTS, secret=b"c" * 32, ledger=ledger,
                           clock=lambda: now[0]) for ledger in replicas)

    async def run(controls, text):
        return await controls.handle(text, sender=ALICE, subject=ALICE, room_id=ROOM,
                                     room_check=checks(OK))

    asked = await run(a, f"!memory on my-agent {PURPOSE}")
    assert isinstance(asked, ConfirmationRequired)
    done = await run(b, f"!memory on my-agent {PURPOSE} {asked.token}")
    assert isinstance(done, ConsentReply)
    for controls in (a, b):
        again = await run(controls, f"!memory on my-agent {PURPOSE} {asked.token}")
        assert again == Notice(reason=ReasonCode.CONFIRMATION_INVALID)


async def test_the_synchronous_ledger_keeps_working_under_its_old_name(store):
    from kagent_governed_memory.controls import InMemoryLedger as OldName

    assert OldName is InMemoryLedger
    controls = MemoryControls(store, agents=AGENTS, secret=b"c" * 32, ledger=InMemoryLedger(),
                              clock=lambda: NOW)
    asked = await controls.handle(f"!memory on my-agent {PURPOSE}", sender=ALICE, subject=ALICE,
                                  room_id=ROOM, room_check=checks(OK))
    text = f"!memory on my-agent {PURPOSE} {asked.token}"
    first = await controls.handle(text, sender=ALICE, subject=ALICE, room_id=ROOM,
                                  room_check=checks(OK))
    second = await controls.handle(text, sender=ALICE, subject=ALICE, room_id=ROOM,
                                   room_check=checks(OK))
    assert isinstance(first, ConsentReply)
    assert second == Notice(reason=ReasonCode.CONFIRMATION_INVALID)
