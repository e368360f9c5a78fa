"""Identity, scope, policy, error invariants (SPEC S1-S5; CONTRACT "Identity and scope", Errors).

Pure, synchronous tests: no database.  Every invalid input carries the sentinel ``SENT`` (or a
distinctive number) so we can prove that no error text, repr or args echoes it.
"""

from __future__ import annotations

import copy
import pickle
import re
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from kagent_governed_memory import (
    PROTOTYPE_POLICY,
    AgentIdentity,
    GovernanceError,
    InvalidIdentity,
    InvalidInput,
    MemoryPolicy,
    MemoryScope,
    OriginKind,
    Principal,
    ReasonCode,
    ScopeDenied,
    ScopeKey,
    ScopeKind,
)

SENT = "kx9q4tz"  # distinctive token planted in every invalid input
NUM = 7490218  # distinctive non-str input
LOCAL = "example.org"
MXID = "@alice:example.org"
ROOM = "!control-a:example.org"
NATIVE = OriginKind.NATIVE_LOCAL


def _principal(mxid: str = MXID, origin: OriginKind | str = NATIVE) -> Principal:
    return Principal(mxid=mxid, origin=origin)


def _agent(namespace: str = "kagent", name: str = "my-agent") -> AgentIdentity:
    return AgentIdentity(namespace=namespace, name=name)


def _key(
    mxid: str = MXID,
    origin: OriginKind = NATIVE,
    namespace: str = "kagent",
    name: str = "my-agent",
    room: str | None = ROOM,
    kind: ScopeKind = ScopeKind.CONTROL_ROOM,
) -> ScopeKey:
    return ScopeKey(
        principal=_principal(mxid, origin),
        agent=_agent(namespace, name),
        scope=MemoryScope(kind=kind, room_id=room),
    )


def _texts(err: BaseException) -> list[str]:
    return [str(err), repr(err), repr(err.args), *(str(a) for a in err.args)]


def assert_content_free(err: BaseException, *forbidden: str) -> None:
    """The error is a content-free ``InvalidIdentity`` with no input-bearing exception chained."""
    assert isinstance(err, InvalidIdentity)
    assert not isinstance(err, ValidationError)
    assert not isinstance(err, ValueError)
    assert err.reason == ReasonCode.INVALID_IDENTITY
    assert err.__context__ is None
    assert err.__cause__ is None
    for text in _texts(err) + [repr(dict(err.ids))]:
        for needle in (SENT, *forbidden):
            assert needle not in text, (needle, text)


# --------------------------------------------------------------------------------------------
# S1 Principal
# --------------------------------------------------------------------------------------------

VALID_MXIDS = [
    "@alice:example.org",
    "@a:example.org:8448",
    "@a:[::1]:8448",
    "@a:[::1]",
    "@a:[2001:db8::7]:443",
    "@a:192.168.0.1",
    "@a:192.168.0.1:8448",
    "@Alice.B=x/y+z:example.org",
    "@_bridge-bot.1:matrix.example.org",
    "@a:b",
    "@" + "a" * (255 - len("@:example.org")) + ":example.org",  # exactly 255 bytes
]


@pytest.mark.parametrize("mxid", VALID_MXIDS)
@pytest.mark.parametrize("origin", list(OriginKind))
def test_s1_valid_mxids_are_accepted_verbatim(mxid: str, origin: OriginKind) -> None:
    """S1: every grammatical MXID is accepted and stored exactly, with its origin kind."""
    p = Principal(mxid=mxid, origin=origin)
    assert p.mxid == mxid
    assert p.origin is origin
    assert p.server_name == mxid.split(":", 1)[1]


def test_s1_origin_accepts_enum_value_string() -> None:
    """S1: the origin may be given as the enum's string value; it is normalised to the enum."""
    p = Principal(mxid=MXID, origin="external_appservice")
    assert p.origin is OriginKind.EXTERNAL_APPSERVICE


LONG = "@" + SENT + "a" * (256 - len("@:example.org") - len(SENT)) + ":example.org"
assert len(LONG.encode()) == 256

