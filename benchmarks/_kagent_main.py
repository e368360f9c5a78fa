"""kagent MAIN's compiled controller for ``adk_turn.py --kagent-main``.

The controller is compiled from ``patches/kagent-main/`` by ``tests/support/go_controller_main.py``
(Go 1.27, kagent's and agent-substrate's sources; it says why when it cannot be) and serves
``GovernedMemoryService`` over gRPC on loopback.  It runs on a database of its own in the SAME
PostgreSQL cluster as the direct store (same server, same shared buffers), migrated by main's
own runner into the ``governed_memory`` schema.  Runtime calls carry a per-request grant:
:class:`Grants` mints it the way the A2A transport does (``memory_grant_mint`` through the
grants login, on one connection kept open as the transport's pool keeps one) and revokes it
when the request is over.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets
import time
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(_ROOT / "tests"))

DATABASE = "kgm_bench_main"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


@dataclass
class MainController:
    url: str  # grpc://127.0.0.1:PORT
    bridge_token: str
    grants_dsn: str


class Grants:
    """Mint one grant per forwarded request for Agent ``namespace/name`` (bound to the
    request's assertion), revoke it after; ``minted`` counts them, ``mint_seconds`` times each
    mint (one statement on one open connection, as the A2A transport's pool would run it)."""

    def __init__(self, conn: psycopg.AsyncConnection[object], namespace: str, name: str,
                 schema: str) -> None:
        self._conn, self._ns, self._name, self._schema = conn, namespace, name, schema
        self.minted = 0
        self.mint_seconds: list[float] = []

    async def mint(self, assertion: str) -> str:
        grant = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
        started = time.perf_counter()
        await self._conn.execute(
            f"SELECT {self._schema}.memory_grant_mint(%s, %s, %s, %s, %s, %s)",
            [_digest(grant), self._ns, self._name, str(uuid.uuid4()), "actor-bench",
             _digest(assertion)])
        self.mint_seconds.append(time.perf_counter() - started)
        self.minted += 1
        return grant

    async def revoke(self, grant: str) -> None:
        await self._conn.execute(f"SELECT {self._schema}.memory_grant_revoke(%s)",
                                 [_digest(grant)])


async def seed(runtime: Any, minter: Grants, key: Any, token: str, texts: list[str],
               embedder: Any, **binding: Any) -> None:
    """Save ``texts`` into ``key``'s scope through the controller, in one request of its own
    (``binding``: ``memory_request``'s keys and issuer, agent and context id)."""
    from kagent_governed_memory import memory_request

    grant = await minter.mint(token)
    try:
        with memory_request(token, grant=grant, **binding) as bound:
            assert bound.assertion is not None
            generation = await runtime.redeem(bound.assertion)
            for at in range(0, len(texts), 50):
                chunk = texts[at:at + 50]
                await runtime.save(key, generation, facts=chunk,
                                   embeddings=await embedder.embed(chunk))
    finally:
        await minter.revoke(grant)


@contextlib.asynccontextmanager
async def grants(controller: MainController, namespace: str, name: str
                 ) -> AsyncIterator[Grants]:
    from support import go_controller_main

    async with await psycopg.AsyncConnection.connect(controller.grants_dsn,
                                                     autocommit=True) as conn:
        yield Grants(conn, namespace, name, go_controller_main.SCHEMA)


@contextlib.contextmanager
def controller(admin_dsn: str, *, local_server: str, env: dict[str, str],
               database: str = DATABASE) -> Iterator[MainController]:
    """The compiled main controller on a fresh ``database`` of ``admin_dsn``'s cluster
    (``admin_dsn``: the superuser), dropped afterwards.  Raises ``go_controller.Unavailable``
    with the reason when it cannot be compiled here."""
    from support import go_controller_main
    from support.go_controller import BRIDGE_SERVICE_ACCOUNT, service_account_token

    from kagent_governed_memory.dev import (
        CONTROLLER_ROLE,
        GRANTS_ROLE,
        OWNER_ROLE,
        prepare_app_database,
    )

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    prepare_app_database(make_conninfo(admin_dsn, dbname="postgres"), database)
    try:
        with go_controller_main.serve(
                make_conninfo(admin_dsn, dbname=database, user=CONTROLLER_ROLE),
                migrate_dsn=make_conninfo(admin_dsn, dbname=database, user=OWNER_ROLE),
                local_server=local_server, env=env) as process:
            yield MainController(
                url=process.url,
                bridge_token=service_account_token(*BRIDGE_SERVICE_ACCOUNT),
                grants_dsn=make_conninfo(admin_dsn, dbname=database, user=GRANTS_ROLE))
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
