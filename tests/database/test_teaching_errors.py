"""Errors that teach (issue 46): each names its rule and its fix, and stays content-free.

* ``AgentIdentity(name="trip_planner")``: the naming rule (DNS-1123) and the fix (``-``), never
  the value given;
* ``!memory on <a name the bridge does not serve>``: ``unknown_agent`` names the agent the
  development bridge serves, never the name typed;
* an unset ``KGM_DSN``: reported as unset, with the fix (export it, or run ``dev-db``), not as
  a database ``dev-db`` did not create.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kagent_governed_memory import AgentIdentity, InvalidIdentity, InvalidInput, ReasonCode

from kagent_governed_memory.dev import DevBridge, dev_database

ME = AgentIdentity(namespace="dev", name="my-agent")


def test_an_agent_name_with_an_underscore_names_the_rule_and_the_fix() -> None:
    with pytest.raises(InvalidIdentity) as refused:
        AgentIdentity(namespace="kagent", name="trip_planner")
    text = str(refused.value)
    assert refused.value.reason is ReasonCode.INVALID_IDENTITY
    assert refused.value.ids["field"] == "agent_name"
    assert "DNS-1123" in text and "underscores are not allowed: use '-'" in text
    assert "trip-planner" in text  # the fix, as fixed text


def test_the_identity_rules_never_echo_the_value_given() -> None:
    for namespace, name, field in (("kagent", "Sentinel_Value_7", "agent_name"),
                                   ("Sentinel_Value_7", "my-agent", "namespace")):
        with pytest.raises(InvalidIdentity) as refused:
            AgentIdentity(namespace=namespace, name=name)
        assert refused.value.ids["field"] == field
        assert "DNS-1123" in str(refused.value)
        assert "Sentinel" not in str(refused.value) and "Sentinel" not in repr(refused.value)


def test_an_unset_kgm_dsn_is_reported_as_unset_by_the_dev_bridge() -> None:
    from kagent_governed_memory.adk.dev import DevMemory

    dev = DevMemory(ME, environ={"KGM_DEV_BRIDGE": "1", "KGM_LOCAL_SERVER": "example.org"})
    assert dev.refused == "dev_bridge_dsn"
    text = str(InvalidInput(ReasonCode.DEV_BRIDGE_REFUSED, field="dev_bridge_dsn"))
    assert "KGM_DSN is not set" in text and "kagent-governed-memory dev-db" in text
    assert "created" not in text  # not "a database dev-db did not create"


def test_an_unset_kgm_dsn_is_reported_as_unset_by_the_cli() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KGM_DSN"}
    done = subprocess.run([sys.executable, "-m", "kagent_governed_memory", "migrate"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "KGM_DSN is unset" in said, said
    assert "export KGM_DSN=" in said and "kagent-governed-memory dev-db" in said


async def test_unknown_agent_names_the_agent_the_dev_bridge_serves() -> None:
    async with dev_database() as db, await DevBridge.open(db, agent=ME, enable=True) as bridge:
        line = await bridge.command("!memory on trip_planner personal_preferences")
    assert line.startswith("refused: unknown_agent")
    assert "this bridge serves my-agent" in line
    assert "!memory on my-agent <purpose>" in line
    assert "trip_planner" not in line  # the name typed is not echoed
