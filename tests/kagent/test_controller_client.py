"""The kagent-mode clients against a hostile or broken peer (an in-process ``httpx`` transport):
what leaves in a request, what an answer can make them do, and that nothing they raise or log
carries a fact, a token or an assertion.  (Against the real controller: test_kagent_mode.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from support.adk import AGENT, ISSUER, PUBLIC_KEYS, sign

from kagent_governed_memory import (
    GovernanceError,
    InvalidInput,
    KagentControllerStore,
    Principal,
    ReasonCode,
    StoreUnavailable,
    memory_request,
)
from kagent_governed_memory.kagent import MAX_ANSWER_BYTES, KagentBridgeStore

LOCAL = "example.org"
FACT = "FACTSENTINEL-likes-green-tea"
SA_TOKEN = "SATOKENSENTINEL"
URL = "http://controller.test:8085"


class Peer:
    """A scripted controller: ``answer(request)`` gives the response; requests are kept."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer, self.seen = answer, []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return self.answer(request)

    def client(self, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self), trust_env=False, **kw)


def key() -> Any:
    from support.scopes import make_key

    return make_key()


def runtime(peer: Peer, **kw: Any) -> KagentControllerStore:
    kw.setdefault("token", SA_TOKEN)
    return KagentControllerStore(URL, agent=AGENT, local_server=LOCAL,
                                 client=peer.client(), **kw)


def bound(k: Any, session: str = "s1") -> Any:
    return memory_request(sign(k, session=session), public_keys=PUBLIC_KEYS, issuer=ISSUER,
                          agent=AGENT, context_id=f"a2a-context-{session}")


def traces(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args) + \
        repr(exc.__context__) + repr(exc.__cause__)


