"""Issue 25 item 4: PostgreSQL's server log is no sink for memory content.

The application login may set, for itself and for every later session (``ALTER ROLE kgm_app
SET``), the parameters that write a failing statement's bound parameters
(``log_parameter_max_length_on_error``), plan and parse trees (``debug_print_*``: a fact folded
into a ``Const`` is printed as its bytes) or a failing ``INTO STRICT``'s parameters
(``plpgsql.print_strict_params``) to the server log; the database owner may set them for the
database.  The library pins them as connection options, which beat those defaults, and
``GovernedMemoryStore.open()`` refuses a connection that does not hold them.

The server log is read as a file (``postgresql_proc.logfile``: the server's stderr; the test
server runs no logging collector), from where it stood when the test started.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import struct
from pathlib import Path

import psycopg
import pytest
from support.db import migrated, open_store
from support.scopes import make_key, vec
from support.settings import LOCAL
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from kagent_governed_memory import (
    ConsentRequired,
    FactTooLarge,
    GovernedMemoryStore,
    InvalidInput,
    ReasonCode,
    StaleGeneration,
)
from kagent_governed_memory.store import PIN_OPTIONS, PINNED_LOG_SETTINGS, pinned_dsn
from kagent_governed_memory.store import _store as store_module
from kagent_governed_memory.policy import PROTOTYPE_POLICY

PURPOSE = "personal_preferences"
# Each pinned setting at a value that writes content to the server log.
LEAKING = {
    "log_parameter_max_length_on_error": "-1",
    "debug_print_parse": "on",
    "debug_print_rewritten": "on",
    "debug_print_plan": "on",
    "plpgsql.print_strict_params": "on",
}
assert set(LEAKING) | {"local_preload_libraries"} == {n for n, _ in PINNED_LOG_SETTINGS}


class ServerLog:
    """The server log from a starting offset; a sentinel is found as text, as the decimal
    byte list a node dump prints for a ``Const`` (``[ 83 69 78 … ]``, signed chars), and
    whitespace-insensitively."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = path.stat().st_size

    def text(self) -> str:
        with self.path.open("rb") as f:
            f.seek(self.start)
            return f.read().decode("utf-8", "replace")

    @staticmethod
    def _bytes(raw: bytes) -> str:
        return " ".join(str(b - 256 if b > 127 else b) for b in raw)

    def forms(self, sentinel: str | float) -> list[str]:
        if isinstance(sentinel, float):
            text = f"{sentinel:.7g}"
            return [text, self._bytes(struct.pack("<f", sentinel)),
                    self._bytes(struct.pack(">f", sentinel))]
        return [sentinel, self._bytes(sentinel.encode())]

    def leaked(self, sentinels: list[str | float]) -> list[str]:
        log = self.text()
        flat = re.sub(r"\s+", " ", log)
        return [form for s in sentinels for form in self.forms(s)
                if form in log or form in flat]


@pytest.fixture
def server_log(postgresql_proc) -> ServerLog:
    path = getattr(postgresql_proc, "logfile", None)
    if not path or not Path(path).is_file():
        pytest.skip("NOT RUN: the test server's log file is not known (postgresql_proc.logfile)")
    return ServerLog(Path(path))


def _dbname(dsn: str) -> str:
    return conninfo_to_dict(dsn)["dbname"]


def set_leaking_defaults(database, *, database_level: bool = True) -> None:
    """As the application login itself, and as the database's owner: the leaking defaults
    (plpgsql's parameter is settable once plpgsql is loaded in the session)."""
    name = _dbname(database.dsn)
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN NULL; END $$")
        for param, value in LEAKING.items():
            conn.execute(f"ALTER ROLE kgm_app SET {param} = '{value}'")
            conn.execute(f'ALTER ROLE kgm_app IN DATABASE "{name}" SET {param} = \'{value}\'')
    if database_level:
        with psycopg.connect(database.owner_dsn, autocommit=True) as conn:
            conn.execute("DO $$ BEGIN NULL; END $$")
            for param, value in LEAKING.items():
                conn.execute(f'ALTER DATABASE "{name}" SET {param} = \'{value}\'')
    # the defaults are in force for a connection without the pin
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN NULL; END $$")
        got = {p: conn.execute("SELECT current_setting(%s)", [p]).fetchone()[0] for p in LEAKING}
    assert got == LEAKING, got


