#!/usr/bin/env python
"""The cost of the database boundary at the SQL level: the governed migrations of an earlier
commit and of this tree in ONE PostgreSQL (two schemas, the same data), `memory_search` and
`memory_save` called alternately on both, medians per call.  Prints a Markdown table.

    python benchmarks/boundary_ab.py [--before-ref 61a202f] [--scopes 200] [--iters 1500]

The earlier migrations are read with `git show REF:…` from this repository (nothing copied).
Both sides are called as the owner over one connection each, so the numbers are the statements'
own cost (SECURITY DEFINER, fixed search_path, row-level security, the extra checks), without
the pool, Python validation or result models that `benchmarks/run.py` includes.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import time
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg.conninfo import make_conninfo

from kagent_governed_memory.store import migrate
from kagent_governed_memory.dev import EmbeddedPostgres
from kagent_governed_memory.embedding import HashingEmbedder

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = "kagent_governed_memory/sql/migrations"
OLD_SEARCH = "SELECT * FROM memory_search(%s,%s,%s,%s,%s,%s,1,%s::vector,5)"
# this tree's side: a registered policy version (the migrations register the prototype)
VERSION = "adr0023-prototype-1"
NEW_SEARCH = f"SELECT * FROM memory_search(%s,%s,%s,%s,%s,%s,1,'{VERSION}',%s::vector,5)"
OLD_SAVE = "SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,1,ARRAY[%s],ARRAY[%s::vector])"
NEW_SAVE = (f"SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,1,'{VERSION}',ARRAY[%s],"
            "ARRAY[%s::vector])")
OLD_GRANT = ("SELECT * FROM memory_grant(%s,%s,%s,%s,%s,%s,'p','v1','7 days',100,512,"
             "'90 days')")
# no limits: the registered policy's (7 days, 100 entries, 512 bytes, 90 days) are recorded
NEW_GRANT = (f"SELECT * FROM memory_grant(%s,%s,%s,%s,%s,%s,'p','{VERSION}',768,'personal',"
             "ARRAY['example.org'])")


def old_migrations(ref: str) -> list[str]:
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{ref}:{MIGRATIONS}"],
                           capture_output=True, text=True, check=True).stdout.split()
    return [subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{MIGRATIONS}/{n}"],
                           capture_output=True, text=True, check=True).stdout
            for n in sorted(names) if n.endswith(".up.sql")]


def key(i: int, side: str = "new") -> list[str]:
    # the old ref's functions take (mxid, origin, ...); this tree's (issuer, subject, ...)
    principal = ([f"@u{i}:example.org", "native_local"] if side == "old"
                 else ["matrix", f"@u{i}:example.org"])
    return [*principal, "kagent", "ab", "control_room", f"!r{i}:example.org"]


def run(ref: str, scopes: int, facts: int, iters: int) -> dict[tuple[str, str], list[float]]:
    embedder = HashingEmbedder()
    with EmbeddedPostgres() as pg:
        with psycopg.connect(pg.admin_dsn, autocommit=True) as c:
            c.execute("CREATE SCHEMA old AUTHORIZATION kgm_owner")
            c.execute("CREATE SCHEMA new AUTHORIZATION kgm_owner")
        dsn = {s: make_conninfo(pg.owner_dsn, options=f"-c search_path={s},public")
               for s in ("old", "new")}
        with psycopg.connect(dsn["old"], autocommit=True) as c, c.transaction():
            for text in old_migrations(ref):
                c.execute(text)  # type: ignore[arg-type]
        asyncio.run(migrate(dsn["new"], local_server="example.org"))
        texts = [[f"user {i} fact {j} about tea and {j % 7}" for j in range(facts)]
                 for i in range(scopes)]
        vecs = [[Vector(embedder.embed_one(t)) for t in row] for row in texts]
        conns = {}
        for side in ("old", "new"):
            c = psycopg.connect(dsn[side], autocommit=True)
            register_vector(c)
            conns[side] = c
            for i in range(scopes):
                c.execute(OLD_GRANT if side == "old" else NEW_GRANT, key(i, side))
                save = ("SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,1,%s,%s::vector[])"
                        if side == "old" else
                        f"SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,1,'{VERSION}',%s,"
                        "%s::vector[])")
                c.execute(save, key(i, side) + [texts[i], vecs[i]])
            c.execute("ANALYZE")
        rng = random.Random(7)
        times: dict[tuple[str, str], list[float]] = {(op, s): [] for op in ("search", "save")
                                                     for s in conns}
        for n in range(iters):
            i = rng.randrange(scopes)
            vec = vecs[rng.randrange(scopes)][rng.randrange(facts)]
            order = ("old", "new") if n % 2 else ("new", "old")
            for side in order:
                t0 = time.perf_counter()
                conns[side].execute(OLD_SEARCH if side == "old" else NEW_SEARCH,
                                    key(i, side) + [vec]).fetchall()
                times[("search", side)].append(time.perf_counter() - t0)
            if n < scopes * (100 - facts):  # stay under the entry cap of 100
                j = n % scopes
                for side in order:
                    t0 = time.perf_counter()
                    conns[side].execute(OLD_SAVE if side == "old" else NEW_SAVE,
                                        key(j, side) + [f"new fact {n}", vec]).fetchall()
                    times[("save", side)].append(time.perf_counter() - t0)
        for c in conns.values():
            c.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-ref", default="61a202f")
    parser.add_argument("--scopes", type=int, default=200)
    parser.add_argument("--facts", type=int, default=50)
    parser.add_argument("--iters", type=int, default=1500)
    args = parser.parse_args()
    times = run(args.before_ref, args.scopes, args.facts, args.iters)
    print(f"| statement (median of {args.iters}, alternated) | before ({args.before_ref}) | "
          "after (this tree) | after / before |")
    print("|---|---|---|---|")
    for op in ("search", "save"):
        before = statistics.median(times[(op, "old")])
        after = statistics.median(times[(op, "new")])
        print(f"| memory_{op} | {before * 1e3:.3f} ms | {after * 1e3:.3f} ms | "
              f"{after / before:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