def ok(body: Any, status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _r: httpx.Response(status, json=body)


@pytest.mark.parametrize("token", ["SATOKENSENTINELé", "SATOKEN SENTINEL", "SATOKEN\nSENTINEL"])
async def test_an_unusable_token_is_no_token_and_never_echoed(token: str) -> None:
    peer = Peer(ok({"generation": 1}))
    for store in (runtime(peer, token=token), runtime(peer, token=lambda: token)):
        with bound(k := key()) as b, pytest.raises(InvalidInput) as info:
            await store.redeem(b.assertion)
        assert info.value.reason is ReasonCode.UNAUTHENTICATED
        assert "SENTINEL" not in traces(info.value) and not peer.seen
    assert k


async def test_the_token_file_is_reread_when_rotated_and_bounded(tmp_path: Any) -> None:
    from kagent_governed_memory.kagent import TokenSource

    path = tmp_path / "kagent-token"
    path.write_text("first-token\n")
    source = TokenSource(None, path)
    assert source.get() == "first-token"
    stat = os.stat(path)
    path.write_text("other-token-1\n")  # rotated in place, the same mtime kept
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert source.get() == "other-token-1"
    path.write_bytes(b"x" * 20000)
    assert source.get() == ""  # over 16 KiB: no token
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert TokenSource(None, fifo).get() == ""  # not a regular file: not opened (no block)
    assert TokenSource(None, tmp_path / "missing").get() == ""


async def test_redirects_are_never_followed_even_by_a_callers_client() -> None:
    peer = Peer(lambda r: httpx.Response(307, headers={"Location": "http://elsewhere.test/x"}))
    store = KagentControllerStore(URL, agent=AGENT, local_server=LOCAL, token=SA_TOKEN,
                                  client=peer.client(follow_redirects=True))
    with bound(k := key()) as b, pytest.raises(GovernanceError) as info:
        await store.save(k, 1, facts=[FACT], embeddings=[[0.1] * 768])
    assert b and [r.url.host for r in peer.seen] == ["controller.test"]
    assert info.value.reason is ReasonCode.CONTROLLER_ERROR and FACT not in traces(info.value)


async def test_a_client_that_trusts_the_environment_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        KagentControllerStore(URL, agent=AGENT, local_server=LOCAL, token=SA_TOKEN,
                              client=httpx.AsyncClient())
    assert info.value.ids["field"] == "http_client"


async def test_a_trickling_peer_cannot_hold_a_call_past_its_deadline() -> None:
    async def trickle() -> AsyncIterator[bytes]:
        yield b"{"
        while True:
            await asyncio.sleep(0.05)
            yield b" "

    peer = Peer(lambda r: httpx.Response(200, content=trickle()))
    store = runtime(peer, deadline=0.5)
    with bound(k := key()):
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(StoreUnavailable):
            await store.search(k, 1, [0.1] * 768)
        assert loop.time() - started < 5.0  # the 0.5 s deadline, not the 10 s per-read timeout


async def test_answers_are_bounded_in_size_and_depth() -> None:
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        while True:
            sent.append(1 << 20)
            yield b" " * (1 << 20)

    store = runtime(Peer(lambda r: httpx.Response(200, content=endless())))
    with bound(k := key()), pytest.raises(StoreUnavailable):
        await store.search(k, 1, [0.1] * 768)
    assert sum(sent) <= 3 * (MAX_ANSWER_BYTES + (2 << 20))  # three attempts, each cut off
    deep = b"[" * 200_000 + b"]" * 200_000
    store = runtime(Peer(lambda r: httpx.Response(200, content=deep)))
    with bound(k := key()), pytest.raises(GovernanceError) as info:
        await store.search(k, 1, [0.1] * 768)
    assert info.value.reason is ReasonCode.CONTROLLER_ERROR


@pytest.mark.parametrize("answer", [
    {"memories": [{"id": "1", "content": FACT, "created_at": FACT, "expires_at": FACT}]},
    {"memories": [{"id": "1", "content": FACT, "created_at": "2026-12-01T00:00:00Z",
                   "expires_at": "2026-12-02T00:00:00Z", "score": FACT}]},
    {"memories": FACT},
    [FACT],
])
async def test_a_malformed_answer_is_controller_error_with_no_trace_of_it(answer: Any) -> None:
    store = runtime(Peer(ok(answer)))
    with bound(k := key()), pytest.raises(GovernanceError) as info:
        await store.search(k, 1, [0.1] * 768)
    assert info.value.reason is ReasonCode.CONTROLLER_ERROR
    assert info.value.__context__ is None and FACT not in traces(info.value)


@pytest.mark.parametrize("scopes", [[{"scope_id": ["x"], "outcome": "cleared"}],
                                    [{"scope_id": "sk_1", "outcome": "cleared",
                                      "deleted": FACT}], [FACT], FACT])
async def test_a_malformed_offboarding_answer_is_controller_error(scopes: Any) -> None:
    bridge = KagentBridgeStore(URL, local_server=LOCAL, token=SA_TOKEN,
                               client=Peer(ok({"scopes": scopes})).client())
    with pytest.raises(GovernanceError) as info:
        await bridge.offboard(Principal(mxid="@alice:example.org", origin="native_local"))
    assert info.value.reason is ReasonCode.CONTROLLER_ERROR and FACT not in traces(info.value)


async def test_a_2xx_carrying_an_error_is_that_error() -> None:
    store = runtime(Peer(ok({"error": "consent_required"})))
    with bound(k := key()), pytest.raises(GovernanceError) as info:
        await store.admit(k, 1, units=1)
    assert info.value.reason is ReasonCode.CONSENT_REQUIRED


async def test_an_error_body_is_read_for_its_code_only(caplog: Any) -> None:
    store = runtime(Peer(ok({"error": "invalid_text", "detail": FACT}, status=400)))
    with caplog.at_level(logging.DEBUG), bound(k := key()), \
            pytest.raises(InvalidInput) as info:
        await store.save(k, 1, facts=["x"], embeddings=[[0.1] * 768])
    assert info.value.reason is ReasonCode.INVALID_TEXT
    assert FACT not in traces(info.value) + caplog.text and SA_TOKEN not in caplog.text


async def test_redeem_spends_only_the_bound_requests_assertion() -> None:
    peer = Peer(ok({"generation": 1}))
    store = runtime(peer)
    k = key()
    with bound(k, "a") as a:
        other = a.assertion
    with bound(k, "b"), pytest.raises(GovernanceError) as info:
        await store.redeem(other)
    assert info.value.reason is ReasonCode.SCOPE_MISMATCH and not peer.seen


async def test_what_a_runtime_call_sends() -> None:
    peer = Peer(ok({"ids": ["7f1c9a52-4c1e-4d36-9a5e-0d4b3c2a1f00"]}, status=201))
    store = runtime(peer)
    with bound(k := key()) as b:
        assert await store.save(k, 3, facts=[FACT], embeddings=[[0.1] * 768]) == [
            "7f1c9a52-4c1e-4d36-9a5e-0d4b3c2a1f00"]
    [request] = peer.seen
    assert request.url.path == "/api/memories/governed/entries"
    assert request.headers["authorization"] == f"Bearer {SA_TOKEN}"
    assert request.headers["x-agent-name"] == AGENT.app_name
    assert request.headers["x-kagent-memory-scope"] == b.token
    body = json.loads(request.content)
    assert body["generation"] == 3 and body["items"][0]["content"] == FACT
    assert body["scope"]["principal"] == {"issuer": "matrix", "subject": k.principal.subject}


@pytest.mark.parametrize("answer", [
    lambda r: httpx.Response(200, content=b"[" * 200_000 + b"]" * 200_000),
    lambda r: httpx.Response(500, text=FACT),
    lambda r: httpx.Response(307, headers={"Location": "http://elsewhere.test/"}),
])
@pytest.mark.parametrize("token", [SA_TOKEN, "SATOKENSENTINELé"])
async def test_the_chat_answers_whatever_the_controller_does(answer: Any, token: str,
                                                             caplog: Any) -> None:
    from support.adk import build, save_plan

    store = runtime(Peer(answer), token=token)
    h = build(store, plan=save_plan)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG):
        out = await h.turn(f"remember: {FACT}", key=key())
    assert out and FACT not in caplog.text and SA_TOKEN not in caplog.text


