#!/usr/bin/env python
"""Growth past 1M rows: random-scope governed search on a growing table against a 10k-row
table in the same cluster, calls alternating, with the I/O each search causes.

    python benchmarks/growth.py [--steps 1000000,3000000,7000000] [--small 10000]
                                [--facts 100] [--iters 400] [--rounds 3]
                                [--fenced-upto 100000] [--reserve-gb 8] [--json]

One embedded PostgreSQL 18 + pgvector with ``shared_buffers`` at 25 % of RAM (``--buffers``).
Two schemas, both migrated with this library's migrations:

* ``small``: ``--small`` rows (``--facts`` per scope), loaded through the fenced functions
  (``memory_grant``, then ``memory_save`` per fact, interleaved across scopes: facts arrive
  from many users at once, so a scope's rows land on as many pages as it has rows);
* ``large``: grows to each of ``--steps``.  Every scope is granted through ``memory_grant``.
  The first ``--fenced-upto`` rows are saved through ``memory_save``; past that, to reach
  millions of rows in minutes instead of hours, the superuser copies the same column values a
  save stores (the scope's id and generation, the fact, its vector, the expiry a fenced save
  gave: ``created_at`` + the same TTL) with ``session_replication_role = replica`` (no triggers;
  no audit rows, which no search reads), in the same interleaved order.  Scopes past the
  1,000 generated ones reuse their facts and vectors (``s % 1000``), as ``run.py`` does.

At each step, after ``VACUUM (ANALYZE)`` and a ``CHECKPOINT``: a warm-up (one search per scope
of the small table; one per scope of the large one, at most 20,000), then ``--rounds`` rounds of
``--iters`` pairs of ``store.search`` calls (application login, random scope), small and large
alternating call by call so that the machine's load touches both alike.  Per round: both
medians and their ratio.  Per step: the large table's shared-buffer hits and reads per search
(``pg_statio``), the bytes the cluster's processes read from storage per search
(``/proc/<pid>/io`` ``read_bytes`` summed over the postmaster's children: what reached the block
device, not the OS page cache), recall@5 against the exact ``ORDER BY`` over the scope's stored
vectors (the search is exact: 1.00 unless something is wrong), and the relation sizes.  Growth
stops before a step whose projected size would leave less than ``--reserve-gb`` free on the
data directory's file system, and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

import run as bench  # noqa: E402
import scaling  # noqa: E402
from kagent_governed_memory import GovernedMemoryStore  # noqa: E402
from kagent_governed_memory.store import migrate  # noqa: E402
from kagent_governed_memory.policy import PROTOTYPE_POLICY  # noqa: E402

SOURCE_SCOPES = 1000  # generated facts and vectors; scopes past them reuse s % 1000
_BULK = (
    "INSERT INTO memory_entry (scope_id, content, embedding, generation, created_at,"
    "                          expires_at)"
    " SELECT sc.id, b.content, b.embedding, sc.generation, now(), now() + %s::interval"
    "   FROM generate_series(%s::int, %s::int - 1) s"
    "   JOIN memory_scope sc ON sc.principal_issuer_kind = 'matrix'"
    "    AND sc.principal_subject = format('@bench%%s:%%s', s, %s::text)"
    "    AND sc.scope_ref = format('!bench%%s:%%s', s, %s::text)"
    "   JOIN bench_source b ON b.scope = s %% %s"
    "  ORDER BY b.n, s")


class Schema:
    """One migrated schema: its owner, application and superuser connection strings."""

    def __init__(self, pg: Any, name: str, source_scopes: int = SOURCE_SCOPES) -> None:
        self.name, self.source = name, source_scopes
        self.owner = asyncio.run(bench.prepare_schema(pg.owner_dsn, name))
        opts = conninfo_to_dict(self.owner)["options"]
        self.app = make_conninfo(pg.dsn, options=opts)
        self.admin = make_conninfo(pg.admin_dsn, options=opts)
        asyncio.run(migrate(self.owner, local_server=bench.LOCAL))
        self.scopes = 0  # loaded so far

    def generate(self, facts: int, say: Callable[[str], None]) -> list[list[float]]:
        async def go() -> list[list[float]]:
            async with await bench.connect(self.owner) as conn:
                await bench.generate_source(conn, self._size(facts), say)
                cur = await conn.execute("SELECT embedding FROM bench_query ORDER BY i")
                return [r[0].to_list() for r in await cur.fetchall()]
        return asyncio.run(go())

    def _size(self, facts: int) -> bench.Size:
        return bench.Size(self.name, self.source, facts, (), recall_queries=256)

    def grow(self, scopes: int, facts: int, fenced_upto: int, say: Callable[[str], None]
             ) -> dict[str, float]:
        """Grow to ``scopes`` scopes: fenced saves up to ``fenced_upto`` rows, bulk after."""
        lo, fenced_scopes = self.scopes, max(self.scopes, min(scopes, fenced_upto // facts))
        took = {"fenced_s": 0.0, "bulk_s": 0.0}

        async def go() -> None:
            async with await bench.connect(self.owner) as conn:
                t0 = time.perf_counter()
                if fenced_scopes > lo:
                    await bench.load_governed(conn, lo, fenced_scopes, self._size(facts), say)
                took["fenced_s"] = time.perf_counter() - t0
                if scopes > fenced_scopes:
                    await _bulk(conn, self.admin, fenced_scopes, scopes, self.source, say)
                took["bulk_s"] = time.perf_counter() - t0 - took["fenced_s"]
                await bench.vacuum_analyze(conn, "memory_entry", "memory_scope")
            async with await bench.connect(self.admin) as adm:
                await adm.execute("CHECKPOINT")
        asyncio.run(go())
        self.scopes = scopes
        return took


async def _bulk(owner: Any, admin_dsn: str, lo: int, hi: int, source: int,
                say: Callable[[str], None]) -> None:
    p = PROTOTYPE_POLICY
    step = 2000
    for a in range(lo, hi, step):  # the scopes themselves through memory_grant
        b = min(hi, a + step)
        await owner.execute(bench._GRANT, [a, b, bench.LOCAL, bench.NAMESPACE, bench.AGENT,
                                           bench.LOCAL, bench.PURPOSE, p.version,
                                           p.embedding_dimension, "personal", [bench.LOCAL]])
    async with await bench.connect(admin_dsn) as adm:
        ttl = await bench._one(adm, "SELECT max(expires_at - created_at)::text FROM memory_entry")
        await adm.execute("SET session_replication_role = replica")
        for a in range(lo, hi, step):
            b = min(hi, a + step)
            await adm.execute(_BULK, [ttl or "7 days", a, b, bench.LOCAL, bench.LOCAL, source])
            if (b - lo) % 20_000 == 0 or b == hi:
                say(f"bulk: {b:,} scopes")


def _cluster_read_bytes(postmaster: int) -> int:
    """``read_bytes`` of the postmaster's children (backends, checkpointer, autovacuum)."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="ascii") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != postmaster and int(d) != postmaster:
                continue
            with open(f"/proc/{d}/io", encoding="ascii") as f:
                total += next(int(ln.split()[1]) for ln in f if ln.startswith("read_bytes"))
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return total


