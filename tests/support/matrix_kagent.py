"""The Matrix world in kagent mode: the same homeserver, bridge and google-adk agents as
``matrix_support.build_world``, with ``tests/kagent/test_kagent_mode.py``'s wiring -- each agent's
``GovernedMemoryService`` on ``KagentControllerStore`` (its ServiceAccount token), the bridge's
controls on ``KagentBridgeStore`` (the bridge's token), both over HTTP to the patched kagent
controller compiled from the Go series (``go_controller``), which holds the only database login.

The controller serves one policy (``PROTOTYPE_POLICY``: 7-day TTL, 100 entries, 3 explicit
operations in a burst then 6 a minute per user and agent); there is no brief agent.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from contextlib import AsyncExitStack
from typing import Any

from support.db import Db
from support.settings import CONTROLLER_BUDGETS, LOCAL
from support.go_controller import (
    BRIDGE_SERVICE_ACCOUNT,
    Unavailable,
    build,
    controller,
    service_account_token,
)
from support.matrix import AGENT, ISSUER, OTHER, World, closing_people, serve_governed, start_bridge

from kagent_governed_memory import KagentControllerStore
from kagent_governed_memory.kagent import KagentBridgeStore
from kagent_governed_memory.scope import generate_private_key, key_id, public_key_pem
from kagent_governed_memory.store import migrate

NOT_RUN = "MATRIX KAGENT MODE NOT RUN"


def unavailable() -> str | None:
    """Why the compiled controller cannot be had here (no Go, no kagent source), else None;
    builds it when its cache is cold."""
    try:
        build()
    except Unavailable as exc:
        return str(exc)
    return None


async def build_kagent_world(stack: AsyncExitStack, hs: Any, db: Db) -> World:
    await migrate(db.owner_dsn, local_server=LOCAL)  # registers the controller's policy
    private = generate_private_key()
    env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(private).decode(),
           "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
    process = stack.enter_context(controller(db.controller_dsn, local_server=LOCAL, env=env))
    public = {key_id(private): private.public_key()}
    agents = {}
    for word, identity in (("my-agent", AGENT), ("other-agent", OTHER)):
        runtime = KagentControllerStore(
            process.url, agent=identity, local_server=LOCAL,
            token=service_account_token(identity.namespace, identity.name), **CONTROLLER_BUDGETS)
        stack.push_async_callback(runtime.aclose)
        agents[word] = await serve_governed(stack, identity, runtime, public)
    store = KagentBridgeStore(process.url, local_server=LOCAL,
                              token=service_account_token(*BRIDGE_SERVICE_ACCOUNT),
                              **CONTROLLER_BUDGETS)
    stack.push_async_callback(store.aclose)
    bridge = await start_bridge(stack, hs, "kagent-bot", agents, store, private, prefix="k-")
    return closing_people(stack, World(hs=hs, db=db, bridge=bridge, brief_bridge=None,
                                       bridge_store=store, agents=agents, mode="kagent",
                                       controller=process, prefix="k-"))


def database_logins(db: Db) -> set[str]:
    """The logins connected to the module's database now, but the test's own (superuser)."""
    with db.admin() as conn:
        return {r[0] for r in conn.execute(
            "SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname ="
            " current_database() AND usename <> current_user AND backend_type = 'client backend'")}


async def explicit_budget(world: World, user_id: str, agent: str = "my-agent") -> None:
    """Kagent mode: wait until the user's explicit-operation bucket for ``agent`` holds one
    operation again (the controller's policy: a burst of 3, then one every 10 s); direct mode's
    policy is generous, so no wait."""
    if world.mode != "kagent":
        return
    from kagent_governed_memory import Principal

    identity = world.agents[agent].identity
    principal = Principal(mxid=user_id, origin="native_local")
    issuer = principal.issuer  # memory_admit (000016): the issuer length-prefixed
    name = "sender:" + hashlib.sha256(
        f"{principal.issuer_kind}/{len(issuer.encode())}/{issuer}/{principal.subject}/"
        f"{identity.namespace}/{identity.name}".encode()).hexdigest()[:32]
    for _ in range(300):
        available = world.db.scalar(
            "SELECT least(p.explicit_burst, b.tokens + extract(epoch FROM now() - b.updated_at)"
            " * p.explicit_ops_per_minute / 60.0) FROM memory_admission_bucket b, memory_policy p"
            " WHERE b.bucket = %s AND p.version = 'adr0023-prototype-1'", [name])
        if available is None:  # the name must be the function's: never "no bucket, no wait"
            raise AssertionError(f"no explicit-operation bucket {name} for {user_id}")
        if float(available) >= 1.05:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the explicit-operation budget did not refill in 30 s")


def controller_routes(world: World) -> set[str]:
    """The governed routes the controller answered with success, from its own log."""
    found = set()
    for line in world.controller.log.read_text().splitlines():
        if "Request completed" in line:
            fields = json.loads(line[line.index("{"):])
            if fields.get("status") in (200, 201):
                found.add(str(fields["path"]).rsplit("/", 1)[-1])
    return found


def assert_served_by_the_controller(world: World) -> None:
    """Every store call of the walk went through the controller: it is the only login on the
    module's database, and its log has the bridge's routes (which only the bridge's
    ServiceAccount may call) and the agent runtime's."""
    from kagent_governed_memory.dev import CONTROLLER_ROLE

    logins = database_logins(world.db)
    assert logins == {CONTROLLER_ROLE}, f"logins on the database besides the controller: {logins}"
    routes = controller_routes(world)
    bridge = {"consent", "status", "inspect", "forget", "withdraw"}
    runtime = {"generation", "admit", "entries", "search"}
    assert bridge | runtime <= routes, sorted((bridge | runtime) - routes)


def controller_sinks(world: World) -> list[tuple[str, str]]:
    """Kagent mode: the controller's own log, a sink to probe (it logged, so it can leak)."""
    if world.mode != "kagent":
        return []
    log = world.controller.log.read_text()
    assert "Governed memory operation" in log
    return [("the controller's log", log)]
