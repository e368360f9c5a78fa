"""A test stand-in for the patched kagent controller's memory routes (runs in the kagent venv).

``/api/memories/governed/*`` implements the contract of ``upstream-pr/governed-memory-api.md``
by calling the library's ``GovernedMemoryStore`` (the same SQL the Go patch ships) against the
ephemeral PostgreSQL.  The legacy ``/api/memories*`` routes keep what the *unpatched* runtime
sends in memory, so a test can see what upstream would have stored.

Every governed call must first carry the calling agent pod's credentials, as the patched
runtime sends them through kagent's ``KAgentTokenService`` (``Authorization: Bearer <projected
ServiceAccount token>`` and ``X-Agent-Name``): a fake token -> ServiceAccount map stands in for
the Kubernetes TokenReview.  Missing or unknown token: 401 ``unauthenticated``; a body scope
of another agent than the authenticated one: 403 ``agent_mismatch``.  Errors are kagent's
``{"error": "<reason_code>"}``; the scope's principal is ``{"issuer", "subject"}``.

Every governed call must also carry a verifying ``x-kagent-memory-scope`` assertion (the bridge's
public keys only) whose key is the body's ``scope``; calls that do not are counted and refused.
The request's first call (``generation``) redeems the assertion's ``jti`` in the database, so a
token replayed to a second request gets no memory -- as the Go controller does with the same
SQL.
"""

from __future__ import annotations

import collections
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kagent_governed_memory import (
    AgentIdentity,
    GovernanceError,
    GovernedMemoryStore,
    MemoryScope,
    Principal,
    ReasonCode,
    ScopeKey,
)
from kagent_governed_memory.store import Admission
from kagent_governed_memory.scope import ScopeAssertion, verify_scope_assertion

_STATUS = {
    400: {"invalid_identity", "invalid_text", "invalid_embedding", "invalid_limit", "invalid_page_size",
          "invalid_cursor", "invalid_argument", "ttl_exceeds_policy"},
    403: {"consent_required", "erasure_pending", "federation_denied", "remote_server_denied",
          "scope_kind_reserved", "assertion_missing", "assertion_invalid", "assertion_expired",
          "assertion_unknown_key", "assertion_replayed", "agent_mismatch", "scope_mismatch",
          "consent_policy_changed", "principal_offboarded"},
    409: {"stale_generation", "consent_conflict"},
    422: {"entry_cap_reached", "fact_too_large"},
    429: {"budget_exhausted", "rate_limited"},
    503: {"store_unavailable"},
}
GOVERNED = "/api/memories/governed"


def _status(reason: ReasonCode) -> int:
    for status, reasons in _STATUS.items():
        if reason.value in reasons:
            return status
    return 500


def _refuse(reason: ReasonCode | str, status: int | None = None) -> JSONResponse:
    code = ReasonCode(reason)
    return JSONResponse({"error": code.value}, status_code=status or _status(code))


# The fake TokenReview: projected ServiceAccount token -> "namespace/serviceaccount", and the
# Agent each ServiceAccount runs (kagent names an Agent's ServiceAccount after the Agent).
AGENT_TOKENS = {"kgm-test-sa:kagent:my-agent": "kagent/my-agent",  # as the compiled overlay
                "kgm-test-sa:kagent:other-agent": "kagent/other-agent"}


def app_name(namespace: str, name: str) -> str:
    """kagent's X-Agent-Name (the agent's app_name) for an Agent."""
    return f"{namespace.replace('-', '_')}__NS__{name.replace('-', '_')}"


def _principal(wire: Any) -> Principal:
    """The wire's ``{"issuer": "matrix", "subject": <MXID>}`` as the library's principal.  The
    Matrix issuer's origin rule (native local accounts only) was applied from the assertion's
    ``org`` claim before the request got here."""
    if not isinstance(wire, dict) or set(wire) != {"issuer", "subject"} or wire["issuer"] != "matrix":
        raise GovernanceError(ReasonCode.INVALID_IDENTITY)
    # the v0.9.x wire names the issuer KIND ("matrix"); the library's Matrix principal takes
    # its issuer (the homeserver) from the complete MXID
    return Principal(mxid=wire["subject"], origin="native_local")


def _key(scope: Any) -> ScopeKey:
    if not isinstance(scope, dict) or "origin" in scope:
        raise GovernanceError(ReasonCode.INVALID_IDENTITY)
    return ScopeKey(
        principal=_principal(scope.get("principal")),
        agent=AgentIdentity(namespace=scope.get("agent_namespace"), name=scope.get("agent_name")),
        scope=MemoryScope(kind=scope.get("kind"), room_id=scope.get("room_id")),
    )