def _postmaster(pg: Any) -> int:
    with open(Path(pg._root) / "data" / "postmaster.pid", encoding="ascii") as f:
        return int(f.readline())


async def measure(pg: Any, small: Schema, large: Schema, queries: list[list[float]], *,
                  iters: int, rounds: int, seed: int) -> dict[str, Any]:
    stores = {k: await GovernedMemoryStore.open(s.app, local_server=bench.LOCAL, min_size=1,
                                                max_size=1, sweep_every=None)
              for k, s in (("small", small), ("large", large))}
    try:
        rng = random.Random(seed)
        for k, s in (("small", small), ("large", large)):
            warm = range(s.scopes) if s.scopes <= 20_000 else rng.sample(range(s.scopes), 20_000)
            for i in warm:
                await stores[k].search(bench.scope_key(i), 1, queries[i % len(queries)],
                                       limit=bench.LIMIT)
        async with await bench.connect(large.admin) as adm:
            await bench.flush_stats(adm, store=stores["large"])
            blocks0, io0, t_start = await scaling._blocks(adm), _cluster_read_bytes(
                _postmaster(pg)), time.perf_counter()
            per_round = []
            for _ in range(rounds):
                times: dict[str, list[float]] = {"small": [], "large": []}
                for i in range(iters):
                    order = ("small", "large") if i % 2 else ("large", "small")
                    for k in order:
                        scopes = small.scopes if k == "small" else large.scopes
                        key = bench.scope_key(rng.randrange(scopes))
                        t0 = time.perf_counter()
                        await stores[k].search(key, 1, queries[rng.randrange(len(queries))],
                                               limit=bench.LIMIT)
                        times[k].append(time.perf_counter() - t0)
                per_round.append({k: _stat(v) for k, v in times.items()}
                                 | {"loadavg": os.getloadavg()[0]})
            wall = time.perf_counter() - t_start
            io1 = _cluster_read_bytes(_postmaster(pg))
            await bench.flush_stats(adm, store=stores["large"])
            blocks1 = await scaling._blocks(adm)
            recall = await scaling._recall(stores["large"], adm,
                                           [bench.scope_key(i) for i in range(large.scopes)],
                                           queries, rng, n=30)
            plan = await scaling._inner_buffers(adm, queries[0])
        # the small table's searches read nothing from storage after its warm-up (39 MB)
        n = iters * rounds
        return {"rounds": per_round, "hits_per_search": (blocks1[0] - blocks0[0]) / n,
                "reads_per_search": (blocks1[1] - blocks0[1]) / n,
                "device_kb_per_search": (io1 - io0) / n / 1024,
                "searches_wall_s": wall, "buffers_per_search": plan, "recall": recall,
                **await _sizes(large.admin)}
    finally:
        for st in stores.values():
            await st.close()


