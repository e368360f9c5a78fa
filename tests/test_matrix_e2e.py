"""ADR 0023 §44 walked as a user would, on real parts (issue 28, item 3).

A real Synapse homeserver (``matrix-synapse``, SQLite, loopback only, no federation listener)
started once for this module; people driven through the client-server API; the reference
bridge (``kagent_governed_memory.matrix``); google-adk A2A agents (``governed_a2a_app`` =
google-adk's ``to_a2a``) with the scripted model; the governed store on the embedded
PostgreSQL.  Where Synapse cannot start the module is skipped with a loud
``MATRIX E2E NOT RUN`` reason.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from matrix_support import (
    ATTACK,
    AGENT,
    BRIEF,
    Person,
    World,
    drop_database,
    module_database,
    synapse_log,
    world_context,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

_ENTRY = re.compile(r"^- (?P<id>\S+): (?P<text>.*) \(saved ", re.M)


def entries(inspect_body: str) -> dict[str, str]:
    """id → text of an inspect page as the user reads it."""
    return {m.group("id"): m.group("text") for m in _ENTRY.finditer(inspect_body)}


@pytest.fixture(scope="module")
def homeserver_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tmp_path_factory.mktemp("synapse")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def homeserver(homeserver_dir: Any) -> AsyncIterator[Any]:
    from kagent_governed_memory.matrix.homeserver import (
        HomeserverUnavailable,
        LocalHomeserver,
        synapse_available,
    )

    why = synapse_available()
    if why is None:
        try:
            hs = await LocalHomeserver.start(homeserver_dir, server_name="example.org")
        except HomeserverUnavailable as exc:
            why = str(exc)
    if why is not None:
        print(f"\n*** MATRIX E2E NOT RUN: {why} ***")
        pytest.skip(f"MATRIX E2E NOT RUN: {why}")
    yield hs
    await hs.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(homeserver: Any, postgresql_proc: Any) -> AsyncIterator[World]:
    db, base = module_database(postgresql_proc)
    try:
        async for w in world_context(homeserver, db):
            yield w
    finally:
        drop_database(base, db)


# -- the walk: provision, nothing before consent, consent, save, inspect, forget one, off ---


async def test_the_walk(world: World) -> None:
    alice = await world.person("alice")
    bot = world.bridge.bot.mxid
    # a direct chat with the bridge bot: `!memory room <agent>` provisions a control room
    dm = str(await alice.client.create_room(invitees=[bot]))
    for _ in range(300):
        if bot in {str(u) for u in await alice.client.get_joined_members(dm)}:
            break
        await asyncio.sleep(0.1)
    ready = await alice.ask(dm, "!memory room my-agent")
    assert "control room with my-agent is ready" in ready.body, ready.body
    [room] = await alice.invites()
    await alice.join(room)

    # the room has exactly the allowed state, read back from the homeserver
    state = {(e["type"], e["state_key"]): e["content"]
             for e in await world.bridge._read_state(room)}
    assert state[("m.room.create", "")]["room_version"] == "12"
    assert state[("m.room.create", "")].get("m.federate") is False
    assert state[("m.room.join_rules", "")] == {"join_rule": "invite"}
    assert state[("m.room.history_visibility", "")] == {"history_visibility": "joined"}
    assert state[("m.room.server_acl", "")]["allow"] == ["example.org"]
    assert state[("m.room.server_acl", "")]["allow_ip_literals"] is False
    assert ("m.room.encryption", "") not in state
    joined = {k[1] for k, c in state.items() if k[0] == "m.room.member"
              and c["membership"] == "join"}
    ghost = world.bridge._ghosts["my-agent"].mxid
    assert joined == {alice.user_id, bot, ghost}

    # nothing is collected before consent
    before = world.rows()
    said = await alice.ask(room, "Remember that I prefer green tea.")
    assert said.sender == ghost and said.body == "Not saved: consent_required.", said
    assert world.rows() == before
    status = await alice.ask(room, "!memory status my-agent")
    assert "Memory is off for my-agent" in status.body

    # consent is an explicit act: the first `on` changes nothing and asks for confirmation
    asked = await alice.ask(room, "!memory on my-agent personal_preferences")
    assert "To confirm" in asked.body and "kept at most 7 days" in asked.body, asked.body
    assert "Memory is off" in (await alice.ask(room, "!memory status my-agent")).body
    confirmed = await alice.ask(room, asked.body.strip().splitlines()[-1])
    assert confirmed.body.startswith("Memory is on for my-agent"), confirmed.body

    assert (await alice.ask(room, "Remember that I prefer green tea.")).body == "Saved."
    assert (await alice.ask(room, "Remember that my cat is called Miso.")).body == "Saved."
    recalled = await alice.ask(room, "What do I like to drink?")
    assert recalled.sender == ghost and "I prefer green tea." in recalled.body, recalled

    # private inspect: the subject's own entries, from the bot, in the control room
    page = await alice.ask(room, "!memory inspect my-agent")
    assert page.sender == bot
    found = entries(page.body)
    assert sorted(found.values()) == ["I prefer green tea.", "my cat is called Miso."], page.body

    # exact one-entry forget
    [tea] = [i for i, t in found.items() if "tea" in t]
    forgot = await alice.ask(room, f"!memory forget my-agent {tea}")
    assert forgot.body == f"Forgot entry {tea}: verified gone.", forgot.body
    after = entries((await alice.ask(room, "!memory inspect my-agent")).body)
    assert list(after.values()) == ["my cat is called Miso."]
    assert "green tea" not in (await alice.ask(room, "What do I like to drink?")).body

    # off = disable and clear, after a confirmation
    asked = await alice.ask(room, "!memory off my-agent")
    assert "erases everything" in asked.body
    assert len(entries((await alice.ask(room, "!memory inspect my-agent")).body)) == 1
    off = await alice.ask(room, asked.body.strip().splitlines()[-1])
    assert off.body == "Memory is off for my-agent: 1 entries erased and verified gone.", off.body
    assert (await alice.ask(room, "Remember that I prefer coffee.")).body == \
        "Not saved: consent_required."
    assert "remembers nothing" in (await alice.ask(room, "!memory inspect my-agent")).body
    assert world.rows() == before
