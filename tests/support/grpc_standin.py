"""A STAND-IN for kagent main's controller, NOT the controller: an in-process ``grpc.aio``
server of ``GovernedMemoryService`` (the library's generated stubs, main's RPC paths) that
answers every RPC from the library's direct ``GovernedMemoryStore`` on the real embedded
PostgreSQL.  kagent main has no server implementation of the service yet (patches 0010-0015
add the proto, the database client and the authentication), so this serves the proto's
contract as its comments state it: runtime calls authenticated by the runtime grant
(``x-kagent-memory-grant``), bridge and operator calls by ``authorization: Bearer``; a refusal
is a status whose message is the reason code, with one ``google.rpc.ErrorInfo`` (domain
``memory.kagent.dev``, reason = the code).  It records every call's method and metadata."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from kagent_governed_memory import (
    AdmissionDenied,
    AgentIdentity,
    ConsentRequired,
    GovernanceError,
    GovernedMemoryStore,
    InvalidInput,
    MemoryScope,
    Principal,
    ReasonCode,
    ScopeDenied,
    ScopeKey,
    StoreUnavailable,
    memory_request,
)
from kagent_governed_memory.scope import ScopeAssertion
from kagent_governed_memory.kagent.protos import governed_memory_pb2 as pb
from kagent_governed_memory.kagent.protos import governed_memory_pb2_grpc as stubs

DOMAIN = "memory.kagent.dev"
RUNTIME = {"Redeem", "Admit", "Save", "Search"}  # Forget: runtime with an assertion, else bridge


def code_for(exc: GovernanceError) -> grpc.StatusCode:
    """The status code of a refusal, the gRPC twin of the HTTP listener's status."""
    if isinstance(exc, InvalidInput):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, AdmissionDenied):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, ConsentRequired | ScopeDenied):
        return grpc.StatusCode.PERMISSION_DENIED if isinstance(exc, ScopeDenied) \
            else grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, StoreUnavailable):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


def details(reason: str, domain: str = DOMAIN) -> tuple[tuple[str, bytes], ...]:
    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(domain=domain, reason=reason))
    status = status_pb2.Status(code=0, message=reason, details=[packed])
    return (("grpc-status-details-bin", status.SerializeToString()),)


def _ts(value: Any, target: Any) -> None:
    if value is not None:
        target.FromDatetime(value)


def _entry(r: Any) -> Any:
    e = pb.GovernedMemoryEntry(id=r.id, content=r.text)
    _ts(r.created_at, e.created_at)
    _ts(r.expires_at, e.expires_at)
    if r.distance is not None:
        e.score = 1.0 - r.distance
    return e


def _erasure(r: Any) -> Any:
    e = pb.GovernedMemoryErasure(scope_id=r.scope_id, deleted=r.deleted, verified=r.verified)
    if r.generation is not None:
        e.generation = r.generation
    return e


def key_of(s: Any) -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=s.principal.subject, origin="native_local"),
                    agent=AgentIdentity(namespace=s.agent_namespace, name=s.agent_name),
                    scope=MemoryScope(kind=s.kind, room_id=s.context_id))


