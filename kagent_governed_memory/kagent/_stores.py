"""The two stores of kagent mode over one transport: ``KagentControllerStore`` (the agent
runtime's) and ``KagentBridgeStore`` (the bridge's); see the package's docstring."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from ..errors import GovernanceError, InvalidInput, ReasonCode, ScopeDenied
from ..identity import AgentIdentity, Principal, ScopeKey
from ..models import (
    ConsentReceipt,
    ErasureReceipt,
    InspectPage,
    MemoryRecord,
    OffboardReport,
    ScopeOutcome,
    ScopeStatus,
)
from ..policy import PROTOTYPE_POLICY, MemoryPolicy
from ..scope._assertion import ScopeAssertion
from ..scope._request import ASSERTION_HEADER, GRANT_HEADER, current_request
from ..store._validate import (
    _check_limit,
    _check_queries,
    _check_save,
    _generation,
    _vector,
)
from ._answers import (
    _int,
    _malformed,
    _opaque,
    _parsed,
    _reason,
    _receipt,
    _time,
    scope_body,
)
from ._client import _Client
from ._transport import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, KAGENT_TOKEN_PATH

__all__ = ["KAGENT_TOKEN_PATH", "KagentBridgeStore", "KagentControllerStore"]

_MAX_QUERIES = 8  # the API's bounds, as the direct store's
_MAX_LIMIT = 50
_MAX_PAGE = 50


class KagentControllerStore(_Client):
    """The agent runtime's side of the controller's governed API (a ``RuntimeRepository``).

    ``agent`` is the Agent this pod runs as (kagent sets ``KAGENT_NAMESPACE``/``KAGENT_NAME``);
    the token defaults to the governed memory token file (``KAGENT_MEMORY_TOKEN_FILE``, else
    ``/var/run/secrets/kagent-governed-memory/token``), never kagent's A2A token.  Each call
    needs the verified assertion of the current request (``memory_request``), which it sends again: the
    controller checks its signature, expiry and agent on every call, so a background
    auto-save must finish within the assertion's lifetime.
    """

    def __init__(self, url: str, *, agent: AgentIdentity, local_server: str,
                 policy: MemoryPolicy = PROTOTYPE_POLICY,
                 token: str | Callable[[], str] | None = None,
                 token_file: str | Path | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 deadline: float = DEFAULT_DEADLINE,
                 client: httpx.AsyncClient | None = None) -> None:
        if not isinstance(agent, AgentIdentity):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY, field="agent")
        self.agent = agent
        super().__init__(url, local_server=local_server, policy=policy, token=token,
                         token_file=token_file, headers={"X-Agent-Name": agent.app_name},
                         timeout=timeout, deadline=deadline, client=client, runtime=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kw: Any
                 ) -> KagentControllerStore:
        """From what kagent gives a governed agent's pod: ``KAGENT_MEMORY_URL``,
        ``KAGENT_MEMORY_LOCAL_SERVER``, ``KAGENT_NAMESPACE``, ``KAGENT_NAME`` and the projected
        token file."""
        env = os.environ if environ is None else environ
        values = {}
        for name in ("KAGENT_MEMORY_URL", "KAGENT_NAMESPACE", "KAGENT_NAME",
                     "KAGENT_MEMORY_LOCAL_SERVER"):  # each missing setting names itself
            values[name] = env.get(name, "").strip()
            if not values[name]:
                raise InvalidInput(ReasonCode.NOT_CONFIGURED, field=name)
        agent = AgentIdentity(namespace=values["KAGENT_NAMESPACE"], name=values["KAGENT_NAME"])
        return cls(values["KAGENT_MEMORY_URL"], agent=agent,
                   local_server=values["KAGENT_MEMORY_LOCAL_SERVER"], **kw)

    def __repr__(self) -> str:
        return f"KagentControllerStore(agent={self.agent.namespace}/{self.agent.name})"

    async def redeem(self, assertion: ScopeAssertion) -> int | None:
        return _captured(await self._redeem(assertion, {}))

    async def redeem_admit(self, assertion: ScopeAssertion, *, units: int,
                           explicit: bool = False) -> tuple[int | None, ReasonCode | None]:
        """``redeem`` and, when it captured a generation, ``admit`` ``units`` under it, in one
        call (``/generation`` with ``admit``; the controller runs ``memory_redeem_admit``).
        Returns the generation and why the admission was refused (``None``: admitted); a
        refusal keeps the redemption.  A controller without the combined call ignores
        ``admit`` and answers no ``admission``: the work is then admitted by a separate
        ``/admit`` (two calls, as before)."""
        if not isinstance(units, int) or isinstance(units, bool) or not 1 <= units <= 1000:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="units")
        data = await self._redeem(assertion, {"admit": {"units": units,
                                                        "explicit": bool(explicit)}})
        generation = _captured(data)
        if generation is None:
            return None, None
        admission = data.get("admission")
        if admission is None:  # an older controller: it redeemed only
            try:
                await self.admit(assertion.key, generation, units=units, explicit=explicit)
            except GovernanceError as exc:
                return generation, exc.reason
            return generation, None
        if admission == "admitted":
            return generation, None
        return generation, _reason(admission)

    async def _redeem(self, assertion: ScopeAssertion, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(assertion, ScopeAssertion):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion")
        binding = current_request()
        if binding is not None and binding.assertion is not None \
                and binding.assertion.jti != assertion.jti:  # the token sent is the binding's
            raise ScopeDenied(ReasonCode.SCOPE_MISMATCH, operation="generation")
        return await self._call("generation", assertion.key, body, idempotent=False)

    async def admit(self, key: ScopeKey, generation: int | None, *, units: int,
                    explicit: bool = False) -> None:
        gen = _generation(generation)
        if not isinstance(units, int) or isinstance(units, bool) or units < 1:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="units")
        await self._call("admit", key, {"generation": gen, "units": units,
                                        "explicit": bool(explicit)}, idempotent=False)

    async def save(self, key: ScopeKey, generation: int | None, *, facts: Sequence[str],
                   embeddings: Sequence[Sequence[float]]) -> list[str]:
        gen = _generation(generation)
        p = self.policy
        vectors = _check_save(facts, embeddings, entry_cap=p.entry_cap,
                              fact_max_bytes=p.fact_max_bytes, dimension=p.embedding_dimension)
        items = [{"content": f, "vector": v.to_list()}
                 for f, v in zip(facts, vectors, strict=True)]
        data = await self._call("entries", key, {"generation": gen, "items": items},
                                idempotent=False)
        ids = data.get("ids")
        if not isinstance(ids, list) or len(ids) != len(facts):
            raise _malformed()
        return [str(i) for i in ids]

    async def search(self, key: ScopeKey, generation: int | None, embedding: Sequence[float], *,
                     limit: int = 5) -> list[MemoryRecord]:
        gen = _generation(generation)
        _check_limit(limit, _MAX_LIMIT)
        vec = _vector(embedding, self.policy.embedding_dimension).to_list()
        data = await self._call("search", key, {"generation": gen, "vector": vec,
                                                "limit": limit}, idempotent=True)
        found = data.get("memories")
        if not isinstance(found, list):
            raise _malformed()
        return [self._record(key, m) for m in found]

    async def search_many(self, key: ScopeKey, generation: int | None,
                          embeddings: Sequence[Sequence[float]], *, limit: int = 5
                          ) -> list[list[MemoryRecord]]:
        """``search`` for 1..8 query vectors in one request, fenced once; element ``i`` is what
        ``search`` returns for ``embeddings[i]``, and the call is refused as a whole."""
        gen = _generation(generation)
        vectors = [v.to_list() for v in _check_queries(
            embeddings, limit, dimension=self.policy.embedding_dimension,
            max_queries=_MAX_QUERIES, max_limit=_MAX_LIMIT)]
        data = await self._call("search", key, {"generation": gen, "vectors": vectors,
                                                "limit": limit}, idempotent=True)
        results = data.get("results")
        if not isinstance(results, list) or len(results) != len(vectors) \
                or not all(isinstance(r, list) for r in results):
            raise _malformed()
        return [[self._record(key, m) for m in hits] for hits in results]

    async def _call(self, route: str, key: ScopeKey, body: dict[str, Any], *,
                    idempotent: bool) -> dict[str, Any]:
        """A runtime route for ``key``, with the current request's assertion for that key."""
        self._servable(key)
        if key.agent != self.agent:
            raise ScopeDenied(ReasonCode.AGENT_MISMATCH, operation=route)
        binding = current_request()
        if binding is None or binding.assertion is None or not binding.token:
            raise ScopeDenied(ReasonCode.ASSERTION_MISSING, operation=route)
        if binding.assertion.key != key:
            raise ScopeDenied(ReasonCode.SCOPE_MISMATCH, operation=route)
        headers = {ASSERTION_HEADER: binding.token}
        if self._http.sends_grant:  # kagent main: the request's grant is the credential
            headers[GRANT_HEADER] = binding.grant or ""
            if route == "forget" and binding.generation is not None:
                body = {**body, "generation": binding.generation}
        return await self._http.post(route, {"scope": scope_body(key), **body},
                                     operation=route, idempotent=idempotent, headers=headers)