def _stat(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"median": statistics.median(s), "p95": s[max(0, math.ceil(0.95 * len(s)) - 1)]}


async def _sizes(admin_dsn: str) -> dict[str, int]:
    q = ("SELECT pg_relation_size('memory_entry'), pg_indexes_size('memory_entry'),"
         " pg_total_relation_size('memory_entry')")
    async with await bench.connect(admin_dsn) as adm:
        row = await (await adm.execute(q)).fetchone()
    assert row is not None
    return {"heap_mb": row[0] // 2**20, "index_mb": row[1] // 2**20, "total_mb": row[2] // 2**20}


def _ram_bytes() -> int:
    with open("/proc/meminfo", encoding="utf-8") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal")) * 1024


def run_growth(pg: Any, *, steps: Sequence[int], small_rows: int, facts: int, iters: int,
               rounds: int, fenced_upto: int, reserve_gb: float, buffers: str,
               say: Callable[[str], None], source_scopes: int | None = None) -> dict[str, Any]:
    value = "default" if buffers == "default" else scaling._ram_quarter()
    scaling._restart(pg, value)
    out: dict[str, Any] = {"machine": bench.machine_facts(), "ram_mb": _ram_bytes() // 2**20,
                           "shared_buffers": value, "facts": facts, "steps": [],
                           "stopped": None}
    source = source_scopes or min(SOURCE_SCOPES, max(1, max(steps) // facts))
    small = Schema(pg, "kgm_growth_small", min(source, max(1, small_rows // facts)))
    large = Schema(pg, "kgm_growth_large", source)
    small.generate(facts, say)
    queries = large.generate(facts, say)
    small.grow(max(1, small_rows // facts), facts, small_rows, say)
    bytes_per_row = None
    for rows in steps:
        scopes = max(1, rows // facts)
        free = shutil.disk_usage(Path(pg._root)).free
        if bytes_per_row is not None:
            need = (scopes - large.scopes) * facts * bytes_per_row
            if free - need < reserve_gb * 2**30:
                out["stopped"] = {"before_rows": rows, "free_gb": round(free / 2**30, 1),
                                  "needed_gb": round(need / 2**30, 1),
                                  "reserve_gb": reserve_gb}
                say(f"stopping before {rows:,} rows: {free / 2**30:.1f} GB free, "
                    f"{need / 2**30:.1f} GB needed, {reserve_gb} GB kept in reserve")
                break
        took = large.grow(scopes, facts, fenced_upto, say)
        say(f"large: {scopes * facts:,} rows (fenced {took['fenced_s']:.0f} s, "
            f"bulk {took['bulk_s']:.0f} s)")
        m = measure_sync(pg, small, large, queries, iters, rounds)
        m.update({"rows": scopes * facts, "small_rows": small.scopes * facts, **took})
        bytes_per_row = m["total_mb"] * 2**20 / max(1, m["rows"])
        out["steps"].append(m)
        say(render_step(m))
    return out


def measure_sync(pg: Any, small: Schema, large: Schema, queries: list[list[float]], iters: int,
                 rounds: int) -> dict[str, Any]:
    return asyncio.run(measure(pg, small, large, queries, iters=iters, rounds=rounds,
                               seed=20261203))


def render_step(m: dict[str, Any]) -> str:
    ratios = ", ".join(f"{r['large']['median'] / r['small']['median']:.2f}×" for r in m["rounds"])
    return f"{m['rows']:,} rows: large/small per round {ratios}"


def render(out: dict[str, Any]) -> str:
    lines = ["| rows (large) | round | small table: median (p95) | large table: median (p95) | "
             "large / small | load avg |", "|---:|---:|---|---|---:|---:|"]
    for m in out["steps"]:
        for i, r in enumerate(m["rounds"], 1):
            s, lg = r["small"], r["large"]
            lines.append(f"| {bench._rows_label(m['rows'])} | {i} | "
                         f"{s['median'] * 1e3:.2f} ms ({s['p95'] * 1e3:.2f} ms) | "
                         f"{lg['median'] * 1e3:.2f} ms ({lg['p95'] * 1e3:.2f} ms) | "
                         f"{lg['median'] / s['median']:.2f}× | {r['loadavg']:.2f} |")
    lines += ["", "| rows (large) | heap / indexes MB | × RAM | shared-buffer hits / reads per "
              "search | storage reads per search | buffers one search touches | recall@5 | "
              "loading: fenced / bulk s |", "|---:|---|---:|---|---:|---:|---:|---|"]
    for m in out["steps"]:
        lines.append(f"| {bench._rows_label(m['rows'])} | {m['heap_mb']:,} / {m['index_mb']:,} | "
                     f"{m['total_mb'] / out['ram_mb']:.2f} | {m['hits_per_search']:.1f} / "
                     f"{m['reads_per_search']:.1f} | {m['device_kb_per_search']:.0f} KiB | "
                     f"{m['buffers_per_search']} | {m['recall']:.2f} | "
                     f"{m['fenced_s']:.0f} / {m['bulk_s']:.0f} |")
    lines.append(f"\nsmall table: {out['steps'][0]['small_rows']:,} rows; shared_buffers "
                 f"{out['shared_buffers']}; RAM {out['ram_mb']:,} MB" if out["steps"] else "")
    if out["stopped"]:
        s = out["stopped"]
        lines.append(f"stopped before {s['before_rows']:,} rows: {s['free_gb']} GB free, "
                     f"{s['needed_gb']} GB needed, {s['reserve_gb']} GB kept in reserve")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/growth.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1000000,3000000,7000000",
                        help="rows of the large table at each step")
    parser.add_argument("--small", type=int, default=10_000, help="rows of the small table")
    parser.add_argument("--facts", type=int, default=100)
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fenced-upto", type=int, default=100_000)
    parser.add_argument("--reserve-gb", type=float, default=8.0)
    parser.add_argument("--buffers", default="25%", choices=("25%", "default"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from kagent_governed_memory.dev import EmbeddedPostgres

    say = bench._progress(time.perf_counter())
    with EmbeddedPostgres() as pg:
        out = run_growth(pg, steps=[int(x) for x in args.steps.split(",")],
                         small_rows=args.small, facts=args.facts, iters=args.iters,
                         rounds=args.rounds, fenced_upto=args.fenced_upto,
                         reserve_gb=args.reserve_gb, buffers=args.buffers, say=say)
    print(json.dumps(out, indent=2, default=str) if args.json else render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
