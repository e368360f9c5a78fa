"""Hostile input gets clear content-free errors and stores nothing; no error carries content
(B6 for the store boundary); inspect pages are bounded with opaque cursors (U2)."""

from __future__ import annotations

import base64
import pickle
import secrets
import traceback

import psycopg
import pytest
from support.db import physical_rows, save, scope_uuid
from support.scopes import make_key, vec

from kagent_governed_memory import (
    ConsentRequired,
    EntryCapReached,
    FactTooLarge,
    GovernanceError,
    InvalidInput,
    MemoryPolicy,
    ReasonCode,
    StaleGeneration,
)
from kagent_governed_memory.errors import from_database_error

PURPOSE = "personal_preferences"


def _chain(exc: BaseException) -> list[BaseException]:
    seen, out = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def assert_content_free(exc: BaseException, *sentinels: str) -> None:
    rendered = "".join(traceback.format_exception(exc))
    for e in _chain(exc):
        rendered += str(e) + repr(e) + repr(e.args) + repr(getattr(e, "ids", ""))
    for s in sentinels:
        for form in (s, s.encode().hex(), base64.b64encode(s.encode()).decode()):
            assert form not in rendered
    assert exc.__cause__ is None and exc.__context__ is None


@pytest.fixture
async def granted(store):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    return key, g


@pytest.mark.parametrize("make, reason", [
    (lambda s: f"{s}\x00byte", ReasonCode.INVALID_TEXT),
    (lambda s: f"{s} lone \ud800 surrogate", ReasonCode.INVALID_TEXT),
    (lambda s: "", ReasonCode.INVALID_TEXT),
    (lambda s: "   \n\t", ReasonCode.INVALID_TEXT),
    (lambda s: s.encode(), ReasonCode.INVALID_TEXT),
    (lambda s: None, ReasonCode.INVALID_TEXT),
    (lambda s: s + "x" * 513, ReasonCode.FACT_TOO_LARGE),
    (lambda s: s + "é" * 257, ReasonCode.FACT_TOO_LARGE),  # > 512 UTF-8 bytes
])
async def test_bad_facts_refused_and_nothing_stored(store, database, granted, make, reason):
    key, g = granted
    sentinel = "SENTINEL-" + secrets.token_hex(8)
    with pytest.raises(GovernanceError) as err:
        await store.save(key, g, facts=["a good fact", make(sentinel)],
                         embeddings=[vec("a"), vec("b")])
    assert err.value.reason is reason
    assert_content_free(err.value, sentinel)
    assert physical_rows(database) == 0


async def test_b4_byte_cap_is_exact(store, database, granted):
    key, g = granted
    await store.save(key, g, facts=["é" * 256, "x" * 512], embeddings=[vec("a"), vec("b")])
    assert physical_rows(database) == 2


async def test_b4_byte_cap_enforced_by_the_database(store, database, granted):
    """Bypass Python: the function refuses a 513-byte fact itself."""
    key, g = granted
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute(
            "SELECT memory_save(%s,%s,%s,%s,%s,%s,%s,%s,%s,ARRAY[%s::vector])",
            ["matrix", key.principal.mxid, key.agent.namespace, key.agent.name,
             "control_room", key.scope.room_id, g, store.policy.version, ["y" * 513],
             "[" + ",".join(["0.1"] * 768) + "]"])
    assert e.value.sqlstate == "KGF01"
    assert physical_rows(database) == 0


async def test_b4_entry_cap_refuses_whole_batches(store, database, granted):
    key, g = granted
    await save(store, key, *(f"fact {i}" for i in range(98)), generation=g)
    with pytest.raises(EntryCapReached):
        await save(store, key, "one", "two", "three", generation=g)
    assert physical_rows(database, key) == 98
    await save(store, key, "ninety-nine", "one hundred", generation=g)
    sentinel = "SENTINEL-" + secrets.token_hex(8)
    with pytest.raises(EntryCapReached) as err:
        await save(store, key, sentinel, generation=g)
    assert physical_rows(database, key) == 100
    assert_content_free(err.value, sentinel)
    # nothing is evicted to make room
    assert {e.text for e in (await store.inspect(key, page_size=50)).entries} >= {"one hundred"}


@pytest.mark.parametrize("embedding", [
    [0.1] * 767, [0.1] * 769, [], [float("nan")] + [0.1] * 767, [float("inf")] + [0.1] * 767,
    ["0.1"] * 767 + ["x"], "0.1,0.2", None, 42, [[0.1]] * 768, [1e400] * 768,
    # finite as a float64, infinite as the float32 pgvector stores: refused before the server
    [1e39] + [0.1] * 767, [-3.5e38] * 768,
])
async def test_bad_embeddings_refused(store, database, granted, embedding):
    key, g = granted
    with pytest.raises(InvalidInput) as err:
        await store.save(key, g, facts=["fact"], embeddings=[embedding])
    assert err.value.reason is ReasonCode.INVALID_EMBEDDING
    with pytest.raises(InvalidInput):
        await store.search(key, g, embedding)
    assert physical_rows(database) == 0


