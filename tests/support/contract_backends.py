"""Two implementations of one contract, behind one small interface (issue: "one contract, two
implementations, one suite").

* ``LibraryBackend``: ``GovernedMemoryStore`` in-process, as the application login (operator
  paths through an owner store, as the library requires).
* ``KagentBackend``: the library's own clients of that API, as kagent mode uses them —
  ``KagentControllerStore`` (the agent runtime: its ServiceAccount token, and each request's
  bridge-signed assertion bound with ``memory_request``) and ``KagentBridgeStore`` (the
  bridge's ServiceAccount token) — against the compiled controller.
* ``HttpBackend``: the governed HTTP API (``upstream-pr/governed-memory-api.md``) of a
  controller — the patched kagent Go controller compiled from the series (``go_controller.py``)
  or any other server of that API.  It calls as the deployment does: the bridge routes with the
  bridge's ServiceAccount token, the agent runtime routes with the scope's agent's token, its
  ``X-Agent-Name`` and a bridge-signed scope assertion for the key (``x-kagent-memory-scope``);
  refusals are kagent's ``{"error": "<reason_code>"}``.

A request's calls are bound to its assertion's redemption (vector migration 000011), so both
controller backends call as a request does: the assertion is redeemed at ``/generation`` first,
and a later call for that key and generation carries the assertion that captured it (the work
of one request, e.g. a save under the generation an earlier redemption captured).

* ``KagentMainBackend``: ``KagentBackend`` on a ``grpc://`` URL against kagent MAIN's controller
  compiled from ``patches/kagent-main/`` (``go_controller_main.py``): runtime calls present the
  request's runtime grant, minted per request through the grants login bound to the request's
  assertion (``memory_grant_mint``, the A2A transport's part), never a bearer; the bridge's
  controls carry the bridge's ServiceAccount token and offboarding the operator's.

Both answer with plain values and raise ``Refused(reason)`` with the contract's reason code, so
a scenario cannot tell them apart except by what they do.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kagent_governed_memory import (
    AgentIdentity,
    GovernanceError,
    GovernedMemoryStore,
    KagentControllerStore,
    Principal,
    ScopeKey,
    memory_request,
)
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.scope import ScopeAssertion, key_id, sign_scope_assertion

from support.settings import CONTROLLER_BUDGETS


class Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Erasure:
    deleted: int
    verified: bool


class Backend(Protocol):
    name: str

    async def grant(self, key: ScopeKey, purpose: str) -> int: ...
    async def generation(self, key: ScopeKey) -> int | None: ...
    async def save(self, key: ScopeKey, generation: int | None, facts: list[str],
                   vectors: list[list[float]]) -> list[str]: ...
    async def search(self, key: ScopeKey, generation: int | None, vector: list[float],
                     limit: int = 5) -> list[tuple[str, str]]: ...
    async def inspect(self, key: ScopeKey) -> list[tuple[str, str]]: ...
    async def forget(self, key: ScopeKey, entry_id: str) -> Erasure: ...
    async def withdraw(self, key: ScopeKey) -> Erasure: ...
    async def status(self, key: ScopeKey) -> dict[str, Any]: ...
    async def offboard(self, principal: Principal) -> list[tuple[str, int]]: ...


class LibraryBackend:
    name = "library"

    def __init__(self, store: GovernedMemoryStore, operator: GovernedMemoryStore) -> None:
        self.store, self.operator = store, operator

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except GovernanceError as exc:
            raise Refused(exc.reason.value) from None

    async def grant(self, key: ScopeKey, purpose: str) -> int:
        return (await self._call(self.store.grant(key, purpose=purpose))).generation

    async def generation(self, key: ScopeKey) -> int | None:
        return await self._call(self.store.generation(key))

    async def save(self, key: ScopeKey, generation: int | None, facts: list[str],
                   vectors: list[list[float]]) -> list[str]:
        return await self._call(self.store.save(key, generation, facts=facts,
                                                embeddings=vectors))

    async def search(self, key: ScopeKey, generation: int | None, vector: list[float],
                     limit: int = 5) -> list[tuple[str, str]]:
        hits = await self._call(self.store.search(key, generation, vector, limit=limit))
        return [(h.id, h.text) for h in hits]

    async def inspect(self, key: ScopeKey) -> list[tuple[str, str]]:
        page = await self._call(self.store.inspect(key, page_size=50))
        return [(e.id, e.text) for e in page.entries]

    async def forget(self, key: ScopeKey, entry_id: str) -> Erasure:
        r = await self._call(self.store.forget(key, entry_id))
        return Erasure(r.deleted, r.verified)

    async def withdraw(self, key: ScopeKey) -> Erasure:
        r = await self._call(self.store.withdraw(key))
        return Erasure(r.deleted, r.verified)

    async def status(self, key: ScopeKey) -> dict[str, Any]:
        s = await self._call(self.store.status(key))
        return {"enabled": s.enabled, "generation": s.generation, "entry_count": s.entry_count}

    async def offboard(self, principal: Principal) -> list[tuple[str, int]]:
        report = await self._call(self.operator.offboard(principal))
        return [(str(s.outcome), s.deleted) for s in report.scopes]


def principal_body(principal: Principal) -> dict[str, str]:
    return {"issuer": principal.issuer_kind, "subject": principal.subject}


def scope_body(key: ScopeKey) -> dict[str, Any]:
    return {"principal": principal_body(key.principal),
            "agent_namespace": key.agent.namespace, "agent_name": key.agent.name,
            "kind": key.scope.kind.value, "room_id": key.scope.room_id or ""}


_LATEST = -1  # a call without a generation: a new request

# Who calls which route: the agent runtime or the bridge.
RUNTIME_ROUTES = frozenset({"generation", "admit", "entries", "search", "forget"})
BRIDGE_ROUTES = frozenset({"consent", "status", "inspect", "forget-all", "withdraw", "offboard"})


class HttpBackend:
    name = "controller"
    BASE = "/api/memories/governed"

    def __init__(self, client: httpx.AsyncClient, *, bridge_key: Ed25519PrivateKey, issuer: str,
                 local_server: str,
                 agent_headers: Callable[[str, str], dict[str, str]],
                 bridge_headers: Callable[[], dict[str, str]]) -> None:
        self.client, self.bridge_key, self.issuer = client, bridge_key, issuer
        self.local_server = local_server
        self.agent_headers, self.bridge_headers = agent_headers, bridge_headers
        # (key, captured generation) -> the assertion its redemption captured it with
        self.requests: dict[tuple[str, int | None], str] = {}

    def assertion(self, key: ScopeKey) -> str:
        """The bridge's assertion for one request on ``key`` (single use at /generation)."""
        return sign_scope_assertion(key, private_key=self.bridge_key, issuer=self.issuer,
                                    audience=[self.local_server],
                                    context_id=f"ctx-{secrets.token_hex(8)}",
                                    lifetime=timedelta(seconds=60))

    def headers(self, route: str, key: ScopeKey | None) -> dict[str, str]:
        if route in RUNTIME_ROUTES:
            assert key is not None
            return {**self.agent_headers(key.agent.namespace, key.agent.name),
                    "x-kagent-memory-scope": self.assertion(key)}
        return self.bridge_headers()

    async def redeem(self, key: ScopeKey) -> tuple[str, int | None]:
        """A new request on ``key``: its assertion, redeemed at /generation, and the generation
        it captured."""
        token = self.assertion(key)
        data = await self._post("generation", key, _token=token)
        self.requests[(repr(key), data["generation"])] = token
        return token, data["generation"]

    async def request_token(self, key: ScopeKey, generation: int | None) -> str:
        """The assertion of the request that captured ``generation`` for ``key`` (a new request
        redeemed now when there is none: its calls then send a generation it did not capture)."""
        token = self.requests.get((repr(key), generation))
        if token is None:
            token, _ = await self.redeem(key)
        return token

    async def request_headers(self, route: str, key: ScopeKey, generation: int | None
                              ) -> dict[str, str]:
        return {**self.agent_headers(key.agent.namespace, key.agent.name),
                "x-kagent-memory-scope": await self.request_token(key, generation)}

    async def _post(self, route: str, key: ScopeKey | None, _token: str | None = None,
                    **body: Any) -> Any:
        headers = self.headers(route, key)
        if key is not None:
            body["scope"] = scope_body(key)
            if _token is None and route in RUNTIME_ROUTES and route != "generation":
                _token = await self.request_token(key, body.get("generation", _LATEST))
            if _token is not None:
                headers["x-kagent-memory-scope"] = _token
        r = await self.client.post(f"{self.BASE}/{route}", json=body, headers=headers)
        data = r.json() if r.content else None
        if r.status_code >= 400:
            reason = data.get("error") if isinstance(data, dict) else None
            raise Refused(reason or f"http_{r.status_code}")
        return data

    async def grant(self, key: ScopeKey, purpose: str) -> int:
        return int((await self._post("consent", key, purpose=purpose))["generation"])

    async def generation(self, key: ScopeKey) -> int | None:
        return (await self.redeem(key))[1]

    async def save(self, key: ScopeKey, generation: int | None, facts: list[str],
                   vectors: list[list[float]]) -> list[str]:
        items = [{"content": f, "vector": v} for f, v in zip(facts, vectors, strict=True)]
        return list((await self._post("entries", key, generation=generation, items=items))["ids"])

    async def search(self, key: ScopeKey, generation: int | None, vector: list[float],
                     limit: int = 5) -> list[tuple[str, str]]:
        data = await self._post("search", key, generation=generation, vector=vector, limit=limit)
        return [(m["id"], m["content"]) for m in data["memories"]]

    async def inspect(self, key: ScopeKey) -> list[tuple[str, str]]:
        data = await self._post("inspect", key, page_size=50)
        return [(e["id"], e["content"]) for e in data["entries"]]

    async def forget(self, key: ScopeKey, entry_id: str) -> Erasure:
        # the agent's delete_memory within a new request (forget sends no generation)
        token, _ = await self.redeem(key)
        data = await self._post("forget", key, _token=token, entry_id=entry_id)
        return Erasure(int(data["deleted"]), bool(data["verified"]))

    async def withdraw(self, key: ScopeKey) -> Erasure:
        data = await self._post("withdraw", key)
        return Erasure(int(data.get("deleted") or 0), bool(data["verified"]))

    async def status(self, key: ScopeKey) -> dict[str, Any]:
        data = await self._post("status", key)
        return {k: data.get(k) for k in ("enabled", "generation", "entry_count")}

    async def offboard(self, principal: Principal) -> list[tuple[str, int]]:
        data = await self._post("offboard", None, principal=principal_body(principal))
        return [(s["outcome"], int(s.get("deleted") or 0)) for s in data["scopes"]]


