"""The benchmark's measuring functions at a tiny size, against an upstream-*shaped* table.

Upstream kagent's own DDL and queries never enter this repository (benchmarks/upstream_sql.py
reads them from a kagent source at run time), so this smoke test passes the measuring functions
a stand-in written here: the column shape of test_migrations.py, a pair index, an HNSW index and
statements with upstream's parameter order.  It checks that every row of the table is produced
and that the numbers are sane — not how fast anything is.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from support.db import UPSTREAM_SHAPED_MEMORY

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load("kgm_benchmarks_run", "run.py")
upstream_sql = sys.modules["upstream_sql"]

SHAPED = upstream_sql.UpstreamSQL(
    migrations=(
        ("shape", UPSTREAM_SHAPED_MEMORY),
        ("indexes", ("CREATE INDEX memory_by_pair ON memory (agent_name, user_id);"
                     " CREATE INDEX memory_by_vector ON memory"
                     " USING hnsw (embedding vector_cosine_ops)")),
    ),
    # parameters in upstream's order: vector, agent, user, limit
    search="SELECT id, content, 1 - (embedding <=> $1) AS similarity FROM memory"
           " WHERE user_id = $3 AND agent_name = $2 ORDER BY embedding <=> $1 LIMIT $4",
    insert="INSERT INTO memory (content, agent_name, user_id, embedding, access_count, metadata,"
           " expires_at, created_at) VALUES ($3, $1, $2, $4, $7, $5, $6, clock_timestamp())"
           " RETURNING id",
    increment="UPDATE memory AS m SET access_count = m.access_count + 1"
              " FROM unnest($1::text[]) AS hit(id) WHERE m.id = hit.id",
    delete="DELETE FROM memory WHERE user_id = $2 AND agent_name = $1",
    source="upstream-shaped stand-in (tests)",
)

TINY = bench.Size("tiny", scopes=8, facts=20, scaling=(4, 8), search_iters=30, warmup=5,
                  recall_queries=8, save_iters=10, batch_iters=4, forget_iters=4,
                  withdraw_iters=2, scaling_iters=20, log_blocks=3, log_records=300)

ROWS = {"search", "search_sql", "search_path", "recall_default", "short_default",
        "recall_relaxed", "short_relaxed", "save", "save_10", "forget", "withdraw", "rt_search",
        "rt_prefetch",
        "rt_save", "rt_save_10", "rt_erase", "rt_other", "log_own", "log_upstream",
        "scale_80", "scale_160"}


async def test_every_row_measured_at_a_tiny_size(database):
    report = await bench.run_benchmark(database.owner_dsn, SHAPED, TINY, app_dsn=database.dsn,
                                       admin_dsn=database.admin_dsn,
                                       explain=True, buffer_stats=False)
    assert {r.key for r in report.rows} == ROWS
    # governed search is exact within the scope, whatever the other side does
    assert report.row("recall_default").data["governed"]["recall"] == 1.0
    assert report.row("short_default").governed == "0.0%"
    for mode in ("default", "relaxed"):
        up = report.row(f"recall_{mode}").data["upstream"]
        assert 0.0 <= up["recall"] <= 1.0 and up["n"] == TINY.recall_queries
    for key in ("search", "search_sql", "search_path", "save", "save_10", "forget", "withdraw",
                "log_own", "log_upstream", "scale_160"):
        assert report.row(key).ratio is not None and report.row(key).ratio > 0, key
    assert report.row("search").data["governed"]["n"] == TINY.search_iters
    assert report.row("withdraw").data == {"withdrawn": 2 * TINY.facts,
                                           "upstream_deleted": 2 * TINY.facts}
    assert report.row("forget").data == {"forgotten": TINY.forget_iters}
    trips = report.row("rt_other").data
    gov, up = trips["governed"], trips["upstream"]
    assert (gov["search"], gov["save"], gov["save_10"], gov["forget"], gov["withdraw"]) == (
        1, 1, 1, 2, 3)
    assert (gov["grant"], gov["generation"], gov["admit"], gov["forget_all"]) == (1, 1, 1, 2)
    assert (up["search"], up["search_sql"], up["save"], up["save_10"], up["delete"]) == (
        2, 1, 1, 12, 1)
    assert (gov["prefetch_8"], up["prefetch_8"]) == (1, 16)
    assert report.meta["rows_at_end"]["upstream"] > 0
    assert {"upstream_search", "governed_search_inner", "profile_store_search",
            "withdraw_steps", "profile_log_sanitizer"} <= set(report.plans)
    assert "memory_entry" in report.plans["governed_search_inner"]  # the function's inner plan

    async with await bench.connect(database.owner_dsn) as conn:  # the hit-rate reading alone
        await conn.execute("CREATE TABLE hits (n int)")
        await conn.execute("INSERT INTO hits SELECT generate_series(1, 100)")
        before = await bench.block_counts(conn, "hits")
        await conn.execute("SELECT count(*) FROM hits")
        await bench.flush_stats(conn)
        rate = bench._hit_rate(before, await bench.block_counts(conn, "hits"))
        assert rate is not None and 0.0 <= rate <= 1.0

    table = bench.render_table(report).splitlines()
    assert len(table) == len(ROWS) + 2
    assert table[1] == "|" + "|".join(["---"] * 6) + "|"
    assert {line.count(" | ") for line in table[:1] + table[2:]} == {5}


def test_upstream_sql_is_read_from_a_source_not_shipped(tmp_path, monkeypatch):
    monkeypatch.delenv("KAGENT_SRC", raising=False)
    with pytest.raises(upstream_sql.UpstreamSourceError, match="git clone"):
        upstream_sql.load(None)
    assert bench.main(["--quick"]) == 2

    # a checkout-shaped directory (contents written here, not upstream's)
    mig = tmp_path / upstream_sql.MIGRATIONS_DIR
    mig.mkdir(parents=True)
    for name in ("000001_a.up.sql", "000001_a.down.sql", "000002_b.up.sql", "000003_c.up.sql"):
        (mig / name).write_text(f"-- {name}\nSELECT 1;\n")
    queries = tmp_path / upstream_sql.QUERIES_FILE
    queries.parent.mkdir(parents=True)
    queries.write_text("".join(
        f"-- name: {n} :many\n-- a comment\nSELECT $1::int + $2\nFROM t;\n\n"
        for n in upstream_sql.QUERY_NAMES))
    loaded = upstream_sql.load(str(tmp_path))
    assert [m[0] for m in loaded.migrations] == ["000001_a.up.sql", "000002_b.up.sql",
                                                 "000003_c.up.sql"]
    assert loaded.search == "SELECT $1::int + $2\nFROM t"
    with pytest.raises(upstream_sql.UpstreamSourceError):
        upstream_sql.to_psycopg("SELECT $1, $3")
    with pytest.raises(upstream_sql.UpstreamSourceError):
        upstream_sql.to_psycopg("SELECT sqlc.arg(name)")


def test_boundary_ab_runs_at_a_tiny_size():
    """benchmarks/boundary_ab.py: the earlier commit's migrations from git, this tree's, one
    database; both sides answer and are timed."""
    import importlib.util

    path = BENCH / "boundary_ab.py"
    spec = importlib.util.spec_from_file_location("boundary_ab", path)
    assert spec and spec.loader
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    times = ab.run("61a202f", scopes=3, facts=5, iters=6)
    assert {k: len(v) for k, v in times.items()} == {
        ("search", "old"): 6, ("search", "new"): 6, ("save", "old"): 6, ("save", "new"): 6}


def test_assertion_cost_runs_at_a_tiny_size():
    """benchmarks/assertion_cost.py: sign, verify, and the generation capture with and without
    the single-use ledger, each timed for every request."""
    import asyncio
    import importlib.util

    path = BENCH / "assertion_cost.py"
    spec = importlib.util.spec_from_file_location("assertion_cost", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    times = asyncio.run(bench.run(iters=6, scopes=2))
    assert {k: len(v) for k, v in times.items()} == {
        "sign (bridge)": 6, "verify (runtime)": 6, "generation (no ledger)": 6,
        "redeem (ledger)": 6}
    assert all(t > 0 for xs in times.values() for t in xs)


# -- issue 16: the load, per-turn and scaling modes, at a tiny size ---------------------------

load = _load("kgm_benchmarks_load", "load.py")
TINY_LOAD = load.LoadSize("tiny", scopes=12, facts=5, concurrency=(1, 4), turns=12, pool=2,
                          storm_concurrency=4)


async def test_load_benchmark_at_a_tiny_size(database):
    """benchmarks/load.py: every (side, C) run, per-operation percentiles, no errors, and the
    withdrawal storm stores nothing stale (counted in SQL afterwards)."""
    result = await load.run_load(database.owner_dsn, SHAPED, TINY_LOAD, app_dsn=database.dsn,
                                 admin_dsn=database.admin_dsn)
    runs = {(r["side"], r["concurrency"]): r for r in result["runs"]}
    assert set(runs) == {(s, c) for s in load.SIDES for c in (1, 4)} | {
        ("governed (storm)", 4), ("upstream (storm)", 4)}
    for (side, c), r in runs.items():
        assert r["errors"] == {}, (side, c, r["errors"])
        assert r["turns"] == c * max(10, TINY_LOAD.turns // c) and r["turns_per_s"] > 0
        assert r["ops"]["turn"]["n"] == r["turns"] and r["ops"]["prefetch"]["p99"] > 0
        if "storm" not in side:
            assert r["refusals"] == {}, (side, c)
        if side.startswith("governed") and "storm" not in side:
            assert {"redeem", "admit", "prefetch", "save", "inspect"} <= set(r["ops"])
    storm = runs[("governed (storm)", 4)]["storm"]
    assert storm["withdrawn_scopes"] == max(1, round(TINY_LOAD.scopes * 0.1))
    assert (storm["rows_in_disabled_scopes"], storm["stale_generation_rows"],
            storm["rows_in_withdrawn_scopes_sql"]) == (0, 0, 0)
    assert storm["withdrawn_scopes_disabled_sql"] == storm["withdrawn_scopes"]
    assert "rows_in_deleted_pairs" in runs[("upstream (storm)", 4)]["storm"]
    table = load.render(result)
    assert "| 4 | governed |" in table and "Knee" in table and "governed (storm)" in table
    assert load.knee(result, "governed") in (1, None)
    assert "load average" in load.caption(result)


async def test_adk_turn_benchmark_at_a_tiny_size(database):
    """benchmarks/adk_turn.py: a real Runner per agent kind; every kind timed, the governed
    agent's auto-save ran."""
    turn = _load("kgm_benchmarks_adk_turn", "adk_turn.py")
    result = await turn.measure(database.dsn, database.owner_dsn, sessions=2, turns=5, facts=5,
                                scopes=2)
    for kind in turn.KINDS:
        assert len(result["times"][kind]["first"]) == 2
        assert len(result["times"][kind]["later"]) == 8
    assert len(result["autosave"]["governed"]) == 2
    assert result["outcomes"]["governed"]["request:ok"] == 20  # 4 sessions (2 warm-up) x 5: none refused
    assert "| governed |" in turn.render(result)


