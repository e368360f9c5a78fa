"""The reference Matrix bridge (the ``matrix`` extra: ``pip install -e '.[matrix]'``).

``MatrixBridge`` speaks Matrix through mautrix-python's client API: it creates control rooms
with exactly the allowed state, re-reads that state from the homeserver before every
content-bearing message, runs ``!memory`` commands through ``MemoryControls`` and relays the
subject's messages to the agent over A2A with a freshly signed scope assertion per request.
What a bridge implementer reuses and what they must own: docs/bridge.md.
"""

from __future__ import annotations

try:
    import mautrix  # noqa: F401
except ModuleNotFoundError as missing:  # the extra is not installed
    if not (missing.name or "").startswith("mautrix"):
        raise
    raise ModuleNotFoundError(
        "kagent_governed_memory.matrix needs mautrix, which is not installed: "
        "pip install -e '.[matrix]' in a clone (docs/install.md)", name=missing.name) from None

from ..controls._render import render_notice, render_reply
from ._logs import quiet_logger
from .bridge import AgentRoute, MatrixBridge, MatrixLogin
from .relay import A2ARelay, RelayAnswer, RelayError, room_context_id
from .room import control_room_state, create_control_room, read_room_state, room_check

__all__ = [
    "A2ARelay",
    "AgentRoute",
    "MatrixBridge",
    "MatrixLogin",
    "RelayAnswer",
    "RelayError",
    "control_room_state",
    "create_control_room",
    "quiet_logger",
    "read_room_state",
    "render_notice",
    "render_reply",
    "room_check",
    "room_context_id",
]
