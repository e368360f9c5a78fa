#!/usr/bin/env python
"""Concurrent agents' turns: the governed store vs upstream kagent v0.9.11's statements, one
PostgreSQL, pools of the same size, the same data.

    python benchmarks/load.py [--dsn OWNER_DSN --app-dsn APP_DSN [--admin-dsn DSN]]
                              [--quick] [--concurrency 1,4,16,64] [--turns N] [--pool P]
                              [--kagent-src PATH] [--json]

C concurrent simulated sessions (closed loop, no think time) each run turns.  A turn's memory
work, as an agent runtime does it:

* governed: verify the bridge's signed scope assertion (Ed25519, CPU) and redeem it
  (``memory_redeem_assertion``: the single-use ``jti`` ledger + the generation capture, one
  round trip); admit the prefetch (``memory_admit``, 2 units per sub-query); prefetch 8
  sub-queries (``store.search_many``: one round trip; the ``governed-8`` side does one
  ``store.search`` per sub-query, the code before 000010); every 5th turn admit and save 1–10
  facts (``store.save``); every 10th an ``inspect`` page, every 20th a ``forget`` of one entry.
* upstream: each sub-query is the controller's SearchAgentMemory path (the query, then
  IncrementMemoryAccessCount on the hits; a pool checkout each, as separate HTTP requests are);
  every 5th turn StoreAgentMemories (1–10 InsertMemory in a transaction).  Upstream has no
  assertion, admission, inspect or per-entry forget: those steps cost it nothing.

Query and fact vectors are precomputed (no embedder on either side); both sides start from
Python lists of floats.  A session changes scope every 10 turns (a new conversation).  The
admission buckets are sized so the benchmark is not refused: the consents are granted under a
policy registered for it (``bench-load-1``: the prototype's limits, ``scope_ops_per_hour``
10⁶), whose budgets the database reads; refusals are counted apart from errors anyway.  Saved
texts are distinct in every run (a text already live in a scope is stored once).

Storm run: at C = ``--storm-concurrency``, once a third of the turns are done, 10 % of all
scopes — those the sessions are on first — are withdrawn (``store.withdraw``) while the turns go
on; upstream gets DeleteAgentMemory for the same pairs.  Afterwards SQL counts what was stored
that should not be: governed rows in disabled scopes or of a generation other than their
scope's (``memory_store_report`` and, with an admin DSN, a direct count), upstream rows in the
deleted pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector_async
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import run as bench  # noqa: E402  (benchmarks/run.py: upstream SQL, data, identities)
from upstream_sql import UpstreamSourceError, UpstreamSQL  # noqa: E402
from upstream_sql import load as load_upstream_sql  # noqa: E402

from kagent_governed_memory import (
    AgentIdentity,
    GovernanceError,
    GovernedMemoryStore,
    MemoryPolicy,
)
from kagent_governed_memory.scope import (
    generate_private_key,
    sign_scope_assertion,
    verify_scope_assertion,
)
from kagent_governed_memory.store import Admission  # noqa: E402
from kagent_governed_memory.errors import (  # noqa: E402
    AdmissionDenied,
    ConsentRequired,
    EntryCapReached,
    ScopeDenied,
)
from kagent_governed_memory.scope import key_id  # noqa: E402
from kagent_governed_memory.store import migrate  # noqa: E402

ISSUER = "https://bridge.example.org"
AGENT = AgentIdentity(namespace=bench.NAMESPACE, name=bench.AGENT)
SUBQUERIES = 8
SAVE_EVERY, INSPECT_EVERY, FORGET_EVERY, SCOPE_EVERY = 5, 10, 20, 10
SIDES = ("governed", "governed-8", "upstream")
_REFUSALS = (AdmissionDenied, ConsentRequired, EntryCapReached, ScopeDenied)
# The prototype's storage limits with the scope budget sized for a benchmark (a session turns
# many times an hour here), registered by the owner and allowed for every agent: the budgets
# are the scope's registered policy's, no caller passes them.
LOAD_POLICY = MemoryPolicy(version="bench-load-1", scope_ops_per_hour=1_000_000)


@dataclass(frozen=True)
class LoadSize:
    name: str
    scopes: int
    facts: int
    concurrency: tuple[int, ...]
    turns: int  # per (side, C) run, at least C × 10
    pool: int
    storm_concurrency: int
    storm_fraction: float = 0.10
    seed: int = 20260416


LOAD_SIZES = {
    "default": LoadSize("default", 1000, 50, (1, 4, 16, 64), 1280, 8, 16),
    "quick": LoadSize("quick", 100, 20, (1, 4, 16), 200, 4, 8),
}


@dataclass
class SideRun:
    side: str
    concurrency: int
    wall: float = 0.0
    turns: int = 0
    ops: dict[str, list[float]] = field(default_factory=dict)
    refusals: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    storm: dict[str, Any] = field(default_factory=dict)

    def add(self, op: str, seconds: float) -> None:
        self.ops.setdefault(op, []).append(seconds)

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.wall if self.wall else 0.0

    def pct(self, op: str, q: float) -> float | None:
        xs = sorted(self.ops.get(op, ()))
        if not xs:
            return None
        return xs[max(0, math.ceil(q * len(xs)) - 1)]

    def summary(self) -> dict[str, Any]:
        return {"side": self.side, "concurrency": self.concurrency, "turns": self.turns,
                "wall_s": round(self.wall, 3), "turns_per_s": round(self.turns_per_s, 2),
                "ops": {op: {"n": len(xs), "p50": self.pct(op, 0.5), "p95": self.pct(op, 0.95),
                             "p99": self.pct(op, 0.99)} for op, xs in self.ops.items()},
                "refusals": dict(self.refusals), "errors": dict(self.errors),
                "storm": self.storm}


class World:
    """What every session shares: the stores, pools, vectors and signing key."""

    def __init__(self, size: LoadSize, store: GovernedMemoryStore, pool: AsyncConnectionPool,
                 upstream: UpstreamSQL, queries: list[list[float]]) -> None:
        self.size = size
        self.store = store
        self.pool = pool
        self.upstream = upstream
        self.queries = queries
        # the budgets of the consents' registered policy (LOAD_POLICY: sized for a benchmark)
        self.admission = Admission(store)
        self.bridge = generate_private_key()
        self.public = {key_id(self.bridge): self.bridge.public_key()}
        self.keys = {s: bench.scope_key(s) for s in range(size.scopes)}
        self.generations: dict[int, int] = {}

    def scope_of(self, session: int, turn: int, c: int) -> int:
        return (session + c * (turn // SCOPE_EVERY)) % self.size.scopes

    def tokens(self, plan: Sequence[tuple[int, int, int]]) -> dict[tuple[int, int], str]:
        """The bridge's work, done before the run: one signed assertion per (session, turn)."""
        return {(s, t): sign_scope_assertion(self.keys[scope], private_key=self.bridge,
                                             issuer=ISSUER, audience=[bench.LOCAL],
                                             context_id=f"load-{s}-{t}",
                                             lifetime=timedelta(seconds=60))
                for s, t, scope in plan}


