"""Embedders: the offline HashingEmbedder and OpenAICompatibleEmbedder against a real HTTP server.

No database: the provider is a ThreadingHTTPServer on 127.0.0.1 whose response each test sets and
which records every request it receives.  Failure tests inject distinct sentinels into the request
texts and the provider's response body and prove neither reaches the raised error, its chain, its
formatted traceback or any log record (SPEC B6).
"""

from __future__ import annotations

import base64
import json
import logging
import math
import pickle
import random
import secrets
import socket
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from kagent_governed_memory.embedding import Embedder, HashingEmbedder, OpenAICompatibleEmbedder
from kagent_governed_memory.errors import InvalidInput, ProviderError, ReasonCode

from support.settings import EMBEDDER_TIMEOUT

DIM = 768


# -- a scriptable provider ---------------------------------------------------------------------


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict


def code(text: str) -> float:
    """A per-text marker the fake provider puts in component 0, so order can be checked."""
    return float(zlib.crc32(text.encode()) % 1000 + 1)


def vectors_body(texts: list[str], dim: int = DIM) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": [code(t)] + [0.25] * (dim - 1)}
            for i, t in enumerate(texts)]
    return json.dumps({"object": "list", "data": data, "model": "bge-m3"}).encode()


@dataclass
class Provider:
    url: str
    respond: Callable[[Seen], tuple[int, bytes]] = lambda seen: (200, vectors_body(seen.body["input"]))
    delay: float = 0.0
    seen: list[Seen] = field(default_factory=list)


@pytest.fixture
def provider() -> Iterator[Provider]:
    state: dict[str, Provider] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw))
            p = state["p"]
            p.seen.append(seen)
            if p.delay:
                time.sleep(p.delay)
            status, body = p.respond(seen)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, *args: object) -> None:  # keep stderr quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["p"] = Provider(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state["p"]
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- leak checks -------------------------------------------------------------------------------


def forms(secret: str) -> list[str]:
    """The secret, its random tail, and its hex and base64 encodings."""
    raw = secret.encode()
    return [secret, secret.rsplit("-", 1)[-1], raw.hex(), raw.hex().upper(),
            base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("=")]


def assert_error_clean(err: BaseException, *sentinels: str) -> None:
    assert err.__cause__ is None
    assert err.__context__ is None
    rendered = [str(err), repr(err), repr(err.args), "".join(traceback.format_exception(err)),
                repr(pickle.loads(pickle.dumps(err)).args)]
    for text in rendered:
        for sentinel in sentinels:
            for form in forms(sentinel):
                assert form not in text


def assert_logs_clean(caplog: pytest.LogCaptureFixture, *sentinels: str) -> None:
    for record in caplog.records:
        texts = [record.getMessage(), repr(record.args), record.exc_text or "",
                 "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""]
        for text in texts:
            for sentinel in sentinels:
                for form in forms(sentinel):
                    assert form not in text, record.name


def sentinel() -> str:
    return "SENTINEL-" + secrets.token_hex(8)


# -- happy paths -------------------------------------------------------------------------------


async def test_is_an_embedder(provider: Provider) -> None:
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        assert isinstance(embedder, Embedder)
        assert embedder.dimension == DIM


async def test_longer_vectors_are_truncated_and_renormalised(provider: Provider) -> None:
    rng = random.Random(7)
    raw = [[rng.gauss(0.0, 1.0) for _ in range(1024)] for _ in range(2)]
    provider.respond = lambda seen: (200, json.dumps(
        {"data": [{"index": i, "embedding": v} for i, v in enumerate(raw)]}).encode())
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as exact:
        with pytest.raises(ProviderError):  # by default a model is never truncated
            await exact.embed(["first text", "second text"])
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT, dimension=1024) as native:
        assert [len(v) for v in await native.embed(["first text", "second text"])] == [1024] * 2
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT, fit="truncate") as embedder:
        out = await embedder.embed(["first text", "second text"])  # kagent-compatible 768
    assert len(out) == 2
    for vec, full in zip(out, raw, strict=True):
        assert len(vec) == DIM
        assert math.isclose(math.sqrt(sum(v * v for v in vec)), 1.0, abs_tol=1e-6)
        head = full[:DIM]
        norm = math.sqrt(sum(v * v for v in head))
        assert abs(norm - 1.0) > 0.1  # so an un-normalised truncation would fail the line above
        for got, want in zip(vec, head, strict=True):
            assert math.isclose(got, want / norm, rel_tol=1e-9, abs_tol=1e-12)


