#!/usr/bin/env python
"""Governed memory vs upstream kagent v0.9.11's memory SQL: same PostgreSQL, same data, one run.

    python benchmarks/run.py [--dsn OWNER_DSN [--app-dsn APP_DSN]] [--quick | --large]
                             [--kagent-src PATH] [--json] [--explain] [--admin-dsn DSN] [--keep]

Without ``--dsn`` a throwaway PostgreSQL 18 + pgvector is started (``EmbeddedPostgres``).  Roles
as in production: ``--dsn`` is the owner (it migrates both schemas and runs upstream's
statements, as kagent's controller does with its own tables); the governed side runs as
``--app-dsn``, a member of ``kagent_memory_service`` (without it, as the owner, and the
caption says so).
Everything is created in a schema of its own (``kgm_bench``), reached through the connections'
``search_path``; with ``--dsn`` that schema is dropped at the end (``--keep`` keeps it).

Upstream's DDL and queries are not in this repository: ``upstream_sql.py`` reads them from a
kagent source (``--kagent-src`` or ``$KAGENT_SRC``) and they reach the measuring functions below
as an ``UpstreamSQL`` parameter.  The tests pass an upstream-*shaped* stand-in instead.

Data: ``scopes × facts`` unit vectors of 768 dimensions generated server-side
(``random_normal`` + ``l2_normalize``, seeded), loaded into both tables in interleaved order
(fact 0 of every scope, then fact 1, ...), the way facts accumulate over time.  Upstream gets
them with one ``INSERT … SELECT`` after its migration 000001 and before 000002/000003 (the HNSW
index is built over the loaded rows, as when 000002 ran on a GORM-era database).  Governed rows
go through the fenced path — ``memory_grant`` and ``memory_save`` called server-side by the
owner, so every fence trigger, cap count and row-level security check runs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import logging
import math
import os
import platform
import pstats
import random
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache, partial
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector_async
from psycopg import sql as pgsql
from psycopg.adapt import Loader
from psycopg.conninfo import conninfo_to_dict, make_conninfo

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from upstream_sql import UpstreamSourceError, UpstreamSQL
from upstream_sql import load as load_upstream_sql

from kagent_governed_memory import (
    AgentIdentity,
    GovernedMemoryStore,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
)
from kagent_governed_memory import store as governed_sql
from kagent_governed_memory.policy import PROTOTYPE_POLICY, MemoryPolicy
from kagent_governed_memory.store import Admission, migrate
from kagent_governed_memory.telemetry import _spans as telemetry

LOCAL = "example.org"
NAMESPACE = "kagent"
AGENT = "bench-agent"
UPSTREAM_AGENT = "kagent__NS__bench_agent"  # upstream's "<namespace>__NS__<name>" form
PURPOSE = "benchmark"
LIMIT = 5
DIM = 768
UPSTREAM_TTL = timedelta(days=15)  # upstream's defaultMemoryTTLDays, set by the controller
SCHEMA = "kgm_bench"

_log = logging.getLogger("benchmarks")


# -- sizes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    name: str
    scopes: int
    facts: int
    scaling: tuple[int, ...]  # scope counts at which governed search latency is timed
    search_iters: int = 1000
    warmup: int = 100
    recall_queries: int = 500
    save_iters: int = 300
    batch_iters: int = 100
    forget_iters: int = 200
    withdraw_iters: int = 100
    scaling_iters: int = 500
    log_blocks: int = 21
    log_records: int = 5000
    seed: int = 20260411


SIZES = {
    "default": Size("default", 1000, 100, (100, 1000)),
    "large": Size("large", 1000, 100, (100, 1000, 10000)),
    "quick": Size("quick", 50, 100, (10, 50), search_iters=200, warmup=20, recall_queries=50,
                  save_iters=50, batch_iters=20, forget_iters=20, withdraw_iters=10,
                  scaling_iters=200, log_blocks=11, log_records=2000),
}


# -- identities -------------------------------------------------------------------------------


def mxid(scope: int | str) -> str:
    return f"@bench{scope}:{LOCAL}"


def room(scope: int | str) -> str:
    return f"!bench{scope}:{LOCAL}"


@cache
def scope_key(scope: int | str) -> ScopeKey:
    """Built once per scope (a request builds its key once, from its assertion), so the
    timings below hold the store's work only."""
    return ScopeKey(principal=Principal(mxid=mxid(scope), origin=OriginKind.NATIVE_LOCAL),
                    agent=AgentIdentity(namespace=NAMESPACE, name=AGENT),
                    scope=MemoryScope.control_room(room(scope)))


# -- statistics -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    median: float  # seconds
    p95: float
    n: int
    p99: float = 0.0

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Stat:
        ordered = sorted(seconds)

        def rank(q: float) -> float:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
        return cls(statistics.median(ordered), rank(0.95), len(ordered), rank(0.99))


def fmt_time(seconds: float) -> str:
    if seconds < 1e-5:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms"


def cell(stat: Stat | None) -> str:
    return "—" if stat is None else f"{fmt_time(stat.median)} (p95 {fmt_time(stat.p95)})"


@dataclass
class Row:
    key: str
    label: str
    upstream: str
    governed: str
    ratio: float | None = None
    target: str = "—"
    result: str = "info"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    rows: list[Row]
    meta: dict[str, Any]
    plans: dict[str, str] = field(default_factory=dict)

    def row(self, key: str) -> Row:
        return next(r for r in self.rows if r.key == key)


def _timed_ratio(up: Stat, gov: Stat) -> float:
    return gov.median / up.median


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


# -- connections ------------------------------------------------------------------------------


class _RawBytes(Loader):
    """Upstream's ``SELECT *`` returns each row's embedding; the Go controller decodes it in
    compiled code, so the benchmark does not decode it at all (the client most favourable to
    upstream): the binary value is kept as bytes."""

    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> bytes:
        return bytes(data)


def with_search_path(dsn: str, schema: str, extension_schema: str = "public") -> str:
    params = conninfo_to_dict(dsn)
    path = schema if extension_schema == schema else f"{schema},{extension_schema}"
    params["options"] = f"{params.get('options') or ''} -c search_path={path}".strip()
    return make_conninfo("", **params)


async def connect(dsn: str, *, raw_vectors: bool = False) -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await register_vector_async(conn)
    if raw_vectors:
        info = await psycopg.types.TypeInfo.fetch(conn, "vector")
        assert info is not None
        conn.adapters.register_loader(info.oid, _RawBytes)
    return conn


async def _one(conn: psycopg.AsyncConnection, query: str, params: Sequence[Any] = ()) -> Any:
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(query, list(params))
    row = await cur.fetchone()
    return None if row is None else row[0]


# -- schema and data --------------------------------------------------------------------------


