"""``!memory`` replies and refusals as text: the one renderer both bridges use.

``render_reply`` writes the sentences a person reads in a Matrix control room;
``render_dev_reply`` the one-line answers of the development bridge (``adk web``, notebooks).
Both go through the same dispatch over ``MemoryControls``' replies and share how a confirmation
command, an entry id and a count are written.  Everything but an inspect page is content-free:
fixed sentences, reason codes, counts, opaque entry ids, times.  The agent's own answer is
relayed as the agent wrote it (by the caller).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from ..errors import ReasonCode
from ..policy import MemoryPolicy
from ._controls import (
    ConfirmationRequired,
    ConsentReply,
    ErasureReply,
    ForgetReply,
    InspectReply,
    Notice,
    StatusReply,
)

__all__ = ["render_dev_reply", "render_notice", "render_reply"]

_NOTICE: dict[ReasonCode, str] = {
    ReasonCode.MEMBERS_MISMATCH: "this room is not a private control room any more (its "
    "members changed); nothing from memory is shown here",
    ReasonCode.MEMBERSHIP_PENDING: "someone is invited to this room or the subject has not "
    "joined yet; nothing from memory is shown here",
    ReasonCode.SUBJECT_NOT_LOCAL: "memory is only for users of this homeserver who signed up "
    "here directly (not bridged or federated users)",
    ReasonCode.NOT_SUBJECT: "only the person this control room belongs to can use !memory here",
    ReasonCode.COMMAND_INVALID: "that is not a !memory command; try: !memory status <agent>",
    ReasonCode.UNKNOWN_AGENT: "no agent of that name is served here",
    ReasonCode.CONFIRMATION_INVALID: "that confirmation is not valid (already used, or for "
    "another command); send the command again without it",
    ReasonCode.CONFIRMATION_EXPIRED: "that confirmation has expired; send the command again "
    "without it",
    ReasonCode.CONSENT_CONFLICT: "memory is already on for this agent with another purpose or "
    "policy; turn it off first",
    ReasonCode.ERASURE_PENDING: "an erasure is not verified yet; send !memory off again",
    ReasonCode.STORE_UNAVAILABLE: "memory is unavailable right now; try again later",
}


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at is not None else "never"


def _span(delta: timedelta | None) -> str:
    if delta is None:
        return "?"
    seconds = int(delta.total_seconds())
    if seconds % 86400 == 0:
        return f"{seconds // 86400} days" if seconds != 86400 else "1 day"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hours"
    return f"{seconds // 60} minutes" if seconds >= 60 else f"{seconds} seconds"


def render_notice(reason: ReasonCode) -> str:
    """A refusal: the reason code, with a fixed sentence for the ones a user meets."""
    text = _NOTICE.get(reason)
    return f"Refused ({reason.value})" + (f": {text}." if text else ".")


def render_reply(reply: object, *, agent: str, command: str, policy: MemoryPolicy) -> str:
    """One reply of ``MemoryControls.handle`` as the Matrix bridge's text; ``command`` is the
    text it answered."""
    return _render(reply, _Sentences(agent, command, policy))


def render_dev_reply(reply: object, *, agent: str, command: str) -> str:
    """One reply of ``MemoryControls.handle`` as the development bridge's line; ``command`` is
    the text it answered."""
    return _render(reply, _Lines(agent, command))


class _Style(Protocol):
    def consent(self, reply: ConsentReply) -> str: ...
    def erasure(self, reply: ErasureReply) -> str: ...
    def forget(self, reply: ForgetReply) -> str: ...
    def status(self, reply: StatusReply) -> str: ...
    def inspect(self, reply: InspectReply) -> str: ...
    def confirmation(self, reply: ConfirmationRequired) -> str: ...
    def notice(self, reason: ReasonCode) -> str: ...


def _render(reply: object, style: _Style) -> str:
    if isinstance(reply, ConsentReply):
        return style.consent(reply)
    if isinstance(reply, ErasureReply):
        return style.erasure(reply)
    if isinstance(reply, ForgetReply):
        return style.forget(reply)
    if isinstance(reply, StatusReply):
        return style.status(reply)
    if isinstance(reply, InspectReply):
        return style.inspect(reply)
    if isinstance(reply, ConfirmationRequired):
        return style.confirmation(reply)
    if isinstance(reply, Notice):
        return style.notice(reply.reason)
    return style.notice(ReasonCode.COMMAND_INVALID)


def _entries(n: int) -> str:
    return "entry" if n == 1 else "entries"


def _entry_of(command: str) -> str:
    """The entry id a ``!memory forget <agent> <id>`` command named (its last word)."""
    words = command.split()
    return words[-1] if words else "?"


def _confirm_command(reply: ConfirmationRequired, agent: str) -> str:
    """The command that confirms ``reply``: ``!memory <action> <agent> [all] [purpose] token``."""
    words = ["!memory", "forget" if reply.action == "forget_all" else reply.action, agent]
    if reply.action == "forget_all":
        words.append("all")
    if reply.purpose:
        words.append(reply.purpose)
    return f"{' '.join(words)} {reply.token}"


class _Sentences:
    """The Matrix bridge's text: whole sentences for a person in a control room."""

    def __init__(self, agent: str, command: str, policy: MemoryPolicy) -> None:
        self.agent, self.command, self.policy = agent, command, policy

    def consent(self, reply: ConsentReply) -> str:
        r = reply.receipt
        return (f"Memory is on for {self.agent} (purpose {r.purpose}, policy "
                f"{r.policy_version}, consent until {_when(r.expires_at)}). Nothing is "
                f"remembered yet.")

    def erasure(self, reply: ErasureReply) -> str:
        e = reply.receipt
        state = "erased and verified gone" if e.verified else "erased, NOT verified"
        count = f"{e.deleted} {_entries(e.deleted)}"
        if reply.action == "off":
            return f"Memory is off for {self.agent}: {count} {state}."
        return f"Forgot everything about you for {self.agent}: {count} {state}."

    def forget(self, reply: ForgetReply) -> str:
        entry = _entry_of(self.command)
        if not reply.receipt.deleted:
            return f"Nothing to forget: no entry {entry}."
        state = "verified gone" if reply.receipt.verified else "NOT verified"
        return f"Forgot entry {entry}: {state}."

    def status(self, reply: StatusReply) -> str:
        s, agent = reply.status, self.agent
        if not s.enabled:
            return (f"Memory is off for {agent}. Nothing is collected. Last verified erasure: "
                    f"{_when(s.last_verified_erasure_at)}.")
        return (f"Memory is on for {agent}: purpose {s.purpose}, policy {s.policy_version}, "
                f"{s.entry_count} of at most {s.entry_cap} entries, each kept at most "
                f"{_span(s.max_ttl)}; consent until {_when(s.consent_expires_at)}; last "
                f"verified erasure: {_when(s.last_verified_erasure_at)}.")

    def inspect(self, reply: InspectReply) -> str:
        n, agent = len(reply.entries), self.agent
        if not n:
            return f"{agent} remembers nothing about you."
        lines = [f"What {agent} remembers about you ({n} {_entries(n)}"
                 f"{' on this page' if reply.next_cursor else ''}):"]
        lines += [f"- {e.id}: {e.text} (saved {_when(e.created_at)}, gone by "
                  f"{_when(e.expires_at)})" for e in reply.entries]
        if reply.next_cursor:
            lines.append(f"More: !memory inspect {agent} {reply.next_cursor}")
        return "\n".join(lines)

    def confirmation(self, reply: ConfirmationRequired) -> str:
        agent, policy = self.agent, self.policy
        what = {
            "on": (f"This turns memory on for {agent}, purpose {reply.purpose}, under policy "
                   f"{reply.policy_version}: facts you ask it to remember are kept at most "
                   f"{_span(policy.max_ttl)}, at most {policy.entry_cap} of them, and you can "
                   f"inspect, forget or turn it off at any time."),
            "off": f"This turns memory off for {agent} and erases everything it remembers.",
            "forget_all": f"This erases everything {agent} remembers about you.",
        }[reply.action]
        return (f"{what} To confirm within {_until(reply.expires_at)}, send:\n"
                f"{_confirm_command(reply, agent)}")

    def notice(self, reason: ReasonCode) -> str:
        return render_notice(reason)