def _route(request: httpx.Request) -> str:
    return request.url.path.rsplit("/", 1)[-1]


@pytest.mark.parametrize("admission, calls, refusal", [
    ("admitted", ["generation"], None),
    ("budget_exhausted", ["generation"], ReasonCode.BUDGET_EXHAUSTED),
    ("rate_limited", ["generation"], ReasonCode.RATE_LIMITED),
    (None, ["generation", "admit"], None),  # an older controller: it ignored "admit"
])
async def test_redeem_admit_is_one_call_and_falls_back_on_an_older_controller(
        admission: str | None, calls: list[str], refusal: ReasonCode | None) -> None:
    def answer(r: httpx.Request) -> httpx.Response:
        if _route(r) == "admit":
            return httpx.Response(200, json={"admitted": True})
        body = {"generation": 3, **({"admission": admission} if admission else {})}
        return httpx.Response(200, json=body)

    peer = Peer(answer)
    store = runtime(peer)
    with bound(key()) as b:
        assert await store.redeem_admit(b.assertion, units=4) == (3, refusal)
    assert [_route(r) for r in peer.seen] == calls
    sent = json.loads(peer.seen[0].content)
    assert sent["admit"] == {"units": 4, "explicit": False}
    if len(calls) == 2:  # the fallback admits under the generation the redemption captured
        assert json.loads(peer.seen[1].content)["generation"] == 3


async def test_redeem_admit_without_consent_admits_nothing() -> None:
    peer = Peer(ok({"generation": None}))
    with bound(key()) as b:
        assert await runtime(peer).redeem_admit(b.assertion, units=2) == (None, None)
    assert [_route(r) for r in peer.seen] == ["generation"]


async def test_a_first_turns_prefetch_is_two_calls_and_a_later_turn_one() -> None:
    """The service's order kept: redeem + admit (one call) before any embedding, then one
    batched search; a later turn only redeems."""
    from kagent_governed_memory.adk import GovernedMemoryService
    from kagent_governed_memory.embedding import HashingEmbedder

    embedded: list[str] = []

    def answer(r: httpx.Request) -> httpx.Response:
        assert embedded == [] or _route(r) == "search"  # nothing embedded before admission
        if _route(r) == "generation":
            admit = json.loads(r.content).get("admit")
            return httpx.Response(200, json={"generation": 1,
                                             **({"admission": "admitted"} if admit else {})})
        n = len(json.loads(r.content)["vectors"])
        return httpx.Response(200, json={"results": [[] for _ in range(n)]})

    peer = Peer(answer)
    store = runtime(peer)
    embedder = HashingEmbedder(store.policy.embedding_dimension)
    real = embedder.embed

    async def embed(texts: list[str]) -> list[list[float]]:
        embedded.extend(texts)
        return await real(texts)

    embedder.embed = embed  # type: ignore[method-assign]
    service = GovernedMemoryService(store, agent=AGENT, embedder=embedder)
    queries = ["I would like green tea in the mornings please.", "And a quiet room too."]
    with bound(key()):
        units = service.prefetch_units(queries)
        assert units == 4
        assert await service.admitted(admit_units=units) is not None
        assert await service.prefetch(queries) == []
    assert [_route(r) for r in peer.seen] == ["generation", "search"]
    assert json.loads(peer.seen[0].content)["admit"]["units"] == 4
    peer.seen.clear()
    embedded.clear()
    with bound(key(), session="s2"):  # a later turn: no prefetch, one call
        assert await service.admitted() is not None
    assert [_route(r) for r in peer.seen] == ["generation"]