INVALID_MXIDS: list[Any] = [
    pytest.param(SENT, id="bare-localpart"),
    pytest.param("@" + SENT, id="no-server"),
    pytest.param("@" + SENT + ":", id="empty-server"),
    pytest.param("@:" + SENT + ".org", id="empty-localpart"),
    pytest.param(SENT + ":example.org", id="no-sigil"),
    pytest.param("!" + SENT + ":example.org", id="room-sigil"),
    pytest.param("@", id="only-sigil"),
    pytest.param("", id="empty"),
    pytest.param("@kx9 q4tz:example.org", id="space-in-localpart"),
    pytest.param("@" + SENT + ":exa mple.org", id="space-in-server"),
    pytest.param(" @" + SENT + ":example.org", id="leading-space"),
    pytest.param("@" + SENT + ":example.org ", id="trailing-space"),
    pytest.param("\t@" + SENT + ":example.org", id="leading-tab"),
    pytest.param("\n@" + SENT + ":example.org", id="leading-newline"),
    pytest.param("@" + SENT + ":example.org\n", id="trailing-newline"),
    pytest.param("@" + SENT + "\n:example.org", id="newline-end-of-localpart"),
    pytest.param("@" + SENT + ":example.org:8448\n", id="newline-after-port"),
    pytest.param("@" + SENT + "\x00:example.org", id="nul"),
    pytest.param("@" + SENT + ":example.org\x07", id="bel"),
    pytest.param("@" + SENT + "\x7f:example.org", id="del"),
    pytest.param("@" + SENT + "\r:example.org", id="cr"),
    pytest.param("@" + SENT + "é:example.org", id="non-ascii-localpart"),
    pytest.param("@" + SENT + ":exämple.org", id="non-ascii-server"),
    pytest.param("@" + SENT + "\uff1aexample.org", id="fullwidth-colon"),
    pytest.param("@" + SENT + ":example.org:８４４８", id="fullwidth-port"),
    pytest.param(LONG, id="256-bytes"),
    pytest.param("@" + SENT + ":example.org:0", id="port-0"),
    pytest.param("@" + SENT + ":example.org:70000", id="port-70000"),
    pytest.param("@" + SENT + ":example.org:65536", id="port-65536"),
    pytest.param("@" + SENT + ":example.org:abc", id="port-abc"),
    pytest.param("@" + SENT + ":example.org:", id="port-empty"),
    pytest.param("@" + SENT + ":example.org:-1", id="port-negative"),
    pytest.param("@" + SENT + ":example.org:8448:1", id="two-ports"),
    pytest.param("@" + SENT + "::8448", id="port-without-host"),
    pytest.param("@" + SENT + ":.example.org", id="leading-dot"),
    pytest.param("@" + SENT + ":exa..mple.org", id="double-dot"),
    pytest.param("@" + SENT + ":exa_mple.org", id="underscore-in-host"),
    pytest.param("@" + SENT + ":[::1", id="ipv6-unclosed"),
    pytest.param("@" + SENT + ":[::1]8448", id="ipv6-port-without-colon"),
    pytest.param("@" + SENT + ":[::1]:", id="ipv6-empty-port"),
    pytest.param("@" + SENT + ":[::1]:0", id="ipv6-port-0"),
    pytest.param("@" + SENT + ":[not-v6]", id="ipv6-garbage"),
    pytest.param("@" + SENT + ":[]", id="ipv6-empty"),
    pytest.param("@" + SENT + ":::1", id="ipv6-unbracketed"),
    # The spec's IPv6char is DIGIT / A-F / a-f / ":" / "." - no zone index, so no "%".
    pytest.param("@" + SENT + ":[fe80::1%eth0]", id="ipv6-zone-index"),
    pytest.param("@" + SENT + ":[::1%a b]", id="ipv6-zone-with-space"),
    pytest.param("@" + SENT + ":[::1%\n]", id="ipv6-zone-with-newline"),
]


@pytest.mark.parametrize("mxid", INVALID_MXIDS)
def test_s1_invalid_mxid_raises_content_free_invalid_identity(mxid: str) -> None:
    """S1/B6: a malformed MXID is InvalidIdentity whose str/repr/args never echo the input."""
    with pytest.raises(InvalidIdentity) as info:
        Principal(mxid=mxid, origin=NATIVE)
    assert_content_free(info.value, *([mxid.strip()] if mxid.strip() else []))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(("@" + SENT + ":example.org").encode(), id="bytes"),
        pytest.param(bytearray(("@" + SENT + ":example.org").encode()), id="bytearray"),
        pytest.param(NUM, id="int"),
        pytest.param(["@" + SENT + ":example.org"], id="list"),
    ],
)
def test_s1_non_str_mxid_raises_content_free_invalid_identity(value: Any) -> None:
    """S1: only a str is an MXID; the rejection does not echo the value."""
    with pytest.raises(InvalidIdentity) as info:
        Principal(mxid=value, origin=NATIVE)
    assert_content_free(info.value, str(NUM))


@pytest.mark.parametrize(
    "origin",
    [
        pytest.param(SENT, id="unknown-string"),
        pytest.param("NATIVE_LOCAL_" + SENT, id="member-name-ish"),
        pytest.param(NUM, id="int"),
        pytest.param(None, id="none"),
        pytest.param(SENT.encode(), id="bytes"),
    ],
)
def test_s1_unknown_origin_raises_content_free_invalid_identity(origin: Any) -> None:
    """S1: the origin kind is one of the five OriginKind values, nothing else."""
    with pytest.raises(InvalidIdentity) as info:
        Principal(mxid=MXID, origin=origin)
    assert_content_free(info.value, str(NUM), MXID)


def test_s1_missing_origin_raises_invalid_identity() -> None:
    """S1: a principal without an origin kind is incomplete."""
    with pytest.raises(InvalidIdentity) as info:
        Principal(mxid=MXID)  # type: ignore[call-arg]
    assert_content_free(info.value, MXID)