@pytest.mark.controller
async def test_adk_turn_benchmark_in_kagent_mode_at_a_tiny_size(database):
    """benchmarks/adk_turn.py --kagent: governed-kagent is timed through the compiled
    controller, and its turns were served (not refused, which would be cheaper)."""
    from support import go_controller

    from kagent_governed_memory.scope import generate_private_key, public_key_pem
    from kagent_governed_memory.store import migrate

    turn = _load("kgm_benchmarks_adk_turn", "adk_turn.py")
    await migrate(database.owner_dsn, local_server="example.org")
    bridge = generate_private_key()
    env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(bridge).decode(),
           "KAGENT_MEMORY_SCOPE_ISSUER": turn.ISSUER,
           "KGM_TESTSERVER_AGENTS": f"{turn.AGENT.namespace}/{turn.AGENT.name}"}
    try:
        # the controller's serving login (runtime + bridge + operator) where the fixture has
        # one (issue 25), else the application login
        running = go_controller.controller(getattr(database, "controller_dsn", "") or database.dsn,
                                           env=env)
        process = running.__enter__()
    except go_controller.Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")
    try:
        token = go_controller.service_account_token(turn.AGENT.namespace, turn.AGENT.name)
        result = await turn.measure(database.dsn, database.owner_dsn, sessions=2, turns=5,
                                    facts=5, scopes=2, kagent=(process.url, token, bridge))
    finally:
        running.__exit__(None, None, None)
    assert len(result["times"]["governed-kagent"]["later"]) == 8
    assert len(result["autosave"]["governed-kagent"]) == 2
    served = result["outcomes"]["governed-kagent"]
    assert served["request:ok"] == 20 and served["save:ok"] >= 2, served
    assert "| governed-kagent |" in turn.render(result)


