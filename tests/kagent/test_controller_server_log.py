"""Issue 25 item 4 through the compiled kagent controller: the server log is not a sink.

The controller's serving login (``kgm_controller``: runtime, bridge and operator roles) has, as
role defaults in the test database, every user-settable parameter that writes statement
parameters, parse trees or plans to PostgreSQL's log (``ALTER ROLE ... IN DATABASE ... SET``;
the login could set them for itself).  Then, through the controller (``go_controller.serve``:
its own connect path, ``database.ConnectGoverned``), accepted saves and searches and a refused
save (the late save after a withdrawal: exactly the content the user declined) run with
sentinel facts.  The server log, read as a file (``postgresql_proc.logfile``), holds none of
the sentinels, neither as text nor as the decimal byte lists that node dumps print for a
``Const``.  On a controller that does not pin the parameters, the refused save's facts are in
the log (``CONTEXT: unnamed portal with parameters``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from support.contract_backends import HttpBackend, Refused
from support.go_controller import Unavailable, agent_headers, bridge_headers, serve
from psycopg.conninfo import make_conninfo

from kagent_governed_memory import (
    AgentIdentity,
    HashingEmbedder,
    MemoryScope,
    OriginKind,
    Principal,
    ScopeKey,
)
from kagent_governed_memory.store import migrate
from kagent_governed_memory.dev import CONTROLLER_ROLE, OWNER_ROLE, prepare_app_database
from kagent_governed_memory.scope import generate_private_key, public_key_pem

# through the compiled controller (go_controller.serve)
pytestmark = pytest.mark.controller

LOCAL = "example.org"
ISSUER = "https://bridge.example.org"
BRIDGE_KEY = generate_private_key()
EMBED = HashingEmbedder()

# What a holder of the login may set for itself (docs/database-roles.md, the pinned settings).
LEAKING_DEFAULTS = {
    "log_parameter_max_length_on_error": "-1",
    "debug_print_parse": "on",
    "debug_print_rewritten": "on",
    "debug_print_plan": "on",
    "plpgsql.print_strict_params": "on",
}


def _byte_list(text: str) -> str:
    """How a node dump prints a Const's bytes: ``83 69 78 ...`` (decimal, space separated)."""
    return " ".join(str(b) for b in text.encode())


@pytest.fixture
def leaking_controller_db(postgresql_proc: Any) -> Iterator[tuple[str, str, Path]]:
    """A migrated database whose controller login has the leaking role defaults there."""
    log = getattr(postgresql_proc, "logfile", None)
    if not log or not Path(log).is_file():
        pytest.skip("NOT RUN: the test server's log file is not known (postgresql_proc.logfile)")
    name = f"l_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    admin = make_conninfo(base, dbname=name)
    asyncio.run(migrate(make_conninfo(base, user=OWNER_ROLE, dbname=name), local_server=LOCAL))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("LOAD 'plpgsql'")
        for param, value in LEAKING_DEFAULTS.items():
            conn.execute(f'ALTER ROLE "{CONTROLLER_ROLE}" IN DATABASE "{name}" SET {param} = {value}')
    # the defaults are in force for a plain session of the login (the test's precondition)
    with psycopg.connect(make_conninfo(base, user=CONTROLLER_ROLE, dbname=name)) as conn:
        got = conn.execute("SELECT current_setting('log_parameter_max_length_on_error'),"
                           " current_setting('debug_print_plan')").fetchone()
        assert got == ("-1", "on")
    try:
        yield make_conninfo(base, user=CONTROLLER_ROLE, dbname=name), admin, Path(log)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _key() -> ScopeKey:
    suffix = secrets.token_hex(5)
    return ScopeKey(principal=Principal(mxid=f"@log{suffix}:{LOCAL}", origin=OriginKind.NATIVE_LOCAL),
                    agent=AgentIdentity(namespace="kagent", name="my-agent"),
                    scope=MemoryScope.control_room(f"!log{suffix}:{LOCAL}"))


async def _scenario(url: str, sentinels: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        b = HttpBackend(client, bridge_key=BRIDGE_KEY, issuer=ISSUER, local_server=LOCAL,
                        agent_headers=agent_headers, bridge_headers=bridge_headers)
        key = _key()
        generation = await b.grant(key, "personal_preferences")
        accepted = sentinels["accepted"]
        ids = await b.save(key, generation, [accepted], [EMBED.embed_one(accepted)])
        assert len(ids) == 1
        hits = await b.search(key, generation, EMBED.embed_one(accepted))
        assert [content for _, content in hits] == [accepted]
        await b.withdraw(key)
        # the late save of the request that captured the withdrawn consent: refused by the
        # database, with the declined facts as its bound parameters
        declined = sentinels["declined"]
        with pytest.raises(Refused):
            await b.save(key, generation, [declined], [EMBED.embed_one(declined)])


def _wait_for_marker(admin: str, log: Path, offset: int) -> str:
    marker = f"kgm-log-marker-{secrets.token_hex(6)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DO $$ BEGIN RAISE LOG '{marker}'; END $$")
    deadline = time.monotonic() + 60  # generous: returns as soon as the marker is there
    while time.monotonic() < deadline:
        text = log.read_bytes()[offset:].decode("utf-8", "replace")
        if marker in text:
            return text
        time.sleep(0.1)
    raise AssertionError("the server log read is not the server's (no marker)")


def test_controller_leaves_no_content_in_the_server_log(
        leaking_controller_db: tuple[str, str, Path]) -> None:
    dsn, admin, log = leaking_controller_db
    sentinels = {kind: f"kgm-sentinel-{kind}-{secrets.token_hex(8)}"
                 for kind in ("accepted", "declined")}
    offset = log.stat().st_size
    env = {"KAGENT_MEMORY_SCOPE_PUBLIC_KEYS": public_key_pem(BRIDGE_KEY).decode(),
           "KAGENT_MEMORY_SCOPE_ISSUER": ISSUER}
    try:
        with serve(dsn, local_server=LOCAL, env=env) as url:
            asyncio.run(_scenario(url, sentinels))
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN: the compiled controller is unavailable ({exc})")
    text = _wait_for_marker(admin, log, offset)
    leaked = [kind for kind, s in sentinels.items() if s in text or _byte_list(s[:24]) in text]
    assert leaked == [], f"sentinels in the server log: {leaked}"