def test_s1_extra_unknown_field_raises_content_free_invalid_identity() -> None:
    """S1: unknown fields are refused, without echoing their name or value."""
    with pytest.raises(InvalidIdentity) as info:
        Principal(mxid=MXID, origin=NATIVE, **{SENT + "_field": SENT + "-value"})
    assert_content_free(info.value, MXID, SENT + "_field", SENT + "-value")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param("@" + SENT + ":example.org", id="str"),
        pytest.param(NUM, id="int"),
        pytest.param(None, id="none"),
        pytest.param(["@" + SENT + ":example.org", "native_local"], id="list"),
    ],
)
def test_s1_model_validate_of_non_mapping_raises_invalid_identity(data: Any) -> None:
    """S1: model_validate of something that is not a mapping is InvalidIdentity, not pydantic's."""
    with pytest.raises(InvalidIdentity) as info:
        Principal.model_validate(data)
    assert_content_free(info.value, str(NUM))


def test_s1_same_mxid_two_origins_are_two_principals() -> None:
    """S1: the same MXID string with two origin kinds is two principals and two scope keys."""
    native = _principal(MXID, OriginKind.NATIVE_LOCAL)
    bridged = _principal(MXID, OriginKind.EXTERNAL_APPSERVICE)
    assert native != bridged
    assert native.opaque_id != bridged.opaque_id
    assert len({native, bridged}) == 2
    k1 = _key(origin=OriginKind.NATIVE_LOCAL)
    k2 = _key(origin=OriginKind.EXTERNAL_APPSERVICE)
    assert k1 != k2
    assert k1.opaque_id != k2.opaque_id


def test_s1_all_origin_kinds_give_distinct_principals() -> None:
    """S1: each of the five origin kinds yields its own principal id."""
    ids = {_principal(MXID, o).opaque_id for o in OriginKind}
    assert len(ids) == len(OriginKind) == 5


def test_s1_principal_is_frozen() -> None:
    """S1/S4: a principal cannot be re-pointed at another MXID after validation."""
    p = _principal()
    with pytest.raises(ValidationError):
        p.mxid = "@mallory:example.org"  # type: ignore[misc]
    assert p.mxid == MXID


# --------------------------------------------------------------------------------------------
# repr / str / opaque ids (S1, S4, B6)
# --------------------------------------------------------------------------------------------

SECRET_MXID = "@" + SENT + "-user:secret-server.example"
SECRET_ROOM = "!" + SENT + "-room:secret-server.example"


def test_s1_principal_repr_and_str_hide_the_mxid() -> None:
    """S1/B6: a principal renders as its opaque id and origin only."""
    p = Principal(mxid=SECRET_MXID, origin=NATIVE)
    for text in (repr(p), str(p), f"{p}", f"{p!r}"):
        assert SENT not in text
        assert "secret-server" not in text
        assert p.opaque_id in text


def test_s4_scope_key_repr_and_str_hide_mxid_and_room() -> None:
    """S4/B6: a scope key renders as its opaque id only."""
    k = ScopeKey(
        principal=Principal(mxid=SECRET_MXID, origin=NATIVE),
        agent=_agent(),
        scope=MemoryScope.control_room(SECRET_ROOM),
    )
    for text in (repr(k), str(k), f"{k}", f"{k!r}"):
        assert SENT not in text
        assert "secret-server" not in text
        assert k.opaque_id in text


def test_s3_memory_scope_repr_and_str_hide_the_room_id() -> None:
    """S3/B6: a scope's text form never carries its room id (repr is overridden, so must str be)."""
    s = MemoryScope.control_room(SECRET_ROOM)
    for text in (repr(s), str(s), f"{s}", f"{s!r}"):
        assert SENT not in text, text
        assert "secret-server" not in text, text


def test_s4_opaque_ids_have_fixed_shape_and_are_stable() -> None:
    """S4/B6: opaque ids are bounded hex tokens, identical for equal values across instances."""
    k1, k2 = _key(), _key()
    assert k1 is not k2
    assert re.fullmatch(r"sk_[0-9a-f]{32}", k1.opaque_id)
    assert re.fullmatch(r"pr_[0-9a-f]{32}", k1.principal.opaque_id)
    assert k1.opaque_id == k2.opaque_id
    assert k1.principal.opaque_id == k2.principal.opaque_id
    # the principal id and the scope id are distinct namespaces
    assert k1.opaque_id[3:] != k1.principal.opaque_id[3:]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"mxid": "@bob:example.org"}, id="mxid"),
        pytest.param({"mxid": "@Alice:example.org"}, id="mxid-case"),
        pytest.param({"origin": OriginKind.OAUTH_CLIENT}, id="origin"),
        pytest.param({"namespace": "kagent-2"}, id="namespace"),
        pytest.param({"name": "my-agent-2"}, id="name"),
        pytest.param({"room": "!control-b:example.org"}, id="room"),
        pytest.param({"room": "!control-a"}, id="room-without-server"),
        pytest.param({"kind": ScopeKind.CROSS_ROOM}, id="kind"),
        pytest.param({"kind": ScopeKind.CROSS_ROOM, "room": None}, id="kind-no-room"),
    ],
)
def test_s4_opaque_id_differs_when_any_component_differs(change: dict[str, Any]) -> None:
    """S4: every component of (principal, agent, scope) feeds the key and its opaque id."""
    base = _key()
    other = _key(**change)
    assert other != base
    assert other.opaque_id != base.opaque_id


