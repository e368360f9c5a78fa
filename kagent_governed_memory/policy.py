"""Versioned memory policy: the limits in force for a scope, recorded with its consent."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .errors import InvalidInput, ReasonCode

__all__ = ["DEV_POLICY", "PROTOTYPE_POLICY", "MemoryPolicy"]

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class MemoryPolicy(BaseModel):
    """Limits of ADR 0023 §41–42.  Storage limits are copied into the scope row at grant time
    and enforced by the database; admission limits are enforced before model/embedding work."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    version: str
    max_ttl: timedelta = timedelta(days=7)
    entry_cap: int = 100
    fact_max_bytes: int = 512
    consent_max_age: timedelta = timedelta(days=90)
    # admission (A2)
    prefetch_max_subqueries: int = 8
    prefetch_subquery_max_bytes: int = 512
    explicit_ops_per_minute: int = 6
    explicit_burst: int = 3
    scope_ops_per_hour: int = 60
    autosave_every_user_turns: int = 5
    summariser_input_max_bytes: int = 16 * 1024
    summariser_max_facts: int = 10
    search_limit: int = 5
    # The dimension of the deployment's embedder, recorded with each consent: vectors of any
    # other length are refused by the database.  768 is kagent-compatible; BGE-M3 gives 1024.
    embedding_dimension: int = 768

    @model_validator(mode="after")
    def _bounds(self) -> MemoryPolicy:
        ok = (
            _VERSION.fullmatch(self.version)
            and timedelta(minutes=1) <= self.max_ttl <= timedelta(days=365)
            and timedelta(minutes=1) <= self.consent_max_age <= timedelta(days=3650)
            and 1 <= self.entry_cap <= 10_000
            and 1 <= self.fact_max_bytes <= 8192
            and 1 <= self.search_limit <= 50
            and 1 <= self.embedding_dimension <= 16_000
            and all(
                v >= 1
                for v in (
                    self.prefetch_max_subqueries,
                    self.prefetch_subquery_max_bytes,
                    self.explicit_ops_per_minute,
                    self.explicit_burst,
                    self.scope_ops_per_hour,
                    self.autosave_every_user_turns,
                    self.summariser_input_max_bytes,
                    self.summariser_max_facts,
                )
            )
        )
        if not ok:
            raise InvalidInput(ReasonCode.INVALID_POLICY)
        return self

    @model_validator(mode="before")
    @classmethod
    def _typed(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("version"), str):
            raise InvalidInput(ReasonCode.INVALID_POLICY)
        return data


PROTOTYPE_POLICY = MemoryPolicy(version="adr0023-prototype-1")

# The development policy (dev-db registers it, allowed for every agent; the development bridge
# uses it): PROTOTYPE_POLICY's limits except the explicit-operation rate, which a scripted or
# hand-typed dev session would exhaust at its 4th save or recall (burst 3).
DEV_POLICY = MemoryPolicy(version="dev-1", explicit_ops_per_minute=60, explicit_burst=30)
