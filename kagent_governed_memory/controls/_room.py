"""Control-room check (SPEC U6; ADR 0023 decisions 19-20): may memory content be shown here?

The Matrix bridge reads the room's current state (``GET /_matrix/client/v3/rooms/{roomId}/state``)
at command admission and again immediately before every content-bearing reply, retry and page,
and asks :func:`check_control_room`.  Pure and transport-free: no network, clock or storage, so
the same snapshot always gets the same answer.  Room state is written by whoever can send state
events, so it is parsed as hostile input: refusals are content-free ``InvalidInput`` errors that
never echo an MXID, server name or any other value, and nothing here ``repr``s one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ..errors import InvalidIdentity, InvalidInput, ReasonCode
from ..identity import MemoryScope, OriginKind, Principal, server_name_of

__all__ = [
    "ControlRoomCheck",
    "ControlRoomState",
    "Membership",
    "ServerAcl",
    "check_control_room",
    "check_control_room_events",
]

REQUIRED_ROOM_VERSION = "12"
MAX_STATE_EVENTS = 10_000
MAX_MEMBER_EVENTS = 1_000
MAX_ACL_ENTRIES = 1_000
_MAX_KEY_BYTES = 255  # Matrix size limits: an event's type and state_key are at most 255 bytes
_MAX_ROOM_VERSION = 32  # room version identifiers are at most 32 code points
_MAX_VALUE_BYTES = 255

# Values shown by repr: known Matrix vocabulary only; anything else is "other" (never echoed).
_KNOWN_JOIN_RULES = frozenset({"public", "invite", "knock", "restricted", "knock_restricted",
                               "private"})
_KNOWN_HISTORY = frozenset({"invited", "joined", "shared", "world_readable"})
_KNOWN_VERSIONS = frozenset(str(v) for v in range(1, 13))

_FROZEN = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class Membership(StrEnum):
    JOIN = "join"
    INVITE = "invite"
    KNOCK = "knock"
    LEAVE = "leave"
    BAN = "ban"


class ServerAcl(BaseModel):
    """``m.room.server_acl`` content, with Matrix's defaults for absent keys."""

    model_config = _FROZEN

    allow: tuple[str, ...] = ()  # absent: no server allowed
    deny: tuple[str, ...] = ()
    allow_ip_literals: bool = True  # absent: IP literals allowed (Matrix default)

    def admits_only(self, server: str) -> bool:
        """Exactly one allow entry, equal to ``server`` (so no glob), and no IP literals."""
        return self.allow == (server,) and self.allow_ip_literals is False

    def __repr__(self) -> str:
        return (f"ServerAcl(allow={len(self.allow)}, deny={len(self.deny)}, "
                f"allow_ip_literals={self.allow_ip_literals})")

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, Any]]:  # pydantic/rich printers: counts only
        yield "allow", len(self.allow)
        yield "deny", len(self.deny)
        yield "allow_ip_literals", self.allow_ip_literals


