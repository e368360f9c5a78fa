"""google-adk ``MemoryEntry`` values: a recalled record, a "no memory" notice, an entry's text."""

from __future__ import annotations

from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

from ..errors import ReasonCode
from ..models import MemoryRecord
from .refusals import NOTICE_AUTHOR, notice_text

__all__ = ["entry_text", "memory_entry", "notice_entry"]


def memory_entry(record: MemoryRecord) -> MemoryEntry:
    return MemoryEntry(
        id=record.id,
        content=types.Content(role="user", parts=[types.Part(text=record.text)]),
        timestamp=record.created_at.isoformat(),
    )


def notice_entry(reason: ReasonCode) -> MemoryEntry:
    """Never an empty memory: what google-adk's own ``load_memory`` shows for a refusal
    (content-free: the reason code only), so "no memory" is not read as "nothing remembered"."""
    return MemoryEntry(
        content=types.Content(role="model", parts=[types.Part(text=notice_text(reason))]),
        author=NOTICE_AUTHOR, custom_metadata={"kgm.reason": reason.value})


def entry_text(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return " ".join(p.text for p in content.parts if p.text).strip()
