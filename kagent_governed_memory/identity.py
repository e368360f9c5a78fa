"""Typed identity and scope: who (principal), which agent, where (scope) — S1–S5.

A principal is ``(issuer_kind, issuer, subject)``: the kind of identity system, the system
itself and the principal's name there.  Each issuer's rules are an ``Issuer`` (``MatrixIssuer``:
ADR 0023's native local Matrix users in single-subject control rooms; ``OidcIssuer``: an OIDC
provider's ``sub`` with one ``principal`` scope per agent); the database enforces the same rules
from its issuer registry (``memory_register_issuer``) when consent is granted.

The authorization key is the exact triple (principal, agent, scope); nothing here is parsed back
out of kagent's ``app_name`` or ADK's ``user_id`` strings, and no validation error echoes its
input.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload, runtime_checkable
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, model_validator

from .errors import InvalidIdentity, InvalidInput, ReasonCode, ScopeDenied

__all__ = [
    "MATRIX_KIND",
    "OIDC_KIND",
    "AgentIdentity",
    "Issuer",
    "IssuerRegistration",
    "MatrixIssuer",
    "MemoryScope",
    "OidcIssuer",
    "OriginKind",
    "OriginName",
    "Principal",
    "ScopeKey",
    "ScopeKind",
    "ScopeKindName",
    "server_name_of",
]

MXID_MAX_BYTES = 255
SUBJECT_MAX_BYTES = 255
ISSUER_MAX_BYTES = 255
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# an issuer or a subject: no whitespace or control character (ASCII controls, DEL, Latin-1 controls)
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")
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

MATRIX_KIND = "matrix"
"""The issuer kind of Matrix principals: the issuer is a homeserver's server name, the subject a
complete MXID of it."""

OIDC_KIND = "oidc"
"""The issuer kind of OIDC principals: the issuer is the provider's ``iss`` URL, the subject its
``sub``."""


def _valid_mxid(mxid: object) -> bool:
    if not isinstance(mxid, str) or not mxid.isascii() or len(mxid) > MXID_MAX_BYTES:
        return False
    if len(mxid) < 4 or mxid[0] != "@" or ":" not in mxid:
        return False
    localpart, _, server = mxid[1:].partition(":")
    return bool(_LOCALPART.fullmatch(localpart)) and _valid_server_name(server)


def _bounded_name(value: object, max_bytes: int) -> bool:
    """An issuer or subject: 1..``max_bytes`` UTF-8 bytes, no whitespace or control character."""
    if not isinstance(value, str) or not value or _CONTROL.search(value):
        return False
    try:
        return len(value.encode("utf-8")) <= max_bytes
    except UnicodeEncodeError:  # a lone surrogate; the error object would hold the text
        return False


class Principal(BaseModel):
    """Who: ``(issuer_kind, issuer, subject)`` (S1), plus, for a Matrix principal, its origin.

    Two forms construct one:

    * ``Principal(mxid=..., origin=...)`` (or ``Principal.matrix(...)``): a complete Matrix user
      ID and how it reached us; the issuer is the MXID's server name.  The same MXID with two
      origins is two principals.
    * ``Principal(issuer_kind=..., issuer=..., subject=...)`` (or ``Principal.oidc(...)``): any
      other issuer; no origin.

    Validation here is each form's grammar; whether a deployment serves the principal is its
    ``Issuer``'s rule (``ScopeKey.require_servable``) and the database's."""

    model_config = _FROZEN

    issuer_kind: str
    issuer: str
    subject: str
    origin: OriginKind | None = None

    if TYPE_CHECKING:  # the validator below also takes the enum's value as a string
        @overload
        def __init__(self, *, mxid: str, origin: OriginKind | OriginName) -> None: ...

        @overload
        def __init__(self, *, issuer_kind: str, issuer: str, subject: str,
                     origin: OriginKind | OriginName | None = None) -> None: ...

        def __init__(self, **data: Any) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        data = _fields(data, "principal", {"mxid", "origin", "issuer_kind", "issuer", "subject"})
        if "mxid" in data:  # the Matrix form
            if set(data) - {"mxid", "origin"}:
                raise _bad("principal")
            mxid = data.get("mxid")
            if not _valid_mxid(mxid):
                raise _bad("mxid")
            assert isinstance(mxid, str)
            data = {"issuer_kind": MATRIX_KIND, "issuer": mxid.split(":", 1)[1],
                    "subject": mxid, "origin": data.get("origin")}
        kind, issuer, subject = data.get("issuer_kind"), data.get("issuer"), data.get("subject")
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise _bad("issuer_kind")
        if kind == MATRIX_KIND:
            if not _valid_mxid(subject):
                raise _bad("mxid")
            assert isinstance(subject, str)
            if issuer != subject.split(":", 1)[1]:
                raise _bad("issuer")
            origin = _enum_member(OriginKind, data.get("origin"))
            if origin is None:
                raise _bad("origin")
            return {"issuer_kind": kind, "issuer": issuer, "subject": subject, "origin": origin}
        if not _bounded_name(issuer, ISSUER_MAX_BYTES):
            raise _bad("issuer")
        if not _bounded_name(subject, SUBJECT_MAX_BYTES):
            raise _bad("subject")
        if data.get("origin") is not None:  # an origin is a rule of the Matrix issuer only
            raise _bad("origin")
        return {"issuer_kind": kind, "issuer": issuer, "subject": subject, "origin": None}

    @classmethod
    def matrix(cls, mxid: str, origin: OriginKind | OriginName = OriginKind.NATIVE_LOCAL
               ) -> Principal:
        """A Matrix principal: a complete MXID and its origin (default: a native local user)."""
        return cls(mxid=mxid, origin=origin)

    @classmethod
    def oidc(cls, issuer: str, subject: str) -> Principal:
        """An OIDC principal: the provider's ``iss`` and the user's ``sub``."""
        return cls(issuer_kind=OIDC_KIND, issuer=issuer, subject=subject)

    @property
    def is_matrix(self) -> bool:
        return self.issuer_kind == MATRIX_KIND

    @property
    def mxid(self) -> str:
        """The complete Matrix user ID (a Matrix principal only; ``InvalidIdentity`` else)."""
        if not self.is_matrix:
            raise _bad("mxid")
        return self.subject

    @property
    def server_name(self) -> str:
        """The homeserver of a Matrix principal (``InvalidIdentity`` for another kind)."""
        return self.mxid.split(":", 1)[1]

    @property
    def origin_name(self) -> str:
        """The origin's value, or ``"none"`` for a principal of an issuer without origins."""
        return self.origin.value if self.origin is not None else "none"

    @property
    def opaque_id(self) -> str:
        """Stable pseudonymous id for logs and reports (never the subject itself)."""
        if self.is_matrix:
            return "pr_" + _digest("principal", self.subject, self.origin_name)
        return "pr_" + _digest("principal", "issuer:" + self.issuer_kind, self.issuer,
                               self.subject)

    def __repr__(self) -> str:
        if self.is_matrix:
            return f"Principal(id={self.opaque_id}, origin={self.origin_name})"
        return f"Principal(id={self.opaque_id}, kind={self.issuer_kind})"

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, str]]:  # rich, pydantic printers: no subject
        yield "id", self.opaque_id
        if self.is_matrix:
            yield "origin", self.origin_name
        else:
            yield "kind", self.issuer_kind


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
    CONTROL_ROOM = "control_room"  # a Matrix principal's single-subject control room
    CROSS_ROOM = "cross_room"  # reserved (ADR 0023 §5): constructible, refused by the store
    PRINCIPAL = "principal"  # an OIDC principal's memory with one agent (no reference)


