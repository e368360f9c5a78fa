"""The database is the boundary for every client: attacks by a hostile SQL client that holds the
application's login (a member of ``kagent_memory_service`` only), each as its own case.

Model-chosen tools in an agent pod may run arbitrary SQL with that login.  Every attack below is
refused by PostgreSQL itself; the library's own operations keep working (the whole suite runs
as the same login, see conftest).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest
from support.db import open_store, physical_rows, save, scope_uuid
from support.scopes import make_key, vec
from support.settings import LOCAL
from psycopg import sql
from test_expiry import _key_args, _vector_literal, plant
from test_roles_and_policies import BRIDGE, OPERATOR, RUNTIME, SERVICE
from test_roles_and_policies import executable as role_executes

from kagent_governed_memory import (
    ConsentRequired,
    GovernedMemoryStore,
    InvalidInput,
    MemoryPolicy,
    Principal,
    ReasonCode,
    ScopeDenied,
    StaleGeneration,
)
from kagent_governed_memory import store as governed_sql
from kagent_governed_memory.store import Admission

PURPOSE = "personal_preferences"
VERSION = "adr0023-prototype-1"
TABLES = ["memory_scope", "memory_entry", "memory_audit", "memory_config",
          "memory_principal_block", "memory_admission_bucket", "memory_assertion_use",
          "governed_memory_schema_migrations"]
# The entry points: what the (deprecated) service role may EXECUTE, and nothing else in the
# schema -- the union of the runtime's and the bridge's (test_roles_and_policies pins each).
ENTRY_POINTS = SERVICE
HELPER_CALLS = [
    "SELECT memory_scope_row('matrix','example.org','@a:example.org','kagent','a',"
    "'control_room','!r')",
    "SELECT memory_scope_lock('matrix','example.org','@a:example.org','kagent','a',"
    "'control_room','!r')",
    "SELECT * FROM memory_readable(gen_random_uuid())",
    "SELECT memory_bind_scope(gen_random_uuid())",
    "SELECT memory_principal_ref('matrix','@a:example.org')",
    "SELECT memory_principal_lock('matrix','example.org','\\x00'::bytea,true)",
    "SELECT memory_audit_write(NULL, 'x', 'y', NULL, NULL)",
    "SELECT memory_unblock_principal('matrix','@a:example.org')",
    "SELECT memory_unblock_principal('matrix','example.org','@a:example.org')",
    "SELECT memory_redeemed_generation('aaaaaaaaaaaaaaaaaaaa','matrix','example.org',"
    "'@a:example.org','kagent','a','control_room','!r',1)",
    "SELECT memory_matrix_issuer('matrix', '@a:example.org')",
    "SELECT memory_register_issuer('oidc','https://idp.example','principal','^.+$',NULL,"
    "ARRAY['principal'])",
    "SELECT memory_disable_issuer('matrix','example.org')",
]


def app(database) -> psycopg.Connection:
    return psycopg.connect(database.dsn, autocommit=True)


def refused(conn: psycopg.Connection, statement: str, params: list | None = None) -> str:
    with pytest.raises(psycopg.Error) as err:
        conn.execute(statement, params or [])
    return err.value.sqlstate or ""


@pytest.fixture
async def two_scopes(store, database):
    alice, bob = make_key(), make_key("@bob:example.org", room="!control-b:example.org")
    for key, facts in ((alice, ["alice fact"]), (bob, ["bob secret"])):
        await store.grant(key, purpose=PURPOSE)
        await save(store, key, *facts)
    return alice, bob


# -- 1. no table, sequence or helper is reachable -------------------------------------------


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("statement", [
    "SELECT * FROM {t}", "INSERT INTO {t} DEFAULT VALUES", "UPDATE {t} SET {c} = {c}",
    "DELETE FROM {t}", "TRUNCATE {t}",
])
async def test_service_role_touches_no_table(store, two_scopes, database, table, statement):
    column = {"memory_scope": "enabled", "memory_entry": "content", "memory_audit": "outcome",
              "memory_config": "local_server", "memory_principal_block": "blocked_at",
              "memory_admission_bucket": "tokens", "memory_assertion_use": "forget_at",
              "governed_memory_schema_migrations": "name"}[table]
    with app(database) as conn:
        assert refused(conn, statement.format(t=table, c=column)) == "42501"
    assert physical_rows(database) == 2


async def test_service_role_catalog_privileges(store, database):
    """What the catalog says: no table/sequence privilege, EXECUTE on the entry points only,
    nothing for PUBLIC, every function with a fixed search_path, entry points SECURITY
    DEFINER, and no CREATE on the schema for the login."""
    with database.admin() as conn:
        for table in TABLES:
            for priv in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES",
                         "TRIGGER"):
                assert not conn.execute("SELECT has_table_privilege('kgm_app', %s, %s)",
                                        [table, priv]).fetchone()[0], (table, priv)
        assert not conn.execute("SELECT has_sequence_privilege('kgm_app',"
                                " 'memory_audit_id_seq', 'USAGE')").fetchone()[0]
        rows = conn.execute(
            "SELECT p.proname, p.oid::regprocedure::text, p.prosecdef, p.proconfig,"
            "       has_function_privilege('kgm_app', p.oid, 'EXECUTE'),"
            "       EXISTS (SELECT FROM aclexplode(coalesce(p.proacl,"
            "               acldefault('f', p.proowner))) a"
            "                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')"
            "  FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace"
            "   AND p.proname LIKE 'memory\\_%%'").fetchall()
        assert {r[0] for r in rows} >= ENTRY_POINTS
        for name, signature, secdef, config, executable, public in rows:
            assert not public, f"PUBLIC may execute {signature}"
            assert executable == (name in ENTRY_POINTS), signature
            if name in ENTRY_POINTS:  # every one, memory_schema_version included
                assert secdef, signature
                assert config and any(c.startswith("search_path=") and c.endswith("pg_temp")
                                      for c in config), signature
        assert not conn.execute("SELECT has_schema_privilege('kgm_app', current_schema(),"
                                " 'CREATE')").fetchone()[0]
    # and each caller's role exactly its own list (000012)
    for role, expected in (("kagent_memory_runtime", RUNTIME), ("kagent_memory_bridge", BRIDGE),
                           ("kagent_memory_operator", OPERATOR)):
        assert role_executes(database, role) == expected, role


@pytest.mark.parametrize("call", HELPER_CALLS)
async def test_internal_helpers_are_not_executable(store, database, call):
    with app(database) as conn:
        assert refused(conn, call) == "42501"


# -- 2. the scope binding setting opens nothing -----------------------------------------------


async def test_set_config_then_read_is_refused(store, two_scopes, database):
    _, bob = two_scopes
    with app(database) as conn:
        conn.execute("SELECT set_config('kagent.memory_scope', %s, false)",
                     [scope_uuid(database, bob)])
        assert refused(conn, "SELECT content FROM memory_entry") == "42501"


async def test_a_table_granted_by_mistake_still_shows_nothing(store, two_scopes, database):
    """Row-level security is keyed by the definer context (current_user is the owner only
    inside the governed functions), not by a setting: a role granted SELECT by mistake sees
    no row of any governed table, whatever it sets."""
    _, bob = two_scopes
    with database.admin() as conn:
        conn.execute("CREATE ROLE kgm_mistake LOGIN")
        conn.execute("GRANT SELECT ON memory_entry, memory_scope, memory_audit TO kgm_mistake")
    try:
        mistake = psycopg.conninfo.make_conninfo(database.dsn, user="kgm_mistake")
        with psycopg.connect(mistake, autocommit=True) as conn:
            conn.execute("SELECT set_config('kagent.memory_scope', %s, false)",
                         [scope_uuid(database, bob)])
            for table in ("memory_entry", "memory_scope", "memory_audit"):
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
    finally:
        with database.admin() as conn:
            conn.execute("DROP OWNED BY kgm_mistake")
            conn.execute("DROP ROLE kgm_mistake")


# -- 3. nothing the caller creates shadows what the functions use -----------------------------


async def test_temporary_table_hijack_is_ignored(store, database):
    """A temporary `memory_scope` saying 'enabled, generation 999, cap 1000, 8 KiB, 900 years'
    and a temporary `memory_entry` full of planted rows change nothing: the functions' fixed
    search_path puts pg_temp last."""
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    await save(store, key, "real fact")
    sid = scope_uuid(database, key)
    with app(database) as conn:
        conn.execute(
            "CREATE TEMP TABLE memory_scope (id uuid, principal_issuer text, principal_subject text,"
            " agent_namespace text, agent_name text, scope_kind text, room_id text,"
            " enabled boolean, purpose text, policy_version text, generation bigint,"
            " consent_granted_at timestamptz, consent_expires_at timestamptz,"
            " max_ttl interval, entry_cap integer, fact_max_bytes integer,"
            " last_verified_erasure_at timestamptz, failure_reason text, failure_at timestamptz,"
            " created_at timestamptz, updated_at timestamptz)")
        conn.execute(
            "INSERT INTO memory_scope VALUES (%s, %s, %s, %s, %s, %s, %s, true, %s, %s, 999,"
            " now(), now() + interval '900 years', interval '900 years', 1000, 8192, NULL,"
            " NULL, NULL, now(), now())", [sid, *_key_args(key), PURPOSE, VERSION])
        conn.execute("CREATE TEMP TABLE memory_entry (id uuid, scope_id uuid, content text,"
                      " embedding text, generation bigint, created_at timestamptz,"
                      " expires_at timestamptz)")
        conn.execute("INSERT INTO memory_entry VALUES (gen_random_uuid(), %s, 'planted', NULL,"
                     " 999, now(), now() + interval '900 years')", [sid])
        save_sql = "SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::vector[])"
        big = "x" * 4008
        for gen, text, state in ((999, "stale", "KGS01"), (g, big, "KGF01")):
            assert refused(conn, save_sql, [*_key_args(key), gen, VERSION, [text],
                                            [_vector_literal("x")]]) == state
        found = conn.execute(
            "SELECT content, expires_at < now() + interval '8 days'"
            " FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,%s::vector,50)",
            [*_key_args(key), g, VERSION, _vector_literal("real fact")]).fetchall()
        assert found == [("real fact", True)]
    assert physical_rows(database, key) == 1


async def test_temporary_function_and_operator_shadowing_is_ignored(store, database):
    """Functions and operators are never looked up in pg_temp, and the schema is not writable
    by the login: temporary stand-ins for now(), the fence and pgvector's <=> do nothing."""
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    sid = scope_uuid(database, key)
    with database.admin() as conn:
        plant(conn, sid, g, "long expired", "now() - interval '1 day'")
    with app(database) as conn:
        conn.execute("CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql"
                     " AS $$ SELECT '2000-01-01'::timestamptz $$")
        conn.execute("CREATE FUNCTION pg_temp.memory_readable(uuid) RETURNS SETOF record"
                     " LANGUAGE sql AS $$ SELECT NULL::record WHERE false $$")
        conn.execute("CREATE FUNCTION pg_temp.fake_distance(text, text) RETURNS float8"
                     " LANGUAGE sql AS $$ SELECT 0::float8 $$")
        conn.execute("CREATE OPERATOR pg_temp.<=> (LEFTARG = text, RIGHTARG = text,"
                     " FUNCTION = pg_temp.fake_distance)")
        assert refused(conn, "CREATE FUNCTION memory_fence_check(text) RETURNS void"
                             " LANGUAGE sql AS $$ SELECT $$") == "42501"
        found = conn.execute("SELECT content FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,"
                             "%s::vector,50)",
                             [*_key_args(key), g, VERSION, _vector_literal("x")]).fetchall()
        assert found == []  # the expired row stays unreadable
        assert refused(conn, "SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,%s,%s,%s,"
                             "%s::vector[])", [*_key_args(key), g + 1, VERSION, ["x"],
                                               [_vector_literal("x")]]) == "KGS01"


