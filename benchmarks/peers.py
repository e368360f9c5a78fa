#!/usr/bin/env python
"""The peers a user would pick instead, side by side with governed memory, in one run.

    pip install -e '.[peers]'          # LangGraph's PostgreSQL store and mem0 OSS
    python benchmarks/peers.py [--quick] [--scopes N --facts N --ops N] [--json]

One throwaway PostgreSQL 18 + pgvector (the embedded one) holds all three; each gets the same
facts and the same 768-d vectors, so no model runs and no LLM is called:

* **governed** -- ``GovernedMemoryStore`` on the application login (EXECUTE on the governed
  functions only): ``save`` of one fact, ``search`` top 5, ``forget`` of one fact (deleted and
  verified unreadable);
* **langgraph** -- ``langgraph.store.postgres.AsyncPostgresStore`` with a vector index (its
  defaults: HNSW, cosine) over the field ``text``, namespace ``(user, agent)``: ``aput``,
  ``asearch(namespace, query=…, limit=5)``, ``adelete``;
* **mem0** -- mem0 OSS ``AsyncMemory`` with its ``pgvector`` vector store (its defaults: HNSW,
  cosine) and ``infer=False`` (no LLM extraction), filters ``user_id``/``agent_id``: ``add``,
  ``search(top_k=5)``, ``delete``; without spaCy (the ``nlp`` extra), so no lemmas or entities.

Each peer's embedder is a lookup table from the benchmark's texts to their vectors, so every
system searches with the same query vector.  Facts are clustered per scope (a user's facts are
about that user), queries are drawn from the same clusters; recall@5 is measured against the
exact float64 top 5 of the scope computed in numpy.  The three run interleaved, in a rotating
order, on one event loop.  ``put`` adds facts to scopes loaded below the policy's entry cap;
``delete`` removes the facts the run put.  Not part of the test suite (the peers are an
optional extra); see BENCHMARKS.md for what each peer does not do.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: identities, statistics, the store)

DIM = 768
LIMIT = 5
SYSTEMS = ("governed", "langgraph", "mem0")


@dataclass(frozen=True)
class Size:
    scopes: int
    facts: int  # loaded per scope (below the policy's entry cap: put needs room)
    ops: int  # measured operations of each kind per system


SIZES = {"quick": Size(20, 40, 40), "default": Size(200, 80, 400)}


class Data:
    """Clustered unit vectors: scope ``s`` has a centre; its facts and queries lie around it."""

    def __init__(self, size: Size, seed: int = 29) -> None:
        rng = np.random.default_rng(seed)
        self.size = size
        centres = _unit(rng.standard_normal((size.scopes, DIM)))
        noise = rng.standard_normal((size.scopes, size.facts + 1, DIM))
        self.vectors = _unit(centres[:, None, :] * 6.0 / np.sqrt(DIM) * 4 + noise / np.sqrt(DIM))
        self.texts = [[f"fact {s}-{i} {uuid.uuid4().hex}" for i in range(size.facts)]
                      for s in range(size.scopes)]
        # queries: one per op, round-robin over scopes; texts share no token with any fact,
        # so mem0's keyword (BM25) half finds nothing and ranking is by vector only
        self.queries: list[tuple[int, str, np.ndarray]] = []
        for n in range(size.ops):
            s = n % size.scopes
            q = _unit(centres[s] * 6.0 / np.sqrt(DIM) * 4 + rng.standard_normal(DIM) / np.sqrt(DIM))
            self.queries.append((s, f"zq{n}x{uuid.uuid4().hex[:8]}", q))
        self.puts = [(n % size.scopes, f"put {n} {uuid.uuid4().hex}",
                      self.vectors[n % size.scopes, size.facts]) for n in range(size.ops)]
        self.lookup: dict[str, list[float]] = {}
        for s in range(size.scopes):
            for i in range(size.facts):
                self.lookup[self.texts[s][i]] = self.vectors[s, i].tolist()
        for _s, text, q in self.queries:
            self.lookup[text] = q.tolist()
        for _s, text, v in self.puts:
            self.lookup[text] = v.tolist()

    def truth(self, scope: int, query: np.ndarray) -> list[str]:
        """The exact top ``LIMIT`` texts of the scope (loaded facts; puts are deleted again)."""
        sims = self.vectors[scope, : self.size.facts] @ query
        order = np.argsort(-sims, kind="stable")[:LIMIT]
        return [self.texts[scope][i] for i in order]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def user(scope: int) -> str:
    return bench.mxid(scope)


class Governed:
    name = "governed"

    def __init__(self, store: Any) -> None:
        self.store = store
        self.gens: dict[int, int] = {}
        self.ids: dict[str, str] = {}

    async def load(self, data: Data) -> None:
        for s in range(data.size.scopes):
            key = bench.scope_key(s)
            self.gens[s] = (await self.store.grant(key, purpose=bench.PURPOSE)).generation
            for lo in range(0, data.size.facts, 20):
                texts = data.texts[s][lo:lo + 20]
                await self.store.save(key, self.gens[s], facts=texts,
                                      embeddings=[data.lookup[t] for t in texts])

    async def put(self, scope: int, text: str, vec: list[float]) -> None:
        (self.ids[text],) = await self.store.save(bench.scope_key(scope), self.gens[scope],
                                                   facts=[text], embeddings=[vec])

    async def search(self, scope: int, text: str, vec: list[float]) -> list[str]:
        found = await self.store.search(bench.scope_key(scope), self.gens[scope], vec,
                                        limit=LIMIT)
        return [m.text for m in found]

    async def delete(self, scope: int, text: str) -> None:
        receipt = await self.store.forget(bench.scope_key(scope), self.ids.pop(text))
        assert receipt.deleted == 1 and receipt.verified


class LangGraph:
    name = "langgraph"

    def __init__(self, store: Any) -> None:
        self.store = store

    @staticmethod
    def ns(scope: int) -> tuple[str, str]:
        return (user(scope).replace(".", "_"), bench.AGENT)  # no periods in a label

    async def load(self, data: Data) -> None:
        from langgraph.store.base import PutOp
        for s in range(data.size.scopes):
            await self.store.abatch([PutOp(self.ns(s), f"f{i}", {"text": t})
                                     for i, t in enumerate(data.texts[s])])

    async def put(self, scope: int, text: str, vec: list[float]) -> None:
        await self.store.aput(self.ns(scope), text, {"text": text})

    async def search(self, scope: int, text: str, vec: list[float]) -> list[str]:
        found = await self.store.asearch(self.ns(scope), query=text, limit=LIMIT)
        return [item.value["text"] for item in found]

    async def delete(self, scope: int, text: str) -> None:
        await self.store.adelete(self.ns(scope), text)


class Mem0:
    name = "mem0"

    def __init__(self, memory: Any) -> None:
        self.memory = memory
        self.ids: dict[str, str] = {}

    async def load(self, data: Data) -> None:
        """Straight into mem0's own table, in the rows ``add(infer=False)`` writes (its
        per-fact path runs one INSERT and one history row per fact)."""
        now = datetime.now(UTC).isoformat()
        for s in range(data.size.scopes):
            payloads = [{"data": t, "hash": hashlib.md5(t.encode()).hexdigest(),
                         "created_at": now, "updated_at": now, "user_id": user(s),
                         "agent_id": bench.AGENT, "role": "user", "text_lemmatized": t}
                        for t in data.texts[s]]
            await asyncio.to_thread(self.memory.vector_store.insert,
                                    vectors=[data.lookup[t] for t in data.texts[s]],
                                    payloads=payloads,
                                    ids=[str(uuid.uuid4()) for _ in data.texts[s]])

    async def put(self, scope: int, text: str, vec: list[float]) -> None:
        out = await self.memory.add([{"role": "user", "content": text}], user_id=user(scope),
                                    agent_id=bench.AGENT, infer=False)
        self.ids[text] = out["results"][0]["id"]

    async def search(self, scope: int, text: str, vec: list[float]) -> list[str]:
        out = await self.memory.search(text, top_k=LIMIT,
                                       filters={"user_id": user(scope), "agent_id": bench.AGENT})
        return [r["memory"] for r in out["results"]]

    async def delete(self, scope: int, text: str) -> None:
        await self.memory.delete(self.ids.pop(text))


class LookupEmbedder:
    """mem0's embedder interface over the benchmark's table (no model)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, text: Any, memory_action: str | None = None) -> list[float]:
        return self.table[text if isinstance(text, str) else str(text)]

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = None
                    ) -> list[list[float]]:
        return [self.table[t] for t in texts]


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t, out


