"""The compact JWS envelope of a scope assertion, checked strictly before any signature work.

Three canonical unpadded base64url segments (only the one spelling of some bytes decodes, no
malleable trailing bits), a 64-byte signature, a header and claims that are JSON objects with
no duplicate keys, and a header of exactly ``alg`` EdDSA, ``kid`` and an optional ``typ`` JWT.
The signature itself is PyJWT's (``assertion._verified``)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ._keys import _json_object

ALGORITHM = "EdDSA"
_HEADER = frozenset({"alg", "kid", "typ"})
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_SIGNATURE_B64_CHARS = 86  # 64 bytes, unpadded


def _envelope(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(header, claims) of a well-formed EdDSA compact JWS whose header names a key; None
    otherwise (never an exception)."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[2]) != _SIGNATURE_B64_CHARS:
        return None
    raw_header, raw_claims = _unb64(parts[0]), _unb64(parts[1])
    if raw_header is None or raw_claims is None or _unb64(parts[2]) is None:
        return None
    header, claims = _json_object(raw_header), _json_object(raw_claims)
    if (
        header is None
        or claims is None
        or not set(header) <= _HEADER
        or header.get("alg") != ALGORITHM
        or header.get("typ", "JWT") != "JWT"
        or not isinstance(header.get("kid"), str)
    ):
        return None
    return header, claims


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(segment: str) -> bytes | None:
    """Strict unpadded base64url: only the canonical spelling of some bytes decodes."""
    if not _B64URL.fullmatch(segment) or len(segment) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if _b64(raw) == segment else None  # no malleable trailing bits
