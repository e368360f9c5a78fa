"""The kagent v0.9.11 Go patch series (patches/kagent-v0.9.11/000*.patch).

No network, no git mirror, no Go toolchain: everything is read from the patch files.

* drift: the SQL the patches carry is byte-identical to ``kagent_governed_memory/sql`` (the
  script's ``--check`` passes, and fails for a changed library or a hand-edited patch);
* form: every patch is ``git format-patch`` output, numbered in order;
* database: the migrations extracted from the patch upgrade a PostgreSQL that already holds
  upstream's vector track (000001-000003) and old rows without touching them, the governed
  functions work through the patch's own named statements, the patched legacy queries hide an
  expired row (the unpatched ones, from the same hunk, do not), and the down files roll the
  governed schema back while the old rows stay;
* the Go side agrees with the library on policy, SQLSTATE reasons, bucket ids and cursors.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from pgvector import Vector
from pgvector.psycopg import register_vector

from kagent_governed_memory.errors import _SQLSTATE
from kagent_governed_memory.identity import AgentIdentity, MemoryScope, Principal, ScopeKey
from kagent_governed_memory.policy import PROTOTYPE_POLICY
from kagent_governed_memory.store import _decode_cursor, _encode_cursor

# the Go patch series' files: drift, form, its migrations
pytestmark = pytest.mark.series

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "series"
PATCHES = ROOT / "patches" / "kagent-v0.9.11"
SQL_DIR = ROOT / "kagent_governed_memory" / "sql"
GO_SERIES = 12  # 0001-0012 (controller, CRD, chart); 0101-0103 are the Python runtime series

sys.path.insert(0, str(SCRIPT.parent))  # scripts/_series, the series tool's package
from _series import sync_sql as sps  # noqa: E402


def go_patch(number: int) -> Path:
    (found,) = PATCHES.glob(f"{number:04d}-*.patch")
    return found


def go_patches() -> list[Path]:
    return sorted(PATCHES.glob("00[0-9][0-9]-*.patch"))


def patch_creating(path: str) -> Path:
    """The Go patch that adds ``path`` (a prefix ending in "/": its first file there)."""
    for patch in go_patches():
        for section in sps.parse_patch(patch).sections:
            if (section.path == path or path.endswith("/") and section.path.startswith(path)) \
                    and section.hunks and section.hunks[0][0].startswith("@@ -0,0 "):
                return patch
    raise AssertionError(f"no Go patch adds {path}")


def patch_titled(words: str) -> Path:
    """The Go patch whose subject contains ``words``."""
    (found,) = [p for p in go_patches() if words in p.read_text().split("\n\n", 1)[0]]
    return found


MIGRATIONS_PATCH = lambda: patch_creating(sps.MIGRATIONS_PREFIX)  # noqa: E731
QUERIES_PATCH = lambda: patch_creating(sps.QUERIES_PATH)  # noqa: E731
EXPIRY_FIX = lambda: patch_titled("never return expired memories")  # noqa: E731
TTL_FIX = lambda: patch_titled("stop extending the TTL")  # noqa: E731


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "sync-sql", "--series", "v0.9.11", *args],
                          capture_output=True, text=True,
                          timeout=60, check=False)


def carried_migrations() -> dict[int, dict[str, str]]:
    """version -> {"up": sql, "down": sql}, from the migrations patch's added files."""
    out: dict[int, dict[str, str]] = {}
    # besides the migrations: sqlc's regenerated gen/models.go and the handler tests' reset
    others = {"go/core/internal/database/gen/models.go",
              "go/core/internal/httpserver/handlers/database_test.go"}
    for section in sps.parse_patch(MIGRATIONS_PATCH()).sections:
        if section.path in others or not section.path.startswith(sps.MIGRATIONS_PREFIX):
            continue
        m = re.fullmatch(re.escape(sps.MIGRATIONS_PREFIX) + r"(\d{6})_\w+\.(up|down)\.sql",
                         section.path)
        assert m, section.path
        out.setdefault(int(m.group(1)), {})[m.group(2)] = section.new_file_text()
    return out


