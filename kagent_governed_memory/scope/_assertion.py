"""The bridge-signed scope assertion (S6, T1): the only thing that makes a request memory-eligible.

ADK's ``user_id``/``app_name`` and kagent's ``X-User-Id`` are attribution: any caller of the
agent can set them.  The bridge, which has seen the Matrix event and checked the control room,
signs the exact scope of *one request* with its Ed25519 private key; the agent runtime (direct
mode) or the kagent controller verifies it with public keys only, so no process that runs an
agent can mint one.  Missing, forged, expired, replayed or mismatched → no memory.

The token is a compact JWS/JWT (RFC 7515/7519) signed with EdDSA over Ed25519 (RFC 8037)::

    header  {"alg": "EdDSA", "kid": <key id>, "typ": "JWT"}
    claims  {"iss": <the bridge>, "aud": "<namespace>/<agent>", "sub": <MXID>,
             "org": <origin kind>, "room": <control room id>, "cls": <classification>,
             "out": [<homeserver>, ...] (the output audience, sorted, unique),
             "ctx": <A2A context id>, "iat": <s>, "exp": <s>, "jti": <16-64 base64url chars>}

Exactly these claims; ``0 < exp - iat <= 60``.  Verification, in this order (the first failure
is the verdict; the shared test vectors in ``tests/support/vectors`` pin it for every verifier):

1. at most 4096 ASCII characters, three canonical unpadded base64url segments, header and
   claims JSON objects without duplicate members (or NaN/Infinity) → else ``assertion_invalid``;
2. header members only ``alg``/``kid``/``typ``, ``alg`` exactly ``EdDSA`` (never ``none`` or
   ``HS*``), ``typ`` absent or ``JWT`` → else ``assertion_invalid``;
3. ``kid`` names a configured public key → else ``assertion_unknown_key``;
4. the Ed25519 signature verifies (PyJWT) → else ``assertion_invalid``;
5. the claims are exactly the set above, well typed, valid identities, ``iss`` the configured
   issuer, lifetime at most 60 s → else ``assertion_invalid``;
6. ``iat`` no more than ``leeway`` in the future → else ``assertion_invalid``;
   ``now < exp + leeway`` → else ``assertion_expired`` (``leeway`` 5 s by default, at most 30 s);
7. ``aud`` is this agent → else ``agent_mismatch``; ``ctx`` the request's A2A context → else
   ``context_mismatch``.

Then the ``jti`` is redeemed once in PostgreSQL (the store's ``redeem``, in the
transaction that captures the request's generation): a replay, on any replica, is
``assertion_replayed``.

Every error raised here is content-free and raised outside any ``except`` block: a chained
library error or ``InvalidIdentity`` would otherwise carry the token or an identity with it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, model_validator

from ..errors import GovernanceError, InvalidIdentity, InvalidInput, ReasonCode, ScopeDenied
from ..identity import (
    _FROZEN,
    AgentIdentity,
    MemoryScope,
    Principal,
    ScopeKey,
    ScopeKind,
    _fields,
    _valid_server_name,
)
from ._jws import ALGORITHM, _envelope
from ._keys import KID, key_id

__all__ = [
    "DEFAULT_LEEWAY",
    "MAX_LEEWAY",
    "MAX_LIFETIME",
    "MAX_TOKEN_CHARS",
    "ScopeAssertion",
    "sign_scope_assertion",
    "verify_scope_assertion",
]

MAX_LIFETIME = timedelta(seconds=60)  # an assertion covers one request, not a session
DEFAULT_LIFETIME = timedelta(seconds=30)
DEFAULT_LEEWAY = timedelta(seconds=5)  # clock skew allowed between the bridge and a verifier
MAX_LEEWAY = timedelta(seconds=30)  # = the database's own bound on a redeemed exp (000008)
MAX_TOKEN_CHARS = 4096  # checked before any decoding

CLASSIFICATION = re.compile(r"[a-z][a-z0-9_]{0,31}")
DEFAULT_CLASSIFICATION = "personal"
ISSUER = re.compile(r"[\x21-\x7e]{1,256}")
CONTEXT_ID = re.compile(r"[\x21-\x7e]{1,256}")
JTI = re.compile(r"[A-Za-z0-9_-]{16,64}")
_CLAIMS = frozenset({"iss", "aud", "sub", "org", "room", "cls", "out", "ctx", "iat", "exp", "jti"})
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
    """A verified statement by the bridge (``issuer``): this principal, via this agent, in this
    control room and A2A context, with output going to exactly these homeservers, for one
    request (``jti``) between ``issued_at`` and ``expires_at``."""

    model_config = _FROZEN

    principal: Principal
    agent: AgentIdentity
    room_id: str
    classification: str = DEFAULT_CLASSIFICATION  # of this conversation (ADR decision 6)
    audience: tuple[str, ...]  # the output audience: every homeserver the reply reaches
    issued_at: datetime
    expires_at: datetime
    issuer: str
    context_id: str  # the A2A context (kagent: the ADK session) of the one request
    jti: str  # single use: redeemed once in the database (the store's redeem)

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "scope_assertion",
                       {"principal", "agent", "room_id", "classification", "audience",
                        "issued_at", "expires_at", "issuer", "context_id", "jti"})
        out: dict[str, Any] = {}
        for field, typ in (("principal", Principal), ("agent", AgentIdentity)):
            value = data.get(field)
            if isinstance(value, dict):
                value = typ.model_validate(value)
            if not isinstance(value, typ):
                raise _bad(field)
            out[field] = value
        if not out["principal"].is_matrix:  # the bridge asserts Matrix principals only
            raise _bad("principal")
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
        for field, pattern in (("issuer", ISSUER), ("context_id", CONTEXT_ID), ("jti", JTI)):
            value = data.get(field)
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field=field)
            out[field] = value
        return out

    @property
    def key(self) -> ScopeKey:
        """The control-room scope key this assertion authorizes (S4)."""
        return ScopeKey(principal=self.principal, agent=self.agent,
                        scope=MemoryScope.control_room(self.room_id))

    def __repr__(self) -> str:
        return (
            f"ScopeAssertion(key={self.key.opaque_id}, origin={self.principal.origin_name}, "
            f"audience_size={len(self.audience)}, issued_at={self.issued_at.isoformat()}, "
            f"expires_at={self.expires_at.isoformat()})"
        )

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, Any]]:  # rich/pydantic printers: no MXID/room
        yield "key", self.key.opaque_id
        yield "origin", self.principal.origin_name
        yield "audience_size", len(self.audience)
        yield "issued_at", self.issued_at.isoformat()
        yield "expires_at", self.expires_at.isoformat()




def _agent_audience(agent: AgentIdentity) -> str:
    return f"{agent.namespace}/{agent.name}"


def sign_scope_assertion(
    key: ScopeKey,
    *,
    private_key: Ed25519PrivateKey,
    issuer: str,
    audience: Sequence[str],
    context_id: str,
    classification: str = DEFAULT_CLASSIFICATION,
    lifetime: timedelta = DEFAULT_LIFETIME,
    now: datetime | None = None,
    kid: str | None = None,
    jti: str | None = None,
) -> str:
    """Bridge side: sign ``key`` for one A2A request (``context_id``) whose reply reaches
    ``audience`` (every homeserver in the room), in a conversation of ``classification``.

    ``kid`` defaults to the key's RFC 7638 thumbprint (``keys.key_id``) and ``jti`` to 128
    random bits.  Federated or bridged principals are signable on purpose: the store, not the
    bridge, refuses them (S5), so the refusal has one place and one reason code.
    """
    if not isinstance(key, ScopeKey):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="key")
    if key.scope.kind is not ScopeKind.CONTROL_ROOM:
        raise ScopeDenied(ReasonCode.SCOPE_KIND_RESERVED, scope_id=key.opaque_id)
    if not isinstance(private_key, Ed25519PrivateKey):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="private_key")
    if kid is None:
        kid = key_id(private_key)
    if not isinstance(kid, str) or not KID.fullmatch(kid):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="kid")
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
    assertion = ScopeAssertion.model_validate({
        "principal": key.principal,
        "agent": key.agent,
        "room_id": key.scope.room_id,
        "classification": classification,
        "audience": audience,
        "issued_at": issued,
        "expires_at": issued + lifetime,
        "issuer": issuer,
        "context_id": context_id,
        "jti": secrets.token_urlsafe(16) if jti is None else jti,
    })
    token = jwt.encode(_claims(assertion), private_key, algorithm=ALGORITHM,
                       headers={"kid": kid, "typ": "JWT"})
    if len(token) > MAX_TOKEN_CHARS:  # never hand out a token that verify must refuse
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="audience")
    return token


def _claims(a: ScopeAssertion) -> dict[str, Any]:
    return {
        "iss": a.issuer,
        "aud": _agent_audience(a.agent),
        "sub": a.principal.mxid,
        "org": a.principal.origin_name,
        "room": a.room_id,
        "cls": a.classification,
        "out": list(a.audience),
        "ctx": a.context_id,
        "iat": int(a.issued_at.timestamp()),
        "exp": int(a.expires_at.timestamp()),
        "jti": a.jti,
    }


def verify_scope_assertion(
    token: str,
    *,
    public_keys: Mapping[str, Ed25519PublicKey],
    issuer: str,
    agent: AgentIdentity,
    context_id: str | None,
    now: datetime | None = None,
    leeway: timedelta = DEFAULT_LEEWAY,
) -> ScopeAssertion:
    """Verifier side: the assertion, or ``ScopeDenied`` with the reason of the first failed
    check (see the module docstring for the order).

    ``aud`` must name ``agent`` and ``ctx`` must be ``context_id``, the A2A context of the
    request the token arrived with.  ``context_id=None`` is for a verifier that cannot know
    the context (a controller route called by the runtime, after the runtime checked it); it
    must be passed explicitly.  Bad ``public_keys``/``issuer``/``now``/``leeway``
    (including a private key where a public one belongs) are deployment errors, not bad tokens,
    and raise ``InvalidInput``.  Replay is refused later, by the store's ``redeem``.
    """
    if (
        not isinstance(public_keys, Mapping)
        or not public_keys
        or not all(isinstance(k, str) and isinstance(v, Ed25519PublicKey)
                   for k, v in public_keys.items())  # a private key here is refused
    ):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="public_keys")
    if not isinstance(issuer, str) or not ISSUER.fullmatch(issuer):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
    if not isinstance(agent, AgentIdentity):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="agent")
    if context_id is not None and not isinstance(context_id, str):
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="context_id")
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="now")
    if not isinstance(leeway, timedelta) or not timedelta(0) <= leeway <= MAX_LEEWAY:
        raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="leeway")

    # ``from None``: even when our caller is handling an exception, nothing is chained.
    reason, assertion = _verified(token, public_keys, issuer)
    if reason is None and assertion is not None:
        if assertion.issued_at - now > leeway:  # from the future
            reason = ReasonCode.ASSERTION_INVALID
        elif now - assertion.expires_at >= leeway:  # differences: no overflow near the limits
            reason = ReasonCode.ASSERTION_EXPIRED
        elif assertion.agent != agent:
            reason = ReasonCode.AGENT_MISMATCH
        elif context_id is not None and assertion.context_id != context_id:
            reason = ReasonCode.CONTEXT_MISMATCH
    if reason is not None or assertion is None:
        raise ScopeDenied(reason or ReasonCode.ASSERTION_INVALID) from None
    return assertion


def _verified(token: Any, public_keys: Mapping[str, Ed25519PublicKey], issuer: str
              ) -> tuple[ReasonCode | None, ScopeAssertion | None]:
    invalid = (ReasonCode.ASSERTION_INVALID, None)
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return invalid
    envelope = _envelope(token)
    if envelope is None:
        return invalid
    header, claims = envelope
    key = public_keys.get(header["kid"])
    if key is None:
        return ReasonCode.ASSERTION_UNKNOWN_KEY, None
    try:  # the signature, by the library; it also refuses every alg but EdDSA
        jwt.PyJWS().decode_complete(token, key=key, algorithms=[ALGORITHM])
    except jwt.PyJWTError:
        return invalid
    if set(claims) != _CLAIMS or claims["iss"] != issuer:
        return invalid
    assertion = _parse(claims)
    return invalid if assertion is None else (None, assertion)


def _parse(c: dict[str, Any]) -> ScopeAssertion | None:
    if any(type(c[k]) is not int or not 0 <= c[k] <= _MAX_TS for k in ("iat", "exp")):
        return None
    if any(not isinstance(c[k], str) for k in ("iss", "aud", "sub", "org", "room", "cls", "ctx", "jti")):
        return None
    out = c["out"]
    if not isinstance(out, list) or not all(isinstance(s, str) for s in out) or out != sorted(set(out)):
        return None  # the output audience in its one spelling: sorted, unique
    namespace, sep, name = c["aud"].partition("/")
    if not sep:
        return None
    try:
        return ScopeAssertion(
            principal=Principal(mxid=c["sub"], origin=c["org"]),
            agent=AgentIdentity(namespace=namespace, name=name),
            room_id=c["room"],
            classification=c["cls"],
            audience=c["out"],
            issued_at=datetime.fromtimestamp(c["iat"], UTC),
            expires_at=datetime.fromtimestamp(c["exp"], UTC),
            issuer=c["iss"],
            context_id=c["ctx"],
            jti=c["jti"],
        )
    except (GovernanceError, ValueError, TypeError, OverflowError, OSError):
        return None  # an invalid identity, room, audience or lifetime