async def _timed(run: SideRun, op: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    t0 = time.perf_counter()
    try:
        return await fn()
    finally:
        run.add(op, time.perf_counter() - t0)


async def governed_turn(w: World, run: SideRun, session: int, turn: int, c: int, token: str,
                        rng: random.Random, per_query: bool) -> None:
    scope = w.scope_of(session, turn, c)
    key = w.keys[scope]
    store = w.store
    vecs = [w.queries[rng.randrange(len(w.queries))] for _ in range(SUBQUERIES)]

    async def admit_request() -> int | None:
        a = verify_scope_assertion(token, public_keys=w.public, issuer=ISSUER, agent=AGENT,
                                   context_id=f"load-{session}-{turn}")
        return await store.redeem(a)

    gen = await _timed(run, "redeem", admit_request)
    if gen is None:
        run.refusals["consent_required"] += 1
        return
    await _timed(run, "admit", lambda: w.admission.admit(key, gen, units=2 * SUBQUERIES))
    if per_query:
        async def prefetch() -> list[Any]:
            return [await store.search(key, gen, v, limit=bench.LIMIT) for v in vecs]
    else:
        async def prefetch() -> list[Any]:
            return await store.search_many(key, gen, vecs, limit=bench.LIMIT)
    await _timed(run, "prefetch", prefetch)
    if turn % SAVE_EVERY == SAVE_EVERY - 1:
        n = rng.randint(1, 10)
        # distinct across runs and sides too: every run meets the same scopes, and a text
        # already live in a scope is stored once (the save would then insert nothing)
        facts = [f"load fact {run.side}-{c}-{session}-{turn}-{k}" for k in range(n)]
        embs = [w.queries[rng.randrange(len(w.queries))] for _ in range(n)]

        async def save() -> list[str]:
            await w.admission.admit(key, gen, units=n)
            return await store.save(key, gen, facts=facts, embeddings=embs)
        await _timed(run, "save", save)
    if turn % INSPECT_EVERY == INSPECT_EVERY - 1:
        page = await _timed(run, "inspect", lambda: store.inspect(key, page_size=10))
        if turn % FORGET_EVERY == FORGET_EVERY - 1 and page.entries:
            entry = page.entries[rng.randrange(len(page.entries))].id
            await _timed(run, "forget", lambda: store.forget(key, entry))


async def upstream_turn(w: World, run: SideRun, session: int, turn: int, c: int,
                        rng: random.Random) -> None:
    scope = w.scope_of(session, turn, c)
    vecs = [w.queries[rng.randrange(len(w.queries))] for _ in range(SUBQUERIES)]

    async def one(v: list[float]) -> int:
        async with w.pool.connection() as conn:
            return await bench.upstream_search_path(conn, w.upstream, Vector(v), scope)

    async def prefetch() -> list[int]:
        return [await one(v) for v in vecs]
    await _timed(run, "prefetch", prefetch)
    if turn % SAVE_EVERY == SAVE_EVERY - 1:
        n = rng.randint(1, 10)
        items = [(f"load fact {run.side}-{c}-{session}-{turn}-{k}",
                  Vector(w.queries[rng.randrange(len(w.queries))])) for k in range(n)]

        async def save() -> int:
            async with w.pool.connection() as conn:
                return await bench.upstream_insert_batch(conn, w.upstream, bench.mxid(scope),
                                                         items)
        await _timed(run, "save", save)


async def run_side(w: World, side: str, c: int, *, storm: bool = False,
                   admin_dsn: str | None = None) -> SideRun:
    run = SideRun(f"{side} (storm)" if storm else side, c)  # the name is in its saved texts
    per_session = max(10, w.size.turns // c)
    plan = [(s, t, w.scope_of(s, t, c)) for s in range(c) for t in range(per_session)]
    tokens = w.tokens(plan) if side != "upstream" else {}
    done = 0
    storm_at = len(plan) // 3
    storm_task: asyncio.Task[Any] | None = None
    storm_started = asyncio.Event()

    async def session(s: int) -> None:
        nonlocal done, storm_task
        rng = random.Random(w.size.seed * 1000 + s)
        for t in range(per_session):
            t0 = time.perf_counter()
            try:
                if side == "upstream":
                    await upstream_turn(w, run, s, t, c, rng)
                else:
                    await governed_turn(w, run, s, t, c, tokens.pop((s, t)), rng,
                                        per_query=side == "governed-8")
            except _REFUSALS as exc:
                run.refusals[exc.reason.value] += 1
            except GovernanceError as exc:
                run.errors[exc.reason.value] += 1
            except (psycopg.Error, OSError) as exc:
                run.errors[type(exc).__name__] += 1
            run.add("turn", time.perf_counter() - t0)
            if t % SAVE_EVERY != SAVE_EVERY - 1 and t % INSPECT_EVERY != INSPECT_EVERY - 1:
                run.add("turn_plain", time.perf_counter() - t0)  # assert + admit + prefetch
            run.turns += 1
            done += 1
            if storm and done == storm_at and storm_task is None:
                storm_task = asyncio.create_task(_storm(w, run, side, c, t + 1))
                storm_started.set()

    t0 = time.perf_counter()
    await asyncio.gather(*(session(s) for s in range(c)))
    run.wall = time.perf_counter() - t0
    if storm_task is not None:
        await storm_task
        run.storm.update(await _stale_check(w, side, run.storm.pop("_scopes"), admin_dsn))
    return run


async def _storm(w: World, run: SideRun, side: str, c: int, turn: int) -> None:
    """Withdraw 10 % of the scopes, the sessions' current and next ones first."""
    n = max(1, round(w.size.scopes * w.size.storm_fraction))
    first = [w.scope_of(s, t, c) for t in (turn, turn + SCOPE_EVERY) for s in range(c)]
    scopes = list(dict.fromkeys(first + list(range(w.size.scopes))))[:n]
    sem = asyncio.Semaphore(4)
    t0 = time.perf_counter()

    async def one(scope: int) -> None:
        async with sem:
            if side == "upstream":
                async with w.pool.connection() as conn:
                    await bench.upstream_delete(conn, w.upstream, scope)
            else:
                await w.store.withdraw(w.keys[scope])

    await asyncio.gather(*(one(s) for s in scopes))
    run.storm.update({"withdrawn_scopes": len(scopes), "storm_s": round(time.perf_counter() - t0, 3),
                      "_scopes": scopes})


async def _stale_check(w: World, side: str, scopes: list[int], admin_dsn: str | None
                       ) -> dict[str, Any]:
    if side == "upstream":
        async with w.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM memory WHERE agent_name = %s AND user_id = ANY(%s)",
                [bench.UPSTREAM_AGENT, [bench.mxid(s) for s in scopes]])
            row = await cur.fetchone()
        return {"rows_in_deleted_pairs": int(row[0]) if row else -1}
    report = await w.store.report()
    out: dict[str, Any] = {"rows_in_disabled_scopes": report.rows_in_disabled_scopes,
                           "stale_generation_rows": report.stale_generation,
                           "expired_readable": report.expired_readable}
    if admin_dsn:
        async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
            keys = [w.keys[s] for s in scopes]
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE e.id IS NOT NULL),"
                "       count(DISTINCT s.id) FILTER (WHERE NOT s.enabled)"
                "  FROM memory_scope s LEFT JOIN memory_entry e ON e.scope_id = s.id"
                " WHERE (s.principal_subject, s.scope_ref) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
                [[k.principal.subject for k in keys], [k.scope.room_id for k in keys]])
            row = await cur.fetchone()
            assert row is not None
            out["rows_in_withdrawn_scopes_sql"] = int(row[0])
            out["withdrawn_scopes_disabled_sql"] = int(row[1])
    return out