async def prepare_schema(dsn: str, schema: str) -> str:
    """Create ``schema`` (fails if it exists) and return a DSN whose search_path is it."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        ext = await _one(conn, "SELECT extnamespace::regnamespace::text FROM pg_extension"
                               " WHERE extname = 'vector'")
        if ext is None:
            try:
                await conn.execute("CREATE EXTENSION vector")
            except psycopg.Error:
                raise SystemExit("pgvector is not installed in this database and this role "
                                 "cannot create it: CREATE EXTENSION vector as a superuser") from None
            ext = await _one(conn, "SELECT extnamespace::regnamespace::text FROM pg_extension"
                                   " WHERE extname = 'vector'")
        await conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(pgsql.Identifier(schema)))
    return with_search_path(dsn, schema, ext)


async def drop_schema(dsn: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            pgsql.Identifier(schema)))


async def generate_source(conn: psycopg.AsyncConnection, size: Size,
                          progress: Callable[[str], None]) -> None:
    """``bench_source``: the facts both stores get, ``bench_query``: the query vectors (a
    stored fact of a random scope plus Gaussian noise of the same norm, renormalised)."""
    await conn.execute("SELECT setseed(%s)", [((size.seed % 1000) / 1000.0)])
    await conn.execute(
        "CREATE TABLE bench_source (scope int NOT NULL, n int NOT NULL, content text NOT NULL,"
        " embedding vector(768) NOT NULL, PRIMARY KEY (scope, n))")
    step = max(1, 20_000 // size.facts)
    for lo in range(0, size.scopes, step):
        hi = min(size.scopes, lo + step)
        await conn.execute(
            "INSERT INTO bench_source (scope, n, content, embedding)"
            " SELECT s, n, format('benchmark fact %%s-%%s: %%s', s, n, repeat('lorem ipsum ', 6)),"
            "  l2_normalize(ARRAY(SELECT random_normal() + 0 * (s + n)"
            "                     FROM generate_series(1, 768))::vector)"
            " FROM generate_series(%s::int, %s::int - 1) s CROSS JOIN generate_series(0, %s - 1) n",
            [lo, hi, size.facts])
        progress(f"generated {hi * size.facts:,} source rows")
    rng = random.Random(size.seed)
    n_queries = max(size.recall_queries, 64)
    picks = [(i, rng.randrange(size.scopes), rng.randrange(size.facts)) for i in range(n_queries)]
    await conn.execute(
        "CREATE TABLE bench_query (i int PRIMARY KEY, scope int NOT NULL,"
        " embedding vector(768) NOT NULL)")
    await conn.execute(
        "INSERT INTO bench_query (i, scope, embedding)"
        " SELECT q.i, q.scope, l2_normalize(b.embedding + ARRAY("
        "   SELECT random_normal(0, %s) + 0 * q.i FROM generate_series(1, 768))::vector)"
        " FROM unnest(%s::int[], %s::int[], %s::int[]) AS q(i, scope, n)"
        " JOIN bench_source b ON b.scope = q.scope AND b.n = q.n",
        [1 / math.sqrt(DIM), [p[0] for p in picks], [p[1] for p in picks], [p[2] for p in picks]])
    await conn.execute("ANALYZE bench_source")


async def load_queries(conn: psycopg.AsyncConnection) -> list[tuple[int, Vector, list[str]]]:
    """(scope, vector, exact top-5 contents): brute force over ``bench_source``, which has no
    vector index, so its ``ORDER BY <=>`` is an exact scan of the scope."""
    cur = await conn.execute(
        "SELECT q.scope, q.embedding, ARRAY(SELECT b.content FROM bench_source b"
        "  WHERE b.scope = q.scope ORDER BY b.embedding <=> q.embedding, b.n LIMIT %s)"
        " FROM bench_query q ORDER BY q.i", [LIMIT])
    return [(r[0], r[1], list(r[2])) for r in await cur.fetchall()]


async def create_upstream_table(conn: psycopg.AsyncConnection, upstream: UpstreamSQL) -> None:
    await conn.execute(upstream.migrations[0][1])


async def load_upstream(conn: psycopg.AsyncConnection, size: Size) -> None:
    """All source rows into upstream's table, interleaved (fact n of every scope, then n+1)."""
    await conn.execute(
        "INSERT INTO memory (id, agent_name, user_id, content, embedding, metadata, created_at,"
        " expires_at, access_count)"
        " SELECT gen_random_uuid()::text, %s, format('@bench%%s:%%s', scope, %s::text), content,"
        "  embedding, '{}', now(), now() + %s, 0"
        " FROM bench_source ORDER BY n, scope", [UPSTREAM_AGENT, LOCAL, UPSTREAM_TTL])


async def finish_upstream_schema(conn: psycopg.AsyncConnection, upstream: UpstreamSQL,
                                 progress: Callable[[str], None]) -> float:
    """Upstream's remaining migrations (its HNSW index, its id default) over the loaded rows;
    returns the seconds they took.  maintenance_work_mem only sizes the build, not the index."""
    started = time.perf_counter()
    await conn.execute("SET maintenance_work_mem = '1GB'")
    for name, text in upstream.migrations[1:]:
        await conn.execute(text)
        progress(f"upstream migration {name} applied")
    await conn.execute("RESET maintenance_work_mem")
    return time.perf_counter() - started


_GRANT = (
    "SELECT count(*) FROM generate_series(%s::int, %s::int - 1) s,"
    " LATERAL memory_grant('matrix', format('@bench%%s:%%s', s, %s::text), %s, %s,"
    "  'control_room', format('!bench%%s:%%s', s, %s::text), %s, %s, %s, %s, %s::text[]) g")
_SAVE_ROUND = (
    "SELECT count(*) FROM generate_series(%s::int, %s::int - 1) s"
    " JOIN bench_source b ON b.scope = s %% %s AND b.n = %s,"
    " LATERAL memory_save('matrix', format('@bench%%s:%%s', s, %s::text), %s, %s,"
    "  'control_room', format('!bench%%s:%%s', s, %s::text),"
    "  memory_generation('matrix', format('@bench%%s:%%s', s, %s::text), %s, %s,"
    "   'control_room', format('!bench%%s:%%s', s, %s::text), %s, %s, %s::text[]), %s,"
    "  ARRAY[b.content], ARRAY[b.embedding]) r")


async def load_governed(conn: psycopg.AsyncConnection, lo: int, hi: int, size: Size,
                        progress: Callable[[str], None],
                        policy: MemoryPolicy = PROTOTYPE_POLICY) -> None:
    """Grant scopes [lo, hi) under the registered ``policy`` and save their facts through the
    fenced functions, interleaved.  Scopes past ``size.scopes`` reuse the vectors of scope
    ``s % size.scopes`` (and their texts: each scope is a scope of its own, so the one-copy
    rule, which holds within a scope, stores every one of them)."""
    p = policy
    if size.facts > p.entry_cap:
        raise ValueError("facts per scope exceed the policy's entry cap")
    step = 2000
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        await conn.execute(_GRANT, [a, b, LOCAL, NAMESPACE, AGENT, LOCAL, PURPOSE, p.version,
                                    p.embedding_dimension, "personal", [LOCAL]])
    for n in range(size.facts):
        for a in range(lo, hi, step):
            b = min(hi, a + step)
            await conn.execute(_SAVE_ROUND, [a, b, size.scopes, n, LOCAL, NAMESPACE, AGENT, LOCAL,
                                             LOCAL, NAMESPACE, AGENT, LOCAL, p.version,
                                             "personal", [LOCAL], p.version])
        if (n + 1) % 20 == 0:
            progress(f"governed load: fact {n + 1}/{size.facts} of scopes {lo:,}-{hi - 1:,}")


async def vacuum_analyze(conn: psycopg.AsyncConnection, *tables: str) -> None:
    for t in tables:
        await conn.execute(pgsql.SQL("VACUUM (ANALYZE) {}").format(pgsql.Identifier(t)))


# -- the operations measured ------------------------------------------------------------------


async def upstream_search(conn: psycopg.AsyncConnection, upstream: UpstreamSQL, vec: Vector,
                          scope: int, limit: int = LIMIT) -> list[str]:
    """Upstream's SearchAgentMemory, rows in binary; returns their contents."""
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(upstream.search, [vec, UPSTREAM_AGENT, mxid(scope), limit], binary=True)
    rows = await cur.fetchall()
    names = [d.name for d in cur.description or ()]
    at = names.index("content")
    return [r[at] for r in rows]


async def upstream_search_path(conn: psycopg.AsyncConnection, upstream: UpstreamSQL,
                               vec: Vector, scope: int, limit: int = LIMIT) -> int:
    """What the controller's SearchAgentMemory does: the query, then IncrementMemoryAccessCount
    on every returned id (outside a transaction)."""
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(upstream.search, [vec, UPSTREAM_AGENT, mxid(scope), limit], binary=True)
    rows = await cur.fetchall()
    at = [d.name for d in cur.description or ()].index("id")
    ids = [r[at] for r in rows]
    if ids:
        await cur.execute(upstream.increment, [ids])
    return len(ids)