async def test_exact_dimension_passes_unchanged(provider: Provider) -> None:
    raw = [float(i % 17) - 3.5 for i in range(DIM)]  # deliberately not unit norm
    provider.respond = lambda seen: (200, json.dumps(
        {"data": [{"index": 0, "embedding": raw}]}).encode())
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        assert await embedder.embed(["x"]) == [raw]


async def test_request_shape_and_url_joining(provider: Provider) -> None:
    for base, path in [(provider.url, "/v1/embeddings"), (provider.url + "/", "/v1/embeddings"),
                       (provider.url + "/v1", "/v1/embeddings"),
                       (provider.url + "/v1/", "/v1/embeddings"),
                       (provider.url + "/gw/", "/gw/v1/embeddings"),
                       (provider.url + "/gw/v1", "/gw/v1/embeddings")]:
        provider.seen.clear()
        async with OpenAICompatibleEmbedder(base, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
            await embedder.embed(["alpha", "beta"])
        assert [s.path for s in provider.seen] == [path], base
        assert provider.seen[0].body == {"model": "bge-m3", "input": ["alpha", "beta"]}


async def test_results_follow_index_not_position(provider: Provider) -> None:
    def shuffled(seen: Seen) -> tuple[int, bytes]:
        body = json.loads(vectors_body(seen.body["input"]))
        body["data"].reverse()
        return 200, json.dumps(body).encode()

    provider.respond = shuffled
    texts = [f"fact number {i}" for i in range(5)]
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        out = await embedder.embed(texts)
    assert [v[0] for v in out] == [code(t) for t in texts]  # positional reading is reversed


async def test_batches_by_max_batch_in_order(provider: Provider) -> None:
    texts = [f"item {i}" for i in range(150)]
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT, max_batch=64) as embedder:
        out = await embedder.embed(texts)
    assert [len(s.body["input"]) for s in provider.seen] == [64, 64, 22]
    assert [t for s in provider.seen for t in s.body["input"]] == texts
    assert [v[0] for v in out] == [code(t) for t in texts]


async def test_empty_input_makes_no_request(provider: Provider) -> None:
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        assert await embedder.embed([]) == []
    assert provider.seen == []


async def test_bare_string_is_refused_before_any_request(provider: Provider) -> None:
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        with pytest.raises(InvalidInput):
            await embedder.embed("a whole sentence")  # type: ignore[arg-type]
    assert provider.seen == []


# -- refused responses -------------------------------------------------------------------------


def _data(vectors: list[object], indices: list[object] | None = None) -> bytes:
    idx = indices if indices is not None else list(range(len(vectors)))
    return json.dumps({"data": [{"index": i, "embedding": v} for i, v in zip(idx, vectors)]}).encode()


ONE = [0.5] * DIM
BAD_BODIES: dict[str, Callable[[str], bytes]] = {
    "short_dimension": lambda s: _data([ONE, [0.5] * (DIM - 1)]),
    "wrong_count_fewer": lambda s: _data([ONE]),
    "wrong_count_more": lambda s: _data([ONE, ONE, ONE]),
    "nan": lambda s: _data([ONE, [float("nan")] + [0.5] * (DIM - 1)]),
    "infinity": lambda s: _data([ONE, [float("inf")] + [0.5] * (DIM - 1)]),
    "nan_in_truncated_tail": lambda s: _data([ONE, [0.5] * DIM + [float("nan")]]),
    "zero_after_truncation": lambda s: _data([ONE, [0.0] * DIM + [1.0] * 256]),
    "string_values": lambda s: _data([ONE, [s] * DIM]),
    "bool_values": lambda s: _data([ONE, [True] * DIM]),
    "huge_int": lambda s: _data([ONE, [10**400] + [0.5] * (DIM - 1)]),
    "duplicate_index": lambda s: _data([ONE, ONE], [0, 0]),
    "index_out_of_range": lambda s: _data([ONE, ONE], [0, 2]),
    "missing_index": lambda s: json.dumps({"data": [{"embedding": ONE}, {"embedding": ONE}]}).encode(),
    "data_not_list": lambda s: json.dumps({"data": s}).encode(),
    "not_an_object": lambda s: json.dumps([s]).encode(),
    "non_json": lambda s: f"<html>{s}</html>".encode(),
    "empty_body": lambda s: b"",
}


