"""``GovernedMemoryStore``: the content store's boundary on PostgreSQL + pgvector.

Each governed operation is one call of a SQL function (one statement, one transaction, one
round trip) that checks the fence and acts; erasures add one verifying read in a new
transaction.  Python validates early and cheaply; the database is what enforces.
"""

from __future__ import annotations

import logging
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Self, TypeVar

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import _sql
from ._buckets import admission_buckets
from ._cursor import _CURSOR, _cursor_tag, _decode_cursor, _encode_cursor  # noqa: F401
from ._erasure import _Erasure
from ._pgtypes import _login_probe, _VectorArrayDumper, _Vectors
from ._validate import (
    EMBEDDING_DIMENSION,
    _check_limit,
    _check_local_server,
    _check_queries,
    _check_save,
    _generation,
    _key,
    _reason,
    _servable,
    _vector,
)
from .assertion import CLASSIFICATION, ScopeAssertion
from .assertion import _audience as _servers
from .errors import (
    AdmissionDenied,
    GovernanceError,
    InvalidInput,
    ReasonCode,
    StoreUnavailable,
    from_database_error,
)
from .identity import ScopeKey
from .migrations import LATEST_VERSION, apply_migrations, schema_version
from .models import (
    ConsentReceipt,
    InspectPage,
    MemoryRecord,
    ScopeStatus,
    StoreReport,
)
from .policy import PROTOTYPE_POLICY, MemoryPolicy
from .sweeper import Sweeper

__all__ = ["EMBEDDING_DIMENSION", "MAX_PAGE_SIZE", "MAX_SEARCH_LIMIT", "MAX_SEARCH_QUERIES",
           "GovernedMemoryStore"]

_log = logging.getLogger("kagent_governed_memory.store")
_T = TypeVar("_T")

MAX_PAGE_SIZE = 50
MAX_SEARCH_LIMIT = 50
MAX_SEARCH_QUERIES = 8  # query vectors per search_many: one prefetch's sub-queries
_PURPOSE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_DISABLE_ATTEMPTS = 3
# Can this login switch the rules off?  Superuser, BYPASSRLS, or a member of the tables' owner.
_ROLE_CHECK = """
SELECT r.rolsuper, r.rolbypassrls,
       coalesce((SELECT pg_has_role(current_user, c.relowner, 'MEMBER')
                   FROM pg_class c WHERE c.oid = to_regclass('memory_entry')), false)
  FROM pg_roles r WHERE r.rolname = current_user
"""