def test_s4_opaque_id_is_not_ambiguous_under_concatenation() -> None:
    """S4: components are length-delimited, so shifting text between them changes the id."""
    a = _key(namespace="ab", name="c")
    b = _key(namespace="a", name="bc")
    assert a.opaque_id != b.opaque_id


# --------------------------------------------------------------------------------------------
# S2 AgentIdentity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("kagent", "my-agent"),
        ("a", "b"),
        ("kube-system", "agent.v1.example"),
        ("0ns", "0"),
        ("n" * 63, "x" * 253),
        ("ns", ".".join(["a" * 63] * 3) + ".b"),
    ],
)
def test_s2_valid_agent_identity(namespace: str, name: str) -> None:
    """S2: namespace is a DNS-1123 label, name a DNS-1123 subdomain; both stored exactly."""
    a = AgentIdentity(namespace=namespace, name=name)
    assert (a.namespace, a.name) == (namespace, name)


BAD_NAMESPACES: list[Any] = [
    pytest.param(SENT + "_ns", id="underscore"),
    pytest.param("Kagent" + SENT, id="uppercase"),
    pytest.param("-" + SENT, id="leading-dash"),
    pytest.param(SENT + "-", id="trailing-dash"),
    pytest.param(SENT + ".system", id="dot"),
    pytest.param(SENT + "n" * 57, id="64-chars"),
    pytest.param("", id="empty"),
    pytest.param(SENT + " ns", id="space"),
    pytest.param(SENT + "\n", id="trailing-newline"),
    pytest.param(SENT + "é", id="non-ascii"),
    pytest.param(None, id="none"),
    pytest.param(NUM, id="int"),
    pytest.param(SENT.encode(), id="bytes"),
]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES)
def test_s2_invalid_namespace_raises_content_free_invalid_identity(namespace: Any) -> None:
    """S2: a namespace that is not a DNS-1123 label is InvalidIdentity and is not echoed."""
    with pytest.raises(InvalidIdentity) as info:
        AgentIdentity(namespace=namespace, name="my-agent")
    assert_content_free(info.value, str(NUM))


BAD_NAMES: list[Any] = [
    pytest.param("my_agent", id="underscore-my_agent"),
    pytest.param(SENT + "_agent", id="underscore"),
    pytest.param("My-Agent-" + SENT, id="uppercase"),
    pytest.param("-" + SENT, id="leading-dash"),
    pytest.param(SENT + "-", id="trailing-dash"),
    pytest.param(SENT + "..b", id="empty-label"),
    pytest.param("." + SENT, id="leading-dot"),
    pytest.param(SENT + ".", id="trailing-dot"),
    pytest.param(SENT + "x" * (254 - len(SENT)), id="254-chars"),
    pytest.param("", id="empty"),
    pytest.param(SENT + " agent", id="space"),
    pytest.param(SENT + "\n", id="trailing-newline"),
    pytest.param(SENT + "-\n", id="dash-then-newline"),
    pytest.param(SENT + "é", id="non-ascii"),
    pytest.param(SENT + "/agent", id="slash"),
    pytest.param(None, id="none"),
    pytest.param(NUM, id="int"),
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_s2_invalid_name_raises_content_free_invalid_identity(name: Any) -> None:
    """S2: a name that is not a DNS-1123 subdomain (e.g. ``my_agent``) is InvalidIdentity."""
    with pytest.raises(InvalidIdentity) as info:
        AgentIdentity(namespace="kagent", name=name)
    assert_content_free(info.value, str(NUM))


def test_s2_extra_or_missing_agent_fields_raise_invalid_identity() -> None:
    """S2: only namespace + name; anything else (e.g. an app_name) is refused."""
    with pytest.raises(InvalidIdentity) as info:
        AgentIdentity(namespace="kagent", name="my-agent", app_name=SENT)  # type: ignore[call-arg]
    assert_content_free(info.value)
    with pytest.raises(InvalidIdentity) as info:
        AgentIdentity(namespace="kagent")  # type: ignore[call-arg]
    assert_content_free(info.value)


def test_s2_app_name_is_kagent_form() -> None:
    """S2: app_name is kagent's ``<ns>__NS__<name>`` with ``-`` mapped to ``_``."""
    assert _agent("kagent", "my-agent").app_name == "kagent__NS__my_agent"
    assert _agent("team-a", "my-agent-2").app_name == "team_a__NS__my_agent_2"
    assert _agent("kagent", "agent.v1").app_name == "kagent__NS__agent.v1"


def test_s2_hyphen_variants_are_distinct_agents_and_keys() -> None:
    """S2: ``my-agent`` and ``my-agent-2`` are different agents with different keys."""
    a, b = _agent(name="my-agent"), _agent(name="my-agent-2")
    assert a != b
    assert _key(name="my-agent").opaque_id != _key(name="my-agent-2").opaque_id
    assert a.app_name != b.app_name


def test_s2_agents_with_similar_app_names_keep_distinct_keys() -> None:
    """S2: the key uses the exact (namespace, name), not the lossy app_name."""
    a, b = _agent("team-a", "bot"), _agent("team", "a-bot")
    assert a != b
    assert _key(namespace="team-a", name="bot") != _key(namespace="team", name="a-bot")
    assert (
        _key(namespace="team-a", name="bot").opaque_id
        != _key(namespace="team", name="a-bot").opaque_id
    )


def test_s2_app_name_is_never_parsed_back() -> None:
    """S2: there is no constructor or parser from app_name back to an AgentIdentity."""
    for attr in ("from_app_name", "parse_app_name", "from_app", "parse"):
        assert not callable(getattr(AgentIdentity, attr, None)), attr
    with pytest.raises(InvalidIdentity):
        AgentIdentity.model_validate("kagent__NS__my_agent")
    with pytest.raises(InvalidIdentity):
        AgentIdentity(app_name="kagent__NS__my_agent")  # type: ignore[call-arg]
    # the app_name form itself is not a valid agent name (underscores), so it cannot round-trip
    with pytest.raises(InvalidIdentity):
        AgentIdentity(namespace="kagent", name="kagent__NS__my_agent")


# --------------------------------------------------------------------------------------------
# S3 MemoryScope
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "room",
    [
        "!control-a:example.org",
        "!abc:example.org:8448",
        "!abc:[::1]:8448",
        "!abc:192.168.0.1",
        "!8bY2QRkL9sZ-zXw_QmPtqv5tS3dJ6rN1aBcDeFgHiJk",  # room v12: no server part
        "!x",
    ],
)
def test_s3_control_room_accepts_valid_room_ids(room: str) -> None:
    """S3: a control room is a room id ``!opaque`` (v12) or ``!opaque:server``."""
    s = MemoryScope.control_room(room)
    assert s.kind is ScopeKind.CONTROL_ROOM
    assert s.room_id == room
    assert s == MemoryScope(kind="control_room", room_id=room)


