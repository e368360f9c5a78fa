"""Applying the packaged SQL migrations, as the OWNER role.

The role that migrates owns every governed table and function: it is the trust root and no
application may connect as it.  Applications connect as a login role that is a member of the
NOLOGIN role ``kagent_memory_service`` (created here when the owner may create roles), which can
only EXECUTE the governed entry points.  See ``docs/database-roles.md``.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from ..errors import GovernanceError, ReasonCode, from_database_error
from . import _sql
from ._logpin import pinned_dsn

__all__ = ["LATEST_VERSION", "OPERATOR_ROLE", "SERVICE_ROLE", "apply_migrations", "migrate",
           "schema_version"]

_log = logging.getLogger("kagent_governed_memory.store")

SERVICE_ROLE = "kagent_memory_service"
OPERATOR_ROLE = "kagent_memory_operator"
_MIGRATION_LOCK = 0x6B676D_0023  # pg_advisory_xact_lock key: "kgm" + ADR number
_MIGRATIONS_TABLE = "governed_memory_schema_migrations"
LATEST_VERSION = max(m.version for m in _sql.migrations())
# The first packaged migration, the one-file baseline (000015), replaced 000004-000015: a
# database they brought to 000015 is at it; one they left earlier is refused.
_BASELINE_VERSION = min(m.version for m in _sql.migrations())


async def apply_migrations(conn: psycopg.AsyncConnection[Any], local_server: str | None) -> list[int]:
    """Apply what is missing on ``conn`` (the owner) in one transaction under an advisory lock;
    with ``local_server``, also record the local homeserver (S5) if none is recorded yet."""
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {_MIGRATIONS_TABLE} ("
            " version BIGINT PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        await conn.execute(f"REVOKE ALL ON {_MIGRATIONS_TABLE} FROM PUBLIC")
        cur = await conn.execute(f"SELECT version FROM {_MIGRATIONS_TABLE}")
        done = {row[0] for row in await cur.fetchall()}
        before = [v for v in done if v < _BASELINE_VERSION]
        if before and _BASELINE_VERSION not in done:
            raise GovernanceError(ReasonCode.SCHEMA_BEFORE_BASELINE, operation="migrate",
                                  version=max(before), baseline=_BASELINE_VERSION)
        for m in _sql.migrations():
            if m.version in done:
                continue
            await conn.execute(m.up)
            await conn.execute(
                f"INSERT INTO {_MIGRATIONS_TABLE} (version, name) VALUES (%s, %s)",
                [m.version, m.name],
            )
            applied.append(m.version)
        # A migration file sets a transaction-local search_path for its functions; put the
        # caller's back before anything else runs in this transaction.
        await conn.execute("RESET search_path")
        if local_server is not None:
            cur = psycopg.AsyncRawCursor(conn)
            await cur.execute(_sql.query("ConfigureMemoryStore"), [local_server])
    if applied:
        _log.info("migrations applied count=%d", len(applied))
    return applied


async def migrate(dsn: str, *, local_server: str | None = None) -> list[int]:
    """Connect with the OWNER's ``dsn``, apply the packaged migrations not yet recorded and
    return their versions.  Idempotent, safe to run from several processes at once."""
    failed: GovernanceError | None = None
    try:
        async with await psycopg.AsyncConnection.connect(pinned_dsn(dsn), autocommit=True) as conn:
            return await apply_migrations(conn, local_server)
    except (psycopg.Error, OSError) as exc:
        failed = from_database_error(exc, "migrate")
    failed.__cause__ = failed.__context__ = None
    raise failed


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int | None:
    """The governed schema's version as any role sees it (``memory_schema_version()``), or
    ``None`` before the first migration."""
    cur = await conn.execute(
        "SELECT CASE WHEN to_regprocedure('memory_schema_version()') IS NULL THEN false"
        " ELSE has_function_privilege(to_regprocedure('memory_schema_version()'), 'EXECUTE')"
        " END"
    )
    row = await cur.fetchone()
    if not row or not row[0]:
        return None
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(_sql.query("GetMemorySchemaVersion"), [])
    row = await cur.fetchone()
    return None if row is None else int(row[0])
