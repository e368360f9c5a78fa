"""``!memory`` replies and refusals as the Matrix text a person reads.

Everything but an inspect page is content-free: fixed sentences, reason codes, counts, opaque
entry ids, times.  The agent's own answer is relayed as the agent wrote it (by the caller).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..controls._controls import (
    ConfirmationRequired,
    ConsentReply,
    ErasureReply,
    ForgetReply,
    InspectReply,
    Notice,
    StatusReply,
)
from ..errors import ReasonCode
from ..policy import MemoryPolicy

__all__ = ["render_notice", "render_reply"]

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
    """One reply of ``MemoryControls.handle`` as text; ``command`` is the text it answered."""
    if isinstance(reply, ConsentReply):
        r = reply.receipt
        return (f"Memory is on for {agent} (purpose {r.purpose}, policy {r.policy_version}, "
                f"consent until {_when(r.expires_at)}). Nothing is remembered yet.")
    if isinstance(reply, ErasureReply):
        e = reply.receipt
        state = "erased and verified gone" if e.verified else "erased, NOT verified"
        count = f"{e.deleted} {'entry' if e.deleted == 1 else 'entries'}"
        if reply.action == "off":
            return f"Memory is off for {agent}: {count} {state}."
        return f"Forgot everything about you for {agent}: {count} {state}."
    if isinstance(reply, ForgetReply):
        words = command.split()
        entry = words[-1] if words else "?"
        if not reply.receipt.deleted:
            return f"Nothing to forget: no entry {entry}."
        state = "verified gone" if reply.receipt.verified else "NOT verified"
        return f"Forgot entry {entry}: {state}."
    if isinstance(reply, StatusReply):
        s = reply.status
        if not s.enabled:
            return (f"Memory is off for {agent}. Nothing is collected. Last verified erasure: "
                    f"{_when(s.last_verified_erasure_at)}.")
        return (f"Memory is on for {agent}: purpose {s.purpose}, policy {s.policy_version}, "
                f"{s.entry_count} of at most {s.entry_cap} entries, each kept at most "
                f"{_span(s.max_ttl)}; consent until {_when(s.consent_expires_at)}; last "
                f"verified erasure: {_when(s.last_verified_erasure_at)}.")
    if isinstance(reply, InspectReply):
        n = len(reply.entries)
        lines = [f"What {agent} remembers about you ({n} {'entry' if n == 1 else 'entries'}"
                 f"{' on this page' if reply.next_cursor else ''}):"]
        lines += [f"- {e.id}: {e.text} (saved {_when(e.created_at)}, gone by "
                  f"{_when(e.expires_at)})" for e in reply.entries]
        if reply.next_cursor:
            lines.append(f"More: !memory inspect {agent} {reply.next_cursor}")
        if not n:
            lines = [f"{agent} remembers nothing about you."]
        return "\n".join(lines)
    if isinstance(reply, ConfirmationRequired):
        words = ["!memory", "forget" if reply.action == "forget_all" else reply.action, agent]
        if reply.action == "forget_all":
            words.append("all")
        if reply.purpose:
            words.append(reply.purpose)
        what = {
            "on": (f"This turns memory on for {agent}, purpose {reply.purpose}, under policy "
                   f"{reply.policy_version}: facts you ask it to remember are kept at most "
                   f"{_span(policy.max_ttl)}, at most {policy.entry_cap} of them, and you can "
                   f"inspect, forget or turn it off at any time."),
            "off": f"This turns memory off for {agent} and erases everything it remembers.",
            "forget_all": f"This erases everything {agent} remembers about you.",
        }[reply.action]
        return (f"{what} To confirm within {_until(reply.expires_at)}, send:\n"
                f"{' '.join(words)} {reply.token}")
    if isinstance(reply, Notice):
        return render_notice(reply.reason)
    return render_notice(ReasonCode.COMMAND_INVALID)


def _until(expires_at: datetime) -> str:
    return f"{expires_at.strftime('%H:%M:%S')} UTC"
