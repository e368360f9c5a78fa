"""The Matrix end-to-end module's fixtures: one Synapse for the module, and one world on it per
mode (``direct_world``; ``kagent_world``, through the compiled controller), both up for the whole
module; ``world`` is the one of the test's ``mode`` (``both_modes`` runs a test in each)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from support.matrix import World, drop_database, entries, module_database, world_context


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


async def _world(homeserver: Any, postgresql_proc: Any, mode: str) -> AsyncIterator[World]:
    db, base = module_database(postgresql_proc)
    try:
        async for w in world_context(homeserver, db, mode):
            yield w
    finally:
        drop_database(base, db)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def direct_world(homeserver: Any, postgresql_proc: Any) -> AsyncIterator[World]:
    async for w in _world(homeserver, postgresql_proc, "direct"):
        yield w


@pytest.fixture(scope="module")
def controller_built() -> None:
    """The compiled controller, built (or from its cache); loudly NOT RUN without Go or
    kagent's source -- asked before the homeserver, so that is the reason given."""
    from support.matrix_kagent import NOT_RUN, unavailable

    why = unavailable()
    if why is not None:
        print(f"\n*** {NOT_RUN}: {why} ***")
        pytest.skip(f"{NOT_RUN}: {why}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kagent_world(controller_built: None, homeserver: Any,
                       postgresql_proc: Any) -> AsyncIterator[World]:
    """The same walk through the compiled controller (``matrix_kagent``), on the same
    homeserver."""
    async for w in _world(homeserver, postgresql_proc, "kagent"):
        yield w


@pytest.fixture(params=["direct"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def world(request: pytest.FixtureRequest, mode: str) -> World:
    """The module's world of ``mode``: both stay up for the whole module, so the kagent runs
    fall inside the minute ``test_hard_expiry`` waits for anyway."""
    found: World = request.getfixturevalue(f"{mode}_world")
    return found


# the core walk in both modes: ``direct`` and ``kagent`` (through the compiled controller)
both_modes = pytest.mark.parametrize(
    "mode", ["direct", pytest.param("kagent", marks=pytest.mark.controller)])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def expiring(direct_world: World) -> dict[str, Any]:
    """A fact saved under the shortest entry lifetime the schema allows (one minute), at the
    start of the module; ``test_hard_expiry`` (last in the file) waits out the rest."""
    world = direct_world
    mia = await world.person("mia")
    room = await world.control_room(mia, "brief-agent", bridge=world.brief_bridge)
    assert "Memory is on" in (await world.consent(mia, room, "brief-agent")).body
    saved_at = time.monotonic()
    assert (await mia.ask(room, "Remember that my train leaves at nine.")).body == "Saved."
    page = await mia.ask(room, "!memory inspect brief-agent")
    assert list(entries(page.body).values()) == ["my train leaves at nine."], page.body
    return {"person": mia, "room": room, "saved_at": saved_at}