ScopeKindName = Literal["control_room", "cross_room", "principal"]
"""The ``ScopeKind`` values as strings: ``MemoryScope(kind=...)`` takes either."""


class MemoryScope(BaseModel):
    """Where memory may be used (S3): a Matrix principal's single-subject control room (its
    room id is the scope's reference), or an OIDC principal's ``principal`` scope (no room, the
    reference is ``""``).  Which kind a principal gets is its issuer's rule."""

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
        elif kind is ScopeKind.PRINCIPAL:
            if room is not None:
                raise _bad("room_id")
        elif room is not None and (not isinstance(room, str) or not _valid_room_id(room)):
            raise _bad("room_id")
        return {**data, "kind": kind}

    @classmethod
    def control_room(cls, room_id: str) -> MemoryScope:
        return cls(kind=ScopeKind.CONTROL_ROOM, room_id=room_id)

    @classmethod
    def principal(cls) -> MemoryScope:
        """The scope of an OIDC principal: its memory with one agent."""
        return cls(kind=ScopeKind.PRINCIPAL)

    @property
    def ref(self) -> str:
        """The scope's reference in the database key: the room id, or ``""`` for none."""
        return self.room_id or ""

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
        p = self.principal
        who = ((p.subject, p.origin_name) if p.is_matrix
               else ("issuer:" + p.issuer_kind, p.issuer, p.subject))
        return "sk_" + _digest(
            "scope",
            *who,
            self.agent.namespace,
            self.agent.name,
            self.scope.kind.value,
            self.scope.ref,
        )

    def require_servable(self, issuer: Issuer | str) -> None:
        """Refuse keys the store may never serve (S3, S5), before any storage work: the scope
        kind must be ``issuer``'s, then its principal and scope rules apply.  A ``str`` is the
        local homeserver: the ``MatrixIssuer`` of that server."""
        rules = MatrixIssuer(issuer) if isinstance(issuer, str) else issuer
        if self.principal.issuer_kind != rules.issuer_kind:
            raise ScopeDenied(ReasonCode.ISSUER_NOT_REGISTERED, scope_id=self.opaque_id)
        if self.scope.kind.value != rules.scope_kind:
            raise ScopeDenied(ReasonCode.SCOPE_KIND_RESERVED, scope_id=self.opaque_id)
        rules.check_principal(self.principal, scope_id=self.opaque_id)
        rules.check_scope(self.scope, scope_id=self.opaque_id)

    def __repr__(self) -> str:
        return f"ScopeKey(id={self.opaque_id})"

    __str__ = __repr__

    def __repr_args__(self) -> Iterator[tuple[str, str]]:
        yield "id", self.opaque_id


