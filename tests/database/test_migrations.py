"""The schema as golang-migrate files: idempotent, concurrent-safe, beside upstream's `memory`
table (expand, don't break), reversible; the planner searches exactly within one scope."""

from __future__ import annotations

import asyncio
import re
from importlib import resources

import psycopg
import pytest
from support.db import UPSTREAM_SHAPED_MEMORY, open_store, save, scope_uuid
from support.scopes import make_key, vec
from support.settings import LOCAL

from kagent_governed_memory import ReasonCode, StoreUnavailable
from kagent_governed_memory import store as governed_sql
from kagent_governed_memory.store import migrate

PURPOSE = "personal_preferences"
GOVERNED_TABLES = {"memory_scope", "memory_entry", "memory_audit", "memory_config",
                   "memory_principal_block", "memory_admission_bucket"}

def _tables(conn: psycopg.Connection) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return {r[0] for r in rows}


async def test_migrate_is_idempotent_and_recorded(database):
    store = await open_store(database)  # the application login
    try:
        assert await store.schema_version() is None
        with pytest.raises(StoreUnavailable) as err:  # it may not migrate; says what to run
            await store.migrate()
        assert err.value.reason is ReasonCode.SCHEMA_OUTDATED
        first = await migrate(database.owner_dsn, local_server=LOCAL)
        assert first == [m.version for m in governed_sql.migrations()] and first[0] == 15  # the baseline
        assert await migrate(database.owner_dsn) == []
        assert await store.migrate() == []  # current: nothing to do, no privilege needed
        assert await store.schema_version() == first[-1]
    finally:
        await store.close()
    with database.admin() as conn:
        assert GOVERNED_TABLES <= _tables(conn)
        rows = conn.execute("SELECT version FROM governed_memory_schema_migrations ORDER BY 1")
        assert [r[0] for r in rows] == first


async def test_concurrent_migrations_apply_once(database):
    results = await asyncio.gather(*(migrate(database.owner_dsn) for _ in range(4)))
    applied = [v for r in results for v in r]
    assert sorted(applied) == [m.version for m in governed_sql.migrations()]


async def test_beside_upstream_memory_table_and_reversible(database):
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute(UPSTREAM_SHAPED_MEMORY)
        conn.execute(
            "INSERT INTO memory (agent_name, user_id, content, embedding, metadata, created_at,"
            " expires_at) SELECT 'kagent__NS__my_agent', '@alice:example.org', 'old ' || g,"
            " array_fill(0.1, ARRAY[768])::vector, '{}', now(), NULL FROM generate_series(1, 5) g")
    await migrate(database.owner_dsn, local_server=LOCAL)
    store = await open_store(database)
    try:
        key = make_key()
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, "governed fact")
    finally:
        await store.close()

    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        # the old reader's query still works and never sees governed content
        old = conn.execute("SELECT content FROM memory WHERE agent_name = %s AND user_id = %s"
                           " ORDER BY embedding <=> array_fill(0.1, ARRAY[768])::vector LIMIT 10",
                           ["kagent__NS__my_agent", "@alice:example.org"]).fetchall()
        assert sorted(r[0] for r in old) == [f"old {i}" for i in range(1, 6)]
        # roll back: down files in reverse order
        for m in reversed(governed_sql.migrations()):
            conn.execute(m.down)
        conn.execute("DELETE FROM governed_memory_schema_migrations")
        assert not GOVERNED_TABLES & _tables(conn)
        assert conn.execute("SELECT count(*) FROM memory").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE 'memory\\_%'"
                            ).fetchone()[0] == 0

    # and forward again
    assert await migrate(database.owner_dsn) == [m.version for m in governed_sql.migrations()]


def test_migration_files_follow_upstream_conventions():
    folder = resources.files("kagent_governed_memory").joinpath("sql", "migrations")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    assert names and all(re.fullmatch(r"\d{6}_[a-z0-9_]+\.(up|down)\.sql", n) for n in names)
    stems = {n.rsplit(".", 2)[0] for n in names}
    assert {f"{s}.{d}.sql" for s in stems for d in ("up", "down")} == set(names)
    for name in names:
        text = folder.joinpath(name).read_text()
        code = re.sub(r"--[^\n]*", "", text)
        for stmt in re.findall(r"\b(CREATE\s+(?:TABLE|INDEX|EXTENSION)|DROP\s+(?:TABLE|INDEX|"
                               r"FUNCTION|POLICY|TRIGGER|EXTENSION))\b([^;]*)", code, re.IGNORECASE):
            assert re.match(r"\s*IF\s+(NOT\s+)?EXISTS", stmt[1], re.IGNORECASE), (name, stmt[0])
        assert not re.search(r"\bpublic\.\w", code), name
        # The only search_path statements: the file's transaction-local set_config (this
        # schema, pgvector's, pg_temp last) and `SET search_path FROM CURRENT` on functions.
        paths = re.findall(r"[^\n]*search_path[^\n]*", code, re.IGNORECASE)
        # (a down file that restores an earlier function definition sets it as well)
        restores = bool(re.search(r"CREATE\s+OR\s+REPLACE\s+FUNCTION", code, re.IGNORECASE))
        assert bool(paths) == (name.endswith(".up.sql") or restores), name
        for line in paths:
            assert (line.strip() == "SELECT pg_catalog.set_config('search_path', "
                    "pg_catalog.concat_ws(', ',"
                    or "SET search_path FROM CURRENT" in line), (name, line)
        assert not re.search(r"\bCREATE\s+(FUNCTION|TRIGGER)\b", code, re.IGNORECASE), (
            name, "use CREATE OR REPLACE so re-running is safe")


