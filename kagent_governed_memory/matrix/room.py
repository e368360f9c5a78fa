"""The control room on a real homeserver: created with exactly the allowed state, and checked
by re-reading that state from the homeserver every time (ADR 0023 decisions 19-20).

``create_control_room`` asks the homeserver (``POST /createRoom``, through mautrix) for a room
version 12 room that is invite-only, ``joined`` history, unencrypted, with a server ACL that
admits only the local homeserver and no IP literals, and invites the subject and the agent's
ghost; the ghost joins at once.  The room passes ``check_control_room`` once the subject has
joined (until then its invite is pending: ``membership_pending``).

``read_room_state`` is ``GET /_matrix/client/v3/rooms/{roomId}/state`` on every call: never a
sync cache or mautrix's state store, so a member who joined a moment ago is seen.  Any error
reading it is a denial (``room_state_invalid``), never an exception with the homeserver's text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mautrix.api import Method, Path
from mautrix.client import ClientAPI
from mautrix.types import RoomCreatePreset, RoomID, UserID

from ..controls._room import REQUIRED_ROOM_VERSION, ControlRoomCheck, check_control_room_events
from ..errors import ReasonCode
from ..identity import Principal

__all__ = ["control_room_state", "create_control_room", "read_room_state", "room_check"]

_UNREADABLE = ControlRoomCheck(allowed=False, reason=ReasonCode.ROOM_STATE_INVALID)


def control_room_state(local_server: str) -> list[dict[str, Any]]:
    """The ``initial_state`` of a control room: the parts the ``private_chat`` preset does not
    already set as U6 requires (history ``joined``, the server ACL; the join rule explicitly)."""
    return [
        {"type": "m.room.join_rules", "state_key": "", "content": {"join_rule": "invite"}},
        {"type": "m.room.history_visibility", "state_key": "",
         "content": {"history_visibility": "joined"}},
        {"type": "m.room.server_acl", "state_key": "",
         "content": {"allow": [local_server], "deny": [], "allow_ip_literals": False}},
        {"type": "m.room.guest_access", "state_key": "", "content": {"guest_access": "forbidden"}},
    ]


async def create_control_room(bot: ClientAPI, ghost: ClientAPI, *, subject: str,
                              local_server: str, name: str | None = None) -> str:
    """Create a control room for ``subject`` with ``ghost`` (the agent's local user); returns
    its room ID.  The bot creates it (its creator), invites both; the ghost joins."""
    initial: list[Any] = control_room_state(local_server)
    # m.room.create: m.federate false, so no other homeserver can ever join (ADR 0023 §29)
    creation: dict[str, Any] = {"m.federate": False}
    room_id = await bot.create_room(
        preset=RoomCreatePreset.PRIVATE,
        invitees=[UserID(subject), UserID(ghost.mxid)],
        initial_state=initial,
        room_version=REQUIRED_ROOM_VERSION,
        creation_content=creation,
        name=name,
    )
    await ghost.join_room_by_id(room_id)
    return str(room_id)


async def read_room_state(client: ClientAPI, room_id: str) -> list[Any] | None:
    """The room's complete current state as the homeserver answers now, or ``None``."""
    try:
        answer = await client.api.request(Method.GET, Path.v3.rooms[RoomID(room_id)].state)
    except Exception:  # any Matrix or transport error: the caller fails closed, content-free
        return None
    return answer if type(answer) is list else None


async def room_check(client: ClientAPI, room_id: str, *, subject: Principal, bot: str,
                     ghost: str, local_server: str,
                     reader: Callable[[str], Awaitable[list[Any] | None]] | None = None
                     ) -> ControlRoomCheck:
    """Re-read the state from the homeserver (``reader``: ``read_room_state`` with ``client``
    by default) and judge it (U6).  Never raises."""
    events = await (reader(room_id) if reader is not None else read_room_state(client, room_id))
    if events is None:
        return _UNREADABLE
    return check_control_room_events(events, room_id=room_id, subject=subject, bot=bot,
                                     ghost=ghost, local_server=local_server)