@pytest.fixture
def reset_app_role(database):
    yield
    with database.admin() as conn:
        conn.execute("ALTER ROLE kgm_app RESET ALL")  # roles are shared by the test databases


def _sentinel(tag: str) -> str:
    return f"kgmsentinel{tag}{secrets.token_hex(6)}"


def _vector_with(marker: float, text: str) -> list[float]:
    v = vec(text)
    v[0] = marker
    return v


async def test_refused_and_accepted_saves_leave_no_content_in_the_server_log(
        database, server_log, reset_app_role):
    await migrated(database)
    set_leaking_defaults(database)
    s = {k: _sentinel(k) for k in ("accepted", "query", "many", "stale", "late", "bigdb", "biglib")}
    marks = {"accepted": 0.0271828, "query": 0.0314159, "stale": 0.0161803, "late": 0.0141421}

    store = await open_store(database)
    # a client whose own check allows longer facts than the consent recorded (same policy
    # version): its too-large fact passes the library's check and is refused by the database
    wide = await open_store(database)
    try:
        key, other = make_key(), make_key("@bob:example.org")
        g1 = (await store.grant(key, purpose=PURPOSE)).generation
        await store.grant(other, purpose=PURPOSE)
        await store.save(key, g1, facts=[s["accepted"]],
                         embeddings=[_vector_with(marks["accepted"], s["accepted"])])
        found = await store.search(key, g1, _vector_with(marks["query"], s["query"]))
        assert [r.text for r in found] == [s["accepted"]]
        await store.search_many(key, g1, [vec(s["many"]), vec("tea")])

        await store.forget_all(key)  # a new generation: g1 is stale
        with pytest.raises(StaleGeneration):
            await store.save(key, g1, facts=[s["stale"]],
                             embeddings=[_vector_with(marks["stale"], s["stale"])])
        g2 = await store.generation(key)
        await store.withdraw(key)  # the late save after a withdrawal
        with pytest.raises(ConsentRequired):
            await store.save(key, g2, facts=[s["late"]],
                             embeddings=[_vector_with(marks["late"], s["late"])])
        wide.policy = PROTOTYPE_POLICY.model_copy(update={"fact_max_bytes": 2048})
        big = s["bigdb"] + "x" * 600
        with pytest.raises(FactTooLarge):
            await wide.save(other, await wide.generation(other), facts=[big],
                            embeddings=[vec(big)])
        with pytest.raises(FactTooLarge):  # refused by the library: no round trip
            await store.save(other, await store.generation(other),
                             facts=[s["biglib"] + "x" * 600], embeddings=[vec("x")])
    finally:
        await wide.close()
        await store.close()

    # the log is the one the server writes: a superuser's LOG line reaches it
    marker = _sentinel("marker")
    with database.admin() as conn:
        conn.execute(f"DO $$ BEGIN RAISE LOG '{marker}'; END $$")
    for _ in range(600):  # up to 30 s (a loaded machine), done as soon as it is written
        if marker in server_log.text():
            break
        await asyncio.sleep(0.05)
    assert marker in server_log.text(), "the server log read is not the server's"
    assert server_log.leaked([*s.values(), *marks.values()]) == []


async def test_open_refuses_a_connection_that_does_not_hold_the_pinned_settings(
        database, reset_app_role, monkeypatch):
    """A connection path that drops the options (a pooler ignoring the ``options`` startup
    parameter): the role's leaking defaults are in force and open() says so."""
    await migrated(database)
    set_leaking_defaults(database, database_level=False)
    monkeypatch.setattr(store_module, "pinned_dsn", lambda dsn: dsn)
    with pytest.raises(InvalidInput) as err:
        await open_store(database)
    assert err.value.reason is ReasonCode.LOG_SETTINGS_UNSAFE
    assert err.value.ids == {"setting": "log_parameter_max_length_on_error"}
    assert "-1" not in str(err.value)
    from kagent_governed_memory.cli import EXIT_CONFIGURATION, exit_code
    assert exit_code(err.value.reason) == EXIT_CONFIGURATION  # a setup error, not an outage