class KagentBackend(LibraryBackend):
    """The library's kagent-mode clients against a controller: the control calls are
    ``LibraryBackend``'s on ``KagentBridgeStore`` (the bridge's token); the runtime calls go
    through ``KagentControllerStore`` (one per agent, with that agent's token) inside a request
    bound to a freshly signed assertion."""

    name = "kagent"

    def __init__(self, url: str, *, bridge_key: Ed25519PrivateKey, issuer: str,
                 local_server: str, agent_token: Callable[[str, str], str],
                 bridge_token: str) -> None:
        self.url, self.bridge_key, self.issuer = url, bridge_key, issuer
        self.local_server, self.agent_token = local_server, agent_token
        self.public_keys = {key_id(bridge_key): bridge_key.public_key()}
        self.bridge = KagentBridgeStore(url, local_server=local_server, token=bridge_token,
                                        **CONTROLLER_BUDGETS)
        super().__init__(self.bridge, self.bridge)  # type: ignore[arg-type]
        self.runtimes: dict[AgentIdentity, KagentControllerStore] = {}
        self.requests: dict[tuple[str, int | None], str] = {}
        self.contexts: dict[str, str] = {}

    async def aclose(self) -> None:
        await self.bridge.aclose()
        for runtime in self.runtimes.values():
            await runtime.aclose()

    def grant_for(self, key: ScopeKey, token: str) -> str | None:
        """The runtime grant of the request of ``token`` (none over HTTP)."""
        return None

    def runtime(self, agent: AgentIdentity) -> KagentControllerStore:
        if agent not in self.runtimes:
            self.runtimes[agent] = KagentControllerStore(
                self.url, agent=agent, local_server=self.local_server,
                token=self.agent_token(agent.namespace, agent.name), **CONTROLLER_BUDGETS)
        return self.runtimes[agent]

    @contextmanager
    def request(self, key: ScopeKey, token: str | None = None
                ) -> Iterator[ScopeAssertion]:
        """One agent request on ``key``, bound as the runtime binds it (verified token): a new
        one, or the request of ``token``."""
        if token is None:
            token = sign_scope_assertion(key, private_key=self.bridge_key, issuer=self.issuer,
                                         audience=[self.local_server],
                                         context_id=f"ctx-{secrets.token_hex(8)}",
                                         lifetime=timedelta(seconds=60))
        context = self.contexts.setdefault(token, _context_of(token))
        with memory_request(token, public_keys=self.public_keys, issuer=self.issuer,
                            agent=key.agent, context_id=context,
                            grant=self.grant_for(key, token)) as binding:
            assert binding.assertion is not None, binding.reason
            yield binding.assertion

    async def redeem(self, key: ScopeKey) -> tuple[str, int | None]:
        """A new request on ``key``, its assertion redeemed: (the token, the generation)."""
        token = sign_scope_assertion(key, private_key=self.bridge_key, issuer=self.issuer,
                                     audience=[self.local_server],
                                     context_id=f"ctx-{secrets.token_hex(8)}",
                                     lifetime=timedelta(seconds=60))
        with self.request(key, token) as assertion:
            generation = await self._call(self.runtime(key.agent).redeem(assertion))
        self.requests[(repr(key), generation)] = token
        return token, generation

    async def request_token(self, key: ScopeKey, generation: int | None) -> str:
        """The request that captured ``generation`` for ``key`` (see ``HttpBackend``)."""
        token = self.requests.get((repr(key), generation))
        if token is None:
            token, _ = await self.redeem(key)
        return token

    async def generation(self, key: ScopeKey) -> int | None:
        return (await self.redeem(key))[1]

    async def save(self, key: ScopeKey, generation: int | None, facts: list[str],
                   vectors: list[list[float]]) -> list[str]:
        with self.request(key, await self.request_token(key, generation)):
            return await self._call(self.runtime(key.agent).save(
                key, generation, facts=facts, embeddings=vectors))

    async def search(self, key: ScopeKey, generation: int | None, vector: list[float],
                     limit: int = 5) -> list[tuple[str, str]]:
        with self.request(key, await self.request_token(key, generation)):
            hits = await self._call(self.runtime(key.agent).search(key, generation, vector,
                                                                   limit=limit))
        return [(h.id, h.text) for h in hits]

    async def forget(self, key: ScopeKey, entry_id: str) -> Erasure:
        token, _ = await self.redeem(key)
        with self.request(key, token):  # the agent's delete_memory: the runtime route
            r = await self._call(self.runtime(key.agent).forget(key, entry_id))
        return Erasure(r.deleted, r.verified)


