"""``!memory`` command semantics for the Matrix bridge, transport-free (U1–U6).

The bridge owns Matrix I/O; this module owns everything that must be exact: the grammar,
which key a command acts on (always the sender's own, in this control room), the
confirmation step for ``forget all`` and ``off`` (short-lived, single-use, bound to the key
and the action), and the control-room re-check immediately before any content-bearing reply.
There is no operator path to content: every key is built from the sender, and the sender must
be the room's subject.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import GovernanceError, InvalidInput, ReasonCode, StoreUnavailable
from ..identity import AgentIdentity, MemoryScope, Principal, ScopeKey
from ..models import ConsentReceipt, ErasureReceipt, ForgetReceipt, MemoryRecord, ScopeStatus
from ..repository import ControlRepository
from ._confirmations import AsyncConfirmationLedger, ConfirmationLedger, InMemoryLedger
from ._room import ControlRoomCheck

__all__ = [
    "AsyncConfirmationLedger",
    "ConfirmationLedger",
    "ConfirmationRequired",
    "ConsentReply",
    "ErasureReply",
    "ForgetReply",
    "InMemoryLedger",
    "InspectReply",
    "MemoryCommand",
    "MemoryControls",
    "Notice",
    "StatusReply",
    "parse_memory_command",
    "recheck_before_send",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_MAX_COMMAND = 512
_WORD = re.compile(r"[A-Za-z0-9._:/=+-]{1,320}")  # a confirmation token for `on` is ~270
Action = Literal["status", "inspect", "forget", "forget_all", "off", "on"]
_PURPOSE = re.compile(r"[a-z][a-z0-9_]{0,63}")


class MemoryCommand(BaseModel):
    model_config = _FROZEN

    action: Action
    agent: str
    entry_id: str | None = None
    cursor: str | None = None
    token: str | None = None
    purpose: str | None = None


def parse_memory_command(text: object) -> MemoryCommand:
    """``!memory status|inspect <agent> [cursor]|forget <agent> <id>|forget <agent> all
    [token]|off <agent> [token]|on <agent> <purpose> [token]``.  Anything else:
    ``InvalidInput(COMMAND_INVALID)``."""
    words = text.split() if isinstance(text, str) and len(text) <= _MAX_COMMAND else []
    if len(words) < 3 or words[0] != "!memory" or not all(_WORD.fullmatch(w) for w in words[1:]):
        raise InvalidInput(ReasonCode.COMMAND_INVALID)
    verb, agent, rest = words[1], words[2], words[3:]
    command: MemoryCommand | None = None
    if verb == "status" and not rest:
        command = MemoryCommand(action="status", agent=agent)
    elif verb == "inspect" and len(rest) <= 1:
        command = MemoryCommand(action="inspect", agent=agent, cursor=rest[0] if rest else None)
    elif verb == "forget" and len(rest) == 1 and rest[0] != "all":
        command = MemoryCommand(action="forget", agent=agent, entry_id=rest[0])
    elif verb == "forget" and 1 <= len(rest) <= 2 and rest[0] == "all":
        command = MemoryCommand(action="forget_all", agent=agent,
                                token=rest[1] if len(rest) == 2 else None)
    elif verb == "off" and len(rest) <= 1:
        command = MemoryCommand(action="off", agent=agent, token=rest[0] if rest else None)
    elif verb == "on" and 1 <= len(rest) <= 2 and _PURPOSE.fullmatch(rest[0]):
        command = MemoryCommand(action="on", agent=agent, purpose=rest[0],
                                token=rest[1] if len(rest) == 2 else None)
    if command is None:
        raise InvalidInput(ReasonCode.COMMAND_INVALID)
    return command


# -- replies --------------------------------------------------------------------------------


class Notice(BaseModel):
    """Content-free: a reason code the bridge renders as text."""

    model_config = _FROZEN
    reason: ReasonCode
    content_bearing: Literal[False] = False


class StatusReply(BaseModel):
    model_config = _FROZEN
    status: ScopeStatus
    content_bearing: Literal[False] = False


class InspectReply(BaseModel):
    """The only content-bearing reply: produced after a fresh control-room check."""

    model_config = _FROZEN
    entries: tuple[MemoryRecord, ...]
    next_cursor: str | None = None
    content_bearing: Literal[True] = True


class ForgetReply(BaseModel):
    model_config = _FROZEN
    receipt: ForgetReceipt
    content_bearing: Literal[False] = False


class ErasureReply(BaseModel):
    model_config = _FROZEN
    action: Literal["forget_all", "off"]
    receipt: ErasureReceipt
    content_bearing: Literal[False] = False


class ConsentReply(BaseModel):
    """``!memory on`` carried out: consent recorded for ``receipt.purpose`` under
    ``receipt.policy_version``; memory starts empty."""

    model_config = _FROZEN
    receipt: ConsentReceipt
    content_bearing: Literal[False] = False


class ConfirmationRequired(BaseModel):
    """Repeat the command with ``token`` before ``expires_at`` to carry it out.  For ``on``,
    the purpose and the policy version the subject is asked to consent to are shown."""

    model_config = _FROZEN
    action: Literal["forget_all", "off", "on"]
    token: str
    expires_at: datetime
    purpose: str | None = None
    policy_version: str | None = None
    content_bearing: Literal[False] = False


MemoryReply = (Notice | StatusReply | InspectReply | ForgetReply | ErasureReply | ConsentReply
               | ConfirmationRequired)
# Called with the command's agent (so the bridge can match that agent's ghost in the room); a
# callable taking no argument is still accepted and called without it.
RoomCheck = (Callable[[AgentIdentity], Awaitable[ControlRoomCheck] | ControlRoomCheck]
             | Callable[[], Awaitable[ControlRoomCheck] | ControlRoomCheck])


class MemoryControls:
    """Carries out one ``!memory`` command for its sender in a control room."""

    def __init__(
        self,
        store: ControlRepository,
        *,
        agents: Mapping[str, AgentIdentity],
        secret: bytes,
        confirmation_ttl: timedelta = timedelta(minutes=2),
        ledger: ConfirmationLedger | AsyncConfirmationLedger | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if not isinstance(secret, bytes) or len(secret) < 32:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="secret")
        if not timedelta(seconds=10) <= confirmation_ttl <= timedelta(minutes=10):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="confirmation_ttl")
        self._store = store
        self._agents = dict(agents)
        self._secret = secret
        self._ttl = confirmation_ttl
        self._ledger: ConfirmationLedger | AsyncConfirmationLedger = ledger or InMemoryLedger()
        self._clock = clock or (lambda: datetime.now(UTC))

    async def handle(
        self,
        text: str,
        *,
        sender: Principal,
        subject: Principal,
        room_id: str,
        room_check: RoomCheck,
    ) -> MemoryReply:
        """Parse, admit (sender is the room's subject; the room passes ``room_check``), act.
        ``room_check`` is called again right before a content-bearing reply."""
        try:
            command = parse_memory_command(text)
        except GovernanceError as exc:
            return Notice(reason=exc.reason)
        if sender != subject:
            return Notice(reason=ReasonCode.NOT_SUBJECT)
        agent = self._agents.get(command.agent)
        if agent is None:
            return Notice(reason=ReasonCode.UNKNOWN_AGENT)
        denied = await _room_denied(room_check, agent)
        if denied is not None:
            return Notice(reason=denied)
        try:
            key = ScopeKey(principal=sender, agent=agent, scope=MemoryScope.control_room(room_id))
            key.require_servable(self._store.local_server)
            return await self._act(command, key, room_check)
        except GovernanceError as exc:
            return Notice(reason=exc.reason)

    async def _act(self, command: MemoryCommand, key: ScopeKey, room_check: RoomCheck
                   ) -> MemoryReply:
        if command.action == "status":
            return StatusReply(status=await self._store.status(key))
        if command.action == "inspect":
            page = await self._store.inspect(key, cursor=command.cursor)
            # the state may have drifted since admission
            denied = await _room_denied(room_check, key.agent)
            if denied is not None:
                return Notice(reason=denied)
            return InspectReply(entries=page.entries, next_cursor=page.next_cursor)
        if command.action == "forget":
            return ForgetReply(receipt=await self._store.forget(key, command.entry_id or ""))
        action: Literal["forget_all", "off", "on"] = command.action
        bound = f"{action}:{command.purpose}" if action == "on" else action
        if command.token is None:
            return self._confirmation(key, action, bound, command.purpose)
        redeemed = await self._redeem(command.token, key, bound)
        if isinstance(redeemed, ReasonCode):
            return Notice(reason=redeemed)
        try:
            if action == "on":
                receipt = await self._store.grant(key, purpose=command.purpose or "")
                return ConsentReply(receipt=receipt)
            if action == "forget_all":
                return ErasureReply(action=action, receipt=await self._store.forget_all(key))
            return ErasureReply(action=action, receipt=await self._store.withdraw(key))
        except GovernanceError as exc:
            if _nothing_changed(exc):  # the user's confirmation stays good for a retry
                release = getattr(self._ledger, "release", None)
                if callable(release):
                    await _maybe_await(release(redeemed))
            return Notice(reason=exc.reason)

    # -- confirmation tokens ----------------------------------------------------------------

    def _confirmation(self, key: ScopeKey, action: str, bound: str,
                      purpose: str | None) -> ConfirmationRequired:
        expires = self._clock().replace(microsecond=0) + self._ttl
        payload = json.dumps({"a": bound, "s": key.opaque_id, "n": secrets.token_hex(12),
                              "e": int(expires.timestamp())}, separators=(",", ":"))
        body = _b64(payload.encode())
        token = f"c1.{body}.{_b64(self._mac(body))}"
        version = self._store.policy.version if action == "on" else None
        return ConfirmationRequired(action=action, token=token, expires_at=expires,  # type: ignore[arg-type]
                                    purpose=purpose, policy_version=version)

    async def _redeem(self, token: str, key: ScopeKey, action: str) -> ReasonCode | str:
        """The refusal, or the consumed nonce (released again if the action changes nothing)."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != "c1":
            return ReasonCode.CONFIRMATION_INVALID
        raw_mac = _unb64(parts[2])
        if raw_mac is None or not hmac.compare_digest(raw_mac, self._mac(parts[1])):
            return ReasonCode.CONFIRMATION_INVALID
        payload = _json(_unb64(parts[1]))
        if (
            not isinstance(payload, dict)
            or payload.get("a") != action
            or payload.get("s") != key.opaque_id
            or not isinstance(payload.get("n"), str)
            or not isinstance(payload.get("e"), int)
        ):
            return ReasonCode.CONFIRMATION_INVALID
        now = self._clock()
        expires = datetime.fromtimestamp(payload["e"], UTC)
        if now >= expires:
            return ReasonCode.CONFIRMATION_EXPIRED
        if not await _maybe_await(self._ledger.consume(payload["n"], expires, now)):
            return ReasonCode.CONFIRMATION_INVALID
        return str(payload["n"])

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._secret, b"kgm-confirm." + body.encode(), hashlib.sha256).digest()


