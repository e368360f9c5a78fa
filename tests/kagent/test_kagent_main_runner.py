"""The ADK Runner in kagent mode against kagent MAIN's controller, compiled from
``patches/kagent-main/`` (``go_controller_main``): ``GovernedMemoryService`` on
``KagentControllerStore`` over ``grpc://`` (the request's runtime grant, never a token) and the
bridge's controls on ``KagentBridgeStore`` (the bridge's ServiceAccount token), against main's
real gRPC server (its interceptors, 0015's ``GovernedAuth``, 0016's handlers) on the embedded
PostgreSQL, migrated by main's own runner.  A real google-adk ``Runner`` drives every turn; the
model is scripted.  Each request's grant is minted by this harness through the grants login
(``memory_grant_mint``), bound to that request's assertion: the A2A transport's part.

Without Go, kagent's or substrate's source the tests are reported as NOT RUN (skipped with the
reason in pytest's summary), never passed.
"""

from __future__ import annotations

import io
import logging

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from support import go_controller_main
import grpc
import grpc.aio

import pytest
from support.adk import AGENT, BRIDGE_KEY, ISSUER, PUBLIC_KEYS, build, context_id, save_plan, sign
from support.db import Db, physical_rows
from support.scopes import make_key, vec
from support.settings import CONTROLLER_BUDGETS, LOCAL
from support.go_controller import BRIDGE_SERVICE_ACCOUNT, Unavailable, service_account_token
from psycopg.conninfo import make_conninfo

from kagent_governed_memory import (
    GovernanceError,
    KagentControllerStore,
    ReasonCode,
    memory_request,
)
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.dev import GRANTS_ROLE
from kagent_governed_memory.scope import public_key_pem

# against kagent main's compiled controller (go_controller_main)
pytestmark = pytest.mark.controller

PURPOSE = "personal_preferences"
ENV = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(BRIDGE_KEY).decode(),
       "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
FIVE_TURNS = ["I drink green tea every morning.", "My project is called Lighthouse.",
              "I live in Lisbon.", "I cycle to work.", "That is all for today."]


@dataclass
class Main:
    runtime: KagentControllerStore
    bridge: KagentBridgeStore
    db: Db
    grants_dsn: str
    process: go_controller_main.MainControllerProcess
    minted: list[str]

    def mint(self, token: str) -> str:
        """The A2A transport's part for one forwarded request: a grant bound to ``token``."""
        grant = go_controller_main.mint_grant(self.grants_dsn, namespace=AGENT.namespace,
                                              name=AGENT.name, assertion=token)
        self.minted.append(grant)
        return grant


@pytest.fixture
async def main(database: Db) -> AsyncIterator[Main]:
    # main keeps the governed tables in their own schema: the test's admin reads them there
    db = replace(database, admin_dsn=make_conninfo(
        database.admin_dsn, options=f"-c search_path={go_controller_main.SCHEMA},public"))
    running = go_controller_main.serve(db.controller_dsn, migrate_dsn=db.owner_dsn,
                                       local_server=LOCAL, env=ENV)
    try:
        process = running.__enter__()
    except Unavailable as exc:
        pytest.skip(f"KAGENT MAIN CONTROLLER NOT RUN: it cannot be compiled here ({exc})")
    runtime = KagentControllerStore(process.url, agent=AGENT, local_server=LOCAL,
                                    **CONTROLLER_BUDGETS)
    bridge = KagentBridgeStore(process.url, local_server=LOCAL,
                               token=service_account_token(*BRIDGE_SERVICE_ACCOUNT),
                               **CONTROLLER_BUDGETS)
    try:
        yield Main(runtime, bridge, db, make_conninfo(db.admin_dsn, user=GRANTS_ROLE),
                   process, [])
    finally:
        await runtime.aclose()
        await bridge.aclose()
        running.__exit__(None, None, None)


def outcomes(h: Any) -> set[tuple[str, str]]:
    return {(m[1]["kgm.memory.operation"], m[1]["kgm.memory.outcome"]) for m in h.metrics()
            if "kgm.memory.operation" in m[1]}


