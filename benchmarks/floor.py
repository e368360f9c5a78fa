#!/usr/bin/env python
"""What governance costs: a governed search and save against the same work done by hand.

    python benchmarks/floor.py [--dsn OWNER_DSN --app-dsn APP_DSN --admin-dsn SUPERUSER_DSN]
                               [--quick] [--json]

Without ``--dsn`` a throwaway PostgreSQL 18 + pgvector is started.  The data is
``benchmarks/run.py``'s (``scopes × facts`` unit vectors of 768 dimensions, loaded through the
fenced functions); then the superuser copies the scopes and entries into two plain tables the
owner creates with ``LIKE … INCLUDING ALL`` -- the same columns, defaults, constraints and
indexes, but no trigger, no row security, no function.  Measured in one run, interleaved on the
same query stream (``run.interleaved``), each as its own connection's prepared statement:

* ``select1``: ``SELECT 1`` on the application's connection -- one round trip, the floor of
  every operation;
* ``plain``: the owner's hand-written exact search on the plain tables: the same scope key,
  consent condition, read-time expiry, ``ORDER BY embedding <=> q, id`` and ``LIMIT`` as the
  governed function, as one statement;
* ``plain_fn``: the same statement inside a PL/pgSQL function (``RETURN QUERY``), on the plain
  tables -- what the function call alone costs;
* ``governed_sql``: the governed statement (``memory_search``) on the application's connection,
  no Python: the guard, argument checks, scope lookup, fence, scope binding and row security;
* ``governed``: ``GovernedMemoryStore.search`` -- the library's validation, pool and result
  models on top;

and for saves, ``plain_insert`` (one row into the plain entry table, ``RETURNING`` the same
columns) against ``governed_save`` (``store.save`` of one fact: fence, cap count, fence trigger,
immutability and row security, audit row).  The differences between consecutive rows are the
profile: ``plain_fn − plain`` is PL/pgSQL, ``governed_sql − plain_fn`` the governance inside the
database, ``governed − governed_sql`` the Python side.  Targets: governed search ≤ 1.25× plain,
governed save ≤ 1.5× plain insert.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: data, identities, statistics)

from kagent_governed_memory.store import _pgtypes as pgtypes_module  # noqa: E402
from kagent_governed_memory.store import _validate as validate_module  # noqa: E402

_Vectors = pgtypes_module._Vectors
_key = validate_module._key

SEARCH_TARGET = 1.25
SAVE_TARGET = 1.5
SCHEMA = "kgm_floor"

# The governed function's search, written by hand: same key (000016's seven columns), same
# consent condition, same read-time expiry, same order and limit (memory_search).
PLAIN_SEARCH = """
SELECT r.id, r.content, r.created_at, r.expires_at, r.embedding <=> $1 AS distance
  FROM floor_entry r JOIN floor_scope s ON s.id = r.scope_id
 WHERE s.principal_issuer_kind = $2 AND s.principal_issuer = $3 AND s.principal_subject = $4
   AND s.agent_namespace = $5 AND s.agent_name = $6 AND s.scope_kind = $7 AND s.scope_ref = $8
   AND s.enabled AND s.generation = $9 AND s.consent_expires_at > now()
   AND s.policy_version = $10 AND r.expires_at > now()
 ORDER BY r.embedding <=> $1, r.id
 LIMIT $11"""

PLAIN_FN = """
CREATE FUNCTION floor_search(q vector, ik TEXT, i TEXT, sub TEXT, ns TEXT, ag TEXT, k TEXT,
                             rm TEXT, g BIGINT, pv TEXT, lim INTEGER)
RETURNS TABLE (id UUID, content TEXT, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
               distance DOUBLE PRECISION)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT r.id, r.content, r.created_at, r.expires_at, r.embedding <=> q
      FROM floor_entry r JOIN floor_scope s ON s.id = r.scope_id
     WHERE s.principal_issuer_kind = ik AND s.principal_issuer = i
       AND s.principal_subject = sub AND s.agent_namespace = ns
       AND s.agent_name = ag AND s.scope_kind = k AND s.scope_ref = rm
       AND s.enabled AND s.generation = g AND s.consent_expires_at > now()
       AND s.policy_version = pv AND r.expires_at > now()
     ORDER BY r.embedding <=> q, r.id
     LIMIT lim;