# -- 4. forged arguments --------------------------------------------------------------------


async def test_forged_ids_reach_nothing_of_another_key(store, two_scopes, database):
    alice, bob = two_scopes
    with database.admin() as conn:
        bob_entry = conn.execute("SELECT id FROM memory_entry WHERE scope_id = %s",
                                 [scope_uuid(database, bob)]).fetchone()[0]
    with app(database) as conn:
        # forget / verify / inspect-after with Bob's entry id under Alice's key
        assert conn.execute("SELECT deleted FROM memory_forget(%s,%s,%s,%s,%s,%s,%s)",
                            [*_key_args(alice), bob_entry]).fetchone()[0] == 0
        conn.execute("SELECT * FROM memory_verify_erasure(%s,%s,%s,%s,%s,%s,NULL,%s,false)",
                     [*_key_args(alice), bob_entry])
        page = conn.execute("SELECT content FROM memory_inspect(%s,%s,%s,%s,%s,%s,"
                            "'infinity',%s,50)", [*_key_args(alice), bob_entry]).fetchall()
        assert page == [("alice fact",)]
        # Bob's generation under Alice's key is just a stale or foreign number
        gb = conn.execute("SELECT memory_generation(%s,%s,%s,%s,%s,%s,%s,'personal',ARRAY['example.org'])",
                          [*_key_args(bob), VERSION]).fetchone()[0]
        ga = conn.execute("SELECT memory_generation(%s,%s,%s,%s,%s,%s,%s,'personal',ARRAY['example.org'])",
                          [*_key_args(alice), VERSION]).fetchone()[0]
        assert ga == gb == 1  # the same number, and still only Alice's rows answer
        hits = conn.execute("SELECT content FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,"
                            "%s::vector,50)", [*_key_args(alice), gb, VERSION,
                                               _vector_literal("bob secret")]).fetchall()
        assert hits == [("alice fact",)]
    assert physical_rows(database, bob) == 1