async def test_consent_then_autosave_then_prefetch_on_main(main: Main) -> None:
    h = build(main.runtime, plan=save_plan,  # type: ignore[arg-type]
              summaries=['["Prefers green tea in the morning", "Works on project Lighthouse"]'])
    key = make_key()
    await h.turn("Before consent I mention my secret hobby: falconry.", key=key, grant=main.mint)
    assert physical_rows(main.db) == 0 and ("request", "consent_required") in outcomes(h)
    await main.bridge.grant(key, purpose=PURPOSE)
    for text in FIVE_TURNS:
        await h.turn(text, key=key, grant=main.mint)
    await h.service.drain()
    assert h.model.calls.count("summarise") == 1
    assert physical_rows(main.db, key) == 2
    [prompt] = h.summariser_prompts  # the turn sent before consent is never summarised
    assert "falconry" not in prompt and "Lighthouse" in prompt
    await h.turn("What should I drink this morning? I usually like green tea.", key=key,
                 session="s2", grant=main.mint)
    instruction = str(h.model.requests[-1].config.system_instruction)
    assert "<memory>" in instruction and "Prefers green tea in the morning" in instruction
    assert (await main.bridge.status(key)).entry_count == 2
    assert len(set(main.minted)) == len(main.minted) == 7  # one grant per request


async def test_a_first_turn_is_two_controller_calls_and_a_later_turn_one_on_main(
        main: Main) -> None:
    """Issue 29 on main: a session's first turn is one Redeem (with its prefetch's admission)
    and one batched Search; a later turn one Redeem -- as main's server logged them."""
    h = build(main.runtime)  # type: ignore[arg-type]
    key = make_key()
    await main.bridge.grant(key, purpose=PURPOSE)
    before = len(main.process.rpcs())
    await h.turn("I drink green tea every morning. What should I try next?", key=key,
                 grant=main.mint)
    first = main.process.rpcs()[before:]
    assert first == ["Redeem", "Search"], first
    await h.turn("Thanks, that is all.", key=key, grant=main.mint)
    assert main.process.rpcs()[before + len(first):] == ["Redeem"]


async def test_a_replayed_grant_is_refused_by_main(main: Main) -> None:
    """A grant serves the one request it was minted for: once its response closed (revoked)
    it is refused (unauthenticated), and a live grant presented with another request's
    assertion is refused too (assertion_invalid); neither changes the store."""
    h = build(main.runtime, plan=save_plan)  # type: ignore[arg-type]
    key = make_key()
    await main.bridge.grant(key, purpose=PURPOSE)
    first = sign(key)
    grant = main.mint(first)
    await h.turn("remember: I like green tea", key=key, token=first, grant=grant)
    await h.service.drain()
    assert physical_rows(main.db, key) == 1
    other = main.mint(sign(key, session="other"))  # live, bound to another request
    assert go_controller_main.revoke_grant(main.grants_dsn, grant)  # the response closed
    for replayed, reason in ((grant, ReasonCode.UNAUTHENTICATED),
                             (other, ReasonCode.ASSERTION_INVALID)):
        with memory_request(sign(key), public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                            context_id=context_id(), grant=replayed) as binding:
            assert binding.assertion is not None
            with pytest.raises(GovernanceError) as info:
                await main.runtime.redeem(binding.assertion)
            assert info.value.reason is reason
            with pytest.raises(GovernanceError):
                await main.runtime.save(key, 1, facts=["replayed fact"],
                                        embeddings=[vec("replayed fact")])
    # through the Runner: the chat answers, nothing is saved with the replayed grant
    assert await h.turn("remember: I also like coffee", key=key, grant=grant)
    await h.service.drain()
    assert physical_rows(main.db, key) == 1
    assert ("request", "unauthenticated") in outcomes(h)


