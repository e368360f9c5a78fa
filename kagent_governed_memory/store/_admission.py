"""Cost admission before any model or embedding work (A1–A3).

Two token buckets, consumed all-or-nothing in one round trip with the consent fence checked in
the same transaction (``memory_admit``):

* per scope: ``scope_ops_per_hour`` units, refilled continuously over an hour.  Every
  summarisation, prefetch sub-query, explicit load/save *and* every embedded item is one unit
  (ADR 0023 §42), so an explicit save of one fact costs 2 and a prefetch of 8 sub-queries 16;
* per (sender, agent), explicit load/save only: ``explicit_ops_per_minute`` refill with a burst
  of ``explicit_burst``.

The capacities and refill rates are those of the policy registered under the scope's consent:
the database reads them, no caller passes them.  ``Admission`` admits through any
``RuntimeRepository`` (``repository.admit``); an injected clock needs a
``ClockedAdmitRepository`` (the direct store; the controller uses the database's clock).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..errors import InvalidInput, ReasonCode
from ..identity import ScopeKey
from ..policy import MemoryPolicy
from ..repository import ClockedAdmitRepository, RuntimeRepository

__all__ = ["Admission"]


class Admission:
    """Admits units of memory work for a key, or raises ``AdmissionDenied``."""

    def __init__(
        self,
        store: RuntimeRepository,
        policy: MemoryPolicy | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        # The budgets are the scope's registered policy's (the database reads them): another
        # policy here could only disagree with what is enforced.
        if policy is not None and policy != store.policy:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="admission_policy")
        if clock is not None and not isinstance(store, ClockedAdmitRepository):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="admission_clock")
        self._store = store
        self.policy = policy or store.policy
        self._clock = clock  # None: the database's clock, shared by every replica

    @property
    def with_redemption(self) -> bool:
        """Whether work may be admitted with the request's redemption (``redeem_admit``): only
        on the database's clock, which that call uses."""
        return self._clock is None

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False) -> None:
        """Consume ``units`` from the scope's hourly budget (and one explicit operation from
        the sender's per-minute budget when ``explicit``), or consume nothing and refuse.

        The consent fence is checked in the same transaction: a withdrawn, stale, expired or
        re-versioned ``generation`` raises ``ConsentRequired``/``StaleGeneration`` and admits
        no work."""
        store = self._store
        if self._clock is not None and isinstance(store, ClockedAdmitRepository):
            await store.admit_at(key, generation, units=units, explicit=explicit,
                                 now=self._clock())
        else:
            await store.admit(key, generation, units=units, explicit=explicit)
