"""The bridge-signed scope assertion (S6): the only thing that makes a request memory-eligible.

ADK's ``user_id``/``app_name`` and kagent's ``X-User-Id`` are attribution: any caller of the
agent can set them.  The bridge, which has seen the Matrix event and checked the control room,
signs the exact scope key plus the output audience with a shared secret; the agent runtime
verifies it here.  Missing, forged, expired or mismatched → no memory.

Token: ``"v1." + b64url(payload) + "." + b64url(HMAC-SHA256(secret, b"v1." + b64url(payload)))``
(unpadded), payload = canonical JSON of ``v, sub, org, ns, agt, room, aud, iat, exp`` in that
order.  Only the canonical encoding verifies, so one assertion has exactly one token.

Every error raised here is content-free and raised outside any ``except`` block: a chained
``ValueError`` or ``InvalidIdentity`` would otherwise carry the token or an identity with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, model_validator

from .errors import GovernanceError, InvalidIdentity, InvalidInput, ReasonCode, ScopeDenied
from .identity import (
    _FROZEN,
    AgentIdentity,
    MemoryScope,
    Principal,
    ScopeKey,
    ScopeKind,
    _fields,
    _valid_server_name,
)

__all__ = [
    "MAX_LIFETIME",
    "MAX_TOKEN_CHARS",
    "MIN_SECRET_BYTES",
    "ScopeAssertion",
    "sign_scope_assertion",
    "verify_scope_assertion",
]

MAX_LIFETIME = timedelta(minutes=5)  # an assertion covers one request, not a session
MAX_SKEW = MAX_LIFETIME  # a larger clock allowance would quietly outlive MAX_LIFETIME
MAX_TOKEN_CHARS = 4096  # checked before any decoding
MIN_SECRET_BYTES = 32  # HMAC-SHA256 key: at least the digest size

_VERSION = "v1"
_PREFIX = b"v1."
_B64URL = re.compile(r"^[A-Za-z0-9_-]+$")
_MAC_B64_CHARS = 43  # 32 bytes, unpadded
_KEYS = ("v", "sub", "org", "ns", "agt", "room", "cls", "aud", "iat", "exp")
CLASSIFICATION = re.compile(r"[a-z][a-z0-9_]{0,31}")
DEFAULT_CLASSIFICATION = "personal"
_MAX_TS = 253402300799  # 9999-12-31T23:59:59Z, the last second datetime can hold
_ONE_SECOND = timedelta(seconds=1)


def _bad(what: str) -> InvalidIdentity:
    return InvalidIdentity(ReasonCode.INVALID_IDENTITY, field=what)


def _utc_second(value: Any) -> datetime | None:
    """An aware datetime on a whole second, as UTC; ``None`` (never an exception) otherwise."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return None
    try:
        value = value.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return value if value.microsecond == 0 else None


def _audience(value: Any) -> tuple[str, ...] | None:
    """Sorted, de-duplicated homeserver names.  A collection, never any iterable: a bare ``str``
    would otherwise be signed as one "server" per character."""
    if not isinstance(value, list | tuple | set | frozenset):
        return None
    servers = set()
    for server in value:
        if not isinstance(server, str) or not server.isascii() or not 0 < len(server) <= 255:
            return None
        if not _valid_server_name(server):
            return None
        servers.add(server)
    return tuple(sorted(servers)) if servers else None