async def governed_sql_search(conn: psycopg.AsyncConnection, vec: Vector, scope: int,
                              generation: int) -> int:
    """The governed statement alone (no pool, no validation, no result models)."""
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(governed_sql.query("SearchMemoryEntriesByIssuer"),
                      ["matrix", LOCAL, mxid(scope), NAMESPACE, AGENT, "control_room",
                       room(scope), generation, PROTOTYPE_POLICY.version, vec, LIMIT])
    return len(await cur.fetchall())


async def upstream_insert(conn: psycopg.AsyncConnection, upstream: UpstreamSQL, user: str,
                          content: str, vec: Vector) -> str:
    cur = psycopg.AsyncRawCursor(conn)
    expires = datetime.now(UTC) + UPSTREAM_TTL
    await cur.execute(upstream.insert, [UPSTREAM_AGENT, user, content, vec, "{}", expires, 0])
    row = await cur.fetchone()
    assert row is not None
    return row[0]


async def upstream_insert_batch(conn: psycopg.AsyncConnection, upstream: UpstreamSQL, user: str,
                                items: Sequence[tuple[str, Vector]]) -> int:
    """StoreAgentMemories: one transaction, InsertMemory per item."""
    async with conn.transaction():
        for content, vec in items:
            await upstream_insert(conn, upstream, user, content, vec)
    return len(items)


async def upstream_delete(conn: psycopg.AsyncConnection, upstream: UpstreamSQL,
                          scope: int) -> int:
    """DeleteAgentMemory for one agent+user pair (no second DELETE: the agent name has no '-')."""
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(upstream.delete, [UPSTREAM_AGENT, mxid(scope)])
    return cur.rowcount


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter_ns()
    out = await fn()
    return (time.perf_counter_ns() - t0) / 1e9, out


# -- measurements -----------------------------------------------------------------------------


Op = Callable[[int, list[float]], Awaitable[Any]]


async def interleaved(queries: Sequence[tuple[int, Vector, list[str]]], iters: int, warmup: int,
                      ops: dict[str, Op]) -> dict[str, Stat]:
    """Each iteration runs every op once on the same query (a Python list of floats, what an
    embedder returns), the order alternating, so each side meets its own table's pages for
    that scope in the same state and noise from other processes falls on all alike."""
    lists = [q[1].to_list() for q in queries]
    names = list(ops)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for i in range(warmup + iters):
        scope, floats = queries[i % len(queries)][0], lists[i % len(queries)]
        for name in (names if i % 2 == 0 else names[::-1]):
            seconds, _ = await _timed(partial(ops[name], scope, floats))
            if i >= warmup:
                samples[name].append(seconds)
    return {name: Stat.of(v) for name, v in samples.items()}


def search_ops(up: psycopg.AsyncConnection, raw: psycopg.AsyncConnection,
               store: GovernedMemoryStore, upstream: UpstreamSQL,
               generations: dict[int, int]) -> dict[str, Op]:
    return {
        "upstream_sql": lambda s, f: upstream_search(up, upstream, Vector(f), s),
        "governed": lambda s, f: store.search(scope_key(s), generations[s], f, limit=LIMIT),
        "governed_sql": lambda s, f: governed_sql_search(raw, Vector(f), s, generations[s]),
        "upstream_path": lambda s, f: upstream_search_path(up, upstream, Vector(f), s),
    }


async def block_counts(conn: psycopg.AsyncConnection, table: str) -> tuple[int, int]:
    """(shared-buffer hits, reads) of a table with its indexes and TOAST, cumulative."""
    cur = await conn.execute(
        "SELECT coalesce(heap_blks_hit, 0) + coalesce(idx_blks_hit, 0)"
        "       + coalesce(toast_blks_hit, 0) + coalesce(tidx_blks_hit, 0),"
        "       coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0)"
        "       + coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0)"
        " FROM pg_statio_user_tables WHERE relid = %s::regclass", [table])
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def flush_stats(*conns: psycopg.AsyncConnection, store: GovernedMemoryStore | None = None
                      ) -> None:
    """Backends publish their counters when a transaction ends at least a second after the
    last time; wait, then end one on every connection that did the work."""
    await asyncio.sleep(1.1)
    for conn in conns:
        await conn.execute("SELECT 1")
    if store is not None:
        await store.schema_version()