# -- setup ------------------------------------------------------------------------------------


async def prepare(dsn: str, app_dsn: str | None, upstream: UpstreamSQL, size: LoadSize,
                  schema: str, say: Callable[[str], None]) -> tuple[str, str, list[list[float]]]:
    bench_dsn = await bench.prepare_schema(dsn, schema)
    app_bench_dsn = bench_dsn if app_dsn is None else make_conninfo(
        app_dsn, options=conninfo_to_dict(bench_dsn)["options"])
    await migrate(bench_dsn, local_server=bench.LOCAL)
    async with await GovernedMemoryStore.open(bench_dsn, local_server=bench.LOCAL,
                                              privileged=True, sweep_every=None) as owner:
        await owner.register_policy(LOAD_POLICY)
        await owner.allow_policy(LOAD_POLICY.version)
    data = bench.Size("load", size.scopes, size.facts, (), recall_queries=256, seed=size.seed)
    async with await bench.connect(bench_dsn) as setup:
        await bench.generate_source(setup, data, say)
        await bench.create_upstream_table(setup, upstream)
        await bench.load_governed(setup, 0, size.scopes, data, say, policy=LOAD_POLICY)
        await bench.load_upstream(setup, data)
        await bench.finish_upstream_schema(setup, upstream, say)
        await bench.vacuum_analyze(setup, "memory_entry", "memory_scope", "memory")
        cur = await setup.execute("SELECT embedding FROM bench_query ORDER BY i")
        queries = [r[0].to_list() for r in await cur.fetchall()]
    say(f"loaded {size.scopes:,} scopes × {size.facts} facts on each side")
    return bench_dsn, app_bench_dsn, queries


