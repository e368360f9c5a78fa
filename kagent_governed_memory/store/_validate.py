"""Early, cheap refusals of bad input before any round trip (the database enforces again).

Every refusal is a content-free ``InvalidInput`` (or ``FactTooLarge``/``ConsentRequired``); no
error here carries the value it refused.
"""

from __future__ import annotations

import math
import struct
import sys
import uuid
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, cast

from pgvector import Vector

from ..errors import ConsentRequired, FactTooLarge, GovernanceError, InvalidInput, ReasonCode
from ..identity import Issuer, Principal, ScopeKey

__all__ = ["EMBEDDING_DIMENSION"]

EMBEDDING_DIMENSION = 768  # the default policy's (kagent-compatible); see MemoryPolicy


def _check_local_server(server: str) -> None:
    probe = f"@probe:{server}"
    try:
        Principal(mxid=probe, origin="native_local")
    except GovernanceError:
        ok = False
    else:
        ok = True
    if not ok:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="local_server")


def _generation(generation: int | None) -> int:
    if generation is None:
        raise ConsentRequired(ReasonCode.CONSENT_REQUIRED)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="generation")
    return generation


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates; the error object would hold the text
        return None


def _check_fact(fact: object, max_bytes: int) -> None:
    if not isinstance(fact, str) or not fact.strip() or "\x00" in fact:
        raise InvalidInput(ReasonCode.INVALID_TEXT)
    raw = _utf8(fact)
    if raw is None:
        raise InvalidInput(ReasonCode.INVALID_TEXT)
    if len(raw) > max_bytes:
        raise FactTooLarge(ReasonCode.FACT_TOO_LARGE)


def _vector(values: object, dimension: int = EMBEDDING_DIMENSION) -> Vector:
    """The query or fact vector as it is sent: ``dimension`` numbers, float32 (pgvector's),
    every one finite *in float32* -- a float64 that overflows it is refused here, not by the
    server.  On every search's path, so no Python list is built: one conversion in C, one sum
    in C (768 finite float32 values cannot overflow a float64 sum, so the sum is finite exactly
    when every value is), and pgvector takes the buffer in its own binary form."""
    if (not isinstance(values, str | bytes) and hasattr(values, "__len__")
            and len(values) == dimension):
        try:
            numbers = array("f", cast("Iterable[float]", values))  # any iterable: checked here
        except (TypeError, ValueError, OverflowError):
            numbers = None
        if numbers is not None and math.isfinite(sum(numbers)):
            if sys.byteorder == "little":
                numbers.byteswap()  # pgvector's binary form is big-endian
            return Vector.from_binary(struct.pack(">HH", dimension, 0) + numbers.tobytes())
    raise InvalidInput(ReasonCode.INVALID_EMBEDDING)


def _parse_entry_id(entry_id: object) -> uuid.UUID:
    parsed: uuid.UUID | None = None
    if isinstance(entry_id, str) and len(entry_id) <= 64:
        try:
            parsed = uuid.UUID(entry_id)
        except ValueError:
            parsed = None
    # A malformed id behaves like an absent one: the same statement runs on a random id.
    return parsed or uuid.uuid4()


def _reason(value: object, unknown: ReasonCode = ReasonCode.ERASURE_FAILED
            ) -> ReasonCode | None:
    """A stored or answered reason code; ``unknown`` for a value that is not one of ours."""
    if value is None or value == "":
        return None
    found = ReasonCode._value2member_map_.get(value) if isinstance(value, str) else None
    return found if isinstance(found, ReasonCode) else unknown


def _servable(key: object, issuer: Issuer | str) -> None:
    """``key`` is a ``ScopeKey`` this deployment serves under ``issuer``'s rules (S3, S5), or
    the store refuses it."""
    if not isinstance(key, ScopeKey):
        raise InvalidInput(ReasonCode.INVALID_IDENTITY, field="scope_key")
    key.require_servable(issuer)


def _key(key: ScopeKey) -> list[Any]:
    """The seven key parameters of an issuer-generic statement (000016)."""
    return [
        key.principal.issuer_kind,
        key.principal.issuer,
        key.principal.subject,
        key.agent.namespace,
        key.agent.name,
        key.scope.kind.value,
        key.scope.ref,
    ]


def _check_save(facts: object, embeddings: object, *, entry_cap: int, fact_max_bytes: int,
                dimension: int) -> list[Vector]:
    """A save's facts (1..``entry_cap``, each within ``fact_max_bytes``) and one vector of
    ``dimension`` per fact, checked; the vectors returned."""
    if isinstance(facts, str) or not isinstance(facts, Sequence):
        raise InvalidInput(ReasonCode.INVALID_TEXT)
    if (isinstance(embeddings, str | bytes) or not isinstance(embeddings, Sequence)
            or not 0 < len(facts) <= entry_cap or len(facts) != len(embeddings)):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="facts")
    for fact in facts:
        _check_fact(fact, fact_max_bytes)
    return [_vector(e, dimension) for e in embeddings]


def _check_queries(embeddings: object, limit: object, *, dimension: int, max_queries: int,
                   max_limit: int) -> list[Vector]:
    """A batched search's 1..``max_queries`` query vectors and its ``limit``, checked."""
    _check_limit(limit, max_limit)
    if (isinstance(embeddings, str | bytes) or not isinstance(embeddings, Sequence)
            or not 0 < len(embeddings) <= max_queries):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="embeddings")
    return [_vector(e, dimension) for e in embeddings]


def _check_limit(limit: object, max_limit: int) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= max_limit:
        raise InvalidInput(ReasonCode.INVALID_LIMIT)
