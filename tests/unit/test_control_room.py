"""Control-room check (SPEC U6, S5; ADR 0023 decisions 18-20): pure, no database.

Every identity is a fresh random sentinel (``@s<hex>:example.org``) so we can prove that no
error text, traceback or repr carries an MXID or any other injected value.
"""

from __future__ import annotations

import copy
import secrets
import traceback
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from kagent_governed_memory.controls import (
    ControlRoomCheck,
    ControlRoomState,
    Membership,
    ServerAcl,
    check_control_room,
    check_control_room_events,
)
from kagent_governed_memory.errors import InvalidInput, ReasonCode
from kagent_governed_memory.identity import OriginKind, Principal

LOCAL = "example.org"
R = ReasonCode


def _sentinel(prefix: str = "s", server: str = LOCAL) -> str:
    return f"@{prefix}{secrets.token_hex(8)}:{server}"


def _state(etype: str, content: dict[str, Any], key: str = "") -> dict[str, Any]:
    return {"type": etype, "state_key": key, "content": content, "sender": "@x:example.org",
            "event_id": "$" + secrets.token_hex(8)}


def _member(user: str, membership: str) -> dict[str, Any]:
    return _state("m.room.member", {"membership": membership}, key=user)


@dataclass
class Room:
    room_id: str
    subject: Principal
    bot: str
    ghost: str
    left: str
    banned: str
    events: list[dict[str, Any]]

    def check(self, events: Any = None, **overrides: Any) -> ControlRoomCheck:
        state = ControlRoomState.from_events(self.events if events is None else events,
                                             room_id=self.room_id)
        args = {"subject": self.subject, "bot": self.bot, "ghost": self.ghost,
                "local_server": LOCAL, **overrides}
        return check_control_room(state, **args)

    def check_events(self, events: Any) -> ControlRoomCheck:
        return check_control_room_events(events, room_id=self.room_id, subject=self.subject,
                                         bot=self.bot, ghost=self.ghost, local_server=LOCAL)

    def identifiers(self) -> list[str]:
        ids = [self.subject.mxid, self.bot, self.ghost, self.left, self.banned, self.room_id]
        return ids + [i[1:].split(":")[0] for i in ids]  # localparts / opaque parts too

    def replace(self, etype: str, content: dict[str, Any] | None, key: str = "") -> None:
        """Swap (or, with None, drop) one state event: exactly one mutation."""
        kept = [e for e in self.events if (e["type"], e["state_key"]) != (etype, key)]
        assert len(kept) == len(self.events) - 1
        self.events = kept + ([_state(etype, content, key)] if content is not None else [])


@pytest.fixture
def room() -> Room:
    """A valid v12 control room: exactly subject, bot and ghost joined; left/banned are fine."""
    subject = Principal(mxid=_sentinel("s"), origin=OriginKind.NATIVE_LOCAL)
    bot, ghost, left, banned = _sentinel("b"), _sentinel("g"), _sentinel("l"), _sentinel("x")
    events = [
        _state("m.room.create", {"room_version": "12"}),
        _state("m.room.join_rules", {"join_rule": "invite"}),
        _state("m.room.history_visibility", {"history_visibility": "joined"}),
        _state("m.room.server_acl",
               {"allow": [LOCAL], "deny": [], "allow_ip_literals": False}),
        _state("m.room.power_levels", {"users": {bot: 100}}),
        _member(subject.mxid, "join"),
        _member(bot, "join"),
        _member(ghost, "join"),
        _member(left, "leave"),
        _member(banned, "ban"),
    ]
    return Room("!" + secrets.token_urlsafe(16), subject, bot, ghost, left, banned, events)


def _denied(check: ControlRoomCheck) -> ReasonCode | None:
    assert check.allowed is (check.reason is None)
    return check.reason


# --- the allowed room ------------------------------------------------------------------------


def test_u6_valid_control_room_is_allowed(room: Room) -> None:
    check = room.check()
    assert (check.allowed, check.reason) == (True, None)
    assert room.check_events(room.events) == check


def test_u6_room_id_with_local_server_part_is_accepted(room: Room) -> None:
    room.room_id = "!" + secrets.token_hex(6) + ":" + LOCAL
    assert room.check().allowed