class ScopeAssertion(BaseModel):
    """A verified statement by the bridge: this principal, via this agent, in this control room,
    with output going to exactly these homeservers, between ``issued_at`` and ``expires_at``."""

    model_config = _FROZEN

    principal: Principal
    agent: AgentIdentity
    room_id: str
    classification: str = DEFAULT_CLASSIFICATION  # of this conversation (ADR decision 6)
    audience: tuple[str, ...]  # the output audience: every homeserver the reply reaches
    issued_at: datetime
    expires_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "scope_assertion",
                       {"principal", "agent", "room_id", "classification", "audience",
                        "issued_at", "expires_at"})
        out: dict[str, Any] = {}
        for field, typ in (("principal", Principal), ("agent", AgentIdentity)):
            value = data.get(field)
            if isinstance(value, dict):
                value = typ.model_validate(value)
            if not isinstance(value, typ):
                raise _bad(field)
            out[field] = value
        room = data.get("room_id")
        out["room_id"] = MemoryScope.control_room(room).room_id  # InvalidIdentity if malformed
        classification = data.get("classification", DEFAULT_CLASSIFICATION)
        if not isinstance(classification, str) or not CLASSIFICATION.fullmatch(classification):
            raise _bad("classification")
        out["classification"] = classification
        audience = _audience(data.get("audience"))
        if audience is None:
            raise _bad("audience")
        out["audience"] = audience
        issued, expires = _utc_second(data.get("issued_at")), _utc_second(data.get("expires_at"))
        if issued is None or expires is None:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion_time")
        if not timedelta(0) < expires - issued <= MAX_LIFETIME:  # no overflow near datetime.max
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="assertion_lifetime")
        out["issued_at"], out["expires_at"] = issued, expires
        return out

    @property
    def key(self) -> ScopeKey:
        """The control-room scope key this assertion authorizes (S4)."""
        return ScopeKey(principal=self.principal, agent=self.agent,
                        scope=MemoryScope.control_room(self.room_id))

    def __repr__(self) -> str:
        return (
            f"ScopeAssertion(key={self.key.opaque_id}, origin={self.principal.origin.value}, "
            f"audience_size={len(self.audience)}, issued_at={self.issued_at.isoformat()}, "
            f"expires_at={self.expires_at.isoformat()})"
        )

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, Any]]:  # rich/pydantic printers: no MXID/room
        yield "key", self.key.opaque_id
        yield "origin", self.principal.origin.value
        yield "audience_size", len(self.audience)
        yield "issued_at", self.issued_at.isoformat()
        yield "expires_at", self.expires_at.isoformat()


def _valid_secret(secret: Any) -> bool:
    return isinstance(secret, bytes) and len(secret) >= MIN_SECRET_BYTES


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


def _payload(a: ScopeAssertion) -> bytes:
    """The one canonical encoding: fixed key order, no whitespace, ASCII only."""
    body = {
        "v": 1,
        "sub": a.principal.mxid,
        "org": a.principal.origin.value,
        "ns": a.agent.namespace,
        "agt": a.agent.name,
        "room": a.room_id,
        "cls": a.classification,
        "aud": list(a.audience),
        "iat": int(a.issued_at.timestamp()),
        "exp": int(a.expires_at.timestamp()),
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _mac(secret: bytes, payload_b64: str) -> bytes:
    return hmac.new(secret, _PREFIX + payload_b64.encode("ascii"), hashlib.sha256).digest()


def sign_scope_assertion(
    key: ScopeKey,
    *,
    secret: bytes,
    audience: Sequence[str],
    lifetime: timedelta = timedelta(seconds=60),
    now: datetime | None = None,
    classification: str = DEFAULT_CLASSIFICATION,
) -> str:
    """Bridge side: sign ``key`` for output to ``audience`` (every homeserver in the room), for
    a conversation of ``classification``.

    Federated or bridged principals are signable on purpose: the store, not the bridge,
    refuses them (S5), so the refusal has one place and one reason code.
    """
    if not isinstance(key, ScopeKey):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="key")
    if key.scope.kind is not ScopeKind.CONTROL_ROOM:
        raise ScopeDenied(ReasonCode.SCOPE_KIND_RESERVED, scope_id=key.opaque_id)
    if not _valid_secret(secret):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="secret")
    if (
        not isinstance(lifetime, timedelta)
        or not _ONE_SECOND <= lifetime <= MAX_LIFETIME
        or lifetime % _ONE_SECOND
    ):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="lifetime")
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="now")
    ts = now.timestamp()  # exact arithmetic on aware datetimes; no overflow near the limits
    if not 0 <= ts <= _MAX_TS - MAX_LIFETIME.total_seconds():
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="now")
    issued = datetime.fromtimestamp(int(ts), UTC)
    assertion = ScopeAssertion(
        principal=key.principal,
        agent=key.agent,
        room_id=key.scope.room_id,
        classification=classification,
        audience=audience,
        issued_at=issued,
        expires_at=issued + lifetime,
    )
    payload_b64 = _b64(_payload(assertion))
    token = f"{_VERSION}.{payload_b64}.{_b64(_mac(secret, payload_b64))}"
    if len(token) > MAX_TOKEN_CHARS:  # never hand out a token that verify must refuse
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="audience")
    return token


