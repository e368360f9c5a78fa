"""Inject, don't persist -- through kagent's REAL session path (issue 23, item 1).

The patched kagent-adk 0.9.11 runtime (the real wheel in the cached kagent venv, the series'
Python patches applied to a copy) runs a governed agent whose session service and task store
are kagent's own ``KAgentSessionService`` and ``KAgentTaskStore``, pointed at kagent's own
``/api/sessions`` and ``/api/tasks`` handlers (kagent's main API router, its database client,
its core migrations; ``tests/support/go_overlay/kagent_sessions_testserver_test.go``) in the patched
controller compiled from the Go series, on the same PostgreSQL database as its governed
memory listener.  ``kagent_runtime/sessions_driver.py`` runs the scenario: the bridge grants
consent, the agent saves two sentinel facts in an earlier request, a chat turn's scripted model
calls ``load_memory``; then the bridge forgets one fact and withdraws consent.  After each step,
as the PostgreSQL superuser, every table of the database (kagent's sessions, events, tasks,
legacy memory, the governed tables, ...), each row cast to text, is searched for the sentinels.

A recalled fact must reach the model's request, and after the forget and the withdrawal no table
may hold it: the runtime's governed ``load_memory`` answers with a count and opaque ids and
injects the text into that invocation's model request only.  A regression to the old tool (its
function response carrying the facts, persisted by kagent's session service in the ``event``
table and the A2A task's history) fails with ``PersistedRecall``, which names where.

Without Go or kagent's source this is reported as GO VERIFICATION NOT RUN (skipped, with the
reason); ``KGM_SKIP_KAGENT_RUNTIME=1`` skips it, as the other kagent runtime tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.kagent_runtime.patched_copy import (
    apply_series,
    copy_package,
    python_patches,
    site_packages,
)
from support.kagent_runtime.runtime_venv import (
    RuntimeUnavailable,
    default_constraints,
    ensure_venv,
    python_of,
)
from psycopg.conninfo import make_conninfo

from kagent_governed_memory.dev import CONTROLLER_ROLE, OWNER_ROLE, prepare_app_database

# the Python patch series against the compiled controller's sessions API
pytestmark = [pytest.mark.series, pytest.mark.controller]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parents[1] / "support" / "kagent_runtime"
DRIVER_TIMEOUT = 300
# kagent's tables the session path must have written (proves the search reaches them)
KAGENT_TABLES = ("public.session", "public.event", "public.task")

if os.environ.get("KGM_SKIP_KAGENT_RUNTIME", "").strip() not in ("", "0"):
    pytest.skip("KGM_SKIP_KAGENT_RUNTIME is set", allow_module_level=True)


class PersistedRecall(AssertionError):
    """A recalled fact is still in kagent's database after forget/withdraw, and only as what
    today's governed ``load_memory`` returns: its function response, persisted by kagent's
    session service (the ``event`` table) and task store (the ``task`` table)."""


@pytest.fixture(scope="module")
def report(tmp_path_factory, postgresql_proc) -> dict[str, Any]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from support.go_controller import (
        BRIDGE_SERVICE_ACCOUNT,
        Unavailable,
        serve_sessions,
        service_account_token,
    )

    from kagent_governed_memory.scope import private_key_pem, public_key_pem
    from kagent_governed_memory.store import migrate

    if shutil.which("git") is None:
        pytest.fail("git is needed to apply the patch series (git apply)", pytrace=False)
    started = time.monotonic()
    try:
        venv, _ = ensure_venv(default_constraints(REPO))
    except RuntimeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    python = python_of(venv)
    root = tmp_path_factory.mktemp("kagent-sessions")
    patched = copy_package(site_packages(python) / "kagent", root / "patched")
    apply_series(python_patches(), patched, root / "upstream-tests")

    name = f"s_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    owner_dsn = make_conninfo(base, user=OWNER_ROLE, dbname=name)
    admin_dsn = make_conninfo(base, dbname=name)  # the superuser: sees every row
    bridge = Ed25519PrivateKey.generate()
    import asyncio

    asyncio.run(migrate(owner_dsn, local_server="example.org"))  # the governed schema
    server_env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(bridge).decode(),
                  "KAGENT_MEMORY_SCOPE_ISSUER": "https://bridge.example.org"}
    log = root / "runtime.log"
    try:
        # governed memory: the controller's login; kagent's core tables: the database owner's
        # (kagent's migrations create them)
        with serve_sessions(make_conninfo(base, user=CONTROLLER_ROLE, dbname=name), owner_dsn,
                            env=server_env, log=root / "controller.log") as (url, sessions_url):
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env.update({
                "PYTHONPATH": os.pathsep.join([str(patched), str(REPO), str(HERE)]),
                "PYTHONDONTWRITEBYTECODE": "1",
                "KGM_TEST_CONTROLLER_URL": url,
                "KGM_TEST_SESSIONS_URL": sessions_url,
                "KGM_TEST_ADMIN_DSN": admin_dsn,
                "KGM_TEST_BRIDGE_KEY": private_key_pem(bridge).decode(),
                "KGM_TEST_BRIDGE_TOKEN": service_account_token(*BRIDGE_SERVICE_ACCOUNT),
                # the agent pod's governed memory token file content (KAGENT_MEMORY_TOKEN_FILE)
                "KGM_TEST_MEMORY_TOKEN": service_account_token("kagent", "my-agent"),
                "KGM_TEST_LOG_FILE": str(log),
            })
            done = subprocess.run([str(python), str(HERE / "sessions_driver.py")], env=env,
                                  capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                                  check=False)
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("KGM-REPORT ")]
    assert lines, (f"the sessions driver printed no report (exit {done.returncode}):\n"
                   f"{done.stderr[-4000:]}")
    out = json.loads(lines[-1].removeprefix("KGM-REPORT "))
    assert "driver_error" not in out, out["driver_error"]
    assert out["memory_service_file"].startswith(str(patched)), out["memory_service_file"]
    out["log_file"], out["controller_log"] = str(log), str(root / "controller.log")
    print(f"kagent sessions scenario: {time.monotonic() - started:.1f}s")
    return out


def _where(hits: list[dict[str, Any]]) -> list[str]:
    return sorted({h["table"] for h in hits})


def assert_held_nowhere(report: dict[str, Any], step: str, sentinel: str) -> None:
    """No table holds ``sentinel`` after ``step``: PersistedRecall when the only holders are
    kagent's event (and task) rows, and there only inside load_memory function responses."""
    hits = report[f"after_{step}"]["hits"][sentinel]
    if not hits:
        return
    leaves = [leaf for h in hits for leaf in h["leaves"]]
    tables = _where(hits)
    if "public.event" in tables and set(tables) <= {"public.event", "public.task"} \
            and all(h["leaves"] and all(leaf["in_load_memory_response"] for leaf in h["leaves"])
                    for h in hits):
        raise PersistedRecall(
            f"after {step}, the {sentinel} sentinel is still in {tables}: the load_memory "
            f"function response carrying it was persisted by kagent's session service "
            f"(paths: {sorted({leaf['path'] for leaf in leaves})})")
    raise AssertionError(f"after {step}, the {sentinel} sentinel is still in {tables} "
                         f"(leaves: {leaves})")


