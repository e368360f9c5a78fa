"""``kagent-governed-memory demo --matrix``: the control room, locally, as a person sees it.

Starts a throwaway Synapse homeserver (SQLite, loopback only), the embedded PostgreSQL (the
development database), a google-adk agent served over A2A (``governed_a2a_app``, the scripted
model), and the reference bridge; then a scripted user, Alice, talks to the bridge bot and the
agent through the client-server API.  At the end it prints the control room's transcript as
the homeserver holds it.  Needs the ``matrix-demo`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import socket
import tempfile
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from mautrix.api import Method, Path as MatrixPath
from mautrix.client import ClientAPI
from mautrix.types import RoomID, UserID

from ..dev._database import dev_database
from ..identity import AgentIdentity
from ..policy import DEV_POLICY
from ..scope._keys import generate_private_key, key_id
from ..store._store import GovernedMemoryStore
from ._logs import quiet_logger
from .bridge import AgentRoute, MatrixBridge, MatrixLogin
from .homeserver import LocalHomeserver

__all__ = ["run_matrix_demo"]

AGENT = AgentIdentity(namespace="kagent", name="my-agent")
ISSUER = "urn:kagent-governed-memory:matrix-demo"
_TOKEN = re.compile(r"\bc1\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]+")
_TEA = re.compile(r"^- (\S+): I prefer green tea", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _serving(app: Any) -> AsyncIterator[str]:
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(600):
            if server.started or task.done():
                break
            await asyncio.sleep(0.05)
        if not server.started:
            raise RuntimeError("the demo agent's A2A server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=60)


class _User:
    """The scripted person: sends a message, waits for the one reply it gets."""

    def __init__(self, url: str, user_id: str, token: str) -> None:
        self.user_id = user_id
        self.client = ClientAPI(mxid=UserID(user_id), base_url=url, token=token,
                                log=quiet_logger())

    async def events(self, room_id: str, limit: int = 100) -> list[dict[str, Any]]:
        data = await self.client.api.request(Method.GET,
                                             MatrixPath.v3.rooms[RoomID(room_id)].messages,
                                             query_params={"dir": "b", "limit": str(limit)})
        return list(reversed(data.get("chunk") or []))

    async def say(self, room_id: str, text: str, timeout: float = 120) -> str:
        sent = str(await self.client.send_text(RoomID(room_id), text))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = await self.events(room_id, 30)
            ids = [e.get("event_id") for e in events]
            if sent in ids:
                for e in events[ids.index(sent) + 1:]:
                    if e.get("type") == "m.room.message" and e.get("sender") != self.user_id:
                        return str(e["content"].get("body", ""))
            await asyncio.sleep(0.1)
        raise RuntimeError("no answer from the bridge")

    async def invitation(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = await self.client.api.request(Method.GET, MatrixPath.v3.sync,
                                                 query_params={"timeout": "0"})
            invited = list((data.get("rooms") or {}).get("invite") or {})
            if invited:
                return str(invited[0])
            await asyncio.sleep(0.1)
        raise RuntimeError("no invitation arrived")


async def _agent(stack: AsyncExitStack, db: Any, public: dict[str, Any]) -> str:
    from google.adk.agents import LlmAgent

    from ..adk import GovernedMemoryService
    from ..adk.a2a import governed_a2a_app
    from ..embedding import HashingEmbedder
    from ..adk._scripted import ScriptedModel

    async with await GovernedMemoryStore.open(db.operator_dsn, local_server=db.local_server,
                                              sweep_every=None, max_size=1) as operator:
        await operator.register_runtime_login("kgm_runtime", AGENT)
    runtime = await GovernedMemoryStore.open(db.runtime_dsn, local_server=db.local_server,
                                             policy=DEV_POLICY, sweep_every=None)
    stack.push_async_callback(runtime.close)
    model = ScriptedModel()
    memory = GovernedMemoryService(runtime, agent=AGENT, embedder=HashingEmbedder(),
                                   summariser=model)
    stack.push_async_callback(memory.aclose)
    agent = LlmAgent(name="assistant", model=model, instruction="You help the user.")
    app = governed_a2a_app(agent, memory, public_keys=public, issuer=ISSUER)
    return await stack.enter_async_context(_serving(app))


async def _conversation(alice: _User, bot: str) -> str:
    dm = str(await alice.client.create_room(invitees=[UserID(bot)]))
    for _ in range(600):
        if bot in {str(u) for u in await alice.client.get_joined_members(RoomID(dm))}:
            break
        await asyncio.sleep(0.1)
    await alice.say(dm, "!memory room my-agent")
    room = await alice.invitation()
    await alice.client.join_room_by_id(RoomID(room))
    await alice.say(room, "Remember that I prefer green tea.")
    asked = await alice.say(room, "!memory on my-agent personal_preferences")
    await alice.say(room, asked.strip().splitlines()[-1])
    await alice.say(room, "Remember that I prefer green tea.")
    await alice.say(room, "Remember that my cat is called Miso.")
    await alice.say(room, "What do I like to drink?")
    page = await alice.say(room, "!memory inspect my-agent")
    tea = _TEA.search(page)
    if tea is not None:
        await alice.say(room, f"!memory forget my-agent {tea.group(1)}")
    await alice.say(room, "What do I like to drink?")
    asked = await alice.say(room, "!memory off my-agent")
    await alice.say(room, asked.strip().splitlines()[-1])
    await alice.say(room, "!memory status my-agent")
    return room


def _transcript(events: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    lines = []
    for e in events:
        if e.get("type") != "m.room.message":
            continue
        who = names.get(str(e.get("sender")), str(e.get("sender")))
        body = _TOKEN.sub(lambda m: m.group(0)[:14] + "…", str(e["content"].get("body", "")))
        first, *rest = body.splitlines() or [""]
        lines.append(f"{who:>10}: {first}")
        lines += [f"{'':>10}  {line}" for line in rest]
    return lines


async def run_matrix_demo(args: argparse.Namespace) -> int:
    logging.getLogger("kagent_governed_memory").setLevel(logging.ERROR)  # the transcript only
    os.environ.setdefault("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "false")  # as deployed
    warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]", category=UserWarning)
    server = args.local_server
    print(f"starting a throwaway Synapse homeserver ({server}, loopback only), the embedded "
          "PostgreSQL, an A2A agent and the reference bridge ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="kgm-matrix-demo-") as work:
        async with AsyncExitStack() as stack, dev_database(local_server=server) as db:
            hs = await LocalHomeserver.start(Path(work) / "synapse", server_name=server)
            stack.push_async_callback(hs.stop)
            private = generate_private_key()
            url = await _agent(stack, db, {key_id(private): private.public_key()})
            logins = {}
            for name in ("memory-bot", "my-agent", "alice"):
                logins[name] = MatrixLogin(*await hs.register(name))
            bridge_store = await GovernedMemoryStore.open(
                db.bridge_dsn, local_server=server, policy=DEV_POLICY, sweep_every=None)
            stack.push_async_callback(bridge_store.close)
            bridge = MatrixBridge(
                homeserver_url=hs.url, server_name=server, bot=logins["memory-bot"],
                agents={"my-agent": AgentRoute(AGENT, url, logins["my-agent"])},
                store=bridge_store, private_key=private, issuer=ISSUER)
            await bridge.start()
            stack.push_async_callback(bridge.close)
            alice = _User(hs.url, logins["alice"].user_id, logins["alice"].access_token)
            stack.push_async_callback(alice.client.api.session.close)
            room = await _conversation(alice, logins["memory-bot"].user_id)
            names = {login.user_id: name for name, login in logins.items()}
            lines = _transcript(await alice.events(room), names)
    print(f"\nThe control room, as Alice's Matrix client shows it (room version 12, invite-only, "
          f"members: alice, memory-bot, my-agent; confirmation tokens shortened):\n")
    print("\n".join(lines))
    print("\ndemo complete: nothing collected before consent, one fact forgotten and verified, "
          "memory off and erased.")
    return 0