INVALID_ROOMS: list[Any] = [
    pytest.param(SENT + ":example.org", id="missing-bang"),
    pytest.param("#" + SENT + ":example.org", id="alias"),
    pytest.param("@" + SENT + ":example.org", id="user-id"),
    pytest.param("", id="empty"),
    pytest.param("!", id="only-bang"),
    pytest.param("!:" + SENT + ".org", id="empty-opaque"),
    pytest.param("!" + SENT + ":", id="empty-server"),
    pytest.param("!kx9 q4tz:example.org", id="space"),
    pytest.param(" !" + SENT + ":example.org", id="leading-space"),
    pytest.param("!" + SENT + ":example.org ", id="trailing-space"),
    pytest.param("!" + SENT + "\n", id="trailing-newline-v12"),
    pytest.param("!" + SENT + ":example.org\n", id="trailing-newline"),
    pytest.param("!" + SENT + "\x00", id="nul"),
    pytest.param("!" + SENT + "é:example.org", id="non-ascii"),
    pytest.param("!" + SENT + ":exa mple.org", id="space-in-server"),
    pytest.param("!" + SENT + ":example.org:0", id="port-0"),
    pytest.param("!" + SENT + "x" * 260, id="over-255"),
    pytest.param(SENT.encode(), id="bytes"),
    pytest.param(NUM, id="int"),
    pytest.param(None, id="none"),
]


@pytest.mark.parametrize("room", INVALID_ROOMS)
def test_s3_control_room_rejects_invalid_room_ids(room: Any) -> None:
    """S3: anything but a room id is InvalidIdentity and is not echoed."""
    with pytest.raises(InvalidIdentity) as info:
        MemoryScope.control_room(room)
    assert_content_free(info.value, str(NUM))


def test_s3_cross_room_is_constructible_and_room_is_optional() -> None:
    """S3: the reserved CROSS_ROOM kind exists and can be built (the store refuses it)."""
    assert {k.value for k in ScopeKind} == {"control_room", "cross_room", "principal"}
    bare = MemoryScope(kind=ScopeKind.CROSS_ROOM)
    assert bare.kind is ScopeKind.CROSS_ROOM
    assert bare.room_id is None
    assert bare == MemoryScope(kind="cross_room", room_id=None)
    with_room = MemoryScope(kind=ScopeKind.CROSS_ROOM, room_id=ROOM)
    assert with_room.room_id == ROOM
    with pytest.raises(InvalidIdentity):
        MemoryScope(kind=ScopeKind.CROSS_ROOM, room_id="not a room " + SENT)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"kind": SENT, "room_id": ROOM}, id="unknown-kind"),
        pytest.param({"kind": None, "room_id": ROOM}, id="none-kind"),
        pytest.param({"room_id": ROOM}, id="missing-kind"),
        pytest.param({"kind": ScopeKind.CONTROL_ROOM}, id="control-room-without-room"),
        pytest.param({"kind": "space", "room_id": ROOM}, id="space-kind"),
        pytest.param({"kind": "control_room", "room_id": ROOM, "space": SENT}, id="extra-field"),
    ],
)
def test_s3_invalid_scope_fields_raise_invalid_identity(kwargs: dict[str, Any]) -> None:
    """S3: only the two scope kinds exist; a control room needs a room; no extra fields."""
    with pytest.raises(InvalidIdentity) as info:
        MemoryScope(**kwargs)
    assert_content_free(info.value)


# --------------------------------------------------------------------------------------------
# S4 ScopeKey
# --------------------------------------------------------------------------------------------