class ControlRoomState(BaseModel):
    """The parts of a room's current state that U6 judges; build it with :meth:`from_events`."""

    model_config = _FROZEN

    room_id: str
    room_version: str
    join_rule: str | None = None  # None: no m.room.join_rules event
    history_visibility: str | None = None  # None: no m.room.history_visibility event
    encrypted: bool = False
    server_acl: ServerAcl | None = None
    memberships: tuple[tuple[str, Membership], ...] = ()  # (user ID, membership), sorted
    # m.room.third_party_invite events still in force (an invite to an e-mail address or phone
    # number that anyone holding it may accept); a revoked one has empty content.
    third_party_invites: int = 0

    @classmethod
    def from_events(cls, events: Any, *, room_id: str) -> ControlRoomState:
        """Parse a state snapshot; malformed or oversized input raises a content-free error.

        Only exact ``list``/``dict``/``str`` types are accepted: JSON decoding never produces
        subclasses, and a hostile subclass could run code or raise an input-bearing error.
        """
        if not _valid_room_id(room_id) or type(events) not in (list, tuple):
            raise _invalid()
        if len(events) > MAX_STATE_EVENTS:
            raise _too_large()
        seen: set[tuple[str, str]] = set()
        create = join_rules = history = acl = None
        encrypted = False
        third_party = 0
        members: list[tuple[str, Membership]] = []
        for event in events:
            etype, key, content = _event_parts(event)
            if (etype, key) in seen:
                raise _invalid()
            seen.add((etype, key))
            if etype == "m.room.member":
                if len(members) >= MAX_MEMBER_EVENTS:
                    raise _too_large()
                members.append((_user_id(key), _membership(content)))
            elif etype == "m.room.encryption":
                encrypted = True  # any state key, any (even redacted) content
            elif etype == "m.room.third_party_invite":
                third_party += 1 if content else 0  # any state key; {} is a revocation
            elif key != "":
                continue  # servers honour only the empty state key for the types below
            elif etype == "m.room.create":
                create = content
            elif etype == "m.room.join_rules":
                join_rules = content
            elif etype == "m.room.history_visibility":
                history = content
            elif etype == "m.room.server_acl":
                acl = content
        if create is None:
            raise _invalid()
        return cls(
            room_id=room_id,
            room_version=_str_field(create, "room_version", _MAX_ROOM_VERSION, default="1"),
            join_rule=None if join_rules is None else _str_field(join_rules, "join_rule"),
            history_visibility=None if history is None
            else _str_field(history, "history_visibility"),
            encrypted=encrypted,
            server_acl=None if acl is None else _server_acl(acl),
            memberships=tuple(sorted(members)),
            third_party_invites=third_party,
        )

    def members(self, *states: Membership) -> frozenset[str]:
        """User IDs whose current membership is one of ``states``."""
        return frozenset(user for user, membership in self.memberships if membership in states)

    def _summary(self) -> Iterator[tuple[str, Any]]:
        yield "room_version", _known(self.room_version, _KNOWN_VERSIONS)
        yield "join_rule", _known(self.join_rule, _KNOWN_JOIN_RULES)
        yield "history_visibility", _known(self.history_visibility, _KNOWN_HISTORY)
        yield "encrypted", self.encrypted
        yield "server_acl", self.server_acl
        counts = Counter(membership.value for _, membership in self.memberships)
        yield "members", dict(sorted(counts.items()))
        yield "third_party_invites", self.third_party_invites

    def __repr__(self) -> str:
        return "ControlRoomState(" + ", ".join(f"{k}={v!r}" for k, v in self._summary()) + ")"

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, Any]]:  # no room ID, no MXIDs
        yield from self._summary()


class ControlRoomCheck(BaseModel):
    """The verdict: ``allowed``, or the first failing content-free ``reason``."""

    model_config = _FROZEN

    allowed: bool
    reason: ReasonCode | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ControlRoomCheck:
        if self.allowed != (self.reason is None):
            raise ValueError("reason must be None exactly when allowed")
        return self


_ALLOWED = ControlRoomCheck(allowed=True)


def _deny(reason: ReasonCode) -> ControlRoomCheck:
    return ControlRoomCheck(allowed=False, reason=reason)


def check_control_room(
    state: ControlRoomState,
    *,
    subject: Principal,
    bot: str,
    ghost: str,
    local_server: str,
) -> ControlRoomCheck:
    """U6: may content for ``subject`` be shown in this room?  Never raises; fails closed.

    Checks run in a fixed order and the first failure is the reason, so the answer is stable.
    """
    if (
        not isinstance(subject, Principal)
        or subject.origin is not OriginKind.NATIVE_LOCAL
        or subject.server_name != local_server
    ):
        return _deny(ReasonCode.SUBJECT_NOT_LOCAL)  # S5
    if not isinstance(state, ControlRoomState):
        return _deny(ReasonCode.ROOM_STATE_INVALID)
    if state.room_version != REQUIRED_ROOM_VERSION:
        return _deny(ReasonCode.ROOM_VERSION_UNSUPPORTED)
    if state.join_rule != "invite":
        return _deny(ReasonCode.JOIN_RULE_NOT_INVITE)
    if state.history_visibility != "joined":
        return _deny(ReasonCode.HISTORY_NOT_JOINED)
    if state.encrypted:
        return _deny(ReasonCode.ROOM_ENCRYPTED)  # ciphertext the bridge cannot re-check
    if state.server_acl is None or not state.server_acl.admits_only(local_server):
        return _deny(ReasonCode.SERVER_ACL_NOT_LOCAL)
    if state.members(Membership.INVITE, Membership.KNOCK) or state.third_party_invites:
        return _deny(ReasonCode.MEMBERSHIP_PENDING)
    expected = {subject.mxid, bot, ghost}
    if (
        len(expected) != 3
        or not all(type(m) is str and server_name_of(m) == local_server for m in (bot, ghost))
        or state.members(Membership.JOIN) != expected
    ):
        return _deny(ReasonCode.MEMBERS_MISMATCH)
    return _ALLOWED