async def run_load(dsn: str, upstream: UpstreamSQL, size: LoadSize, *,
                   app_dsn: str | None = None, admin_dsn: str | None = None,
                   schema: str = "kgm_load", keep: bool = True,
                   sides: Sequence[str] = SIDES, storm: bool = True,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = progress or (lambda _m: None)
    started = time.perf_counter()
    bench_dsn, app_bench_dsn, queries = await prepare(dsn, app_dsn, upstream, size, schema, say)
    admin_bench_dsn = None if admin_dsn is None else make_conninfo(
        admin_dsn, options=conninfo_to_dict(bench_dsn)["options"])
    store = await GovernedMemoryStore.open(app_bench_dsn, local_server=bench.LOCAL,
                                           policy=LOAD_POLICY, min_size=size.pool,
                                           max_size=size.pool, sweep_every=None,
                                           privileged=app_dsn is None)

    async def configure(conn: psycopg.AsyncConnection) -> None:
        await register_vector_async(conn)
        info = await psycopg.types.TypeInfo.fetch(conn, "vector")
        assert info is not None
        conn.adapters.register_loader(info.oid, bench._RawBytes)

    pool = AsyncConnectionPool(bench_dsn, min_size=size.pool, max_size=size.pool, open=False,
                               kwargs={"autocommit": True}, configure=configure, timeout=10.0,
                               name="upstream-load")
    await pool.open(wait=True)
    runs: list[SideRun] = []
    loads: dict[str, list[float]] = {}
    try:
        w = World(size, store, pool, upstream, queries)
        for c in size.concurrency:
            order = list(sides) if (size.concurrency.index(c) % 2 == 0) else list(sides)[::-1]
            for side in order:
                loads.setdefault(f"{side}@{c}", list(os.getloadavg()))
                runs.append(await run_side(w, side, c))
                say(f"{side} at C={c}: {runs[-1].turns_per_s:.1f} turns/s")
        if storm:
            for side in ("governed", "upstream"):
                if side in sides:
                    r = await run_side(w, side, size.storm_concurrency, storm=True,
                                       admin_dsn=admin_bench_dsn)
                    r.side = f"{side} (storm)"
                    runs.append(r)
                    say(f"storm {side}: {r.storm}")
    finally:
        await pool.close()
        await store.close()
        if not keep:
            await bench.drop_schema(dsn, schema)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        settings = {n: (await (await conn.execute(f"SHOW {n}")).fetchone())[0]  # type: ignore[index]
                    for n in ("shared_buffers", "max_connections", "server_version")}
    return {"runs": [r.summary() for r in runs], "size": asdict(size),
            "machine": bench.machine_facts(), "settings": settings,
            "loadavg_at_start": loads, "loadavg_end": list(os.getloadavg()),
            "upstream_source": upstream.source,
            "total_s": round(time.perf_counter() - started, 1)}


# -- report -----------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1e3:.1f}"


def _triple(op: dict[str, Any] | None) -> str:
    if not op:
        return "—"
    return f"{_ms(op['p50'])} / {_ms(op['p95'])} / {_ms(op['p99'])}"


def knee(result: dict[str, Any], side: str) -> int | None:
    """The last C after which more sessions add less than 10 % turns/s (they add latency
    instead); ``None`` when throughput still grows by 10 % or more up to the largest C."""
    pts = sorted((r["concurrency"], r["turns_per_s"]) for r in result["runs"] if r["side"] == side)
    for (c, t), (_, nxt) in zip(pts, pts[1:], strict=False):
        if nxt < 1.10 * t:
            return c
    return None


def render(result: dict[str, Any]) -> str:
    runs = [r for r in result["runs"] if "storm" not in r["side"]]
    lines = ["| C | side | turns/s | turn p50 / p95 / p99 ms (p99/p50) | redeem | admit | "
             "prefetch (8 sub-queries) | save (1–10 facts) | inspect | forget | refusals | errors |",
             "|---|---|---:|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        t = r["ops"].get("turn")
        spread = f" ({t['p99'] / t['p50']:.1f}×)" if t and t["p50"] else ""
        cells = [str(r["concurrency"]), r["side"], f"{r['turns_per_s']:.1f}", _triple(t) + spread]
        cells += [_triple(r["ops"].get(op)) for op in ("redeem", "admit", "prefetch", "save",
                                                       "inspect", "forget")]
        cells += [", ".join(f"{k} {v}" for k, v in r["refusals"].items()) or "0",
                  ", ".join(f"{k} {v}" for k, v in r["errors"].items()) or "0"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| C | governed turns/s | governed-8 turns/s | upstream turns/s | "
                  "governed / upstream | governed p99 / p50 (turn) | governed p99 / p50 "
                  "(turns without save or inspect) | errors (governed) |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    by = {(r["side"], r["concurrency"]): r for r in runs}
    for c in result["size"]["concurrency"]:
        g, g8, u = by.get(("governed", c)), by.get(("governed-8", c)), by.get(("upstream", c))
        ratio = f"{g['turns_per_s'] / u['turns_per_s']:.2f}×" if g and u and u["turns_per_s"] else "—"
        spread = (f"{g['ops']['turn']['p99'] / g['ops']['turn']['p50']:.1f}×"
                  if g and g["ops"].get("turn") else "—")
        plain = (f"{g['ops']['turn_plain']['p99'] / g['ops']['turn_plain']['p50']:.1f}×"
                 if g and g["ops"].get("turn_plain") else "—")
        lines.append("| " + " | ".join([
            str(c), f"{g['turns_per_s']:.1f}" if g else "—", f"{g8['turns_per_s']:.1f}" if g8 else "—",
            f"{u['turns_per_s']:.1f}" if u else "—", ratio, spread, plain,
            (", ".join(f"{k} {v}" for k, v in g["errors"].items()) or "0") if g else "—"]) + " |")
    top = max(result["size"]["concurrency"])
    lines += ["", "Knee (the last C after which more sessions add < 10 % turns/s): "
              + ", ".join(f"{s} C={k}" if k is not None else f"{s} none up to C={top}"
                          for s, k in ((s, knee(result, s)) for s in SIDES))]
    storms = [r for r in result["runs"] if "storm" in r["side"]]
    if storms:
        lines += ["", "| storm run | C | turns/s | turn p50 / p95 / p99 ms | refusals | errors | "
                      "withdrawn | stored that should not be |", "|---|---|---:|---|---|---|---:|---|"]
        for r in storms:
            st = r["storm"]
            stale = ", ".join(f"{k} {v}" for k, v in st.items()
                              if k not in ("withdrawn_scopes", "storm_s"))
            lines.append("| " + " | ".join([
                r["side"], str(r["concurrency"]), f"{r['turns_per_s']:.1f}",
                _triple(r["ops"].get("turn")),
                ", ".join(f"{k} {v}" for k, v in r["refusals"].items()) or "0",
                ", ".join(f"{k} {v}" for k, v in r["errors"].items()) or "0",
                f"{st.get('withdrawn_scopes', 0)} in {st.get('storm_s', 0)} s", stale]) + " |")
    return "\n".join(lines)


def caption(result: dict[str, Any]) -> str:
    s, m = result["size"], result["machine"]
    la = result["loadavg_at_start"]
    first = next(iter(la.values()), [0, 0, 0])
    return (f"{s['scopes']:,} scopes × {s['facts']} facts per side (768-d), pool {s['pool']} "
            f"connections each side, {s['turns']} turns per (side, C) run (≥ 10 per session); "
            f"PostgreSQL {result['settings']['server_version']}, shared_buffers="
            f"{result['settings']['shared_buffers']}; {m['nproc']} CPUs, {m['memory_gib']} GiB; "
            f"upstream SQL from {result['upstream_source']}; load average (1/5/15 min) at the "
            f"first run {first[0]:.2f} / {first[1]:.2f} / {first[2]:.2f}, at the end "
            + " / ".join(f"{x:.2f}" for x in result["loadavg_end"])
            + f"; {result['total_s']} s in all.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/load.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn")
    parser.add_argument("--app-dsn")
    parser.add_argument("--admin-dsn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--concurrency", help="comma-separated C values")
    parser.add_argument("--turns", type=int)
    parser.add_argument("--pool", type=int)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--no-storm", action="store_true")
    parser.add_argument("--kagent-src")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        upstream = load_upstream_sql(args.kagent_src)
    except UpstreamSourceError as exc:
        print(f"benchmarks/load.py: {exc}", file=sys.stderr)
        return 2
    size = LOAD_SIZES["quick" if args.quick else "default"]
    changes: dict[str, Any] = {}
    if args.concurrency:
        changes["concurrency"] = tuple(int(x) for x in args.concurrency.split(","))
    if args.turns:
        changes["turns"] = args.turns
    if args.pool:
        changes["pool"] = args.pool
    if changes:
        size = LoadSize(**{**asdict(size), **changes})
    sides = [s for s in args.sides.split(",") if s]
    say = bench._progress(time.perf_counter())
    if args.dsn:
        result = asyncio.run(run_load(args.dsn, upstream, size, app_dsn=args.app_dsn,
                                      admin_dsn=args.admin_dsn, schema=f"kgm_load_{os.getpid()}",
                                      keep=False, sides=sides, storm=not args.no_storm,
                                      progress=say))
    else:
        from kagent_governed_memory.dev import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            result = asyncio.run(run_load(pg.owner_dsn, upstream, size, app_dsn=pg.dsn,
                                          admin_dsn=pg.admin_dsn, sides=sides,
                                          storm=not args.no_storm, progress=say))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(caption(result))
        print()
        print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