def test_s4_scope_key_is_hashable_and_a_dict_key() -> None:
    """S4: equal keys are equal, hash equal and address the same dict slot."""
    k1, k2 = _key(), _key()
    assert k1 == k2
    assert hash(k1) == hash(k2)
    table = {k1: "first"}
    table[k2] = "second"
    assert len(table) == 1
    assert table[_key()] == "second"
    other = _key(room="!control-b:example.org")
    assert other not in table
    assert len({k1, k2, other}) == 2


def test_s4_scope_key_from_dicts_equals_key_from_models() -> None:
    """S4: a key built from plain dicts is the same key as one built from models."""
    from_dicts = ScopeKey(
        principal={"mxid": MXID, "origin": "native_local"},
        agent={"namespace": "kagent", "name": "my-agent"},
        scope={"kind": "control_room", "room_id": ROOM},
    )
    assert isinstance(from_dicts.principal, Principal)
    assert isinstance(from_dicts.agent, AgentIdentity)
    assert isinstance(from_dicts.scope, MemoryScope)
    assert from_dicts == _key()
    assert hash(from_dicts) == hash(_key())
    assert from_dicts.opaque_id == _key().opaque_id
    validated = ScopeKey.model_validate(
        {
            "principal": {"mxid": MXID, "origin": "native_local"},
            "agent": {"namespace": "kagent", "name": "my-agent"},
            "scope": {"kind": "control_room", "room_id": ROOM},
        }
    )
    assert validated == _key()


def test_s4_scope_key_from_dicts_validates_the_parts() -> None:
    """S4: nested dicts go through the same content-free validation."""
    with pytest.raises(InvalidIdentity) as info:
        ScopeKey(
            principal={"mxid": SENT, "origin": "native_local"},
            agent=_agent(),
            scope=MemoryScope.control_room(ROOM),
        )
    assert_content_free(info.value)


_P, _A, _S = _principal(), _agent(), MemoryScope.control_room(ROOM)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"principal": "@" + SENT + ":example.org", "agent": _A, "scope": _S},
                     id="principal-str"),
        pytest.param({"principal": _A, "agent": _A, "scope": _S}, id="principal-is-agent"),
        pytest.param({"principal": _P, "agent": "kagent__NS__" + SENT, "scope": _S},
                     id="agent-app-name-str"),
        pytest.param({"principal": _P, "agent": _S, "scope": _S}, id="agent-is-scope"),
        pytest.param({"principal": _P, "agent": _A, "scope": "!" + SENT}, id="scope-room-str"),
        pytest.param({"principal": _P, "agent": _A, "scope": _P}, id="scope-is-principal"),
        pytest.param({"principal": None, "agent": _A, "scope": _S}, id="principal-none"),
        pytest.param({"principal": NUM, "agent": _A, "scope": _S}, id="principal-int"),
        pytest.param({"agent": _A, "scope": _S}, id="principal-missing"),
        pytest.param({"principal": _P, "agent": _A}, id="scope-missing"),
        pytest.param({"principal": _P, "agent": _A, "scope": _S, "audience": SENT},
                     id="extra-field"),
        pytest.param({"principal": {1: SENT}, "agent": _A, "scope": _S},
                     id="principal-dict-non-str-keys"),
        pytest.param({"principal": _P, "agent": {"namespace": "kagent", "name": "x",
                                                 "extra": SENT}, "scope": _S},
                     id="agent-dict-extra"),
    ],
)
def test_s4_scope_key_wrong_types_raise_invalid_identity(kwargs: dict[str, Any]) -> None:
    """S4: a key is exactly (Principal, AgentIdentity, MemoryScope); anything else is refused."""
    with pytest.raises(InvalidIdentity) as info:
        ScopeKey(**kwargs)
    assert_content_free(info.value, str(NUM))


@pytest.mark.parametrize("data", [None, NUM, "sk_" + SENT, [_P, _A, _S], (_P, _A, _S)])
def test_s4_scope_key_model_validate_non_mapping(data: Any) -> None:
    """S4: a key is never parsed from a string, tuple or opaque id."""
    with pytest.raises(InvalidIdentity) as info:
        ScopeKey.model_validate(data)
    assert_content_free(info.value, str(NUM))


# --------------------------------------------------------------------------------------------
# S5 require_servable
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(_key(), id="control-room-on-local-server"),
        pytest.param(_key(room="!v12roomopaque"), id="v12-room-without-server"),
        pytest.param(_key(mxid="@Alice.B=x/y+z:example.org"), id="historical-localpart"),
    ],
)
def test_s5_native_local_principal_with_local_control_room_is_servable(key: ScopeKey) -> None:
    """S5: a native local principal of the local homeserver in a control room passes."""
    assert key.require_servable(LOCAL) is None


def _denied(key: ScopeKey, local: str = LOCAL) -> ScopeDenied:
    with pytest.raises(ScopeDenied) as info:
        key.require_servable(local)
    err = info.value
    for text in _texts(err) + [repr(dict(err.ids))]:
        assert key.principal.mxid not in text
        assert "alice" not in text
        if key.scope.room_id:
            assert key.scope.room_id not in text
    assert err.__cause__ is None
    assert err.__context__ is None
    return err