@pytest.mark.parametrize("kind", sorted(BAD_BODIES))
async def test_malformed_2xx_is_refused_without_echo(
    provider: Provider, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    caplog.set_level(logging.DEBUG)
    body_secret, text_secret = sentinel(), sentinel()
    provider.respond = lambda seen: (200, BAD_BODIES[kind](body_secret))
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        with pytest.raises(ProviderError) as info:
            await embedder.embed([f"remember {text_secret}", "second"])
    err = info.value
    assert err.reason is ReasonCode.EMBEDDING_FAILED
    assert err.ids == {"operation": "embed", "status": "200"}
    assert len(provider.seen) == 1
    assert_error_clean(err, body_secret, text_secret)
    assert_logs_clean(caplog, body_secret, text_secret)


@pytest.mark.parametrize("status", [400, 401, 404, 413, 422, 429, 500, 502, 503])
async def test_error_status_is_refused_without_echo(
    provider: Provider, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    caplog.set_level(logging.DEBUG)
    body_secret, text_secret = sentinel(), sentinel()

    def echo(seen: Seen) -> tuple[int, bytes]:  # providers do echo offending input
        return status, json.dumps({"error": {"message": f"{body_secret} rejected",
                                             "input": seen.body["input"]}}).encode()

    provider.respond = echo
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        with pytest.raises(ProviderError) as info:
            await embedder.embed([f"my secret is {text_secret}"])
    err = info.value
    assert err.reason is ReasonCode.EMBEDDING_FAILED
    assert err.ids["status"] == str(status)
    assert err.ids["operation"] == "embed"
    assert_error_clean(err, body_secret, text_secret)
    assert_logs_clean(caplog, body_secret, text_secret)
    ours = [r for r in caplog.records if r.name == "kagent_governed_memory.embedding"]
    assert [r.getMessage() for r in ours] == [f"embedding failed status={status} items=1"]


async def test_failure_in_a_later_batch_fails_the_whole_call(provider: Provider) -> None:
    def second_fails(seen: Seen) -> tuple[int, bytes]:
        return (500, b"{}") if len(provider.seen) == 2 else (200, vectors_body(seen.body["input"]))

    provider.respond = second_fails
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT, max_batch=2) as embedder:
        with pytest.raises(ProviderError) as info:
            await embedder.embed([f"t{i}" for i in range(6)])
    assert info.value.ids["status"] == "500"
    assert len(provider.seen) == 2  # stops at the first failed batch


async def test_connection_refused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    text_secret = sentinel()
    async with OpenAICompatibleEmbedder(closed_port_url(), "bge-m3", timeout=EMBEDDER_TIMEOUT) as embedder:
        with pytest.raises(ProviderError) as info:
            await embedder.embed([text_secret])
    assert info.value.reason is ReasonCode.EMBEDDING_FAILED
    assert "status" not in info.value.ids
    assert_error_clean(info.value, text_secret)
    assert_logs_clean(caplog, text_secret)


@pytest.mark.parametrize("own_client", [True, False])
async def test_timeout(provider: Provider, caplog: pytest.LogCaptureFixture, own_client: bool) -> None:
    caplog.set_level(logging.DEBUG)
    text_secret = sentinel()
    provider.delay = 8.0  # well past the embedder's own 0.3 s, so the bound below tells them apart
    # A caller's client with a long timeout must not override the embedder's own.
    client = None if own_client else httpx.AsyncClient(timeout=60.0)
    started = time.monotonic()
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=0.3,
                                        client=client) as embedder:
        with pytest.raises(ProviderError) as info:
            await embedder.embed([text_secret])
    assert time.monotonic() - started < 5.0  # the 0.3 s timeout, not the delay or the client's 60 s
    assert len(provider.seen) == 1
    assert "status" not in info.value.ids
    assert_error_clean(info.value, text_secret)
    assert_logs_clean(caplog, text_secret)
    if client is not None:
        await client.aclose()


