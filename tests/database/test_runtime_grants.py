"""Runtime grants on kagent main (migration 000015): the controller's A2A transport mints a
grant per forwarded request, its gRPC interceptor resolves the grant a runtime presents, the
transport revokes it when the response closes.  Attacks by a hostile SQL client holding the
grants login on every argument, the database's own lifetime, and role separation.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import timedelta

import psycopg
import pytest
from support.db import migrated
from test_roles_and_policies import connect, executable, refused

from kagent_governed_memory.dev import (
    BRIDGE_ROLE,
    CONTROLLER_ROLE,
    GRANTS_GROUP,
    GRANTS_ROLE,
    OPERATOR_ROLE,
    RUNTIME_ROLE,
)

ENTRY_POINTS = {"memory_grant_mint", "memory_grant_resolve", "memory_grant_revoke"}
MINT = "SELECT memory_grant_mint(%s, %s, %s, %s, %s, %s)"
RESOLVE = "SELECT * FROM memory_grant_resolve(%s)"
REVOKE = "SELECT memory_grant_revoke(%s)"
LIFETIME = timedelta(minutes=10)


def grant_hash() -> bytes:
    """The SHA-256 of a grant as the transport mints one (32 random bytes, base64url)."""
    return hashlib.sha256(secrets.token_urlsafe(32).encode()).digest()


def binding(h: bytes | None = None) -> list:
    return [h or grant_hash(), "kagent", "my-agent", str(uuid.uuid4()), "actor-1",
            hashlib.sha256(b"assertion").digest()]


@pytest.fixture
async def grants(database):
    await migrated(database)
    with connect(database, GRANTS_ROLE) as conn:
        yield conn


def rows(database) -> int:
    with database.admin() as conn:
        return conn.execute("SELECT count(*) FROM memory_runtime_grant").fetchone()[0]


# -- mint, resolve, revoke ----------------------------------------------------------------------


async def test_mint_resolve_revoke(grants, database):
    args = binding()
    expires = grants.execute(MINT, args).fetchone()[0]
    found = grants.execute(RESOLVE, [args[0]]).fetchall()
    assert found == [("kagent", "my-agent", uuid.UUID(args[3]), "actor-1", args[5], expires)]
    assert grants.execute(REVOKE, [args[0]]).fetchone()[0] is True
    assert grants.execute(RESOLVE, [args[0]]).fetchall() == []
    assert grants.execute(REVOKE, [args[0]]).fetchone()[0] is False  # idempotent
    assert grants.execute(RESOLVE, [args[0]]).fetchall() == []
    # a revoked grant never comes back: minting its hash again is refused
    assert refused(grants, MINT, args) == "KGG01"
    assert grants.execute(RESOLVE, [args[0]]).fetchall() == []
    with database.admin() as conn:
        assert conn.execute("SELECT revoked FROM memory_runtime_grant").fetchall() == [(True,)]


async def test_only_hashes_are_stored(grants, database):
    args = binding()
    grants.execute(MINT, args)
    with database.admin() as conn:
        cols = {c[0] for c in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'memory_runtime_grant'").fetchall()}
        stored = conn.execute("SELECT grant_hash, assertion_hash FROM memory_runtime_grant").fetchone()
    assert cols == {"grant_hash", "agent_namespace", "agent_name", "sandbox_agent_uid",
                    "actor_id", "assertion_hash", "created_at", "expires_at", "revoked"}
    assert stored == (args[0], args[5]) and all(len(h) == 32 for h in stored)


async def test_a_duplicate_hash_is_refused_and_keeps_the_first_binding(grants):
    args = binding()
    grants.execute(MINT, args)
    other = [args[0], "evil", "other-agent", str(uuid.uuid4()), "actor-2", grant_hash()]
    assert refused(grants, MINT, other) == "KGG01"
    assert grants.execute(RESOLVE, [args[0]]).fetchone()[:2] == ("kagent", "my-agent")


# -- the database owns the lifetime ---------------------------------------------------------------


async def test_the_lifetime_is_ten_minutes_set_by_sql(grants, database):
    args = binding()
    expires = grants.execute(MINT, args).fetchone()[0]
    with database.admin() as conn:
        created, stored = conn.execute(
            "SELECT created_at, expires_at FROM memory_runtime_grant").fetchone()
    assert stored == expires and stored - created == LIFETIME


def assert_no_caller_lifetime(database) -> None:
    """No grant entry point takes a time or interval argument, and there is one mint."""
    with database.admin() as conn:
        found = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.pronamespace = current_schema()::regnamespace"
            "   AND p.proname LIKE 'memory\\_grant\\_%%'").fetchall()
        timed = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p, unnest(p.proargtypes) t"
            " WHERE p.pronamespace = current_schema()::regnamespace"
            "   AND p.proname LIKE 'memory\\_grant\\_%%'"
            "   AND t::regtype::text IN ('interval', 'timestamp with time zone',"
            "        'timestamp without time zone', 'integer', 'bigint', 'numeric',"
            "        'double precision')").fetchall()
    assert sorted(f[0] for f in found) == [
        "memory_grant_mint(bytea,text,text,text,text,bytea)", "memory_grant_resolve(bytea)",
        "memory_grant_revoke(bytea)"], found
    assert timed == [], timed


async def test_a_caller_cannot_choose_or_extend_the_lifetime(grants, database):
    assert_no_caller_lifetime(database)
    args = binding()
    assert refused(grants, "SELECT memory_grant_mint(%s, %s, %s, %s, %s, %s, interval '1 year')",
                   args) == "42883"
    grants.execute(MINT, args)
    assert refused(grants, MINT, args) == "KGG01"  # no re-mint to extend it
    assert refused(grants, "UPDATE memory_runtime_grant SET expires_at = 'infinity'") == "42501"


async def test_the_check_fails_on_a_mint_that_accepts_a_ttl(grants, database):
    """The broken variant: a mint overload taking the caller's TTL is caught."""
    with psycopg.connect(database.owner_dsn, autocommit=True) as owner:
        owner.execute(
            "CREATE FUNCTION memory_grant_mint(h BYTEA, n TEXT, a TEXT, u TEXT, x TEXT, s BYTEA,"
            " ttl INTERVAL) RETURNS TIMESTAMPTZ LANGUAGE sql AS $$ SELECT now() + ttl $$")
    with pytest.raises(AssertionError):
        assert_no_caller_lifetime(database)


