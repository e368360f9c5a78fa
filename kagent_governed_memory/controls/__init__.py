"""The bridge's controls, transport-free: the control-room check (``_room``), the ``!memory``
commands' grammar and semantics (``_controls``), confirmation ledgers (``_confirmations``) and
the one reply renderer the development bridge and the Matrix bridge share (``_render``).  Import
the names below from here."""

from ._confirmations import (
    AsyncConfirmationLedger,
    ConfirmationLedger,
    InMemoryLedger,
    PostgresConfirmationLedger,
    SQLiteConfirmationLedger,
)
from ._controls import (
    ConfirmationRequired,
    ConsentReply,
    ErasureReply,
    ForgetReply,
    InspectReply,
    MemoryCommand,
    MemoryControls,
    Notice,
    StatusReply,
    parse_memory_command,
    recheck_before_send,
)
from ._room import (
    ControlRoomCheck,
    ControlRoomState,
    Membership,
    ServerAcl,
    check_control_room,
    check_control_room_events,
)

__all__ = [
    "AsyncConfirmationLedger",
    "ConfirmationLedger",
    "ConfirmationRequired",
    "ConsentReply",
    "ControlRoomCheck",
    "ControlRoomState",
    "ErasureReply",
    "ForgetReply",
    "InMemoryLedger",
    "InspectReply",
    "Membership",
    "MemoryCommand",
    "MemoryControls",
    "Notice",
    "PostgresConfirmationLedger",
    "SQLiteConfirmationLedger",
    "ServerAcl",
    "StatusReply",
    "check_control_room",
    "check_control_room_events",
    "parse_memory_command",
    "recheck_before_send",
]
