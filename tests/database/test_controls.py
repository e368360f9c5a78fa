"""`!memory` command semantics (U1-U6): only the exact subject, in a passing control room,
with confirmations for destructive commands, and a fresh room check before any content."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from support.controls import AGENTS, ALICE, OK, PURPOSE, ROOM, checks
from support.db import physical_rows, save
from support.scopes import make_key

from kagent_governed_memory import Principal, ReasonCode
from kagent_governed_memory.controls import ControlRoomCheck
from kagent_governed_memory.controls import (
    ConfirmationRequired,
    ErasureReply,
    ForgetReply,
    InspectReply,
    MemoryControls,
    Notice,
    StatusReply,
    parse_memory_command,
)
from kagent_governed_memory.errors import InvalidInput

@pytest.fixture
def now():
    return [datetime(2026, 11, 29, 12, 0, tzinfo=UTC)]


@pytest.fixture
async def controls(store, now):
    return MemoryControls(store, agents=AGENTS, secret=b"c" * 32, clock=lambda: now[0])


async def run(controls, text, *, sender=ALICE, subject=ALICE, room=ROOM, check=None):
    return await controls.handle(text, sender=sender, subject=subject, room_id=room,
                                 room_check=check or checks(OK))


@pytest.fixture
async def alice(store):
    key = make_key()
    await store.grant(key, purpose=PURPOSE)
    ids = await save(store, key, *(f"alice fact {i}" for i in range(15)))
    return key, ids


async def test_u1_status_is_content_free(controls, alice):
    reply = await run(controls, "!memory status my-agent")
    assert isinstance(reply, StatusReply) and not reply.content_bearing
    assert reply.status.enabled and reply.status.entry_count == 15
    assert "alice fact" not in reply.model_dump_json()


async def test_u2_inspect_pages_and_state_drift_suppresses_the_second_page(controls, alice):
    first = await run(controls, "!memory inspect my-agent", check=checks(OK, OK))
    assert isinstance(first, InspectReply) and first.content_bearing
    assert len(first.entries) == 10 and first.next_cursor
    drift = ControlRoomCheck(allowed=False, reason=ReasonCode.MEMBERSHIP_PENDING)
    check = checks(OK, drift)  # admitted, then someone is invited before the page goes out
    second = await run(controls, f"!memory inspect my-agent {first.next_cursor}", check=check)
    assert second == Notice(reason=ReasonCode.MEMBERSHIP_PENDING)
    assert len(check.calls) == 2
    retry = await run(controls, f"!memory inspect my-agent {first.next_cursor}",
                      check=checks(OK, OK))
    assert isinstance(retry, InspectReply) and len(retry.entries) == 5


async def test_u6_denied_room_at_admission_does_nothing(controls, alice, database):
    key, ids = alice
    denied = ControlRoomCheck(allowed=False, reason=ReasonCode.ROOM_ENCRYPTED)
    for text in ("!memory inspect my-agent", f"!memory forget my-agent {ids[0]}",
                 "!memory off my-agent", "!memory status my-agent"):
        assert await run(controls, text, check=checks(denied)) == Notice(
            reason=ReasonCode.ROOM_ENCRYPTED)
    assert physical_rows(database, key) == 15


@pytest.mark.parametrize("sender", [
    Principal(mxid="@moderator:example.org", origin="native_local"),
    Principal(mxid="@alice:example.org", origin="external_appservice"),
])
async def test_u5_only_the_exact_subject(controls, alice, database, sender):
    key, ids = alice
    for text in ("!memory inspect my-agent", "!memory status my-agent",
                 f"!memory forget my-agent {ids[0]}", "!memory forget my-agent all"):
        assert await run(controls, text, sender=sender) == Notice(reason=ReasonCode.NOT_SUBJECT)
    assert physical_rows(database, key) == 15


async def test_u5_the_subject_of_another_room_sees_only_their_own_scope(controls, alice):
    bob = Principal(mxid="@bob:example.org", origin="native_local")
    reply = await run(controls, "!memory inspect my-agent", sender=bob, subject=bob,
                      room="!bobs-room:example.org", check=checks(OK, OK))
    assert isinstance(reply, InspectReply) and reply.entries == ()


async def test_u3_forget_one(controls, alice, database):
    key, ids = alice
    reply = await run(controls, f"!memory forget my-agent {ids[3]}")
    assert isinstance(reply, ForgetReply) and reply.receipt.deleted == 1
    again = await run(controls, f"!memory forget my-agent {ids[3]}")
    assert again.receipt.deleted == 0 and again.receipt.verified
    assert physical_rows(database, key) == 14


async def test_u4_forget_all_needs_a_single_use_confirmation(controls, alice, database, now):
    key, _ = alice
    ask = await run(controls, "!memory forget my-agent all")
    assert isinstance(ask, ConfirmationRequired) and ask.action == "forget_all"
    assert physical_rows(database, key) == 15
    done = await run(controls, f"!memory forget my-agent all {ask.token}")
    assert isinstance(done, ErasureReply) and done.receipt.deleted == 15
    assert (await controls._store.status(key)).enabled  # forget all keeps consent
    replay = await run(controls, f"!memory forget my-agent all {ask.token}")
    assert replay == Notice(reason=ReasonCode.CONFIRMATION_INVALID)


async def test_u4_off_disables_then_clears(controls, alice, database, store):
    key, _ = alice
    ask = await run(controls, "!memory off my-agent")
    done = await run(controls, f"!memory off my-agent {ask.token}")
    assert isinstance(done, ErasureReply) and done.receipt.verified
    assert await store.generation(key) is None and physical_rows(database, key) == 0


async def test_u4_confirmation_expiry_and_binding(controls, alice, database, now):
    key, _ = alice
    ask = await run(controls, "!memory off my-agent")
    # for another action, another agent, another room, another subject: refused
    assert await run(controls, f"!memory forget my-agent all {ask.token}") == Notice(
        reason=ReasonCode.CONFIRMATION_INVALID)
    assert await run(controls, f"!memory off other {ask.token}") == Notice(
        reason=ReasonCode.CONFIRMATION_INVALID)
    bob = Principal(mxid="@bob:example.org", origin="native_local")
    assert await run(controls, f"!memory off my-agent {ask.token}", sender=bob, subject=bob
                     ) == Notice(reason=ReasonCode.CONFIRMATION_INVALID)
    assert await run(controls, f"!memory off my-agent {ask.token}",
                     room="!other-room:example.org") == Notice(
        reason=ReasonCode.CONFIRMATION_INVALID)
    # tampered
    body = ask.token.split(".")[1]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).replace(b"off", b"XXX")
    forged = "c1." + base64.urlsafe_b64encode(raw).decode().rstrip("=") + "." + \
        ask.token.split(".")[2]
    assert await run(controls, f"!memory off my-agent {forged}") == Notice(
        reason=ReasonCode.CONFIRMATION_INVALID)
    # expired: the clock moves past the confirmation's lifetime
    now[0] += timedelta(minutes=2)
    assert await run(controls, f"!memory off my-agent {ask.token}") == Notice(
        reason=ReasonCode.CONFIRMATION_EXPIRED)
    assert physical_rows(database, key) == 15 and await controls._store.generation(key)


@pytest.mark.parametrize("text", [
    "!memory", "!memory status", "!memory delete my-agent", "!memory forget my-agent",
    "!memory status my-agent extra", "!memoryx status my-agent", "memory status my-agent",
    "!memory inspect my-agent a b", "!memory status my-agent " + "x" * 600,
    "!memory status mÿ-agent", None, 42,
])
async def test_bad_commands(controls, alice, text):
    assert await run(controls, text) == Notice(reason=ReasonCode.COMMAND_INVALID)
    if isinstance(text, str):
        with pytest.raises(InvalidInput):
            parse_memory_command(text)


async def test_unknown_agent_and_federated_subject(controls, alice):
    assert await run(controls, "!memory status nobody") == Notice(reason=ReasonCode.UNKNOWN_AGENT)
    remote = Principal(mxid="@alice:remote.example", origin="native_local")
    reply = await run(controls, "!memory status my-agent", sender=remote, subject=remote)
    assert reply == Notice(reason=ReasonCode.REMOTE_SERVER_DENIED)


async def test_bad_cursor_is_a_notice(controls, alice):
    reply = await run(controls, "!memory inspect my-agent AAAA", check=checks(OK, OK))
    assert reply == Notice(reason=ReasonCode.INVALID_CURSOR)


async def test_consent_is_a_command_with_confirmation_and_the_policy_shown(controls, store,
                                                                          database):
    from kagent_governed_memory.controls import ConsentReply

    key = make_key()
    assert await store.generation(key) is None
    ask = await run(controls, "!memory on my-agent personal_preferences")
    assert isinstance(ask, ConfirmationRequired) and ask.action == "on"
    assert (ask.purpose, ask.policy_version) == ("personal_preferences", store.policy.version)
    assert await store.generation(key) is None  # nothing before the confirmation
    # the token is bound to the purpose: it cannot consent to another one
    other = await run(controls, f"!memory on my-agent marketing {ask.token}")
    assert other == Notice(reason=ReasonCode.CONFIRMATION_INVALID)
    done = await run(controls, f"!memory on my-agent personal_preferences {ask.token}")
    assert isinstance(done, ConsentReply) and done.receipt.policy_version == store.policy.version
    assert await store.generation(key) == done.receipt.generation
    denied = await run(controls, "!memory on my-agent personal_preferences",
                       check=checks(ControlRoomCheck(allowed=False,
                                                     reason=ReasonCode.ROOM_ENCRYPTED)))
    assert denied == Notice(reason=ReasonCode.ROOM_ENCRYPTED)
    with pytest.raises(InvalidInput):
        parse_memory_command("!memory on my-agent Not-A-Purpose")


async def test_every_content_bearing_reply_is_rechecked_right_before_sending(controls, alice):
    from kagent_governed_memory.controls import recheck_before_send

    drift = ControlRoomCheck(allowed=False, reason=ReasonCode.MEMBERS_MISMATCH)
    page = await run(controls, "!memory inspect my-agent")
    assert isinstance(page, InspectReply) and page.entries
    agent = AGENTS["my-agent"]
    check = checks(OK, drift)
    assert await recheck_before_send(page, agent=agent, room_check=check) is page  # first send
    retried = await recheck_before_send(page, agent=agent, room_check=check)  # retry, drifted
    assert retried == Notice(reason=ReasonCode.MEMBERS_MISMATCH)
    answer = "You told me you prefer alice fact 3."  # an agent reply that used recalled memory
    assert await recheck_before_send(answer, agent=agent, room_check=checks(drift),
                                     content_bearing=True) == Notice(
        reason=ReasonCode.MEMBERS_MISMATCH)
    status = StatusReply(status=(await run(controls, "!memory status my-agent")).status)
    never = checks(drift)
    assert await recheck_before_send(status, agent=agent, room_check=never) is status
    assert never.calls == []  # content-free replies need no re-check