_SCANS = """
SELECT t.relname, t.seq_scan,
       coalesce(sum(i.idx_scan) FILTER (WHERE am.amname = 'hnsw'), 0),
       coalesce(sum(i.idx_scan) FILTER (WHERE am.amname <> 'hnsw'), 0)
  FROM pg_stat_user_tables t
  LEFT JOIN pg_stat_user_indexes i ON i.relid = t.relid
  LEFT JOIN pg_class c ON c.oid = i.indexrelid LEFT JOIN pg_am am ON am.oid = c.relam
 WHERE t.relname IN ('memory_entry', 'store_vectors', 'mem0_bench')
 GROUP BY t.relname, t.seq_scan"""


async def scans(admin_dsn: str) -> dict[str, tuple[int, int, int]]:
    """(sequential scans, HNSW index scans, other index scans) per system's vector table, as PostgreSQL counts
    them; read after a pause so that the backends have published their counters (an idle
    backend publishes after a second; on a loaded machine, later)."""
    import psycopg
    await asyncio.sleep(3)
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        rows = await (await conn.execute(_SCANS)).fetchall()
    return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}


TABLES = {"governed": "memory_entry", "langgraph": "store_vectors", "mem0": "mem0_bench"}
OWNERS = {"governed": ("memory_",), "langgraph": ("store",), "mem0": ("mem0_",)}