# -- issuers ----------------------------------------------------------------------------------

PRINCIPAL_AUDIENCE = "principal"
"""The output audience of an OIDC principal's consent: its own authenticated sessions only."""


@dataclass(frozen=True)
class IssuerRegistration:
    """An issuer as the database's registry holds it (``memory_register_issuer``): the scope
    kind its principals get, the anchored patterns a subject and a scope reference must match
    (``None``: the reference must be ``""``) and the one output audience a consent may name."""

    issuer_kind: str
    issuer: str
    scope_kind: str
    subject_pattern: str
    scope_ref_pattern: str | None
    audience: tuple[str, ...]

    def params(self) -> list[Any]:
        """The arguments of ``memory_register_issuer``, in order."""
        return [self.issuer_kind, self.issuer, self.scope_kind, self.subject_pattern,
                self.scope_ref_pattern, sorted(set(self.audience))]


@runtime_checkable
class Issuer(Protocol):
    """The rules of one identity system whose principals may consent.

    ``issuer_kind`` and ``issuer`` name it (a principal of another one is refused with
    ``issuer_not_registered``); ``scope_kind`` is the one scope kind its principals get;
    ``audience`` the one output audience their consents name; ``check_principal`` and
    ``check_scope`` raise ``ScopeDenied`` for a principal or scope it does not serve;
    ``run_user_id`` is the user id an ADK/A2A run of the principal carries; ``registration`` is
    the row ``memory_register_issuer`` writes, so the database enforces the same rules."""

    @property
    def issuer_kind(self) -> str: ...

    @property
    def issuer(self) -> str: ...

    @property
    def scope_kind(self) -> str: ...

    @property
    def audience(self) -> tuple[str, ...]: ...

    def check_principal(self, principal: Principal, *, scope_id: str = "") -> None: ...

    def check_scope(self, scope: MemoryScope, *, scope_id: str = "") -> None: ...

    def run_user_id(self, principal: Principal) -> str: ...

    def registration(self) -> IssuerRegistration: ...


def _denied(reason: ReasonCode, scope_id: str) -> ScopeDenied:
    return ScopeDenied(reason, **({"scope_id": scope_id} if scope_id else {}))


def _are_escape(text: str) -> str:
    """``text`` as a literal in a PostgreSQL regular expression (a server name's specials)."""
    return re.sub(r"([.\[\]])", r"\\\1", text)


class MatrixIssuer:
    """ADR 0023's Matrix rules, exactly: the principal is a complete MXID of the local
    homeserver ``server`` with origin ``native_local`` (bridged, federated, OAuth-client and
    Fediverse principals are refused, §3/§30/§31), the scope is a single-subject control room of
    that server (or a v12 room id), the audience is ``[server]``, and the run's user id is the
    MXID.  The origin is checked here (the bridge signs it); the database checks the rest again
    from the issuer row ``memory_configure(server)`` registers."""

    issuer_kind = MATRIX_KIND
    scope_kind = ScopeKind.CONTROL_ROOM.value

    def __init__(self, server: str) -> None:
        if not isinstance(server, str) or not server.isascii() or not _valid_server_name(server):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="local_server")
        self._server = server

    @property
    def issuer(self) -> str:
        return self._server

    @property
    def audience(self) -> tuple[str, ...]:
        return (self._server,)

    def check_principal(self, principal: Principal, *, scope_id: str = "") -> None:
        if principal.issuer_kind != MATRIX_KIND:
            raise _denied(ReasonCode.ISSUER_NOT_REGISTERED, scope_id)
        if principal.origin is not OriginKind.NATIVE_LOCAL:
            raise _denied(ReasonCode.FEDERATION_DENIED, scope_id)
        if principal.server_name != self._server:
            raise _denied(ReasonCode.REMOTE_SERVER_DENIED, scope_id)

    def check_scope(self, scope: MemoryScope, *, scope_id: str = "") -> None:
        if scope.kind is not ScopeKind.CONTROL_ROOM:
            raise _denied(ReasonCode.SCOPE_KIND_RESERVED, scope_id)
        room_server = server_name_of(scope.room_id or "")
        if room_server is not None and room_server != self._server:
            raise _denied(ReasonCode.REMOTE_SERVER_DENIED, scope_id)

    def run_user_id(self, principal: Principal) -> str:
        return principal.mxid

    def registration(self) -> IssuerRegistration:
        server = _are_escape(self._server)
        return IssuerRegistration(MATRIX_KIND, self._server, self.scope_kind,
                                  f"^@[!-9;-~]+:{server}$", f"^![!-9;-~]+(:{server})?$",
                                  (self._server,))

    def __repr__(self) -> str:
        return f"MatrixIssuer({self._server!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MatrixIssuer) and other._server == self._server

    def __hash__(self) -> int:
        return hash((MATRIX_KIND, self._server))


