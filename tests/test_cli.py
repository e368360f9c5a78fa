"""The console script, run as a subprocess: demo (embedded PostgreSQL and --dsn), operator
commands with exit codes, and no memory text in operator output."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

from conftest import make_key, open_store, save

from kagent_governed_memory import _sql

PURPOSE = "personal_preferences"


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "KGM_DSN"} | (env or {})
    return subprocess.run([sys.executable, "-m", "kagent_governed_memory", *args],
                          capture_output=True, text=True, timeout=180, env=full_env, check=False)


def test_demo_on_embedded_postgres():
    done = run("demo")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "save before consent: refused: consent_required" in out
    assert "late save with the old generation: refused: stale_generation" in out
    assert "withdraw: disabled, deleted 2, verified True" in out
    assert "demo complete" in out


def test_demo_against_a_given_database(database):
    unmigrated = run("demo", "--dsn", database.dsn)
    assert unmigrated.returncode == 3
    assert "kagent-governed-memory migrate --dsn <owner DSN>" in unmigrated.stderr
    assert run("migrate", "--dsn", database.owner_dsn).returncode == 0
    done = run("demo", "--dsn", database.dsn)
    assert done.returncode == 0, done.stderr[-2000:]
    assert database.scalar("SELECT count(*) FROM memory_entry") == 0
    assert database.scalar("SELECT count(*) FROM memory_scope WHERE NOT enabled") == 1


async def test_operator_commands_are_content_free(database):
    secret = "SENTINEL-" + secrets.token_hex(8)
    as_app = run("migrate", "--dsn", database.dsn, "--json")
    assert as_app.returncode == 2, as_app.stdout  # the application login may not migrate
    assert "permission_denied" in as_app.stderr
    migrate = run("migrate", "--dsn", database.owner_dsn, "--json")
    assert migrate.returncode == 0, migrate.stderr
    assert json.loads(migrate.stdout)["applied"] == [m.version for m in _sql.migrations()]
    store = await open_store(database)
    key = make_key()
    try:
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, f"{secret} one", f"{secret} two")
    finally:
        await store.close()
    status = run("status", "--dsn", database.dsn, "--json", "--principal", key.principal.mxid,
                 "--namespace", key.agent.namespace, "--agent", key.agent.name,
                 "--room", key.scope.room_id)
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert (body["enabled"], body["entry_count"], body["scope_id"]) == (True, 2, key.opaque_id)
    sweep = run("sweep", "--dsn", database.dsn)
    assert sweep.returncode == 0 and "deleted: 0" in sweep.stdout
    off = run("offboard", "--dsn", database.owner_dsn, "--principal", key.principal.mxid, "--json")
    assert off.returncode == 0, off.stderr
    report = json.loads(off.stdout)
    assert report["ok"] and report["scopes"][0]["deleted"] == 2
    for done in (migrate, status, sweep, off):
        assert secret not in done.stdout + done.stderr
        assert key.principal.mxid not in done.stdout.replace(f"--principal {key.principal.mxid}", "")


def test_bad_database_is_a_clear_content_free_error():
    password = "pw" + secrets.token_hex(6)
    done = run("migrate", "--dsn",
               f"host=127.0.0.1 port=1 user=x password={password} dbname=y connect_timeout=1")
    assert done.returncode == 3
    assert "store_unavailable" in done.stderr and password not in done.stderr + done.stdout


def test_missing_dsn_and_bad_arguments():
    assert run("sweep").returncode == 2
    assert run("status", "--dsn", "x").returncode == 2  # argparse: required key flags
    assert run().returncode == 2