async def residue(admin_dsn: str, history: str, deleted: Sequence[str]) -> dict[str, int]:
    """How many of the ``deleted`` texts each system still holds anywhere after its delete:
    every row of every table in the database (as text), and mem0's history file.  Logical
    presence only: a deleted row's bytes stay in the heap until VACUUM, for all three."""
    import sqlite3

    import psycopg
    from psycopg import sql as pgsql
    found = {name: 0 for name in OWNERS}
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        tables = await (await conn.execute(
            "SELECT schemaname, relname FROM pg_stat_user_tables")).fetchall()
        for schema, table in tables:
            owner = next((n for n, pre in OWNERS.items() if table.startswith(pre)), None)
            if owner is None:
                continue
            q = pgsql.SQL("SELECT count(*) FROM {}.{} t WHERE EXISTS (SELECT 1 FROM unnest(%s::text[])"
                          " x WHERE strpos(t::text, x) > 0)").format(
                pgsql.Identifier(schema), pgsql.Identifier(table))
            found[owner] += (await (await conn.execute(q, [list(deleted)])).fetchone())[0]
    with sqlite3.connect(history) as db:
        for text in deleted:
            found["mem0"] += db.execute("SELECT count(*) FROM history WHERE old_memory = ?"
                                        " OR new_memory = ?", (text, text)).fetchone()[0]
    return found


async def measure(systems: Sequence[Any], data: Data, admin_dsn: str
                  ) -> dict[str, dict[str, Any]]:
    samples: dict[str, dict[str, list[float]]] = {
        s.name: {"put": [], "search": [], "delete": []} for s in systems}
    hits = {s.name: 0 for s in systems}
    k = len(systems)
    before = await scans(admin_dsn)
    for n, (scope, text, q) in enumerate(data.queries):  # searches first: the loaded rows only
        truth = set(data.truth(scope, q))
        for s in systems[n % k:] + systems[: n % k]:
            seconds, found = await _timed(lambda s=s: s.search(scope, text, q.tolist()))
            samples[s.name]["search"].append(seconds)
            hits[s.name] += len(truth & set(found))
    after = await scans(admin_dsn)
    for op in ("put", "delete"):
        for n, (scope, text, v) in enumerate(data.puts):
            for s in systems[n % k:] + systems[: n % k]:
                fn = (lambda s=s: s.put(scope, text, v.tolist())) if op == "put" else (
                    lambda s=s: s.delete(scope, text))
                seconds, _ = await _timed(fn)
                samples[s.name][op].append(seconds)
    out: dict[str, dict[str, Any]] = {}
    for s in systems:
        out[s.name] = {op: bench.Stat.of(v) for op, v in samples[s.name].items()}
        out[s.name]["recall@5"] = hits[s.name] / (LIMIT * len(data.queries))
        table = TABLES[s.name]
        b, a = before.get(table, (0, 0, 0)), after.get(table, (0, 0, 0))
        out[s.name]["search_scans"] = {"seq": a[0] - b[0], "hnsw": a[1] - b[1],
                                       "other_index": a[2] - b[2]}
    return out