def check_control_room_events(
    events: Any,
    *,
    room_id: str,
    subject: Principal,
    bot: str,
    ghost: str,
    local_server: str,
) -> ControlRoomCheck:
    """The bridge's hot path: parse and check in one call; bad state is a denial, not an error."""
    state: ControlRoomState | None = None
    reason = ReasonCode.ROOM_STATE_INVALID
    try:
        state = ControlRoomState.from_events(events, room_id=room_id)
    except InvalidInput as err:
        reason = err.reason
    if state is None:
        return _deny(reason)
    return check_control_room(state, subject=subject, bot=bot, ghost=ghost, local_server=local_server)


# --- parsing helpers: each raises outside any ``except`` so no input-bearing error is chained.


def _invalid() -> InvalidInput:
    return InvalidInput(ReasonCode.ROOM_STATE_INVALID)


def _too_large() -> InvalidInput:
    return InvalidInput(ReasonCode.ROOM_STATE_TOO_LARGE)


def _bounded(value: Any, limit: int = _MAX_VALUE_BYTES) -> bool:
    return (
        type(value) is str
        and len(value) <= limit
        and len(value.encode("utf-8", "surrogatepass")) <= limit
    )


def _str_keyed(value: Any) -> bool:
    return type(value) is dict and all(type(k) is str for k in value)


def _event_parts(event: Any) -> tuple[str, str, dict[str, Any]]:
    if not _str_keyed(event):
        raise _invalid()
    etype, key, content = event.get("type"), event.get("state_key"), event.get("content")
    if not _bounded(etype, _MAX_KEY_BYTES) or not etype or not _bounded(key, _MAX_KEY_BYTES):
        raise _invalid()
    if not _str_keyed(content):
        raise _invalid()
    return etype, key, content


@overload
def _str_field(content: dict[str, Any], field: str, limit: int = ..., *, default: str) -> str: ...


@overload
def _str_field(content: dict[str, Any], field: str, limit: int = ...,
               default: None = None) -> str | None: ...


def _str_field(content: dict[str, Any], field: str, limit: int = _MAX_VALUE_BYTES,
               default: str | None = None) -> str | None:
    """Absent → ``default`` (Matrix's, or None = "not set"); present but not a bounded str → bad."""
    if field not in content:
        return default
    value = content[field]
    if not isinstance(value, str) or not _bounded(value, limit):
        raise _invalid()
    return value


def _server_names(content: dict[str, Any], field: str) -> tuple[str, ...]:
    value = content.get(field, [])
    if type(value) is not list:
        raise _invalid()
    if len(value) > MAX_ACL_ENTRIES:
        raise _too_large()
    if not all(_bounded(v) for v in value):
        raise _invalid()
    return tuple(value)


def _server_acl(content: dict[str, Any]) -> ServerAcl:
    literals = content.get("allow_ip_literals", True)
    if type(literals) is not bool:
        raise _invalid()
    return ServerAcl(allow=_server_names(content, "allow"), deny=_server_names(content, "deny"),
                     allow_ip_literals=literals)


def _membership(content: dict[str, Any]) -> Membership:
    value = content.get("membership")
    found = Membership._value2member_map_.get(value) if type(value) is str else None
    if found is None:
        raise _invalid()
    return found  # type: ignore[return-value]


def _user_id(key: str) -> str:
    if not _valid_mxid(key):
        raise _invalid()
    return key


def _valid_mxid(value: str) -> bool:
    """Matrix user-ID grammar, shared with ``Principal`` (S1); the origin is irrelevant here."""
    try:
        Principal(mxid=value, origin=OriginKind.NATIVE_LOCAL)
    except (InvalidIdentity, ValidationError):
        return False
    return True


def _valid_room_id(room_id: Any) -> bool:
    try:
        MemoryScope.control_room(room_id)
    except (InvalidIdentity, ValidationError):
        return False
    return True


def _known(value: str | None, vocabulary: frozenset[str]) -> str | None:
    return value if value is None or value in vocabulary else "other"