async def test_expiry_boundary(grants, database):
    live, dead = binding(), binding()
    grants.execute(MINT, live)
    grants.execute(MINT, dead)

    def age(h: bytes, seconds: float) -> None:  # as the owner would: move both times back
        with database.admin() as conn:
            conn.execute("UPDATE memory_runtime_grant SET created_at = created_at - %s,"
                         " expires_at = expires_at - %s WHERE grant_hash = %s",
                         [timedelta(seconds=seconds), timedelta(seconds=seconds), h])

    age(live[0], LIFETIME.total_seconds() - 5)   # 5 s left
    age(dead[0], LIFETIME.total_seconds() + 0.001)  # 1 ms past
    assert len(grants.execute(RESOLVE, [live[0]]).fetchall()) == 1
    assert grants.execute(RESOLVE, [dead[0]]).fetchall() == []
    assert grants.execute(REVOKE, [dead[0]]).fetchone()[0] is True  # revocable, still dead
    assert refused(grants, MINT, dead) == "KGG01"  # an expired hash cannot be re-minted
    age(live[0], 5)  # exactly at expiry: expires_at > now is false
    assert grants.execute(RESOLVE, [live[0]]).fetchall() == []


async def test_an_old_transaction_cannot_resolve_as_of_its_start(grants, database):
    args = binding()
    grants.execute(MINT, args)
    with connect(database, GRANTS_ROLE) as conn:
        conn.autocommit = False
        with conn.transaction():
            conn.execute("SELECT pg_sleep(5.2)")
            assert refused(conn, RESOLVE, [args[0]]) == "KGX01"
    with connect(database, GRANTS_ROLE) as conn:
        conn.autocommit = False
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert refused(conn, RESOLVE, [args[0]]) == "KGX01"


async def test_mint_deletes_grants_expired_for_a_day(grants, database):
    old, recent = binding(), binding()
    grants.execute(MINT, old)
    grants.execute(MINT, recent)
    with database.admin() as conn:
        conn.execute("UPDATE memory_runtime_grant SET created_at = created_at - interval '2 days',"
                     " expires_at = expires_at - interval '2 days' WHERE grant_hash = %s", [old[0]])
        conn.execute("UPDATE memory_runtime_grant SET created_at = created_at - interval '1 hour',"
                     " expires_at = expires_at - interval '1 hour' WHERE grant_hash = %s",
                     [recent[0]])
    assert rows(database) == 2
    grants.execute(MINT, binding())
    with database.admin() as conn:
        left = {r[0] for r in conn.execute("SELECT grant_hash FROM memory_runtime_grant")}
    assert old[0] not in left and recent[0] in left and len(left) == 2


# -- a hostile client holding the grants login ----------------------------------------------------