class KagentMainBackend(KagentBackend):
    """``KagentBackend`` against kagent main's compiled controller over gRPC: each request's
    runtime grant is minted (once, when the request first calls) by ``mint(key, token)``; the
    operator's offboarding through its own ``KagentBridgeStore`` (main serves Offboard to the
    operator ServiceAccounts only)."""

    name = "kagent-main"

    def __init__(self, url: str, *, bridge_key: Ed25519PrivateKey, issuer: str,
                 local_server: str, agent_token: Callable[[str, str], str],
                 bridge_token: str, operator_token: str,
                 mint: Callable[[ScopeKey, str], str]) -> None:
        super().__init__(url, bridge_key=bridge_key, issuer=issuer, local_server=local_server,
                         agent_token=agent_token, bridge_token=bridge_token)
        self.operator = self.operator_store = KagentBridgeStore(  # type: ignore[assignment]
            url, local_server=local_server, token=operator_token, **CONTROLLER_BUDGETS)
        self.mint = mint
        self.grants: dict[str, str] = {}

    def runtime(self, agent: AgentIdentity) -> KagentControllerStore:
        if agent not in self.runtimes:  # over gRPC the runtime holds no token: only grants
            self.runtimes[agent] = KagentControllerStore(
                self.url, agent=agent, local_server=self.local_server, **CONTROLLER_BUDGETS)
        return self.runtimes[agent]

    def grant_for(self, key: ScopeKey, token: str) -> str | None:
        if token not in self.grants:
            self.grants[token] = self.mint(key, token)
        return self.grants[token]

    async def aclose(self) -> None:
        await super().aclose()
        await self.operator_store.aclose()


def _context_of(token: str) -> str:
    """The A2A context id a token was signed for (its ``ctx`` claim, read unverified: the
    binding verifies it)."""
    import base64
    import json
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["ctx"])
