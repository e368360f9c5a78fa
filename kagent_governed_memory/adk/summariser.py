"""The auto-save summariser: bounded input, strict output, nothing stored on failure.

Upstream kagent stores the raw transcript whenever summarisation fails; here a failure stores
nothing and reports a reason code.  The input is capped (oldest turns dropped first, cut on a
UTF-8 boundary); the output must be a JSON list of at most ``summariser_max_facts`` strings, and
facts over the byte cap are dropped and counted, never truncated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.genai import types

from ..errors import ProviderError, ReasonCode
from ..policy import MemoryPolicy

__all__ = ["PROMPT", "Summary", "cap_transcript", "parse_facts", "summarise"]

PROMPT = """You keep a short list of durable facts that a user has allowed this assistant to \
remember between conversations.

From the conversation below, extract only what will still be useful later: the user's stated \
preferences, decisions and explicit requests, and concrete facts they shared (names, dates, \
projects). Skip small talk, anything the assistant merely suggested, and secrets such as \
passwords or keys.

Answer with a JSON array of strings, one self-contained fact per string, at most {max_facts} \
facts, each under {max_bytes} bytes. Answer [] if nothing qualifies. No prose, no code fence.

Conversation:
{conversation}

JSON array:"""

_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)


@dataclass
class Summary:
    facts: list[str] = field(default_factory=list)
    dropped: int = 0  # over-long or invalid facts, counted, never stored
    reason: ReasonCode | None = None  # set when nothing may be stored


def cap_transcript(lines: list[str], max_bytes: int) -> str:
    """Newest turns win: drop the oldest lines, then cut the oldest survivor on a UTF-8
    boundary so the result never exceeds ``max_bytes``."""
    kept: list[bytes] = []
    total = 0
    for line in reversed(lines):
        raw = line.encode("utf-8", "replace") + b"\n"
        if total + len(raw) <= max_bytes:
            kept.append(raw)
            total += len(raw)
            continue
        room = max_bytes - total
        if room > 0:
            tail = raw[len(raw) - room :]
            while tail and (tail[0] & 0xC0) == 0x80:  # a continuation byte: not a boundary
                tail = tail[1:]
            kept.append(tail)
        break
    return b"".join(reversed(kept)).decode("utf-8").rstrip("\n")


def parse_facts(output: str, policy: MemoryPolicy) -> Summary:
    text = _FENCE.sub("", output or "").strip()
    parsed: object = None
    malformed = False
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        malformed = True
    if malformed or not isinstance(parsed, list) or not all(isinstance(f, str) for f in parsed):
        return Summary(reason=ReasonCode.SUMMARY_MALFORMED)
    if len(parsed) > policy.summariser_max_facts:
        return Summary(reason=ReasonCode.SUMMARY_TOO_MANY_FACTS)
    facts: list[str] = []
    dropped = 0
    for fact in (f.strip() for f in parsed):
        raw = _utf8(fact)
        if not fact or raw is None or "\x00" in fact or len(raw) > policy.fact_max_bytes:
            dropped += 1
        elif fact not in facts:
            facts.append(fact)
    return Summary(facts=facts, dropped=dropped,
                   reason=None if facts else ReasonCode.NOTHING_TO_SAVE)


async def summarise(model: BaseLlm, lines: list[str], policy: MemoryPolicy) -> Summary:
    """One non-streaming call of the agent's own model.  Provider errors become a content-free
    ``ProviderError`` (raised outside the handler, so no chained exception carries text)."""
    conversation = cap_transcript(lines, policy.summariser_input_max_bytes)
    prompt = PROMPT.format(max_facts=policy.summariser_max_facts,
                           max_bytes=policy.fact_max_bytes, conversation=conversation)
    request = LlmRequest(
        model=model.model,
        contents=[types.Content(role="user", parts=[types.Part(text=prompt)])],
    )
    chunks: list[str] = []
    failed = False
    try:
        async for response in model.generate_content_async(request, stream=False):
            if response.error_code:
                failed = True
                break
            for part in (response.content.parts or []) if response.content else []:
                if part.text and not part.thought:
                    chunks.append(part.text)
    except Exception:  # noqa: BLE001 - any provider failure; its text must not travel on
        failed = True
    if failed:
        raise ProviderError(ReasonCode.MODEL_FAILED, operation="summarise")
    return parse_facts("".join(chunks), policy)


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None