HUGE = "x" * (1 << 20)
BAD_MINTS = {
    "hash_empty": (0, b""), "hash_31": (0, b"\x00" * 31), "hash_33": (0, b"\x00" * 33),
    "hash_huge": (0, b"\x01" * (1 << 20)), "hash_null": (0, None),
    "namespace_null": (1, None), "namespace_empty": (1, ""), "namespace_huge": (1, HUGE),
    "agent_null": (2, None), "agent_empty": (2, ""), "agent_huge": (2, HUGE),
    "uid_null": (3, None), "uid_empty": (3, ""), "uid_not_uuid": (3, "not-a-uid"),
    "uid_upper": (3, str(uuid.uuid4()).upper()), "uid_braced": (3, "{" + str(uuid.uuid4()) + "}"),
    "uid_huge": (3, HUGE),
    "actor_null": (4, None), "actor_empty": (4, ""), "actor_huge": (4, HUGE),
    "assertion_null": (5, None), "assertion_empty": (5, b""), "assertion_31": (5, b"\x00" * 31),
    "assertion_huge": (5, b"\x01" * (1 << 20)),
}


@pytest.mark.parametrize("case", sorted(BAD_MINTS))
async def test_mint_refuses_a_bad_argument(grants, database, case):
    at, value = BAD_MINTS[case]
    args = binding()
    args[at] = value
    assert refused(grants, MINT, args) == "22023"
    assert rows(database) == 0


@pytest.mark.parametrize("value", [None, b"", b"\x00" * 31, b"\x00" * 33, b"\x01" * (1 << 20)])
async def test_resolve_and_revoke_refuse_a_bad_hash(grants, database, value):
    args = binding()
    grants.execute(MINT, args)
    assert grants.execute(RESOLVE, [value]).fetchall() == []
    assert refused(grants, REVOKE, [value]) == "22023"
    assert len(grants.execute(RESOLVE, [args[0]]).fetchall()) == 1


async def test_resolve_matches_the_exact_hash_only(grants):
    args = binding()
    grants.execute(MINT, args)
    h = args[0]
    for near in (h[:-1] + bytes([h[-1] ^ 1]), bytes(32), h[::-1]):
        assert grants.execute(RESOLVE, [near]).fetchall() == []
    assert refused(grants, "SELECT * FROM memory_grant_resolve(%s::text)", [h.hex()]) == "42883"


# -- role separation -------------------------------------------------------------------------------


async def test_the_grants_role_executes_only_the_grant_entry_points(grants, database):
    assert executable(database, GRANTS_GROUP) == ENTRY_POINTS
    for role in ("kagent_memory_runtime", "kagent_memory_bridge", "kagent_memory_operator",
                 "kagent_memory_service", "public"):
        assert not executable(database, role) & ENTRY_POINTS, role
    with database.admin() as conn:
        for name, secdef, config in conn.execute(
                "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
                " WHERE p.pronamespace = current_schema()::regnamespace"
                "   AND p.proname LIKE 'memory\\_grant\\_%%'").fetchall():
            assert secdef and any(c.startswith("search_path=") and c.endswith("pg_temp")
                                  for c in config), name
        for priv in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"):
            for role in (GRANTS_GROUP, GRANTS_ROLE, CONTROLLER_ROLE, "kgm_app", "public"):
                assert not conn.execute("SELECT has_table_privilege(%s, 'memory_runtime_grant', %s)",
                                        [role, priv]).fetchone()[0], (role, priv)


@pytest.mark.parametrize("call", [
    "SELECT memory_schema_version()", "SELECT memory_local_server()",
    "SELECT * FROM memory_get_policy('adr0023-prototype-1')",
    "SELECT memory_sweep()", "SELECT * FROM memory_runtime_grant",
    "DELETE FROM memory_runtime_grant",
])
async def test_the_grants_login_can_do_nothing_else(grants, call):
    assert refused(grants, call) == "42501"


@pytest.mark.parametrize("login", [RUNTIME_ROLE, BRIDGE_ROLE, OPERATOR_ROLE, "kgm_app"])
async def test_other_logins_cannot_mint_resolve_or_revoke(grants, database, login):
    args = binding()
    grants.execute(MINT, args)
    with connect(database, login) as conn:
        assert refused(conn, MINT, binding()) == "42501"
        assert refused(conn, RESOLVE, [args[0]]) == "42501"
        assert refused(conn, REVOKE, [args[0]]) == "42501"
        assert refused(conn, "SELECT * FROM memory_runtime_grant") == "42501"
    assert len(grants.execute(RESOLVE, [args[0]]).fetchall()) == 1


async def test_the_controller_login_mints_and_resolves(grants, database):
    args = binding()
    with connect(database, CONTROLLER_ROLE) as conn:
        conn.execute(MINT, args)
        assert len(conn.execute(RESOLVE, [args[0]]).fetchall()) == 1
        assert conn.execute(REVOKE, [args[0]]).fetchone()[0] is True
