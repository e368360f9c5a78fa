"""Frozen result models.  Only ``MemoryRecord`` carries content, and its repr hides it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import ReasonCode
from .identity import ScopeKey

__all__ = [
    "ConsentReceipt",
    "ErasureReceipt",
    "ForgetReceipt",
    "InspectPage",
    "MemoryRecord",
    "OffboardReport",
    "ScopeOutcome",
    "ScopeStatus",
    "StoreReport",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class MemoryRecord(BaseModel):
    """One stored fact as its subject (or the consented agent) may read it."""

    model_config = _FROZEN

    id: str
    text: str = Field(repr=False)
    scope: ScopeKey
    created_at: datetime
    expires_at: datetime
    distance: float | None = None


class InspectPage(BaseModel):
    model_config = _FROZEN

    entries: tuple[MemoryRecord, ...]
    next_cursor: str | None = None


class ConsentReceipt(BaseModel):
    model_config = _FROZEN

    scope_id: str
    generation: int
    purpose: str
    policy_version: str
    granted_at: datetime
    expires_at: datetime


class ScopeStatus(BaseModel):
    """Content-free (U1): safe to show an operator."""

    model_config = _FROZEN

    scope_id: str
    enabled: bool
    purpose: str | None = None
    policy_version: str | None = None
    generation: int = 0
    consent_expires_at: datetime | None = None
    max_ttl: timedelta | None = None
    entry_cap: int | None = None
    entry_count: int = 0
    last_verified_erasure_at: datetime | None = None
    failure_reason: ReasonCode | None = None


class ForgetReceipt(BaseModel):
    model_config = _FROZEN

    scope_id: str
    generation: int | None
    deleted: int
    verified: bool
    at: datetime


class ErasureReceipt(ForgetReceipt):
    pass


class ScopeOutcome(BaseModel):
    model_config = _FROZEN

    scope_id: str
    outcome: ReasonCode | Literal["cleared"]
    deleted: int = 0


class OffboardReport(BaseModel):
    model_config = _FROZEN

    principal_id: str
    scopes: tuple[ScopeOutcome, ...]

    @property
    def ok(self) -> bool:
        return all(s.outcome == "cleared" for s in self.scopes)


class StoreReport(BaseModel):
    """Content-free aggregates over the whole store (operator ``status`` / ``verify``)."""

    model_config = _FROZEN

    scopes: int
    scopes_enabled: int
    scopes_failed: int
    entries_live: int
    entries_expired: int
    expired_readable: int
    stale_generation: int
    ttl_exceeded: int
    over_cap_scopes: int
    rows_in_disabled_scopes: int
    expired_overdue: int = 0
    overdue_scope_ids: tuple[str, ...] = ()
    violating_scope_ids: tuple[str, ...] = ()  # scopes behind the other checks (≤ 100)

    @property
    def violations(self) -> dict[str, int]:
        """Invariants that must be zero: expired rows readable, rows from a stale generation,
        expiry beyond the policy, scopes over their cap, rows left in a withdrawn scope,
        erasures not verified, rows expired more than 24 hours ago and still stored (their
        scopes are named, by random id, in ``overdue_scope_ids``)."""
        checks = {
            "expired_readable": self.expired_readable,
            "stale_generation": self.stale_generation,
            "ttl_exceeded": self.ttl_exceeded,
            "over_cap_scopes": self.over_cap_scopes,
            "rows_in_disabled_scopes": self.rows_in_disabled_scopes,
            "scopes_failed": self.scopes_failed,
            "expired_overdue": self.expired_overdue,
        }
        return {k: v for k, v in checks.items() if v}