@pytest.mark.controller
async def test_adk_turn_benchmark_on_kagent_main_at_a_tiny_size(database):
    """benchmarks/adk_turn.py --kagent-main: governed-kagent-main is timed through kagent
    main's compiled controller over gRPC, one runtime grant per request, and its turns were
    served (a refused request would be a cheaper turn)."""
    import uuid

    from support import go_controller

    from kagent_governed_memory.scope import generate_private_key, public_key_pem

    turn = _load("kgm_benchmarks_adk_turn", "adk_turn.py")
    import _kagent_main

    bridge = generate_private_key()
    env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(bridge).decode(),
           "KAGENT_MEMORY_SCOPE_ISSUER": turn.ISSUER}
    running = _kagent_main.controller(database.admin_dsn, local_server=turn.LOCAL, env=env,
                                      database=f"t_main_{uuid.uuid4().hex[:12]}")
    try:
        main = running.__enter__()
    except go_controller.Unavailable as exc:
        pytest.skip(f"KAGENT MAIN CONTROLLER NOT RUN: it cannot be compiled here ({exc})")
    try:
        result = await turn.measure(database.dsn, database.owner_dsn, sessions=2, turns=5,
                                    facts=5, scopes=2, main=main, bridge_key=bridge)
    finally:
        running.__exit__(None, None, None)
    assert len(result["times"]["governed-kagent-main"]["later"]) == 8
    assert len(result["autosave"]["governed-kagent-main"]) == 2
    served = result["outcomes"]["governed-kagent-main"]
    assert served["request:ok"] == 20 and served["save:ok"] >= 2, served
    assert served.get("prefetch:ok", 0) == 20, served  # the seeded facts were searched
    # one grant per request: 4 sessions (2 warm-up) x 5 turns, and one per seeded scope
    assert result["grants_minted"] == 20 + 2
    assert result["grant_mint_median_ms"] > 0
    assert "| governed-kagent-main |" in turn.render(result)