END
$$"""

PLAIN_INSERT = ("INSERT INTO floor_entry (scope_id, content, embedding, generation, expires_at)"
                " VALUES ($1, $2, $3, $4, now() + interval '7 days')"
                " RETURNING id, created_at, expires_at")


def key_args(scope: int, generation: int) -> list[Any]:
    return ["matrix", bench.LOCAL, bench.mxid(scope), bench.NAMESPACE, bench.AGENT,
            "control_room", bench.room(scope), generation, bench.PROTOTYPE_POLICY.version]


async def _rows(conn: psycopg.AsyncConnection, query: str, params: Sequence[Any]) -> int:
    cur = psycopg.AsyncRawCursor(conn)
    await cur.execute(query, params, prepare=True)
    return len(await cur.fetchall())


async def copy_to_plain_tables(owner: psycopg.AsyncConnection,
                               admin: psycopg.AsyncConnection) -> None:
    """The owner creates the plain tables; the superuser (row security does not apply to it)
    fills them with the governed rows."""
    for plain, governed in (("floor_scope", "memory_scope"), ("floor_entry", "memory_entry")):
        await owner.execute(f"CREATE TABLE {plain} (LIKE {governed} INCLUDING ALL)")
    await owner.execute(PLAIN_FN)
    await admin.execute("INSERT INTO floor_scope SELECT * FROM memory_scope")
    await admin.execute("INSERT INTO floor_entry SELECT * FROM memory_entry")
    for table in ("floor_scope", "floor_entry", "memory_scope", "memory_entry"):
        await admin.execute(f"VACUUM (ANALYZE) {table}")


def search_ops(app: psycopg.AsyncConnection, owner: psycopg.AsyncConnection,
               store: bench.GovernedMemoryStore) -> dict[str, bench.Op]:
    lim = bench.LIMIT
    return {
        "select1": lambda s, f: _rows(app, "SELECT 1", []),
        "plain": lambda s, f: _rows(owner, PLAIN_SEARCH, [Vector(f), *key_args(s, 1), lim]),
        "plain_fn": lambda s, f: _rows(
            owner, "SELECT * FROM floor_search($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            [Vector(f), *key_args(s, 1), lim]),
        "governed_sql": lambda s, f: bench.governed_sql_search(app, Vector(f), s, 1),
        "governed": lambda s, f: store.search(bench.scope_key(s), 1, f, limit=lim),
    }


# The save's steps by hand on the plain tables, each row adding one: the scope's row lock
# (``memory_scope_lock``: SELECT … FOR UPDATE), then the duplicate check (a live entry with the
# same NFC-normalised text answers its id instead of a new row), as memory_save does them.
PLAIN_LOCKED = (
    "WITH l AS (SELECT id FROM floor_scope WHERE id = $1 FOR UPDATE)"
    " INSERT INTO floor_entry (scope_id, content, embedding, generation, expires_at)"
    " SELECT l.id, $2, $3, $4, now() + interval '7 days' FROM l"
    " RETURNING id, created_at, expires_at")
PLAIN_DEDUPE = (
    "WITH l AS (SELECT id FROM floor_scope WHERE id = $1 FOR UPDATE),"
    " live AS (SELECT normalize(r.content, NFC) AS norm FROM floor_entry r JOIN l"
    "  ON r.scope_id = l.id WHERE r.expires_at > now())"
    " INSERT INTO floor_entry (scope_id, content, embedding, generation, expires_at)"
    " SELECT l.id, $2, $3, $4, now() + interval '7 days' FROM l"
    "  WHERE NOT EXISTS (SELECT 1 FROM live WHERE live.norm = normalize($2, NFC))"
    " RETURNING id, created_at, expires_at")
SAVES = ("plain_insert", "plain_locked", "plain_dedupe", "governed_sql_save", "governed_save")


async def measure_saves(owner: psycopg.AsyncConnection, admin: psycopg.AsyncConnection,
                        app: psycopg.AsyncConnection, store: bench.GovernedMemoryStore,
                        vectors: Sequence[Vector], iters: int, warmup: int
                        ) -> dict[str, bench.Stat]:
    """One fact at a time, in a rotating order.  Governed saves go to fresh writer scopes (the
    policy caps a scope's live entries); the superuser copies each writer scope's row into the
    plain scope table, so every plain variant writes to a scope exactly as full as the governed
    one (the duplicate check reads every live entry of the scope)."""
    cap = store.policy.entry_cap
    total = warmup + iters
    # each variant writes to its own scopes, so every scope is equally full at each step
    keys = {(name, j): bench.scope_key(f"floor-{name}-{j}")
            for name in SAVES for j in range(math.ceil(total / cap))}
    gens, ids = {}, {}
    for (name, j), key in keys.items():
        gens[name, j] = (await store.grant(key, purpose=bench.PURPOSE)).generation
        if name.startswith("plain"):
            ids[name, j] = (await (await admin.execute(
                "INSERT INTO floor_scope SELECT * FROM memory_scope WHERE principal_subject = %s"
                " AND scope_ref = %s RETURNING id", [key.principal.subject, key.scope.ref])
            ).fetchone())[0]
    samples: dict[str, list[float]] = {name: [] for name in SAVES}
    for i in range(total):
        vec, j = vectors[i % len(vectors)], i // cap
        text = f"floor saved fact {i}"

        def plain(name: str, query: str) -> Callable[[], Any]:
            return partial(_rows, owner, query, [ids[name, j], text, vec, gens[name, j]])
        ops: dict[str, Callable[[], Any]] = {
            "plain_insert": plain("plain_insert", PLAIN_INSERT),
            "plain_locked": plain("plain_locked", PLAIN_LOCKED),
            "plain_dedupe": plain("plain_dedupe", PLAIN_DEDUPE),
            "governed_sql_save": partial(
                _rows, app, bench.governed_sql.query("SaveMemoryEntriesByIssuer"),
                [*key_args_of(keys["governed_sql_save", j], gens["governed_sql_save", j]),
                 [text], _Vectors([vec])]),
            "governed_save": partial(store.save, keys["governed_save", j],
                                     gens["governed_save", j], facts=[text],
                                     embeddings=[vec.to_list()]),
        }
        order = SAVES[i % len(SAVES):] + SAVES[: i % len(SAVES)]
        for name in order:
            seconds, _ = await bench._timed(ops[name])
            if i >= warmup:
                samples[name].append(seconds)
    return {name: bench.Stat.of(v) for name, v in samples.items()}


def key_args_of(key: bench.ScopeKey, generation: int) -> list[Any]:
    return [*_key(key), generation, bench.PROTOTYPE_POLICY.version]


_FUNCTION_TIMES = """
SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions
 WHERE schemaname = current_schema()"""


async def profile_save(app_dsn: str, admin: psycopg.AsyncConnection, owner_dsn: str,
                       saves: int) -> dict[str, dict[str, float]]:
    """Where a governed save's time goes inside the database: ``track_functions = 'all'`` for
    the application login's fresh sessions only (reset afterwards), ``saves`` store.save
    calls, then PostgreSQL's own per-function counters -- calls, total and self time, in
    microseconds per save.  Everything outside the functions (the executor around the call,
    the commit) is the statement's time minus ``memory_save``'s total."""
    role = conninfo_to_dict(app_dsn).get("user") or ""
    await admin.execute(pgsql.SQL("ALTER ROLE {} SET track_functions = 'all'").format(
        pgsql.Identifier(role)))
    try:
        store = await bench.open_store(app_dsn, owner_dsn, max_size=1)
        try:
            key = bench.scope_key("floor-profile")
            gen = (await store.grant(key, purpose=bench.PURPOSE)).generation
            vec = [1.0] + [0.0] * (bench.DIM - 1)
            await asyncio.sleep(1.5)  # the grant's counters published before the baseline
            before = {r[0]: r[1:] for r in await (await admin.execute(_FUNCTION_TIMES)).fetchall()}
            for i in range(saves):
                await store.save(key, gen, facts=[f"floor profiled fact {i}"], embeddings=[vec])
        finally:
            await store.close()
        await asyncio.sleep(1.5)  # the backend publishes its counters when idle
        after = await (await admin.execute(_FUNCTION_TIMES)).fetchall()
    finally:
        await admin.execute(pgsql.SQL("ALTER ROLE {} RESET track_functions").format(
            pgsql.Identifier(role)))
    out = {}
    for name, calls, total, self_ in after:
        c0, t0, s0 = before.get(name, (0, 0.0, 0.0))
        if calls - c0 >= saves:  # called by every save (not the grant's)
            out[name] = {"calls_per_save": (calls - c0) / saves,
                         "total_us": (total - t0) * 1000 / saves,
                         "self_us": (self_ - s0) * 1000 / saves}
    return out


async def run_floor(owner_dsn: str, app_dsn: str, admin_dsn: str, size: bench.Size,
                    progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    dsn = await bench.prepare_schema(owner_dsn, SCHEMA)
    opts = conninfo_to_dict(dsn)["options"]
    app_dsn, admin_dsn = (make_conninfo(d, options=opts) for d in (app_dsn, admin_dsn))
    await bench.migrate(dsn, local_server=bench.LOCAL)
    owner, admin = await bench.connect(dsn), await bench.connect(admin_dsn)
    app = await bench.connect(app_dsn)
    store = await bench.open_store(app_dsn, dsn, max_size=1)
    try:
        await store._register_vector(app)  # the binary vector[] the store sends, on this one too
        await bench.generate_source(owner, size, progress)
        await bench.load_governed(owner, 0, size.scopes, size, progress)
        await copy_to_plain_tables(owner, admin)
        queries = await bench.load_queries(owner)
        # the same rows, or the comparison is void
        s, v, _ = queries[0]
        cur = psycopg.AsyncRawCursor(owner)
        await cur.execute(PLAIN_SEARCH, [v, *key_args(s, 1), bench.LIMIT])
        plain = [r[0] for r in await cur.fetchall()]
        governed = [m.id for m in await store.search(bench.scope_key(s), 1, v.to_list(),
                                                     limit=bench.LIMIT)]
        if [str(x) for x in plain] != [str(x) for x in governed] or not plain:
            raise RuntimeError("the plain and governed searches return different rows")
        progress("measuring searches")
        search = await bench.interleaved(queries, size.search_iters, size.warmup,
                                         search_ops(app, owner, store))
        progress("measuring saves")
        vectors = [q[1] for q in queries]
        saves = await measure_saves(owner, admin, app, store, vectors, size.save_iters,
                                     size.warmup)
        progress("profiling saves")
        profile = await profile_save(app_dsn, admin, dsn, min(size.save_iters, 50))
        meta = {"size": asdict(size), "machine": bench.machine_facts(),
                "loadavg": os.getloadavg(),
                "postgres": await bench._one(owner, "SHOW server_version")}
        return {"search": {k: asdict(v) for k, v in search.items()},
                "save": {k: asdict(v) for k, v in saves.items()}, "save_profile": profile,
                "meta": meta}
    finally:
        await store.close()
        for conn in (app, owner, admin):
            await conn.close()


def render(result: dict[str, Any]) -> str:
    s, w = result["search"], result["save"]

    def row(name: str, stats: dict[str, Any], base: float, what: str) -> str:
        return (f"| {name} | {bench.fmt_time(stats['median'])} | {bench.fmt_time(stats['p95'])}"
                f" | {stats['median'] / base:.2f}× | {what} |")

    base = s["plain"]["median"]
    lines = ["| search | median | p95 | × plain | what it adds |", "|---|---|---|---|---|",
             row("select1", s["select1"], base, "one round trip"),
             row("plain", s["plain"], base, "the exact query by hand (floor)"),
             row("plain_fn", s["plain_fn"], base, "+ a PL/pgSQL function"),
             row("governed_sql", s["governed_sql"], base,
                 "+ guard, checks, scope lookup, fence, binding, row security"),
             row("governed", s["governed"], base, "+ the library (validation, pool, models)")]
    ratio = s["governed"]["median"] / base
    lines.append(f"\ngoverned search / plain: {ratio:.2f}× (target ≤ {SEARCH_TARGET}×: "
                 f"{'met' if ratio <= SEARCH_TARGET else 'MISSED'})\n")
    base = w["plain_insert"]["median"]
    lines += ["| save (one fact) | median | p95 | × plain insert | what it adds |",
              "|---|---|---|---|---|",
              row("plain_insert", w["plain_insert"], base, "INSERT … RETURNING, no trigger/RLS"),
              row("plain_locked", w["plain_locked"], base, "+ the scope's row lock"),
              row("plain_dedupe", w["plain_dedupe"], base,
                  "+ the duplicate check over the scope's live entries"),
              row("governed_sql_save", w["governed_sql_save"], base,
                  "+ guard, checks, fence, binding, triggers (fence, cap, immutability),"
                  " row security"),
              row("governed_save", w["governed_save"], base,
                  "+ the library (validation, pool, ids)")]
    ratio = w["governed_save"]["median"] / base
    lines.append(f"\ngoverned save / plain insert: {ratio:.2f}× (target ≤ {SAVE_TARGET}×: "
                 f"{'met' if ratio <= SAVE_TARGET else 'MISSED'})")
    lines += ["", "| inside the database, per save | calls | total | self |", "|---|---|---|---|"]
    for name, p in sorted(result["save_profile"].items(), key=lambda kv: -kv[1]["self_us"]):
        lines.append(f"| `{name}` | {p['calls_per_save']:.0f} | {p['total_us']:.0f} µs |"
                     f" {p['self_us']:.0f} µs |")
    meta = result["meta"]
    lines.append(f"\nsize {meta['size']['name']} ({meta['size']['scopes']} scopes × "
                 f"{meta['size']['facts']} facts), PostgreSQL {meta['postgres']}, load average "
                 f"{', '.join(f'{x:.2f}' for x in meta['loadavg'])}, {meta['machine']['nproc']} "
                 "CPUs")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="the owner (migrates, owns the plain tables)")
    ap.add_argument("--app-dsn", help="the application login (kagent_memory_service member)")
    ap.add_argument("--admin-dsn", help="a superuser (copies the rows past row security)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    size = bench.SIZES["quick" if args.quick else "default"]
    say = partial(print, file=sys.stderr)
    if args.dsn:
        if not (args.app_dsn and args.admin_dsn):
            ap.error("--dsn needs --app-dsn and --admin-dsn")
        result = asyncio.run(run_floor(args.dsn, args.app_dsn, args.admin_dsn, size, say))
    else:
        from kagent_governed_memory.dev import EmbeddedPostgres
        with EmbeddedPostgres() as pg:
            result = asyncio.run(run_floor(pg.owner_dsn, pg.dsn, pg.admin_dsn, size, say))
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
