"""Kagent mode over gRPC: ``KagentControllerStore`` and ``KagentBridgeStore`` on a
``grpc://`` URL against a STAND-IN for kagent main's controller (``tests/support/grpc_standin.py``: an
in-process ``grpc.aio`` server over the library's direct store on the real embedded
PostgreSQL; main has no server for the service yet).

Every RPC goes through the public store API; every reason code a refusal can carry is mapped to
exactly the error the HTTP transport raises for it (the same code over ``httpx.MockTransport``);
runtime calls send the grant and never ``authorization``, bridge calls the bearer token;
retries only where ``_http`` retries; deadlines bound; no sentinel in logs or errors."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

grpc = pytest.importorskip("grpc", reason="GRPC TRANSPORT NOT RUN: the kagent-main extra "
                           "is not installed (pip install -e '.[test]')")

import httpx  # noqa: E402
from support.adk import AGENT, ISSUER, PUBLIC_KEYS, context_id, sign  # noqa: E402
from support.scopes import make_key, vec  # noqa: E402
from support.settings import LOCAL
from support.grpc_standin import StandIn, serve  # noqa: E402

from kagent_governed_memory import (
    GovernanceError,
    GovernedMemoryStore,
    KagentControllerStore,
    ReasonCode,
    StoreUnavailable,
    memory_request,
)
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.kagent import _answers  # noqa: E402

GRANT = "GRANT-SENTINEL-7f3a"
BEARER = "SA-TOKEN-SENTINEL-91c2"
FACT = "FACT-SENTINEL my locker code is 4711"
PURPOSE = "personal_preferences"


@pytest.fixture
async def wired(store: GovernedMemoryStore, operator: GovernedMemoryStore
                ) -> AsyncIterator[tuple[StandIn, KagentControllerStore, KagentBridgeStore]]:
    standin = StandIn(store=store, operator=operator, grant=GRANT, bearer=BEARER)
    server, port = await serve(standin)
    url = f"grpc://127.0.0.1:{port}"
    runtime = KagentControllerStore(url, agent=AGENT, local_server=LOCAL, deadline=5)
    bridge = KagentBridgeStore(url, local_server=LOCAL, token=BEARER, deadline=5)
    try:
        yield standin, runtime, bridge
    finally:
        await runtime.aclose()
        await bridge.aclose()
        await server.stop(None)


def _bind(standin: StandIn, key: Any, *, grant: str | None = GRANT, session: str = "s1") -> Any:
    token = sign(key, session=session)
    cm = memory_request(token, public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                        context_id=context_id(session), grant=grant)
    return cm, token


async def test_every_rpc_through_the_public_api(wired: Any, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    standin, runtime, bridge = wired
    key = make_key()
    consent = await bridge.grant(key, purpose=PURPOSE)
    assert consent.generation >= 1 and consent.purpose == PURPOSE
    assert await bridge.generation(key) == consent.generation  # through Generation
    assert standin.calls[-1][0] == "Generation"
    cm, token = _bind(standin, key)
    with cm as binding:
        standin.assertions[token] = binding.assertion
        gen, refused = await runtime.redeem_admit(binding.assertion, units=1)
        assert gen == consent.generation and refused is None
        binding.generation = gen
        await runtime.admit(key, gen, units=1, explicit=True)
        [entry] = await runtime.save(key, gen, facts=[FACT], embeddings=[vec(FACT)])
        [hit] = await runtime.search(key, gen, vec(FACT), limit=3)
        assert hit.id == entry and hit.text == FACT and hit.distance == pytest.approx(0, abs=1e-5)
        many = await runtime.search_many(key, gen, [vec(FACT), vec("other")], limit=2)
        assert [h.id for h in many[0]] == [entry] and len(many) == 2
        [other] = await runtime.save(key, gen, facts=["FACT two"], embeddings=[vec("FACT two")])
        receipt = await runtime.forget(key, other)
        assert receipt.deleted == 1 and receipt.verified
    st = await bridge.status(key)
    assert st.enabled and st.entry_count == 1 and st.generation == gen and st.max_ttl
    page = await bridge.inspect(key, page_size=1)
    assert [e.text for e in page.entries] == [FACT] and page.next_cursor is None
    assert (await bridge.forget(key, entry)).deleted == 1
    await runtime_save_again(standin, runtime, key)
    cleared = await bridge.forget_all(key)
    assert cleared.deleted == 1 and cleared.verified
    gone = await bridge.withdraw(key)
    assert gone.verified and not (await bridge.status(key)).enabled
    report = await bridge.offboard(key.principal)
    assert [s.outcome for s in report.scopes] == ["cleared"]
    methods = [m for m, _ in standin.calls]
    assert set(methods) == {"GrantConsent", "Generation", "Status", "Redeem", "Admit", "Save",
                            "Search", "Forget", "Inspect", "ForgetAll", "Withdraw", "Offboard"}
    for method, metadata in standin.calls:  # metadata discipline
        runtime_call = method in {"Redeem", "Admit", "Save", "Search"} or (
            method == "Forget" and "x-kagent-memory-grant" in metadata)
        if runtime_call:
            assert metadata["x-kagent-memory-grant"] == GRANT
            assert "authorization" not in metadata, method
        else:
            assert metadata["authorization"] == f"Bearer {BEARER}"
            assert "x-kagent-memory-grant" not in metadata, method
        assert "x-user-id" not in metadata and "x-kagent-memory-scope" not in metadata
    assert methods.count("Forget") == 2
    for sentinel in (FACT, GRANT, BEARER, token, key.principal.subject):
        assert sentinel not in caplog.text


async def runtime_save_again(standin: StandIn, runtime: KagentControllerStore, key: Any) -> None:
    cm, token = _bind(standin, key, session="s2")
    with cm as binding:
        standin.assertions[token] = binding.assertion
        gen = await runtime.redeem(binding.assertion)
        await runtime.save(key, gen, facts=[FACT], embeddings=[vec(FACT)])


async def test_a_runtime_call_without_a_grant_sends_nothing(wired: Any) -> None:
    standin, runtime, _ = wired
    key = make_key()
    cm, token = _bind(standin, key, grant=None)
    with cm as binding, pytest.raises(GovernanceError) as caught:
        await runtime.redeem(binding.assertion)
    assert caught.value.reason is ReasonCode.UNAUTHENTICATED and standin.calls == []
    assert GRANT not in repr(caught.value) and token not in str(caught.value)


def _http_error(status: int, reason: str) -> GovernanceError:
    """What the HTTP transport raises for ``{"error": reason}`` with ``status``."""
    from kagent_governed_memory.kagent import _http as http_transport_module

    _decode = http_transport_module._decode

    try:
        _decode(status, json.dumps({"error": reason}).encode(), "status")
    except GovernanceError as exc:
        return exc
    raise AssertionError("no error")


async def test_each_refusal_reason_maps_as_over_http(wired: Any) -> None:
    standin, _, bridge = wired
    key = make_key()
    codes = [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED,
             grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED,
             grpc.StatusCode.INTERNAL]
    for i, reason in enumerate([*ReasonCode, "not_a_reason_of_ours"]):
        code = codes[i % len(codes)]
        value = getattr(reason, "value", reason)
        standin.refuse["Status"] = (code, value)
        with pytest.raises(GovernanceError) as caught:
            await bridge.status(key)
        expected = _http_error(_answers.GRPC_AS_HTTP.get(code.name, 500), value)
        assert type(caught.value) is type(expected), (value, code)
        assert caught.value.reason is expected.reason, (value, code)
        assert caught.value.__cause__ is None and caught.value.__context__ is None


async def test_unknown_domain_and_no_detail_fall_back_by_status(wired: Any) -> None:
    standin, _, bridge = wired
    key = make_key()
    standin.refuse["Status"] = (grpc.StatusCode.PERMISSION_DENIED, None)
    with pytest.raises(GovernanceError) as caught:
        await bridge.status(key)
    assert caught.value.reason is ReasonCode.FORBIDDEN


async def test_retries_only_where_http_retries(wired: Any) -> None:
    standin, runtime, bridge = wired
    key = make_key()
    await bridge.grant(key, purpose=PURPOSE)
    standin.refuse["Status"] = (grpc.StatusCode.UNAVAILABLE, None)  # idempotent: 3 attempts
    with pytest.raises(StoreUnavailable):
        await bridge.status(key)
    standin.refuse["ForgetAll"] = (grpc.StatusCode.UNAVAILABLE, "store_unavailable")
    with pytest.raises(StoreUnavailable):  # not idempotent: once
        await bridge.forget_all(key)
    standin.refuse["Withdraw"] = (grpc.StatusCode.FAILED_PRECONDITION, "consent_required")
    with pytest.raises(GovernanceError):  # a refusal is final even for an idempotent call
        await bridge.withdraw(key)
    methods = [m for m, _ in standin.calls]
    assert methods.count("Status") == 3 and methods.count("ForgetAll") == 1
    assert methods.count("Withdraw") == 1


async def test_deadline_bounds_a_slow_controller(wired: Any) -> None:
    standin, _, _ = wired
    key = make_key()
    url = f"grpc://{standin_target(wired)}"
    slow = KagentBridgeStore(url, local_server=LOCAL, token=BEARER, deadline=1.0)
    standin.delay["Status"] = 30
    started = time.monotonic()
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await slow.status(key)
    finally:
        await slow.aclose()
    assert time.monotonic() - started < 3 and caught.value.__cause__ is None


def standin_target(wired: Any) -> str:
    _, runtime, _ = wired
    return str(runtime._http._target)


async def test_a_controller_that_is_not_there_is_unavailable(unused_tcp_port: int) -> None:
    store = KagentBridgeStore(f"grpc://127.0.0.1:{unused_tcp_port}", local_server=LOCAL,
                              token=BEARER, deadline=2.0)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.status(make_key())
    finally:
        await store.aclose()
    assert BEARER not in repr(caught.value) and caught.value.__cause__ is None


def test_grpc_url_is_checked_and_the_runtime_takes_no_token() -> None:
    with pytest.raises(GovernanceError) as caught:
        KagentControllerStore("grpc://127.0.0.1:1", agent=AGENT, local_server=LOCAL, token="t")
    assert caught.value.ids.get("field") == "token"
    with pytest.raises(GovernanceError):
        KagentBridgeStore("grpc:///path", local_server=LOCAL, token="t")
    with pytest.raises(GovernanceError):
        KagentBridgeStore("grpc://h:1", local_server=LOCAL, token="t",
                          client=httpx.AsyncClient(trust_env=False))


async def test_consent_main_cannot_express_is_refused_not_dropped(wired: Any) -> None:
    standin, _, bridge = wired
    with pytest.raises(GovernanceError) as caught:
        await bridge.grant(make_key(), purpose=PURPOSE, classification="sensitive")
    assert caught.value.reason is ReasonCode.INVALID_ARGUMENT and standin.calls == []
    await asyncio.sleep(0)


def test_a_grant_is_bound_only_with_a_verified_assertion() -> None:
    key = make_key()
    with memory_request(None, grant=GRANT) as unbound:
        assert unbound.grant is None
    with memory_request(sign(key), public_keys=PUBLIC_KEYS, issuer=ISSUER, agent=AGENT,
                        context_id=context_id(), grant=GRANT) as bound:
        assert bound.grant == GRANT and GRANT not in repr(bound)
