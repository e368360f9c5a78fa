"""Auto-save: once per ``autosave_every_user_turns`` eligible user turns (A2), summarising only
turns that started *and* are saved under the same valid consent generation (C6).

No clocks decide eligibility.  A ``before_agent_callback`` captures the request's generation
when the turn starts — before the model runs — and records the turn's invocation id in the
session state under that generation (content-free bookkeeping: scope id, generation, invocation
ids).  The ``after_agent_callback`` summarises only the turns recorded under the generation the
request captured at its start, and the store's fence refuses the save unless that generation is
still current when it is written.  So a message sent before consent, before a withdrawal and
re-grant, or before a ``forget all`` is never summarised: its turn started under no generation
or an older one.  Checkpoints are per generation: a new generation starts an empty list, and
turns handed to a summariser leave it, so nothing is summarised twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import ReasonCode
from ..scope._request import current_request
from ..telemetry._metering import Operation
from .firstturn import first_turn_text, split_sentences

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session

    from .service import Admitted, GovernedMemoryService

__all__ = ["STATE_KEY", "eligible_events", "event_line", "make_autosave_callback",
           "make_turn_start_callback", "turns_of"]

STATE_KEY = "kgm_autosave"
_MAX_TURNS = 64  # recorded, not yet summarised turns kept per session (bounded state)


def event_line(event: Event) -> str:
    """``user: …`` for the user's text turns: only what the user said is summarised.  The
    agent's replies are not: they restate recalled and prefetched memories, and summarising
    them would store a forgotten fact again, or renew an expiring one, from the model's echo.
    Tool calls, tool responses (which carry retrieved memories) and thoughts never count."""
    if event.author != "user":
        return ""
    if getattr(event, "partial", False) or event.content is None or not event.content.parts:
        return ""
    text = " ".join(
        p.text for p in event.content.parts
        if p.text and not p.thought and p.function_call is None and p.function_response is None
    ).strip()
    if not text:
        return ""
    return f"user: {text}"


def turns_of(raw: Any, who: Admitted) -> dict[str, Any]:
    """The checkpoint for ``who``'s scope and generation: recorded turns, or none."""
    if (
        isinstance(raw, dict)
        and raw.get("scope") == who.key.opaque_id
        and raw.get("generation") == who.generation
        and isinstance(raw.get("turns"), list)
    ):
        return {**raw, "turns": [t for t in raw["turns"] if isinstance(t, str)]}
    return {"scope": who.key.opaque_id, "generation": who.generation, "turns": []}


def eligible_events(session: Session, checkpoint: dict[str, Any]) -> list[Event]:
    turns = set(checkpoint["turns"])
    return [e for e in session.events if e.invocation_id in turns and event_line(e)]


def make_turn_start_callback(
    service: GovernedMemoryService,
) -> Callable[[CallbackContext], Awaitable[None]]:
    """A ``before_agent_callback``: capture the generation before the model runs and record
    this turn under it (a turn that starts without valid consent is recorded nowhere)."""

    async def governed_turn_start_callback(callback_context: CallbackContext) -> None:
        if _run_config_captures_content(callback_context) and service.span_content == "refuse":
            # google-adk 2.x can switch content capture on for one request (RunConfig
            # .telemetry), which no start-up check sees: this request gets no memory.
            binding = current_request()
            if binding is not None:
                binding.assertion, binding.reason = None, ReasonCode.SPAN_CONTENT_CAPTURE
        # A session's first turn prefetches: its admission goes with the redemption (one
        # controller call), still before any embedding or model work.
        text = first_turn_text(callback_context.session)
        units = service.prefetch_units(split_sentences(text)) if text else 0
        who = await service.admitted(Operation.REQUEST, admit_units=units)
        if who is None:
            return
        checkpoint = turns_of(callback_context.state.get(STATE_KEY), who)
        invocation = callback_context.invocation_id
        if invocation not in checkpoint["turns"]:
            checkpoint["turns"] = [*checkpoint["turns"], invocation][-_MAX_TURNS:]
        callback_context.state[STATE_KEY] = checkpoint
        return

    return governed_turn_start_callback


def _run_config_captures_content(callback_context: CallbackContext) -> bool:
    telemetry = getattr(getattr(callback_context, "run_config", None), "telemetry", None)
    mode = getattr(telemetry, "capture_message_content", None)
    return mode is not None and str(getattr(mode, "name", mode)).upper() != "NO_CONTENT"


def make_autosave_callback(
    service: GovernedMemoryService,
) -> Callable[[CallbackContext], Awaitable[None]]:
    """An ``after_agent_callback`` that schedules a tracked background auto-save."""

    async def governed_autosave_callback(callback_context: CallbackContext) -> None:
        service.recalled.drop(callback_context.invocation_id)  # the turn is over
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # google-adk 2.x also runs after-agent callbacks for a cancelled turn but drops
            # their state change, so a save now would be summarised again next turn (C6).
            return
        # the generation captured when this turn started
        who = await service.admitted(Operation.SUMMARISE)
        if who is None:
            return
        checkpoint = turns_of(callback_context.state.get(STATE_KEY), who)
        if callback_context.invocation_id not in checkpoint["turns"]:
            return  # this turn did not start under the current generation
        pending = eligible_events(callback_context.session, checkpoint)
        user_turns = len({e.invocation_id for e in pending if e.author == "user"})
        if user_turns >= service.store.policy.autosave_every_user_turns:
            service.schedule_autosave(who, [event_line(e) for e in pending])
            checkpoint["turns"] = []
        callback_context.state[STATE_KEY] = checkpoint
        return

    return governed_autosave_callback
