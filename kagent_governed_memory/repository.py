"""The operations governed memory is made of, as typed protocols: one contract, two backends.

* ``GovernedMemoryStore`` (``store``) implements all of them directly on PostgreSQL: the
  application's login calls the governed SQL functions (direct mode).
* Over the patched kagent controller's governed HTTP API (kagent mode), where the agent pod
  holds no database credentials, they are split by who may call them, because the controller
  authorises them separately: ``KagentControllerStore`` (``kagent``) is the agent runtime's
  side (its ServiceAccount token and the request's scope assertion) and ``KagentBridgeStore``
  the bridge's (the bridge's ServiceAccount token).

``GovernedMemoryService`` needs a ``RuntimeRepository``; ``MemoryControls`` a
``ControlRepository``; the operator commands (``sweep``, ``verify``) an ``OperatorRepository``,
which only the database offers (the controller sweeps on its own timer).

Optional capabilities are protocols too, found with ``isinstance``: ``RedeemAdmitRepository``
(redeem a request and admit its first work in one call), ``ClockedAdmitRepository`` (admission
on a caller's clock: the direct store, for tests and simulations) and, for an admission object,
``AdmissionWithRedemption``.  ``RequestRecorder`` is what a bridge records its relayed requests
with (the direct store; in kagent mode the controller verifies the signature itself).

Every implementation raises the same ``GovernanceError`` subclasses with the same reason codes,
and none carries memory content in an error, a log line or a metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from .errors import ReasonCode
from .identity import Principal, ScopeKey
from .models import (
    ConsentReceipt,
    ErasureReceipt,
    ForgetReceipt,
    InspectPage,
    MemoryRecord,
    OffboardReport,
    ScopeStatus,
    StoreReport,
)
from .policy import MemoryPolicy
from .scope._assertion import ScopeAssertion

__all__ = [
    "AdmissionWithRedemption",
    "ClockedAdmitRepository",
    "ControlRepository",
    "MemoryRepository",
    "OperatorRepository",
    "RedeemAdmitRepository",
    "RequestRecorder",
    "RuntimeRepository",
]

MAX_SEARCH_QUERIES = 8  # query vectors per search_many: one prefetch's sub-queries


@runtime_checkable
class RuntimeRepository(Protocol):
    """What a running agent does with memory, for the request bound by ``memory_request``."""

    @property
    def policy(self) -> MemoryPolicy: ...

    @property
    def local_server(self) -> str: ...

    async def redeem(self, assertion: ScopeAssertion) -> int | None:
        """Consume the request's assertion (single use) and return the consent generation the
        request captures, or ``None`` without a valid consent for its key, classification and
        output audience."""
        ...

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False) -> None:
        """Consume ``units`` of the scope's budget (all or nothing, fenced), or raise
        ``AdmissionDenied``."""
        ...

    async def save(self, key: ScopeKey, generation: int | None, *, facts: Sequence[str],
                   embeddings: Sequence[Sequence[float]]) -> list[str]: ...

    async def search(self, key: ScopeKey, generation: int | None, embedding: Sequence[float], *,
                     limit: int = 5) -> list[MemoryRecord]: ...

    async def search_many(self, key: ScopeKey, generation: int | None,
                          embeddings: Sequence[Sequence[float]], *, limit: int = 5
                          ) -> list[list[MemoryRecord]]: ...

    async def forget(self, key: ScopeKey, entry_id: str) -> ForgetReceipt: ...


@runtime_checkable
class ControlRepository(Protocol):
    """The subject's own controls (the bridge's control-room commands) and offboarding."""

    @property
    def policy(self) -> MemoryPolicy: ...

    @property
    def local_server(self) -> str: ...

    async def grant(self, key: ScopeKey, *, purpose: str, classification: str = "personal",
                    output_audience: Sequence[str] | None = None) -> ConsentReceipt: ...

    async def generation(self, key: ScopeKey, *, classification: str = "personal",
                         output_audience: Sequence[str] | None = None) -> int | None: ...

    async def status(self, key: ScopeKey) -> ScopeStatus: ...

    async def inspect(self, key: ScopeKey, *, page_size: int = 10,
                      cursor: str | None = None) -> InspectPage: ...

    async def forget(self, key: ScopeKey, entry_id: str) -> ForgetReceipt: ...

    async def forget_all(self, key: ScopeKey) -> ErasureReceipt: ...

    async def withdraw(self, key: ScopeKey) -> ErasureReceipt: ...

    async def offboard(self, principal: Principal) -> OffboardReport: ...


@runtime_checkable
class OperatorRepository(Protocol):
    """Store-wide operator work: physical deletion of expired rows and the invariant report."""

    async def sweep(self) -> int: ...

    async def report(self) -> StoreReport: ...


@runtime_checkable
class MemoryRepository(RuntimeRepository, ControlRepository, OperatorRepository, Protocol):
    """Every operation in one object: the direct PostgreSQL store."""


# -- optional capabilities ------------------------------------------------------------------


@runtime_checkable
class RedeemAdmitRepository(Protocol):
    """A runtime repository that redeems a request and admits its first work in one call."""

    async def redeem_admit(self, assertion: ScopeAssertion, *, units: int,
                           explicit: bool = False) -> tuple[int | None, ReasonCode | None]:
        """``redeem`` and, when it captured a generation, ``admit`` ``units`` under it.
        Returns the generation (``None``: no consent) and why the admission was refused
        (``None``: admitted)."""
        ...


@runtime_checkable
class ClockedAdmitRepository(Protocol):
    """A runtime repository whose admission can run on a caller's clock (the direct store:
    tests and simulations; the controller always uses the database's clock)."""

    async def admit_at(self, key: ScopeKey, generation: int | None, *, units: int,
                       explicit: bool = False, now: datetime) -> None:
        """``admit`` with ``now`` in place of the database's clock (never later than it)."""
        ...


@runtime_checkable
class AdmissionWithRedemption(Protocol):
    """An admission that says whether a request's first work may be admitted with its
    redemption (``RedeemAdmitRepository.redeem_admit``)."""

    @property
    def with_redemption(self) -> bool: ...


@runtime_checkable
class RequestRecorder(Protocol):
    """What a bridge records each relayed request with, before the agent redeems it (direct
    mode: the runtime's login redeems only recorded requests)."""

    async def record_request(self, assertion: ScopeAssertion) -> None: ...

