"""Migration 000016 on a database version 15 left with data, and back (issue 47).

Version 15's data is written through version 15's own SQL (the packaged baseline applied
alone), as a deployment of it would have: a consent with entries, a withdrawn scope, an
offboarded principal's block.  The upgrade must keep every consent, generation, entry and block;
the down migration must give back version 15's catalog exactly (compared with ``pg_dump`` on two
private clusters, as tests/database/test_schema_baseline.py compares the baseline) and refuse,
changing nothing, while data version 15 cannot hold exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from support.db import open_store
from support.scopes import make_key, vec
from support.settings import LOCAL
from test_expiry import _key_args, _vector_literal
from test_schema_baseline import Cluster, apply_packaged, catalog, differences

from kagent_governed_memory import (
    AgentIdentity,
    GovernanceError,
    MemoryScope,
    OidcIssuer,
    Principal,
    ReasonCode,
    ScopeDenied,
    ScopeKey,
)
from kagent_governed_memory.store import migrate, migrations
from kagent_governed_memory.policy import PROTOTYPE_POLICY

PURPOSE = "personal_preferences"
VERSION = PROTOTYPE_POLICY.version
M16 = next(m for m in migrations() if m.version == 16)
ALICE, BOB, CAROL = (make_key(), make_key("@bob:example.org", room="!control-b:example.org"),
                     make_key("@carol:example.org", room="!control-c:example.org"))
# the durable state an upgrade must keep, by scope id (key columns excepted: they change form)
SCOPES = ("SELECT id, principal_subject, agent_namespace, agent_name, scope_kind, enabled,"
          " purpose, policy_version, generation, consent_granted_at, consent_expires_at, max_ttl,"
          " entry_cap, fact_max_bytes, embedding_dimension, classification, output_audience,"
          " last_verified_erasure_at, failure_reason, failure_at, created_at"
          " FROM memory_scope ORDER BY id")
ENTRIES = "SELECT id, scope_id, content, generation, created_at, expires_at FROM memory_entry" \
          " ORDER BY id"
AUDIT = "SELECT count(*), max(id) FROM memory_audit"


def at_15_with_data(owner_dsn: str, app_dsn: str, operator_dsn: str, *,
                    applied: bool = False) -> None:
    """Version 15 as a deployment left it: alice consented with two entries, carol consented
    then withdrew, bob was offboarded (his block stays)."""
    if not applied:
        apply_packaged(owner_dsn, upto=15)
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT memory_configure(%s)", [LOCAL])
    grant = ("SELECT generation FROM memory_grant(%s,%s,%s,%s,%s,%s,%s,%s,768,'personal',"
             "ARRAY['example.org'])")
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        for key in (ALICE, BOB, CAROL):
            g = conn.execute(grant, [*_key_args(key), PURPOSE, VERSION]).fetchone()[0]
            facts = [f"{key.principal.subject} fact {i}" for i in range(2)]
            conn.execute("SELECT count(*) FROM memory_save(%s,%s,%s,%s,%s,%s,%s,%s,%s,"
                         "%s::vector[])", [*_key_args(key), g, VERSION, facts,
                                           [_vector_literal(f) for f in facts]])
        conn.execute("SELECT * FROM memory_disable(%s,%s,%s,%s,%s,%s)", _key_args(CAROL))
        conn.execute("SELECT * FROM memory_clear(%s,%s,%s,%s,%s,%s,false)", _key_args(CAROL))
        conn.execute("SELECT * FROM memory_verify_erasure(%s,%s,%s,%s,%s,%s,NULL,NULL,true)",
                     _key_args(CAROL))
    with psycopg.connect(operator_dsn, autocommit=True) as conn:
        conn.execute("SELECT * FROM memory_disable_principal('matrix', %s)",
                     [BOB.principal.subject])
        conn.execute("SELECT * FROM memory_clear(%s,%s,%s,%s,%s,%s,false)", _key_args(BOB))
        conn.execute("SELECT * FROM memory_verify_erasure(%s,%s,%s,%s,%s,%s,NULL,NULL,true)",
                     _key_args(BOB))
        assert conn.execute("SELECT purged FROM memory_purge_principal('matrix', %s)",
                            [BOB.principal.subject]).fetchone()[0] == 1


def snapshot(dsn: str) -> dict[str, object]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {name: conn.execute(q).fetchall() for name, q in
                (("scopes", SCOPES), ("entries", ENTRIES), ("audit", AUDIT),
                 ("blocks", "SELECT principal_ref, blocked_at FROM memory_principal_block"))}


def apply_down(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(M16.down)  # type: ignore[arg-type]
        conn.execute("DELETE FROM governed_memory_schema_migrations WHERE version = 16")
        conn.execute("RESET search_path")


# -- upgrade ------------------------------------------------------------------------------------


async def test_an_upgrade_keeps_every_consent_generation_entry_and_block(database):
    at_15_with_data(database.owner_dsn, database.dsn, database.operator_dsn)
    before = snapshot(database.admin_dsn)
    assert before["scopes"] and len(before["entries"]) == 2 and len(before["blocks"]) == 1

    assert await migrate(database.owner_dsn) == [16]

    assert snapshot(database.admin_dsn) == before
    with database.admin() as conn:
        assert conn.execute("SELECT memory_schema_version()").fetchone()[0] == 16
        assert conn.execute(
            "SELECT DISTINCT principal_issuer_kind, principal_issuer FROM memory_scope"
        ).fetchall() == [("matrix", LOCAL)]
        assert conn.execute(  # the Matrix issuer, registered because consents exist
            "SELECT issuer_kind, issuer, scope_kind, enabled FROM memory_issuer").fetchall() == [
            ("matrix", LOCAL, "control_room", True)]
        assert conn.execute("SELECT principal_issuer_kind, principal_issuer"
                            " FROM memory_principal_block").fetchall() == [("matrix", LOCAL)]
    store = await open_store(database)  # the issuer-generic statements
    try:
        status = await store.status(ALICE)
        alice_row = next(r for r in before["scopes"] if r[1] == ALICE.principal.subject)
        assert status.enabled and status.generation == alice_row[8] and status.entry_count == 2
        assert await store.generation(ALICE) == alice_row[8]
        found = await store.search(ALICE, alice_row[8], vec(f"{ALICE.principal.subject} fact 1"),
                                   limit=1)
        assert [r.text for r in found] == [f"{ALICE.principal.subject} fact 1"]
        assert not (await store.status(CAROL)).enabled
        with pytest.raises(ScopeDenied) as err:  # the offboarding block survived
            await store.grant(BOB, purpose=PURPOSE)
        assert err.value.reason is ReasonCode.PRINCIPAL_OFFBOARDED
    finally:
        await store.close()
    with psycopg.connect(database.dsn, autocommit=True) as conn:  # version 15's signatures
        assert conn.execute("SELECT enabled, generation FROM memory_status(%s,%s,%s,%s,%s,%s)",
                            _key_args(ALICE)).fetchone() == (True, alice_row[8])
        assert conn.execute("SELECT count(*) FROM memory_inspect(%s,%s,%s,%s,%s,%s,NULL,NULL,10)",
                            _key_args(ALICE)).fetchone()[0] == 2
        with pytest.raises(psycopg.Error) as err:
            conn.execute("SELECT * FROM memory_grant(%s,%s,%s,%s,%s,%s,%s,%s,768,'personal',"
                         "ARRAY['example.org'])", [*_key_args(BOB), PURPOSE, VERSION])
        assert err.value.sqlstate == "KGD03"


async def test_the_upgrade_is_harmless_to_run_again(database):
    """Every statement of 000016 is guarded: run again over its own result, it changes no
    consent, generation, entry, block or key (golang-migrate tracks kagent's copy of it)."""
    at_15_with_data(database.owner_dsn, database.dsn, database.operator_dsn)
    assert await migrate(database.owner_dsn) == [16]
    keys = "SELECT principal_issuer_kind, principal_issuer, scope_ref FROM memory_scope ORDER BY id"
    before, rekeyed = snapshot(database.admin_dsn), database.admin().execute(keys).fetchall()
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(M16.up)  # type: ignore[arg-type]
    assert snapshot(database.admin_dsn) == before
    assert database.admin().execute(keys).fetchall() == rekeyed
    assert {r[0] for r in rekeyed} == {"matrix"}


async def test_an_upgrade_without_consents_registers_no_issuer(database):
    apply_packaged(database.owner_dsn, upto=15)
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT memory_configure(%s)", [LOCAL])
    assert await migrate(database.owner_dsn) == [16]
    assert database.scalar("SELECT count(*) FROM memory_issuer") == 0
    # the first store that may configure registers it (memory_configure)
    await migrate(database.owner_dsn, local_server=LOCAL)
    assert database.scalar("SELECT count(*) FROM memory_issuer") == 1


async def test_an_upgrade_refuses_blocks_it_cannot_key(database):
    """An offboarding before any local server was recorded: its block names a Matrix principal
    of an unknown server.  The upgrade refuses (KGR05) and changes nothing."""
    apply_packaged(database.owner_dsn, upto=15)
    with psycopg.connect(database.operator_dsn, autocommit=True) as conn:
        conn.execute("SELECT * FROM memory_disable_principal('matrix', '@x:example.org')")
    with pytest.raises(GovernanceError) as err:
        await migrate(database.owner_dsn)
    assert err.value.reason is ReasonCode.SCHEMA_DATA_UNCONVERTIBLE
    assert database.scalar("SELECT memory_schema_version()") == 15
    assert database.scalar("SELECT count(*) FROM memory_principal_block") == 1
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute("SELECT memory_configure(%s)", [LOCAL])
    assert await migrate(database.owner_dsn) == [16]


# -- down ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Cluster, Cluster]]:
    fresh = round_trip = None
    try:
        fresh = Cluster()
        apply_packaged(fresh.dsn(), upto=15)
        round_trip = Cluster()
        yield fresh, round_trip
    finally:
        for cluster in (fresh, round_trip):
            if cluster is not None:
                cluster.stop()


def test_down_gives_back_version_15s_catalog_with_its_data(clusters) -> None:
    fresh, cluster = clusters
    apply_packaged(cluster.dsn(), upto=15)
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
        for login, role in (("kgm_app", "kagent_memory_service"),
                            ("kgm_op", "kagent_memory_operator")):
            conn.execute(f"CREATE ROLE {login} LOGIN IN ROLE {role}")
    at_15_with_data(cluster.dsn(), cluster.dsn("kgm_app"), cluster.dsn("kgm_op"), applied=True)
    before = snapshot(cluster.dsn("postgres"))
    assert asyncio.run(migrate(cluster.dsn())) == [16]
    apply_down(cluster.dsn())
    assert snapshot(cluster.dsn("postgres")) == before
    expected, got = catalog(fresh), catalog(cluster)
    found = differences(expected, got)
    assert [d for d in found if d.startswith("schema:")] == []  # every object as 15 made it
    assert len([d for d in found if d.startswith("roles:")]) == 6  # this test's two logins
    assert all("kgm_app" in d or "kgm_op" in d for d in found if d.startswith("roles:"))
    with psycopg.connect(cluster.dsn("kgm_app"), autocommit=True) as conn:  # 15 serves its data
        assert conn.execute("SELECT enabled FROM memory_status(%s,%s,%s,%s,%s,%s)",
                            _key_args(ALICE)).fetchone() == (True,)
        with pytest.raises(psycopg.Error) as err:
            conn.execute("SELECT * FROM memory_grant(%s,%s,%s,%s,%s,%s,%s,%s,768,'personal',"
                         "ARRAY['example.org'])", [*_key_args(BOB), PURPOSE, VERSION])
        assert err.value.sqlstate == "KGD03"  # the block, still bob's
    assert asyncio.run(migrate(cluster.dsn())) == [16]  # and up again
    assert snapshot(cluster.dsn("postgres")) == before


async def test_down_refuses_data_version_15_cannot_hold(database, operator):
    from support.db import migrated

    await migrated(database)
    await operator.register_issuer(OidcIssuer("https://idp.example.org"))
    store = await open_store(database, issuers=[OidcIssuer("https://idp.example.org")])
    oidc = ScopeKey(principal=Principal.oidc("https://idp.example.org", "u-1"),
                    agent=AgentIdentity(namespace="kagent", name="my-agent"),
                    scope=MemoryScope.principal())
    try:
        await store.grant(oidc, purpose=PURPOSE)
        await store.grant(ALICE, purpose=PURPOSE)
    finally:
        await store.close()
    before = snapshot(database.admin_dsn)
    with pytest.raises(psycopg.Error) as err:
        apply_down(database.owner_dsn)
    assert err.value.sqlstate == "KGR05"
    assert database.scalar("SELECT memory_schema_version()") == 16
    assert snapshot(database.admin_dsn) == before
    # once the OIDC principal is offboarded and its block lifted, down goes through
    operator._add_issuer(OidcIssuer("https://idp.example.org"))
    assert (await operator.offboard(oidc.principal)).ok
    with pytest.raises(psycopg.Error) as err:  # the block is data 15 cannot hold either
        apply_down(database.owner_dsn)
    assert err.value.sqlstate == "KGR05"
    assert await operator.unblock(oidc.principal)
    apply_down(database.owner_dsn)
    assert database.scalar("SELECT memory_schema_version()") == 15
    assert database.scalar("SELECT count(*) FROM memory_scope") == 1  # alice's
