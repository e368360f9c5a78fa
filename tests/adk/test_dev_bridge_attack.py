"""Attacks on the development bridge (issue 26): the dev-db marker forged by a login that owns
a database, a ``DevDatabase`` whose logins point at different databases, a ``%`` in a
refusal's fix sentence, one ADK user reaching the dev user's scope."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from kagent_governed_memory import AgentIdentity, DevBridge, InvalidInput, ReasonCode, dev_database
from kagent_governed_memory.dev import BRIDGE_ROLE, DEV_MARKER, RUNTIME_ROLE, DevDatabase

from support.db import migrated
from support.settings import LOCAL

ME = AgentIdentity(namespace="dev", name="my-agent")


def _conftest_dev_database(database) -> DevDatabase:
    as_login = lambda user: make_conninfo(database.dsn, user=user)  # noqa: E731
    return DevDatabase(dsn=database.dsn, operator_dsn=database.operator_dsn,
                       owner_dsn=database.owner_dsn, admin_dsn=database.admin_dsn,
                       local_server=LOCAL, runtime_dsn=as_login(RUNTIME_ROLE),
                       bridge_dsn=as_login(BRIDGE_ROLE))


async def test_a_marker_the_database_owner_wrote_is_not_dev_dbs(database):
    """A non-superuser login that owns its database (kgm_owner here; in production often the
    application's own login) can COMMENT ON DATABASE: the marker alone must not let the
    development bridge onto that database."""
    await migrated(database)
    with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
        conn.execute(f"COMMENT ON DATABASE {conn.info.dbname} IS '{DEV_MARKER}'")
    with pytest.raises(InvalidInput) as refused:
        await DevBridge.open(_conftest_dev_database(database), agent=ME, enable=True)
    assert refused.value.reason is ReasonCode.DEV_BRIDGE_REFUSED
    assert refused.value.ids["field"] == "dev_bridge_database"
    assert database.scalar("SELECT count(*) FROM memory_runtime_login") == 0


@pytest.mark.parametrize("elsewhere", ["operator_dsn", "runtime_dsn"])
async def test_every_login_must_reach_the_marked_database(database, elsewhere):
    """The marker is read with the bridge's login; the operator login (which registers the
    runtime login) and the runtime login must reach that same dev-db database, not another."""
    await migrated(database)
    other = _conftest_dev_database(database)
    async with dev_database() as db:
        mixed = DevDatabase(**{**{f: getattr(db, f) for f in (
            "dsn", "operator_dsn", "owner_dsn", "admin_dsn", "local_server", "runtime_dsn",
            "bridge_dsn")}, elsewhere: getattr(other, elsewhere)})
        with pytest.raises(InvalidInput) as refused:
            await DevBridge.open(mixed, agent=ME, enable=True)
    assert refused.value.ids["field"] == "dev_bridge_database"
    assert database.scalar("SELECT count(*) FROM memory_runtime_login") == 0


def test_a_percent_sign_in_a_fix_sentence_cannot_break_or_feed_the_refusal_line(monkeypatch,
                                                                                 caplog):
    """The fix sentence is pasted into the WARNING's format string: a ``%`` in it (e.g. "100%",
    "%s") must render literally, not consume the line's arguments or raise."""
    from kagent_governed_memory.adk import refusals
    from kagent_governed_memory.telemetry import Operation

    refusals._reset_for_tests()
    monkeypatch.setitem(refusals._FIXES, ReasonCode.RATE_LIMITED, "raise it by 100%s or %(x)s")
    caplog.set_level(logging.INFO, logger="kagent_governed_memory.adk")
    try:
        refusals.log_refusal(Operation.RETRIEVE, ReasonCode.RATE_LIMITED, "scope-1")
    finally:
        refusals._reset_for_tests()
    [record] = [r for r in caplog.records if r.name == "kagent_governed_memory.adk"]
    assert record.getMessage().endswith("raise it by 100%s or %(x)s")
    assert "reason=rate_limited operation=" in record.getMessage()


async def _turns(dev, *turns: tuple[str, str]) -> list[str]:
    """Each (ADK user id, message) in its own session of one Runner with ``dev``'s plugin."""
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from kagent_governed_memory.adk import configure_governed_memory
    from kagent_governed_memory.testing import ScriptedModel

    agent = LlmAgent(name="my_agent", model=ScriptedModel(), instruction="Be helpful.")
    configure_governed_memory(agent, dev.service)
    runner = Runner(app=App(name="my_agent", root_agent=agent, plugins=[dev.plugin]),
                    session_service=InMemorySessionService())
    answers = []
    try:
        for user, text in turns:
            session = await runner.session_service.create_session(app_name="my_agent",
                                                                  user_id=user)
            out = []
            async for event in runner.run_async(
                    user_id=user, session_id=session.id,
                    new_message=types.Content(role="user", parts=[types.Part(text=text)])):
                for part in (event.content.parts or []) if event.content else []:
                    if part.text:
                        out.append(part.text)
            answers.append("\n".join(out))
    finally:
        await runner.close()
    return answers