LEAKING_SET = {**LEAKING, "local_preload_libraries": "auto_explain"}


@pytest.mark.parametrize("param", sorted(LEAKING_SET))
async def test_open_refuses_a_setting_overridden_on_the_connection(database, monkeypatch, param):
    """A connection-level override after the pin (here: a SET on each new connection)."""
    await migrated(database)
    configure = GovernedMemoryStore._configure

    async def overriding(self, conn):
        await configure(self, conn)
        await conn.execute("DO $$ BEGIN NULL; END $$")
        await conn.execute(f"SET {param} = '{LEAKING_SET[param]}'")

    monkeypatch.setattr(GovernedMemoryStore, "_configure", overriding)
    with pytest.raises(InvalidInput) as err:
        await open_store(database)
    assert err.value.reason is ReasonCode.LOG_SETTINGS_UNSAFE
    assert err.value.ids == {"setting": param}


async def test_the_dsn_options_are_kept_and_the_pin_wins(database, reset_app_role, monkeypatch):
    await migrated(database)
    set_leaking_defaults(database, database_level=False)
    own = "-c statement_timeout=4321 -c debug_print_plan=on"
    dsn = make_conninfo(database.dsn, options=own)
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=999")  # not used: the DSN has options
    store = await GovernedMemoryStore.open(dsn, local_server=LOCAL, sweep_every=None)
    try:
        async with store._pool.connection() as conn:
            got = dict(await (await conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                [["statement_timeout", "lock_timeout", *LEAKING]])).fetchall())
    finally:
        await store.close()
    assert got["statement_timeout"] == "4321" and got["lock_timeout"] == "0"
    assert {p: got[p] for p in LEAKING if p in got} == {
        p: v for p, v in PINNED_LOG_SETTINGS if p in got}

    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=999")  # used: the DSN has none
    assert pinned_dsn(database.dsn).endswith(f"options='-c lock_timeout=999 {PIN_OPTIONS}'")


async def test_a_preload_library_default_cannot_lock_out_or_load_into_the_login(
        database, reset_app_role):
    """``local_preload_libraries`` is the login's own to set: a module from $libdir/plugins in
    every later session (or, naming none, no session at all)."""
    await migrated(database)
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute("ALTER ROLE kgm_app SET local_preload_libraries = 'auto_explain'")
    store = await open_store(database)
    try:
        async with store._pool.connection() as conn:
            row = await (await conn.execute("SHOW local_preload_libraries")).fetchone()
        assert row == ("",)
    finally:
        await store.close()


def test_every_connection_the_library_opens_is_pinned(database, monkeypatch):
    """migrate(), the login probes (store and CLI), the demo's raw-SQL probe and the dev
    database's preparation connect through pinned_dsn."""
    from kagent_governed_memory.cli import _demo as _cli_demo
    from kagent_governed_memory.cli import _main as cli
    from kagent_governed_memory.dev import _embedded
    from kagent_governed_memory.store import _migrations as migrations
    from kagent_governed_memory.store import _pgtypes

    seen: list[str] = []

    class Stop(Exception):
        pass

    async def aconnect(conninfo, **kw):
        seen.append(conninfo)
        raise psycopg.OperationalError("stop")

    def connect(conninfo, **kw):
        seen.append(conninfo)
        raise Stop

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", aconnect)
    monkeypatch.setattr(psycopg, "connect", connect)

    async def run() -> None:
        for call in (lambda: migrations.migrate(database.owner_dsn),
                     lambda: _pgtypes._login_probe(database.dsn, 1),
                     lambda: cli._probe_login(database.dsn),
                     lambda: _cli_demo._raw_sql_refused(database.dsn)):
            try:
                await call()
            except Exception:  # noqa: BLE001 - each stops at its connection
                pass

    asyncio.run(run())
    with pytest.raises(Stop):
        _embedded.prepare_app_database(database.admin_dsn, "t_never_created")
    assert len(seen) == 5
    for conninfo in seen:
        assert conninfo_to_dict(conninfo).get("options", "").endswith(PIN_OPTIONS), conninfo