async def test_no_sentinel_or_grant_reaches_the_logs_on_main(main: Main) -> None:
    from support.sentinels import leaks, make_sentinels

    from kagent_governed_memory.telemetry import install_content_free_logging

    s = make_sentinels()
    root, stream = logging.getLogger(), io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s %(args)r"))
    old_level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    sanitizer = install_content_free_logging()
    h = build(main.runtime, plan=save_plan,  # type: ignore[arg-type]
              summaries=[f"Sure! Facts: {s['summary']}"])
    key = make_key()
    try:
        await main.bridge.grant(key, purpose=PURPOSE)
        for text in [f"Tell me what you remember about {s['prefetch_query']} and my drink.",
                     f"remember: {s['fact']} prefers green tea with honey",
                     f"recall: {s['load_query']}", "Plain turn one.", "Plain turn two."]:
            assert await h.turn(text, key=key, grant=main.mint)
        await h.service.drain()
        assert physical_rows(main.db, key) >= 1
    finally:
        sanitizer.remove()
        root.removeHandler(handler)
        root.setLevel(old_level)
    main.process.stop()  # flush the controller's log
    sinks = {"logs": stream.getvalue(), "controller log": main.process.log.read_text()}
    assert "Governed memory operation" in sinks["controller log"]  # it logged, and ...
    assert "controller" in sinks["logs"]
    for sink, text in sinks.items():
        assert leaks(text, s) == [], sink
        leaked = sum(g in text or g[:16] in text for g in main.minted)
        assert leaked == 0, f"{leaked} runtime grant(s) reached the {sink}"
        assert BRIDGE_KEY is not None and service_account_token(
            *BRIDGE_SERVICE_ACCOUNT) not in text, sink




async def test_the_bridge_reads_a_generation_through_mains_generation_rpc(main: Main) -> None:
    """0016's ``Generation`` on the compiled server (0013's ``GetMemoryGeneration``): unset
    without consent, the consent's generation once granted (a renewal keeps it), unset again
    once withdrawn; a runtime grant (not the bridge) is UNAUTHENTICATED; a malformed scope is
    ``invalid_identity`` in the ErrorInfo.  The library's bridge reads it through the RPC.
    Reading changes nothing."""
    from kagent_governed_memory.kagent.protos import governed_memory_pb2 as pb
    from kagent_governed_memory.kagent.protos import governed_memory_pb2_grpc as stubs
    from kagent_governed_memory.kagent import _grpc as grpc_transport_module

    _reason = grpc_transport_module._reason

    key = make_key()
    scope = pb.MemoryScope(principal=pb.MemoryPrincipal(issuer=key.principal.issuer_kind,
                                                        subject=key.principal.subject),
                           agent_namespace=key.agent.namespace, agent_name=key.agent.name,
                           kind=key.scope.kind.value, context_id=key.scope.room_id)
    bearer = (("authorization", f"Bearer {service_account_token(*BRIDGE_SERVICE_ACCOUNT)}"),)
    request = pb.GovernedMemoryServiceGenerationRequest(scope=scope)
    async with grpc.aio.insecure_channel(main.process.url.removeprefix("grpc://")) as channel:
        stub = stubs.GovernedMemoryServiceStub(channel)  # type: ignore[no-untyped-call]

        async def read() -> int | None:
            got = await stub.Generation(request, metadata=bearer, timeout=30)
            return got.generation if got.HasField("generation") else None

        assert await read() is None  # no scope, no consent
        consent = await main.bridge.grant(key, purpose=PURPOSE)
        before = _state(main.db)
        assert await read() == consent.generation
        assert await main.bridge.generation(key) == consent.generation  # the library, over gRPC
        assert _state(main.db) == before  # a read redeems and records nothing
        assert (await main.bridge.grant(key, purpose=PURPOSE)).generation == consent.generation
        assert await read() == consent.generation

        grant = main.mint(sign(key))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generation(request, metadata=(("x-kagent-memory-grant", grant),),
                                  timeout=30)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        bad = pb.GovernedMemoryServiceGenerationRequest(scope=pb.MemoryScope(
            principal=scope.principal, agent_namespace=scope.agent_namespace,
            agent_name="Not_An_Agent", kind=scope.kind, context_id=scope.context_id))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Generation(bad, metadata=bearer, timeout=30)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "invalid_identity"
        assert _reason(info.value) == "invalid_identity"  # the ErrorInfo's reason

        await main.bridge.withdraw(key)
        assert await read() is None
    assert await main.bridge.generation(key) is None