async def open_systems(pg: Any, history_dir: str, data: Data) -> list[Any]:
    from langgraph.store.postgres import AsyncPostgresStore
    from mem0 import AsyncMemory
    from mem0.configs.base import MemoryConfig

    store = await bench.open_store(pg.dsn, pg.owner_dsn, max_size=1)
    lg_cm = AsyncPostgresStore.from_conn_string(
        pg.owner_dsn, index={"dims": DIM, "embed": lambda texts: [data.lookup[t] for t in texts],
                             "fields": ["text"]})
    lg = await lg_cm.__aenter__()
    await lg.setup()
    config = MemoryConfig(
        vector_store={"provider": "pgvector",
                      "config": {"connection_string": pg.owner_dsn, "collection_name": "mem0_bench",
                                 "embedding_model_dims": DIM, "minconn": 1, "maxconn": 1}},
        embedder={"provider": "openai", "config": {"api_key": "unused-no-call"}},
        llm={"provider": "openai", "config": {"api_key": "unused-no-call"}},
        history_db_path=os.path.join(history_dir, "mem0-history.db"))
    memory = AsyncMemory(config)
    memory.embedding_model = LookupEmbedder(data.lookup)
    systems = [Governed(store), LangGraph(lg), Mem0(memory)]
    systems[1]._cm = lg_cm  # type: ignore[attr-defined]
    return systems


async def run_peers(pg: Any, size: Size, say: Callable[[str], None]) -> dict[str, Any]:
    data = Data(size)
    await bench.migrate(pg.owner_dsn, local_server=bench.LOCAL)
    with tempfile.TemporaryDirectory() as history:
        systems = await open_systems(pg, history, data)
        try:
            load: dict[str, float] = {}
            for s in systems:
                say(f"loading {s.name}")
                load[s.name], _ = await _timed(lambda s=s: s.load(data))
            say("measuring")
            result = await measure(systems, data, pg.admin_dsn)
            left = await residue(pg.admin_dsn, os.path.join(history, "mem0-history.db"),
                                 [text for _s, text, _v in data.puts[:20]])
        finally:
            await systems[0].store.close()
            await systems[1]._cm.__aexit__(None, None, None)
            systems[2].memory.vector_store.connection_pool.close()
    for name in result:
        result[name]["load_s"] = load[name]
        result[name]["deleted_still_stored"] = left[name]
    return {"systems": result, "size": size.__dict__, "rows": size.scopes * size.facts,
            "loadavg": os.getloadavg(), "machine": bench.machine_facts(),
            "versions": _versions()}


def _versions() -> dict[str, str]:
    from importlib.metadata import version
    return {p: version(p) for p in ("langgraph-checkpoint-postgres", "mem0ai", "psycopg")}


def render(result: dict[str, Any]) -> str:
    lines = ["| system | put p50 | put p99 | search p50 | search p99 | delete p50 | delete p99"
             " | recall@5 | scans per search (seq / HNSW / other index) | load"
             " | deleted texts still stored (of 20) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    n = result["size"]["ops"]
    for name, r in result["systems"].items():
        cells = [f"{bench.fmt_time(r[op].median)} | {bench.fmt_time(r[op].p99)}"
                 for op in ("put", "search", "delete")]
        sc = r["search_scans"]
        lines.append(f"| {name} | {' | '.join(cells)} | {r['recall@5']:.3f} |"
                     f" {' / '.join(f'{sc[k] / n:.2f}' for k in ('seq', 'hnsw', 'other_index'))} |"
                     f" {r['load_s']:.1f} s | {r['deleted_still_stored']} |")
    size = result["size"]
    lines.append(f"\n{size['scopes']} scopes × {size['facts']} facts ({result['rows']} rows per "
                 f"system), {size['ops']} operations of each kind per system; load average "
                 f"{', '.join(f'{x:.2f}' for x in result['loadavg'])}; "
                 + ", ".join(f"{k} {v}" for k, v in result["versions"].items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scopes", type=int)
    ap.add_argument("--facts", type=int)
    ap.add_argument("--ops", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    base = SIZES["quick" if args.quick else "default"]
    size = Size(args.scopes or base.scopes, args.facts or base.facts, args.ops or base.ops)
    if not 0 < size.facts < bench.PROTOTYPE_POLICY.entry_cap or size.ops > size.scopes * (
            bench.PROTOTYPE_POLICY.entry_cap - size.facts):
        ap.error("--facts must leave room below the entry cap for --ops puts")
    os.environ.setdefault("MEM0_TELEMETRY", "False")  # read when mem0 is imported
    try:
        import langgraph.store.postgres  # noqa: F401
        import mem0  # noqa: F401
    except ImportError:
        print("peers.py: the peers are not installed: pip install -e '.[peers]'", file=sys.stderr)
        return 2
    logging.getLogger("mem0").setLevel(logging.ERROR)
    from kagent_governed_memory.dev import EmbeddedPostgres
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    with EmbeddedPostgres() as pg:
        result = asyncio.run(run_peers(pg, size, say))
    if args.json:
        print(json.dumps(result, indent=2, default=lambda o: o.__dict__))
    else:
        print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