# -- credentials and lifecycle -----------------------------------------------------------------


async def test_authorization_only_with_api_key(
    provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = "sk-" + secrets.token_hex(16)
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT) as anonymous:
        await anonymous.embed(["a"])
    async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT, api_key=key) as keyed:
        await keyed.embed(["a"])
        assert key not in repr(keyed) and key not in str(keyed)
        assert "api_key=set" in repr(keyed)
        assert "api_key=None" in repr(anonymous)
        provider.respond = lambda seen: (401, json.dumps(
            {"error": "bad key", "got": seen.headers.get("authorization")}).encode())
        with pytest.raises(ProviderError) as info:
            await keyed.embed(["b"])
    assert "authorization" not in provider.seen[0].headers
    assert provider.seen[1].headers["authorization"] == f"Bearer {key}"
    assert info.value.ids["status"] == "401"
    assert_error_clean(info.value, key)
    assert_logs_clean(caplog, key)


async def test_closes_only_its_own_client(provider: Provider) -> None:
    async with httpx.AsyncClient() as client:
        async with OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT, client=client) as embedder:
            await embedder.embed(["a"])
        assert not client.is_closed
        response = await client.post(provider.url + "/v1/embeddings", json={"input": ["b"]})
        assert response.status_code == 200

    embedder = OpenAICompatibleEmbedder(provider.url, "bge-m3", timeout=EMBEDDER_TIMEOUT)
    await embedder.embed(["a"])
    await embedder.aclose()
    with pytest.raises(ProviderError):
        await embedder.embed(["a"])  # its own client is closed now
    assert len(provider.seen) == 3


@pytest.mark.parametrize("kwargs", [{"base_url": "127.0.0.1:8080"}, {"model": ""},
                                    {"max_batch": 0}, {"max_batch": True}])
def test_rejects_bad_configuration(kwargs: dict[str, object]) -> None:
    args: dict = {"base_url": "http://127.0.0.1:1", "model": "bge-m3", **kwargs}
    with pytest.raises(InvalidInput):
        OpenAICompatibleEmbedder(**args)


# -- HashingEmbedder ---------------------------------------------------------------------------


FACTS = [
    "the user prefers dark roast coffee in the morning",
    "production cluster runs in frankfurt on kubernetes",
    "daughter practises violin every tuesday",
    "quarterly budget report is due friday",
]


async def test_hashing_embedder_is_deterministic_unit_and_768() -> None:
    a = await HashingEmbedder().embed(FACTS + [""])
    b = await HashingEmbedder().embed(FACTS + [""])
    assert a == b
    assert len(a) == len(FACTS) + 1
    for vec in a:
        assert len(vec) == DIM
        assert math.isclose(math.sqrt(sum(v * v for v in vec)), 1.0, abs_tol=1e-9)
    assert len({tuple(v) for v in a}) == len(a)  # distinct texts, distinct vectors


async def test_hashing_embedder_nearest_neighbour_shares_words() -> None:
    embedder = HashingEmbedder()
    facts = await embedder.embed(FACTS)
    queries = {"dark roast coffee": 0, "which cluster runs kubernetes": 1,
               "violin practise tuesday": 2, "when is the budget report due": 3}
    for query, expected in queries.items():
        (q,) = await embedder.embed([query])
        scores = [sum(x * y for x, y in zip(q, f, strict=True)) for f in facts]
        assert max(range(len(facts)), key=scores.__getitem__) == expected, query

