#!/usr/bin/env python
"""Governed search at 10k, 100k (and 1M) rows, random scope, per storage layout and
``shared_buffers`` — the evidence for issue 16's scaling target.

    python benchmarks/scaling.py [--steps 100,1000[,10000]] [--facts 100] [--iters 500]
                                 [--layouts toast,inline] [--buffers default,25%]

One embedded PostgreSQL 18 + pgvector (restarted to change ``shared_buffers``).  For each
layout the governed schema is migrated into a fresh schema and rows are loaded through the
fenced path (``memory_grant`` + ``memory_save``, as ``benchmarks/run.py`` does), growing to each
step's number of scopes × ``--facts``.  At each step and each ``shared_buffers`` setting: a
warm-up pass (one search per scope), then ``--iters`` searches of random scopes through
``store.search`` as the application login; median and p95, the shared-buffer hit rate of the
search's tables, the buffers one search touches (EXPLAIN of the inner query), the relation
sizes, and recall@5 against brute force over the stored vectors.

Layouts:

* ``toast``: what migrations 000004–000009 create.  pgvector's ``vector`` has ``STORAGE
  EXTERNAL`` and a 768-d vector is 3 KiB, over the 2 KiB TOAST threshold: every embedding is
  stored out of line, two TOAST chunks, so reading one row's vector costs the heap page, the
  TOAST index and two TOAST pages.
* ``inline``: ``embedding`` ``STORAGE MAIN`` and ``toast_tuple_target = 8160`` (what migration
  000010 sets): the vector stays in the heap row (a larger ``content`` is still toasted first,
  and a vector over a page is still moved out as a last resort).  Rows written before the
  change keep their layout until rewritten (``VACUUM FULL``/``CLUSTER`` by the owner).
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import psycopg  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

import run as bench  # noqa: E402
from kagent_governed_memory import GovernedMemoryStore  # noqa: E402
from kagent_governed_memory.store import migrate  # noqa: E402

# what 000010 does to memory_entry (the toast layout undoes it, for the comparison)
LAYOUTS = {
    "toast": "ALTER TABLE memory_entry ALTER COLUMN embedding SET STORAGE EXTERNAL,"
             " RESET (toast_tuple_target)",
    "inline": "ALTER TABLE memory_entry ALTER COLUMN embedding SET STORAGE MAIN,"
              " SET (toast_tuple_target = 8160)",
}


def _ram_quarter() -> str:
    with open("/proc/meminfo", encoding="utf-8") as f:
        kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal"))
    return f"{kb // 4 // 1024}MB"


async def _scalar(dsn: str, sql: str, params: Sequence[Any] = ()) -> Any:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (await conn.execute(sql, list(params))).fetchone()
        return None if row is None else row[0]


async def measure_step(app_dsn: str, admin_dsn: str, scopes: int, queries: list[list[float]],
                       iters: int, seed: int) -> dict[str, Any]:
    store = await GovernedMemoryStore.open(app_dsn, local_server=bench.LOCAL, min_size=1,
                                           max_size=1, sweep_every=None)
    try:
        keys = [bench.scope_key(s) for s in range(scopes)]
        for s in range(scopes):  # warm-up: every scope once
            await store.search(keys[s], 1, queries[s % len(queries)], limit=bench.LIMIT)
        async with await bench.connect(admin_dsn) as adm:
            await bench.flush_stats(adm, store=store)
            before = await _blocks(adm)
            rng = random.Random(seed)
            samples = []
            for i in range(iters):
                s = rng.randrange(scopes)
                t0 = time.perf_counter()
                await store.search(keys[s], 1, queries[i % len(queries)], limit=bench.LIMIT)
                samples.append(time.perf_counter() - t0)
            await bench.flush_stats(adm, store=store)  # backends publish their counters
            after = await _blocks(adm)
            hits, reads = after[0] - before[0], after[1] - before[1]
            plan = await _inner_buffers(adm, queries[0])
            recall = await _recall(store, adm, keys, queries, rng)
        ordered = sorted(samples)
        return {"median": statistics.median(ordered),
                "p95": ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)],
                "hit_rate": hits / (hits + reads) if hits + reads else None,
                "buffers_per_search": plan, "recall": recall}
    finally:
        await store.close()


async def _blocks(conn: psycopg.AsyncConnection) -> tuple[int, int]:
    cur = await conn.execute(
        "SELECT coalesce(sum(heap_blks_hit + coalesce(idx_blks_hit, 0)"
        "        + coalesce(toast_blks_hit, 0) + coalesce(tidx_blks_hit, 0)), 0),"
        "       coalesce(sum(heap_blks_read + coalesce(idx_blks_read, 0)"
        "        + coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0)), 0)"
        "  FROM pg_statio_all_tables WHERE relname = 'memory_entry'"
        "   AND schemaname = current_schema()")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def _inner_buffers(conn: psycopg.AsyncConnection, q: list[float]) -> int:
    sid = (await (await conn.execute("SELECT id FROM memory_scope ORDER BY id LIMIT 1"))
           .fetchone())[0]  # type: ignore[index]
    cur = await conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT r.id, r.embedding <=> %s::vector"
        "  FROM memory_entry r WHERE r.scope_id = %s AND r.expires_at > now()"
        " ORDER BY 2, 1 LIMIT 5", [str(q), sid])
    plan = (await cur.fetchone())[0][0]["Plan"]  # type: ignore[index]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


async def _recall(store: GovernedMemoryStore, adm: psycopg.AsyncConnection,
                  keys: list[Any], queries: list[list[float]], rng: random.Random,
                  n: int = 50) -> float:
    """recall@5 of store.search against brute force over the stored vectors (the admin's
    exact ORDER BY over the scope's rows, no index)."""
    found = 0
    for i in range(n):
        k = keys[rng.randrange(len(keys))]
        q = queries[(i * 7) % len(queries)]
        got = {h.id for h in await store.search(k, 1, q, limit=bench.LIMIT)}
        cur = await adm.execute(
            "SELECT e.id::text FROM memory_entry e JOIN memory_scope s ON s.id = e.scope_id"
            " WHERE s.principal_subject = %s AND s.scope_ref = %s AND e.expires_at > now()"
            " ORDER BY e.embedding <=> %s::vector, e.id LIMIT %s",
            [k.principal.subject, k.scope.room_id, str(q), bench.LIMIT])
        exact = {r[0] for r in await cur.fetchall()}
        found += len(got & exact)
    return found / (n * bench.LIMIT)


async def sizes(admin_dsn: str) -> dict[str, int]:
    return {
        "heap_mb": round(await _scalar(admin_dsn, "SELECT pg_relation_size('memory_entry')") / 2**20),
        "toast_mb": round(await _scalar(
            admin_dsn, "SELECT coalesce(pg_relation_size(reltoastrelid), 0) FROM pg_class"
                       " WHERE oid = 'memory_entry'::regclass") / 2**20),
        "total_mb": round(await _scalar(
            admin_dsn, "SELECT pg_total_relation_size('memory_entry')") / 2**20),
    }


def _restart(pg: Any, shared_buffers: str) -> None:
    """Restart the embedded cluster with another shared_buffers (ALTER SYSTEM, then pg_ctl)."""
    asyncio.run(_alter(pg.admin_dsn, shared_buffers))
    root = pg._root
    pg._run("restart", "-D", str(root / "data"), "-w", "-s", "-m", "fast",
            "-l", str(root / "server.log"),
            "-o", f"-k {root / 'sock'} -c listen_addresses='' -p 5432 -c fsync=off")


async def _alter(admin_dsn: str, value: str) -> None:
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        if value == "default":
            await conn.execute("ALTER SYSTEM RESET shared_buffers")
        else:
            await conn.execute(f"ALTER SYSTEM SET shared_buffers = '{value}'")


def run(pg: Any, *, steps: Sequence[int], facts: int, iters: int, layouts: Sequence[str],
        buffers: Sequence[str], say: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"steps": list(steps), "facts": facts, "results": [],
                           "loadavg": [], "machine": bench.machine_facts()}
    for layout in layouts:
        schema = f"kgm_scale_{layout}"
        dsn = asyncio.run(bench.prepare_schema(pg.owner_dsn, schema))
        opts = conninfo_to_dict(dsn)["options"]
        app = make_conninfo(pg.dsn, options=opts)
        admin = make_conninfo(pg.admin_dsn, options=opts)
        asyncio.run(migrate(dsn, local_server=bench.LOCAL))

        async def setup() -> list[list[float]]:
            async with await bench.connect(dsn) as conn:
                await conn.execute(LAYOUTS[layout])
                await bench.generate_source(conn, bench.Size("scale", min(steps[-1], 1000),
                                                             facts, (), recall_queries=256), say)
                cur = await conn.execute("SELECT embedding FROM bench_query ORDER BY i")
                return [r[0].to_list() for r in await cur.fetchall()]

        queries = asyncio.run(setup())
        loaded = 0
        for step in steps:
            async def grow(lo: int = loaded, hi: int = step) -> None:
                async with await bench.connect(dsn) as conn:
                    await bench.load_governed(conn, lo, hi, bench.Size(
                        "scale", min(steps[-1], 1000), facts, ()), say)
                    await bench.vacuum_analyze(conn, "memory_entry", "memory_scope")
            t0 = time.perf_counter()
            asyncio.run(grow())
            loaded = step
            say(f"{layout}: {step * facts:,} rows loaded in {time.perf_counter() - t0:.0f} s")
            rel = asyncio.run(sizes(admin))
            for sb in buffers:
                value = "default" if sb == "default" else _ram_quarter()
                _restart(pg, value)
                shown = asyncio.run(_scalar(admin, "SHOW shared_buffers"))
                la = list(os.getloadavg())
                m = asyncio.run(measure_step(app, admin, step, queries, iters, 20260416))
                m.update({"layout": layout, "rows": step * facts, "shared_buffers": shown,
                          "loadavg": la, **rel})
                out["results"].append(m)
                say(f"{layout} {step * facts:,} rows sb={shown}: {m['median'] * 1e3:.2f} ms,"
                    f" hits {m['hit_rate']}, buffers/search {m['buffers_per_search']},"
                    f" recall {m['recall']}, load {la[0]:.2f}")
        asyncio.run(bench.drop_schema(pg.owner_dsn, schema))
    _restart(pg, "default")
    return out


def render(out: dict[str, Any]) -> str:
    lines = ["| layout | rows | shared_buffers | median (p95) | vs first step | shared-buffer "
             "hits | buffers per search | heap / TOAST MB | recall@5 | load avg (1 min) |",
             "|---|---:|---|---|---:|---:|---:|---|---:|---:|"]
    base: dict[tuple[str, str], float] = {}
    for m in out["results"]:
        k = (m["layout"], m["shared_buffers"])
        base.setdefault(k, m["median"])
        lines.append("| " + " | ".join([
            m["layout"], bench._rows_label(m["rows"]), m["shared_buffers"],
            f"{m['median'] * 1e3:.2f} ms ({m['p95'] * 1e3:.2f} ms)",
            f"{m['median'] / base[k]:.2f}×",
            "—" if m["hit_rate"] is None else f"{m['hit_rate']:.0%}",
            str(m["buffers_per_search"]), f"{m['heap_mb']} / {m['toast_mb']}",
            f"{m['recall']:.2f}", f"{m['loadavg'][0]:.2f}"]) + " |")
    return "\n".join(lines)


async def ab(pg: Any, *, scopes: int, facts: int, iters: int, say: Any) -> dict[str, Any]:
    """Both layouts in one cluster (two schemas, the same rows), ``store.search`` and
    ``store.search_many`` (8 vectors) alternating between them call by call: the per-search
    cost with every page in shared buffers, free of the machine's drift."""
    stores: dict[str, GovernedMemoryStore] = {}
    queries: list[list[float]] = []
    for layout in LAYOUTS:
        dsn = await bench.prepare_schema(pg.owner_dsn, f"kgm_ab_{layout}")
        await migrate(dsn, local_server=bench.LOCAL)
        size = bench.Size("ab", scopes, facts, (), recall_queries=256)
        async with await bench.connect(dsn) as conn:
            await conn.execute(LAYOUTS[layout])
            await bench.generate_source(conn, size, say)
            await bench.load_governed(conn, 0, scopes, size, say)
            await bench.vacuum_analyze(conn, "memory_entry", "memory_scope")
            cur = await conn.execute("SELECT embedding FROM bench_query ORDER BY i")
            queries = [r[0].to_list() for r in await cur.fetchall()]
        app = make_conninfo(pg.dsn, options=conninfo_to_dict(dsn)["options"])
        stores[layout] = await GovernedMemoryStore.open(app, local_server=bench.LOCAL,
                                                        min_size=1, max_size=1,
                                                        sweep_every=None)
    times: dict[str, list[float]] = {f"{op} {lay}": [] for op in ("search", "search_many")
                                     for lay in LAYOUTS}
    rng = random.Random(7)
    try:
        for i in range(iters + iters // 10):
            k = bench.scope_key(rng.randrange(scopes))
            qs = [queries[rng.randrange(len(queries))] for _ in range(8)]
            order = list(LAYOUTS) if i % 2 else list(LAYOUTS)[::-1]
            for lay in order:
                t0 = time.perf_counter()
                a = await stores[lay].search(k, 1, qs[0], limit=bench.LIMIT)
                t1 = time.perf_counter()
                b = await stores[lay].search_many(k, 1, qs, limit=bench.LIMIT)
                t2 = time.perf_counter()
                assert [h.text for h in a] == [h.text for h in b[0]]
                if i >= iters // 10:
                    times[f"search {lay}"].append(t1 - t0)
                    times[f"search_many {lay}"].append(t2 - t1)
    finally:
        for st in stores.values():
            await st.close()
    return {k: {"median": statistics.median(v), "p95": sorted(v)[int(0.95 * len(v)) - 1],
                "n": len(v)} for k, v in times.items()} | {"loadavg": list(os.getloadavg())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/scaling.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="100,1000", help="scope counts (× --facts rows)")
    parser.add_argument("--facts", type=int, default=100)
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--layouts", default="toast,inline")
    parser.add_argument("--buffers", default="default,25%")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ab", action="store_true",
                        help="instead: both layouts side by side, calls alternating "
                             "(--steps' first value scopes × --facts rows each)")
    args = parser.parse_args(argv)
    from kagent_governed_memory.dev import EmbeddedPostgres

    say = bench._progress(time.perf_counter())
    if args.ab:
        with EmbeddedPostgres() as pg:
            res = asyncio.run(ab(pg, scopes=int(args.steps.split(",")[0]), facts=args.facts,
                                 iters=args.iters, say=say))
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            print("| call | toast: median (p95) | inline: median (p95) | inline / toast |")
            print("|---|---|---|---:|")
            for op in ("search", "search_many"):
                t, n = res[f"{op} toast"], res[f"{op} inline"]
                print(f"| {op} | {t['median'] * 1e3:.2f} ms ({t['p95'] * 1e3:.2f} ms) | "
                      f"{n['median'] * 1e3:.2f} ms ({n['p95'] * 1e3:.2f} ms) | "
                      f"{n['median'] / t['median']:.2f}× |")
            print(f"\nload average at the end: {res['loadavg']}")
        return 0
    with EmbeddedPostgres() as pg:
        out = run(pg, steps=[int(x) for x in args.steps.split(",")], facts=args.facts,
                  iters=args.iters, layouts=args.layouts.split(","),
                  buffers=args.buffers.split(","), say=say)
    print(json.dumps(out, indent=2, default=str) if args.json else render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