async def test_a_second_adk_user_does_not_reach_the_dev_users_scope(caplog):
    """``adk api_server`` takes any user id in the URL: the dev scope belongs to the first ADK
    user the plugin serves; another one can neither read, recall nor withdraw it."""
    from kagent_governed_memory.adk.dev import DevMemory

    fact = "I prefer green tea."
    async with dev_database() as db:
        dev = DevMemory(ME, environ={"KGM_DEV_BRIDGE": "1", "KGM_DSN": db.dsn,
                                     "KGM_LOCAL_SERVER": db.local_server})
        answers = await _turns(
            dev, ("alice", "!memory on my-agent personal_preferences yes"),
            ("alice", f"Remember that {fact}"),
            ("bob", "!memory inspect my-agent"), ("bob", "What do I like to drink?"),
            ("bob", "!memory off my-agent yes"), ("alice", "!memory inspect my-agent"))
    assert answers[0].startswith("memory on: my-agent")
    assert fact not in answers[2] and fact not in answers[3]
    assert answers[2].startswith("refused: dev_bridge_refused (dev_bridge_user)")
    assert answers[4].startswith("refused: dev_bridge_refused (dev_bridge_user)")
    assert fact in answers[5]  # alice's memory is still on and still hers
    assert "alice" not in caplog.text and "bob" not in caplog.text


async def test_a_test_environ_does_not_hide_the_process_kagent_mode(tmp_path, monkeypatch):
    """``environ=`` replaces os.environ for enabling (tests), but kagent mode is the process's:
    a pod's KAGENT_NAME refuses the bridge even when the caller passes an empty mapping."""
    from kagent_governed_memory.adk.dev import DevMemory

    monkeypatch.setenv("KAGENT_NAME", "my-agent")
    dsn = f"host={tmp_path} port=1 user=kgm_app dbname=kgm"
    db = DevDatabase(dsn=dsn, operator_dsn=dsn, owner_dsn=dsn, admin_dsn=dsn, local_server=LOCAL,
                     runtime_dsn=dsn, bridge_dsn=dsn)
    with pytest.raises(InvalidInput) as refused:
        await DevBridge.open(db, agent=ME, enable=True, environ={})
    assert refused.value.ids["field"] == "dev_bridge_kagent"
    dev = DevMemory(ME, environ={"KGM_DEV_BRIDGE": "1", "KGM_DSN": dsn})
    assert dev.refused == "dev_bridge_kagent"


def _with_host(dsn: str, host: str, **kw: str) -> str:
    return make_conninfo(dsn, host=host, **kw)


@pytest.mark.parametrize("shape", ["two hosts", "hostaddr"])
async def test_only_a_single_local_socket_is_a_dev_db(shape):
    """dev-db listens on one Unix socket only.  A DSN with several hosts (libpq tries them in
    turn, or at random with load_balance_hosts=random) could read the marker on one server
    and open the stores on another; a hostaddr (which libpq dials instead of host) is not
    dev-db's either."""
    async with dev_database() as db:
        sock = psycopg.conninfo.conninfo_to_dict(db.bridge_dsn)["host"]
        host = f"{sock},{sock}" if shape == "two hosts" else sock
        extra = {"hostaddr": "127.0.0.1"} if shape == "hostaddr" else {}
        fields = {f: getattr(db, f) for f in ("dsn", "owner_dsn", "admin_dsn", "local_server")}
        mixed = DevDatabase(**fields, operator_dsn=_with_host(db.operator_dsn, host, **extra),
                            runtime_dsn=_with_host(db.runtime_dsn, host, **extra),
                            bridge_dsn=_with_host(db.bridge_dsn, host, **extra))
        with pytest.raises(InvalidInput) as refused:
            await DevBridge.open(mixed, agent=ME, enable=True)
    assert refused.value.ids["field"] == "dev_bridge_database"


async def test_the_database_comment_alone_is_not_the_marker():
    """On dev-db's own socket: with the cluster half of the marker gone, the database comment
    (which its owner, kgm_owner, may write) does not let the bridge open."""
    async with dev_database() as db:
        with psycopg.connect(db.admin_dsn, autocommit=True) as conn:
            conn.execute("COMMENT ON TABLESPACE pg_default IS NULL")
        with psycopg.connect(db.owner_dsn, autocommit=True) as conn:
            conn.execute(f"COMMENT ON DATABASE kgm IS '{DEV_MARKER}'")
        with pytest.raises(InvalidInput) as refused:
            await DevBridge.open(db, agent=ME, enable=True)
        assert refused.value.ids["field"] == "dev_bridge_database"
        with psycopg.connect(db.admin_dsn, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM memory_runtime_login").fetchone() == (0,)