def test_u6_join_rules_under_a_non_empty_state_key_are_not_the_rooms(room: Room) -> None:
    room.events.append(_state("m.room.join_rules", {"join_rule": "public"}, key="decoy"))
    assert room.check().allowed


# --- one denial per reason, each mutating exactly one thing ---------------------------------


@pytest.mark.parametrize("version", ["11", "1", "12.1", "org.example.12"])
def test_u6_room_version_other_than_12_is_denied(room: Room, version: str) -> None:
    room.replace("m.room.create", {"room_version": version})
    assert _denied(room.check()) is R.ROOM_VERSION_UNSUPPORTED


def test_u6_create_without_room_version_means_v1_and_is_denied(room: Room) -> None:
    room.replace("m.room.create", {})
    assert _denied(room.check()) is R.ROOM_VERSION_UNSUPPORTED


@pytest.mark.parametrize("rule", ["public", "knock", "restricted", "knock_restricted", None])
def test_u6_join_rule_other_than_invite_is_denied(room: Room, rule: str | None) -> None:
    room.replace("m.room.join_rules", None if rule is None else {"join_rule": rule})
    assert _denied(room.check()) is R.JOIN_RULE_NOT_INVITE


@pytest.mark.parametrize("history", ["shared", "invited", "world_readable", None])
def test_u6_history_visibility_other_than_joined_is_denied(room: Room, history: str | None) -> None:
    room.replace("m.room.history_visibility",
                 None if history is None else {"history_visibility": history})
    assert _denied(room.check()) is R.HISTORY_NOT_JOINED


@pytest.mark.parametrize("content", [{"algorithm": "m.megolm.v1.aes-sha2"}, {}])
def test_u6_encryption_event_is_denied_even_redacted(room: Room, content: dict) -> None:
    room.events.append(_state("m.room.encryption", content))
    assert _denied(room.check()) is R.ROOM_ENCRYPTED


@pytest.mark.parametrize(
    "acl",
    [
        None,  # no ACL at all
        {},  # redacted: allow defaults to [] and allow_ip_literals to true
        {"allow": ["*"], "deny": [], "allow_ip_literals": False},
        {"allow": ["example.*"], "deny": [], "allow_ip_literals": False},
        {"allow": [LOCAL, "other.org"], "deny": [], "allow_ip_literals": False},
        {"allow": [LOCAL, LOCAL], "deny": [], "allow_ip_literals": False},
        {"allow": [], "deny": [], "allow_ip_literals": False},
        {"allow": [LOCAL], "deny": []},  # allow_ip_literals absent: Matrix default is true
        {"allow": [LOCAL], "deny": [], "allow_ip_literals": True},
    ],
    ids=["missing", "redacted", "star", "glob", "extra", "duplicate", "empty", "ip-default",
         "ip-true"],
)
def test_u6_s5_server_acl_not_exactly_local_is_denied(room: Room, acl: dict | None) -> None:
    room.replace("m.room.server_acl", acl)
    assert _denied(room.check()) is R.SERVER_ACL_NOT_LOCAL


def test_u6_s5_server_acl_defaults_follow_matrix() -> None:
    """An absent allow list admits nobody; absent allow_ip_literals means true (not local-only)."""
    assert not ServerAcl().admits_only(LOCAL)
    assert not ServerAcl(allow=(LOCAL,)).admits_only(LOCAL)
    assert ServerAcl(allow=(LOCAL,), allow_ip_literals=False).admits_only(LOCAL)


@pytest.mark.parametrize("membership", ["invite", "knock"])
def test_u6_pending_membership_is_denied(room: Room, membership: str) -> None:
    room.events.append(_member(_sentinel("p"), membership))
    assert _denied(room.check()) is R.MEMBERSHIP_PENDING


def test_u6_pending_third_party_invite_is_denied(room: Room) -> None:
    """An invite to an e-mail address (m.room.third_party_invite) is pending membership:
    whoever holds the address may join and read the content."""
    assert room.check().allowed
    token = secrets.token_hex(8)
    room.events.append(_state("m.room.third_party_invite",
                              {"display_name": "a***@e***", "public_key": "x"}, key=token))
    assert _denied(room.check()) is R.MEMBERSHIP_PENDING
    room.events[-1] = _state("m.room.third_party_invite", {}, key=token)  # revoked
    assert room.check().allowed


