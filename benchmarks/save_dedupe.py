#!/usr/bin/env python
"""What the one-copy rule (issue 25 item 7, migration 000012) costs ``memory_save``, and what a
cheaper form would cost: one throwaway PostgreSQL at ``benchmarks/run.py``'s default size,
alternated calls, medians.  Prints Markdown.

    python benchmarks/save_dedupe.py [--iters 300] [--full 1000] [--half 100] [--empty 100]

``--full`` scopes hold 99 live entries, ``--half`` 50, ``--empty`` none (768-d vectors stored
inline, facts interleaved across scopes as they accumulate, so a scope's rows sit on pages of
their own and the table is larger than shared_buffers, as in ``run.py``).  Each sample saves one
new fact (``--batch`` facts) into a random scope of a group, as the owner over one connection,
inside a transaction that is rolled back (the live count stays fixed; a rollback costs every
variant alike).  The variants, created here under other names in the throwaway database only
(nothing is changed in the library's migrations):

* ``shipped``: ``memory_save`` as migration 000012 defines it (its NFC dedupe reads, normalises
  and sorts every live entry of the scope on every save);
* ``no_dedupe``: the same function without the dedupe (000005's insert, with 000012's scope row
  lock and NULL check): the cost before item 7;
* ``matches_only``: the dedupe joined to the saved facts' NFC forms (no sort of the whole
  scope; every live row is still read and normalised): the same answers, no schema change;
* ``indexed``: a stored generated column ``content_nfc_md5 = md5(normalize(content, NFC))``
  and an index on ``(scope_id, content_nfc_md5)``: the live duplicates found by one index probe
  per fact (the NFC forms compared again after it).  Column and index exist for this variant's
  pass only (added after the load: a table rewrite), and ``shipped`` is timed again alongside
  so their own insert cost shows.

The functions' inner plans (``auto_explain``: nested statements, ANALYZE, BUFFERS) follow.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import time
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

from kagent_governed_memory import migrate
from kagent_governed_memory._embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parent.parent
M12 = ROOT / "kagent_governed_memory/sql/migrations/000015_governed_memory_baseline.up.sql"
LOCAL = "example.org"
VERSION = "adr0023-prototype-1"
DIM = 768


def shipped_save_sql() -> str:
    text = M12.read_text()
    m = re.search(r"CREATE OR REPLACE FUNCTION memory_save\(.*?\n\$\$;\n", text, re.S)
    assert m, "memory_save not found in 000012"
    return m.group(0)


def variant(body: str, name: str, dedupe: str | None) -> str:
    """``body`` (000012's memory_save) renamed, with its WITH … SELECT replaced."""
    out = body.replace("FUNCTION memory_save(", f"FUNCTION {name}(", 1)
    if dedupe is None:
        return out
    start = out.index("    RETURN QUERY\n")
    end = out.index("END\n$$;")
    return out[:start] + "    RETURN QUERY\n" + dedupe + out[end:]


NO_DEDUPE = """    WITH inserted AS (
        INSERT INTO memory_entry (scope_id, content, embedding, generation)
        SELECT s.id, u.content, u.embedding, p_generation
          FROM unnest(p_contents, p_embeddings) WITH ORDINALITY AS u(content, embedding, n)
         ORDER BY u.n
        RETURNING memory_entry.id, memory_entry.created_at, memory_entry.expires_at
    )
    SELECT inserted.id, inserted.created_at, inserted.expires_at FROM inserted;
"""

# Only the live rows whose NFC form is one of the saved facts' (a hash join on the facts'
# forms: every live row is still normalised once, but nothing is sorted but the matches).
MATCHES_ONLY = """    WITH facts AS (
        SELECT u.content, u.embedding, u.n, normalize(u.content, NFC) AS norm
          FROM unnest(p_contents, p_embeddings) WITH ORDINALITY AS u(content, embedding, n)
    ), live AS (
        SELECT DISTINCT ON (k.norm) k.norm, r.id, r.created_at, r.expires_at
          FROM (SELECT DISTINCT f.norm FROM facts f) k
          JOIN memory_readable(s.id) r ON normalize(r.content, NFC) = k.norm
         ORDER BY k.norm, r.created_at, r.id
    ), fresh AS (
        SELECT DISTINCT ON (f.norm) f.content, f.embedding, f.n, f.norm
          FROM facts f
         WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.norm = f.norm)
         ORDER BY f.norm, f.n
    ), inserted AS (
        INSERT INTO memory_entry (scope_id, content, embedding, generation)
        SELECT s.id, x.content, x.embedding, p_generation FROM fresh x ORDER BY x.n
        RETURNING memory_entry.id, memory_entry.created_at, memory_entry.expires_at,
                  normalize(memory_entry.content, NFC) AS norm
    ), answers AS (
        SELECT l.norm, l.id, l.created_at, l.expires_at FROM live l
        UNION ALL
        SELECT i.norm, i.id, i.created_at, i.expires_at FROM inserted i
    )
    SELECT a.id, a.created_at, a.expires_at
      FROM facts f JOIN answers a ON a.norm = f.norm
     ORDER BY f.n;
"""

# With a stored key of the NFC form and an index on (scope, key): one index probe per distinct
# fact (the NFC forms compared again after it, so an md5 collision cannot answer another
# text's id).  A generated column, not an expression index: row-level security keeps a qual
# calling functions that are not LEAKPROOF (normalize, md5) out of the index scan, while
# ``column = value`` on bytea is leakproof and may drive it.
INDEXED = MATCHES_ONLY.replace(
    """        SELECT DISTINCT ON (k.norm) k.norm, r.id, r.created_at, r.expires_at
          FROM (SELECT DISTINCT f.norm FROM facts f) k
          JOIN memory_readable(s.id) r ON normalize(r.content, NFC) = k.norm
         ORDER BY k.norm, r.created_at, r.id""",
    """        SELECT k.norm, r.id, r.created_at, r.expires_at
          FROM (SELECT DISTINCT f.norm FROM facts f) k
          CROSS JOIN LATERAL (
              SELECT e.id, e.created_at, e.expires_at FROM memory_entry e
               WHERE e.scope_id = s.id AND e.content_nfc_md5 = decode(md5(k.norm), 'hex')
                 AND normalize(e.content, NFC) = k.norm AND e.expires_at > now()
               ORDER BY e.created_at, e.id LIMIT 1) r""")
assert INDEXED != MATCHES_ONLY
INDEX = ("ALTER TABLE memory_entry ADD COLUMN content_nfc_md5 bytea GENERATED ALWAYS AS"
         " (decode(md5(normalize(content, NFC)), 'hex')) STORED",
         "CREATE INDEX memory_entry_scope_nfc ON memory_entry (scope_id, content_nfc_md5)")


def key(i: int) -> list[str]:
    return ["matrix", f"@d{i}:{LOCAL}", "kagent", "dedupe", "control_room", f"!d{i}:{LOCAL}"]


def unit(rng: random.Random) -> Vector:
    v = [rng.gauss(0, 1) for _ in range(DIM)]
    n = sum(x * x for x in v) ** 0.5
    return Vector([x / n for x in v])


# Every scope's facts, interleaved (fact n of every scope, then n + 1), as the superuser (row-
# level security does not bind it; the fence trigger still stamps and checks every row).  A
# pool of 256 unit vectors: their values do not change what a save costs, their size does.
_FILL = """
WITH pool AS (
    SELECT i, l2_normalize(ARRAY(SELECT random_normal() + 0 * i
                                  FROM generate_series(1, 768))::vector) AS v
      FROM generate_series(0, 255) i
)
INSERT INTO memory_entry (scope_id, content, embedding, generation)
SELECT sc.id, format('scope %%s fact %%s: the user mentioned topic %%s on day %%s',
                     g.s, n, n %% 17, n), p.v, sc.generation
  FROM generate_series(0, 98) n
  JOIN generate_series(0, %(scopes)s - 1) g(s)
    ON n < CASE WHEN g.s < %(full)s THEN 99 WHEN g.s < %(half)s THEN 50 ELSE 0 END
  JOIN memory_scope sc ON sc.principal_subject = format('@d%%s:example.org', g.s)
  JOIN pool p ON p.i = (g.s * 31 + n) %% 256
 ORDER BY n, g.s
"""


def run(iters: int, full: int, half: int, empty: int, batch: int
        ) -> tuple[dict[tuple[str, str], list[float]], dict[str, str], dict[str, float]]:
    """``full`` scopes of 99 live entries, ``half`` of 50, ``empty`` of none."""
    rng = random.Random(25)
    vecs = [unit(rng) for _ in range(64)]
    groups = {"99 live": range(0, full), "50 live": range(full, full + half),
              "0 live": range(full + half, full + half + empty)}
    scopes = full + half + empty
    times: dict[tuple[str, str], list[float]] = {}
    plans: dict[str, str] = {}
    sizes: dict[str, float] = {}
    with EmbeddedPostgres() as pg:
        asyncio.run(migrate(pg.owner_dsn, local_server=LOCAL))
        with psycopg.connect(pg.owner_dsn, autocommit=True) as c:
            register_vector(c)
            body = shipped_save_sql()
            c.execute(variant(body, "bench_save_no_dedupe", NO_DEDUPE))
            c.execute(variant(body, "bench_save_matches_only", MATCHES_ONLY))
            c.execute(variant(body, "bench_save_indexed", INDEXED))
            c.execute("SELECT count(*) FROM generate_series(0, %s - 1) s, LATERAL memory_grant("
                      "'matrix', format('@d%%s:example.org', s), 'kagent', 'dedupe',"
                      " 'control_room', format('!d%%s:example.org', s), 'benchmark', %s, 768,"
                      " 'personal', ARRAY[%s]) g", [scopes, VERSION, LOCAL])
        with psycopg.connect(pg.admin_dsn, autocommit=True) as a:
            a.execute("SET search_path = public")
            a.execute("SELECT setseed(0.25)")
            a.execute(_FILL, {"scopes": scopes, "full": full, "half": full + half})
            a.execute("VACUUM ANALYZE memory_entry")
            a.execute("VACUUM ANALYZE memory_scope")
            row = a.execute("SELECT pg_table_size('memory_entry') / 1048576.0,"
                            " (SELECT setting::bigint * 8192 / 1048576.0 FROM pg_settings"
                            "   WHERE name = 'shared_buffers'), count(*) FROM memory_entry"
                            ).fetchone()
            assert row is not None
            sizes = {"table_mb": float(row[0]), "shared_buffers_mb": float(row[1]),
                     "rows": float(row[2])}
        with psycopg.connect(pg.owner_dsn, autocommit=True) as c:
            register_vector(c)

            def one(fn: str, scope: int, n: int) -> float:
                facts = [f"new fact {n}-{k} about lunch near the office" for k in range(batch)]
                embs = [vecs[(n + k) % 64] for k in range(batch)]
                t0 = time.perf_counter()
                with c.transaction(force_rollback=True):
                    c.execute(f"SELECT count(*) FROM {fn}(%s,%s,%s,%s,%s,%s,1,%s,%s,"
                              "%s::vector[])", [*key(scope), VERSION, facts, embs])
                return time.perf_counter() - t0

            def passes(names: list[str]) -> None:
                pick = random.Random(7)
                for n in range(iters + iters // 10):
                    for group, members in groups.items():
                        scope = members[pick.randrange(len(members))]
                        order = names if n % 2 == 0 else names[::-1]
                        for name in order:
                            fn = "memory_save" if name.startswith("shipped") else (
                                f"bench_save_{name}")
                            t = one(fn, scope, n)
                            if n >= iters // 10:
                                times.setdefault((name, group), []).append(t)

            passes(["shipped", "no_dedupe", "matches_only"])
            index_s = time.perf_counter()
            for statement in INDEX:
                c.execute(statement)
            c.execute("VACUUM ANALYZE memory_entry")
            sizes["index_s"] = time.perf_counter() - index_s
            sizes["index_mb"] = float(c.execute(
                "SELECT pg_relation_size('memory_entry_scope_nfc') / 1048576.0").fetchone()[0])
            passes(["shipped (with index)", "indexed"])
        # The functions' inner plans: auto_explain (nested statements, ANALYZE, BUFFERS) at
        # notice level, so they come back to this client; the owner may neither LOAD it nor
        # set it, so the superuser sets both for the owner's next session (throwaway database).
        with psycopg.connect(pg.admin_dsn, autocommit=True) as a:
            a.execute("ALTER ROLE kgm_owner SET session_preload_libraries = 'auto_explain'")
            for name, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                                ("log_analyze", "on"), ("log_buffers", "on"),
                                ("log_level", "notice")):
                a.execute(f"ALTER ROLE kgm_owner SET auto_explain.{name} = {value}")
        with psycopg.connect(pg.owner_dsn, autocommit=True) as c:
            register_vector(c)
            c.execute("SET client_min_messages = notice")

            def nested_plan(fn: str, scope: int) -> str:
                notes: list[str] = []

                def keep(d: psycopg.errors.Diagnostic) -> None:
                    notes.append(d.message_primary or "")

                c.add_notice_handler(keep)
                try:
                    with c.transaction(force_rollback=True):
                        c.execute(f"SELECT count(*) FROM {fn}(%s,%s,%s,%s,%s,%s,1,%s,%s,"
                                  "%s::vector[])", [*key(scope), VERSION, ["a fact to plan"],
                                                    [vecs[0]]])
                finally:
                    c.remove_notice_handler(keep)
                # the function's own statement (the dedupe CTE + insert), not the trigger's
                mine = [m for m in notes if "WITH facts AS" in m]
                return "\n\n".join(mine) or "\n\n".join(notes)

            scope = groups["99 live"][0]
            plans["indexed"] = nested_plan("bench_save_indexed", scope)
            c.execute("ALTER TABLE memory_entry DROP COLUMN content_nfc_md5")
            plans["shipped"] = nested_plan("memory_save", scope)
    return times, plans, sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--full", type=int, default=1000, help="scopes of 99 live entries")
    parser.add_argument("--half", type=int, default=100, help="scopes of 50 live entries")
    parser.add_argument("--empty", type=int, default=100, help="scopes of none")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    times, plans, sizes = run(args.iters, args.full, args.half, args.empty, args.batch)
    groups = ["0 live", "50 live", "99 live"]
    names = ["no_dedupe", "shipped", "matches_only", "shipped (with index)", "indexed"]
    print(f"memory_entry: {sizes['rows']:,.0f} rows, {sizes['table_mb']:.0f} MB;"
          f" shared_buffers {sizes['shared_buffers_mb']:.0f} MB; a random scope of the group"
          f" each iteration; the indexed variant's column + index took"
          f" {sizes['index_s']:.1f} s to add, index {sizes['index_mb']:.1f} MB\n")
    print(f"| memory_save of {args.batch} new fact(s), median of {args.iters} (p95) | "
          + " | ".join(groups) + " |")
    print("|---|" + "---|" * len(groups))
    for name in names:
        cells = []
        for group in groups:
            xs = sorted(times[(name, group)])
            med = statistics.median(xs)
            p95 = xs[max(0, int(0.95 * len(xs)) - 1)]
            base = statistics.median(times[("no_dedupe", group)])
            cells.append(f"{med * 1e3:.3f} ms (p95 {p95 * 1e3:.3f}; {med / base:.2f}×)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name, plan in plans.items():
        print(f"\nInner plan of the {name} save's statement (auto_explain), a scope of 99 live"
              " entries:\n\n```")
        print(plan)
        print("```")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
