"""The erasure half of ``GovernedMemoryStore``: forget one entry, forget all, withdraw,
offboard — each a delete followed by a verifying read, and withdrawal's three steps (disable and
advance committed first, then clear, then verify; a failure leaves the scope disabled with a
content-free reason, C4/C5)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from ..errors import ErasureFailed, GovernanceError, InvalidInput, ReasonCode, StoreUnavailable
from ..identity import AgentIdentity, MemoryScope, Principal, ScopeKey
from ..models import ErasureReceipt, ForgetReceipt, OffboardReport, ScopeOutcome
from ._base import _StoreBase
from ._validate import _key, _parse_entry_id

_log = logging.getLogger("kagent_governed_memory.store")
_DISABLE_ATTEMPTS = 3
_LOCK_NOT_AVAILABLE = "55P03"  # the lock bound of migration 000013 was reached


class _Erasure(_StoreBase):
    """A part of ``GovernedMemoryStore``: erasure, on the shared base's statements."""

    async def forget(self, key: ScopeKey, entry_id: str) -> ForgetReceipt:
        """Delete one entry and verify it unreadable (U3).  An absent, foreign, malformed or
        already-forgotten id gives the same receipt with ``deleted=0``: no existence oracle.

        A runtime login forgets within its current request's scope only (the bound
        statement); verifying is the bridge's step, so its receipt says ``verified=False``."""
        self._servable(key)
        target = _parse_entry_id(entry_id)
        if self._bound:
            row = await self._one("forget", "ForgetMemoryEntryBoundByIssuer",
                                  [*self._request("forget", key), *_key(key), None, target])
            return ForgetReceipt(scope_id=key.opaque_id, generation=row[0] if row else None,
                                 deleted=int(row[1]) if row else 0, verified=False,
                                 at=datetime.now(UTC))
        row = await self._one("forget", "ForgetMemoryEntryByIssuer", [*_key(key), target])
        deleted = int(row[1]) if row else 0
        generation, at = await self._verify(key, None, target, complete=False)
        return ForgetReceipt(scope_id=key.opaque_id, generation=generation, deleted=deleted,
                             verified=True, at=at)

    async def forget_all(self, key: ScopeKey) -> ErasureReceipt:
        """Clear every entry and advance the generation; the scope stays enabled (U4)."""
        self._servable(key)
        row = await self._one("forget_all", "ClearMemoryScopeByIssuer", [*_key(key), True])
        if row is None:
            return self._nothing_stored(key)
        generation, deleted = row
        generation, at = await self._verify(key, generation, None, complete=True)
        return ErasureReceipt(scope_id=key.opaque_id, generation=generation,
                              deleted=int(deleted), verified=True, at=at)

    async def withdraw(self, key: ScopeKey) -> ErasureReceipt:
        """Disable + advance the generation (committed first), then delete, then verify (C4).

        Any failure after the disable leaves the scope disabled with a content-free
        ``failure_reason`` (C5) and raises ``ErasureFailed``; call ``withdraw`` again.
        """
        self._servable(key)
        row = await self._disable(key)
        if row is None:
            return self._nothing_stored(key)
        deleted, generation, at = await self._clear_and_verify(key, generation=row[1])
        return ErasureReceipt(scope_id=key.opaque_id, generation=generation, deleted=deleted,
                              verified=True, at=at)

    async def offboard(self, principal: Principal) -> OffboardReport:
        """Offboard ``principal`` (L2): block its grants and disable every scope of it in one
        transaction, then clear and verify each scope, then delete the scope rows that were
        verified clean, so no governed row names the principal or its rooms any more.  The
        block stays until an operator lifts it (``unblock``); a failed scope is kept and
        reported, and ``offboard`` may be run again.  An operator path: a ``privileged`` store
        on the owner's DSN (the service role may not enumerate a principal's keys).  Any
        issuer's principal, registered or not (an issuer's principals stay offboardable after
        it is disabled)."""
        if not isinstance(principal, Principal):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY)
        who = [principal.issuer_kind, principal.issuer, principal.subject]
        rows = await self._all("offboard", "DisablePrincipalMemoryScopesByIssuer", who)
        outcomes: list[ScopeOutcome] = []
        for _scope_uuid, namespace, agent, kind, ref, generation in rows:
            key = ScopeKey(
                principal=principal,
                agent=AgentIdentity(namespace=namespace, name=agent),
                scope=MemoryScope(kind=kind, room_id=ref or None),
            )
            try:
                deleted, _, _ = await self._clear_and_verify(key, generation=generation)
            except GovernanceError as exc:
                outcomes.append(ScopeOutcome(scope_id=key.opaque_id, outcome=exc.reason))
                continue
            outcomes.append(ScopeOutcome(scope_id=key.opaque_id, outcome="cleared",
                                         deleted=deleted))
        await self._one("offboard", "PurgePrincipalMemoryScopesByIssuer", who)
        return OffboardReport(principal_id=principal.opaque_id, scopes=tuple(outcomes))

    async def unblock(self, principal: Principal) -> bool:
        """Lift an offboarding block so the principal may consent again.  Owner only (a
        ``privileged`` store): the service role cannot undo an offboarding."""
        if not isinstance(principal, Principal):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY)
        row = await self._one("unblock", "UnblockMemoryPrincipalByIssuer",
                              [principal.issuer_kind, principal.issuer, principal.subject])
        return bool(row and row[0])

    @staticmethod
    def _nothing_stored(key: ScopeKey) -> ErasureReceipt:
        return ErasureReceipt(scope_id=key.opaque_id, generation=None, deleted=0, verified=True,
                              at=datetime.now(UTC))

    async def _disable(self, key: ScopeKey) -> tuple[Any, ...] | None:
        """Withdrawal step 1, retried on transient failures; unknown outcome → ErasureFailed.

        A lock the database could not take within its bound (55P03: migration 000013 already
        waited, ended the governed-login backends holding it and tried again) is not retried
        here: it is reported at once, and nothing changed (``step="disable"``)."""
        for attempt in range(_DISABLE_ATTEMPTS):
            try:
                return await self._one("withdraw", "DisableMemoryScopeByIssuer", _key(key))
            except StoreUnavailable as exc:
                if exc.reason is ReasonCode.ROLE_NOT_PERMITTED:
                    raise  # refused before any round trip: nothing to retry
                if attempt + 1 == _DISABLE_ATTEMPTS:
                    break
                await asyncio.sleep(0.05 * 2**attempt)
            except GovernanceError as exc:
                if exc.ids.get("sqlstate") != _LOCK_NOT_AVAILABLE:
                    raise
                break
        raise ErasureFailed(ReasonCode.ERASURE_FAILED, scope_id=key.opaque_id, step="disable")

    async def _clear_and_verify(self, key: ScopeKey, *, generation: int) -> tuple[int, int, datetime]:
        """Steps 2–3 of a withdrawal on an already disabled scope; records failures (C5)."""
        failure: ReasonCode | None = None
        result: tuple[int, int, datetime] | None = None
        try:
            row = await self._one("erase", "ClearMemoryScopeByIssuer", [*_key(key), False])
            deleted = int(row[1]) if row else 0
            gen, at = await self._verify(key, generation, None, complete=True)
            result = (deleted, gen if gen is not None else generation, at)
        except ErasureFailed as exc:
            failure = exc.reason
        except GovernanceError:
            failure = ReasonCode.ERASURE_FAILED
        if result is not None:
            return result
        assert failure is not None
        if failure is not ReasonCode.VERIFICATION_FAILED:
            await self._record_failure(key, failure)
        _log.warning("erasure failed reason=%s scope=%s", failure.value, key.opaque_id)
        raise ErasureFailed(failure, scope_id=key.opaque_id)

    async def _record_failure(self, key: ScopeKey, reason: ReasonCode) -> None:
        """Best effort: the durable 'erasure_pending' marker from step 1 already holds."""
        try:
            await self._one("record_failure", "RecordMemoryScopeFailureByIssuer",
                            [*_key(key), reason.value])
        except GovernanceError:
            _log.warning("failure not recorded reason=%s scope=%s", reason.value, key.opaque_id)

    async def _verify(
        self, key: ScopeKey, generation: int | None, entry_id: uuid.UUID | None, *, complete: bool
    ) -> tuple[int | None, datetime]:
        row = await self._one(
            "verify", "VerifyMemoryErasureByIssuer", [*_key(key), generation, entry_id, complete]
        )
        if row is None or row[1] is None:
            raise ErasureFailed(ReasonCode.VERIFICATION_FAILED, scope_id=key.opaque_id)
        return row[0], row[1]