def test_u6_fourth_joined_member_is_denied(room: Room) -> None:
    room.events.append(_member(_sentinel("m"), "join"))
    assert _denied(room.check()) is R.MEMBERS_MISMATCH


@pytest.mark.parametrize("membership", ["leave", "ban", None])
def test_u6_ghost_not_joined_is_denied(room: Room, membership: str | None) -> None:
    room.replace("m.room.member", None if membership is None else {"membership": membership},
                 key=room.ghost)
    assert _denied(room.check()) is R.MEMBERS_MISMATCH


def test_u6_subject_equal_to_bot_is_denied(room: Room) -> None:
    # the room stays as built; only the bridge's idea of the bot changes
    assert _denied(room.check(bot=room.subject.mxid)) is R.MEMBERS_MISMATCH


def test_u6_ghost_equal_to_bot_is_denied(room: Room) -> None:
    room.replace("m.room.member", None, key=room.ghost)
    assert _denied(room.check(ghost=room.bot)) is R.MEMBERS_MISMATCH


def test_u6_s5_remote_ghost_is_denied(room: Room) -> None:
    remote = _sentinel("g", server="other.org")
    room.replace("m.room.member", None, key=room.ghost)
    room.events.append(_member(remote, "join"))
    assert _denied(room.check(ghost=remote)) is R.MEMBERS_MISMATCH


def test_u6_s5_remote_subject_is_denied(room: Room) -> None:
    remote = Principal(mxid=_sentinel("s", server="other.org"), origin=OriginKind.NATIVE_LOCAL)
    room.replace("m.room.member", None, key=room.subject.mxid)
    room.events.append(_member(remote.mxid, "join"))  # otherwise a perfect room for `remote`
    assert _denied(room.check(subject=remote)) is R.SUBJECT_NOT_LOCAL


@pytest.mark.parametrize("origin", [o for o in OriginKind if o is not OriginKind.NATIVE_LOCAL])
def test_u6_s5_non_native_origin_is_denied(room: Room, origin: OriginKind) -> None:
    bridged = Principal(mxid=room.subject.mxid, origin=origin)  # same MXID, other principal
    assert _denied(room.check(subject=bridged)) is R.SUBJECT_NOT_LOCAL


def test_u6_s5_subject_on_other_than_configured_server_is_denied(room: Room) -> None:
    assert _denied(room.check(local_server="other.org")) is R.SUBJECT_NOT_LOCAL


def test_u6_first_failing_reason_wins_in_documented_order(room: Room) -> None:
    """Break every rule, then repair one at a time: the reason walks the fixed order."""
    bridged = Principal(mxid=room.subject.mxid, origin=OriginKind.EXTERNAL_APPSERVICE)
    pending = _sentinel("p")
    room.replace("m.room.create", {"room_version": "11"})
    room.replace("m.room.join_rules", {"join_rule": "public"})
    room.replace("m.room.history_visibility", {"history_visibility": "shared"})
    room.events.append(_state("m.room.encryption", {}))
    room.replace("m.room.server_acl", None)
    room.events.append(_member(pending, "invite"))
    room.replace("m.room.member", {"membership": "leave"}, key=room.ghost)
    acl = {"allow": [LOCAL], "deny": [], "allow_ip_literals": False}

    seen = [_denied(room.check(subject=bridged))]
    for repair in (
        lambda: room.replace("m.room.create", {"room_version": "12"}),
        lambda: room.replace("m.room.join_rules", {"join_rule": "invite"}),
        lambda: room.replace("m.room.history_visibility", {"history_visibility": "joined"}),
        lambda: room.replace("m.room.encryption", None),
        lambda: room.events.append(_state("m.room.server_acl", acl)),
        lambda: room.replace("m.room.member", None, key=pending),
        lambda: room.replace("m.room.member", {"membership": "join"}, key=room.ghost),
    ):
        seen.append(_denied(room.check()))
        repair()
    seen.append(_denied(room.check()))
    assert seen == [R.SUBJECT_NOT_LOCAL, R.ROOM_VERSION_UNSUPPORTED, R.JOIN_RULE_NOT_INVITE,
                    R.HISTORY_NOT_JOINED, R.ROOM_ENCRYPTED, R.SERVER_ACL_NOT_LOCAL,
                    R.MEMBERSHIP_PENDING, R.MEMBERS_MISMATCH, None]


