"""Typed identity and scope: who (principal), which agent, where (scope) — S1–S5.

The authorization key is the exact triple; nothing here is parsed back out of kagent's
``app_name`` or ADK's ``user_id`` strings, and no validation error echoes its input.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from .errors import InvalidIdentity, ReasonCode, ScopeDenied

__all__ = [
    "AgentIdentity",
    "MemoryScope",
    "OriginKind",
    "OriginName",
    "Principal",
    "ScopeKey",
    "ScopeKind",
    "ScopeKindName",
    "server_name_of",
]

MXID_MAX_BYTES = 255
# Matrix user-ID grammar (spec §Appendices "User Identifiers"): the localpart of historical IDs
# may use any printable ASCII except ':'; current IDs are a subset.  Server name = host[:port].
_LOCALPART = re.compile(r"^[\x21-\x39\x3b-\x7e]+$")
_DNS_NAME = re.compile(r"^[A-Za-z0-9.-]{1,255}$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_ROOM_OPAQUE = re.compile(r"^[\x21-\x39\x3b-\x7e]{1,255}$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS1123_SUBDOMAIN_PART = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

_FROZEN = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


def _bad(what: str) -> InvalidIdentity:
    return InvalidIdentity(ReasonCode.INVALID_IDENTITY, field=what)


def _fields(data: Any, what: str, allowed: set[str]) -> dict[str, Any]:
    """Pydantic would wrap errors in a ValidationError; ours must stay ``InvalidIdentity``."""
    if isinstance(data, BaseModel):
        data = dict(data)
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data) \
            or not set(data) <= allowed:
        raise _bad(what)
    return data


def _enum_member(enum: type[StrEnum], value: Any) -> Any:
    """Enum lookup that raises nothing: a ValueError would carry the input in its message
    and, as ``__context__``, into any error raised while handling it."""
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        return enum._value2member_map_.get(value)
    return None


def _valid_server_name(server: str) -> bool:
    host, port = server, None
    if server.startswith("["):
        end = server.find("]")
        if end < 0:
            return False
        host, rest = server[1:end], server[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                return False
            port = rest[1:]
        if not _is_ipv6(host):
            return False
    else:
        if server.count(":") > 1:
            return False
        if ":" in server:
            host, port = server.split(":", 1)
        if not _DNS_NAME.fullmatch(host) or host.startswith(".") or ".." in host:
            return False
    return not (port is not None and (not _PORT.fullmatch(port) or not 0 < int(port) <= 65535))


def _is_ipv6(host: str) -> bool:
    if not host or any(c not in "0123456789abcdefABCDEF:." for c in host):
        return False  # also refuses a zone index ("%eth0"), which the Matrix grammar lacks
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def server_name_of(mxid_or_room: str) -> str | None:
    """Server part of a validated MXID or room ID (``None`` for a v12 room ID)."""
    _, sep, server = mxid_or_room[1:].partition(":")
    return server if sep else None


class OriginKind(StrEnum):
    """How the principal reached us; the same MXID with two origins is two principals (S1)."""

    NATIVE_LOCAL = "native_local"
    EXTERNAL_APPSERVICE = "external_appservice"
    REMOTE_FEDERATED = "remote_federated"
    OAUTH_CLIENT = "oauth_client"
    FEDIVERSE_ACTOR = "fediverse_actor"


OriginName = Literal[
    "native_local", "external_appservice", "remote_federated", "oauth_client", "fediverse_actor"
]
"""The ``OriginKind`` values as strings: ``Principal(origin=...)`` takes either."""

MATRIX_ISSUER = "matrix"
"""The issuer of Matrix principals in the store's ``(issuer, subject)`` key."""


class Principal(BaseModel):
    """A complete Matrix user ID plus its origin kind (S1)."""

    model_config = _FROZEN

    mxid: str
    origin: OriginKind

    if TYPE_CHECKING:  # the validator below also takes the enum's value as a string
        def __init__(self, *, mxid: str, origin: OriginKind | OriginName) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "principal", {"mxid", "origin"})
        mxid = data.get("mxid")
        if not isinstance(mxid, str) or not mxid.isascii() or len(mxid) > MXID_MAX_BYTES:
            raise _bad("mxid")
        if len(mxid) < 4 or mxid[0] != "@" or ":" not in mxid:
            raise _bad("mxid")
        localpart, _, server = mxid[1:].partition(":")
        if not _LOCALPART.fullmatch(localpart) or not _valid_server_name(server):
            raise _bad("mxid")
        origin = _enum_member(OriginKind, data.get("origin"))
        if origin is None:
            raise _bad("origin")
        return {**data, "origin": origin}

    @property
    def issuer(self) -> str:
        """The identity system that names this principal: ``"matrix"`` (v1's only issuer).  The
        store keys a principal by ``(issuer, subject)``, so another issuer can be added later
        without rewriting keys; the origin kind is a rule of the Matrix issuer."""
        return MATRIX_ISSUER

    @property
    def subject(self) -> str:
        """The principal's name at its issuer: the complete MXID."""
        return self.mxid

    @property
    def server_name(self) -> str:
        return self.mxid.split(":", 1)[1]

    @property
    def opaque_id(self) -> str:
        """Stable pseudonymous id for logs and reports (never the MXID itself)."""
        return "pr_" + _digest("principal", self.mxid, self.origin.value)

    def __repr__(self) -> str:
        return f"Principal(id={self.opaque_id}, origin={self.origin.value})"

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, str]]:  # rich, pydantic printers: no MXID
        yield "id", self.opaque_id
        yield "origin", self.origin.value