async def recheck_before_send(
    reply: Any, *, agent: AgentIdentity, room_check: RoomCheck,
    content_bearing: bool | None = None,
) -> Any:
    """Call right before sending *or retrying* any reply to the control room (ADR decision 20).

    A reply that carries memory content — an ``InspectReply``, or anything the caller marks
    ``content_bearing=True``, such as an agent's answer that used recalled memory — is sent only
    if the room check passes again now; on any drift the content is suppressed and a
    content-free ``Notice`` is returned in its place.  Content-free replies pass unchanged."""
    bearing = (content_bearing if content_bearing is not None
               else bool(getattr(reply, "content_bearing", False)))
    if not bearing:
        return reply
    denied = await _room_denied(room_check, agent)
    return reply if denied is None else Notice(reason=denied)


async def _maybe_await(value: Any) -> Any:
    """A sync ledger's answer as it is, an async ledger's awaited."""
    return await value if inspect.isawaitable(value) else value


def _nothing_changed(exc: GovernanceError) -> bool:
    """The store was unreachable, or a withdrawal's first step (disable) did not commit."""
    return isinstance(exc, StoreUnavailable) or exc.ids.get("step") == "disable"


def _takes_agent(room_check: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(room_check).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


async def _room_denied(room_check: RoomCheck, agent: AgentIdentity) -> ReasonCode | None:
    result = room_check(agent) if _takes_agent(room_check) else room_check()  # type: ignore[call-arg]
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, ControlRoomCheck):
        return ReasonCode.ROOM_STATE_INVALID
    return None if result.allowed else (result.reason or ReasonCode.ROOM_STATE_INVALID)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        return None


def _json(raw: bytes | None) -> object:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