def test_recalled_facts_reach_the_model_but_no_table_after_forget_and_withdraw(report):
    r = report
    assert r["session_service"] == "kagent.adk._session_service.KAgentSessionService"
    assert r["seeded"] == {"forget": 1, "withdraw": 1}, r.get("seed_reasons")
    assert r["first_turn"].get("state") == "completed", r["first_turn"]
    assert r["recall_turn"].get("state") == "completed", r["recall_turn"]
    assert r["tool_called"] is True  # the model's follow-up request carried load_memory's turn
    # the recalled facts reached the model's request of that invocation
    for step, seen in r["reached_model"].items():
        assert seen["contents"] or seen["instruction"], (step, seen)

    # the search can fail: it finds the saved facts in the governed table, and the chat's
    # (non-secret) marker in kagent's own session, event and task rows
    recall = r["after_recall"]
    for step in ("forget", "withdraw"):
        assert "public.memory_entry" in _where(recall["hits"][step]), recall["hits"][step]
    assert set(KAGENT_TABLES) - {"public.session"} <= set(_where(recall["hits"]["marker"])), \
        recall["hits"]["marker"]
    assert all(recall["tables"].get(t, 0) > 0 for t in KAGENT_TABLES), recall["tables"]
    # every schema's tables: kagent's core and legacy memory tables, and the governed ones
    assert {"public.agent", "public.memory", "public.memory_scope", "public.memory_entry",
            "public.memory_audit", "public.schema_migrations"} <= set(recall["tables"])

    assert r["forget_receipt"] == {"deleted": 1, "verified": True}
    assert_held_nowhere(r, "forget", "forget")
    assert r["withdraw_receipt"] == {"verified": True}
    assert_held_nowhere(r, "withdraw", "forget")
    assert_held_nowhere(r, "withdraw", "withdraw")