def verify_scope_assertion(
    token: str,
    *,
    secret: bytes,
    now: datetime | None = None,
    max_skew: timedelta = timedelta(seconds=30),
) -> ScopeAssertion:
    """Agent side: the assertion, or ``ScopeDenied`` (``assertion_invalid``/``_expired``).

    The MAC is checked before the payload is parsed, so unauthenticated bytes never reach the
    JSON parser.  A bad ``secret``/``now``/``max_skew`` is a deployment error, not a bad token,
    and raises ``InvalidInput`` instead.
    """
    if not _valid_secret(secret):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="secret")
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="now")
    if not isinstance(max_skew, timedelta) or not timedelta(0) <= max_skew <= MAX_SKEW:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="max_skew")

    # ``from None``: even when our caller is handling an exception, nothing is chained.
    assertion = _authenticated(token, secret)
    if assertion is None or assertion.issued_at - now > max_skew:  # forged or from the future
        raise ScopeDenied(ReasonCode.ASSERTION_INVALID) from None
    if now - assertion.expires_at >= max_skew:  # differences: no overflow near datetime.max
        raise ScopeDenied(ReasonCode.ASSERTION_EXPIRED) from None
    return assertion


def _authenticated(token: Any, secret: bytes) -> ScopeAssertion | None:
    """Token → assertion if well-formed, correctly signed and canonical; ``None`` otherwise."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _VERSION or len(parts[2]) != _MAC_B64_CHARS:
        return None
    payload, mac = _unb64(parts[1]), _unb64(parts[2])
    if payload is None or mac is None:
        return None
    if not hmac.compare_digest(_mac(secret, parts[1]), mac):
        return None
    assertion = _parse(payload)
    # Re-encoding must give the signed bytes: no second spelling (whitespace, key order,
    # duplicate keys, escapes, unsorted audience) of an assertion is ever accepted.
    if assertion is None or _payload(assertion) != payload:
        return None
    return assertion


def _parse(payload: bytes) -> ScopeAssertion | None:
    try:
        body = json.loads(payload.decode("ascii"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or tuple(body) != _KEYS or body["v"] != 1:
        return None
    if any(type(body[k]) is not int for k in ("v", "iat", "exp")):
        return None
    if not all(0 <= body[k] <= _MAX_TS for k in ("iat", "exp")):
        return None
    if any(not isinstance(body[k], str) for k in ("sub", "org", "ns", "agt", "room", "cls")):
        return None
    if not isinstance(body["aud"], list):
        return None
    try:
        return ScopeAssertion(
            principal=Principal(mxid=body["sub"], origin=body["org"]),
            agent=AgentIdentity(namespace=body["ns"], name=body["agt"]),
            room_id=body["room"],
            classification=body["cls"],
            audience=body["aud"],
            issued_at=datetime.fromtimestamp(body["iat"], UTC),
            expires_at=datetime.fromtimestamp(body["exp"], UTC),
        )
    except (GovernanceError, ValueError, TypeError, OverflowError, OSError):
        return None  # an invalid identity, room, audience or lifetime; raised by our caller