async def test_runtime_grants_are_verified_by_the_series_store_when_it_has_one(main: Main) -> None:
    """0017's ``memorygrant.Store`` verifies the grants once the series holds it; until then the
    overlay's stand-in over ``memory_grant_resolve`` does, and the server's log says which."""
    log = main.process.log.read_text()
    if go_controller_main.has_grant_store(go_controller_main.go_patches()):
        assert "runtime grants verified by memorygrant.Store (0017)" in log
    else:
        assert "runtime grants verified by memory_grant_resolve stand-in" in log


def _state(db: Db) -> dict[str, int]:
    return {t: int(db.scalar(f"SELECT count(*) FROM {t}")) for t in (
        "memory_scope", "memory_entry", "memory_audit", "memory_assertion_use",
        "memory_runtime_grant")}


async def test_mains_governed_auth_refuses_the_wrong_caller_and_changes_nothing(
        main: Main) -> None:
    """0015 on the compiled server: no credential, a grant and a bearer together, the bridge's
    bearer on a runtime RPC, an agent's token on a bridge RPC and the bridge on the operator's
    Offboard are UNAUTHENTICATED; another Agent's grant is agent_mismatch.  Nothing changes."""
    from kagent_governed_memory.kagent.protos import governed_memory_pb2 as pb
    from kagent_governed_memory.kagent.protos import governed_memory_pb2_grpc as stubs

    key = make_key()
    await main.bridge.grant(key, purpose=PURPOSE)
    token = sign(key)
    mine = main.mint(token)
    before = _state(main.db)
    scope = pb.MemoryScope(principal=pb.MemoryPrincipal(issuer=key.principal.issuer_kind,
                                                        subject=key.principal.subject),
                           agent_namespace=key.agent.namespace, agent_name=key.agent.name,
                           kind=key.scope.kind.value, context_id=key.scope.room_id)
    bridge = ("authorization", f"Bearer {service_account_token(*BRIDGE_SERVICE_ACCOUNT)}")
    agent = ("authorization", f"Bearer {service_account_token(AGENT.namespace, AGENT.name)}")
    redeem = pb.GovernedMemoryServiceRedeemRequest(scope=scope, scope_assertion=token)
    cases: list[tuple[str, Any, tuple[tuple[str, str], ...]]] = [
        ("Redeem", redeem, ()),
        ("Redeem", redeem, (("x-kagent-memory-grant", mine), bridge)),
        ("Redeem", redeem, (bridge,)),
        ("GrantConsent", pb.GovernedMemoryServiceGrantConsentRequest(scope=scope,
                                                                     purpose=PURPOSE), (agent,)),
        ("Offboard", pb.GovernedMemoryServiceOffboardRequest(principal=scope.principal),
         (bridge,)),
    ]
    async with grpc.aio.insecure_channel(main.process.url.removeprefix("grpc://")) as channel:
        stub = stubs.GovernedMemoryServiceStub(channel)  # type: ignore[no-untyped-call]
        for i, (method, request, metadata) in enumerate(cases):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await getattr(stub, method)(request, metadata=metadata, timeout=30)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED, (i, method)
    other = go_controller_main.mint_grant(main.grants_dsn, namespace="kagent", name="agent-a",
                                          assertion=token)
    with memory_request(token, public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                        context_id=context_id(), grant=other) as binding:
        assert binding.assertion is not None
        with pytest.raises(GovernanceError) as refused:
            await main.runtime.redeem(binding.assertion)
    assert refused.value.reason is ReasonCode.AGENT_MISMATCH
    after = _state(main.db)
    assert after == {**before, "memory_runtime_grant": before["memory_runtime_grant"] + 1}