class AgentIdentity(BaseModel):
    """Exact kagent agent: Kubernetes namespace (DNS-1123 label) + name (DNS-1123 subdomain)."""

    model_config = _FROZEN

    namespace: str
    name: str

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "agent", {"namespace", "name"})
        ns, name = data.get("namespace"), data.get("name")
        if not isinstance(ns, str) or not _DNS1123_LABEL.fullmatch(ns):
            raise _bad("namespace")
        if (
            not isinstance(name, str)
            or not 0 < len(name) <= 253
            or not all(_DNS1123_SUBDOMAIN_PART.fullmatch(p) for p in name.split("."))
        ):
            raise _bad("agent_name")
        return data

    @property
    def app_name(self) -> str:
        """kagent's ``<ns>__NS__<name>`` form (``-`` → ``_``).  Lossy: never parse it back (S2)."""
        return self.namespace.replace("-", "_") + "__NS__" + self.name.replace("-", "_")

    def __repr__(self) -> str:
        return f"AgentIdentity(namespace={self.namespace!r}, name={self.name!r})"


class ScopeKind(StrEnum):
    CONTROL_ROOM = "control_room"
    CROSS_ROOM = "cross_room"  # reserved (ADR 0023 §5): constructible, refused by the store


ScopeKindName = Literal["control_room", "cross_room"]
"""The ``ScopeKind`` values as strings: ``MemoryScope(kind=...)`` takes either."""


class MemoryScope(BaseModel):
    """Where memory may be used: v1 admits exactly one single-subject control room (S3)."""

    model_config = _FROZEN

    kind: ScopeKind
    room_id: str | None = None

    if TYPE_CHECKING:  # the validator below also takes the enum's value as a string
        def __init__(self, *, kind: ScopeKind | ScopeKindName, room_id: str | None = None
                     ) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "scope", {"kind", "room_id"})
        kind = _enum_member(ScopeKind, data.get("kind"))
        if kind is None:
            raise _bad("scope_kind")
        room = data.get("room_id")
        if kind is ScopeKind.CONTROL_ROOM:
            if not isinstance(room, str) or not _valid_room_id(room):
                raise _bad("room_id")
        elif room is not None and (not isinstance(room, str) or not _valid_room_id(room)):
            raise _bad("room_id")
        return {**data, "kind": kind}

    @classmethod
    def control_room(cls, room_id: str) -> MemoryScope:
        return cls(kind=ScopeKind.CONTROL_ROOM, room_id=room_id)

    def __repr__(self) -> str:
        return f"MemoryScope(kind={self.kind.value})"

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, str]]:  # rich, pydantic: no room id
        yield "kind", self.kind.value


def _valid_room_id(room: str) -> bool:
    if not room.isascii() or len(room) > 255 or len(room) < 2 or room[0] != "!":
        return False
    opaque, sep, server = room[1:].partition(":")
    if not _ROOM_OPAQUE.fullmatch(opaque):
        return False
    return not sep or _valid_server_name(server)


class ScopeKey(BaseModel):
    """The authorization key (S4): every row, consent record and counter is keyed by it."""

    model_config = _FROZEN

    principal: Principal
    agent: AgentIdentity
    scope: MemoryScope

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "scope_key", {"principal", "agent", "scope"})
        types: dict[str, type[BaseModel]] = {
            "principal": Principal, "agent": AgentIdentity, "scope": MemoryScope}
        out: dict[str, BaseModel] = {}
        for field, typ in types.items():
            value = data.get(field)
            if isinstance(value, dict):
                value = typ.model_validate(value)
            if not isinstance(value, typ):
                raise _bad("scope_key")
            out[field] = value
        return out

    @property
    def opaque_id(self) -> str:
        """Stable content-free id, safe for logs, receipts and metrics exemplars."""
        return "sk_" + _digest(
            "scope",
            self.principal.mxid,
            self.principal.origin.value,
            self.agent.namespace,
            self.agent.name,
            self.scope.kind.value,
            self.scope.room_id or "",
        )

    def require_servable(self, local_server: str) -> None:
        """Refuse keys the store may never serve (S3, S5), before any storage work."""
        if self.scope.kind is not ScopeKind.CONTROL_ROOM:
            raise ScopeDenied(ReasonCode.SCOPE_KIND_RESERVED, scope_id=self.opaque_id)
        if self.principal.origin is not OriginKind.NATIVE_LOCAL:
            raise ScopeDenied(ReasonCode.FEDERATION_DENIED, scope_id=self.opaque_id)
        if self.principal.server_name != local_server:
            raise ScopeDenied(ReasonCode.REMOTE_SERVER_DENIED, scope_id=self.opaque_id)
        room_server = server_name_of(self.scope.room_id or "")
        if room_server is not None and room_server != local_server:
            raise ScopeDenied(ReasonCode.REMOTE_SERVER_DENIED, scope_id=self.opaque_id)

    def __repr__(self) -> str:
        return f"ScopeKey(id={self.opaque_id})"

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, str]]:
        yield "id", self.opaque_id


def _digest(domain: str, *parts: str) -> str:
    h = hashlib.sha256(domain.encode())
    for part in parts:
        raw = part.encode()
        h.update(len(raw).to_bytes(4, "big"))
        h.update(raw)
    return h.hexdigest()[:32]
