"""Policies and issuers as configuration (D5): the packaged ADR 0023 prototype policy and any
configuration file are registered through memory_register_policy / memory_allow_policy /
memory_register_issuer, idempotently, at setup (``migrate``, ``dev-db``, ``configure``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run
from support.db import migrated, open_store
from support.scopes import make_key
from support.settings import LOCAL, POOL_TIMEOUT

from kagent_governed_memory import (
    PROTOTYPE_POLICY,
    AgentIdentity,
    GovernedMemoryStore,
    InvalidInput,
    MemoryPolicy,
    MemoryScope,
    OidcIssuer,
    Principal,
    ReasonCode,
    ScopeDenied,
    ScopeKey,
)
from kagent_governed_memory.configuration import (
    Configuration,
    PolicyRegistration,
    configure,
    load_configuration,
    packaged_configuration,
)

ISS = "https://idp.example.org"
POLICY_ROW = ("SELECT version, extract(epoch FROM max_ttl), entry_cap, fact_max_bytes,"
              " extract(epoch FROM consent_max_age), prefetch_max_subqueries,"
              " prefetch_subquery_max_bytes, explicit_ops_per_minute, explicit_burst,"
              " scope_ops_per_hour, autosave_every_user_turns, summariser_input_max_bytes,"
              " summariser_max_facts, search_limit, embedding_dimensions"
              " FROM memory_policy WHERE version = %s")


def test_the_packaged_configuration_is_the_prototype_policy_for_every_agent():
    config = packaged_configuration()
    assert config.issuers == ()
    [reg] = config.policies
    assert reg.policy == PROTOTYPE_POLICY
    assert reg.dimensions == (384, 768, 1024, 1536, 3072)
    assert reg.allow == ((None, None),)


async def test_the_packaged_file_registers_exactly_what_the_baseline_inserted(database):
    """000015 still inserts the prototype policy: registering the packaged file changes
    nothing (unchanged), and on a database without it registers the same row."""
    await migrated(database)
    inserted = database.scalar("SELECT row_to_json(p)::text FROM (" + POLICY_ROW + ") p",
                               [PROTOTYPE_POLICY.version])
    assert await configure(database.owner_dsn) == [
        ("policy", PROTOTYPE_POLICY.version, "unchanged")]
    assert await configure(database.operator_dsn) == [
        ("policy", PROTOTYPE_POLICY.version, "unchanged")]
    assert database.scalar("SELECT count(*) FROM memory_policy_allowance") == 1
    with database.admin() as conn:  # a database whose baseline inserted no policy
        conn.execute("DELETE FROM memory_policy_allowance")
        conn.execute("DELETE FROM memory_policy")
    store = None
    with pytest.raises(InvalidInput):  # a store refuses to start without its policy
        store = await open_store(database)
    assert store is None
    assert await configure(database.operator_dsn) == [
        ("policy", PROTOTYPE_POLICY.version, "registered")]
    assert database.scalar("SELECT row_to_json(p)::text FROM (" + POLICY_ROW + ") p",
                           [PROTOTYPE_POLICY.version]) == inserted
    assert database.scalar("SELECT count(*) FROM memory_policy_allowance"
                           " WHERE agent_namespace IS NULL") == 1
    store = await open_store(database)
    try:
        assert (await store.grant(make_key(), purpose="personal_preferences")).generation == 1
    finally:
        await store.close()


async def test_a_configuration_file_registers_policies_allowances_and_issuers(
        database, tmp_path: Path):
    await migrated(database)
    team = MemoryPolicy(version="team-1", entry_cap=20)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "policies": [{"policy": json.loads(team.model_dump_json()),
                      "embedding_dimensions": [768, 1024],
                      "allow": [{"namespace": "kagent", "agent": "my-agent"},
                                {"namespace": "team", "agent": None}]}],
        "issuers": [{"issuer_kind": "oidc", "issuer": ISS},
                    {"issuer_kind": "matrix", "issuer": LOCAL}]}))
    config = load_configuration(path)
    assert config.policies[0].policy == team
    first = await configure(database.operator_dsn, config)
    assert first == [("policy", "team-1", "registered"), ("issuer", f"oidc:{ISS}", "registered"),
                     ("issuer", f"matrix:{LOCAL}", "unchanged")]
    again = await configure(database.operator_dsn, config)
    assert [o for _, _, o in again] == ["unchanged"] * 3
    assert database.scalar("SELECT count(*) FROM memory_policy_allowance"
                           " WHERE policy_version = 'team-1'") == 2
    assert database.scalar("SELECT embedding_dimensions FROM memory_policy"
                           " WHERE version = 'team-1'") == [768, 1024]
    # the allowances hold: my-agent may consent under team-1, another agent of kagent may not
    async with await GovernedMemoryStore.open(database.dsn, local_server=LOCAL, policy=team,
                                              sweep_every=None, timeout=POOL_TIMEOUT) as store:
        assert (await store.grant(make_key(), purpose="personal_preferences")).generation == 1
        with pytest.raises(ScopeDenied) as err:
            await store.grant(make_key(agent="other-agent"), purpose="personal_preferences")
        assert err.value.reason is ReasonCode.POLICY_NOT_ALLOWED


async def test_the_store_configures_and_serves_its_issuers(database, operator):
    config = Configuration(policies=(PolicyRegistration(PROTOTYPE_POLICY,
                                                        (384, 768, 1024, 1536, 3072)),),
                           issuers=(OidcIssuer(ISS),))
    done = await operator.configure(config)
    assert done == [("policy", PROTOTYPE_POLICY.version, "unchanged"),
                    ("issuer", f"oidc:{ISS}", "registered")]
    key = ScopeKey(principal=Principal.oidc(ISS, "u-1"),
                   agent=AgentIdentity(namespace="kagent", name="my-agent"),
                   scope=MemoryScope.principal())
    assert (await operator.grant(key, purpose="personal_preferences")).generation == 1


@pytest.mark.parametrize("bad", [
    "not json", "[]", '{"policies": {}}', '{"other": []}',
    '{"policies": [{"policy": {"version": "v", "entry_cap": 0}}]}',
    '{"policies": [{"policy": {"version": "v"}, "embedding_dimensions": [1, 1]}]}',
    '{"policies": [{"policy": {"version": "v"}, "allow": [{"agent": "a"}]}]}',
    '{"issuers": [{"issuer_kind": "oidc", "issuer": "http://idp.example.org"}]}',
    '{"issuers": [{"issuer_kind": "saml", "issuer": "x"}]}',
    '{"issuers": [{"issuer_kind": "matrix", "issuer": "example.org", "extra": 1}]}',
])
def test_a_malformed_configuration_is_refused_before_any_round_trip(bad: str):
    with pytest.raises(InvalidInput):
        load_configuration(bad)


async def test_the_cli_registers_configuration_and_issuers(database, tmp_path: Path):
    migrate = run("migrate", "--dsn", database.owner_dsn, "--local-server", LOCAL, "--json")
    assert migrate.returncode == 0, migrate.stderr
    assert json.loads(migrate.stdout)["configured"] == [
        {"what": "policy", "name": PROTOTYPE_POLICY.version, "outcome": "unchanged"}]
    reg = run("issuer", "register", "--dsn", database.operator_dsn, "--oidc", ISS, "--json")
    assert reg.returncode == 0, reg.stderr
    assert json.loads(reg.stdout)["outcome"] == "registered"
    assert json.loads(run("issuer", "register", "--dsn", database.operator_dsn, "--oidc", ISS,
                          "--json").stdout)["outcome"] == "unchanged"
    off = run("issuer", "disable", "--dsn", database.operator_dsn, "--oidc", ISS, "--json")
    assert off.returncode == 0 and json.loads(off.stdout)["disabled"] is True
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"issuers": [{"issuer_kind": "oidc", "issuer": ISS}]}))
    conf = run("configure", "--dsn", database.operator_dsn, "--file", str(path), "--json")
    assert conf.returncode == 0, conf.stderr
    assert json.loads(conf.stdout)["configured"] == [
        {"what": "issuer", "name": f"oidc:{ISS}", "outcome": "replaced"}]  # enabled again
    assert database.scalar("SELECT enabled FROM memory_issuer WHERE issuer = %s", [ISS])
    as_app = run("issuer", "register", "--dsn", database.dsn, "--oidc", ISS, "--json")
    assert as_app.returncode == 4, as_app.stdout  # an application login: use an operator