# -- 5. audit is append-only; retention is the only delete ------------------------------------


async def test_audit_rows_cannot_be_deleted(store, two_scopes, database):
    before = database.scalar("SELECT count(*) FROM memory_audit")
    assert before >= 3  # configure, two grants
    with app(database) as conn:
        assert refused(conn, "DELETE FROM memory_audit") == "42501"
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:  # even the owner
        assert refused(conn, "DELETE FROM memory_audit") == "KGA01"
        assert refused(conn, "TRUNCATE memory_audit") == "KGA01"
        assert refused(conn, "UPDATE memory_audit SET outcome = 'x'") == "KGA01"
    assert database.scalar("SELECT count(*) FROM memory_audit") == before


async def test_owner_cannot_rewrite_an_entry(store, two_scopes, database):
    """The trigger binds the owner too (it could still drop the trigger: the owner is the
    trust root and no application may hold it)."""
    alice, _ = two_scopes
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT set_config('kagent.memory_scope', %s, true)",
                     [scope_uuid(database, alice)])
        for change in ("content = 'rewritten'", "expires_at = now() + interval '900 years'"):
            with pytest.raises(psycopg.Error) as err, conn.transaction():
                conn.execute(f"UPDATE memory_entry SET {change}")
            assert err.value.sqlstate == "KGI01"