async def test_scaling_step_at_a_tiny_size(database):
    """benchmarks/scaling.py's measuring step on both layouts; migration 000010 leaves
    memory_entry in the inline layout."""
    scaling = _load("kgm_benchmarks_scaling", "scaling.py")
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from kagent_governed_memory.store import migrate

    dsn = await bench.prepare_schema(database.owner_dsn, "kgm_scale_tiny")
    opts = conninfo_to_dict(dsn)["options"]
    app = make_conninfo(database.dsn, options=opts)
    admin = make_conninfo(database.admin_dsn, options=opts)
    await migrate(dsn, local_server=bench.LOCAL)
    async with await bench.connect(admin) as conn:
        row = await (await conn.execute(
            "SELECT a.attstorage, c.reloptions FROM pg_attribute a JOIN pg_class c"
            " ON c.oid = a.attrelid WHERE a.attrelid = 'memory_entry'::regclass"
            " AND a.attname = 'embedding'")).fetchone()
        assert row[0] == "m" and "toast_tuple_target=8160" in row[1]
    size = bench.Size("tiny", 4, 5, (), recall_queries=16)
    async with await bench.connect(dsn) as conn:
        await bench.generate_source(conn, size, lambda _m: None)
        await bench.load_governed(conn, 0, 4, size, lambda _m: None)
        queries = [r[0].to_list() for r in await (await conn.execute(
            "SELECT embedding FROM bench_query ORDER BY i")).fetchall()]
    m = await scaling.measure_step(app, admin, 4, queries, 5, 1)
    assert m["recall"] == 1.0 and m["median"] > 0 and m["buffers_per_search"] > 0
    assert set(await scaling.sizes(admin)) == {"heap_mb", "toast_mb", "total_mb"}


# -- issue 29: the floor (governance against the same work by hand), at a tiny size ----------