def test_u6_state_drift_between_admission_and_reply_is_denied(room: Room) -> None:
    """ADR 20: the check is recomputed before each content-bearing reply; drift fails closed."""
    admission = ControlRoomState.from_events(copy.deepcopy(room.events), room_id=room.room_id)
    room.events.append(_member(_sentinel("i"), "invite"))
    before_reply = ControlRoomState.from_events(room.events, room_id=room.room_id)
    args = {"subject": room.subject, "bot": room.bot, "ghost": room.ghost, "local_server": LOCAL}
    assert check_control_room(admission, **args).allowed
    assert _denied(check_control_room(before_reply, **args)) is R.MEMBERSHIP_PENDING


def test_u6_check_result_is_consistent() -> None:
    with pytest.raises(ValidationError):
        ControlRoomCheck(allowed=True, reason=R.MEMBERS_MISMATCH)
    with pytest.raises(ValidationError):
        ControlRoomCheck(allowed=False, reason=None)


# --- hostile snapshots: refused, content-free ------------------------------------------------


def _rendered(err: BaseException) -> list[str]:
    return [str(err), repr(err), repr(err.args), *(str(a) for a in err.args),
            repr(dict(getattr(err, "ids", {}))), "".join(traceback.format_exception(err))]


def _hostile(room: Room) -> dict[str, tuple[Any, ReasonCode, list[str]]]:
    """name -> (events, expected reason, injected values that must never be echoed)."""
    ev = room.events
    dup_create = [*ev, _state("m.room.create", {"room_version": "12"})]
    su = _sentinel("u")
    members_1001 = [_sentinel("q") for _ in range(1001 - 5)]
    key = secrets.token_hex(12)
    word = "w" + secrets.token_hex(8)
    return {
        "duplicated-create": (dup_create, R.ROOM_STATE_INVALID, []),
        "duplicated-member": ([*ev, _member(room.bot, "leave")], R.ROOM_STATE_INVALID, []),
        "membership-superuser": ([*ev, _member(su, "superuser")], R.ROOM_STATE_INVALID, [su]),
        "membership-missing": ([*ev, _state("m.room.member", {}, key=su)],
                               R.ROOM_STATE_INVALID, [su]),
        "content-not-dict": ([*ev, {"type": "m.room.topic", "state_key": "", "content": word}],
                             R.ROOM_STATE_INVALID, [word]),
        "content-non-str-key": ([*ev, _state("m.room.topic", {7: word})],
                                R.ROOM_STATE_INVALID, [word]),
        "type-not-str": ([*ev, {"type": 8675309123, "state_key": key, "content": {}}],
                         R.ROOM_STATE_INVALID, ["8675309123", key]),
        "state-key-missing": ([*ev, {"type": "m.room.topic" + word, "content": {}}],
                              R.ROOM_STATE_INVALID, [word]),
        "event-not-dict": ([*ev, [word]], R.ROOM_STATE_INVALID, [word]),
        "member-key-not-mxid": ([*ev, _member(word, "leave")], R.ROOM_STATE_INVALID, [word]),
        "state-key-too-long": ([*ev, _state("m.room.topic", {}, key=word * 20)],
                               R.ROOM_STATE_INVALID, [word]),
        "create-missing": ([e for e in ev if e["type"] != "m.room.create"],
                           R.ROOM_STATE_INVALID, []),
        "room-version-not-str": ([e for e in ev if e["type"] != "m.room.create"]
                                 + [_state("m.room.create", {"room_version": 12})],
                                 R.ROOM_STATE_INVALID, []),
        "join-rule-not-str": ([e for e in ev if e["type"] != "m.room.join_rules"]
                              + [_state("m.room.join_rules", {"join_rule": [word]})],
                              R.ROOM_STATE_INVALID, [word]),
        "acl-allow-not-list": ([e for e in ev if e["type"] != "m.room.server_acl"]
                               + [_state("m.room.server_acl", {"allow": word})],
                               R.ROOM_STATE_INVALID, [word]),
        "acl-ip-literals-not-bool": ([e for e in ev if e["type"] != "m.room.server_acl"]
                                     + [_state("m.room.server_acl",
                                               {"allow": [LOCAL], "allow_ip_literals": "false"})],
                                     R.ROOM_STATE_INVALID, []),
        "1001-member-events": ([*ev, *(_member(u, "leave") for u in members_1001)],
                               R.ROOM_STATE_TOO_LARGE, members_1001),
        "10001-events": ([*ev, *(_state("m.custom", {}, key=f"k{word}{i}")
                                 for i in range(10_001 - len(ev)))],
                         R.ROOM_STATE_TOO_LARGE, [word]),
        "non-list": ({"events": ev, word: su}, R.ROOM_STATE_INVALID, [word, su]),
        "string": (word, R.ROOM_STATE_INVALID, [word]),
        "none": (None, R.ROOM_STATE_INVALID, []),
    }