class TestController:
    def __init__(self, store: GovernedMemoryStore | None, public_keys: Any, issuer: str,
                 admin_dsn: str | None = None) -> None:
        self.store = store
        # the budgets are the scope's registered policy's, as in the Go controller
        self.admission = Admission(store) if store is not None else None
        self.admin_dsn = admin_dsn
        self.reset_budgets = store is not None and admin_dsn is not None  # fresh buckets each turn
        self.public_keys, self.issuer = public_keys, issuer

        self.calls: collections.Counter[str] = collections.Counter()
        self.combined_admissions = 0  # /generation calls that admitted work too
        self.unverified_calls = 0
        self.refused_auth: collections.Counter[str] = collections.Counter()
        self.legacy_items: list[dict[str, Any]] = []
        routes = [
            Route(f"{GOVERNED}/{name}", getattr(self, f"_{name}"), methods=["POST"])
            for name in ("generation", "admit", "entries", "search", "forget", "consent")
        ]
        routes += [
            Route("/api/memories/sessions", self._legacy_add, methods=["POST"]),
            Route("/api/memories/sessions/batch", self._legacy_batch, methods=["POST"]),
            Route("/api/memories/search", self._legacy_search, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes)

    def before_turn(self) -> None:
        """As the compiled controller's stand-in: a long scenario starts each turn with full
        admission buckets (the prototype policy's burst is 3 explicit operations)."""
        if self.reset_budgets and self.admin_dsn:
            import psycopg
            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM memory_admission_bucket")

    # -- governed ------------------------------------------------------------------------------

    async def _scoped(self, request: Request, name: str
                      ) -> tuple[ScopeKey, dict[str, Any], ScopeAssertion | None]:
        self.calls[name] += 1
        body = await request.json()
        key = _key(body.get("scope"))
        token = request.headers.get("x-kagent-memory-scope")
        assertion = None
        if token:
            try:
                # the runtime checked the A2A context; this route cannot know it
                assertion = verify_scope_assertion(token, public_keys=self.public_keys,
                                                   issuer=self.issuer, agent=key.agent,
                                                   context_id=None)
            except GovernanceError:
                assertion = None
        if assertion is None or assertion.key != key:
            self.unverified_calls += 1
            assertion = None
        return key, body, assertion

    def _authenticated_agent(self, request: Request) -> str | None:
        """The agent the pod's token and X-Agent-Name authenticate, as "namespace/name"."""
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        agent = AGENT_TOKENS.get(token)
        if agent is None:
            return None
        namespace, _, name = agent.partition("/")
        return agent if request.headers.get("x-agent-name") == app_name(namespace, name) else None

    async def _run(self, request: Request, name: str, work, *, bridge: bool = False
                   ) -> JSONResponse:
        if not bridge:
            agent = self._authenticated_agent(request)
            if agent is None:
                self.refused_auth["unauthenticated"] += 1
                return JSONResponse({"error": "unauthenticated"}, status_code=401)
            try:
                scope = (await request.json()).get("scope") or {}
            except ValueError:
                scope = {}
            if not isinstance(scope, dict) or \
                    f"{scope.get('agent_namespace')}/{scope.get('agent_name')}" != agent:
                self.refused_auth["agent_mismatch"] += 1
                return JSONResponse({"error": "agent_mismatch"}, status_code=403)
        try:
            key, body, assertion = await self._scoped(request, name)
            if assertion is None and not bridge:
                return _refuse(ReasonCode.ASSERTION_INVALID)
            return await work(key, body) if bridge else await work(key, body, assertion)
        except GovernanceError as exc:
            return _refuse(exc.reason)

    async def _generation(self, request: Request) -> JSONResponse:
        async def work(key, body, assertion):  # the request's first call: redeem its jti once
            admit = body.get("admit")
            if admit is None:
                return JSONResponse({"generation": await self.store.redeem(assertion)})
            # with "admit": the redemption and, under the generation it captured, the
            # admission in one call (memory_redeem_admit, as the Go controller's /generation)
            units = admit.get("units") if isinstance(admit, dict) else None
            explicit = admit.get("explicit") if isinstance(admit, dict) else None
            if not isinstance(units, int) or isinstance(units, bool) or \
                    not isinstance(explicit, bool) or not 1 <= units <= 1000:
                return _refuse(ReasonCode.INVALID_ARGUMENT)
            generation, refused = await self.store.redeem_admit(assertion, units=units,
                                                                explicit=explicit)
            if generation is None:
                return JSONResponse({"generation": None})
            self.combined_admissions += 1
            return JSONResponse({"generation": generation,
                                 "admission": refused.value if refused else "admitted"})
        return await self._run(request, "generation", work)

    async def _admit(self, request: Request) -> JSONResponse:
        async def work(key, body, assertion):
            units, explicit = body.get("units"), body.get("explicit")
            if not isinstance(units, int) or isinstance(units, bool) or not isinstance(explicit, bool):
                return _refuse(ReasonCode.INVALID_ARGUMENT)
            await self.admission.admit(key, body.get("generation"), units=units, explicit=explicit)
            return JSONResponse({"admitted": True})
        return await self._run(request, "admit", work)

    async def _entries(self, request: Request) -> JSONResponse:
        async def work(key, body, assertion):
            items = body.get("items")
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                return _refuse(ReasonCode.INVALID_ARGUMENT)
            ids = await self.store.save(key, body.get("generation"),
                                        facts=[i.get("content") for i in items],
                                        embeddings=[i.get("vector") for i in items])
            return JSONResponse({"ids": ids}, status_code=201)
        return await self._run(request, "entries", work)

    async def _search(self, request: Request) -> JSONResponse:
        """``vector`` (one query): ``{"memories": [...]}``; ``vectors`` (1..8, a prefetch's
        sub-queries): ``{"results": [[...], ...]}`` from ``store.search_many``, element i what
        ``vector: vectors[i]`` returns, refused as a whole.  Both fields, or ``vectors`` empty
        or over 8: ``invalid_argument``, as the Go controller answers."""
        def memories(hits):
            return [{"id": h.id, "content": h.text, "created_at": h.created_at.isoformat(),
                     "expires_at": h.expires_at.isoformat(), "score": 1.0 - (h.distance or 0.0)}
                    for h in hits]

        async def work(key, body, assertion):
            generation, limit = body.get("generation"), body.get("limit", 5)
            vectors = body.get("vectors")
            if vectors is None:  # absent or null: one query, as Go decodes it
                hits = await self.store.search(key, generation, body.get("vector"), limit=limit)
                return JSONResponse({"memories": memories(hits)})
            if body.get("vector") is not None:  # both fields (none or over 8: search_many)
                return _refuse(ReasonCode.INVALID_ARGUMENT)
            per_query = await self.store.search_many(key, generation, vectors, limit=limit)
            return JSONResponse({"results": [memories(hits) for hits in per_query]})
        return await self._run(request, "search", work)

    async def _forget(self, request: Request) -> JSONResponse:
        async def work(key, body, assertion):
            receipt = await self.store.forget(key, body.get("entry_id"))
            return JSONResponse({"deleted": receipt.deleted, "verified": receipt.verified,
                                 "generation": receipt.generation})
        return await self._run(request, "forget", work)

    async def _consent(self, request: Request) -> JSONResponse:  # the bridge's route
        async def work(key, body):
            receipt = await self.store.grant(key, purpose=body.get("purpose"))
            return JSONResponse({"scope_id": receipt.scope_id, "generation": receipt.generation})
        return await self._run(request, "consent", work, bridge=True)

    # -- legacy (what the unpatched runtime calls) -----------------------------------------

    async def _legacy_add(self, request: Request) -> JSONResponse:
        self.calls["legacy_add"] += 1
        item = await request.json()
        self.legacy_items.append(item)
        return JSONResponse({"id": f"legacy-{len(self.legacy_items)}"}, status_code=201)

    async def _legacy_batch(self, request: Request) -> JSONResponse:
        self.calls["legacy_batch"] += 1
        items = (await request.json()).get("items") or []
        self.legacy_items.extend(items)
        return JSONResponse({"count": len(items)}, status_code=201)

    async def _legacy_search(self, request: Request) -> JSONResponse:
        self.calls["legacy_search"] += 1
        body = await request.json()
        return JSONResponse([
            {"id": f"legacy-{i}", "content": item.get("content", ""), "score": 1.0, "metadata": {},
             "created_at": "2026-01-01T00:00:00Z"}
            for i, item in enumerate(self.legacy_items, 1)
            if item.get("user_id") == body.get("user_id")
        ][: body.get("limit") or 5])