def _hit_rate(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    hits, reads = after[0] - before[0], after[1] - before[1]
    return hits / (hits + reads) if hits + reads else None


async def measure_search(up: psycopg.AsyncConnection, raw: psycopg.AsyncConnection,
                         store: GovernedMemoryStore, upstream: UpstreamSQL,
                         queries: Sequence[tuple[int, Vector, list[str]]],
                         generations: dict[int, int], iters: int, warmup: int,
                         stats: psycopg.AsyncConnection | None = None) -> dict[str, Any]:
    """Three passes, each a pair interleaved on the same queries, each ratio within its pass:

    * ``main``: upstream's SQL vs ``store.search`` (with ``stats``: each table's shared-buffer
      hit rate meanwhile), after a warm-up over the whole query set;
    * ``statement``: upstream's SQL vs the governed statement alone (no pool, no input
      validation, no result models) — the client library's share;
    * ``path`` (last: its access-count updates change upstream's table): the controller's
      path, search + IncrementMemoryAccessCount, vs ``store.search`` (with ``stats``: the
      share of those updates that were HOT).
    """
    ops = search_ops(up, raw, store, upstream, generations)
    tables = ("memory", "memory_entry")
    out: dict[str, Any] = {}
    # Warm up over the whole query set, both sides interleaved: whichever table was loaded
    # last would otherwise start with its pages in shared buffers.
    warmup = max(warmup, len(queries))
    before = {t: await block_counts(stats, t) for t in tables} if stats else {}
    out["main"] = await interleaved(queries, iters, warmup,
                                    {k: ops[k] for k in ("upstream_sql", "governed")})
    if stats:
        await flush_stats(up, raw, store=store)
        out["hit_rate"] = {t: _hit_rate(before[t], await block_counts(stats, t)) for t in tables}
    short = max(1, iters // 2)
    out["statement"] = await interleaved(queries, short, warmup,
                                         {k: ops[k] for k in ("upstream_sql", "governed_sql")})
    out["path"] = await interleaved(queries, short, warmup,
                                    {k: ops[k] for k in ("upstream_path", "governed")})
    if stats:
        await flush_stats(up, raw, store=store)
        cur = await stats.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                                  " WHERE relid = 'memory'::regclass")
        upd, hot = await cur.fetchone() or (0, 0)
        out["updates"] = {"updated": int(upd), "hot": int(hot)}
    return out


async def measure_recall(up: psycopg.AsyncConnection, store: GovernedMemoryStore,
                         upstream: UpstreamSQL, queries: Sequence[tuple[int, Vector, list[str]]],
                         generations: dict[int, int]) -> dict[str, dict[str, float]]:
    """Mean recall@5 and the share of queries answered with fewer than 5 rows."""
    async def upstream_all() -> list[list[str]]:
        return [await upstream_search(up, upstream, vec, scope) for scope, vec, _ in queries]

    default = await upstream_all()
    await up.execute("SET hnsw.iterative_scan = relaxed_order")
    try:
        relaxed = await upstream_all()
    finally:
        await up.execute("RESET hnsw.iterative_scan")
    governed = []
    for scope, vec, _ in queries:
        recs = await store.search(scope_key(scope), generations[scope], vec.to_list(), limit=LIMIT)
        governed.append([r.text for r in recs])

    def score(results: list[list[str]]) -> dict[str, float]:
        recall = [len(set(got) & set(q[2])) / LIMIT for got, q in zip(results, queries, strict=True)]
        short = [len(got) < LIMIT for got in results]
        return {"recall": statistics.fmean(recall), "short_rate": statistics.fmean(short),
                "n": len(results)}

    return {"upstream_default": score(default), "upstream_relaxed": score(relaxed),
            "governed": score(governed)}


async def measure_saves(up: psycopg.AsyncConnection, store: GovernedMemoryStore,
                        upstream: UpstreamSQL, vectors: Sequence[Vector], size: Size,
                        warmup: int) -> dict[str, Stat]:
    """Single fact and 10-fact batches, alternating upstream and governed.  Governed saves go
    to fresh writer scopes (the policy caps a scope at entry_cap live entries); upstream's go
    to one writer pair, as its table has no cap."""
    cap = store.policy.entry_cap
    singles, batches = warmup + size.save_iters, warmup + size.batch_iters
    per_batch = 10
    scopes_needed = math.ceil(singles / cap) + math.ceil(batches * per_batch / cap)
    gens = {}
    for j in range(scopes_needed):
        gens[j] = (await store.grant(scope_key(f"w{j}"), purpose=PURPOSE)).generation
    used = dict.fromkeys(gens, 0)
    user = mxid("writer")

    def writer(n: int) -> int:
        for j, count in used.items():
            if count + n <= cap:
                used[j] = count + n
                return j
        raise RuntimeError("writer scopes exhausted")

    samples: dict[str, list[float]] = {"single_upstream": [], "single_governed": [],
                                       "batch_upstream": [], "batch_governed": []}
    for i in range(singles):
        vec = vectors[i % len(vectors)]
        content = f"benchmark saved fact {i}"
        j = writer(1)
        pair = [("single_upstream", partial(upstream_insert, up, upstream, user, content, vec)),
                ("single_governed", partial(store.save, scope_key(f"w{j}"), gens[j],
                                            facts=[content], embeddings=[vec.to_list()]))]
        for name, fn in (pair if i % 2 == 0 else pair[::-1]):
            seconds, _ = await _timed(fn)
            if i >= warmup:
                samples[name].append(seconds)
    for i in range(batches):
        items = [(f"benchmark batch {i} fact {k}", vectors[(i * per_batch + k) % len(vectors)])
                 for k in range(per_batch)]
        facts, embs = [c for c, _ in items], [v.to_list() for _, v in items]
        j = writer(per_batch)
        pair = [("batch_upstream", partial(upstream_insert_batch, up, upstream, user, items)),
                ("batch_governed", partial(store.save, scope_key(f"w{j}"), gens[j], facts=facts,
                                           embeddings=embs))]
        for name, fn in (pair if i % 2 == 0 else pair[::-1]):
            seconds, _ = await _timed(fn)
            if i >= warmup:
                samples[name].append(seconds)
    return {name: Stat.of(s) for name, s in samples.items()}


async def measure_erasure(up: psycopg.AsyncConnection, store: GovernedMemoryStore,
                          upstream: UpstreamSQL, size: Size) -> dict[str, Any]:
    """Forget single entries of the first scopes; withdraw the last ``withdraw_iters`` full
    scopes, alternating with upstream's whole-pair delete of the same scopes' pairs."""
    forget_scopes = list(range(min(size.forget_iters, size.scopes - size.withdraw_iters)))
    per_scope = math.ceil(size.forget_iters / len(forget_scopes))
    targets: list[tuple[int, str]] = []
    for s in forget_scopes:
        page = await store.inspect(scope_key(s), page_size=min(per_scope, 50))
        targets += [(s, e.id) for e in page.entries]
    targets = targets[: size.forget_iters]
    forget: list[float] = []
    forgotten = 0
    for s, entry in targets:
        seconds, receipt = await _timed(partial(store.forget, scope_key(s), entry))
        forget.append(seconds)
        forgotten += receipt.deleted
    withdraw: list[float] = []
    delete: list[float] = []
    withdrawn = deleted = 0
    for i, s in enumerate(range(size.scopes - size.withdraw_iters, size.scopes)):
        pair = [("upstream", partial(upstream_delete, up, upstream, s)),
                ("governed", partial(store.withdraw, scope_key(s)))]
        for name, fn in (pair if i % 2 == 0 else pair[::-1]):
            seconds, out = await _timed(fn)
            if name == "upstream":
                delete.append(seconds)
                deleted += out
            else:
                withdraw.append(seconds)
                withdrawn += out.deleted
                assert out.verified
    return {"forget": Stat.of(forget), "withdraw": Stat.of(withdraw),
            "upstream_delete": Stat.of(delete), "forgotten": forgotten, "withdrawn": withdrawn,
            "upstream_deleted": deleted, "withdraw_scopes": size.withdraw_iters}


async def measure_scaling(store: GovernedMemoryStore,
                          queries: Sequence[tuple[int, Vector, list[str]]], scopes: Sequence[int],
                          generations: dict[int, int], iters: int, seed: int,
                          stats: psycopg.AsyncConnection | None = None,
                          fixed: int = 100) -> dict[str, Any]:
    """Governed search latency at the current table size: ``all``, over random scopes among
    ``scopes`` (the working set grows with the table); ``fixed``, over the first ``fixed``
    scopes only (the same working set at every size: the per-scope work).  With ``stats``, the
    shared-buffer hit rate of ``memory_entry`` during each."""
    lists = [q[1].to_list() for q in queries]

    async def run(pool: Sequence[int]) -> tuple[Stat, float | None]:
        rng = random.Random(seed)

        def search(i: int) -> Callable[[], Awaitable[Any]]:
            s = pool[rng.randrange(len(pool))]
            return partial(store.search, scope_key(s), generations.get(s, 1),
                           lists[i % len(lists)], limit=LIMIT)

        for i in range(iters // 10):
            await search(i)()
        before = await block_counts(stats, "memory_entry") if stats else (0, 0)
        samples = [(await _timed(search(i)))[0] for i in range(iters)]
        rate = None
        if stats:
            await flush_stats(store=store)
            rate = _hit_rate(before, await block_counts(stats, "memory_entry"))
        return Stat.of(samples), rate

    everything, rate_all = await run(scopes)
    same, rate_same = await run(list(scopes[:fixed]))
    return {"all": everything, "fixed": same, "hit_rate": rate_all, "hit_rate_fixed": rate_same,
            "fixed_scopes": min(fixed, len(scopes))}


class WireCounter:
    """Counts round trips at the protocol level: libpq's trace of a connection, counting the
    frontend messages that end a round trip (``Sync`` of an extended-protocol exchange, a
    simple ``Query``).  Auto-prepare is off on the traced connections so the one-off
    ``PREPARE`` exchange psycopg adds on a statement's 6th use is not counted."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="kgm-bench-trace-")
        os.close(fd)

    async def count(self, conn: psycopg.AsyncConnection, op: Callable[[], Awaitable[Any]]) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            await op()
        finally:
            conn.pgconn.untrace()
            os.close(fd)
        return _round_trips_in(self.path)

    def close(self) -> None:
        os.unlink(self.path)


def _round_trips_in(trace_path: str) -> int:
    with open(trace_path, encoding="utf-8", errors="replace") as f:
        fields = (line.rstrip("\n").split("\t") for line in f)
        return sum(1 for p in fields if len(p) > 2 and p[0] == "F" and p[2] in ("Sync", "Query"))


async def count_round_trips(dsn: str, app_dsn: str, upstream: UpstreamSQL,
                            vectors: Sequence[Vector], scope: int,
                            generation: int) -> dict[str, dict[str, int]]:
    """Statements sent per operation, counted on the wire, for both sides."""
    counter = WireCounter()
    store = await open_store(app_dsn, dsn, max_size=1)
    up = await connect(dsn, raw_vectors=True)
    try:
        async with store._pool.connection() as conn:
            pooled = conn  # the pool's only connection: every store call below uses it
        pooled.prepare_threshold = None
        up.prepare_threshold = None
        vec, floats = vectors[0], vectors[0].to_list()
        ten = [v.to_list() for v in vectors[:10]]
        ten_items = [(f"rt fact {k}", vectors[k]) for k in range(10)]
        gov: dict[str, int] = {}
        ups: dict[str, int] = {}

        async def fresh(tag: str, facts: int) -> ScopeKey:
            key = scope_key(tag)
            gen = (await store.grant(key, purpose=PURPOSE)).generation
            if facts:
                await store.save(key, gen, facts=[f"rt {tag} {k}" for k in range(facts)],
                                 embeddings=ten[:facts])
            return key

        key = scope_key(scope)
        gov["search"] = await counter.count(pooled, lambda: store.search(key, generation, floats))
        eight = [v.to_list() for v in vectors[:8]]
        gov["prefetch_8"] = await counter.count(
            pooled, lambda: store.search_many(key, generation, eight))
        k1 = scope_key("rt-grant")
        gov["grant"] = await counter.count(pooled, lambda: store.grant(k1, purpose=PURPOSE))
        gov["generation"] = await counter.count(pooled, lambda: store.generation(k1))
        g1 = await store.generation(k1)
        gov["admit"] = await counter.count(
            pooled, lambda: Admission(store).admit(k1, g1, units=2, explicit=True))
        gov["save"] = await counter.count(
            pooled, lambda: store.save(k1, g1, facts=["rt one"], embeddings=[floats]))
        gov["save_10"] = await counter.count(
            pooled, lambda: store.save(k1, g1, facts=[f"rt ten {k}" for k in range(10)],
                                       embeddings=ten))
        gov["inspect"] = await counter.count(pooled, lambda: store.inspect(k1, page_size=10))
        gov["status"] = await counter.count(pooled, lambda: store.status(k1))
        page = await store.inspect(k1, page_size=1)
        gov["forget"] = await counter.count(pooled, lambda: store.forget(k1, page.entries[0].id))
        k2 = await fresh("rt-clear", 10)
        gov["forget_all"] = await counter.count(pooled, lambda: store.forget_all(k2))
        k3 = await fresh("rt-withdraw", 10)
        gov["withdraw"] = await counter.count(pooled, lambda: store.withdraw(k3))

        ups["search"] = await counter.count(up, lambda: upstream_search_path(up, upstream, vec,
                                                                             scope))
        ups["search_sql"] = await counter.count(up, lambda: upstream_search(up, upstream, vec,
                                                                            scope))

        async def upstream_prefetch() -> None:
            for v in vectors[:8]:
                await upstream_search_path(up, upstream, v, scope)
        ups["prefetch_8"] = await counter.count(up, upstream_prefetch)
        ups["save"] = await counter.count(
            up, lambda: upstream_insert(up, upstream, mxid("rt-writer"), "rt one", vec))
        ups["save_10"] = await counter.count(
            up, lambda: upstream_insert_batch(up, upstream, mxid("rt-writer"), ten_items))
        ups["delete"] = await counter.count(up, lambda: upstream_delete(up, upstream, -1))
        return {"governed": gov, "upstream": ups}
    finally:
        await up.close()
        await store.close()
        counter.close()


class _NullStream:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def measure_log_sanitizer(records: int, blocks: int) -> dict[str, dict[str, Stat]]:
    """Per-record cost of a log call through a handler that writes to a null stream, plain vs
    with ``install_content_free_logging()`` (installed and removed around each block; plain and
    sanitized blocks alternate).  Two records: one of this library's (format string + args,
    args checked) and one of an upstream logger carrying content (message replaced)."""
    if telemetry._INSTALLED is not None:
        raise RuntimeError("the log sanitizer is already installed in this process")
    handler = logging.StreamHandler(_NullStream())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    own = logging.getLogger("kagent_governed_memory.benchmark")
    ups = logging.getLogger("kagent_adk.benchmark")
    saved = [(lg, lg.level, lg.propagate) for lg in (own, ups)]
    for lg in (own, ups):
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    user, fact = "@alice:example.org", "my sister's name is Ada and she lives in Lyon"

    def emit_own(n: int) -> None:
        for _ in range(n):
            own.info("memory op=%s rows=%d ms=%.2f", "search", 5, 0.42)

    def emit_upstream(n: int) -> None:
        for _ in range(n):
            ups.info(f"Saved memory for user {user}: {fact}")

    out: dict[str, dict[str, Stat]] = {}
    try:
        for name, emit in (("own", emit_own), ("upstream", emit_upstream)):
            samples: dict[str, list[float]] = {"plain": [], "sanitized": []}
            emit(records // 10)  # warm-up
            for b in range(blocks):
                for mode in (("plain", "sanitized") if b % 2 == 0 else ("sanitized", "plain")):
                    sanitizer = None
                    if mode == "sanitized":
                        sanitizer = telemetry.install_content_free_logging()
                        sanitizer.cover(handler)
                    try:
                        t0 = time.perf_counter_ns()
                        emit(records)
                        samples[mode].append((time.perf_counter_ns() - t0) / 1e9 / records)
                    finally:
                        if sanitizer is not None:
                            sanitizer.remove()
            out[name] = {mode: Stat.of(s) for mode, s in samples.items()}
    finally:
        for lg, level, propagate in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
    return out


# -- plans (evidence) -------------------------------------------------------------------------


async def collect_plans(up: psycopg.AsyncConnection, upstream: UpstreamSQL, admin_dsn: str | None,
                        bench_schema_path: str, app_role: str, scope: int, generation: int,
                        vec: Vector) -> dict[str, str]:
    plans: dict[str, str] = {}
    cur = psycopg.AsyncRawCursor(up)
    await cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + upstream.search,
                      [vec, UPSTREAM_AGENT, mxid(scope), LIMIT])
    plans["upstream_search"] = "\n".join(r[0] for r in await cur.fetchall())
    try:
        await cur.execute("EXPLAIN (GENERIC_PLAN) " + upstream.search)
        plans["upstream_search_generic"] = "\n".join(r[0] for r in await cur.fetchall())
    except psycopg.Error as exc:
        plans["upstream_search_generic"] = f"(not available: {type(exc).__name__})"
    args = ["matrix", LOCAL, mxid(scope), NAMESPACE, AGENT, "control_room", room(scope),
            generation, PROTOTYPE_POLICY.version, vec, LIMIT]
    await cur.execute("EXPLAIN (ANALYZE, BUFFERS) "
                      + governed_sql.query("SearchMemoryEntriesByIssuer"),
                      args)
    plans["governed_search_outer"] = "\n".join(r[0] for r in await cur.fetchall())
    if admin_dsn is None:
        return {k: _compact(v) for k, v in plans.items()}
    notes: list[str] = []
    admin_dsn = make_conninfo(admin_dsn, dbname=up.info.dbname)
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
        await register_vector_async(admin)
        admin.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
        await admin.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0",
                        "auto_explain.log_nested_statements = on",
                        "auto_explain.log_analyze = on", "auto_explain.log_buffers = on",
                        "client_min_messages = log"):
            await admin.execute("SET " + setting)
        await admin.execute(pgsql.SQL("SET search_path = {}").format(pgsql.SQL(bench_schema_path)))
        await admin.execute(pgsql.SQL("SET ROLE {}").format(pgsql.Identifier(app_role)))
        acur = psycopg.AsyncRawCursor(admin)
        await acur.execute(governed_sql.query("SearchMemoryEntriesByIssuer"), args)
        await acur.fetchall()
    plans["governed_search_inner"] = "\n\n".join(
        n.split("Query Parameters:")[0] + n[n.find("\n", n.find("Query Parameters:")):]
        if "Query Parameters:" in n else n for n in notes)
    return {k: _compact(v) for k, v in plans.items()}


def _compact(plan: str) -> str:
    """Plans quote the 768 floats of a vector literal; keep them readable."""
    return re.sub(r"'\[[-0-9.e,]{200,}\]'", "'[…768 floats…]'", plan)


def _pstats(profile: cProfile.Profile, limit: int = 14) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    head = next((ln.strip() for ln in lines if "function calls" in ln), "")
    return "\n".join([head, *lines[start:]]).rstrip()


async def profile_search(store: GovernedMemoryStore,
                         queries: Sequence[tuple[int, Vector, list[str]]],
                         generations: dict[int, int], calls: int) -> str:
    """cProfile of ``store.search`` calls: where a call's wall time goes on the client (the
    server's share shows as the event loop's ``select``/``poll``)."""
    lists = [(q[0], q[1].to_list()) for q in queries]
    profile = cProfile.Profile()
    profile.enable()
    for i in range(calls):
        scope, floats = lists[i % len(lists)]
        await store.search(scope_key(scope), generations.get(scope, 1), floats, limit=LIMIT)
    profile.disable()
    return _pstats(profile)


def profile_log_sanitizer(records: int) -> str:
    """cProfile of this library's log record through the installed sanitizer."""
    if telemetry._INSTALLED is not None:
        raise RuntimeError("the log sanitizer is already installed in this process")
    handler = logging.StreamHandler(_NullStream())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    own = logging.getLogger("kagent_governed_memory.benchmark")
    level, propagate = own.level, own.propagate
    own.addHandler(handler)
    own.setLevel(logging.INFO)
    own.propagate = False
    sanitizer = telemetry.install_content_free_logging()
    sanitizer.cover(handler)
    profile = cProfile.Profile()
    try:
        profile.enable()
        for _ in range(records):
            own.info("memory op=%s rows=%d ms=%.2f", "search", 5, 0.42)
        profile.disable()
    finally:
        sanitizer.remove()
        own.removeHandler(handler)
        own.setLevel(level)
        own.propagate = propagate
    return _pstats(profile)


