"""``GovernedMemoryService``: a google-adk ``BaseMemoryService`` over the governed store.

Every operation follows one path: request binding verified → key resolved
(S4, S5) → generation captured once per request (C3) → admission (A1) → model/embedding work →
fenced SQL.  Any "no" on that path means *no memory* for this request, with a content-free
reason counted; the chat itself never sees an error from here.
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry

from ..embedding import Embedder
from ..errors import GovernanceError, InvalidInput, ReasonCode
from ..identity import AgentIdentity, ScopeKey
from ..models import ErasureReceipt, MemoryRecord
from ..repository import (MAX_SEARCH_QUERIES, AdmissionWithRedemption, ControlRepository,
                          RuntimeRepository)
from ..scope._request import RequestBinding, current_request
from ..store._admission import Admission
from ..store._validate import _check_fact
from ..telemetry._metering import Metering, Operation, traced
from ..telemetry._spans import SpanContentMode, check_adk_span_content
from ._outcomes import Admitted, SaveOutcome, _bounded_query
from ._tasks import AutosaveTasks, _type_name
from .binding import check_binding
from .entries import entry_text, memory_entry, notice_entry
from .recall import Recalled
from .refusals import RefusalLog
from .summariser import summarise

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.models.base_llm import BaseLlm
    from google.adk.sessions.session import Session
    from opentelemetry.metrics import MeterProvider

__all__ = ["Admitted", "GovernedMemoryService", "SaveOutcome"]

_log = logging.getLogger("kagent_governed_memory.adk")


class GovernedMemoryService(BaseMemoryService):
    """Governed memory for one running agent.

    ``store`` is where memory lives: ``GovernedMemoryStore`` (direct mode, a database login) or
    ``KagentControllerStore`` (kagent mode, through the controller; no database credentials).
    ``agent`` is the exact agent this runtime serves; a request whose signed assertion names
    another agent, another room or an audience beyond the local homeserver gets no memory.
    ``summariser`` is the model used for auto-save (usually the agent's own); without one,
    auto-save stores nothing — the raw transcript is never stored.
    """

    def __init__(
        self,
        store: RuntimeRepository,
        *,
        agent: AgentIdentity,
        embedder: Embedder,
        summariser: BaseLlm | None = None,
        admission: Admission | None = None,
        meter_provider: MeterProvider | None = None,
        span_content: SpanContentMode = "refuse",
    ) -> None:
        if not isinstance(agent, AgentIdentity):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY, field="agent")
        got = embedder.dimension if isinstance(embedder, Embedder) else None
        if got != store.policy.embedding_dimension:
            # the embedder must produce exactly what the policy records with each consent
            raise InvalidInput(ReasonCode.INVALID_EMBEDDING, field="embedder_dimension",
                               expected=store.policy.embedding_dimension,
                               **({"got": got} if isinstance(got, int) else {}))
        self.store = store
        self.agent = agent
        self.embedder = embedder
        self.summariser = summariser
        self.admission = admission or Admission(store)
        self.metering = Metering(meter_provider)
        self._tasks = AutosaveTasks()
        self.recalled = Recalled()  # this process's in-flight invocations only; never persisted
        # Fail closed: google-adk writes tool results (recalled facts) into spans unless told
        # not to.  "warn" when ContentFreeSpanProcessor/ContentFreeLogRecordProcessor guard
        # every exporter; "ignore" only when nothing exports telemetry at all.
        check_adk_span_content(span_content)
        self.span_content = span_content  # also applied per request (RunConfig.telemetry)
        self._refusals = RefusalLog()  # one line per refused request

    # -- the request path -----------------------------------------------------------------

    async def admitted(self, operation: Operation = Operation.REQUEST, *,
                       admit_units: int = 0) -> Admitted | None:
        """This request's key and captured generation, or ``None`` (reason counted and
        logged).  ``admit_units``: see ``check_binding`` (a first turn's prefetch)."""
        who = await self.resolve(operation, admit_units=admit_units)
        return who if isinstance(who, Admitted) else None

    async def resolve(self, operation: Operation = Operation.REQUEST, *,
                      admit_units: int = 0) -> Admitted | ReasonCode:
        """Like ``admitted`` but says why memory is absent (a content-free code)."""
        binding = current_request()
        scope = binding.assertion.key.opaque_id if binding and binding.assertion else None
        reason = await self._check(binding, admit_units)
        if binding is not None and not binding.counted:
            binding.counted = True
            self.metering.count(Operation.REQUEST, reason or "ok")
        elif binding is None:
            self.metering.count(Operation.REQUEST, ReasonCode.NO_BINDING)
        if reason is not None:
            self._refused(operation, reason, scope)
            return reason
        assert binding is not None and binding.assertion is not None
        return Admitted(binding.assertion.key, binding.generation)  # type: ignore[arg-type]

    def _refused(self, operation: Operation, reason: ReasonCode, scope: str | None) -> None:
        self._refusals.refused(operation, reason, scope)

    async def _check(self, binding: RequestBinding | None, admit_units: int = 0
                     ) -> ReasonCode | None:
        if not (isinstance(self.admission, AdmissionWithRedemption)
                and self.admission.with_redemption):
            admit_units = 0  # an admission of its own (another clock): admitted separately
        return await check_binding(binding, agent=self.agent, store=self.store,
                                   admit_units=admit_units)

    async def _admit(self, who: Admitted, operation: Operation, *, units: int,
                     explicit: bool = False) -> bool:
        return await self._admit_reason(who, operation, units=units, explicit=explicit) is None

    async def _admit_reason(self, who: Admitted, operation: Operation, *, units: int,
                            explicit: bool = False) -> ReasonCode | None:
        try:
            await self.admission.admit(who.key, who.generation, units=units, explicit=explicit)
        except GovernanceError as exc:
            self._fail(operation, exc.reason, who)
            return exc.reason
        return None

    def _fail(self, operation: Operation, reason: ReasonCode, who: Admitted | None) -> None:
        self.metering.count(operation, reason)
        self._refused(operation, reason, who.key.opaque_id if who else None)

    async def _embed(self, texts: list[str], operation: Operation) -> list[list[float]] | None:
        """Any failure of the embedder — the ``Embedder`` protocol is public, so it may raise
        anything, with the text in its message — becomes ``embedding_failed``: counted, logged
        by type only, never raised into the chat."""
        reason: ReasonCode | None = None
        failed_type = ""
        vectors: Any = None
        try:
            vectors = await self.embedder.embed(texts)
        except GovernanceError as exc:
            reason = exc.reason
        except Exception as exc:  # noqa: BLE001 - the text of exc must not travel on
            reason, failed_type = ReasonCode.EMBEDDING_FAILED, type(exc).__name__
        if reason is None and (not isinstance(vectors, list) or len(vectors) != len(texts)):
            reason = ReasonCode.EMBEDDING_FAILED
        if reason is not None:
            self._fail(operation, reason, None)
            if failed_type:
                _log.warning("embedding failed reason=%s error=%s", reason.value,
                             _type_name(failed_type))
            return None
        self.metering.embedded(len(texts))
        return cast("list[list[float]]", vectors)  # each vector is checked by the store

    # -- retrieval --------------------------------------------------------------------------

    async def retrieve(self, query: str, *, explicit: bool = True) -> list[MemoryRecord] | None:
        """Fenced search for this request; ``None`` when memory is absent or refused."""
        hits = await self.recall(query, explicit=explicit)
        return hits if isinstance(hits, list) else None

    @traced(Operation.RETRIEVE)
    async def recall(self, query: str, *, explicit: bool = True
                     ) -> list[MemoryRecord] | ReasonCode:
        """Like ``retrieve``, but says why there is no memory (a content-free code)."""
        who = await self.resolve(Operation.RETRIEVE)
        if not isinstance(who, Admitted):
            return who
        query = _bounded_query(query, self.store.policy.prefetch_subquery_max_bytes)
        if not query:
            self._fail(Operation.RETRIEVE, ReasonCode.INVALID_TEXT, who)
            return ReasonCode.INVALID_TEXT
        refused = await self._admit_reason(who, Operation.RETRIEVE, units=2, explicit=explicit)
        if refused is not None:
            return refused
        vectors = await self._embed([query], Operation.RETRIEVE)
        if vectors is None:
            return ReasonCode.EMBEDDING_FAILED
        try:
            hits = await self.store.search(who.key, who.generation, vectors[0],
                                           limit=self.store.policy.search_limit)
        except GovernanceError as exc:
            self._fail(Operation.RETRIEVE, exc.reason, who)
            return exc.reason
        self.metering.count(Operation.RETRIEVE)
        return hits

    @traced(Operation.PREFETCH)
    async def prefetch(self, queries: Sequence[str]) -> list[MemoryRecord]:
        """A new session's prefetch: at most ``prefetch_max_subqueries`` sub-queries of at most
        ``prefetch_subquery_max_bytes`` each, admitted together before one embedding call."""
        policy = self.store.policy
        bounded = self._prefetch_queries(queries)
        if not bounded:
            return []
        who = await self.admitted(Operation.PREFETCH)
        if who is None:
            return []
        units = 2 * len(bounded)
        binding = current_request()
        if binding is not None and binding.preadmitted == units:
            # admitted with the redemption at turn start (one call): taken once, never again
            binding.preadmitted, refusal = 0, binding.preadmit_refusal
            if refusal is not None:
                self._fail(Operation.PREFETCH, refusal, who)
                return []
        elif not await self._admit(who, Operation.PREFETCH, units=units):
            return []
        vectors = await self._embed(bounded, Operation.PREFETCH)
        if vectors is None:
            return []
        seen: dict[str, MemoryRecord] = {}
        texts: set[str] = set()
        for at in range(0, len(vectors), MAX_SEARCH_QUERIES):  # one round trip per 8 sub-queries
            try:
                found = await self.store.search_many(
                    who.key, who.generation, vectors[at:at + MAX_SEARCH_QUERIES],
                    limit=policy.search_limit)
            except GovernanceError as exc:
                self._fail(Operation.PREFETCH, exc.reason, who)
                return []
            for hit in (h for hits in found for h in hits):
                # never the same text twice (entries saved before the store kept one copy)
                text = unicodedata.normalize("NFC", hit.text)
                if hit.id not in seen and text not in texts:
                    seen[hit.id] = hit
                    texts.add(text)
        self.metering.count(Operation.PREFETCH, n=len(bounded))
        return list(seen.values())

    def prefetch_units(self, queries: Sequence[str]) -> int:
        """The units ``prefetch(queries)`` admits: two per bounded sub-query."""
        return 2 * len(self._prefetch_queries(queries))

    def _prefetch_queries(self, queries: Sequence[str]) -> list[str]:
        policy = self.store.policy
        return [q for q in (_bounded_query(q, policy.prefetch_subquery_max_bytes)
                            for q in queries) if q][: policy.prefetch_max_subqueries]

    # -- saving -------------------------------------------------------------------------------

    @traced(Operation.SAVE)
    async def save_facts(self, facts: Sequence[str], *, explicit: bool = True) -> SaveOutcome:
        """Explicit save: admitted (one operation + one unit per embedded fact), embedded,
        then stored under the generation captured at admission — all or nothing."""
        who = await self.resolve(Operation.SAVE)
        if not isinstance(who, Admitted):
            return SaveOutcome(reason=who)
        facts = [f.strip() for f in facts if isinstance(f, str) and f.strip()]
        if not facts:
            return SaveOutcome(reason=ReasonCode.NOTHING_TO_SAVE)
        refused = await self._admit_reason(who, Operation.SAVE, units=1 + len(facts),
                                           explicit=explicit)
        if refused is not None:  # rate_limited, budget_exhausted, or the fence's reason
            return SaveOutcome(reason=refused)
        return await self._store_facts(who, facts, Operation.SAVE)

    async def _store_facts(self, who: Admitted, facts: list[str], op: Operation) -> SaveOutcome:
        try:
            for fact in facts:  # cheap refusal before paying for embeddings
                _check_fact(fact, self.store.policy.fact_max_bytes)
        except GovernanceError as exc:
            self._fail(op, exc.reason, who)
            return SaveOutcome(reason=exc.reason)
        vectors = await self._embed(facts, op)
        if vectors is None:
            return SaveOutcome(reason=ReasonCode.EMBEDDING_FAILED)
        try:
            ids = await self.store.save(who.key, who.generation, facts=facts, embeddings=vectors)
        except GovernanceError as exc:
            self._fail(op, exc.reason, who)
            return SaveOutcome(reason=exc.reason)
        self.metering.count(op, n=len(ids))
        return SaveOutcome(saved=tuple(ids))

    @traced(Operation.SUMMARISE)
    async def autosave(self, who: Admitted, lines: list[str]) -> SaveOutcome:
        """Summarise eligible turns (C6) and store the facts under ``who.generation``.

        Admission comes first for the summarisation, then for the embedded facts; a failed or
        malformed summary stores nothing.  The database fence refuses the save if consent was
        withdrawn meanwhile, whatever this task believes.
        """
        if self.summariser is None:
            self._fail(Operation.SUMMARISE, ReasonCode.NO_SUMMARISER, who)
            return SaveOutcome(reason=ReasonCode.NO_SUMMARISER)
        if not lines:
            return SaveOutcome(reason=ReasonCode.NOTHING_TO_SAVE)
        refused = await self._admit_reason(who, Operation.SUMMARISE, units=1)
        if refused is not None:
            return SaveOutcome(reason=refused)
        try:
            summary = await summarise(self.summariser, lines, self.store.policy)
        except GovernanceError as exc:
            self._fail(Operation.SUMMARISE, exc.reason, who)
            return SaveOutcome(reason=exc.reason)
        self.metering.count(Operation.SUMMARISE, summary.reason or "ok")
        if summary.reason is not None:
            _log.info("autosave stored nothing reason=%s dropped=%d",
                      summary.reason.value, summary.dropped)
            return SaveOutcome(reason=summary.reason, dropped=summary.dropped)
        refused = await self._admit_reason(who, Operation.SAVE, units=len(summary.facts))
        if refused is not None:
            return SaveOutcome(reason=refused, dropped=summary.dropped)
        outcome = await self._store_facts(who, summary.facts, Operation.SAVE)
        return SaveOutcome(outcome.saved, outcome.reason, summary.dropped)

    def schedule_autosave(self, who: Admitted, lines: list[str]) -> asyncio.Task[SaveOutcome]:
        """Run ``autosave`` in the background, tracked so ``withdraw`` can cancel it."""
        return self._tasks.start(self.autosave(who, lines), who.key.opaque_id)

    async def drain(self) -> None:
        """Wait for every background auto-save (tests, graceful shutdown)."""
        await self._tasks.drain()

    async def cancel_autosaves(self, key: ScopeKey) -> int:
        """Cancel this key's pending auto-saves in this process and wait for them; returns how
        many were cancelled.  A courtesy: the generation fence is what guarantees nothing
        lands after a withdrawal, whichever process withdraws."""
        return await self._tasks.cancel(key.opaque_id)

    async def withdraw(self, key: ScopeKey) -> ErasureReceipt:
        """Withdraw in the store (C4: disabled and the generation advanced, committed first,
        then cleared and verified), then cancel this key's auto-saves still pending here.

        The order is the guarantee: from the moment the disable commits, the database fence
        refuses every save carrying the old generation, so work already in flight when the
        user withdrew is rejected by the fence, not merely cancelled; cancelling afterwards
        only saves its model and embedding cost.  Direct mode only: in kagent mode the bridge
        withdraws (``KagentBridgeStore``); a runtime store that cannot raises
        ``invalid_argument`` (``field=withdraw``)."""
        if not isinstance(self.store, ControlRepository):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="withdraw")
        try:
            return await self.store.withdraw(key)
        finally:
            await self.cancel_autosaves(key)

    async def aclose(self) -> None:
        await self._tasks.close()

    # -- google-adk BaseMemoryService ---------------------------------------------------------

    async def search_memory(self, *, app_name: str, user_id: str, query: str
                            ) -> SearchMemoryResponse:
        del app_name, user_id  # attribution only; the key comes from the request binding
        hits = await self.recall(query, explicit=True)
        if not isinstance(hits, list):  # never an empty memory (entries.notice_entry)
            return SearchMemoryResponse(memories=[notice_entry(hits)])
        return SearchMemoryResponse(memories=[memory_entry(h) for h in hits])

    async def add_memory(self, *, app_name: str, user_id: str, memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        del app_name, user_id, custom_metadata
        facts = [entry_text(m.content) for m in memories]
        await self.save_facts([f for f in facts if f], explicit=True)

    async def add_session_to_memory(self, session: Session) -> None:
        """ADK's generic hook (``ctx.add_session_to_memory()``) saves nothing: auto-save runs
        only through the governed callbacks of ``configure_governed_memory``, which know which
        turns started under the current consent and enforce one save per five user turns (A2,
        C6).  Calling it is counted with a reason and logged, content-free."""
        del session
        self._hook_refused("add_session_to_memory")

    async def add_events_to_memory(self, *, app_name: str, user_id: str, events: Sequence[Event],
                                   session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None) -> None:
        """Saves nothing, like ``add_session_to_memory``: events handed in from outside carry
        no proof of the consent they were written under."""
        del app_name, user_id, events, session_id, custom_metadata
        self._hook_refused("add_events_to_memory")

    def _hook_refused(self, hook: str) -> None:
        self.metering.count(Operation.SUMMARISE, ReasonCode.AUTOSAVE_CALLBACK_ONLY)
        _log.info("autosave refused reason=%s hook=%s",
                  ReasonCode.AUTOSAVE_CALLBACK_ONLY.value, hook)

    @traced(Operation.DELETE)
    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        del app_name, user_id
        who = await self.admitted(Operation.DELETE)
        if who is None or not memory_id:
            return
        try:
            await self.store.forget(who.key, memory_id)
        except GovernanceError as exc:
            self._fail(Operation.DELETE, exc.reason, who)
            return
        self.metering.count(Operation.DELETE)