class GovernedMemoryStore(_Erasure):
    """Scope-keyed, consent-fenced memory on PostgreSQL.  Create with ``await open(...)``."""

    def __init__(
        self, pool: AsyncConnectionPool | None, *, local_server: str, policy: MemoryPolicy
    ) -> None:
        self._pool = pool
        self._local_server = local_server
        self.policy = policy
        self._vector_ready: weakref.WeakSet[Any] = weakref.WeakSet()
        self._sweeper: Sweeper | None = None
        self._privileged = False

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        local_server: str,
        policy: MemoryPolicy = PROTOTYPE_POLICY,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
        privileged: bool = False,
        sweep_every: float | None = 3600.0,
    ) -> GovernedMemoryStore:
        """Open a pool (autocommit: every governed call is its own transaction).

        ``dsn`` logs in as a member of ``kagent_memory_service``.  A superuser, a BYPASSRLS
        role or the schema's owner is refused with ``privileged_role`` unless ``privileged``
        (operator tooling only: such a role can switch off every rule).  The database records
        ``local_server`` on first open; a store configured for another server is refused.
        ``sweep_every`` seconds (default hourly, ``None`` for none) a background task deletes
        expired rows physically, starting now; one replica sweeps at a time.
        """
        _check_local_server(local_server)
        if sweep_every is not None and (isinstance(sweep_every, bool)
                                        or not isinstance(sweep_every, int | float)
                                        or not 1.0 <= sweep_every <= 3600.0):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="sweep_every")
        if not isinstance(policy, MemoryPolicy):
            raise InvalidInput(ReasonCode.INVALID_POLICY)
        if not isinstance(dsn, str):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="dsn")
        failed: GovernanceError | None = None
        store = cls(None, local_server=local_server, policy=policy)
        store._privileged = privileged
        pool = store._pool = AsyncConnectionPool(
            conninfo=dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            configure=store._configure,
            open=False,
            timeout=timeout,
            name="kagent-governed-memory",
        )
        try:
            await pool.open(wait=True, timeout=timeout)
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            failed = from_database_error(exc, "open")
        if failed is not None and failed.reason is ReasonCode.STORE_UNAVAILABLE:
            failed = await _login_probe(dsn, timeout) or failed  # the pool hides why
        if failed is None:
            try:
                await store._with_conn("open", lambda conn: store._check_role(conn, privileged))
            except GovernanceError as exc:
                failed = exc
        if failed is not None:
            await pool.close()
            failed.__context__ = failed.__cause__ = None
            raise failed
        if sweep_every is not None:
            store._sweeper = Sweeper(store.sweep, every=sweep_every)
        return store

    async def close(self) -> None:
        if self._sweeper is not None:
            await self._sweeper.stop()
        if self._pool is not None:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"GovernedMemoryStore(policy={self.policy.version!r})"

    @property
    def local_server(self) -> str:
        """The local homeserver: the only server whose native principals are served (S5)."""
        return self._local_server

    async def _configure(self, conn: psycopg.AsyncConnection) -> None:
        await self._register_vector(conn)

    async def _check_role(self, conn: psycopg.AsyncConnection, privileged: bool) -> None:
        """Refuse a login that could switch the rules off; record/compare the local server."""
        cur = await conn.execute(_ROLE_CHECK)
        row = await cur.fetchone()
        if row is None or (any(row) and not privileged):
            raise InvalidInput(ReasonCode.PRIVILEGED_ROLE)
        if await schema_version(conn) is None:
            return  # not migrated yet: every operation says schema_outdated until it is
        cur = psycopg.AsyncRawCursor(conn)
        await cur.execute(_sql.query("ConfigureMemoryStore"), [self._local_server])
        got = await cur.fetchone()
        if got is None or got[0] != self._local_server:
            raise InvalidInput(ReasonCode.LOCAL_SERVER_MISMATCH)

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

    # -- migrations -----------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Make sure the governed schema is current; returns the versions applied.

        On an application store (a ``kagent_memory_service`` member) this applies nothing: a
        current schema returns ``[]``, an old or missing one raises ``schema_outdated`` naming
        the command to run as the owner.  On a ``privileged`` store opened with the owner's
        DSN it applies the missing migrations (see ``kagent_governed_memory.migrate``).
        """

        async def work(conn: psycopg.AsyncConnection) -> list[int]:
            if await schema_version(conn) == LATEST_VERSION:
                return []
            if not self._privileged:
                raise StoreUnavailable(ReasonCode.SCHEMA_OUTDATED, operation="migrate")
            applied = await apply_migrations(conn, self._local_server)
            self._vector_ready.discard(conn)
            await self._register_vector(conn)
            return applied

        return await self._with_conn("migrate", work)

    async def schema_version(self) -> int | None:
        """The governed schema's version, or ``None`` before the first migration."""
        return await self._with_conn("schema_version", schema_version)

    # -- consent --------------------------------------------------------------------------

    async def grant(self, key: ScopeKey, *, purpose: str, classification: str = "personal",
                    output_audience: Sequence[str] | None = None) -> ConsentReceipt:
        """Record explicit consent for ``purpose`` under this store's policy (C1), for
        conversations of ``classification`` whose replies reach exactly ``output_audience``
        (default: the local homeserver only).  A request with another classification or
        audience gets no memory (ADR decision 6)."""
        self._servable(key)
        if not isinstance(purpose, str) or not _PURPOSE.fullmatch(purpose):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="purpose")
        if not isinstance(classification, str) or not CLASSIFICATION.fullmatch(classification):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="classification")
        audience = _audience(output_audience, self._local_server)
        p = self.policy
        row = await self._one(
            "grant",
            "GrantMemoryScope",
            [*_key(key), purpose, p.version, p.max_ttl, p.entry_cap, p.fact_max_bytes,
             p.consent_max_age, p.embedding_dimension, classification, audience],
        )
        assert row is not None
        return ConsentReceipt(
            scope_id=key.opaque_id,
            generation=row[1],
            purpose=purpose,
            policy_version=p.version,
            granted_at=row[2],
            expires_at=row[3],
        )

    async def generation(self, key: ScopeKey, *, classification: str | None = None,
                         output_audience: Sequence[str] | None = None) -> int | None:
        """The current valid generation, or ``None`` (missing, disabled or expired consent, or
        consent given for another classification or output audience than the ones passed)."""
        self._servable(key)
        audience = None if output_audience is None else _audience(output_audience,
                                                                   self._local_server)
        row = await self._one("generation", "GetMemoryGeneration",
                              [*_key(key), self.policy.version, classification, audience])
        return None if row is None else row[0]

    async def redeem(self, assertion: ScopeAssertion) -> int | None:
        """Consume ``assertion`` (its ``jti``, once on any replica) and return the generation
        its request captures: ``None`` without an enabled, unexpired consent for its key,
        policy version, classification and output audience.  One round trip.

        Raises ``ScopeDenied`` (``assertion_replayed``, or ``assertion_expired`` by the
        database's clock) and the store's usual errors."""
        if not isinstance(assertion, ScopeAssertion):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion")
        key = assertion.key
        self._servable(key)
        row = await self._one(
            "redeem", "RedeemScopeAssertion",
            [assertion.jti, assertion.expires_at, *_key(key), self.policy.version,
             assertion.classification, _audience(assertion.audience, self._local_server)],
        )
        return None if row is None else row[0]

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False, policy: MemoryPolicy | None = None,
                    now: datetime | None = None) -> None:
        """Admit ``units`` of work (and one explicit operation when ``explicit``) against the
        budgets of ``policy`` (default: this store's), fenced in the same transaction, or
        consume nothing and raise ``AdmissionDenied`` (see ``admission``).  ``now`` replaces
        the database's clock (tests)."""
        self._servable(key)
        gen = _generation(generation)
        buckets = admission_buckets(key, policy or self.policy, units=units, explicit=explicit)
        names, costs, capacities, refills, periods = (list(c) for c in zip(*buckets, strict=True))
        row = await self._one(
            "admit", "AdmitMemoryWork",
            [*_key(key), gen, self.policy.version, names, costs, capacities, refills, periods,
             now],
        )
        refused = int(row[0]) if row else 1
        if refused:
            reason = ReasonCode.BUDGET_EXHAUSTED if refused == 1 else ReasonCode.RATE_LIMITED
            raise AdmissionDenied(reason, scope_id=key.opaque_id)

    # -- content --------------------------------------------------------------------------

    async def save(
        self,
        key: ScopeKey,
        generation: int | None,
        *,
        facts: Sequence[str],
        embeddings: Sequence[Sequence[float]],
    ) -> list[str]:
        """Store facts (all or none) under the captured generation; returns opaque entry ids."""
        self._servable(key)
        gen = _generation(generation)
        p = self.policy
        vectors = _check_save(facts, embeddings, entry_cap=p.entry_cap,
                              fact_max_bytes=p.fact_max_bytes, dimension=p.embedding_dimension)
        rows = await self._all(
            "save", "SaveMemoryEntries",
            [*_key(key), gen, self.policy.version, list(facts), vectors]
        )
        return [str(r[0]) for r in rows]

    async def search(
        self, key: ScopeKey, generation: int | None, embedding: Sequence[float], *, limit: int = 5
    ) -> list[MemoryRecord]:
        """Exact cosine top-``limit`` among the scope's unexpired entries, fenced (C3, B2)."""
        self._servable(key)
        gen = _generation(generation)
        _check_limit(limit, MAX_SEARCH_LIMIT)
        vec = _vector(embedding, self.policy.embedding_dimension)
        rows = await self._all("search", "SearchMemoryEntries",
                               [*_key(key), gen, self.policy.version, vec, limit])
        return [
            MemoryRecord(id=str(r[0]), text=r[1], scope=key, created_at=r[2], expires_at=r[3],
                         distance=float(r[4]))
            for r in rows
        ]

    async def search_many(
        self, key: ScopeKey, generation: int | None, embeddings: Sequence[Sequence[float]], *,
        limit: int = 5,
    ) -> list[list[MemoryRecord]]:
        """``search`` for 1..``MAX_SEARCH_QUERIES`` query vectors in one statement (one round
        trip, the scope fenced once): element ``i`` is exactly what ``search(key, generation,
        embeddings[i], limit=limit)`` returns, and the whole call is refused if any would be."""
        self._servable(key)
        gen = _generation(generation)
        vectors = _check_queries(embeddings, limit, dimension=self.policy.embedding_dimension,
                                 max_queries=MAX_SEARCH_QUERIES, max_limit=MAX_SEARCH_LIMIT)
        rows = await self._all("search", "SearchMemoryEntriesMany",
                               [*_key(key), gen, self.policy.version, _Vectors(vectors), limit])
        out: list[list[MemoryRecord]] = [[] for _ in vectors]
        for r in rows:
            out[r[0] - 1].append(MemoryRecord(id=str(r[1]), text=r[2], scope=key, created_at=r[3],
                                              expires_at=r[4], distance=float(r[5])))
        return out

    async def inspect(
        self, key: ScopeKey, *, page_size: int = 10, cursor: str | None = None
    ) -> InspectPage:
        """The subject's own entries, newest first, in bounded pages (U2)."""
        self._servable(key)
        if (not isinstance(page_size, int) or isinstance(page_size, bool)
                or not 0 < page_size <= MAX_PAGE_SIZE):
            raise InvalidInput(ReasonCode.INVALID_PAGE_SIZE)
        after_created, after_id = (None, None) if cursor is None else _decode_cursor(key, cursor)
        rows = await self._all(
            "inspect",
            "InspectMemoryEntries",
            [*_key(key), after_created, after_id, page_size + 1],
        )
        entries = tuple(
            MemoryRecord(id=str(r[0]), text=r[1], scope=key, created_at=r[2], expires_at=r[3])
            for r in rows[:page_size]
        )
        next_cursor = None
        if len(rows) > page_size:
            last = rows[page_size - 1]
            next_cursor = _encode_cursor(key, last[2], last[0])
        return InspectPage(entries=entries, next_cursor=next_cursor)

    async def status(self, key: ScopeKey) -> ScopeStatus:
        self._servable(key)
        row = await self._one("status", "GetMemoryScopeStatus", _key(key))
        if row is None:
            return ScopeStatus(scope_id=key.opaque_id, enabled=False)
        return ScopeStatus(
            scope_id=key.opaque_id,
            enabled=row[0],
            purpose=row[1],
            policy_version=row[2],
            generation=row[3],
            consent_expires_at=row[4],
            max_ttl=row[5],
            entry_cap=row[6],
            entry_count=row[7],
            last_verified_erasure_at=row[8],
            failure_reason=_reason(row[9]),
        )

    async def report(self) -> StoreReport:
        """Content-free aggregates and invariant counts over every scope (operators)."""
        row = await self._one("report", "GetMemoryStoreReport", [])
        assert row is not None
        *counts, overdue_ids, violating_ids = row
        names = [n for n in StoreReport.model_fields
                 if n not in ("overdue_scope_ids", "violating_scope_ids")]
        values: dict[str, Any] = {n: int(v) for n, v in zip(names, counts, strict=True)}
        return StoreReport(**values, overdue_scope_ids=tuple(str(u) for u in overdue_ids or ()),
                           violating_scope_ids=tuple(str(u) for u in violating_ids or ()))

    async def sweep(self) -> int:
        """Physically delete expired rows (L3); they were already unreadable (B2)."""
        row = await self._one("sweep", "SweepExpiredMemory", [])
        return int(row[0]) if row else 0

    # -- internals ------------------------------------------------------------------------

    def _servable(self, key: ScopeKey) -> None:
        _servable(key, self._local_server)

    async def _one(self, op: str, name: str, params: list[Any]) -> tuple[Any, ...] | None:
        rows = await self._all(op, name, params)
        return rows[0] if rows else None

    async def _all(self, op: str, name: str, params: list[Any]) -> list[tuple[Any, ...]]:
        sql = _sql.query(name)

        async def work(conn: psycopg.AsyncConnection) -> list[tuple[Any, ...]]:
            if not await self._register_vector(conn):
                raise StoreUnavailable(ReasonCode.SCHEMA_OUTDATED, operation=op)
            cur = psycopg.AsyncRawCursor(conn)
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


def _audience(value: Sequence[str] | None, local_server: str) -> list[str]:
    """Sorted, de-duplicated homeserver names (default: the local one); refused if malformed."""
    servers = _servers([local_server] if value is None else value)
    if servers is None:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="output_audience")
    return list(servers)


