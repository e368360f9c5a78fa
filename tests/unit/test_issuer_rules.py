"""Principals of any issuer and the issuers' rules (D1, D2; issue 47): pure, no database.

A principal is (issuer kind, issuer, subject).  ``Principal(mxid=..., origin=...)`` stays the
Matrix form; ``Principal.oidc(iss, sub)`` is an OIDC one.  ``MatrixIssuer`` keeps ADR 0023's
rules exactly; ``OidcIssuer`` admits its ``iss`` and a ``sub`` matching its pattern, in the one
scope ``principal`` with the audience ``principal``.  Every invalid input carries ``SENT``, which
no error may echo.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from kagent_governed_memory import (
    AgentIdentity,
    InvalidIdentity,
    InvalidInput,
    Issuer,
    MatrixIssuer,
    MemoryScope,
    OidcIssuer,
    OriginKind,
    Principal,
    ReasonCode,
    ScopeDenied,
    ScopeKey,
    ScopeKind,
)
from kagent_governed_memory.scope import ScopeAssertion

SENT = "kx9q4tz"
ISS = "https://idp.example.org/realms/kagent"
LOCAL = "example.org"
AGENT = AgentIdentity(namespace="kagent", name="my-agent")


def oidc_key(subject: str = "user-1", issuer: str = ISS) -> ScopeKey:
    return ScopeKey(principal=Principal.oidc(issuer, subject), agent=AGENT,
                    scope=MemoryScope.principal())


def matrix_key(mxid: str = "@alice:example.org", room: str = "!r:example.org",
               origin: OriginKind = OriginKind.NATIVE_LOCAL) -> ScopeKey:
    return ScopeKey(principal=Principal(mxid=mxid, origin=origin), agent=AGENT,
                    scope=MemoryScope.control_room(room))


def _digest(domain: str, *parts: str) -> str:
    h = hashlib.sha256(domain.encode())
    for part in parts:
        raw = part.encode()
        h.update(len(raw).to_bytes(4, "big") + raw)
    return h.hexdigest()[:32]


# -- the principal ------------------------------------------------------------------------------


def test_the_matrix_form_is_kind_homeserver_and_mxid() -> None:
    p = Principal(mxid="@alice:example.org:8448", origin="native_local")
    assert (p.issuer_kind, p.issuer, p.subject) == ("matrix", "example.org:8448",
                                                    "@alice:example.org:8448")
    assert p.mxid == p.subject and p.server_name == "example.org:8448"
    assert p == Principal.matrix("@alice:example.org:8448")
    assert p == Principal(issuer_kind="matrix", issuer="example.org:8448",
                          subject="@alice:example.org:8448", origin=OriginKind.NATIVE_LOCAL)
    assert p == Principal.model_validate({"mxid": "@alice:example.org:8448",
                                          "origin": "native_local"})
    # the ids every Matrix deployment logged before issue 47 are unchanged
    assert p.opaque_id == "pr_" + _digest("principal", p.mxid, "native_local")
    key = matrix_key()
    assert key.opaque_id == "sk_" + _digest("scope", "@alice:example.org", "native_local",
                                            "kagent", "my-agent", "control_room", "!r:example.org")


def test_an_oidc_principal_is_kind_issuer_and_sub() -> None:
    p = Principal.oidc(ISS, "248289761001")
    assert (p.issuer_kind, p.issuer, p.subject, p.origin) == ("oidc", ISS, "248289761001", None)
    assert p == Principal(issuer_kind="oidc", issuer=ISS, subject="248289761001")
    assert p != Principal.oidc("https://other.example.org", "248289761001")
    assert re.fullmatch(r"pr_[0-9a-f]{32}", p.opaque_id)
    assert p.opaque_id != Principal.oidc("https://other.example.org", "248289761001").opaque_id
    for text in (repr(p), str(p)):
        assert "248289761001" not in text and "idp.example.org" not in text
    with pytest.raises(InvalidIdentity):
        p.mxid  # noqa: B018 - an OIDC principal has no MXID
    with pytest.raises(InvalidIdentity):
        p.server_name  # noqa: B018


@pytest.mark.parametrize("data", [
    pytest.param({"issuer_kind": "OIDC", "issuer": ISS, "subject": SENT}, id="kind-case"),
    pytest.param({"issuer_kind": "", "issuer": ISS, "subject": SENT}, id="kind-empty"),
    pytest.param({"issuer_kind": "oidc", "issuer": "", "subject": SENT}, id="issuer-empty"),
    pytest.param({"issuer_kind": "oidc", "issuer": ISS + " " + SENT, "subject": "u"},
                 id="issuer-space"),
    pytest.param({"issuer_kind": "oidc", "issuer": "x" * 256 + SENT, "subject": "u"},
                 id="issuer-long"),
    pytest.param({"issuer_kind": "oidc", "issuer": ISS, "subject": ""}, id="subject-empty"),
    pytest.param({"issuer_kind": "oidc", "issuer": ISS, "subject": SENT + "\n"},
                 id="subject-newline"),
    pytest.param({"issuer_kind": "oidc", "issuer": ISS, "subject": SENT * 40},
                 id="subject-long"),
    pytest.param({"issuer_kind": "oidc", "issuer": ISS, "subject": SENT + "\ud800"},
                 id="subject-surrogate"),
    pytest.param({"issuer_kind": "oidc", "issuer": ISS, "subject": SENT,
                  "origin": "native_local"}, id="origin-of-oidc"),
    pytest.param({"issuer_kind": "matrix", "issuer": "other.example",
                  "subject": f"@{SENT}:example.org", "origin": "native_local"},
                 id="matrix-issuer-not-the-mxids-server"),
    pytest.param({"issuer_kind": "matrix", "issuer": LOCAL, "subject": SENT,
                  "origin": "native_local"}, id="matrix-subject-not-an-mxid"),
    pytest.param({"mxid": f"@{SENT}:example.org", "origin": "native_local",
                  "issuer_kind": "oidc"}, id="both-forms"),
])
def test_an_invalid_principal_is_refused_content_free(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidIdentity) as err:
        Principal.model_validate(data)
    assert err.value.__context__ is None and err.value.__cause__ is None
    for text in (str(err.value), repr(err.value), repr(err.value.args)):
        assert SENT not in text


def test_the_principal_scope_has_no_room() -> None:
    scope = MemoryScope.principal()
    assert scope.kind is ScopeKind.PRINCIPAL and scope.room_id is None and scope.ref == ""
    assert MemoryScope.control_room("!r:example.org").ref == "!r:example.org"
    with pytest.raises(InvalidIdentity):
        MemoryScope(kind="principal", room_id="!r:example.org")


def test_a_scope_assertion_names_a_matrix_principal_only() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(microsecond=0)
    base = {"agent": AGENT, "room_id": "!r:example.org", "audience": [LOCAL],
            "issued_at": now, "expires_at": now + timedelta(seconds=30),
            "issuer": "bridge", "context_id": "ctx-1", "jti": "a" * 22}
    ScopeAssertion(principal=Principal.matrix("@alice:example.org"), **base)
    with pytest.raises(InvalidIdentity):
        ScopeAssertion(principal=Principal.oidc(ISS, "u"), **base)


# -- the issuers' rules -------------------------------------------------------------------------


def test_both_issuers_are_issuers() -> None:
    assert isinstance(MatrixIssuer(LOCAL), Issuer)
    assert isinstance(OidcIssuer(ISS), Issuer)
    assert not isinstance(object(), Issuer)


def test_the_oidc_issuer_serves_its_subjects_in_the_principal_scope() -> None:
    issuer = OidcIssuer(ISS)
    key = oidc_key()
    key.require_servable(issuer)
    assert issuer.run_user_id(key.principal) == "user-1"
    assert issuer.audience == ("principal",) and issuer.scope_kind == "principal"
    reg = issuer.registration()
    assert (reg.issuer_kind, reg.issuer, reg.scope_kind, reg.subject_pattern,
            reg.scope_ref_pattern, reg.audience) == ("oidc", ISS, "principal", "^.{1,255}$",
                                                     None, ("principal",))
    assert reg.params() == ["oidc", ISS, "principal", "^.{1,255}$", None, ["principal"]]


@pytest.mark.parametrize(("key", "issuer", "reason"), [
    pytest.param(oidc_key(issuer="https://other.example.org"), OidcIssuer(ISS),
                 ReasonCode.ISSUER_NOT_REGISTERED, id="another-iss"),
    pytest.param(oidc_key(), MatrixIssuer(LOCAL), ReasonCode.ISSUER_NOT_REGISTERED,
                 id="oidc-key-matrix-issuer"),
    pytest.param(matrix_key(), OidcIssuer(ISS), ReasonCode.ISSUER_NOT_REGISTERED,
                 id="matrix-key-oidc-issuer"),
    pytest.param(oidc_key("not-a-uuid"), OidcIssuer(ISS, subject_pattern="^[0-9a-f-]{36}$"),
                 ReasonCode.SUBJECT_DENIED, id="subject-pattern"),
    pytest.param(ScopeKey(principal=Principal.oidc(ISS, "u"), agent=AGENT,
                          scope=MemoryScope.control_room("!r:example.org")),
                 OidcIssuer(ISS), ReasonCode.SCOPE_KIND_RESERVED, id="oidc-in-a-room"),
    pytest.param(ScopeKey(principal=Principal.matrix("@alice:example.org"), agent=AGENT,
                          scope=MemoryScope.principal()),
                 MatrixIssuer(LOCAL), ReasonCode.SCOPE_KIND_RESERVED, id="matrix-no-room"),
    pytest.param(matrix_key(origin=OriginKind.OAUTH_CLIENT), MatrixIssuer(LOCAL),
                 ReasonCode.FEDERATION_DENIED, id="matrix-oauth-client"),
    pytest.param(matrix_key("@alice:other.example"), MatrixIssuer(LOCAL),
                 ReasonCode.REMOTE_SERVER_DENIED, id="matrix-remote"),
    pytest.param(matrix_key(room="!r:other.example"), MatrixIssuer(LOCAL),
                 ReasonCode.REMOTE_SERVER_DENIED, id="matrix-remote-room"),
])
def test_each_issuer_refuses_what_it_does_not_serve(key: ScopeKey, issuer: Issuer,
                                                    reason: ReasonCode) -> None:
    with pytest.raises(ScopeDenied) as err:
        key.require_servable(issuer)
    assert err.value.reason is reason
    assert dict(err.value.ids) == {"scope_id": key.opaque_id}


def test_a_local_server_string_is_the_matrix_issuer() -> None:
    matrix_key().require_servable(LOCAL)
    with pytest.raises(ScopeDenied) as err:
        matrix_key("@alice:other.example").require_servable(LOCAL)
    assert err.value.reason is ReasonCode.REMOTE_SERVER_DENIED


@pytest.mark.parametrize("server", ["example.org", "matrix.example.org:8448", "[::1]:8448",
                                    "10.0.0.1"])
def test_the_matrix_registration_matches_what_the_issuer_admits(server: str) -> None:
    """The patterns registered for the database admit exactly the MXIDs and rooms of
    ``server`` (checked here with Python's regex, whose syntax agrees for these patterns)."""
    reg = MatrixIssuer(server).registration()
    assert reg.audience == (server,) and reg.scope_kind == "control_room"

    def admits(pattern: str, value: str) -> bool:
        return re.fullmatch(f"^(?:{pattern})$", value, re.DOTALL) is not None

    assert admits(reg.subject_pattern, f"@alice:{server}")
    assert admits(reg.subject_pattern, f"@a.b_c=d/e:{server}")
    assert not admits(reg.subject_pattern, f"@alice:{server}x")
    assert not admits(reg.subject_pattern, "@alice:evil.example")
    assert not admits(reg.subject_pattern, f"@al:ice:{server}")
    assert not admits(reg.subject_pattern, f"@:{server}")
    assert reg.scope_ref_pattern is not None
    assert admits(reg.scope_ref_pattern, f"!room:{server}")
    assert admits(reg.scope_ref_pattern, "!v12roomid")
    assert not admits(reg.scope_ref_pattern, "!room:evil.example")
    assert not admits(reg.scope_ref_pattern, "")
    if "." in server:  # an unescaped '.' would admit any character there
        assert not admits(reg.subject_pattern, "@alice:" + server.replace(".", "x", 1))


@pytest.mark.parametrize("issuer", [
    "http://idp.example.org", "https://idp.example.org?x=1", "https://idp.example.org#f",
    "https://user@idp.example.org", "https://", "idp.example.org", "https://idp.exämple.org",
    "https://idp.example.org/" + "x" * 250, "", "ftp://idp.example.org",
])
def test_an_oidc_issuer_is_an_https_url(issuer: str) -> None:
    with pytest.raises(InvalidInput) as err:
        OidcIssuer(issuer)
    assert err.value.ids.get("field") == "issuer"


def test_an_oidc_issuer_on_a_loopback_host_may_use_http() -> None:
    for iss in ("http://localhost:8080/realms/dev", "http://127.0.0.1:5556"):
        assert OidcIssuer(iss).issuer == iss


@pytest.mark.parametrize("pattern", ["no-anchors", "^(unclosed$", "", "^x", "x$"])
def test_an_oidc_subject_pattern_is_anchored_and_compiles(pattern: str) -> None:
    with pytest.raises(InvalidInput) as err:
        OidcIssuer(ISS, subject_pattern=pattern)
    assert err.value.ids.get("field") == "subject_pattern"
