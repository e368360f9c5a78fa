"""The console script, run as a subprocess: demo (embedded PostgreSQL and --dsn), operator
commands with exit codes, and no memory text in operator output."""

from __future__ import annotations

import json
import re
import secrets

from support.cli import run
from support.db import open_store, save
from support.scopes import make_key

from kagent_governed_memory import store as governed_sql

PURPOSE = "personal_preferences"


def test_demo_on_embedded_postgres():
    # $KGM_DSN is never the demo's database: an unreachable one changes nothing
    done = run("demo", env={"KGM_DSN": "host=127.0.0.1 port=1 user=x dbname=y"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "save before consent: refused: consent_required" in out
    assert "late save with the old generation: refused: stale_generation" in out
    assert "withdraw: disabled, deleted 2, verified True" in out
    assert "demo complete" in out
    assert "$KGM_DSN is never used" in out
    assert re.search(r"consent until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", out)


def test_demo_against_a_given_database(database):
    unmigrated = run("demo", "--dsn", database.dsn)
    assert unmigrated.returncode == 3
    assert "kagent-governed-memory migrate --dsn <owner DSN>" in unmigrated.stderr
    assert run("migrate", "--dsn", database.owner_dsn).returncode == 0
    done = run("demo", "--dsn", database.dsn)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "using the database of --dsn" in done.stdout  # never silently
    assert database.scalar("SELECT count(*) FROM memory_entry") == 0
    assert database.scalar("SELECT count(*) FROM memory_scope WHERE NOT enabled") == 1


async def test_operator_commands_are_content_free(database):
    secret = "SENTINEL-" + secrets.token_hex(8)
    as_app = run("migrate", "--dsn", database.dsn, "--json")
    assert as_app.returncode == 4, as_app.stdout  # the application login may not migrate
    assert json.loads(as_app.stdout)["error"] == "permission_denied" and not as_app.stderr
    migrate = run("migrate", "--dsn", database.owner_dsn, "--json")
    assert migrate.returncode == 0, migrate.stderr
    assert json.loads(migrate.stdout)["applied"] == [m.version for m in governed_sql.migrations()]
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


def test_demo_json_is_one_json_object(database):
    assert run("migrate", "--dsn", database.owner_dsn).returncode == 0
    done = run("demo", "--dsn", database.dsn, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    body = json.loads(done.stdout)
    assert body["ok"] is True
    steps = {s["step"]: s["outcome"] for s in body["steps"]}
    assert steps["late save with the old generation"] == "refused: stale_generation"
    assert "Alice" not in done.stdout  # the facts' text stays out of the JSON


def test_a_refused_login_is_a_configuration_error(database):
    """An unknown role or database is exit 4 (configuration), not 3 (retry later), plain and
    --json, and neither the role nor the password is echoed."""
    password = "pw" + secrets.token_hex(6)
    role = "nosuch_" + secrets.token_hex(4)
    unknown_role = database.dsn.replace("user=kgm_app", f"user={role}") + f" password={password}"
    for command in (["status"], ["migrate"], ["verify"]):
        plain = run(*command, "--dsn", unknown_role)
        assert plain.returncode == 4, (command, plain.stderr)
        assert "login_refused" in plain.stderr and "dev-db" in plain.stderr
        as_json = run(*command, "--dsn", unknown_role, "--json")
        assert as_json.returncode == 4 and json.loads(as_json.stdout)["exit_code"] == 4
        for done in (plain, as_json):
            assert password not in done.stdout + done.stderr
            assert role not in done.stdout + done.stderr
    no_db = run("status", "--dsn", database.dsn.replace("dbname=", "dbname=x"), "--json")
    assert no_db.returncode == 4 and json.loads(no_db.stdout)["error"] == "login_refused"


async def test_library_open_says_login_refused(database):
    from kagent_governed_memory import GovernedMemoryStore, InvalidInput

    dsn = database.dsn.replace("user=kgm_app", "user=nosuch_role")
    try:
        await GovernedMemoryStore.open(dsn, local_server="example.org", timeout=1.0)
    except InvalidInput as exc:
        assert exc.reason.value == "login_refused" and "nosuch_role" not in str(exc)
    else:
        raise AssertionError("opened with an unknown role")


def test_json_errors_are_json():
    for args in (["sweep", "--json"], ["status", "--dsn", "host=x port=notaport ===", "--json"],
                 ["verify", "--json", "--dsn", "host=127.0.0.1 port=1 connect_timeout=1"]):
        done = run(*args)
        body = json.loads(done.stdout)
        assert body["ok"] is False and body["exit_code"] == done.returncode != 0
        assert body["error"] in ("invalid_argument", "store_unavailable") and not done.stderr


def test_usage_errors_under_json_are_json_and_quote_nothing():
    secret = "s3ntinel-pw"
    for args in (["status", "--json", "--no-such-flag", f"postgresql://u:{secret}@h/db"],
                 ["--json", "no-such-command"], ["offboard", "--json"]):
        done = run(*args)
        body = json.loads(done.stdout)
        assert done.returncode == 2 and body == {
            "ok": False, "error": "usage", "exit_code": 2,
            "message": "the command line was not understood: see --help"}
        assert secret not in done.stdout + done.stderr
    plain = run("status", "--no-such-flag")  # without --json: argparse's usage text
    assert plain.returncode == 2 and "usage:" in plain.stderr and not plain.stdout


def test_every_command_has_a_description_and_exit_codes():
    from kagent_governed_memory.cli import _parser

    commands = ["demo", "dev-db", "migrate", "sweep", "status", "verify", "offboard", "unblock",
                "keys", "keys generate", "keys public-key", "keys jwks"]
    for command in commands:
        done = run(*command.split(), "--help")
        assert done.returncode == 0
        head = done.stdout.split("options:")[0]
        assert len(head.splitlines()) > 3, command  # usage, blank, a description
        assert "exit codes: see kagent-governed-memory --help" in done.stdout, command
    assert "4  configuration" in run("--help").stdout
    # the --local-server default is what its help says
    local = _parser().parse_args(["status"])
    assert local.local_server is None  # resolved in main(): $KGM_LOCAL_SERVER, else example.org
    assert "else example.org" in run("status", "--help").stdout


async def test_status_text_has_dates_zones_and_human_durations(database):
    assert run("migrate", "--dsn", database.owner_dsn).returncode == 0
    key = make_key()
    s = await open_store(database)
    try:
        await s.grant(key, purpose=PURPOSE)
    finally:
        await s.close()
    done = run("status", "--dsn", database.dsn, "--principal", key.principal.mxid,
               "--namespace", key.agent.namespace, "--agent", key.agent.name,
               "--room", key.scope.room_id)
    assert done.returncode == 0, done.stderr
    assert "max_ttl: 7 days" in done.stdout and "P7D" not in done.stdout
    assert re.search(r"consent_expires_at: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00",
                     done.stdout), done.stdout


def test_human_duration_and_timestamp():
    from datetime import datetime, timedelta, timezone

    from kagent_governed_memory.cli import human_duration, timestamp

    assert human_duration(timedelta(days=7)) == "7 days"
    assert human_duration(timedelta(days=1, hours=2)) == "1 day 2 hours"
    assert human_duration(timedelta(seconds=90)) == "1 minute 30 seconds"
    assert human_duration(timedelta(0)) == "0 seconds"
    assert timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))) == \
        "2026-01-02T01:04:05+00:00"
