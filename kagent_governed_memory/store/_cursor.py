"""Opaque inspect cursors: a keyset position (created_at, entry id) bound to its scope key.

The tag is keyed with the scope's *public* opaque id, so it prevents accidents (a cursor from
another key or a truncated one), not forgery: a forged position can only page within the
caller's own key, which the database enforces anyway.  Any malformed or out-of-range cursor is
``invalid_cursor``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import uuid
from datetime import UTC, datetime, timedelta

from ..errors import InvalidInput, ReasonCode
from ..identity import ScopeKey

_CURSOR = struct.Struct(">Bq16s")  # version, created_at (µs since epoch), entry id
_CURSOR_TAG = 12
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _cursor_tag(key: ScopeKey, payload: bytes) -> bytes:
    return hashlib.blake2b(payload, key=key.opaque_id.encode(), digest_size=_CURSOR_TAG).digest()


def _encode_cursor(key: ScopeKey, created_at: datetime, entry_id: uuid.UUID) -> str:
    micros = (created_at - _EPOCH) // _MICROSECOND
    payload = _CURSOR.pack(1, micros, entry_id.bytes)
    return base64.urlsafe_b64encode(payload + _cursor_tag(key, payload)).decode().rstrip("=")


def _decode_cursor(key: ScopeKey, cursor: object) -> tuple[datetime, uuid.UUID]:
    """An opaque cursor binds a position to its key: a forged, truncated or foreign cursor is
    refused with ``invalid_cursor`` (it could only ever page within the caller's own key)."""
    raw = _b64(cursor) if isinstance(cursor, str) and len(cursor) <= 64 else None
    if raw is None or len(raw) != _CURSOR.size + _CURSOR_TAG:
        raise InvalidInput(ReasonCode.INVALID_CURSOR)
    payload, tag = raw[: _CURSOR.size], raw[_CURSOR.size :]
    version, micros, id_bytes = _CURSOR.unpack(payload)
    if version != 1 or not hmac.compare_digest(tag, _cursor_tag(key, payload)):
        raise InvalidInput(ReasonCode.INVALID_CURSOR)
    try:  # the tag is keyed with a public id, so the position itself is untrusted input
        at = _EPOCH + micros * _MICROSECOND
    except OverflowError:
        raise InvalidInput(ReasonCode.INVALID_CURSOR) from None
    return at, uuid.UUID(bytes=id_bytes)


def _b64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        return None
