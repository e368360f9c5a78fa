"""The test database handle (``Db``, what the ``database`` fixture of tests/conftest.py yields)
and the store helpers the tests share: migrate, register a policy, open a store, save, count.

Two roles, as in production (docs/database-roles.md): ``kgm_owner`` owns the database and runs
the migrations; the store connects as ``kgm_app``, a login whose only privilege is membership of
``kagent_memory_service`` (EXECUTE on the governed functions, no table privilege).
``Db.admin()`` is the superuser, used only for the test-only paths (planting rows with a past
clock, injecting faults, killing backends).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from kagent_governed_memory import GovernedMemoryStore, MemoryPolicy, ScopeKey
from kagent_governed_memory.store import migrate
from kagent_governed_memory.policy import PROTOTYPE_POLICY
from support.scopes import vec
from support.settings import LOCAL, POOL_TIMEOUT

# The column shape of upstream kagent's `memory` table (vector track 000001-000003), written
# here from its documented schema so the coexistence test has old rows to protect.
UPSTREAM_SHAPED_MEMORY = """
CREATE TABLE memory (
    id TEXT PRIMARY KEY DEFAULT gen_random_uuid()::text, agent_name TEXT, user_id TEXT,
    content TEXT, embedding vector(768), metadata TEXT, created_at TIMESTAMPTZ,
    expires_at TIMESTAMPTZ, access_count BIGINT DEFAULT 0)
"""


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


async def save(store: GovernedMemoryStore, key: ScopeKey, *facts: str,
               generation=None) -> list[str]:
    gen = generation if generation is not None else await store.generation(key)
    return await store.save(key, gen, facts=list(facts), embeddings=[vec(f) for f in facts])


def scope_uuid(db: Db, key: ScopeKey) -> str | None:
    value = db.scalar(
        "SELECT id::text FROM memory_scope WHERE principal_issuer_kind = %s"
        " AND principal_issuer = %s AND principal_subject = %s"
        " AND agent_namespace = %s AND agent_name = %s AND scope_kind = %s AND scope_ref = %s",
        [key.principal.issuer_kind, key.principal.issuer, key.principal.subject,
         key.agent.namespace, key.agent.name, key.scope.kind.value, key.scope.ref],
    )
    return value


def physical_rows(db: Db, key: ScopeKey | None = None) -> int:
    if key is None:
        return db.scalar("SELECT count(*) FROM memory_entry")
    sid = scope_uuid(db, key)
    if sid is None:
        return 0
    return db.scalar("SELECT count(*) FROM memory_entry WHERE scope_id = %s", [sid])