async def test_database_refuses_nan_vectors_too(store, database, granted):
    _key, _g = granted
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT '[NaN,1]'::vector")
    assert from_database_error(e.value, "save").reason is ReasonCode.INVALID_EMBEDDING


@pytest.mark.parametrize("kwargs, reason", [
    ({"page_size": 0}, ReasonCode.INVALID_PAGE_SIZE),
    ({"page_size": 51}, ReasonCode.INVALID_PAGE_SIZE),
    ({"page_size": 10**12}, ReasonCode.INVALID_PAGE_SIZE),
    ({"page_size": True}, ReasonCode.INVALID_PAGE_SIZE),
    ({"page_size": "10"}, ReasonCode.INVALID_PAGE_SIZE),
    ({"cursor": "AAAA"}, ReasonCode.INVALID_CURSOR),
    ({"cursor": "not base64 !!"}, ReasonCode.INVALID_CURSOR),
    ({"cursor": "A" * 10_000}, ReasonCode.INVALID_CURSOR),
    ({"cursor": 12}, ReasonCode.INVALID_CURSOR),
])
async def test_inspect_refuses_bad_pages(store, granted, kwargs, reason):
    key, _ = granted
    with pytest.raises(InvalidInput) as err:
        await store.inspect(key, **kwargs)
    assert err.value.reason is reason


@pytest.mark.parametrize("limit", [0, 51, -1, True, 2.5, 10**9])
async def test_search_limit_bounds(store, granted, limit):
    key, g = granted
    with pytest.raises(InvalidInput) as err:
        await store.search(key, g, vec("x"), limit=limit)
    assert err.value.reason is ReasonCode.INVALID_LIMIT


async def test_u2_inspect_pages_with_opaque_cursors(store, granted):
    key, g = granted
    ids = await save(store, key, *(f"fact number {i}" for i in range(23)), generation=g)
    first = await store.inspect(key)
    assert len(first.entries) == 10 and first.next_cursor
    seen, cursor, pages = [], None, 0
    while True:
        page = await store.inspect(key, page_size=7, cursor=cursor)
        pages += 1
        seen += [e.id for e in page.entries]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 4 and sorted(seen) == sorted(ids) and len(set(seen)) == 23
    big = await store.inspect(key, page_size=50)
    assert len(big.entries) == 23 and big.next_cursor is None
    entry = big.entries[0]
    assert entry.scope == key and entry.expires_at > entry.created_at and entry.text
    assert entry.text not in repr(entry)  # a logged record never shows its text


async def test_u2_cursor_is_bound_to_its_key_and_tamper_evident(store, granted):
    key, g = granted
    await save(store, key, *(f"f{i}" for i in range(5)), generation=g)
    cursor = (await store.inspect(key, page_size=2)).next_cursor
    other = make_key("@bob:example.org")
    await store.grant(other, purpose=PURPOSE)
    with pytest.raises(InvalidInput) as err:
        await store.inspect(other, cursor=cursor)
    assert err.value.reason is ReasonCode.INVALID_CURSOR
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    for i in (0, 5, 20, len(raw) - 1):
        forged = bytearray(raw)
        forged[i] ^= 0x01
        token = base64.urlsafe_b64encode(bytes(forged)).decode().rstrip("=")
        with pytest.raises(InvalidInput):
            await store.inspect(key, cursor=token)
    assert len((await store.inspect(key, cursor=cursor)).entries) == 3


async def test_b6_sentinels_in_facts_never_reach_errors(store, database, granted):
    key, g = granted
    sentinel = "SENTINEL-" + secrets.token_hex(8)
    failures: list[BaseException] = []
    small = MemoryPolicy(version="tiny", entry_cap=1)
    from support.db import open_store

    tiny = await open_store(database, small)
    try:
        tiny_key = make_key(agent="tiny")
        tg = (await tiny.grant(tiny_key, purpose=PURPOSE)).generation
        await save(tiny, tiny_key, "first", generation=tg)
        attempts = [
            lambda: save(tiny, tiny_key, f"{sentinel} over cap", generation=tg),
            lambda: store.save(key, g, facts=[sentinel * 40], embeddings=[vec("x")]),
            lambda: save(store, key, f"{sentinel} stale", generation=g + 7),
            lambda: save(store, make_key("@carol:example.org"), f"{sentinel} no consent",
                         generation=1),
            lambda: store.save(key, g, facts=[f"{sentinel}\x00"], embeddings=[vec("x")]),
            lambda: store.save(key, g, facts=[f"{sentinel}\udfff"], embeddings=[vec("x")]),
            lambda: store.forget(key, sentinel),
            lambda: store.inspect(key, cursor=sentinel),
        ]
        for attempt in attempts:
            try:
                await attempt()
            except GovernanceError as exc:
                failures.append(exc)
    finally:
        await tiny.close()
    assert len(failures) == 7  # forget() of a bogus id is not an error (no oracle)
    kinds = {type(f) for f in failures}
    assert {EntryCapReached, FactTooLarge, StaleGeneration, ConsentRequired, InvalidInput} <= kinds
    for exc in failures:
        assert_content_free(exc, sentinel)
        clone = pickle.loads(pickle.dumps(exc))
        assert type(clone) is type(exc) and clone.reason is exc.reason
    rows = database.scalar("SELECT count(*) FROM memory_audit WHERE"
                           " operation LIKE %s OR outcome LIKE %s", [f"%{sentinel}%"] * 2)
    assert rows == 0


