"""``GovernedMemoryStore``: the content store's boundary on PostgreSQL + pgvector.

Each governed operation is one call of a SQL function (one statement, one transaction, one
round trip) that checks the fence and acts; erasures add one verifying read in a new
transaction.  Python validates early and cheaply; the database is what enforces.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Self

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import (
    GovernanceError,
    InvalidInput,
    ReasonCode,
    StoreUnavailable,
    from_database_error,
)
from ..identity import Issuer, ScopeKey
from ..models import (
    ConsentReceipt,
    InspectPage,
    MemoryRecord,
    ScopeStatus,
    StoreReport,
)
from ..policy import PROTOTYPE_POLICY, MemoryPolicy
from ..scope._assertion import CLASSIFICATION
from . import _sql
from ._cursor import _CURSOR, _cursor_tag, _decode_cursor, _encode_cursor  # noqa: F401
from ._erasure import _Erasure
from ._logpin import PINNED_LOG_SETTINGS, pinned_dsn
from ._migrations import LATEST_VERSION, apply_migrations, schema_version
from ._pgtypes import _login_probe
from ._policies import _LOGIN_CHECK, _LOGIN_SETTINGS_AT, _check_policy, _Registry
from ._runtime import MAX_SEARCH_LIMIT, MAX_SEARCH_QUERIES, _audience, _RuntimeOps
from ._sweeper import Sweeper
from ._validate import (
    EMBEDDING_DIMENSION,
    _check_local_server,
    _key,
    _reason,
)

__all__ = ["EMBEDDING_DIMENSION", "MAX_PAGE_SIZE", "MAX_SEARCH_LIMIT", "MAX_SEARCH_QUERIES",
           "GovernedMemoryStore"]

_log = logging.getLogger("kagent_governed_memory.store")

MAX_PAGE_SIZE = 50
_PURPOSE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class GovernedMemoryStore(_RuntimeOps, _Registry, _Erasure):
    """Scope-keyed, consent-fenced memory on PostgreSQL.  Create with ``await open(...)``.

    The pool, connections and statement runners are the shared base's (``_base``); the
    runtime operations, erasure and the registry are its parts (``_runtime``, ``_erasure``,
    ``_policies``); lifecycle, consent, reads and reports are here."""

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
        issuers: Iterable[Issuer] = (),
    ) -> GovernedMemoryStore:
        """Open a pool (autocommit: every governed call is its own transaction).

        ``dsn`` logs in as a member of the role of its caller: ``kagent_memory_runtime`` (an
        agent runtime), ``kagent_memory_bridge`` (the bridge), ``kagent_memory_operator``
        (operator tooling), or the deprecated ``kagent_memory_service``; ``roles`` says which,
        and an operation the role lacks is refused before any round trip
        (``role_not_permitted``).  A superuser, a BYPASSRLS role or the schema's owner is
        refused with ``privileged_role`` unless ``privileged`` (operator tooling only: such a
        role can switch off every rule).  ``policy`` must be registered in the database under
        its version with the same limits (``policy_not_registered``, ``policy_mismatch``).
        The database records ``local_server`` on first open (a login that may configure it);
        a store configured for another server is refused.  Every connection pins the
        server-log settings of ``_logpin`` (libpq ``options``, after the DSN's own); one that
        does not hold them is refused with ``log_settings_unsafe``.  ``sweep_every`` seconds
        (default hourly, ``None`` for none) a background task deletes expired rows physically,
        starting now, when the login may sweep (operator, service, owner); one replica at a
        time.  ``issuers`` are the issuers besides the local homeserver's Matrix issuer whose
        principals this store serves (e.g. an ``OidcIssuer``); the database serves a principal
        only while its issuer is registered (``register_issuer``, an operator's step).
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
        if isinstance(issuers, str | bytes) or not isinstance(issuers, Iterable):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuers")
        store = cls(None, local_server=local_server, policy=policy, issuers=tuple(issuers))
        store._privileged = privileged
        pool = store._pool = AsyncConnectionPool(
            conninfo=pinned_dsn(dsn),  # the server-log settings win over role defaults
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
        # The sweep is the operator's (and the deprecated service role's): a runtime or bridge
        # store leaves it to the controller, an operator store or a CronJob.
        if sweep_every is not None and (store._callable is None
                                        or "memory_sweep" in store._callable):
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

    async def _check_role(self, conn: psycopg.AsyncConnection, privileged: bool) -> None:
        """Refuse a login that could switch the rules off; learn which governed roles it holds
        and which entry points it may run; record/compare the local server; check that the
        database holds this store's policy."""
        cur = await conn.execute(_LOGIN_CHECK)
        row = await cur.fetchone()
        if row is None or (any(row[:3]) and not privileged):
            raise InvalidInput(ReasonCode.PRIVILEGED_ROLE)
        for (name, _safe), safe in zip(PINNED_LOG_SETTINGS, row[_LOGIN_SETTINGS_AT:],
                                          strict=True):
            if safe is not True:  # the name of a setting, never its value
                raise InvalidInput(ReasonCode.LOG_SETTINGS_UNSAFE, setting=name)
        if await schema_version(conn) is None:
            return  # not migrated yet: every operation says schema_outdated until it is
        self.roles = frozenset(row[3])
        callable_ = frozenset(row[4])
        self._callable = None if any(row[:3]) else callable_
        self._bound = (self._callable is not None and "memory_save" not in callable_
                       and "memory_save_bound" in callable_)
        raw = psycopg.AsyncRawCursor(conn)
        if self._callable is None or "memory_configure" in callable_:
            await raw.execute(_sql.query("ConfigureMemoryStore"), [self._local_server])
        else:
            await raw.execute(_sql.query("GetMemoryLocalServer"), [])
        got = await raw.fetchone()
        if got is None or got[0] != self._local_server:
            raise InvalidInput(ReasonCode.LOCAL_SERVER_MISMATCH)
        await raw.execute(_sql.query("GetMemoryPolicy"), [self.policy.version])
        _check_policy(await raw.fetchone(), self.policy)

    # -- migrations -----------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Make sure the governed schema is current; returns the versions applied.

        On an application store (a ``kagent_memory_service`` member) this applies nothing: a
        current schema returns ``[]``, an old or missing one raises ``schema_outdated`` naming
        the command to run as the owner.  On a ``privileged`` store opened with the owner's
        DSN it applies the missing migrations (see ``kagent_governed_memory.store.migrate``).
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
        (default: the audience of the principal's issuer -- the local homeserver for a Matrix
        principal, ``principal`` for an OIDC one).  A request with another classification or
        audience gets no memory (ADR decision 6)."""
        self._servable(key)
        if not isinstance(purpose, str) or not _PURPOSE.fullmatch(purpose):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="purpose")
        if not isinstance(classification, str) or not CLASSIFICATION.fullmatch(classification):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="classification")
        audience = _audience(output_audience, self._issuer_for(key.principal))
        p = self.policy
        row = await self._one_named(
            "grant",
            "GrantMemoryScopeByIssuer",
            [*_key(key), purpose, p.version, p.embedding_dimension, classification, audience],
        )
        assert row is not None
        return ConsentReceipt(
            scope_id=key.opaque_id,
            generation=row["generation"],
            purpose=purpose,
            policy_version=p.version,
            granted_at=row["granted_at"],
            expires_at=row["expires_at"],
        )

    async def generation(self, key: ScopeKey, *, classification: str = "personal",
                         output_audience: Sequence[str] | None = None) -> int | None:
        """The current valid generation, or ``None`` (missing, disabled or expired consent, or
        consent given for another classification or output audience — default: the audience of
        the principal's issuer — than the ones passed, or a principal whose issuer is disabled)."""
        self._servable(key)
        if not isinstance(classification, str) or not CLASSIFICATION.fullmatch(classification):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="classification")
        audience = _audience(output_audience, self._issuer_for(key.principal))
        row = await self._one("generation", "GetMemoryGenerationByIssuer",
                              [*_key(key), self.policy.version, classification, audience])
        return None if row is None else row[0]

    async def inspect(
        self, key: ScopeKey, *, page_size: int = 10, cursor: str | None = None
    ) -> InspectPage:
        """The subject's own entries, newest first, in bounded pages (U2)."""
        self._servable(key)
        if (not isinstance(page_size, int) or isinstance(page_size, bool)
                or not 0 < page_size <= MAX_PAGE_SIZE):
            raise InvalidInput(ReasonCode.INVALID_PAGE_SIZE)
        after_created, after_id = (None, None) if cursor is None else _decode_cursor(key, cursor)
        rows = await self._all_named(
            "inspect",
            "InspectMemoryEntriesByIssuer",
            [*_key(key), after_created, after_id, page_size + 1],
        )
        entries = tuple(
            MemoryRecord(id=str(r["id"]), text=r["content"], scope=key,
                         created_at=r["created_at"], expires_at=r["expires_at"])
            for r in rows[:page_size]
        )
        next_cursor = None
        if len(rows) > page_size:
            last = rows[page_size - 1]
            next_cursor = _encode_cursor(key, last["created_at"], last["id"])
        return InspectPage(entries=entries, next_cursor=next_cursor)

    async def status(self, key: ScopeKey) -> ScopeStatus:
        self._servable(key)
        row = await self._one_named("status", "GetMemoryScopeStatusByIssuer", _key(key))
        if row is None:
            return ScopeStatus(scope_id=key.opaque_id, enabled=False)
        return ScopeStatus(
            scope_id=key.opaque_id,
            enabled=row["enabled"],
            purpose=row["purpose"],
            policy_version=row["policy_version"],
            generation=row["generation"],
            consent_expires_at=row["consent_expires_at"],
            max_ttl=row["max_ttl"],
            entry_cap=row["entry_cap"],
            entry_count=row["entry_count"],
            last_verified_erasure_at=row["last_verified_erasure_at"],
            failure_reason=_reason(row["failure_reason"]),
        )

    async def report(self) -> StoreReport:
        """Content-free aggregates and invariant counts over every scope (operators)."""
        row = await self._one_named("report", "GetMemoryStoreReport", [])
        assert row is not None
        ids = ("overdue_scope_ids", "violating_scope_ids")
        values: dict[str, Any] = {n: int(row[n]) for n in StoreReport.model_fields
                                  if n not in ids}
        values.update({n: tuple(str(u) for u in row[n] or ()) for n in ids})
        return StoreReport(**values)

    async def sweep(self) -> int:
        """Physically delete expired rows (L3); they were already unreadable (B2)."""
        row = await self._one("sweep", "SweepExpiredMemory", [])
        return int(row[0]) if row else 0
