"""Principals with pluggable issuers (000016): the issuer registry, an OIDC principal's whole
lifecycle in direct mode, and every refusal the registry adds -- each by the database itself,
through a hostile SQL client where Python would refuse first.

The Matrix issuer of the local homeserver is what the rest of the suite exercises (its rows are
registered by ``memory_configure``); here it is checked that it is registry data like any other.
"""

from __future__ import annotations

import psycopg
import pytest
from support.db import open_store, physical_rows, scope_uuid
from support.scopes import make_key, vec
from support.settings import LOCAL, POOL_TIMEOUT
from test_roles_and_policies import connect, refused

from kagent_governed_memory import (
    AgentIdentity,
    ConsentRequired,
    GovernedMemoryStore,
    InvalidInput,
    MemoryScope,
    OidcIssuer,
    Principal,
    ReasonCode,
    ScopeDenied,
    ScopeKey,
)
from kagent_governed_memory.dev import BRIDGE_ROLE, RUNTIME_ROLE
from kagent_governed_memory.identity import MatrixIssuer
from kagent_governed_memory.policy import PROTOTYPE_POLICY

PURPOSE = "personal_preferences"
VERSION = PROTOTYPE_POLICY.version
ISS = "https://idp.example.org/realms/kagent"
OTHER_ISS = "https://other-idp.example.org"


def oidc_key(subject: str = "3f1c9a52-user", *, issuer: str = ISS, agent: str = "my-agent"
             ) -> ScopeKey:
    return ScopeKey(principal=Principal.oidc(issuer, subject),
                    agent=AgentIdentity(namespace="kagent", name=agent),
                    scope=MemoryScope.principal())


def grant_sql(kind="oidc", issuer=ISS, subject="u-1", scope_kind="principal", ref="",
              audience=("principal",)):
    return ("SELECT generation FROM memory_grant(%s,%s,%s,'kagent','my-agent',%s,%s,"
            "%s,%s,768,'personal',%s)",
            [kind, issuer, subject, scope_kind, ref, PURPOSE, VERSION, list(audience)])


@pytest.fixture
async def oidc_store(database, store, operator):
    """The service login's store serving the registered OIDC issuer ``ISS``."""
    assert await operator.register_issuer(OidcIssuer(ISS)) == "registered"
    s = await open_store(database, issuers=[OidcIssuer(ISS)])
    yield s
    await s.close()


# -- the lifecycle --------------------------------------------------------------------------


async def test_an_oidc_principal_walks_consent_save_search_inspect_forget_and_off(
        oidc_store, database):
    store, key = oidc_store, oidc_key()
    receipt = await store.grant(key, purpose=PURPOSE)
    assert receipt.generation == 1
    # the default output audience is the issuer's: the principal's own sessions
    assert await store.generation(key) == 1
    assert await store.generation(key, output_audience=["principal"]) == 1
    assert await store.generation(key, output_audience=[LOCAL]) is None
    ids = await store.save(key, 1, facts=["prefers green tea", "lives in Lyon"],
                           embeddings=[vec("prefers green tea"), vec("lives in Lyon")])
    found = await store.search(key, 1, vec("prefers green tea"), limit=1)
    assert [r.text for r in found] == ["prefers green tea"]
    page = await store.inspect(key)
    assert {e.text for e in page.entries} == {"prefers green tea", "lives in Lyon"}
    forgotten = await store.forget(key, ids[0])
    assert forgotten.deleted == 1 and forgotten.verified
    assert [e.text for e in (await store.inspect(key)).entries] == ["lives in Lyon"]
    status = await store.status(key)
    assert status.enabled and status.entry_count == 1
    off = await store.withdraw(key)
    assert off.verified and off.deleted == 1
    assert not (await store.status(key)).enabled
    assert await store.generation(key) is None
    assert physical_rows(database, key) == 0
    with database.admin() as conn:  # the row says who, under which issuer; no room
        row = conn.execute(
            "SELECT principal_issuer_kind, principal_issuer, principal_subject, scope_kind,"
            "       scope_ref, output_audience FROM memory_scope WHERE id = %s::uuid",
            [scope_uuid(database, key)]).fetchone()
    assert row == ("oidc", ISS, key.principal.subject, "principal", "", ["principal"])


