"""Operator evidence: content-free store report, invariant verification, and the CLI around
them (L1-L3, U5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.db import physical_rows, save, scope_uuid
from support.scopes import make_key
from test_expiry import plant

PURPOSE = "personal_preferences"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KGM_DSN"}
    return subprocess.run([sys.executable, "-m", "kagent_governed_memory", *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


async def test_a_new_consent_starts_empty(store, database):
    """Rows kept from an expired consent are deleted when consent is granted again, so every
    stored row belongs to the current generation."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "from the first consent")
    with database.admin() as conn:
        conn.execute("UPDATE memory_scope SET consent_expires_at = now() - interval '1 second'")
    await store.grant(key, purpose=PURPOSE)
    assert physical_rows(database, key) == 0
    assert (await store.report()).violations == {}


async def test_report_and_verify_on_a_clean_store(store, database):
    keys = [make_key(f"@u{i}:example.org") for i in range(3)]
    for i, key in enumerate(keys):
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, *(f"fact {j}" for j in range(i + 1)))
    await store.withdraw(keys[0])
    report = await store.report()
    assert (report.scopes, report.scopes_enabled, report.entries_live) == (3, 2, 5)
    assert report.violations == {}
    done = cli("verify", "--dsn", database.dsn, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    status = cli("status", "--dsn", database.dsn, "--json")
    assert json.loads(status.stdout)["entries_live"] == 5
    for key in keys:
        assert key.principal.mxid not in status.stdout + done.stdout


@pytest.mark.parametrize("damage, violation", [
    ("stale", "stale_generation"),
    ("ttl", "ttl_exceeded"),
    ("disabled", "rows_in_disabled_scopes"),
    ("cap", "over_cap_scopes"),
    ("failed", "scopes_failed"),
])
async def test_verify_finds_each_violation(store, database, damage, violation):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "a fact")
    sid = scope_uuid(database, key)
    with database.admin() as conn:
        if damage == "stale":
            plant(conn, sid, g - 1, "old generation", "now() + interval '1 day'")
        elif damage == "ttl":
            conn.execute("SET session_replication_role = replica")
            conn.execute("UPDATE memory_entry SET expires_at = created_at + interval '30 days'")
        elif damage == "disabled":
            conn.execute("UPDATE memory_scope SET enabled = false")
        elif damage == "cap":
            conn.execute("UPDATE memory_scope SET entry_cap = 1")
            plant(conn, sid, g, "one too many", "now() + interval '1 day'")
        elif damage == "failed":
            conn.execute("UPDATE memory_scope SET enabled = false,"
                         " failure_reason = 'erasure_failed'")
            conn.execute("SET session_replication_role = replica")
            conn.execute("DELETE FROM memory_entry")
    report = await store.report()
    assert violation in report.violations
    assert report.violating_scope_ids == (sid,)  # which scope, by its random id
    done = cli("verify", "--dsn", database.dsn)
    assert done.returncode == 1 and f"VIOLATION {violation}" in done.stdout
    assert f"  scope {sid}" in done.stdout
    assert "a fact" not in done.stdout and "old generation" not in done.stdout


def test_cli_errors_have_exit_codes(database):
    assert cli("verify").returncode == 2  # no DSN
    assert cli("verify", "--dsn", "host=x port=notaport ===").returncode == 2
    bad_principal = cli("offboard", "--dsn", database.owner_dsn, "--principal", "alice")
    assert bad_principal.returncode == 2 and "invalid_identity" in bad_principal.stderr
    unreachable = cli("sweep", "--dsn", "host=127.0.0.1 port=1 connect_timeout=1")
    assert unreachable.returncode == 3
    partial = cli("status", "--dsn", database.dsn, "--principal", "@a:example.org")
    assert partial.returncode == 2
    missing_schema = cli("verify", "--dsn", database.dsn)
    assert missing_schema.returncode == 3 and "migrate" in missing_schema.stderr


async def test_offboard_cli_reports_progress_and_failures(store, database):
    key = make_key(agent="planner")
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "a fact")
    sid = scope_uuid(database, key)
    with database.admin() as conn:
        conn.execute("CREATE FUNCTION keep_rows() RETURNS trigger LANGUAGE plpgsql"
                     " AS $$ BEGIN RETURN NULL; END $$")
        conn.execute(f"CREATE TRIGGER keep_rows BEFORE DELETE ON memory_entry FOR EACH ROW"
                     f" WHEN (OLD.scope_id = '{sid}') EXECUTE FUNCTION keep_rows()")
    done = cli("offboard", "--dsn", database.owner_dsn, "--principal", key.principal.mxid)
    assert done.returncode == 1
    assert "verification_failed" in done.stdout and "offboarding" in done.stderr
    assert key.principal.mxid not in done.stdout


async def test_verify_names_the_overdue_scopes(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    sid = scope_uuid(database, key)
    with database.admin() as conn:
        plant(conn, sid, g, "long expired", "now() - interval '2 days'")
    done = cli("verify", "--dsn", database.dsn)
    assert done.returncode == 1 and "VIOLATION expired_overdue: 1" in done.stdout
    assert f"  scope {sid}" in done.stdout and "long expired" not in done.stdout
