"""A session's first user turn and its sentences: what the prefetch searches with, shared by
the prefetch tool and the turn-start callback (which admits the prefetch with the
redemption)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.adk.sessions.session import Session

__all__ = ["first_turn_text", "split_sentences"]

_MIN_SENTENCE_CHARS = 30
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def first_turn_text(session: Session) -> str:
    """The user's text when the session holds exactly one user event, else ``""``."""
    users = [e for e in session.events if e.author == "user"]
    if len(users) != 1:
        return ""
    parts = users[0].content.parts if users[0].content and users[0].content.parts else []
    return " ".join(p.text for p in parts if p.text).strip()


def split_sentences(text: str) -> list[str]:
    sentences = [s.strip() for s in _SENTENCE.split(text) if len(s.strip()) >= _MIN_SENTENCE_CHARS]
    return sentences or [text]