@pytest.mark.parametrize(
    "origin",
    [
        OriginKind.EXTERNAL_APPSERVICE,
        OriginKind.REMOTE_FEDERATED,
        OriginKind.OAUTH_CLIENT,
        OriginKind.FEDIVERSE_ACTOR,
    ],
)
def test_s5_non_native_origins_are_federation_denied(origin: OriginKind) -> None:
    """S5: bridged, federated, OAuth and Fediverse principals are refused with a reason code,
    even when their MXID names the local homeserver."""
    err = _denied(_key(origin=origin))
    assert err.reason == ReasonCode.FEDERATION_DENIED


@pytest.mark.parametrize(
    "mxid",
    [
        "@alice:other.example",
        "@alice:example.org:8448",  # same host, another server name
        "@alice:sub.example.org",
        "@alice:[::1]",
    ],
)
def test_s5_native_principal_of_another_server_is_remote_denied(mxid: str) -> None:
    """S5: a native principal whose server name is not the local homeserver is refused."""
    err = _denied(_key(mxid=mxid))
    assert err.reason == ReasonCode.REMOTE_SERVER_DENIED


@pytest.mark.parametrize("room", ["!control-a:other.example", "!control-a:example.org:8448"])
def test_s5_control_room_on_another_server_is_remote_denied(room: str) -> None:
    """S5: a control room created on another homeserver is never served."""
    err = _denied(_key(room=room))
    assert err.reason == ReasonCode.REMOTE_SERVER_DENIED


@pytest.mark.parametrize("room", [None, ROOM])
def test_s3_s5_cross_room_scope_is_reserved(room: str | None) -> None:
    """S3: the reserved cross-room kind is refused with SCOPE_KIND_RESERVED."""
    err = _denied(_key(kind=ScopeKind.CROSS_ROOM, room=room))
    assert err.reason == ReasonCode.SCOPE_KIND_RESERVED


def test_s5_denial_carries_only_the_opaque_scope_id() -> None:
    """S5/B6: the refusal names the key by its opaque id, nothing else."""
    key = _key(mxid=SECRET_MXID, origin=OriginKind.REMOTE_FEDERATED)
    err = _denied(key)
    assert dict(err.ids) == {"scope_id": key.opaque_id}
    assert SENT not in str(err) and SENT not in repr(err)


# --------------------------------------------------------------------------------------------
# MemoryPolicy (A2, B3, B4, C1)
# --------------------------------------------------------------------------------------------


def test_prototype_policy_has_the_adr_numbers() -> None:
    """B3/B4/A2/C1: PROTOTYPE_POLICY carries ADR 0023's prototype limits."""
    p = PROTOTYPE_POLICY
    assert p.version
    assert p.max_ttl == timedelta(days=7)
    assert p.entry_cap == 100
    assert p.fact_max_bytes == 512
    assert p.consent_max_age == timedelta(days=90)
    assert p.prefetch_max_subqueries == 8
    assert p.prefetch_subquery_max_bytes == 512
    assert p.explicit_ops_per_minute == 6
    assert p.explicit_burst == 3
    assert p.scope_ops_per_hour == 60
    assert p.autosave_every_user_turns == 5
    assert p.summariser_input_max_bytes == 16 * 1024
    assert p.summariser_max_facts == 10


def test_policy_is_frozen() -> None:
    """A policy is an immutable, versioned record."""
    with pytest.raises(ValidationError):
        PROTOTYPE_POLICY.entry_cap = 10_000  # type: ignore[misc]
    assert PROTOTYPE_POLICY.entry_cap == 100


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"max_ttl": timedelta(0)}, id="ttl-zero"),
        pytest.param({"max_ttl": timedelta(days=-1)}, id="ttl-negative"),
        pytest.param({"max_ttl": timedelta(days=366)}, id="ttl-over-a-year"),
        pytest.param({"consent_max_age": timedelta(0)}, id="consent-zero"),
        pytest.param({"consent_max_age": timedelta(days=3651)}, id="consent-huge"),
        pytest.param({"entry_cap": 0}, id="cap-zero"),
        pytest.param({"entry_cap": -1}, id="cap-negative"),
        pytest.param({"entry_cap": 10_001}, id="cap-huge"),
        pytest.param({"fact_max_bytes": 0}, id="fact-zero"),
        pytest.param({"fact_max_bytes": 8193}, id="fact-huge"),
        pytest.param({"search_limit": 0}, id="search-zero"),
        pytest.param({"search_limit": 51}, id="search-over-50"),
        pytest.param({"prefetch_max_subqueries": 0}, id="prefetch-zero"),
        pytest.param({"prefetch_subquery_max_bytes": 0}, id="prefetch-bytes-zero"),
        pytest.param({"explicit_ops_per_minute": 0}, id="per-minute-zero"),
        pytest.param({"explicit_burst": -3}, id="burst-negative"),
        pytest.param({"scope_ops_per_hour": 0}, id="per-hour-zero"),
        pytest.param({"autosave_every_user_turns": 0}, id="autosave-zero"),
        pytest.param({"summariser_input_max_bytes": 0}, id="input-zero"),
        pytest.param({"summariser_max_facts": 0}, id="facts-zero"),
    ],
)
def test_policy_out_of_range_values_raise_invalid_policy(kwargs: dict[str, Any]) -> None:
    """A policy outside sane bounds is InvalidInput(INVALID_POLICY), not a pydantic error."""
    with pytest.raises(InvalidInput) as info:
        MemoryPolicy(version="v1", **kwargs)
    err = info.value
    assert not isinstance(err, ValidationError)
    assert err.reason == ReasonCode.INVALID_POLICY


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("", id="empty"),
        pytest.param(" v1", id="leading-space"),
        pytest.param("v1 " + SENT, id="space"),
        pytest.param("v1\n", id="trailing-newline"),
        pytest.param("-v1", id="leading-dash"),
        pytest.param("v" * 65, id="65-chars"),
        pytest.param("v1é", id="non-ascii"),
        pytest.param(None, id="none"),
        pytest.param(1, id="int"),
    ],
)
def test_policy_invalid_version_raises_invalid_policy(version: Any) -> None:
    """C1: the policy version recorded with consent is a bounded token."""
    with pytest.raises(InvalidInput) as info:
        MemoryPolicy(version=version)
    assert info.value.reason == ReasonCode.INVALID_POLICY
    assert SENT not in str(info.value)