async def test_the_same_subject_at_two_issuers_is_two_principals(oidc_store, operator, database):
    await operator.register_issuer(OidcIssuer(OTHER_ISS))
    oidc_store._add_issuer(OidcIssuer(OTHER_ISS))
    a, b = oidc_key("same-sub"), oidc_key("same-sub", issuer=OTHER_ISS)
    for key, fact in ((a, "fact of a"), (b, "fact of b")):
        g = (await oidc_store.grant(key, purpose=PURPOSE)).generation
        await oidc_store.save(key, g, facts=[fact], embeddings=[vec(fact)])
    assert [e.text for e in (await oidc_store.inspect(a)).entries] == ["fact of a"]
    assert [e.text for e in (await oidc_store.inspect(b)).entries] == ["fact of b"]
    assert scope_uuid(database, a) != scope_uuid(database, b)
    # and a Matrix principal is another again, with its own issuer
    matrix = make_key()
    await oidc_store.grant(matrix, purpose=PURPOSE)
    assert (await oidc_store.inspect(matrix)).entries == ()


async def test_offboarding_an_oidc_principal_blocks_only_that_issuers_subject(
        oidc_store, operator, database):
    await operator.register_issuer(OidcIssuer(OTHER_ISS))
    oidc_store._add_issuer(OidcIssuer(OTHER_ISS))
    operator._add_issuer(OidcIssuer(ISS))
    key, twin = oidc_key("alice"), oidc_key("alice", issuer=OTHER_ISS)
    for k in (key, twin):
        g = (await oidc_store.grant(k, purpose=PURPOSE)).generation
        await oidc_store.save(k, g, facts=["a fact"], embeddings=[vec("a fact")])
    report = await operator.offboard(key.principal)
    assert report.ok and [s.deleted for s in report.scopes] == [1]
    assert scope_uuid(database, key) is None  # purged
    with pytest.raises(ScopeDenied) as err:
        await oidc_store.grant(key, purpose=PURPOSE)
    assert err.value.reason is ReasonCode.PRINCIPAL_OFFBOARDED
    assert (await oidc_store.status(twin)).enabled  # the same sub at another issuer: untouched
    with database.admin() as conn:  # the block names the issuer, never the subject
        rows = conn.execute("SELECT principal_issuer_kind, principal_issuer,"
                            " octet_length(principal_ref) FROM memory_principal_block").fetchall()
    assert rows == [("oidc", ISS, 32)]
    assert await operator.unblock(key.principal)
    assert (await oidc_store.grant(key, purpose=PURPOSE)).generation >= 1


# -- refusals, each by the database -----------------------------------------------------------


async def test_an_unregistered_issuer_is_refused(database, store):
    """Python refuses a principal of an issuer the store does not serve; a store configured
    for an issuer the database does not hold is refused by the database (KGD04)."""
    with pytest.raises(ScopeDenied) as err:
        await store.grant(oidc_key(), purpose=PURPOSE)
    assert err.value.reason is ReasonCode.ISSUER_NOT_REGISTERED
    lying = await open_store(database, issuers=[OidcIssuer(ISS)])
    try:
        with pytest.raises(ScopeDenied) as err:
            await lying.grant(oidc_key(), purpose=PURPOSE)
        assert err.value.reason is ReasonCode.ISSUER_NOT_REGISTERED
    finally:
        await lying.close()
    with connect(database, BRIDGE_ROLE) as conn:
        assert refused(conn, *grant_sql()) == "KGD04"
        assert refused(conn, *grant_sql(kind="matrix", issuer="evil.example",
                                        subject="@a:evil.example", scope_kind="control_room",
                                        ref="!r:evil.example",
                                        audience=("evil.example",))) == "KGD04"
    assert database.scalar("SELECT count(*) FROM memory_scope") == 0


async def test_a_disabled_issuer_grants_nothing_and_captures_nothing(oidc_store, operator,
                                                                     database):
    key = oidc_key()
    g = (await oidc_store.grant(key, purpose=PURPOSE)).generation
    await oidc_store.save(key, g, facts=["kept"], embeddings=[vec("kept")])
    assert await operator.disable_issuer(OidcIssuer(ISS)) is True
    assert await operator.disable_issuer(OidcIssuer(ISS)) is False  # already
    registered = await operator.registered_issuer(OidcIssuer(ISS))
    assert registered is not None and registered[1] is False
    # no new consent, no generation for a request, no renewal
    assert await oidc_store.generation(key) is None
    with pytest.raises(ScopeDenied) as err:
        await oidc_store.grant(key, purpose=PURPOSE)
    assert err.value.reason is ReasonCode.ISSUER_NOT_REGISTERED
    with pytest.raises(ScopeDenied) as err:
        await oidc_store.grant(oidc_key("someone-else"), purpose=PURPOSE)
    assert err.value.reason is ReasonCode.ISSUER_NOT_REGISTERED
    # the principal keeps its controls: inspect, forget, withdraw
    assert [e.text for e in (await oidc_store.inspect(key)).entries] == ["kept"]
    assert (await oidc_store.withdraw(key)).verified
    assert physical_rows(database, key) == 0
    # registering it again enables it
    assert await operator.register_issuer(OidcIssuer(ISS)) == "replaced"
    assert (await oidc_store.grant(key, purpose=PURPOSE)).generation == g + 2


