"""The base every part of ``GovernedMemoryStore`` stands on: the pool, the connection (with
pgvector registered), the statement runners and the checks each operation starts with.

``GovernedMemoryStore`` (``_store``) is this base plus its parts, each a subclass of it: the
runtime operations (``_runtime``), erasure (``_erasure``) and the registry of policies and
logins (``_policies``).  Database errors leave every runner as content-free errors with no
chained exception.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg.rows import AsyncRowFactory, DictRow, dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import (
    GovernanceError,
    InvalidInput,
    ReasonCode,
    ScopeDenied,
    StoreUnavailable,
    from_database_error,
)
from ..identity import MATRIX_KIND, Issuer, MatrixIssuer, Principal, ScopeKey
from ..policy import MemoryPolicy
from ..scope._request import current_request
from . import _sql
from ._pgtypes import _VectorArrayDumper, _Vectors
from ._sweeper import Sweeper
from ._validate import _servable

__all__: list[str] = []

_log = logging.getLogger("kagent_governed_memory.store")
_T = TypeVar("_T")
_R = TypeVar("_R")


class _StoreBase:
    """A pool of one login's connections and the statements it may run."""

    def __init__(
        self, pool: AsyncConnectionPool | None, *, local_server: str, policy: MemoryPolicy,
        issuers: tuple[Issuer, ...] = (),
    ) -> None:
        self._pool = pool
        self._local_server = local_server
        self.policy = policy
        self._matrix = MatrixIssuer(local_server)
        self._issuers: dict[tuple[str, str], Issuer] = {
            (self._matrix.issuer_kind, self._matrix.issuer): self._matrix}
        for issuer in issuers:
            self._add_issuer(issuer)
        self._vector_ready: weakref.WeakSet[Any] = weakref.WeakSet()
        self._sweeper: Sweeper | None = None
        self._privileged = False
        self._bound = False  # a runtime login: the bound statements (see _runtime)
        self._callable: frozenset[str] | None = None  # the entry points this login may run
        self.roles: frozenset[str] = frozenset()

    @property
    def local_server(self) -> str:
        """The local homeserver: the only server whose native principals are served (S5)."""
        return self._local_server

    async def _configure(self, conn: psycopg.AsyncConnection) -> None:
        await self._register_vector(conn)

    async def _register_vector(self, conn: psycopg.AsyncConnection) -> bool:
        if conn in self._vector_ready:
            return True
        info = await psycopg.types.TypeInfo.fetch(conn, "vector")
        if info is None:  # extension not created yet: migrate() will
            return False
        await register_vector_async(conn)
        conn.adapters.register_dumper(_Vectors, type(
            "VectorArrayDumper", (_VectorArrayDumper,), {"oid": info.array_oid,
                                                         "element_oid": info.oid}))
        self._vector_ready.add(conn)
        return True

    @property
    def issuers(self) -> tuple[Issuer, ...]:
        """The issuers whose principals this store serves: the ``MatrixIssuer`` of its local
        homeserver first, then those passed to ``open`` or registered through it."""
        return tuple(self._issuers.values())

    def _add_issuer(self, issuer: Issuer) -> None:
        if not isinstance(issuer, Issuer):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
        self._issuers[(issuer.issuer_kind, issuer.issuer)] = issuer

    def _issuer_for(self, principal: Principal, scope_id: str = "") -> Issuer:
        """The rules of ``principal``'s issuer.  A Matrix principal of another homeserver gets
        the local ``MatrixIssuer`` (which refuses it with its own reasons, in ADR 0023's
        order); a principal of an issuer the store does not know is ``issuer_not_registered``."""
        found = self._issuers.get((principal.issuer_kind, principal.issuer))
        if found is not None:
            return found
        if principal.issuer_kind == MATRIX_KIND:
            return self._matrix
        raise ScopeDenied(ReasonCode.ISSUER_NOT_REGISTERED,
                          **({"scope_id": scope_id} if scope_id else {}))

    def _servable(self, key: ScopeKey) -> None:
        if not isinstance(key, ScopeKey):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY, field="scope_key")
        _servable(key, self._issuer_for(key.principal, key.opaque_id))

    def _request(self, op: str, key: ScopeKey) -> list[Any]:
        """The leading ``jti`` argument of a bound statement, from the current request; none
        for an unbound (service) login."""
        if not self._bound:
            return []
        binding = current_request()
        assertion = binding.assertion if binding is not None else None
        if assertion is None or assertion.key != key:
            raise ScopeDenied(ReasonCode.REQUEST_NOT_REDEEMED, operation=op,
                              scope_id=key.opaque_id)
        return [assertion.jti]

    async def _one(self, op: str, name: str, params: list[Any]) -> tuple[Any, ...] | None:
        rows = await self._all(op, name, params)
        return rows[0] if rows else None

    async def _all(self, op: str, name: str, params: list[Any]) -> list[tuple[Any, ...]]:
        return await self._run(op, name, params, tuple_row)

    async def _one_named(self, op: str, name: str, params: list[Any]) -> DictRow | None:
        """Like ``_one``, the row read by column name (a statement with many columns)."""
        rows = await self._run(op, name, params, dict_row)
        return rows[0] if rows else None

    async def _all_named(self, op: str, name: str, params: list[Any]) -> list[DictRow]:
        """Like ``_all``, each row read by column name."""
        return await self._run(op, name, params, dict_row)

    async def _run(self, op: str, name: str, params: list[Any],
                   row_factory: AsyncRowFactory[_R]) -> list[_R]:
        sql = _sql.query(name)
        if self._callable is not None and _sql.function_of(name) not in self._callable:
            # refused before any round trip: this login's role may not run it
            raise StoreUnavailable(ReasonCode.ROLE_NOT_PERMITTED, operation=op)

        async def work(conn: psycopg.AsyncConnection) -> list[_R]:
            if not await self._register_vector(conn):
                raise StoreUnavailable(ReasonCode.SCHEMA_OUTDATED, operation=op)
            cur = psycopg.AsyncRawCursor(conn, row_factory=row_factory)
            await cur.execute(sql, params)
            return await cur.fetchall() if cur.description else []

        started = time.perf_counter()
        rows = await self._with_conn(op, work)
        _log.debug("memory op=%s rows=%d ms=%.2f", op, len(rows),
                   (time.perf_counter() - started) * 1000)
        return rows

    async def _with_conn(
        self, op: str, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]]
    ) -> _T:
        """Run ``work(conn)``; database errors leave as content-free errors with no chain.

        The translated error is raised *outside* the ``except`` block so that neither
        ``__cause__`` nor ``__context__`` keeps the original (whose text echoes row values).
        """
        failed: GovernanceError | None = None
        assert self._pool is not None, "create a store with: await GovernedMemoryStore.open(...)"
        try:
            async with self._pool.connection() as conn:
                return await work(conn)
        except GovernanceError as exc:
            failed = exc
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            failed = from_database_error(exc, op)
        failed.__context__ = None
        failed.__cause__ = None
        raise failed