async def withdraw_breakdown(raw: psycopg.AsyncConnection, scopes: Sequence[int]) -> str:
    """The three statements of ``store.withdraw`` (each its own transaction, so the disable is
    durable before anything is deleted), timed one by one on a bare connection."""
    steps: dict[str, list[float]] = {"DisableMemoryScope": [], "ClearMemoryScope": [],
                                      "VerifyMemoryErasure": []}
    cur = psycopg.AsyncRawCursor(raw)
    for s in scopes:
        key = ["matrix", LOCAL, mxid(s), NAMESPACE, AGENT, "control_room", room(s)]
        generation = None
        for name, extra in (("DisableMemoryScope", []), ("ClearMemoryScope", [False]),
                            ("VerifyMemoryErasure", None)):
            params = key + (extra if extra is not None else [generation, None, True])
            t0 = time.perf_counter_ns()
            # the issuer-generic statement the library runs (000016)
            await cur.execute(governed_sql.query(name + "ByIssuer"), params)
            row = await cur.fetchone()
            steps[name].append((time.perf_counter_ns() - t0) / 1e9)
            if name == "DisableMemoryScope":
                assert row is not None
                generation = row[1]
    lines = [f"{name:<22} median {fmt_time(statistics.median(v))}, p95 {fmt_time(Stat.of(v).p95)}"
             for name, v in steps.items()]
    total = [sum(v) for v in zip(*steps.values(), strict=True)]
    lines.append(f"{'sum of the three':<22} median {fmt_time(statistics.median(total))}"
                 f" ({len(scopes)} full scopes, bare connection, no pool or validation)")
    return "\n".join(lines)