@dataclass
class StandIn(stubs.GovernedMemoryServiceServicer):  # type: ignore[misc]
    """The servicer.  ``refuse[method] = (code, reason or None)`` fails that RPC instead (reason
    None: no ErrorInfo); ``delay[method]`` sleeps first; ``calls`` is (method, metadata)."""

    store: GovernedMemoryStore
    operator: GovernedMemoryStore | None
    grant: str
    bearer: str
    assertions: dict[str, ScopeAssertion] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    refuse: dict[str, tuple[grpc.StatusCode, str | None]] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)

    async def _serve(self, name: str, request: Any, context: Any,
                     work: Callable[[ScopeAssertion | None], Awaitable[Any]]) -> Any:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.calls.append((name, metadata))
        if name in self.delay:
            await asyncio.sleep(self.delay[name])
        if name in self.refuse:
            code, reason = self.refuse[name]
            await context.abort(code, reason or "refused",
                                trailing_metadata=details(reason) if reason else ())
        runtime = name in RUNTIME or (name == "Forget" and bool(request.scope_assertion))
        if runtime:
            ok = metadata.get("x-kagent-memory-grant") == self.grant
            assertion = self.assertions.get(request.scope_assertion)
        else:
            ok = metadata.get("authorization") == f"Bearer {self.bearer}"
            assertion = None
        if not ok:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated",
                                trailing_metadata=details("unauthenticated"))
        try:
            if runtime:
                if assertion is None or assertion.key != key_of(request.scope):
                    raise ScopeDenied(ReasonCode.REQUEST_NOT_REDEEMED)
                with memory_request(assertion):
                    return await work(assertion)
            return await work(None)
        except GovernanceError as exc:
            await context.abort(code_for(exc), exc.reason.value,
                                trailing_metadata=details(exc.reason.value))

    async def Redeem(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(a: Any) -> Any:
            out = pb.GovernedMemoryServiceRedeemResponse()
            if request.admit_units:
                gen, refused = await self.store.redeem_admit(a, units=request.admit_units)
                out.admitted = gen is not None and refused is None
            else:
                gen = await self.store.redeem(a)
            if gen is not None:
                out.generation = gen
            return out
        return await self._serve("Redeem", request, context, work)

    async def Admit(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(a: Any) -> Any:
            await self.store.admit(a.key, request.generation, units=request.units,
                                   explicit=request.explicit)
            return pb.GovernedMemoryServiceAdmitResponse(admitted=True)
        return await self._serve("Admit", request, context, work)

    async def Save(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(a: Any) -> Any:
            ids = await self.store.save(a.key, request.generation,
                                        facts=[i.content for i in request.items],
                                        embeddings=[list(i.vector) for i in request.items])
            return pb.GovernedMemoryServiceSaveResponse(ids=ids)
        return await self._serve("Save", request, context, work)

    async def Search(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(a: Any) -> Any:
            limit = request.limit if request.HasField("limit") else 5
            if len(request.vectors):
                many = await self.store.search_many(
                    a.key, request.generation, [list(v.vector) for v in request.vectors],
                    limit=limit)
                return pb.GovernedMemoryServiceSearchResponse(results=[
                    pb.GovernedMemoryResults(memories=[_entry(r) for r in hits])
                    for hits in many])
            hits = await self.store.search(a.key, request.generation, list(request.vector),
                                           limit=limit)
            return pb.GovernedMemoryServiceSearchResponse(memories=[_entry(r) for r in hits])
        return await self._serve("Search", request, context, work)

    async def Forget(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            r = await self.store.forget(key_of(request.scope), request.entry_id)
            return pb.GovernedMemoryServiceForgetResponse(erasure=_erasure(r))
        return await self._serve("Forget", request, context, work)

    async def GrantConsent(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            r = await self.store.grant(key_of(request.scope), purpose=request.purpose)
            out = pb.GovernedMemoryServiceGrantConsentResponse(
                scope_id=r.scope_id, generation=r.generation, purpose=r.purpose,
                policy_version=r.policy_version)
            _ts(r.granted_at, out.granted_at)
            _ts(r.expires_at, out.expires_at)
            return out
        return await self._serve("GrantConsent", request, context, work)

    async def Generation(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            g = await self.store.generation(key_of(request.scope))
            return pb.GovernedMemoryServiceGenerationResponse(generation=g)
        return await self._serve("Generation", request, context, work)

    async def Status(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            s = await self.store.status(key_of(request.scope))
            out = pb.GovernedMemoryServiceStatusResponse(
                scope_id=s.scope_id, enabled=s.enabled, purpose=s.purpose or "",
                policy_version=s.policy_version or "", generation=s.generation,
                entry_count=s.entry_count,
                failure_reason=s.failure_reason.value if s.failure_reason else "")
            _ts(s.consent_expires_at, out.consent_expires_at)
            _ts(s.last_verified_erasure_at, out.last_verified_erasure_at)
            if s.max_ttl is not None:
                out.max_ttl.FromTimedelta(s.max_ttl)
            if s.entry_cap is not None:
                out.entry_cap = s.entry_cap
            return out
        return await self._serve("Status", request, context, work)

    async def Inspect(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            page = await self.store.inspect(
                key_of(request.scope), cursor=request.cursor or None,
                page_size=request.page_size if request.HasField("page_size") else 10)
            return pb.GovernedMemoryServiceInspectResponse(
                entries=[_entry(r) for r in page.entries], next_cursor=page.next_cursor or "")
        return await self._serve("Inspect", request, context, work)

    async def ForgetAll(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            r = await self.store.forget_all(key_of(request.scope))
            return pb.GovernedMemoryServiceForgetAllResponse(erasure=_erasure(r))
        return await self._serve("ForgetAll", request, context, work)

    async def Withdraw(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            r = await self.store.withdraw(key_of(request.scope))
            return pb.GovernedMemoryServiceWithdrawResponse(erasure=_erasure(r))
        return await self._serve("Withdraw", request, context, work)

    async def Offboard(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(_: Any) -> Any:
            assert self.operator is not None
            who = Principal(mxid=request.principal.subject, origin="native_local")
            report = await self.operator.offboard(who)
            return pb.GovernedMemoryServiceOffboardResponse(scopes=[
                pb.GovernedMemoryScopeOutcome(
                    scope_id=s.scope_id, deleted=s.deleted,
                    outcome=str(getattr(s.outcome, "value", s.outcome)))
                for s in report.scopes])
        return await self._serve("Offboard", request, context, work)


async def serve(standin: StandIn) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    stubs.add_GovernedMemoryServiceServicer_to_server(standin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port
