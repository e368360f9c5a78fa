"""A local development database: the embedded PostgreSQL 18 + pgvector, migrated, with the
three logins of docs/database-roles.md.  For notebooks, tests and ``kagent-governed-memory
dev-db``; needs the ``embedded`` extra.  Never for production data (trust authentication on a
private Unix socket, no backups).

    async with dev_database(local_server="example.org") as db:
        async with await GovernedMemoryStore.open(db.dsn, local_server=db.local_server) as store:
            ...
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..configuration import Configuration, PolicyRegistration, configure, packaged_configuration
from ..policy import DEV_POLICY
from ..store._migrations import migrate
from ._embedded import EmbeddedPostgres, EmbeddedUnavailable

__all__ = ["DevDatabase", "EmbeddedUnavailable", "dev_database"]


@dataclass(frozen=True)
class DevDatabase:
    """Connection strings of a running development database (all on its ``kgm`` database).

    * ``dsn``: the application login (``kgm_app``, a member of ``kagent_memory_service``:
      EXECUTE on the governed functions only) — what ``KGM_DSN`` and ``GovernedMemoryStore.open``
      take;
    * ``operator_dsn``: ``kgm_operator``, also a member of ``kagent_memory_operator``
      (``offboard``/``unblock``);
    * ``owner_dsn``: ``kgm_owner``, the schema owner (``migrate``) — the trust root;
    * ``admin_dsn``: the superuser, for inspecting the tables in a notebook or test;
    * ``runtime_dsn``: ``kgm_runtime``, an agent runtime's login (``kagent_memory_runtime``);
    * ``bridge_dsn``: ``kgm_bridge``, the bridge's login (``kagent_memory_bridge``).

    The packaged configuration (the ADR 0023 prototype policy) and the development policy
    (``DEV_POLICY``) are registered and allowed for every agent, as configuration
    (``kagent_governed_memory.configuration``).
    """

    dsn: str
    operator_dsn: str
    owner_dsn: str
    admin_dsn: str = field(repr=False)
    local_server: str
    data_dir: Path | None = None
    applied: tuple[int, ...] = ()  # migrations applied by this start (empty when kept data was current)
    runtime_dsn: str = ""
    bridge_dsn: str = ""


@asynccontextmanager
async def dev_database(
    *,
    local_server: str = "example.org",
    data_dir: str | os.PathLike[str] | None = None,
) -> AsyncIterator[DevDatabase]:
    """Start the embedded server, migrate it as the owner for ``local_server``, yield its DSNs,
    and stop it on exit.  Without ``data_dir`` everything is deleted on exit; with one, the
    cluster is kept there and reused by the next start (same ``local_server``)."""
    server = EmbeddedPostgres(data_dir)
    await asyncio.to_thread(server.start)
    try:
        applied = await migrate(server.owner_dsn, local_server=local_server)
        await register_dev_policy(server.operator_dsn, local_server)
        yield DevDatabase(dsn=server.dsn, operator_dsn=server.operator_dsn,
                          owner_dsn=server.owner_dsn, admin_dsn=server.admin_dsn,
                          local_server=local_server, data_dir=server.data_dir,
                          applied=tuple(applied), runtime_dsn=server.runtime_dsn,
                          bridge_dsn=server.bridge_dsn)
    finally:
        await asyncio.to_thread(server.stop)


DEV_CONFIGURATION = Configuration(policies=(PolicyRegistration(DEV_POLICY),))
"""``DEV_POLICY``, allowed for every agent."""


async def register_dev_policy(operator_dsn: str, local_server: str) -> None:
    """Register the packaged configuration and ``DEV_POLICY`` (each allowed for every agent)
    with the operator login; an unchanged policy is left as it is.  (``local_server`` is
    recorded by the migration; the Matrix issuer of it by ``memory_configure``.)"""
    await configure(operator_dsn, packaged_configuration() + DEV_CONFIGURATION)
