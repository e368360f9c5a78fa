"""The ``!memory`` controls' test fixtures as values: the subject, the room, the agents the
controls serve, a passing room check and a scripted one (database/test_controls.py,
database/test_confirmations.py, adk/test_runtime_breaks.py)."""

from __future__ import annotations

from kagent_governed_memory import AgentIdentity, Principal
from kagent_governed_memory.controls import ControlRoomCheck

PURPOSE = "personal_preferences"
ROOM = "!control-a:example.org"
ALICE = Principal(mxid="@alice:example.org", origin="native_local")
AGENTS = {"my-agent": AgentIdentity(namespace="kagent", name="my-agent"),
          "other": AgentIdentity(namespace="kagent", name="other")}
OK = ControlRoomCheck(allowed=True)


def checks(*results: ControlRoomCheck):
    """A room check that answers from a script (and records how often it was asked)."""
    queue = list(results)
    calls: list[int] = []

    async def check() -> ControlRoomCheck:
        calls.append(1)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    check.calls = calls  # type: ignore[attr-defined]
    return check