HOSTILE = ["duplicated-create", "duplicated-member", "membership-superuser", "membership-missing",
           "content-not-dict", "content-non-str-key", "type-not-str", "state-key-missing",
           "event-not-dict", "member-key-not-mxid", "state-key-too-long", "create-missing",
           "room-version-not-str", "join-rule-not-str", "acl-allow-not-list",
           "acl-ip-literals-not-bool", "1001-member-events", "10001-events", "non-list",
           "string", "none"]


@pytest.mark.parametrize("case", HOSTILE)
def test_u6_hostile_state_is_refused_content_free(room: Room, case: str) -> None:
    events, reason, injected = _hostile(room)[case]
    with pytest.raises(InvalidInput) as info:
        ControlRoomState.from_events(events, room_id=room.room_id)
    err = info.value
    assert err.reason is reason
    assert err.__context__ is None and err.__cause__ is None
    for text in _rendered(err):
        for needle in [*room.identifiers(), *injected]:
            assert needle not in text, case
    # the hot path answers with a denial instead of raising
    assert room.check_events(events) == ControlRoomCheck(allowed=False, reason=reason)


def test_u6_size_limits_are_inclusive(room: Room) -> None:
    """Exactly 1,000 member events and exactly 10,000 events still parse (and then judge)."""
    members = [*room.events, *(_member(_sentinel("q"), "leave") for _ in range(1000 - 5))]
    assert room.check(members).allowed
    events = [*room.events, *(_state("m.custom", {}, key=str(i)) for i in range(10_000 - 10))]
    assert room.check(events).allowed


@pytest.mark.parametrize("bad", ["no-bang", "!", "!a b", 42, None])
def test_u6_invalid_room_id_is_refused_content_free(room: Room, bad: Any) -> None:
    room_id = bad if not isinstance(bad, str) else bad.replace("no-bang", secrets.token_hex(9))
    with pytest.raises(InvalidInput) as info:
        ControlRoomState.from_events(room.events, room_id=room_id)
    err = info.value
    assert err.reason is R.ROOM_STATE_INVALID
    assert err.__context__ is None and err.__cause__ is None
    for text in _rendered(err):
        if isinstance(room_id, str) and len(room_id) > 3:
            assert room_id not in text
        for needle in room.identifiers():
            assert needle not in text
    check = check_control_room_events(room.events, room_id=room_id, subject=room.subject,
                                      bot=room.bot, ghost=room.ghost, local_server=LOCAL)
    assert check == ControlRoomCheck(allowed=False, reason=R.ROOM_STATE_INVALID)


def test_u6_state_repr_lists_no_mxid_or_server(room: Room) -> None:
    room.events.append(_member(_sentinel("i"), "invite"))
    state = ControlRoomState.from_events(room.events, room_id=room.room_id)
    invited = next(u for u, m in state.memberships if m == "invite")
    assert invited in state.members(Membership.INVITE)  # present, just never printed
    texts = [repr(state), str(state), f"{state!r}", repr(state.server_acl)]
    for text in texts:
        for needle in [*room.identifiers(), invited, invited[1:].split(":")[0], LOCAL]:
            assert needle not in text
    assert "'join': 3" in repr(state) and "'invite': 1" in repr(state)


def test_u6_state_repr_does_not_echo_unknown_values(room: Room) -> None:
    word = "w" + secrets.token_hex(8)
    room.replace("m.room.join_rules", {"join_rule": word})
    room.replace("m.room.history_visibility", {"history_visibility": word})
    room.replace("m.room.create", {"room_version": word})
    state = ControlRoomState.from_events(room.events, room_id=room.room_id)
    assert word not in repr(state) and word not in str(state)
    assert _denied(room.check()) is R.ROOM_VERSION_UNSUPPORTED