def named_queries(text: str) -> dict[str, str]:
    """The library's (and the Go loader's) reading of sqlc-style named statements."""
    parts = re.split(r"^-- name: (\w+) :(?:one|many|exec|execrows)\s*$", text, flags=re.MULTILINE)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        out[name] = "\n".join(lines).strip().rstrip(";")
    return out


def memory_sql_images(patch: Path) -> tuple[str, str]:
    """(before, after) text of the memory.sql hunks of a legacy-query patch."""
    section = sps.parse_patch(patch).section(
        "go/core/internal/database/queries/memory.sql")
    assert section is not None
    before, after = [], []
    for _, body in section.hunks:
        for ln in body:
            if ln.startswith((" ", "-")) or ln == "":
                before.append(ln[1:])
            if ln.startswith((" ", "+")) or ln == "":
                after.append(ln[1:])
    return "\n".join(before), "\n".join(after)


# -- (a) drift -----------------------------------------------------------------------------


def baseline_parts(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(header, [(library file name, its text)]) of a carried governed baseline."""
    pieces = re.split(r"^-- from (\d{6}_\w+\.(?:up|down)\.sql)\n", text, flags=re.MULTILINE)
    return pieces[0], list(zip(pieces[1::2], pieces[2::2], strict=True))


def test_patch_sql_matches_the_library():
    result = run_script("--check")
    assert result.returncode == 0, result.stderr
    # ... and byte for byte, read independently of the script's own comparison: the governed
    # track's 000001 is the library's first migration (its baseline) under the carried header,
    # and every later library migration is a track file of its own, numbered after it, so a
    # database the track already brought to 000001 is upgraded rather than rebuilt
    library = sorted((SQL_DIR / "migrations").glob("*.sql"))
    versions = sorted({f.name[:6] for f in library})
    carried = carried_migrations()
    assert list(carried) == list(range(1, len(versions) + 1))
    for number, version in enumerate(versions, start=1):
        for direction, text in carried[number].items():
            header, parts = baseline_parts(text)
            (path,) = [f for f in library
                       if f.name.startswith(version) and f.name.endswith(f".{direction}.sql")]
            if number == 1:
                assert "kagent-governed-memory" in header and header.startswith("-- ")
            else:
                assert header == ""
            assert [name for name, _ in parts] == [path.name]
            assert parts[0][1].rstrip("\n") == path.read_text().rstrip("\n"), path.name
    queries = sps.parse_patch(QUERIES_PATCH()).section(sps.QUERIES_PATH)
    assert queries is not None
    assert queries.new_file_text().encode() == (SQL_DIR / "queries.sql").read_bytes()


def test_check_fails_when_the_library_changes(tmp_path):
    sql = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql)
    target = sql / "migrations" / "000015_governed_memory_baseline.up.sql"
    target.write_text(target.read_text() + "-- a later change\n")
    result = run_script("--check", "--sql-dir", str(sql))
    assert result.returncode == 1
    assert "000001_governed_memory.up.sql: differs from the library" in result.stderr
    assert "000001_governed_memory.down.sql" not in result.stderr

    shutil.rmtree(sql)
    shutil.copytree(SQL_DIR, sql)
    (sql / "migrations" / "000099_governed_memory_next.up.sql").write_text("SELECT 1;\n")
    (sql / "migrations" / "000099_governed_memory_next.down.sql").write_text("SELECT 2;\n")
    result = run_script("--check", "--sql-dir", str(sql))
    assert result.returncode == 1
    later = len({f.name[:6] for f in (sql / "migrations").glob("*.sql")})
    for direction in ("up", "down"):
        assert (f"{later:06d}_governed_memory_next.{direction}.sql: missing from the patch"
                in result.stderr)
    assert "000001_governed_memory" not in result.stderr


def test_check_fails_when_a_patch_is_hand_edited(tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES, patches)
    path = patches / QUERIES_PATCH().name
    text = path.read_text()
    assert "+-- name: SweepExpiredMemory :one\n" in text
    path.write_text(text.replace("+SELECT memory_sweep() AS deleted;",
                                 "+SELECT memory_sweep() AS removed;"))
    result = run_script("--check", "--patches-dir", str(patches))
    assert result.returncode == 1
    assert "governed_memory.sql: differs from the library" in result.stderr


def test_check_fails_when_the_controllers_schema_version_lags_the_library(tmp_path):
    # the controller serves only GovernedSchemaVersion; a migration that moves
    # memory_schema_version() without it makes every governed controller refuse to start
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES, patches)
    path = patches / MIGRATIONS_PATCH().name
    text = path.read_text()
    found = re.search(r"^\+const GovernedSchemaVersion = (\d+)$", text, re.MULTILINE)
    assert found, "the migrations patch declares GovernedSchemaVersion"
    lagging = int(found.group(1)) - 1
    path.write_text(text.replace(found.group(0), f"+const GovernedSchemaVersion = {lagging}"))
    result = run_script("--check", "--patches-dir", str(patches))
    assert result.returncode == 1
    assert f"GovernedSchemaVersion is {lagging}" in result.stderr
    assert run_script("--patches-dir", str(patches)).returncode == 2  # never rewritten silently


def test_rewrite_regenerates_hunks_and_leaves_the_rest(tmp_path):
    sql, patches = tmp_path / "sql", tmp_path / "patches"
    shutil.copytree(SQL_DIR, sql)
    shutil.copytree(PATCHES, patches)
    before = {p.name: p.read_bytes() for p in patches.glob("*.patch")}
    up = sps.MIGRATIONS_PREFIX + sps.BASELINE + ".up.sql"
    old_lines = len(carried_migrations()[1]["up"].splitlines())
    grown = sql / "migrations" / "000015_governed_memory_baseline.up.sql"
    grown.write_text(grown.read_text() + "".join(f"-- line {i}\n" for i in range(40)))
    queries = sql / "queries.sql"
    queries.write_text(queries.read_text() + "\n-- name: Extra :one\nSELECT 1;\n")

    result = run_script("--sql-dir", str(sql), "--patches-dir", str(patches))
    assert result.returncode == 0, result.stderr
    assert run_script("--check", "--sql-dir", str(sql), "--patches-dir", str(patches)
                      ).returncode == 0
    after = {p.name: p.read_bytes() for p in patches.glob("*.patch")}
    changed = {n for n in before if before[n] != after[n]}
    assert changed == {MIGRATIONS_PATCH().name, QUERIES_PATCH().name}

    migrations = sps.parse_patch(patches / MIGRATIONS_PATCH().name)
    section = migrations.section(up)
    assert section.hunks[0][0] == f"@@ -0,0 +1,{old_lines + 40} @@"
    assert section.new_file_text().encode() == sps.library_files(sql)[up]
    old = sps.parse_patch(MIGRATIONS_PATCH())
    assert migrations.preamble == old.preamble and migrations.trailer == old.trailer
    assert [s.lines() for s in migrations.sections if s.path != up] == \
        [s.lines() for s in old.sections if s.path != up]
    assert migrations.stat == sps.render_stat(migrations.sections)
    # the commit message and the other files of the queries patch are untouched
    old3 = sps.parse_patch(PATCHES / QUERIES_PATCH().name)
    new3 = sps.parse_patch(patches / QUERIES_PATCH().name)
    assert new3.preamble == old3.preamble and new3.trailer == old3.trailer
    assert [s.lines() for s in new3.sections if s.path != sps.QUERIES_PATH] == \
        [s.lines() for s in old3.sections if s.path != sps.QUERIES_PATH]

    git = shutil.which("git")
    if git:  # the regenerated new-file hunks apply (no base tree needed for new files)
        work = tmp_path / "empty"
        work.mkdir()
        for patch, include in ((MIGRATIONS_PATCH().name, up),
                               (QUERIES_PATCH().name, sps.QUERIES_PATH)):
            done = subprocess.run([git, "apply", "--check", f"--include={include}",
                                   str(patches / patch)], cwd=work, capture_output=True,
                                  text=True, check=False)
            assert done.returncode == 0, done.stderr


# -- (b) form ------------------------------------------------------------------------------


def test_patches_are_git_format_patch_output_in_order():
    files = sorted(PATCHES.glob("*.patch"))
    numbers = [int(p.name[:4]) for p in files]
    assert all(re.fullmatch(r"\d{4}-[\w.-]+\.patch", p.name) for p in files)
    assert len(numbers) == len(set(numbers))
    assert numbers[:GO_SERIES] == list(range(1, GO_SERIES + 1))
    for path in files:
        text = path.read_text()
        lines = text.split("\n")
        assert re.fullmatch(r"From [0-9a-f]{40} Mon Sep 17 00:00:00 2001", lines[0]), path.name
        headers = text.split("\n\n", 1)[0]
        assert re.search(r"^From: .+", headers, re.MULTILINE), path.name
        assert re.search(r"^Date: .+", headers, re.MULTILINE), path.name
        subject = re.search(r"^Subject: \[PATCH (\d+)/(\d+)\] (\S.*)", headers, re.MULTILINE)
        assert subject, path.name
        n, m = int(subject.group(1)), int(subject.group(2))
        assert n == int(path.name[:4]) and n <= m, path.name
        patch = sps.parse_patch(path)  # hunk counts consistent, sections well formed
        assert patch.sections, path.name
        assert sps.render_stat(patch.sections) == patch.stat, f"{path.name}: diffstat"
        assert "-- " in patch.trailer, path.name
        if n <= GO_SERIES:
            assert m == GO_SERIES
            assert re.match(r"(feat|fix|test)\((memory|memoryscope|adk|a2a|dbtest|api|controller|helm)\)!?: ",
                            subject.group(3)), subject.group(3)
        # the Developer Certificate of Origin sign-off is the contributor's to add, never ours
        assert "Signed-off-by:" not in text.split("\n---\n", 1)[0], path.name


def test_go_series_touches_only_go():
    for number in range(1, GO_SERIES + 1):
        for section in sps.parse_patch(go_patch(number)).sections:
            assert section.path.startswith(("go/", "helm/")), section.path


def test_migrations_follow_upstream_guards_and_leave_memory_alone():
    """Upstream's TestMigrationGuards / TestNoCrossTrackDDL regexes, on the carried files."""
    up_guards = [r"(?i)\bCREATE\s+TABLE\s+(\w+)",
                 r"(?i)\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:CONCURRENTLY\s+)?(\w+)",
                 r"(?i)\bCREATE\s+EXTENSION\s+(\w+)", r"(?i)\bADD\s+COLUMN\s+(\w+)"]
    down_guards = [r"(?i)\bDROP\s+TABLE\s+(\w+)", r"(?i)\bDROP\s+INDEX\s+(\w+)",
                   r"(?i)\bDROP\s+EXTENSION\s+(\w+)", r"(?i)\bDROP\s+COLUMN\s+(\w+)"]
    migrations = carried_migrations()
    assert sorted(migrations) == list(range(1, 1 + len(migrations)))
    for version, files in migrations.items():
        assert set(files) == {"up", "down"}, version
        for direction, guards in (("up", up_guards), ("down", down_guards)):
            for guard in guards:
                for m in re.finditer(guard, files[direction]):
                    assert m.group(1).lower() == "if", (version, direction, m.group(0))
        for text in files.values():
            touched = re.findall(r"(?i)ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)", text)
            touched += re.findall(r"(?i)CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                                  r"(?:\w+\s+)?ON\s+(\w+)", text)
            assert "memory" not in {t.lower() for t in touched}, version
            assert not re.search(r"(?i)\bDROP\s+(TABLE|EXTENSION)\s+IF\s+EXISTS\s+"
                                 r"(memory|vector)\s*;", text), version


def test_legacy_memory_sql_patches_add_expiry_then_remove_popularity_separately():
    """The read-time expiry fix changes no behaviour but hiding expired rows; the popularity TTL
    extension goes in a commit of its own, with its own release note."""
    before, after = memory_sql_images(EXPIRY_FIX())
    old, new = named_queries(before), named_queries(after)
    for name in ("SearchAgentMemory", "ListAgentMemories"):
        assert "expires_at > NOW()" not in old[name] and "expires_at > NOW()" in new[name]
    before, after = memory_sql_images(TTL_FIX())
    old, new = named_queries(before), named_queries(after)
    assert {"IncrementMemoryAccessCount", "ExtendMemoryTTL"} <= set(old)
    assert not {"IncrementMemoryAccessCount", "ExtendMemoryTTL"} & set(new)
    assert new["DeleteExpiredMemories"] == "DELETE FROM memory\nWHERE expires_at <= NOW()"
    assert "DeleteAgentMemoryByID" not in new  # the per-entry legacy delete is not added


# -- (c) database --------------------------------------------------------------------------

KEY = ["matrix", "@alice:example.org", "kagent", "my-agent", "control_room",
       "!control:example.org"]
AGENT, USER = "kagent__NS__my_agent", "@alice:example.org"
GOVERNED_TABLES = {"memory_scope", "memory_entry", "memory_audit", "memory_admission_bucket",
                   "memory_config", "memory_principal_block"}


def _vec(value: float) -> Vector:
    return Vector([value] * 768)


def _upstream_vector_track(conn: psycopg.Connection) -> None:
    """The state upstream's vector migrations 000001-000003 leave (written from its schema)."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS memory (id TEXT PRIMARY KEY, agent_name TEXT, user_id TEXT,"
        " content TEXT, embedding vector(768), metadata TEXT, created_at TIMESTAMPTZ,"
        " expires_at TIMESTAMPTZ, access_count BIGINT DEFAULT 0)")
    conn.execute("CREATE INDEX IF NOT EXISTS idx_memory_agent_user ON memory(agent_name, user_id)")
    conn.execute("CREATE INDEX IF NOT EXISTS idx_memory_expires_at ON memory(expires_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS idx_memory_embedding_hnsw ON memory"
                 " USING hnsw (embedding vector_cosine_ops)")
    conn.execute("ALTER TABLE memory ALTER COLUMN id SET DEFAULT gen_random_uuid()")
    rows = [  # id, agent, user, content, value, expires_at, access_count
        ("live", AGENT, USER, "old live fact", 0.5, "now() + interval '10 days'", 12),
        ("expired", AGENT, USER, "old expired fact", 0.5, "now() - interval '1 hour'", 15),
        ("other-user", AGENT, "@bob:example.org", "bob's fact", 0.5,
         "now() + interval '10 days'", 0),
    ]
    for rid, agent, user, content, value, expires, count in rows:
        conn.execute(
            "INSERT INTO memory (id, agent_name, user_id, content, embedding, metadata,"
            f" created_at, expires_at, access_count) VALUES (%s, %s, %s, %s, %s, '{{}}', now(),"
            f" {expires}, %s)", [rid, agent, user, content, _vec(value), count])


def _snapshot(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute("SELECT id, agent_name, user_id, content, embedding::text, metadata,"
                        " created_at, expires_at, access_count FROM memory ORDER BY id").fetchall()


def _governed_objects(conn: psycopg.Connection) -> tuple[set[str], int]:
    tables = {r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    functions = conn.execute("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON"
                             " n.oid = p.pronamespace WHERE n.nspname = current_schema()"
                             " AND p.proname LIKE 'memory\\_%'").fetchone()[0]
    return tables & GOVERNED_TABLES, functions


def _run(conn: psycopg.Connection, sql: str, params: list) -> list[tuple]:
    cur = psycopg.RawCursor(conn)
    cur.execute(sql, params)
    return cur.fetchall() if cur.description else []


def test_go_migrations_upgrade_and_roll_back_beside_upstream_memory(database):
    migrations = carried_migrations()
    legacy_before, legacy_after = (named_queries(t) for t in memory_sql_images(EXPIRY_FIX()))
    legacy_after |= named_queries(memory_sql_images(TTL_FIX())[1])  # the TTL-extension removal
    governed = named_queries(
        sps.parse_patch(QUERIES_PATCH()).section(sps.QUERIES_PATH).new_file_text())

    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:  # the owner: RLS applies
        _upstream_vector_track(conn)
        old_rows = _snapshot(conn)

        # Unpatched controller: the expired row is still served.
        found = _run(conn, legacy_before["SearchAgentMemory"], [_vec(0.5), AGENT, USER, 10])
        assert {r[0] for r in found} == {"live", "expired"}

        # Upgrade: the governed track's files in order, each as one statement batch (golang-migrate).
        for version in sorted(migrations):
            conn.execute(migrations[version]["up"])
        assert _snapshot(conn) == old_rows
        assert _governed_objects(conn)[0] == GOVERNED_TABLES
        # the guards make a re-run of the newest library file harmless (an older file cannot
        # run again over a newer one: 000016 renames room_id, which 000015's SQL functions name)
        newest = migrations[max(migrations)]["up"]
        assert newest.startswith("-- from 000016_governed_memory_issuers.up.sql\n")
        conn.execute(newest)

        # The governed functions, through the patch's own named statements.
        assert _run(conn, governed["GetMemoryGeneration"],
                    [*KEY, PROTOTYPE_POLICY.version, "personal", ["example.org"]]) == [(None,)]
        # S5: the controller records its local homeserver once (at start-up) before any grant.
        assert _run(conn, governed["ConfigureMemoryStore"], ["example.org"]) == [("example.org",)]
        (scope_id, generation, _, _), = _run(conn, governed["GrantMemoryScope"], [
            *KEY, "personal_preferences", PROTOTYPE_POLICY.version,
            PROTOTYPE_POLICY.embedding_dimension, "personal", ["example.org"]])
        ids = [r[0] for r in _run(conn, governed["SaveMemoryEntries"],
                                  [*KEY, generation, PROTOTYPE_POLICY.version,
                                   ["prefers dark mode"], [_vec(0.5)]])]
        hits = _run(conn, governed["SearchMemoryEntries"],
                    [*KEY, generation, PROTOTYPE_POLICY.version, _vec(0.5), 5])
        assert [h[1] for h in hits] == ["prefers dark mode"]
        with pytest.raises(psycopg.Error) as stale:
            _run(conn, governed["SearchMemoryEntries"],
                 [*KEY, generation + 1, PROTOTYPE_POLICY.version, _vec(0.5), 5])
        assert stale.value.sqlstate == "KGS01"
        assert _run(conn, governed["AdmitMemoryWork"], [
            *KEY, generation, PROTOTYPE_POLICY.version, 1, True, None]) == [(0,)]
        assert _run(conn, governed["ForgetMemoryEntry"], [*KEY, ids[0]]) == [(generation, 1)]
        assert _run(conn, governed["VerifyMemoryErasure"],
                    [*KEY, None, ids[0], False])[0][1] is not None
        assert _snapshot(conn) == old_rows  # governed content never reaches `memory`
        assert scope_id

        # Patched controller: expired rows are hidden from search and list, popularity or not.
        found = _run(conn, legacy_after["SearchAgentMemory"], [_vec(0.5), AGENT, USER, 10])
        assert [r[0] for r in found] == ["live"]
        listed = _run(conn, legacy_after["ListAgentMemories"], [AGENT, "kagent__NS__my-agent",
                                                                 USER])
        assert [r[0] for r in listed] == ["live"]
        assert conn.execute("SELECT count(*) FROM memory").fetchone()[0] == 3
        _run(conn, legacy_after["DeleteExpiredMemories"], [])
        assert {r[0] for r in conn.execute("SELECT id FROM memory")} == {"live", "other-user"}
        remaining = _snapshot(conn)

        # Roll back: the down files in reverse order remove every governed object.
        for version in sorted(migrations, reverse=True):
            conn.execute(migrations[version]["down"])
        assert _governed_objects(conn) == (set(), 0)
        assert _snapshot(conn) == remaining
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
                            ).fetchone()[0] == 1

        # ... and forward again.
        for version in sorted(migrations):
            conn.execute(migrations[version]["up"])
        assert _governed_objects(conn)[0] == GOVERNED_TABLES
        assert _snapshot(conn) == remaining


# -- (d) the Go code agrees with the library ------------------------------------------------


def _added_go(path: str) -> str:
    section = sps.parse_patch(patch_creating(path)).section(path)
    assert section is not None, path
    return section.new_file_text()


HANDLERS = "go/core/internal/httpserver/handlers/"


def _added_go_lines(path: str) -> str:
    """Every line the Go patches add to ``path`` (an upstream file they change)."""
    out: list[str] = []
    for patch in go_patches():
        section = sps.parse_patch(patch).section(path)
        if section is not None:
            out += [ln[1:] for _, lines in section.hunks for ln in lines if ln.startswith("+")]
    return "\n".join(out)


def _later_go_lines(path: str) -> str:
    """The lines later Go patches add to ``path`` (after the patch that created it)."""
    out: list[str] = []
    first = patch_creating(path)
    for patch in go_patches():
        if patch.name > first.name:
            section = sps.parse_patch(patch).section(path)
            if section is not None:
                out += [ln[1:] for _, lines in section.hunks for ln in lines
                        if ln.startswith("+")]
    return "\n".join(out)


def test_go_policy_and_admission_mirror_the_library():
    """The controller names the registered prototype policy and keeps only the limits it uses
    for early refusals; the database holds (and enforces) the policy itself."""
    go = _added_go(HANDLERS + "memory_governed.go")
    p = PROTOTYPE_POLICY
    assert f'const GovernedMemoryPolicyVersion = "{p.version}"' in go
    known = go.split("var governedMemoryPolicy = struct {", 1)[1].split("\n\n", 1)[0]
    assert (f"Version: GovernedMemoryPolicyVersion, EntryCap: {p.entry_cap}, "
            f"FactMaxBytes: {p.fact_max_bytes}}}") in known
    api = _added_go_lines("go/api/v1alpha2/agent_types.go")
    assert re.search(rf"^(?:const )?\s*DefaultGovernedEmbeddingDimension\s*=\s*{p.embedding_dimension}\b",
                     api, re.MULTILINE), "the Agent's default embedding dimension"
    assert re.search(rf"^\tgovernedDefaultSearchLimit += {p.search_limit}$", go, re.MULTILINE)
    # no bucket capacity or refill rate is left in Go: memory_admit reads the scope's policy
    for gone in ("governedScopeOpsPerHour", "governedExplicitBurst",
                 "governedExplicitOpsPerMinute", "MemoryAdmissionBucket"):
        assert gone not in go, gone


def test_go_sqlstate_reasons_agree_with_the_library():
    go = _added_go(HANDLERS + "memory_governed.go")
    later = _later_go_lines(HANDLERS + "memory_governed.go")
    block = go.split("var governedSQLState = map[string]string{", 1)[1].split("}", 1)[0]
    block += "\n" + later
    consts = dict(re.findall(r'^\t(reason\w+)\s+= "(\w+)"$', go + "\n" + later, re.MULTILINE))
    mapping = {code: consts[const] for code, const in re.findall(r'"(\w{5})": (reason\w+),', block)}
    for code, reason in mapping.items():
        if code in _SQLSTATE:
            assert _SQLSTATE[code][1].value == reason, code
    # every SQLSTATE the governed schema raises (class KG) has the library's reason in Go too,
    # but those the series can never receive: 000016's issuer refusals, raised only by the
    # issuer-generic signatures (the series calls version 15's, whose grant answers them as
    # KGD02), and KGR05, raised only by the migration files themselves (the Job reports it)
    never = {"KGD04", "KGD05", "KGD06", "KGD07", "KGR05"}
    ours = {code for code in _SQLSTATE if code.startswith("KG")} - never
    assert ours <= set(mapping), sorted(ours - set(mapping))
    assert never <= set(_SQLSTATE)  # (so this exception cannot outlive the codes)


def test_go_test_vectors_are_the_libraries():
    """The Go tests pin opaque ids and an inspect cursor; recompute them here."""
    go = _added_go(HANDLERS + "memory_governed_internal_test.go")
    key = ScopeKey(principal=Principal(mxid=KEY[1], origin="native_local"),
                   agent=AgentIdentity(namespace=KEY[2], name=KEY[3]),
                   scope=MemoryScope.control_room(KEY[5]))
    assert f'assert.Equal(t, "{key.opaque_id}", opaqueScopeID(key))' in go
    # the sender's admission bucket is the database's since 000012 (memory_admit derives it
    # from the key): no Go digest of it is left to pin
    cursor = re.search(r'const libraryCursor = "([\w-]+)"', go).group(1)
    entry = re.search(r'entryID := "([0-9a-f-]{36})"', go).group(1)
    created = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert "time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)" in go
    assert _encode_cursor(key, created, uuid.UUID(entry)) == cursor
    assert _decode_cursor(key, cursor) == (created, uuid.UUID(entry))
    handler_test = _added_go(HANDLERS + "memory_governed_test.go")
    assert f'"{key.opaque_id}", resp["scope_id"]' in handler_test


def test_go_routes_are_the_contracts():
    contract = (ROOT / "upstream-pr" / "governed-memory-api.md").read_text()
    routes = set(re.findall(r"^\| `POST /([\w-]+)`", contract, re.MULTILINE))
    server = _added_go("go/core/internal/httpserver/governed_memory.go")
    registered = set(re.findall(r'APIPathGovernedMemories\+"/([\w-]+)"', server))
    assert routes and registered == routes


def test_the_verifier_patch_carries_the_shared_vectors(tmp_path):
    """The Go verifier's testdata is byte for byte tests/support/vectors/scope_assertion_v1.json, and
    --check notices when the two part."""
    patch = sps.parse_patch(patch_creating(sps.VECTORS_PATH))
    carried = patch.section(sps.VECTORS_PATH)
    assert carried is not None
    assert carried.new_file_text() == sps.DEFAULT_VECTORS.read_text()
    changed = tmp_path / "vectors.json"
    changed.write_text(sps.DEFAULT_VECTORS.read_text().replace("assertion_invalid",
                                                               "assertion_valid", 1))
    result = run_script("--check", "--vectors", str(changed))
    assert result.returncode == 1
    assert "scope_assertion_v1.json: differs from the library" in result.stderr


PYTHON_VECTORS_PATH = "python/packages/kagent-adk/tests/fixtures/scope_assertion_v1.json"


def test_the_python_series_carries_the_shared_vectors():
    """kagent-adk's tests read their own copy of the scope-assertion vectors (so the Python
    package's tests stand alone); it is byte for byte tests/support/vectors/scope_assertion_v1.json,
    the file the Go verifier's testdata must equal too (the check above)."""
    carried = [section.new_file_text() for patch in sorted(PATCHES.glob("01[0-9][0-9]-*.patch"))
               if (section := sps.parse_patch(patch).section(PYTHON_VECTORS_PATH)) is not None]
    assert len(carried) == 1, "exactly one Python patch should add the vectors fixture"
    assert carried[0] == sps.DEFAULT_VECTORS.read_text()
    sections = [section for patch in sorted(PATCHES.glob("01[0-9][0-9]-*.patch"))
                if (section := sps.parse_patch(patch).section(
                    "python/packages/kagent-adk/tests/unittests/test_memory_scope.py")) is not None]
    lines = [ln for section in sections for _, body in section.hunks for ln in body]
    added = [ln[1:] for ln in lines if ln.startswith("+")]
    removed = [ln[1:] for ln in lines if ln.startswith("-")]
    # whatever the series once added that reads the Go tree's copy, it removes again
    reads_go = [ln for ln in added if "go/core/internal/memoryscope" in ln and "#" not in ln]
    assert len(reads_go) == len([ln for ln in removed if ln in reads_go]), reads_go
    assert any('"fixtures" / "scope_assertion_v1.json"' in ln for ln in added)