_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def _valid_issuer_url(issuer: object) -> bool:
    if not _bounded_name(issuer, ISSUER_MAX_BYTES) or not isinstance(issuer, str):
        return False
    if not issuer.isascii():
        return False
    try:
        parts = urlsplit(issuer)
        host = parts.hostname
    except ValueError:
        return False
    if not host or parts.query or parts.fragment or parts.username or parts.password:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK)


class OidcIssuer:
    """An OIDC provider (D4): the principal is the provider's ``iss`` and a ``sub`` matching
    ``subject_pattern`` (anchored; default: 1 to 255 characters); its one scope kind is
    ``principal`` (its memory with one agent, reference ``""``); the output audience is
    ``principal`` (a reply that carries memory reaches only the principal's own authenticated
    sessions); the run's user id is the ``sub``.  ``issuer`` is an ``https`` URL (``http`` only
    on a loopback host, for development) without query or fragment."""

    issuer_kind = OIDC_KIND
    scope_kind = ScopeKind.PRINCIPAL.value
    audience: tuple[str, ...] = (PRINCIPAL_AUDIENCE,)

    def __init__(self, issuer: str, *, subject_pattern: str = "^.{1,255}$") -> None:
        if not _valid_issuer_url(issuer):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="issuer")
        if (not isinstance(subject_pattern, str) or not 2 <= len(subject_pattern) <= 1024
                or not subject_pattern.startswith("^") or not subject_pattern.endswith("$")):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="subject_pattern")
        try:
            self._subject = re.compile(f"^(?:{subject_pattern})$", re.DOTALL)
        except re.error:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="subject_pattern") from None
        self._issuer = issuer
        self._pattern = subject_pattern

    @property
    def issuer(self) -> str:
        return self._issuer

    def check_principal(self, principal: Principal, *, scope_id: str = "") -> None:
        if principal.issuer_kind != OIDC_KIND or principal.issuer != self._issuer:
            raise _denied(ReasonCode.ISSUER_NOT_REGISTERED, scope_id)
        if not self._subject.fullmatch(principal.subject):
            raise _denied(ReasonCode.SUBJECT_DENIED, scope_id)

    def check_scope(self, scope: MemoryScope, *, scope_id: str = "") -> None:
        if scope.kind is not ScopeKind.PRINCIPAL:
            raise _denied(ReasonCode.SCOPE_KIND_RESERVED, scope_id)
        if scope.ref != "":
            raise _denied(ReasonCode.SCOPE_REF_DENIED, scope_id)

    def run_user_id(self, principal: Principal) -> str:
        return principal.subject

    def registration(self) -> IssuerRegistration:
        return IssuerRegistration(OIDC_KIND, self._issuer, self.scope_kind, self._pattern, None,
                                  self.audience)

    def __repr__(self) -> str:
        return f"OidcIssuer({self._issuer!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, OidcIssuer) and other._issuer == self._issuer
                and other._pattern == self._pattern)

    def __hash__(self) -> int:
        return hash((OIDC_KIND, self._issuer, self._pattern))


def issuer_key(principal: Principal) -> tuple[str, str]:
    """The registry key ``(issuer_kind, issuer)`` of a principal's issuer."""
    return principal.issuer_kind, principal.issuer


def _digest(domain: str, *parts: str) -> str:
    h = hashlib.sha256(domain.encode())
    for part in parts:
        raw = part.encode()
        h.update(len(raw).to_bytes(4, "big"))
        h.update(raw)
    return h.hexdigest()[:32]
