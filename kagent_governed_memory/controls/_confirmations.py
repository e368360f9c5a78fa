"""Single-use confirmation ledgers for ``MemoryControls`` (ADR 0023 §21: bridge control state).

A confirmation token (``forget … all``, ``off``, ``on``) is signed by the bridge and carries a
random nonce; the ledger makes it single use.  ``InMemoryLedger`` does that within one process.
A bridge with several replicas needs one ledger they share, in a database the bridge owns (not
kagent's): ``SQLiteConfirmationLedger`` (one file, replicas on one host) or
``PostgresConfirmationLedger``.  Any replica honours a confirmation once and only once: the
first ``consume`` of a nonce inserts its row, every later one finds it.

Rows are content-free: a SHA-256 of the nonce and the token's expiry, nothing about the room,
the sender or the action.  Expiry is decided from the signed token before the ledger is asked;
a row only has to outlive it, and expired rows are purged as new ones are written.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ReasonCode, StoreUnavailable

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "AsyncConfirmationLedger",
    "ConfirmationLedger",
    "InMemoryLedger",
    "PostgresConfirmationLedger",
    "SQLiteConfirmationLedger",
]

_TABLE = "bridge_confirmations"


class ConfirmationLedger(Protocol):
    def consume(self, nonce: str, expires_at: datetime, now: datetime) -> bool:
        """True the first time ``nonce`` is presented; False ever after."""

    def release(self, nonce: str) -> None:
        """Make ``nonce`` usable again: its action failed before anything was changed."""


class AsyncConfirmationLedger(Protocol):
    async def consume(self, nonce: str, expires_at: datetime, now: datetime) -> bool:
        """True the first time ``nonce`` is presented to any replica; False ever after."""

    async def release(self, nonce: str) -> None:
        """Make ``nonce`` usable again: its action failed before anything was changed."""


class InMemoryLedger:
    """Single-use within one bridge process; several replicas need a shared ledger."""

    def __init__(self) -> None:
        self._used: dict[str, datetime] = {}

    def consume(self, nonce: str, expires_at: datetime, now: datetime) -> bool:
        self._used = {n: e for n, e in self._used.items() if e > now}
        if nonce in self._used:
            return False
        self._used[nonce] = expires_at
        return True

    def release(self, nonce: str) -> None:
        self._used.pop(nonce, None)


def _digest(nonce: str) -> bytes:
    return hashlib.sha256(b"kgm-confirmation." + nonce.encode()).digest()


def _unavailable(operation: str) -> StoreUnavailable:
    return StoreUnavailable(ReasonCode.STORE_UNAVAILABLE, operation=operation)


class SQLiteConfirmationLedger:
    """A ledger in one SQLite file (WAL, a busy timeout): every replica on the host opens the
    same path.  Calls run in a worker thread, one connection per call."""

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 5000) -> None:
        self._path = str(path)
        self._busy = int(busy_timeout_ms)
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, timeout=self._busy / 1000, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout = {self._busy}")
        if not self._ready:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (nonce_hash BLOB PRIMARY KEY, "
                       "expires_at INTEGER NOT NULL) WITHOUT ROWID")
            self._ready = True
        return db

    def _consume(self, digest: bytes, expires: int, now: int) -> bool:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(f"DELETE FROM {_TABLE} WHERE expires_at <= ?", (now,))
            inserted = db.execute(f"INSERT OR IGNORE INTO {_TABLE} VALUES (?, ?)",
                                  (digest, expires)).rowcount
            db.execute("COMMIT")
            return inserted == 1
        finally:
            db.close()

    def _release(self, digest: bytes) -> None:
        db = self._connect()
        try:
            db.execute(f"DELETE FROM {_TABLE} WHERE nonce_hash = ?", (digest,))
        finally:
            db.close()

    async def consume(self, nonce: str, expires_at: datetime, now: datetime) -> bool:
        try:
            return await asyncio.to_thread(self._consume, _digest(nonce),
                                           int(expires_at.timestamp()), int(now.timestamp()))
        except sqlite3.Error:
            raise _unavailable("confirmation") from None

    async def release(self, nonce: str) -> None:
        try:
            await asyncio.to_thread(self._release, _digest(nonce))
        except sqlite3.Error:
            raise _unavailable("confirmation") from None


class PostgresConfirmationLedger:
    """A ledger in a PostgreSQL database the bridge owns, through a psycopg pool.  ``setup()``
    creates its one table (run it once, as the bridge database's owner)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def setup(self) -> None:
        try:
            async with self._pool.connection() as conn:
                await conn.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} ("
                                   "nonce_hash bytea PRIMARY KEY, "
                                   "expires_at timestamptz NOT NULL)")
        except Exception:
            raise _unavailable("confirmation") from None

    async def consume(self, nonce: str, expires_at: datetime, now: datetime) -> bool:
        try:
            async with self._pool.connection() as conn:
                # replicas purging at once skip each other's rows instead of waiting on them
                await conn.execute(f"DELETE FROM {_TABLE} WHERE nonce_hash IN (SELECT nonce_hash "
                                   f"FROM {_TABLE} WHERE expires_at <= %s FOR UPDATE SKIP LOCKED)",
                                   (now,))
                cur = await conn.execute(
                    f"INSERT INTO {_TABLE} (nonce_hash, expires_at) VALUES (%s, %s) "
                    "ON CONFLICT (nonce_hash) DO NOTHING RETURNING 1",
                    (_digest(nonce), expires_at))
                return await cur.fetchone() is not None
        except Exception:
            raise _unavailable("confirmation") from None

    async def release(self, nonce: str) -> None:
        try:
            async with self._pool.connection() as conn:
                await conn.execute(f"DELETE FROM {_TABLE} WHERE nonce_hash = %s",
                                   (_digest(nonce),))
        except Exception:
            raise _unavailable("confirmation") from None