# -- the whole run ----------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
        with open("/proc/meminfo", encoding="utf-8") as f:
            mem_kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal"))
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {"nproc": os.cpu_count(), "cpu": cpu or platform.processor(),
            "memory_gib": round(mem_kb / 2**20, 1), "python": platform.python_version(),
            "psycopg": psycopg.__version__, "platform": platform.platform()}


async def open_store(app_dsn: str, owner_dsn: str, *, max_size: int) -> GovernedMemoryStore:
    """The governed side: the application login, or the owner (``privileged``) without one."""
    return await GovernedMemoryStore.open(app_dsn, local_server=LOCAL, min_size=1,
                                          max_size=max_size, sweep_every=None,
                                          privileged=app_dsn == owner_dsn)


async def run_benchmark(dsn: str, upstream: UpstreamSQL, size: Size, *,
                        app_dsn: str | None = None,
                        admin_dsn: str | None = None, schema: str = SCHEMA, keep: bool = True,
                        explain: bool = False, log_benchmark: bool = True,
                        buffer_stats: bool = True,
                        progress: Callable[[str], None] | None = None) -> Report:
    """Everything, on one database; the table rows come back in a ``Report``.
    ``buffer_stats`` adds shared-buffer hit rates (each reading waits ~1 s for the backends to
    publish their counters)."""
    say = progress or (lambda _m: None)
    t_start = time.perf_counter()
    phases: dict[str, float] = {}
    bench_dsn = await prepare_schema(dsn, schema)
    bench_path = conninfo_to_dict(bench_dsn)["options"].split("search_path=", 1)[1]
    app_bench_dsn = bench_dsn if app_dsn is None else make_conninfo(
        app_dsn, options=conninfo_to_dict(bench_dsn)["options"])
    setup = await connect(bench_dsn)
    await migrate(bench_dsn, local_server=LOCAL)  # as the owner
    store = await open_store(app_bench_dsn, bench_dsn, max_size=2)
    up = await connect(bench_dsn, raw_vectors=True)
    raw = await connect(app_bench_dsn)
    try:
        meta: dict[str, Any] = {"size": asdict(size), "upstream_source": upstream.source,
                                "machine": machine_facts()}
        meta["postgres"] = await _one(setup, "SHOW server_version")
        meta["pgvector"] = await _one(setup, "SELECT extversion FROM pg_extension"
                                             " WHERE extname = 'vector'")
        for name in ("shared_buffers", "work_mem", "max_parallel_workers_per_gather",
                     "jit", "fsync"):
            meta.setdefault("settings", {})[name] = await _one(setup, f"SHOW {name}")
        app_role = await _one(raw, "SELECT current_user")
        meta["governed_role"] = ("application login (kagent_memory_service member)"
                                 if app_dsn is not None else "owner (no --app-dsn given)")
        stats = setup if buffer_stats else None

        t = time.perf_counter()
        await generate_source(setup, size, say)
        phases["generate"] = time.perf_counter() - t
        await create_upstream_table(setup, upstream)

        # governed, in the scaling steps: time search at each size as it is reached
        t = time.perf_counter()
        queries = await load_queries(setup)
        scaling: dict[int, dict[str, Any]] = {}
        loaded = 0
        steps = [s for s in size.scaling if s <= size.scopes]
        for target in steps:
            await load_governed(setup, loaded, target, size, say)
            loaded = target
            await vacuum_analyze(setup, "memory_entry", "memory_scope")
            scaling[target * size.facts] = await measure_scaling(
                store, queries, list(range(target)), {}, size.scaling_iters, size.seed, stats,
                fixed=steps[0])
            say(f"governed search timed at {target * size.facts:,} rows")
        if loaded < size.scopes:
            await load_governed(setup, loaded, size.scopes, size, say)
            await vacuum_analyze(setup, "memory_entry", "memory_scope")
        phases["governed_load"] = time.perf_counter() - t

        t = time.perf_counter()
        await load_upstream(setup, size)
        phases["upstream_load"] = time.perf_counter() - t
        phases["upstream_index"] = await finish_upstream_schema(setup, upstream, say)
        await vacuum_analyze(setup, "memory")
        say("both stores loaded")

        generations = dict.fromkeys(range(size.scopes), 1)
        search_queries = queries[: max(64, min(len(queries), size.search_iters))]
        search = await measure_search(up, raw, store, upstream, search_queries, generations,
                                      size.search_iters, size.warmup, stats)
        say("search timed")
        recall_set = queries[: size.recall_queries]
        recall = await measure_recall(up, store, upstream, recall_set, generations)
        say("recall measured")
        plans: dict[str, str] = {}
        if explain:
            plans = await collect_plans(up, upstream, admin_dsn, bench_path, app_role,
                                        queries[0][0], 1, queries[0][1])
            plans["profile_store_search"] = await profile_search(
                store, search_queries, generations, min(size.search_iters, 500))
        vectors = [q[1] for q in queries]
        saves = await measure_saves(up, store, upstream, vectors, size, max(5, size.warmup // 10))
        say("saves timed")
        trips = await count_round_trips(bench_dsn, app_bench_dsn, upstream, vectors,
                                        queries[0][0], 1)
        say("round trips counted")
        erasure = await measure_erasure(up, store, upstream, size)
        say("erasure timed")
        first_free = min(size.forget_iters, size.scopes - size.withdraw_iters)
        spare = list(range(max(first_free, size.scopes - size.withdraw_iters - 20),
                           size.scopes - size.withdraw_iters))
        if explain and spare:
            plans["withdraw_steps"] = await withdraw_breakdown(raw, spare)
        gone = set(range(size.scopes - size.withdraw_iters, size.scopes))
        if explain:
            gone |= set(spare)

        if size.scaling and size.scaling[-1] > size.scopes:
            t = time.perf_counter()
            big = size.scaling[-1]
            await load_governed(setup, size.scopes, big, size, say)
            await vacuum_analyze(setup, "memory_entry", "memory_scope")
            phases["governed_load_large"] = time.perf_counter() - t
            live = [s for s in range(big) if s not in gone]
            scaling[big * size.facts] = await measure_scaling(
                store, queries, live, {}, size.scaling_iters, size.seed, stats,
                fixed=size.scaling[0])
            say(f"governed search timed at {big * size.facts:,} rows")

        logs = measure_log_sanitizer(size.log_records, size.log_blocks) if log_benchmark else {}
        if explain and log_benchmark:
            plans["profile_log_sanitizer"] = profile_log_sanitizer(size.log_records * 4)
        say("log sanitizer timed")
        rows_up = await _one(setup, "SELECT count(*) FROM memory")
        meta["rows_at_end"] = {"upstream": rows_up}
        meta["size_mb"] = {t: round(await _one(setup, "SELECT pg_total_relation_size($1::regclass)",
                                               [t]) / 2**20) for t in ("memory", "memory_entry")}
    finally:
        await raw.close()
        await up.close()
        await store.close()
        await setup.close()
        if not keep:
            await drop_schema(dsn, schema)
    phases["total"] = time.perf_counter() - t_start
    meta["phases_s"] = {k: round(v, 1) for k, v in phases.items()}
    meta["load"] = ("server-side generation; governed rows through memory_grant + memory_save "
                    "(fenced, as the application role); upstream rows by INSERT … SELECT")
    rows = build_rows(size, search, recall, saves, erasure, trips, logs, scaling)
    return Report(rows=rows, meta=meta, plans=plans)


def _rows_label(rows: int) -> str:
    if rows >= 1_000_000:
        return f"{rows / 1_000_000:g}M"
    if rows >= 1000:
        return f"{rows / 1000:g}k"
    return str(rows)


def build_rows(size: Size, search: dict[str, Any], recall: dict[str, dict[str, float]],
               saves: dict[str, Stat], erasure: dict[str, Any], trips: dict[str, dict[str, int]],
               logs: dict[str, dict[str, Stat]], scaling: dict[int, dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    up_sql, gov = search["main"]["upstream_sql"], search["main"]["governed"]
    gov_recall = recall["governed"]["recall"]
    r = _timed_ratio(up_sql, gov)
    hit = search.get("hit_rate") or {}
    hits = (f"; shared-buffer hits {hit['memory']:.0%} / {hit['memory_entry']:.0%}"
            if hit.get("memory") is not None and hit.get("memory_entry") is not None else "")
    rows.append(Row("search", f"Search one scope, k={LIMIT} (SearchAgentMemory SQL vs "
                              f"store.search: fence + read-time expiry{hits})",
                    cell(up_sql), cell(gov), r, "≤ 1.0× with recall@5 = 1.00",
                    _verdict(r <= 1.0 and gov_recall == 1.0),
                    {"upstream": asdict(up_sql), "governed": asdict(gov)}))
    u2, g2 = search["statement"]["upstream_sql"], search["statement"]["governed_sql"]
    rows.append(Row("search_sql", "… governed statement alone (memory_search: no pool, input "
                                  "validation or result models), own pass",
                    cell(u2), cell(g2), _timed_ratio(u2, g2), "—", "info",
                    {"upstream": asdict(u2), "governed_sql": asdict(g2)}))
    u3, g3 = search["path"]["upstream_path"], search["path"]["governed"]
    upd = search.get("updates") or {}
    hot = (f"; {1 - upd['hot'] / upd['updated']:.0%} of its access-count UPDATEs not HOT"
           if upd.get("updated") else "")
    rows.append(Row("search_path", "… upstream controller path (search + "
                                   f"IncrementMemoryAccessCount{hot}) vs store.search, own pass",
                    cell(u3), cell(g3), _timed_ratio(u3, g3), "—", "info",
                    {"upstream_path": asdict(u3), "governed": asdict(g3), "updates": upd}))
    for mode, label in (("default", "pgvector defaults"),
                        ("relaxed", "hnsw.iterative_scan = relaxed_order")):
        u = recall[f"upstream_{mode}"]
        g = recall["governed"]
        note = "" if mode == "default" else " (no ANN index: setting n/a)"
        rows.append(Row(f"recall_{mode}", f"Recall@{LIMIT} vs exact brute force, {label} "
                                          f"({u['n']:.0f} queries)",
                        f"{u['recall']:.3f}", f"{g['recall']:.3f}{note}", None,
                        "governed = 1.00", _verdict(g["recall"] == 1.0),
                        {"upstream": u, "governed": g}))
        rows.append(Row(f"short_{mode}", f"Queries answered with < {LIMIT} rows, {label}",
                        f"{u['short_rate']:.1%}", f"{g['short_rate']:.1%}", None, "governed = 0%",
                        _verdict(g["short_rate"] == 0.0)))
    s_up, s_gov = saves["single_upstream"], saves["single_governed"]
    r = _timed_ratio(s_up, s_gov)
    rows.append(Row("save", "Save 1 fact (InsertMemory vs store.save: fence, caps, expiry)",
                    cell(s_up), cell(s_gov), r, "≤ 0.3×", _verdict(r <= 0.3),
                    {"upstream_per_s": 1 / s_up.median, "governed_per_s": 1 / s_gov.median}))
    b_up, b_gov = saves["batch_upstream"], saves["batch_governed"]
    rows.append(Row("save_10", "Save 10-fact batch (10× InsertMemory in a transaction vs one "
                               "store.save)",
                    cell(b_up), cell(b_gov), _timed_ratio(b_up, b_gov), "—", "info",
                    {"upstream_facts_per_s": 10 / b_up.median,
                     "governed_facts_per_s": 10 / b_gov.median}))
    d_up = erasure["upstream_delete"]
    n = size.facts
    rows.append(Row("forget", f"Erase 1 entry + verify (store.forget) vs whole-pair "
                              f"DeleteAgentMemory of {n} rows (upstream has no per-entry delete)",
                    cell(d_up), cell(erasure["forget"]), _timed_ratio(d_up, erasure["forget"]),
                    "—", "info", {"forgotten": erasure["forgotten"]}))
    r = _timed_ratio(d_up, erasure["withdraw"])
    rows.append(Row("withdraw", f"Withdraw a full {n}-entry scope + verify (store.withdraw) vs "
                                "unverified whole-pair DeleteAgentMemory",
                    cell(d_up), cell(erasure["withdraw"]), r, "≤ 3×", _verdict(r <= 3.0),
                    {"withdrawn": erasure["withdrawn"],
                     "upstream_deleted": erasure["upstream_deleted"]}))
    g, u = trips["governed"], trips["upstream"]
    rt = [("rt_search", "Round trips: search (upstream: query + access-count update)",
           u["search"], g["search"]),
          ("rt_prefetch", "Round trips: prefetch of 8 sub-queries (upstream: 8 × (query + "
                          "access-count update); governed: one memory_search_many)",
           u["prefetch_8"], g["prefetch_8"]),
          ("rt_save", "Round trips: save 1 fact", u["save"], g["save"]),
          ("rt_save_10", "Round trips: save 10 facts (upstream: BEGIN, 10 inserts, COMMIT)",
           u["save_10"], g["save_10"]),
          ("rt_erase", "Round trips: erase (upstream whole-pair delete vs forget / withdraw)",
           u["delete"], f"{g['forget']} / {g['withdraw']}")]
    for key, label, uv, gv in rt:
        ratio = gv / uv if isinstance(gv, int) and uv else None
        rows.append(Row(key, label, str(uv), str(gv), ratio, "—", "info"))
    others = ("grant", "generation", "admit", "inspect", "status", "forget_all")
    rows.append(Row("rt_other", "Round trips: other governed operations", "—",
                    " · ".join(f"{k} {g[k]}" for k in others), None, "—", "info",
                    {"governed": g, "upstream": u}))
    for kind, label in (("own", "this library's record, args checked"),
                        ("upstream", "upstream logger's record with content, replaced")):
        if kind not in logs:
            continue
        plain, san = logs[kind]["plain"], logs[kind]["sanitized"]
        r = _timed_ratio(plain, san)
        rows.append(Row(f"log_{kind}", f"Log record via sanitizer vs plain logging ({label}); "
                                       "upstream column = plain",
                        cell(plain), cell(san), r, "≤ 1.5×", _verdict(r <= 1.5)))
    points = sorted(scaling)
    if points:
        base = scaling[points[0]]["all"]
        for rows_n in points:
            m = scaling[rows_n]
            st, same = m["all"], m["fixed"]
            r = st.median / base.median
            last = rows_n == points[-1] and len(points) > 1
            hits = "" if m["hit_rate"] is None else f", {m['hit_rate']:.0%} shared-buffer hits"
            rows.append(Row(f"scale_{rows_n}",
                            f"Governed search at {_rows_label(rows_n)} rows, random scope "
                            f"(ratio vs {_rows_label(points[0])}{hits}; the same "
                            f"{m['fixed_scopes']} scopes at every size: "
                            f"{fmt_time(same.median)}, p95 {fmt_time(same.p95)})",
                            "—", cell(st), r, "flat (≤ 1.25×)" if last else "—",
                            _verdict(r <= 1.25) if last else "info",
                            {"all": asdict(st), "fixed": asdict(same),
                             "hit_rate": m["hit_rate"], "hit_rate_fixed": m["hit_rate_fixed"]}))
    return rows


def render_table(report: Report) -> str:
    head = ["Measurement", "Upstream v0.9.11: median (p95)", "Governed: median (p95)",
            "Governed / upstream", "Target", "Result"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for r in report.rows:
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}×"
        cells = [r.label, r.upstream, r.governed, ratio, r.target, r.result]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def render_caption(report: Report) -> str:
    m, s = report.meta, report.meta["size"]
    mach = m["machine"]
    return (f"{s['scopes']:,} scopes × {s['facts']} facts ({s['scopes'] * s['facts']:,} rows each "
            f"side, 768-d), PostgreSQL {m['postgres']}, pgvector {m['pgvector']}, "
            f"{mach['nproc']} CPUs ({mach['cpu']}), {mach['memory_gib']} GiB; "
            f"upstream SQL from {m['upstream_source']}.\nSettings: "
            + ", ".join(f"{k}={v}" for k, v in m.get("settings", {}).items())
            + "; phases (s): " + ", ".join(f"{k} {v}" for k, v in m.get("phases_s", {}).items())
            + "; MB at the end: " + ", ".join(f"{k} {v}" for k, v in m.get("size_mb", {}).items()))


# -- CLI --------------------------------------------------------------------------------------


def _progress(started: float) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f}s] {message}", file=sys.stderr, flush=True)
    return say


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description="Governed memory vs upstream kagent v0.9.11 memory SQL on one PostgreSQL.")
    parser.add_argument("--dsn", help="PostgreSQL to use (default: a throwaway embedded one); "
                                      "runs in its own schema, dropped at the end")
    parser.add_argument("--app-dsn", help="with --dsn: the application login (a member of "
                                          "kagent_memory_service) the governed side runs as")
    parser.add_argument("--admin-dsn", help="superuser DSN for --explain's inner plan "
                                            "(embedded: automatic)")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="50 scopes × 100 facts (smoke)")
    sizes.add_argument("--large", action="store_true", help="also time governed search at 1M rows")
    parser.add_argument("--kagent-src", help="kagent checkout, or git dir[@ref] (default "
                                             "$KAGENT_SRC); read at run time, never copied")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--explain", action="store_true",
                        help="after the table, print the EXPLAIN evidence for both searches")
    parser.add_argument("--keep", action="store_true", help="with --dsn, keep the kgm_bench schema")
    args = parser.parse_args(argv)
    try:
        upstream = load_upstream_sql(args.kagent_src)
    except UpstreamSourceError as exc:
        print(f"benchmarks/run.py: {exc}", file=sys.stderr)
        return 2
    size = SIZES["quick" if args.quick else "large" if args.large else "default"]
    say = _progress(time.perf_counter())
    say(f"upstream SQL from {upstream.source}; size {size.name}")
    if args.dsn:
        report = asyncio.run(run_benchmark(args.dsn, upstream, size, app_dsn=args.app_dsn,
                                           admin_dsn=args.admin_dsn,
                                           schema=f"{SCHEMA}_{os.getpid()}", keep=args.keep,
                                           explain=args.explain, progress=say))
    else:
        from kagent_governed_memory.dev import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            say("embedded PostgreSQL started")
            report = asyncio.run(run_benchmark(pg.owner_dsn, upstream, size, app_dsn=pg.dsn,
                                               admin_dsn=pg.admin_dsn,
                                               explain=args.explain, progress=say))
    given = list(argv if argv is not None else sys.argv[1:])
    secret = ("--dsn", "--admin-dsn", "--app-dsn")
    shown = ["<dsn>" if i and given[i - 1] in secret else
             a.split("=", 1)[0] + "=<dsn>" if a.startswith(tuple(f"{o}=" for o in secret)) else a
             for i, a in enumerate(given)]  # a DSN may carry a password
    report.meta["command"] = "python " + " ".join(
        shlex.quote(a) for a in ["benchmarks/run.py", *shown])
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in report.rows], "meta": report.meta,
                          "plans": report.plans}, indent=2, default=str))
        return 0
    print(render_caption(report))
    print()
    print(render_table(report))
    if report.plans:
        for name, plan in report.plans.items():
            print(f"\n### {name}\n\n```\n{plan}\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "SIZES", "Report", "Row", "Size", "Stat", "UpstreamSQL", "build_rows", "count_round_trips",
    "measure_erasure", "measure_log_sanitizer", "measure_recall", "measure_saves",
    "measure_scaling", "measure_search", "render_table", "run_benchmark",
]