async def test_b6_database_detail_never_escapes(store, database, granted):
    """PostgreSQL's DETAIL echoes row values; the mapped error drops it and the chain."""
    key, _g = granted
    sentinel = "SENTINEL-" + secrets.token_hex(8)
    # (The governed tables have row-level security on, and PostgreSQL then leaves the failing
    # row out of DETAIL by itself; a table without RLS shows what the mapping must drop.)
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE detail_probe (code TEXT CHECK (code ~ '^[a-z]+$'))")
        try:
            conn.execute("INSERT INTO detail_probe (code) VALUES (%s)", [sentinel])
        except psycopg.Error as exc:
            original = exc
    assert sentinel in str(original)  # the raw error does leak: the test can fail
    mapped = from_database_error(original, "save")
    assert mapped.reason is ReasonCode.INVALID_ARGUMENT
    assert sentinel not in str(mapped) + repr(mapped) + repr(mapped.args)
    assert mapped.ids == {"operation": "save"}


async def test_store_unavailable_is_content_free(database):
    from kagent_governed_memory import GovernedMemoryStore, StoreUnavailable

    secret = "pw-" + secrets.token_hex(6)
    dsn = f"host=127.0.0.1 port=1 user=u password={secret} dbname=d connect_timeout=1"
    with pytest.raises(StoreUnavailable) as err:
        await GovernedMemoryStore.open(dsn, local_server="example.org", timeout=1.0)
    assert_content_free(err.value, secret)


async def test_schema_missing_is_a_clear_error(database):
    from support.db import open_store

    s = await open_store(database)
    try:
        with pytest.raises(GovernanceError) as err:
            await s.generation(make_key())
        assert err.value.reason is ReasonCode.SCHEMA_OUTDATED
        assert "migrate" in str(err.value)
    finally:
        await s.close()


async def test_search_is_exact_top_k(store, granted):
    """Against brute force over the same vectors (float32, as pgvector stores them)."""
    import math
    import random
    import struct

    key, g = granted
    rng = random.Random(23)
    facts = [f"fact {i} " + " ".join(rng.choice("abcdefghij") for _ in range(6)) for i in range(100)]
    ids = await save(store, key, *facts, generation=g)

    def f32(values):
        return struct.unpack(f"{len(values)}f", struct.pack(f"{len(values)}f", *values))

    def cosine_distance(a, b):
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))

    stored = {i: f32(vec(f)) for i, f in zip(ids, facts, strict=True)}
    for probe in range(10):
        query = f32(vec(" ".join(rng.choice("abcdefghij") for _ in range(4)) + f" fact {probe}"))
        truth = sorted(stored, key=lambda i: (round(cosine_distance(stored[i], query), 6), i))
        hits = await store.search(key, g, list(query), limit=5)
        assert [round(h.distance, 5) for h in hits] == [
            round(cosine_distance(stored[i], query), 5) for i in truth[:5]]
        assert len(hits) == 5


def test_import_and_open_change_no_global_logging(database):
    import subprocess
    import sys

    code = (
        "import logging, asyncio\n"
        "before = (logging.root.level, list(logging.root.handlers))\n"
        "import kagent_governed_memory as k\n"
        "async def main():\n"
        f"    s = await k.GovernedMemoryStore.open({database.dsn!r}, local_server='example.org')\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
        "after = (logging.root.level, list(logging.root.handlers))\n"
        "assert before[:2] == after, (before, after)\n"
        "assert all(not logging.getLogger(n).handlers for n in logging.Logger.manager.loggerDict"
        " if n.startswith('kagent_governed_memory'))\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr


async def test_values_beyond_float4_are_an_embedding_error(store, database, granted):
    key, g = granted
    with pytest.raises(InvalidInput) as err:
        await store.save(key, g, facts=["fact"], embeddings=[[1e308] * 768])
    assert err.value.reason is ReasonCode.INVALID_EMBEDDING
    assert physical_rows(database) == 0
