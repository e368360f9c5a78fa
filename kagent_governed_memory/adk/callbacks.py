"""Auto-save: once per ``autosave_every_user_turns`` eligible user turns (A2), summarising only
turns that happened under the current generation and after the last checkpoint (C6).

The eligibility window lives in the session state as content-free bookkeeping (scope id,
generation, two timestamps).  It opens at the first invocation in which this session was
admitted under the current generation, so turns from before consent — or from before a
``forget_all`` advanced the generation — are never summarised; it advances past every turn
handed to a summariser, so nothing is summarised twice.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session

    from .service import Admitted, GovernedMemoryService

__all__ = ["STATE_KEY", "eligible_events", "event_line", "make_autosave_callback"]

STATE_KEY = "kgm_autosave"


def event_line(event: Event) -> str:
    """``user: …`` / ``assistant: …`` for text turns; tool calls and tool responses (which
    carry retrieved memories) and model thoughts are never summarised."""
    if getattr(event, "partial", False) or event.content is None or not event.content.parts:
        return ""
    text = " ".join(
        p.text for p in event.content.parts
        if p.text and not p.thought and p.function_call is None and p.function_response is None
    ).strip()
    if not text:
        return ""
    return f"{'user' if event.author == 'user' else 'assistant'}: {text}"


def _checkpoint(raw: Any, who: Admitted, session: Session, invocation_id: str | None
                ) -> dict[str, Any]:
    if (
        isinstance(raw, dict)
        and raw.get("scope") == who.key.opaque_id
        and raw.get("generation") == who.generation
        and isinstance(raw.get("since"), int | float)
    ):
        return dict(raw)
    current = [e.timestamp for e in session.events if e.invocation_id == invocation_id]
    since = min(current) if current else (session.events[-1].timestamp if session.events else 0.0)
    return {"scope": who.key.opaque_id, "generation": who.generation, "since": since,
            "last": None}


def eligible_events(session: Session, checkpoint: dict[str, Any]) -> list[Event]:
    since, last = checkpoint["since"], checkpoint.get("last")
    return [
        e for e in session.events
        if e.timestamp >= since and (last is None or e.timestamp > last) and event_line(e)
    ]


def make_autosave_callback(service: GovernedMemoryService):
    """An ``after_agent_callback`` that schedules a tracked background auto-save."""

    async def governed_autosave_callback(callback_context: CallbackContext) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # google-adk 2.x also runs after-agent callbacks for a cancelled turn but drops
            # their state change, so a save now would be summarised again next turn (C6).
            return
        who = await service.admitted()
        if who is None:
            return
        session = callback_context.session
        checkpoint = _checkpoint(callback_context.state.get(STATE_KEY), who, session,
                                 callback_context.invocation_id)
        pending = eligible_events(session, checkpoint)
        user_turns = sum(1 for e in pending if e.author == "user")
        if user_turns >= service.store.policy.autosave_every_user_turns:
            service.schedule_autosave(who, [event_line(e) for e in pending])
            checkpoint["last"] = max(e.timestamp for e in pending)
        callback_context.state[STATE_KEY] = checkpoint
        return

    return governed_autosave_callback


def current_turn_events(session: Session) -> list[Event]:
    """The events of the request in flight: from its user message on."""
    users = [i for i, e in enumerate(session.events) if e.author == "user"]
    return [e for e in session.events[users[-1]:] if event_line(e)] if users else []