def test_policy_boundaries_are_inclusive() -> None:
    """The documented bounds themselves are accepted."""
    lo = MemoryPolicy(version="v-lo", max_ttl=timedelta(minutes=1), entry_cap=1,
                      fact_max_bytes=1, search_limit=1, consent_max_age=timedelta(minutes=1))
    hi = MemoryPolicy(version="v" * 64, max_ttl=timedelta(days=365), entry_cap=10_000,
                      fact_max_bytes=8192, search_limit=50, consent_max_age=timedelta(days=3650))
    assert (lo.entry_cap, hi.entry_cap) == (1, 10_000)


# --------------------------------------------------------------------------------------------
# GovernanceError (B6)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "err",
    [
        InvalidIdentity(ReasonCode.INVALID_IDENTITY, field="mxid"),
        InvalidInput(ReasonCode.INVALID_POLICY),
        ScopeDenied(ReasonCode.FEDERATION_DENIED, scope_id="sk_" + "0" * 32),
        ScopeDenied(ReasonCode.SCOPE_KIND_RESERVED),
        GovernanceError(ReasonCode.DATABASE_ERROR, operation="save", sqlstate="XX000"),
        GovernanceError(),
    ],
    ids=["invalid-identity", "invalid-policy", "federation", "reserved", "database", "bare"],
)
def test_governance_error_pickle_and_copy_round_trip(err: GovernanceError) -> None:
    """B6: errors survive pickling (e.g. across processes) with class, reason and ids intact."""
    for clone in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(clone) is type(err)
        assert clone.reason == err.reason
        assert dict(clone.ids) == dict(err.ids)
        assert str(clone) == str(err)
        assert clone.args == err.args


def test_governance_error_default_reasons() -> None:
    """CONTRACT Errors: each subclass has a stable default reason code."""
    assert InvalidIdentity().reason == ReasonCode.INVALID_IDENTITY
    assert InvalidInput().reason == ReasonCode.INVALID_ARGUMENT
    assert ScopeDenied().reason == ReasonCode.SCOPE_MISMATCH
    assert issubclass(InvalidIdentity, InvalidInput)
    assert issubclass(InvalidInput, GovernanceError)
    assert issubclass(ScopeDenied, GovernanceError)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("alice likes " + SENT, id="spaces"),
        pytest.param(SENT * 20, id="long"),
        pytest.param("@" + SENT + ":example.org", id="mxid"),
        pytest.param("!" + SENT + ":example.org", id="room-id"),
        pytest.param(SENT + "\ninjected log line", id="newline"),
        pytest.param(SENT + "\n", id="trailing-newline"),
        pytest.param(SENT + "é", id="non-ascii"),
        pytest.param("Failing row contains (" + SENT + ")", id="db-detail"),
        pytest.param("", id="empty"),
    ],
)
def test_governance_error_drops_content_like_ids(value: str) -> None:
    """B6: an id that looks like content is dropped, never rendered."""
    err = GovernanceError(ReasonCode.DATABASE_ERROR, operation="save", scope_id=value)
    assert "scope_id" not in err.ids
    assert dict(err.ids) == {"operation": "save"}
    for text in _texts(err):
        assert SENT not in text
        assert "\n" not in text
    assert str(err).startswith("database_error")


def test_governance_error_drops_content_like_id_names() -> None:
    """B6: the id's name is filtered too."""
    err = GovernanceError(ReasonCode.DATABASE_ERROR, **{SENT + " key": "ok"})
    assert dict(err.ids) == {}
    assert SENT not in str(err) and SENT not in repr(err)


def test_governance_error_keeps_bounded_opaque_ids() -> None:
    """B6: bounded opaque ids (scope ids, SQLSTATEs, counts) are kept and rendered."""
    sid = _key().opaque_id
    err = ScopeDenied(ReasonCode.REMOTE_SERVER_DENIED, scope_id=sid, count=3)
    assert dict(err.ids) == {"scope_id": sid, "count": "3"}
    assert sid in str(err)
    assert str(err).startswith("remote_server_denied")
    assert repr(err).startswith("ScopeDenied(")