async def test_sweep_applies_audit_and_bucket_retention(store, database):
    with database.admin() as conn:
        conn.execute("INSERT INTO memory_audit (at, operation, outcome) VALUES"
                     " (now() - interval '401 days', 'old', 'gone'),"
                     " (now() - interval '399 days', 'young', 'kept')")
        conn.execute("INSERT INTO memory_admission_bucket VALUES"
                     " ('scope:idle', 1, now() - interval '2 days'),"
                     " ('scope:busy', 1, now() - interval '1 hour')")
    await store.sweep()
    assert database.scalar("SELECT string_agg(operation, ',' ORDER BY id) FROM memory_audit"
                           " WHERE operation IN ('old', 'young')") == "young"
    assert database.scalar("SELECT string_agg(bucket, ',') FROM memory_admission_bucket"
                           ) == "scope:busy"


# -- 6. the fence also carries the policy version, and admission is inside it --------------------


async def test_policy_version_is_part_of_the_fence(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    v2 = await open_store(database, MemoryPolicy(version="policy-v2"))
    try:
        assert await v2.generation(key) is None
        for call in (lambda: v2.save(key, g, facts=["x"], embeddings=[vec("x")]),
                     lambda: v2.search(key, g, vec("x")),
                     lambda: Admission(v2).admit(key, g, units=1)):
            with pytest.raises(ConsentRequired) as err:
                await call()
            assert err.value.reason is ReasonCode.CONSENT_POLICY_CHANGED
        assert physical_rows(database, key) == 0
        await v2.withdraw(key)  # re-consent is the path
        g2 = (await v2.grant(key, purpose=PURPOSE)).generation
        await v2.save(key, g2, facts=["x"], embeddings=[vec("x")])
    finally:
        await v2.close()


async def test_admission_checks_the_fence_and_consumes_nothing_when_refused(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    admission = Admission(store)
    await admission.admit(key, g, units=1)
    tokens = database.scalar("SELECT tokens FROM memory_admission_bucket")
    await store.withdraw(key)
    with pytest.raises(StaleGeneration):
        await admission.admit(key, g, units=1)
    g2 = (await store.grant(key, purpose=PURPOSE)).generation
    await store.forget_all(key)  # advances: g2 is stale too
    with pytest.raises(StaleGeneration):
        await admission.admit(key, g2, units=1)
    assert database.scalar("SELECT tokens FROM memory_admission_bucket") == tokens
    with app(database) as conn:  # and raw, bypassing Python, with a made-up generation
        assert refused(conn, "SELECT memory_admit(%s,%s,%s,%s,%s,%s,%s,%s,1,false,NULL)",
                       [*_key_args(key), 12345, VERSION]) == "KGS01"


# -- 7. S5 lives in the database ----------------------------------------------------------


async def test_remote_principal_refused_by_the_database(store, database):
    with app(database) as conn:
        grant = ("SELECT * FROM memory_grant('matrix',%s,'kagent','a','control_room',%s,"
                 "'personal_preferences',%s,768,'personal',ARRAY['example.org'])")
        assert refused(conn, grant, ["@mallory:evil.example", "!room:example.org", VERSION]
                       ) == "KGD02"
        assert refused(conn, grant, ["@alice:example.org", "!room:evil.example", VERSION]
                       ) == "KGD02"
        # the recorded local server cannot be changed by the service role
        assert conn.execute("SELECT memory_configure('evil.example')").fetchone()[0] == LOCAL
    with pytest.raises(InvalidInput) as err:
        await GovernedMemoryStore.open(database.dsn, local_server="other.example",
                                       sweep_every=None)
    assert err.value.reason is ReasonCode.LOCAL_SERVER_MISMATCH


async def test_principal_is_kind_issuer_and_subject_and_the_v15_grant_admits_matrix_only(
        store, database):
    """The key names a principal by (issuer kind, issuer, subject) (000016): a Matrix principal
    is ('matrix', its homeserver, its MXID).  Version 15's grant signature (a library-only
    wrapper) still admits the 'matrix' kind only, with 15's reason codes; the MXID grammar is
    the Matrix issuer's registry data, no longer a CHECK of the table."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    with database.admin() as conn:
        row = conn.execute(
            "SELECT principal_issuer_kind, principal_issuer, principal_subject, scope_ref"
            "  FROM memory_scope WHERE id = %s::uuid", [scope_uuid(database, key)]).fetchone()
    assert row == ("matrix", LOCAL, key.principal.mxid, key.scope.room_id)
    assert (key.principal.issuer_kind, key.principal.issuer, key.principal.subject) == row[:3]
    grant = ("SELECT * FROM memory_grant(%s,%s,'kagent','a','control_room','!room:example.org',"
             "'personal_preferences',%s,768,'personal',"
             "ARRAY['example.org'])")
    with app(database) as conn:
        for issuer in ("https://idp.example.org", "Matrix", "", "oidc"):
            assert refused(conn, grant, [issuer, "@alice:example.org", VERSION]) == "KGD01"
        assert refused(conn, grant, ["matrix", "alice@example.org", VERSION]) == "KGD02"
    with database.admin() as conn:  # not even a superuser re-keys a scope (guard + CHECK)
        conn.autocommit = True
        for column in ("principal_issuer_kind", "principal_issuer", "scope_ref"):
            assert refused(conn, f"UPDATE memory_scope SET {column} = 'oidc'") == "KGI01"
        conn.execute("SET session_replication_role = replica")  # triggers off; CHECKs stay
        assert refused(conn, "UPDATE memory_scope SET principal_issuer_kind = 'OIDC'") == "23514"
        assert refused(conn, "UPDATE memory_scope SET principal_issuer = ''") == "23514"
        assert refused(conn, "UPDATE memory_scope SET principal_subject = ''") == "23514"
        assert refused(conn, "UPDATE memory_scope SET scope_ref = repeat('x', 256)") == "23514"


async def test_unconfigured_store_grants_nobody(database):
    from kagent_governed_memory.store import migrate

    await migrate(database.owner_dsn)  # no local server recorded
    with app(database) as conn:
        assert refused(conn, "SELECT * FROM memory_grant('matrix','@a:example.org',"
                             "'kagent','a','control_room','!r:example.org','p',%s,768,"
                             "'personal',ARRAY['example.org'])", [VERSION]) == "KGD02"


# -- 8. roles: the application may not hold the trust root ------------------------------------


async def test_privileged_logins_are_refused(store, database):
    for dsn in (database.owner_dsn, database.admin_dsn):
        with pytest.raises(InvalidInput) as err:
            await GovernedMemoryStore.open(dsn, local_server=LOCAL, sweep_every=None)
        assert err.value.reason is ReasonCode.PRIVILEGED_ROLE
        assert "kagent_memory_service" in str(err.value)
    owner = await GovernedMemoryStore.open(database.owner_dsn, local_server=LOCAL,
                                           sweep_every=None, privileged=True)
    await owner.close()


async def test_missing_service_role_fails_the_migration_with_a_clear_message(database):
    """A migrating role that may not create roles, on a cluster without the service role:
    the migration stops with KGR01 and says what to run (in a transaction rolled back after,
    so the cluster's role stays)."""
    up = governed_sql.migrations()[0].up
    with database.admin() as conn:
        conn.execute("BEGIN")
        try:
            conn.execute("ALTER ROLE kagent_memory_service RENAME TO kgm_renamed_for_test")
            conn.execute("SET LOCAL ROLE kgm_owner")
            conn.execute("SAVEPOINT s")
            with pytest.raises(psycopg.Error) as err:
                conn.execute(up)
            assert err.value.sqlstate == "KGR01"
            assert "CREATE ROLE kagent_memory_service NOLOGIN" in (err.value.diag.message_hint
                                                                   or "")
        finally:
            conn.execute("ROLLBACK")


# -- 9. offboarding: block first; nothing left that names the principal ----------------------


async def test_grant_racing_an_offboarding_is_not_missed(store, operator, database):
    key = make_key(agent="racer")
    principal = key.principal
    with app(database) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT * FROM memory_grant(%s,%s,%s,%s,%s,%s,%s,%s,768,"
                     "'personal',ARRAY['example.org'])", [*_key_args(key), PURPOSE, VERSION])
        offboarding = asyncio.create_task(operator.offboard(principal))
        await asyncio.sleep(0.3)
        assert not offboarding.done()  # waits for the grant in flight
        conn.execute("COMMIT")
    report = await asyncio.wait_for(offboarding, 60)  # generous: it ends once the grant commits
    assert [s.scope_id for s in report.scopes] == [key.opaque_id] and report.ok
    assert scope_uuid(database, key) is None
    with pytest.raises(ScopeDenied):
        await store.grant(key, purpose=PURPOSE)
    assert await operator.unblock(principal) is True
    with app(database) as conn:  # the service role can neither lift it nor offboard anyone
        assert refused(conn, "SELECT * FROM memory_disable_principal('matrix', %s)",
                       [principal.mxid]) == "42501"
        assert refused(conn, "SELECT memory_unblock_principal('matrix', %s)",
                       [principal.mxid]) == "42501"
    assert (await store.grant(key, purpose=PURPOSE)).generation >= 1
    assert isinstance(principal, Principal)


# -- 10. physical deletion within 24 hours --------------------------------------------------


async def test_overdue_expired_rows_are_a_violation_and_the_service_sweeps(store, database):
    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    sid = scope_uuid(database, key)
    with database.admin() as conn:
        plant(conn, sid, g, "expired 25 hours ago", "now() - interval '25 hours'")
        plant(conn, sid, g, "expired an hour ago", "now() - interval '1 hour'")
    report = await store.report()
    assert report.violations == {"expired_overdue": 1}
    assert report.overdue_scope_ids == (sid,)
    with database.admin() as conn:  # another replica is sweeping: this one skips at once
        with conn.transaction():
            conn.execute("SELECT 1 FROM memory_config FOR UPDATE")
            assert await store.sweep() == 0
    with app(database) as squatter:  # an advisory lock anyone may take no longer stops it
        squatter.execute("SELECT pg_advisory_lock(hashtextextended('kagent.memory_sweep', 0))")
        service = await open_store(database, sweep_every=3600.0)  # sweeps at start, hourly
        try:
            for _ in range(1200):  # up to 60 s (a loaded machine), done as soon as it is swept
                if physical_rows(database, key) == 0:
                    break
                await asyncio.sleep(0.05)
            assert physical_rows(database, key) == 0
            assert service._sweeper is not None and service._sweeper.runs >= 1
        finally:
            await service.close()
    assert (await store.report()).violations == {}


async def test_sweeper_stops_cleanly_at_any_moment(database):
    from support.db import migrated

    await migrated(database)
    for delay in (0, 0.001, 0.01):
        s = await open_store(database, sweep_every=1.0)
        await asyncio.sleep(delay)
        await asyncio.wait_for(s.close(), 30)  # a hang fails; a slow machine does not
    with pytest.raises(InvalidInput):
        await open_store(database, sweep_every=0.0)


# -- 11. what a reviewer broke, refused now ---------------------------------------------------


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
async def test_an_old_snapshot_is_refused(store, two_scopes, database, isolation):
    """REPEATABLE READ / SERIALIZABLE would count the cap and re-check the fence in an old
    snapshot (the cap exceeded by parallel saves; rows readable after a verified erasure)."""
    alice, _ = two_scopes
    g = await store.generation(alice)
    with app(database) as conn:
        conn.execute(f"BEGIN ISOLATION LEVEL {isolation}")
        assert refused(conn, "SELECT * FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,%s::vector,5)",
                       [*_key_args(alice), g, VERSION, _vector_literal("x")]) == "KGX01"
        conn.execute("ROLLBACK")


async def test_a_transaction_held_open_is_refused(store, two_scopes, database):
    """now() is the transaction's start: a caller holding a transaction open would stretch
    consent and entry expiry."""
    alice, _ = two_scopes
    g = await store.generation(alice)
    with app(database) as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_sleep(5.2)")
        assert refused(conn, "SELECT * FROM memory_search(%s,%s,%s,%s,%s,%s,%s,%s,%s::vector,5)",
                       [*_key_args(alice), g, VERSION, _vector_literal("x")]) == "KGX01"
        conn.execute("ROLLBACK")


async def test_a_complete_erasure_is_verified_against_the_scopes_own_generation(store, database):
    """Disable, then 'verify' with a made-up generation: the rows are still there, so the
    erasure is not verified and the scope stays failed (it cannot be re-enabled)."""
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    await save(store, key, "one", "two")
    with app(database) as conn:
        conn.execute("SELECT * FROM memory_disable(%s,%s,%s,%s,%s,%s)", _key_args(key))
        row = conn.execute("SELECT * FROM memory_verify_erasure(%s,%s,%s,%s,%s,%s,0,NULL,true)",
                           _key_args(key)).fetchone()
        assert row[1] is None  # not verified
        assert refused(conn, "SELECT * FROM memory_verify_erasure(%s,%s,%s,%s,%s,%s,NULL,"
                             "gen_random_uuid(),true)", _key_args(key)) == "22023"
    status = await store.status(key)
    assert status.failure_reason is ReasonCode.VERIFICATION_FAILED and physical_rows(database,
                                                                                      key) == 2


async def test_admission_buckets_are_the_fenced_keys_own(store, two_scopes, database):
    """Bucket names come from the fenced key, not the caller; a stamp cannot be in the future;
    the budgets are the scope's policy's, whatever the caller asks."""
    alice, bob = two_scopes
    gb = await store.generation(bob)
    await Admission(store).admit(alice, await store.generation(alice), units=1, explicit=True)
    before = dict(database.admin().execute(
        "SELECT bucket, tokens FROM memory_admission_bucket").fetchall())
    with app(database) as conn:  # Bob spends his whole budget with an 'infinity' clock
        assert conn.execute("SELECT memory_admit(%s,%s,%s,%s,%s,%s,%s,%s,60,true,'infinity')",
                            [*_key_args(bob), gb, VERSION]).fetchone()[0] == 0
        assert conn.execute("SELECT memory_admit(%s,%s,%s,%s,%s,%s,%s,%s,1,false,NULL)",
                            [*_key_args(bob), gb, VERSION]).fetchone()[0] == 1
        for units in (0, -1, 1001, None):
            assert refused(conn, "SELECT memory_admit(%s,%s,%s,%s,%s,%s,%s,%s,%s,false,NULL)",
                           [*_key_args(bob), gb, VERSION, units]) == "22023"
    after = dict(database.admin().execute(
        "SELECT bucket, tokens FROM memory_admission_bucket").fetchall())
    assert {k: after[k] for k in before} == before  # Alice's buckets untouched
    assert database.scalar("SELECT max(updated_at) <= now() FROM memory_admission_bucket")


async def test_consent_max_age_is_the_policys(store, database):
    key = make_key()
    with app(database) as conn:  # the old form that took it from the caller is gone
        assert refused(conn, "SELECT * FROM memory_grant(%s,%s,%s,%s,%s,%s,%s,%s,'7 days',100,"
                             "512,'infinity',768,'personal',ARRAY['example.org'])",
                       [*_key_args(key), PURPOSE, VERSION]) == "42883"
    receipt = await store.grant(key, purpose=PURPOSE)
    assert receipt.expires_at - receipt.granted_at == timedelta(days=90)


async def test_consent_for_a_remote_output_audience_is_refused(store):
    from kagent_governed_memory import ScopeDenied as Denied

    with pytest.raises(Denied):
        await store.grant(make_key(), purpose=PURPOSE,
                          output_audience=["example.org", "partner.example"])


async def test_operator_entry_points_belong_to_the_operator_role_only(store, database):
    """Offboarding and lifting a block: kagent_memory_operator's (000009), never the service
    role's -- memory_disable_principal answers with every key of a principal."""
    calls = ["SELECT * FROM memory_disable_principal('matrix','@a:example.org')",
             "SELECT * FROM memory_purge_principal('matrix','@a:example.org')",
             "SELECT memory_unblock_principal('matrix','@a:example.org')"]
    with app(database) as conn:
        for call in calls:
            assert refused(conn, call) == "42501"
    with psycopg.connect(database.operator_dsn, autocommit=True) as conn:
        for call in calls:
            conn.execute(call)
        for table in ("memory_scope", "memory_principal_block", "memory_entry"):
            assert refused(conn, f"SELECT * FROM {table}") == "42501"  # still no table access
    with database.admin() as conn:
        roles = conn.execute(
            "SELECT rolname, rolsuper, rolbypassrls, rolcreaterole FROM pg_roles"
            " WHERE rolname IN ('kgm_operator', 'kagent_memory_operator')").fetchall()
    assert sorted(roles) == [("kagent_memory_operator", False, False, False),
                             ("kgm_operator", False, False, False)]


# -- a request's calls are bound to its redemption (000011) -----------------------------------

_BOUND = {
    "save": "SELECT * FROM memory_save_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " ARRAY['injected'], ARRAY[%s::vector])",
    "search": "SELECT * FROM memory_search_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
              " %s::vector, 5)",
    "search_many": "SELECT * FROM memory_search_many_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
                   " ARRAY[%s::vector], 5)",
    "admit": "SELECT memory_admit_bound(%s, %s, %s, %s, %s, %s, %s, %s, %s, 1, false, NULL)",
}


def _bound(conn, op: str, jti: str, key, generation) -> list:
    params = [jti, *_key_args(key), generation, VERSION]
    if op != "admit":
        params.append(_vector_literal("alice fact"))
    return conn.execute(_BOUND[op], params).fetchall()


def _redeem(conn, key, *, jti: str | None = None, classification: str = "personal") -> tuple:
    import secrets
    jti = jti or secrets.token_urlsafe(16)
    g = conn.execute("SELECT memory_redeem_assertion(%s, now() + interval '60 seconds',"
                     " %s, %s, %s, %s, %s, %s, %s, %s, ARRAY['example.org'])",
                     [jti, *_key_args(key), VERSION, classification]).fetchone()[0]
    return jti, g


async def test_bound_calls_serve_only_their_redemption(store, two_scopes, database):
    """A hostile client with the service login: a bound call with a jti never redeemed, another
    scope's redemption, or any generation but the captured one is refused (KGJ03) whatever the
    scope's current generation; nothing is read, written or consumed."""
    alice, bob = two_scopes
    import secrets
    with app(database) as conn:
        jti, g = _redeem(conn, alice)
        assert g is not None
        assert _bound(conn, "search", jti, alice, g)  # the redemption itself is served
        before = (physical_rows(database), database.scalar(
            "SELECT count(*) FROM memory_admission_bucket"))
        for op in _BOUND:
            with pytest.raises(psycopg.Error) as err:
                _bound(conn, op, secrets.token_urlsafe(16), alice, g)  # never redeemed
            assert err.value.sqlstate == "KGJ03", op
            with pytest.raises(psycopg.Error) as err:
                _bound(conn, op, jti, bob, g)  # alice's redemption on bob's scope
            assert err.value.sqlstate == "KGJ03", op
            for guess in (g + 1, g - 1, 0, 99):
                with pytest.raises(psycopg.Error) as err:
                    _bound(conn, op, jti, alice, guess)
                assert err.value.sqlstate == "KGJ03", (op, guess)
        for guess in (g + 1, 0, 99):
            assert refused(conn, "SELECT * FROM memory_forget_bound(%s, %s, %s, %s, %s, %s, %s,"
                                 " %s, gen_random_uuid())",
                           [jti, *_key_args(alice), guess]) == "KGJ03"
        assert refused(conn, "SELECT * FROM memory_forget_bound(%s, %s, %s, %s, %s, %s, %s,"
                             " NULL, gen_random_uuid())",
                       [jti, *_key_args(bob)]) == "KGJ03"
    after = (physical_rows(database),
             database.scalar("SELECT count(*) FROM memory_admission_bucket"))
    assert after == before
    # consent moves on: the redeemed generation is stale, a guessed one still learns nothing
    await store.withdraw(alice)
    await store.grant(alice, purpose=PURPOSE)
    g2 = await store.generation(alice)
    with app(database) as conn:
        with pytest.raises(psycopg.Error) as err:
            _bound(conn, "save", jti, alice, g)
        assert err.value.sqlstate == "KGS01"
        with pytest.raises(psycopg.Error) as err:
            _bound(conn, "save", jti, alice, g2)
        assert err.value.sqlstate == "KGJ03"


async def test_a_redemption_serves_until_work_until_then_nothing(store, two_scopes, database):
    alice, _ = two_scopes
    with app(database) as conn:
        jti, g = _redeem(conn, alice)
        # work_until is exp + 120 s, and the row is forgotten then (the sweep)
        assert database.scalar("SELECT work_until - forget_at FROM memory_assertion_use"
                               " WHERE jti = %s", [jti]).total_seconds() == 0
        assert database.scalar("SELECT generation FROM memory_assertion_use WHERE jti = %s",
                               [jti]) == g
        assert _bound(conn, "save", jti, alice, g)
        with database.admin() as owner:
            owner.execute("UPDATE memory_assertion_use SET work_until = now() - interval '1 s'"
                          " WHERE jti = %s", [jti])
        rows = physical_rows(database)
        for op in _BOUND:
            with pytest.raises(psycopg.Error) as err:
                _bound(conn, op, jti, alice, g)
            assert err.value.sqlstate == "KGJ03", op
        assert physical_rows(database) == rows


async def test_a_redemption_without_consent_serves_nothing(store, two_scopes, database):
    """An assertion of another classification than the consent's captures no generation: its
    bound calls are consent_required, whatever generation they send."""
    alice, _ = two_scopes
    g = await store.generation(alice)
    with app(database) as conn:
        jti, captured = _redeem(conn, alice, classification="work")
        assert captured is None
        for op in _BOUND:
            with pytest.raises(psycopg.Error) as err:
                _bound(conn, op, jti, alice, g)
            assert err.value.sqlstate == "KGC01", op