async def test_floor_benchmark_at_a_tiny_size(database):
    """benchmarks/floor.py: the plain copies return the governed rows (checked inside), every
    row is timed, and the table states both ratios against their targets."""
    floor = _load("kgm_benchmarks_floor", "floor.py")
    size = bench.Size("tiny", scopes=4, facts=10, scaling=(), search_iters=12, warmup=2,
                      recall_queries=8, save_iters=8)
    result = await floor.run_floor(database.owner_dsn, database.dsn, database.admin_dsn, size)
    assert set(result["search"]) == {"select1", "plain", "plain_fn", "governed_sql", "governed"}
    assert all(s["n"] == 12 and s["median"] > 0 for s in result["search"].values())
    assert {k: s["n"] for k, s in result["save"].items()} == dict.fromkeys(floor.SAVES, 8)
    # the database's own per-function counters: every save runs memory_save and its trigger
    assert {"memory_save", "memory_entry_fence"} <= set(result["save_profile"])
    assert result["save_profile"]["memory_save"]["calls_per_save"] == 1
    table = floor.render(result)
    assert "governed search / plain:" in table and "governed save / plain insert:" in table


# -- issue 29 item 3: growth past 1M rows, at a tiny size --------------------------------------


def test_growth_benchmark_at_a_tiny_size():
    """benchmarks/growth.py: fenced rows, then bulk-copied rows that a search cannot tell from
    fenced ones (a bulk scope answers exactly what the fenced scope with the same facts does),
    recall 1.00, every round timed, and the disk guard stops growth before a step that would
    eat the reserve."""
    growth = _load("kgm_benchmarks_growth", "growth.py")
    import asyncio

    from kagent_governed_memory import GovernedMemoryStore
    from kagent_governed_memory.dev import EmbeddedPostgres

    with EmbeddedPostgres() as pg:
        out = growth.run_growth(pg, steps=[40, 80], small_rows=10, facts=5, iters=6, rounds=2,
                                fenced_upto=10, reserve_gb=0.0, buffers="default",
                                say=lambda _m: None, source_scopes=2)
        assert [m["rows"] for m in out["steps"]] == [40, 80] and out["stopped"] is None
        for m in out["steps"]:
            assert m["recall"] == 1.0 and m["buffers_per_search"] > 0
            assert len(m["rounds"]) == 2
            assert all(r[k]["median"] > 0 for r in m["rounds"] for k in ("small", "large"))
        assert out["steps"][1]["bulk_s"] >= 0 and out["steps"][0]["fenced_s"] > 0

        async def same_answers() -> None:
            app = growth.bench.with_search_path(pg.dsn, "kgm_growth_large")
            store = await GovernedMemoryStore.open(app, local_server=growth.bench.LOCAL,
                                                   sweep_every=None)
            try:
                q = [1.0] + [0.0] * 767
                for fenced, bulk in ((0, 2), (1, 15)):  # scope 2 and 15 reuse 0's and 1's facts
                    a = await store.search(growth.bench.scope_key(fenced), 1, q, limit=5)
                    b = await store.search(growth.bench.scope_key(bulk), 1, q, limit=5)
                    assert [h.text for h in a] == [h.text for h in b] and len(a) == 5
                st = await store.status(growth.bench.scope_key(15))
                assert st.entry_count == 5
                # column by column what a fenced save stores: the scope's generation, its TTL
                admin = growth.bench.with_search_path(pg.admin_dsn, "kgm_growth_large")
                async with await growth.bench.connect(admin) as adm:
                    row = await (await adm.execute(
                        "SELECT count(*), count(DISTINCT e.expires_at - e.created_at),"
                        " bool_and(e.generation = s.generation)"
                        " FROM memory_entry e JOIN memory_scope s ON s.id = e.scope_id")).fetchone()
                assert row == (80, 1, True)
            finally:
                await store.close()
        asyncio.run(same_answers())
        table = growth.render(out)
        assert "| 80 | 2 |" in table and "storage reads per search" in table
        # the disk guard: a reserve larger than the disk stops before the second step
        for schema in ("kgm_growth_small", "kgm_growth_large"):
            asyncio.run(growth.bench.drop_schema(pg.owner_dsn, schema))
        stopped = growth.run_growth(pg, steps=[40, 80], small_rows=10, facts=5, iters=2,
                                    rounds=1, fenced_upto=10, reserve_gb=1e6, buffers="default",
                                    say=lambda _m: None, source_scopes=2)
        assert [m["rows"] for m in stopped["steps"]] == [40]
        assert stopped["stopped"]["before_rows"] == 80