@pytest.mark.parametrize(("why", "grant", "state"), [
    ("subject not matching the pattern", grant_sql(subject="x" * 256), "KGD06"),
    ("empty subject", grant_sql(subject=""), "KGD06"),
    ("scope kind of another issuer", grant_sql(scope_kind="control_room"), "KGD01"),
    ("scope_ref given for an OIDC scope", grant_sql(ref="!room:example.org"), "KGD05"),
    ("audience of a homeserver", grant_sql(audience=(LOCAL,)), "KGD07"),
    ("audience wider than the principal", grant_sql(audience=("principal", LOCAL)), "KGD07"),
    ("Matrix subject of another server", grant_sql(
        kind="matrix", issuer=LOCAL, subject="@a:evil.example", scope_kind="control_room",
        ref="!r:example.org", audience=(LOCAL,)), "KGD06"),
    ("Matrix room of another server", grant_sql(
        kind="matrix", issuer=LOCAL, subject="@a:example.org", scope_kind="control_room",
        ref="!r:evil.example", audience=(LOCAL,)), "KGD05"),
    ("Matrix scope without a room", grant_sql(
        kind="matrix", issuer=LOCAL, subject="@a:example.org", scope_kind="control_room",
        ref="", audience=(LOCAL,)), "KGD05"),
    ("Matrix audience of another server", grant_sql(
        kind="matrix", issuer=LOCAL, subject="@a:example.org", scope_kind="control_room",
        ref="!r:example.org", audience=("evil.example",)), "KGD07"),
])
async def test_the_database_applies_the_issuers_rules(oidc_store, database, why, grant, state):
    with connect(database, BRIDGE_ROLE) as conn:
        assert refused(conn, *grant) == state, why
        # the same call with the one thing fixed is granted (so the refusal was that thing)
    assert database.scalar("SELECT count(*) FROM memory_scope") == 0


async def test_each_refusal_has_a_granted_twin(oidc_store, database):
    """The calls the previous test refuses differ from these granted ones in one argument."""
    with connect(database, BRIDGE_ROLE) as conn:
        assert conn.execute(*grant_sql()).fetchone()[0] == 1
        assert conn.execute(*grant_sql(subject="x" * 255)).fetchone()[0] == 1
        assert conn.execute(*grant_sql(
            kind="matrix", issuer=LOCAL, subject="@a:example.org", scope_kind="control_room",
            ref="!r:example.org", audience=(LOCAL,))).fetchone()[0] == 1


async def test_python_refuses_what_the_issuer_does_not_serve(oidc_store):
    narrow = OidcIssuer(ISS, subject_pattern="^[0-9a-f-]{36}$")
    with pytest.raises(ScopeDenied) as err:
        oidc_key("not-a-uuid").require_servable(narrow)
    assert err.value.reason is ReasonCode.SUBJECT_DENIED
    with pytest.raises(ScopeDenied) as err:  # an OIDC principal in a control room
        await oidc_store.grant(ScopeKey(principal=Principal.oidc(ISS, "u"),
                                        agent=AgentIdentity(namespace="kagent", name="a"),
                                        scope=MemoryScope.control_room("!r:example.org")),
                               purpose=PURPOSE)
    assert err.value.reason is ReasonCode.SCOPE_KIND_RESERVED
    with pytest.raises(InvalidInput):
        await oidc_store.grant(oidc_key(), purpose=PURPOSE, output_audience=["bad name!"])
    with pytest.raises(ConsentRequired):
        await oidc_store.save(oidc_key(), None, facts=["x"], embeddings=[vec("x")])


# -- the registry is the operator's -------------------------------------------------------------


@pytest.mark.parametrize("role", ["kgm_app", RUNTIME_ROLE, BRIDGE_ROLE])
async def test_a_hostile_login_cannot_register_or_disable_an_issuer(store, database, role):
    with connect(database, role) as conn:
        assert refused(conn, "SELECT memory_register_issuer('oidc','https://evil.example',"
                             "'principal','^.+$',NULL,ARRAY['principal'])") == "42501"
        assert refused(conn, "SELECT memory_register_issuer('matrix','evil.example',"
                             "'control_room','^.+$','^.*$',ARRAY['evil.example'])") == "42501"
        assert refused(conn, "SELECT memory_disable_issuer('matrix', %s)", [LOCAL]) == "42501"
        for table in ("memory_issuer",):
            assert refused(conn, f"SELECT * FROM {table}") == "42501"
            assert refused(conn, f"INSERT INTO {table} (issuer_kind, issuer, scope_kind,"
                                 " subject_pattern, audience) VALUES ('oidc', 'x', 'principal',"
                                 " '^.+$', ARRAY['principal'])") == "42501"
        # what it may do: read the registry through its function
        row = conn.execute("SELECT scope_kind, enabled FROM memory_get_issuer('matrix', %s)",
                           [LOCAL]).fetchone()
        assert row == ("control_room", True)
    assert database.scalar("SELECT count(*) FROM memory_issuer") == 1