def _captured(data: dict[str, Any]) -> int | None:
    generation = data.get("generation")
    if generation is None:
        return None
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise _malformed()
    return generation


class KagentBridgeStore(_Client):
    """The bridge's side of the controller's governed API (a ``ControlRepository``): the
    subject's own controls and offboarding, with the bridge's ServiceAccount token (audience
    ``kagent-governed-memory``; default file: ``KAGENT_MEMORY_TOKEN_FILE``, else
    ``/var/run/secrets/kagent-governed-memory/token``)."""

    def __init__(self, url: str, *, local_server: str, policy: MemoryPolicy = PROTOTYPE_POLICY,
                 token: str | Callable[[], str] | None = None,
                 token_file: str | Path | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 deadline: float = DEFAULT_DEADLINE,
                 client: httpx.AsyncClient | None = None) -> None:
        super().__init__(url, local_server=local_server, policy=policy, token=token,
                         token_file=token_file, headers={}, timeout=timeout, deadline=deadline,
                         client=client, runtime=False)

    def __repr__(self) -> str:
        return "KagentBridgeStore()"

    async def grant(self, key: ScopeKey, *, purpose: str, classification: str = "personal",
                    output_audience: Sequence[str] | None = None) -> ConsentReceipt:
        body: dict[str, Any] = {"purpose": purpose, "classification": classification}
        if output_audience is not None:
            if isinstance(output_audience, str) or not isinstance(output_audience, Sequence):
                raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="output_audience")
            body["output_audience"] = list(output_audience)
        data = await self._call("consent", key, body, idempotent=False)
        return _parsed(lambda: ConsentReceipt(
            scope_id=key.opaque_id, generation=_int(data["generation"]),
            purpose=str(data["purpose"]), policy_version=str(data["policy_version"]),
            granted_at=_time(data["granted_at"]), expires_at=_time(data["expires_at"])))

    async def generation(self, key: ScopeKey, *, classification: str | None = None,
                         output_audience: Sequence[str] | None = None) -> int | None:
        """The scope's current generation if its consent is enabled, unexpired and under this
        policy version, else ``None``; classification and output audience are checked where
        the runtime redeems its assertion.  kagent main answers it (``Generation``, under the
        policy, classification and audience its consents are granted with); the v0.9.x API
        has no bridge route for it, so it is read from ``status`` there."""
        if classification is not None or output_audience is not None:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="classification")
        if self._http.sends_grant:  # kagent main (gRPC)
            return _captured(await self._call("current-generation", key, {}, idempotent=True))
        st = await self.status(key)
        if (not st.enabled or st.policy_version != self.policy.version
                or st.consent_expires_at is None or st.consent_expires_at <= datetime.now(UTC)):
            return None
        return st.generation

    async def status(self, key: ScopeKey) -> ScopeStatus:
        d = await self._call("status", key, {}, idempotent=True)

        def build() -> ScopeStatus:
            ttl = d.get("max_ttl_seconds")
            return ScopeStatus(
                scope_id=key.opaque_id, enabled=d["enabled"] is True, purpose=d.get("purpose"),
                policy_version=d.get("policy_version"), generation=_int(d.get("generation") or 0),
                consent_expires_at=_time(d.get("consent_expires_at")),
                max_ttl=None if ttl is None else timedelta(seconds=_int(ttl)),
                entry_cap=d.get("entry_cap"), entry_count=_int(d.get("entry_count") or 0),
                last_verified_erasure_at=_time(d.get("last_verified_erasure_at")),
                failure_reason=_reason(d.get("failure_reason")))

        return _parsed(build)

    async def inspect(self, key: ScopeKey, *, page_size: int = 10,
                      cursor: str | None = None) -> InspectPage:
        if (not isinstance(page_size, int) or isinstance(page_size, bool)
                or not 0 < page_size <= _MAX_PAGE):
            raise InvalidInput(ReasonCode.INVALID_PAGE_SIZE)
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidInput(ReasonCode.INVALID_CURSOR)
        data = await self._call("inspect", key, {"page_size": page_size, "cursor": cursor},
                                idempotent=True)
        entries, nxt = data.get("entries"), data.get("next_cursor")
        if not isinstance(entries, list) or not (nxt is None or isinstance(nxt, str)):
            raise _malformed()
        return InspectPage(entries=tuple(self._record(key, e) for e in entries), next_cursor=nxt)

    async def forget_all(self, key: ScopeKey) -> ErasureReceipt:
        # not repeated on a lost answer: a second clear would advance the generation again
        data = await self._call("forget-all", key, {}, idempotent=False)
        return _receipt(ErasureReceipt, key, data)

    async def withdraw(self, key: ScopeKey) -> ErasureReceipt:
        """Disable (committed first), clear, verify — in the controller.  Safe to repeat: a
        failed or interrupted withdrawal leaves the scope disabled and is finished by the next
        call."""
        data = await self._call("withdraw", key, {}, idempotent=True)
        return _receipt(ErasureReceipt, key, data)

    async def offboard(self, principal: Principal) -> OffboardReport:
        if not isinstance(principal, Principal):
            raise InvalidInput(ReasonCode.INVALID_IDENTITY)
        data = await self._http.post(
            "offboard", {"principal": {"issuer": principal.issuer_kind,  # the API's: the kind
                                       "subject": principal.subject}},
            operation="offboard", idempotent=True)
        scopes = data.get("scopes")
        if not isinstance(scopes, list):
            raise _malformed()

        def outcome(s: Any) -> ScopeOutcome:
            value = s["outcome"]
            if value != "cleared":
                value = _reason(value) or ReasonCode.CONTROLLER_ERROR
            return ScopeOutcome(scope_id=_opaque(s["scope_id"]), outcome=value,
                                deleted=_int(s.get("deleted") or 0))

        out = tuple(_parsed(partial(outcome, s)) for s in scopes)
        return OffboardReport(principal_id=principal.opaque_id, scopes=out)

    async def _call(self, route: str, key: ScopeKey, body: dict[str, Any], *,
                    idempotent: bool) -> dict[str, Any]:
        self._servable(key)
        op = route.replace("-", "_")
        return await self._http.post(route, {"scope": scope_body(key), **body}, operation=op,
                                     idempotent=idempotent)
