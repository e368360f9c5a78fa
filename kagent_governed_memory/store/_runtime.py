"""The runtime half of ``GovernedMemoryStore``: redeem a request, admit its work, save and
search — and the bridge's record of the request it relays.

A login that is a member of ``kagent_memory_runtime`` only (not of the deprecated
``kagent_memory_service``) runs the *bound* statements: each names the current request's
``jti`` (``memory_request``), so the database serves only the scope and generation that the
request redeemed, and only to the login that redeemed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..errors import (
    AdmissionDenied,
    GovernanceError,
    InvalidInput,
    ReasonCode,
    ScopeDenied,
    _admission_refusal,
)
from ..identity import Issuer, ScopeKey
from ..models import MemoryRecord
from ..repository import MAX_SEARCH_QUERIES
from ..scope._assertion import ScopeAssertion
from ..scope._assertion import _audience as _servers
from ._base import _StoreBase
from ._pgtypes import _Vectors
from ._validate import (
    _check_limit,
    _check_queries,
    _check_save,
    _generation,
    _key,
    _vector,
)

__all__ = ["MAX_SEARCH_LIMIT", "MAX_SEARCH_QUERIES"]

MAX_SEARCH_LIMIT = 50


class _RuntimeOps(_StoreBase):
    """A part of ``GovernedMemoryStore``: the runtime operations, on the shared base's
    statements."""

    def _stmt(self, name: str) -> str:
        """The issuer-generic statement ``name`` (``...ByIssuer``), bound for a runtime login."""
        return name + ("BoundByIssuer" if self._bound else "ByIssuer")

    async def record_request(self, assertion: ScopeAssertion) -> None:
        """The bridge records a request it relays (its ``jti``, exact key, classification,
        output audience and expiry), before the runtime redeems it: a runtime login redeems
        only recorded requests.  One round trip; a ``jti`` is recorded once."""
        if not isinstance(assertion, ScopeAssertion):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion")
        key = assertion.key
        self._servable(key)
        await self._all("record_request", "RecordMemoryRequestByIssuer",
                        [assertion.jti, assertion.expires_at, *_key(key),
                         assertion.classification,
                         _audience(assertion.audience, self._issuer_for(key.principal))])

    async def redeem(self, assertion: ScopeAssertion) -> int | None:
        """Consume ``assertion`` (its ``jti``, once on any replica) and return the generation
        its request captures: ``None`` without an enabled, unexpired consent for its key,
        policy version, classification and output audience.  One round trip.

        Raises ``ScopeDenied`` (``assertion_replayed``, ``assertion_expired`` by the
        database's clock, or ``request_not_recorded`` for a runtime login the bridge did not
        record this request for) and the store's usual errors."""
        if not isinstance(assertion, ScopeAssertion):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion")
        key = assertion.key
        self._servable(key)
        row = await self._one(
            "redeem", "RedeemScopeAssertionByIssuer",
            [assertion.jti, assertion.expires_at, *_key(key), self.policy.version,
             assertion.classification,
             _audience(assertion.audience, self._issuer_for(key.principal))],
        )
        return None if row is None else row[0]

    async def redeem_admit(self, assertion: ScopeAssertion, *, units: int,
                           explicit: bool = False) -> tuple[int | None, ReasonCode | None]:
        """``redeem`` and, when it captured a generation, ``admit`` ``units`` under that
        generation: one round trip for a runtime login (``memory_redeem_admit``, 000014), two
        on the deprecated service login (its unbound statements, as its other calls).  Returns the generation (``None``: no consent,
        nothing admitted) and why the admission was refused (``None``: admitted).  A refused
        admission keeps the redemption: the request's generation stays captured.  Raises what
        ``redeem`` raises."""
        if not isinstance(assertion, ScopeAssertion):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion")
        if not isinstance(units, int) or isinstance(units, bool) or not 1 <= units <= 1000:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="units")
        if not isinstance(explicit, bool):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="explicit")
        key = assertion.key
        self._servable(key)
        if not self._bound:  # the deprecated service login: the two separate calls
            generation = await self.redeem(assertion)
            if generation is None:
                return None, None
            try:
                await self.admit(key, generation, units=units, explicit=explicit)
            except GovernanceError as exc:
                return generation, exc.reason
            return generation, None
        row = await self._one(
            "redeem", "RedeemAndAdmitMemoryWorkByIssuer",
            [assertion.jti, assertion.expires_at, *_key(key), self.policy.version,
             assertion.classification,
             _audience(assertion.audience, self._issuer_for(key.principal)), units, explicit],
        )
        if row is None or row[0] is None:
            return None, None
        return int(row[0]), _admission_refusal(row[1], row[2])

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False, now: datetime | None = None) -> None:
        """Admit ``units`` of work (and one explicit operation when ``explicit``) against the
        budgets of the scope's registered policy, fenced in the same transaction, or consume
        nothing and raise ``AdmissionDenied`` (see ``_admission``).  ``now`` replaces the
        database's clock (tests; never later than it)."""
        self._servable(key)
        gen = _generation(generation)
        if not isinstance(units, int) or isinstance(units, bool) or not 1 <= units <= 1000:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="units")
        if not isinstance(explicit, bool):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="explicit")
        row = await self._one(
            "admit", self._stmt("AdmitMemoryWork"),
            [*self._request("admit", key), *_key(key), gen, self.policy.version, units,
             explicit, now],
        )
        refused = int(row[0]) if row else 1
        if refused:
            reason = ReasonCode.BUDGET_EXHAUSTED if refused == 1 else ReasonCode.RATE_LIMITED
            raise AdmissionDenied(reason, scope_id=key.opaque_id)


    async def admit_at(self, key: ScopeKey, generation: int | None, *, units: int,
                       explicit: bool = False, now: datetime) -> None:
        """``admit`` on the caller's clock (``now``; tests and simulations, never later than
        the database's): the ``ClockedAdmitRepository`` capability."""
        await self.admit(key, generation, units=units, explicit=explicit, now=now)

    async def save(
        self,
        key: ScopeKey,
        generation: int | None,
        *,
        facts: Sequence[str],
        embeddings: Sequence[Sequence[float]],
    ) -> list[str]:
        """Store facts (all or none) under the captured generation; returns opaque entry ids,
        one per fact.  A fact already live in the scope (the same text after Unicode NFC
        normalisation) answers that entry's id and is not stored again."""
        self._servable(key)
        gen = _generation(generation)
        p = self.policy
        vectors = _check_save(facts, embeddings, entry_cap=p.entry_cap,
                              fact_max_bytes=p.fact_max_bytes, dimension=p.embedding_dimension)
        rows = await self._all(
            "save", self._stmt("SaveMemoryEntries"),
            [*self._request("save", key), *_key(key), gen, p.version, list(facts),
             _Vectors(vectors)],
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
        rows = await self._all("search", self._stmt("SearchMemoryEntries"),
                               [*self._request("search", key), *_key(key), gen,
                                self.policy.version, vec, limit])
        return [
            MemoryRecord(id=str(r[0]), text=r[1], scope=key, created_at=r[2], expires_at=r[3],
                         distance=float(r[4]))
            for r in rows
        ]

    async def search_many(
        self, key: ScopeKey, generation: int | None, embeddings: Sequence[Sequence[float]], *,
        limit: int = 5,
    ) -> list[list[MemoryRecord]]:
        """``search`` for 1..``prefetch_max_subqueries`` query vectors in one statement (one
        round trip, the scope fenced once): element ``i`` is exactly what ``search(key,
        generation, embeddings[i], limit=limit)`` returns, and the whole call is refused if
        any would be."""
        self._servable(key)
        gen = _generation(generation)
        vectors = _check_queries(
            embeddings, limit, dimension=self.policy.embedding_dimension,
            max_queries=min(MAX_SEARCH_QUERIES, self.policy.prefetch_max_subqueries),
            max_limit=MAX_SEARCH_LIMIT)
        rows = await self._all("search", self._stmt("SearchMemoryEntriesMany"),
                               [*self._request("search", key), *_key(key), gen,
                                self.policy.version, _Vectors(vectors), limit])
        out: list[list[MemoryRecord]] = [[] for _ in vectors]
        for r in rows:
            out[r[0] - 1].append(MemoryRecord(id=str(r[1]), text=r[2], scope=key, created_at=r[3],
                                              expires_at=r[4], distance=float(r[5])))
        return out


def _audience(value: Sequence[str] | None, issuer: Issuer) -> list[str]:
    """The output audience: sorted, de-duplicated names (homeserver names, or ``principal``;
    default: ``issuer``'s audience); refused if malformed."""
    servers = _servers(list(issuer.audience) if value is None else value)
    if servers is None:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="output_audience")
    return list(servers)