async def test_register_issuer_is_idempotent_and_checks_its_patterns(store, operator, database):
    issuer = OidcIssuer(ISS)
    assert await operator.register_issuer(issuer) == "registered"
    assert await operator.register_issuer(issuer) == "unchanged"
    assert await operator.register_issuer(OidcIssuer(ISS, subject_pattern="^.{1,64}$")
                                          ) == "replaced"
    got = await operator.registered_issuer(issuer)
    assert got is not None and got[0].subject_pattern == "^.{1,64}$" and got[1]
    with psycopg.connect(database.operator_dsn, autocommit=True) as conn:
        for pattern, ref in (("no-anchors", None), ("^(unclosed$", None), ("^.+$", "^[$"),
                             ("^.+$", "unanchored"), ("", None)):
            assert refused(conn, "SELECT memory_register_issuer('oidc', 'https://x.example',"
                                 " 'principal', %s, %s, ARRAY['principal'])",
                           [pattern, ref]) == "22023", (pattern, ref)
        for kind, aud in (("OIDC", ["principal"]), ("oidc", []), ("oidc", None)):
            assert refused(conn, "SELECT memory_register_issuer(%s, 'https://x.example',"
                                 " 'principal', '^.+$', NULL, %s)", [kind, aud]) == "22023"
    # memory_configure's Matrix row is the MatrixIssuer's registration, exactly
    assert await operator.register_issuer(MatrixIssuer(LOCAL)) == "unchanged"


async def test_memory_configure_registers_the_matrix_issuer_once(database):
    from kagent_governed_memory.store import migrate

    await migrate(database.owner_dsn)  # no local server: no issuer row
    assert database.scalar("SELECT count(*) FROM memory_issuer") == 0
    await migrate(database.owner_dsn, local_server=LOCAL)
    assert database.scalar("SELECT count(*) FROM memory_issuer") == 1
    with psycopg.connect(database.operator_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT memory_disable_issuer('matrix', %s)", [LOCAL]
                            ).fetchone()[0] is True
        # a store opening again does not re-enable what the operator disabled
        assert conn.execute("SELECT memory_configure(%s)", [LOCAL]).fetchone()[0] == LOCAL
        assert conn.execute("SELECT memory_configure('other.example')").fetchone()[0] == LOCAL
    assert database.scalar("SELECT array_agg(enabled) FROM memory_issuer") == [False]
    s = await GovernedMemoryStore.open(database.dsn, local_server=LOCAL, sweep_every=None,
                                       timeout=POOL_TIMEOUT)
    try:
        with pytest.raises(ScopeDenied) as err:
            await s.grant(make_key(), purpose=PURPOSE)
        assert err.value.reason is ReasonCode.ISSUER_NOT_REGISTERED
    finally:
        await s.close()
    with connect(database, BRIDGE_ROLE) as conn:  # version 15's signature: version 15's code
        assert refused(conn, "SELECT * FROM memory_grant('matrix', '@a:example.org', 'kagent',"
                             " 'a', 'control_room', '!r:example.org', %s, %s, 768, 'personal',"
                             " ARRAY['example.org'])", [PURPOSE, VERSION]) == "KGD02"


async def test_each_signature_has_its_roles_privileges(store, database):
    """Where a name has both the issuer-generic signature and version 15's (the Matrix
    wrapper), every role may execute both or neither: no role gains or loses an operation."""
    with database.admin() as conn:
        rows = conn.execute(
            "SELECT p.proname, r.rolname, bool_or(has_function_privilege(r.oid, p.oid,"
            "       'EXECUTE')), bool_and(has_function_privilege(r.oid, p.oid, 'EXECUTE')),"
            "       count(*)"
            "  FROM pg_proc p CROSS JOIN pg_roles r"
            " WHERE p.pronamespace = current_schema()::regnamespace"
            "   AND p.proname LIKE 'memory\\_%%' AND p.prosecdef"
            "   AND r.rolname IN ('kagent_memory_runtime', 'kagent_memory_bridge',"
            "                     'kagent_memory_operator', 'kagent_memory_service',"
            "                     'kagent_memory_grants')"
            " GROUP BY p.proname, r.rolname HAVING count(*) > 1").fetchall()
    assert len({r[0] for r in rows}) == 24  # every keyed entry point has both signatures
    for name, role, some, every, _ in rows:
        assert some == every, (name, role)