# The kagent controller's own statements (000011): a request's calls bound to its redemption.
# The library never serves a controller's routes; tests/database/test_boundary.py calls them as SQL.
# The bound statements of a request (000011): the controller's, and a runtime login's
# (000012), which the store picks with self._stmt(<unbound name>).
BOUND = {"SaveMemoryEntriesBound", "SearchMemoryEntriesBound", "SearchMemoryEntriesManyBound",
         "AdmitMemoryWorkBound", "ForgetMemoryEntryBound"}
GENERIC = "ByIssuer"  # 000016's issuer-generic twin of a version-15 keyed statement


def _sources(folder):
    """The text of every module under ``folder`` (the package and its subpackages)."""
    for p in folder.iterdir():
        if p.name.endswith(".py"):
            yield p.read_text()
        elif p.is_dir():
            yield from _sources(p)


def test_every_named_query_is_used_by_the_library():
    package = resources.files("kagent_governed_memory")
    store_src = "".join(_sources(package))
    text = resources.files("kagent_governed_memory").joinpath("sql", "queries.sql").read_text()
    names = re.findall(r"^-- name: (\w+) :(?:one|many|exec)$", text, re.MULTILINE)
    assert len(names) == len(set(names)) >= 13
    assert BOUND <= set(names)
    # version 15's keyed statements (the kagent series call them: the Matrix wrappers) each have
    # an issuer-generic twin, which the library uses instead of them
    twins = {n.removesuffix(GENERIC) for n in names if n.endswith(GENERIC)}
    assert len(twins) >= 24 and twins <= set(names)
    for name in names:
        if name in twins:  # never run as itself (self._stmt names the generic twin)
            assert re.search(rf'(?<!_stmt\()"{name}"', store_src) is None, name
            continue
        used = f'"{name}"' in store_src
        if name.endswith(GENERIC):
            unbound = name.removesuffix(GENERIC).removesuffix("Bound")
            used = used or f'self._stmt("{unbound}")' in store_src
        assert used, name
        assert re.search(r"\$\d", governed_sql.query(name)) or name in (
            "SweepExpiredMemory", "GetMemoryStoreReport", "GetMemorySchemaVersion",
            "GetMemoryLocalServer")


async def test_search_plan_is_an_exact_scope_index_scan(store, database):
    """The function's own inner plan (auto_explain, nested statements): an index scan on
    (scope_id, expires_at) and a sort by distance, no sequential scan, no ANN index."""
    keys = [make_key(f"@user{i}:example.org") for i in range(40)]
    for i, key in enumerate(keys):
        g = (await store.grant(key, purpose=PURPOSE)).generation
        await store.save(key, g, facts=[f"user {i} fact {j}" for j in range(50)],
                         embeddings=[vec(f"user {i} fact {j}") for j in range(50)])
    target = keys[7]
    g = await store.generation(target)
    plans: list[str] = []
    with database.admin() as conn:
        conn.execute("ANALYZE memory_entry")
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET client_min_messages = log")
        literal = "[" + ",".join(f"{v:.6f}" for v in vec("user 7 fact 3")) + "]"
        rows = conn.execute(
            "SELECT content FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,%s::vector,5)",
            ["matrix", target.principal.mxid, target.agent.namespace, target.agent.name,
             "control_room", target.scope.room_id, g, store.policy.version, literal]).fetchall()
        indexes = conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'memory_entry'"
                               ).fetchall()
    assert len(rows) == 5 and rows[0][0] == "user 7 fact 3"
    plan = "\n".join(p for p in plans if "memory_entry" in p and "Sort" in p)
    assert "idx_memory_entry_scope_expires" in plan, plans
    assert "Seq Scan on memory_entry" not in plan
    assert not any("hnsw" in i[0] or "ivfflat" in i[0] for i in indexes)
    assert scope_uuid(database, target)


@pytest.mark.parametrize("table", sorted(GOVERNED_TABLES))
async def test_no_schema_object_holds_content_outside_memory_entry(store, database, table):
    with database.admin() as conn:
        cols = conn.execute("SELECT column_name FROM information_schema.columns"
                            " WHERE table_name = %s", [table]).fetchall()
    names = {c[0] for c in cols}
    if table == "memory_entry":
        assert {"content", "embedding", "expires_at", "generation"} <= names
    else:
        assert not names & {"content", "embedding", "text", "query", "summary", "metadata"}
