"""The reference Matrix bridge: control rooms, ``!memory`` commands and the agent relay.

One bridge bot (a Matrix user the bridge logs in as, syncing with mautrix's client API) and,
per agent, the agent's ghost (a local Matrix user the bridge speaks as).  For each message the
bot sees in a control room it created:

* ``!memory …`` runs through ``MemoryControls`` for the sender, with a room check that re-reads
  the room's state from the homeserver (``room.room_check``); the reply is rendered as text
  (``render``) and, if it carries content (an inspect page), checked again right before it is
  sent and before a retry;
* anything else from the subject is relayed to the agent over A2A (``relay.A2ARelay``: a freshly
  signed scope assertion per request, context id = the room's A2A context) after the room
  check passes, and the agent's answer is sent as the ghost only if the room check passes again
  immediately before sending (and before a retry); on drift a content-free notice is sent
  instead.

``!memory room <agent>`` sent to the bot in any room (a direct chat) creates a control room for
the sender with that agent and invites them; a bridged (application-service) or remote sender is
refused before anything is created.  Rooms the bridge did not create are never served.

Logging: the ``kagent_governed_memory.matrix`` logger writes reason codes, action names and
opaque ids only (room digests, scope ids); mautrix gets a disabled logger (``_logs``).  The room
registry is in memory (control state only, ADR 0023 §21): a production bridge persists it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mautrix.client import Client, ClientAPI
from mautrix.types import (
    EventType,
    Membership,
    MessageEvent,
    MessageType,
    RoomID,
    StateEvent,
    UserID,
)

from ..controls._controls import (
    AsyncConfirmationLedger,
    ConfirmationLedger,
    MemoryControls,
    parse_memory_command,
)
from ..controls._render import render_notice, render_reply
from ..controls._room import ControlRoomCheck
from ..errors import GovernanceError, ReasonCode
from ..identity import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey, server_name_of
from ..repository import ControlRepository, RequestRecorder
from ._logs import quiet_logger
from .relay import A2ARelay, RelayError, room_context_id
from .room import create_control_room, read_room_state, room_check

__all__ = ["AgentRoute", "MatrixBridge", "MatrixLogin"]

logger = logging.getLogger("kagent_governed_memory.matrix")
_SEND_ATTEMPTS = 2
_PROVISION = re.compile(r"!memory\s+room\s+(?P<agent>\S{1,64})\s*")


@dataclass(frozen=True)
class MatrixLogin:
    """A Matrix user the bridge acts as, and its access token (never shown by ``repr``)."""

    user_id: str
    access_token: str = field(repr=False)


@dataclass(frozen=True)
class AgentRoute:
    """One agent the bridge serves: who it is, where its A2A endpoint is, its ghost."""

    identity: AgentIdentity
    a2a_url: str
    ghost: MatrixLogin


@dataclass(frozen=True)
class _ControlRoom:
    room_id: str
    subject: Principal
    word: str  # the agent's command word (its key in ``agents``)


def opaque(value: str) -> str:
    """A bounded opaque id for a room or user in a log line."""
    return hashlib.sha256(value.encode()).hexdigest()[:12]


class MatrixBridge:
    """Create with the bot's and the ghosts' logins, the bridge's store and signing key; then
    ``await bridge.start()`` (begins syncing) and ``await bridge.close()``."""

    def __init__(
        self,
        *,
        homeserver_url: str,
        server_name: str,
        bot: MatrixLogin,
        agents: Mapping[str, AgentRoute],
        store: ControlRepository,
        private_key: Ed25519PrivateKey,
        issuer: str,
        bridged_users: Sequence[str] = (),
        confirmation_secret: bytes | None = None,
        ledger: ConfirmationLedger | AsyncConfirmationLedger | None = None,
    ) -> None:
        self.server_name = server_name
        self.store = store
        self._agents = dict(agents)
        self._bridged = [re.compile(p) for p in bridged_users]
        quiet = quiet_logger()
        self.bot = Client(mxid=UserID(bot.user_id), base_url=homeserver_url,
                          token=bot.access_token, log=quiet)
        self.bot.ignore_initial_sync = True
        self.bot.ignore_first_sync = True
        self._ghosts: dict[str, ClientAPI] = {
            word: ClientAPI(mxid=UserID(route.ghost.user_id), base_url=homeserver_url,
                            token=route.ghost.access_token, log=quiet)
            for word, route in self._agents.items()}
        self._relays = {word: A2ARelay(route.a2a_url, agent=route.identity,
                                       private_key=private_key, issuer=issuer,
                                       audience=[server_name],
                                       recorder=store if isinstance(store, RequestRecorder)
                                       else None)
                        for word, route in self._agents.items()}
        self._controls = MemoryControls(
            store, agents={w: r.identity for w, r in self._agents.items()},
            secret=confirmation_secret or secrets.token_bytes(32), ledger=ledger)
        self._rooms: dict[str, _ControlRoom] = {}
        self._queues: dict[str, asyncio.Queue[tuple[str, str]]] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._sync: asyncio.Future[Any] | None = None

    def __repr__(self) -> str:
        return f"MatrixBridge(agents={len(self._agents)}, rooms={len(self._rooms)})"

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, *, ready_timeout: float = 60.0) -> None:
        """Start syncing as the bot; returns once the first sync is done (events after it are
        handled, earlier ones are not)."""
        self.bot.add_event_handler(EventType.ROOM_MESSAGE, self._on_message)
        self.bot.add_event_handler(EventType.ROOM_MEMBER, self._on_member)
        self._sync = self.bot.start(None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_timeout
        while not await self.bot.sync_store.get_next_batch():
            if self._sync.done() or loop.time() > deadline:
                raise RuntimeError("the bridge bot could not sync with the homeserver")
            await asyncio.sleep(0.05)
        logger.info("matrix bridge started: agents=%d", len(self._agents))

    async def close(self) -> None:
        self.bot.stop()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._sync is not None:
            await asyncio.gather(self._sync, return_exceptions=True)
        for relay in self._relays.values():
            await relay.aclose()
        for client in (self.bot, *self._ghosts.values()):
            await client.api.session.close()

    # -- identities and rooms --------------------------------------------------------------

    def principal(self, mxid: str) -> Principal:
        """The sender as a principal: remote server → ``remote_federated``; a user in an
        application service's namespace → ``external_appservice``; else ``native_local``."""
        if server_name_of(mxid) != self.server_name:
            origin = OriginKind.REMOTE_FEDERATED
        elif any(p.fullmatch(mxid) for p in self._bridged):
            origin = OriginKind.EXTERNAL_APPSERVICE
        else:
            origin = OriginKind.NATIVE_LOCAL
        return Principal(mxid=mxid, origin=origin)

    async def provision(self, subject: str, agent: str) -> str:
        """Create a control room for ``subject`` with agent ``agent`` (its command word) and
        invite them; returns the room ID.  Raises ``ScopeDenied(subject_not_local)`` for a
        bridged or remote subject and ``InvalidInput(unknown_agent)``, before creating
        anything."""
        from ..errors import InvalidInput, ScopeDenied

        principal = self.principal(subject)
        if principal.origin is not OriginKind.NATIVE_LOCAL:
            logger.info("matrix provision refused: reason=%s user=%s",
                        ReasonCode.SUBJECT_NOT_LOCAL.value, opaque(subject))
            raise ScopeDenied(ReasonCode.SUBJECT_NOT_LOCAL)
        if agent not in self._agents:
            raise InvalidInput(ReasonCode.UNKNOWN_AGENT)
        room_id = await create_control_room(self.bot, self._ghosts[agent], subject=subject,
                                            local_server=self.server_name,
                                            name=f"Memory: {agent}")
        self._rooms[room_id] = _ControlRoom(room_id, principal, agent)
        logger.info("matrix control room created: room=%s", opaque(room_id))
        return room_id

    async def check(self, room_id: str, agent: AgentIdentity | None = None) -> ControlRoomCheck:
        """U6 on the room's state as the homeserver answers now (never a cached copy)."""
        room = self._rooms.get(room_id)
        word = self._word_of(agent) if agent is not None else (room.word if room else None)
        if room is None or word is None:
            return ControlRoomCheck(allowed=False, reason=ReasonCode.MEMBERS_MISMATCH)
        return await room_check(self.bot, room_id, subject=room.subject, bot=self.bot.mxid,
                                ghost=self._ghosts[word].mxid, local_server=self.server_name,
                                reader=self._read_state)

    async def _read_state(self, room_id: str) -> list[Any] | None:
        return await read_room_state(self.bot, room_id)

    def _word_of(self, agent: AgentIdentity) -> str | None:
        return next((w for w, r in self._agents.items() if r.identity == agent), None)

    # -- events ----------------------------------------------------------------------------

    async def _on_member(self, evt: StateEvent) -> None:
        content = evt.content
        if (evt.state_key == self.bot.mxid
                and getattr(content, "membership", None) == Membership.INVITE
                and str(evt.room_id) not in self._rooms):
            try:  # a direct chat with the bot, for `!memory room <agent>`
                await self.bot.join_room_by_id(evt.room_id)
            except Exception:
                logger.info("matrix join failed: room=%s", opaque(str(evt.room_id)))

    async def _on_message(self, evt: MessageEvent) -> None:
        sender = str(evt.sender)
        if sender == self.bot.mxid or sender in {g.mxid for g in self._ghosts.values()}:
            return
        body = getattr(evt.content, "body", None)
        if evt.content.msgtype not in (MessageType.TEXT, MessageType.NOTICE) \
                or not isinstance(body, str):
            return
        room_id = str(evt.room_id)
        queue = self._queues.get(room_id)
        if queue is None:  # one worker per room: its messages are handled in order
            queue = self._queues[room_id] = asyncio.Queue()
            self._workers.append(asyncio.create_task(self._work(room_id, queue)))
        await queue.put((sender, body))

    async def _work(self, room_id: str, queue: asyncio.Queue[tuple[str, str]]) -> None:
        while True:
            sender, body = await queue.get()
            try:
                await self.handle(room_id, sender, body)
            except Exception as exc:  # never the exception's text: it may carry content
                logger.warning("matrix message failed: error=%s room=%s",
                               type(exc).__name__, opaque(room_id))

    async def handle(self, room_id: str, sender: str, body: str) -> None:
        """One message from ``sender`` in ``room_id`` (what the sync handler calls)."""
        room = self._rooms.get(room_id)
        if room is None:
            await self._outside_control_room(room_id, sender, body)
        elif body.lstrip().startswith("!memory"):
            await self._command(room, sender, body.strip())
        else:
            await self._relay(room, sender, body)

    async def _outside_control_room(self, room_id: str, sender: str, body: str) -> None:
        match = _PROVISION.fullmatch(body.strip())
        if match is None:
            if body.lstrip().startswith("!memory"):
                await self._send(room_id, render_notice(ReasonCode.MEMBERS_MISMATCH))
            return
        try:
            control = await self.provision(sender, match.group("agent"))
        except GovernanceError as exc:
            await self._send(room_id, render_notice(exc.reason))
            return
        await self._send(room_id, f"Your control room with {match.group('agent')} is ready: "
                                  "accept the invitation. Memory is off until you turn it on "
                                  f"there (!memory on {match.group('agent')} <purpose>).")
        logger.info("matrix provision: room=%s control=%s", opaque(room_id), opaque(control))

    async def _command(self, room: _ControlRoom, sender: str, body: str) -> None:
        reply = await self._controls.handle(
            body, sender=self.principal(sender), subject=room.subject, room_id=room.room_id,
            room_check=lambda agent: self.check(room.room_id, agent))
        action, word = "invalid", room.word
        try:
            parsed = parse_memory_command(body)
            action, word = parsed.action, parsed.agent
        except GovernanceError:
            pass
        text = render_reply(reply, agent=word, command=body, policy=self.store.policy)
        if getattr(reply, "reason", None) is ReasonCode.UNKNOWN_AGENT:  # name the room's agent
            text += f" This control room is for {room.word}: !memory on {room.word} <purpose>."
        reason = getattr(reply, "reason", None)
        logger.info("matrix command: action=%s outcome=%s room=%s", action,
                    reason.value if isinstance(reason, ReasonCode) else type(reply).__name__,
                    opaque(room.room_id))
        await self._send(room.room_id, text, content_bearing=bool(reply.content_bearing),
                         room=room)

    async def _relay(self, room: _ControlRoom, sender: str, body: str) -> None:
        if self.principal(sender) != room.subject:
            return  # only the subject talks to the agent here (others drift the room anyway)
        admitted = await self.check(room.room_id)
        if not admitted.allowed:
            reason = admitted.reason or ReasonCode.ROOM_STATE_INVALID
            logger.info("matrix relay refused: reason=%s room=%s", reason.value,
                        opaque(room.room_id))
            await self._send(room.room_id, render_notice(reason))
            return
        route = self._agents[room.word]
        key = ScopeKey(principal=room.subject, agent=route.identity,
                       scope=MemoryScope.control_room(room.room_id))
        try:
            answer = await self._relays[room.word].ask(
                key, body, context_id=room_context_id(room.room_id, route.identity))
        except RelayError as exc:
            logger.info("matrix relay failed: reason=%s room=%s", exc.reason, opaque(room.room_id))
            await self._send(room.room_id, f"The agent could not answer ({exc.reason}).")
            return
        logger.info("matrix relay: state=%s parts=%d scope=%s", answer.state, len(answer.texts),
                    key.opaque_id)
        text = "\n".join(answer.texts) or "(the agent sent no text)"
        await self._send(room.room_id, text, content_bearing=True, room=room,
                         as_ghost=room.word)

    # -- sending ---------------------------------------------------------------------------

    async def _send(self, room_id: str, text: str, *, content_bearing: bool = False,
                    room: _ControlRoom | None = None, as_ghost: str | None = None) -> None:
        """Send one reply; a content-bearing one only after the room check passes *now*,
        re-checked before every retry.  Drift replaces it with a content-free notice."""
        for attempt in range(1, _SEND_ATTEMPTS + 1):
            client: ClientAPI = self._ghosts[as_ghost] if as_ghost else self.bot
            msgtype = MessageType.TEXT if as_ghost else MessageType.NOTICE
            if content_bearing:
                verdict = await self.check(room_id)
                if not verdict.allowed:
                    reason = verdict.reason or ReasonCode.ROOM_STATE_INVALID
                    logger.info("matrix reply suppressed: reason=%s room=%s", reason.value,
                                opaque(room_id))
                    text, content_bearing, as_ghost = render_notice(reason), False, None
                    client, msgtype = self.bot, MessageType.NOTICE
            try:
                await client.send_text(RoomID(room_id), text, msgtype=msgtype)
                return
            except Exception as exc:
                logger.info("matrix send failed: attempt=%d error=%s room=%s", attempt,
                            type(exc).__name__, opaque(room_id))
