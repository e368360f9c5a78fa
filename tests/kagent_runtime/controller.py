"""A test stand-in for the patched kagent controller's memory routes (runs in the kagent venv).

``/api/memories/governed/*`` implements the contract of ``upstream-pr/governed-memory-api.md``
by calling the library's ``GovernedMemoryStore`` (the same SQL the Go patch ships) against the
ephemeral PostgreSQL.  The legacy ``/api/memories*`` routes keep what the *unpatched* runtime
sends in memory, so a test can see what upstream would have stored.

Every governed call must carry a verifying ``x-kagent-memory-scope`` assertion whose key is the
body's ``scope``; the calls that do not are counted (the Go controller may re-verify the same
way).
"""

from __future__ import annotations

import collections
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kagent_governed_memory import (
    Admission,
    AgentIdentity,
    GovernanceError,
    GovernedMemoryStore,
    MemoryPolicy,
    MemoryScope,
    Principal,
    ReasonCode,
    ScopeKey,
)
from kagent_governed_memory.assertion import verify_scope_assertion

_STATUS = {
    400: {"invalid_identity", "invalid_text", "invalid_embedding", "invalid_limit", "invalid_page_size",
          "invalid_cursor", "invalid_argument", "ttl_exceeds_policy"},
    403: {"consent_required", "erasure_pending", "federation_denied", "remote_server_denied",
          "scope_kind_reserved"},
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
    return JSONResponse({"reason": code.value}, status_code=status or _status(code))


def _key(scope: Any) -> ScopeKey:
    if not isinstance(scope, dict):
        raise GovernanceError(ReasonCode.INVALID_IDENTITY)
    return ScopeKey(
        principal=Principal(mxid=scope.get("principal"), origin=scope.get("origin")),
        agent=AgentIdentity(namespace=scope.get("agent_namespace"), name=scope.get("agent_name")),
        scope=MemoryScope(kind=scope.get("kind"), room_id=scope.get("room_id")),
    )


class TestController:
    def __init__(self, store: GovernedMemoryStore | None, secret: bytes,
                 admission_policy: MemoryPolicy | None = None) -> None:
        self.store = store
        self.admission = Admission(store, admission_policy) if store is not None else None
        self.secret = secret
        self.calls: collections.Counter[str] = collections.Counter()
        self.unverified_calls = 0
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

    # -- governed ------------------------------------------------------------------------------

    async def _scoped(self, request: Request, name: str) -> tuple[ScopeKey, dict[str, Any]]:
        self.calls[name] += 1
        body = await request.json()
        key = _key(body.get("scope"))
        token = request.headers.get("x-kagent-memory-scope")
        verified = False
        if token:
            try:
                verified = verify_scope_assertion(token, secret=self.secret).key == key
            except GovernanceError:
                verified = False
        if not verified:
            self.unverified_calls += 1
        return key, body

    async def _run(self, request: Request, name: str, work) -> JSONResponse:
        try:
            key, body = await self._scoped(request, name)
            return await work(key, body)
        except GovernanceError as exc:
            return _refuse(exc.reason)

    async def _generation(self, request: Request) -> JSONResponse:
        async def work(key, body):
            return JSONResponse({"generation": await self.store.generation(key)})
        return await self._run(request, "generation", work)

    async def _admit(self, request: Request) -> JSONResponse:
        async def work(key, body):
            units, explicit = body.get("units"), body.get("explicit")
            if not isinstance(units, int) or isinstance(units, bool) or not isinstance(explicit, bool):
                return _refuse(ReasonCode.INVALID_ARGUMENT)
            await self.admission.admit(key, body.get("generation"), units=units, explicit=explicit)
            return JSONResponse({"admitted": True})
        return await self._run(request, "admit", work)

    async def _entries(self, request: Request) -> JSONResponse:
        async def work(key, body):
            items = body.get("items")
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                return _refuse(ReasonCode.INVALID_ARGUMENT)
            ids = await self.store.save(key, body.get("generation"),
                                        facts=[i.get("content") for i in items],
                                        embeddings=[i.get("vector") for i in items])
            return JSONResponse({"ids": ids}, status_code=201)
        return await self._run(request, "entries", work)

    async def _search(self, request: Request) -> JSONResponse:
        async def work(key, body):
            hits = await self.store.search(key, body.get("generation"), body.get("vector"),
                                           limit=body.get("limit", 5))
            return JSONResponse({"memories": [
                {"id": h.id, "content": h.text, "created_at": h.created_at.isoformat(),
                 "expires_at": h.expires_at.isoformat(), "score": 1.0 - (h.distance or 0.0)}
                for h in hits
            ]})
        return await self._run(request, "search", work)

    async def _forget(self, request: Request) -> JSONResponse:
        async def work(key, body):
            receipt = await self.store.forget(key, body.get("entry_id"))
            return JSONResponse({"deleted": receipt.deleted, "verified": receipt.verified,
                                 "generation": receipt.generation})
        return await self._run(request, "forget", work)

    async def _consent(self, request: Request) -> JSONResponse:  # the bridge's route
        async def work(key, body):
            receipt = await self.store.grant(key, purpose=body.get("purpose"))
            return JSONResponse({"scope_id": receipt.scope_id, "generation": receipt.generation})
        return await self._run(request, "consent", work)

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