class _Lines:
    """The development bridge's text: one terse line (an inspect page lists its entries)."""

    def __init__(self, agent: str, command: str) -> None:
        self.agent, self.command = agent, command

    def consent(self, reply: ConsentReply) -> str:
        r = reply.receipt
        return f"memory on: {self.agent}, purpose {r.purpose}, generation {r.generation}"

    def erasure(self, reply: ErasureReply) -> str:
        r = reply.receipt
        state = "erased and verified" if r.verified else "erased, NOT verified"
        what = "memory off" if reply.action == "off" else "forgot all"
        return f"{what}: {self.agent}, {r.deleted} entries {state}"

    def forget(self, reply: ForgetReply) -> str:
        entry = _entry_of(self.command)
        if not reply.receipt.deleted:
            return f"forgot {entry}: not found"
        return f"forgot {entry}: {'verified' if reply.receipt.verified else 'NOT verified'}"

    def status(self, reply: StatusReply) -> str:
        s = reply.status
        if not s.enabled:
            return f"status: {self.agent}, memory off"
        return (f"status: {self.agent}, memory on, purpose {s.purpose}, policy "
                f"{s.policy_version}, generation {s.generation}, {s.entry_count} entries")

    def inspect(self, reply: InspectReply) -> str:
        n = len(reply.entries)
        lines = [f"inspect: {n} {_entries(n)}"]
        lines += [f"- {e.id}: {e.text}" for e in reply.entries]
        if reply.next_cursor:
            lines.append(f"(more: !memory inspect {self.agent} {reply.next_cursor})")
        return "\n".join(lines)

    def confirmation(self, reply: ConfirmationRequired) -> str:
        return f"confirm with: {_confirm_command(reply, self.agent)}"

    def notice(self, reason: ReasonCode) -> str:
        if reason is ReasonCode.UNKNOWN_AGENT:  # name the one agent this bridge serves
            return (f"refused: unknown_agent: this bridge serves {self.agent} "
                    f"(!memory on {self.agent} <purpose>)")
        return f"refused: {reason.value}"


def _until(expires_at: datetime) -> str:
    return f"{expires_at.strftime('%H:%M:%S')} UTC"
