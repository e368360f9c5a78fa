"""The development database (``dev_database``, ``kagent-governed-memory dev-db``) and the
root-safe ``pg_ctl`` wrapper it runs through, keyed by installation."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from support.scopes import make_key

from kagent_governed_memory import GovernedMemoryStore, dev_database
from kagent_governed_memory.dev import _embedded
from kagent_governed_memory.dev import DevDatabase, EmbeddedUnavailable

PURPOSE = "personal_preferences"


def _fake_install(root: Path) -> Path:
    bin_dir = root / "pginstall" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pg_ctl").write_text("#!/bin/sh\n")
    return bin_dir


def test_wrapper_is_keyed_by_installation(tmp_path, monkeypatch):
    a, b = Path("/venv-a/pginstall/bin/pg_ctl"), Path("/venv-b/pginstall/bin/pg_ctl")
    assert _embedded.wrapper_path(a) != _embedded.wrapper_path(b)
    assert _embedded.wrapper_path(a) == _embedded.wrapper_path(a)  # stable per installation
    before = _embedded.wrapper_path(a)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "another-venv"))
    assert _embedded.wrapper_path(a) != before
    assert f"-{os.getuid()}-" in before.parent.name


def test_two_installations_never_share_a_wrapper(tmp_path, monkeypatch):
    if not os.path.exists("/usr/bin/unshare") and not os.path.exists("/bin/unshare"):
        pytest.skip("no unshare")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(_embedded.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    wrappers = {}
    for name in ("checkout-a", "checkout-b"):
        bin_dir = _fake_install(tmp_path / name)
        monkeypatch.setattr(_embedded, "pg_bin_dir", lambda b=bin_dir: b)
        wrappers[name] = Path(_embedded.pg_ctl_executable())
    a, b = wrappers["checkout-a"], wrappers["checkout-b"]
    assert a != b
    assert str(tmp_path / "checkout-a") in a.read_text()
    assert str(tmp_path / "checkout-b") in b.read_text()
    assert "checkout-b" not in a.read_text()  # b's start did not rewrite a's wrapper
    assert stat.S_IMODE(a.parent.stat().st_mode) == 0o700


def test_a_wrapper_directory_others_may_write_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(_embedded.tempfile, "gettempdir", lambda: str(tmp_path))
    bin_dir = _fake_install(tmp_path / "venv")
    monkeypatch.setattr(_embedded, "pg_bin_dir", lambda: bin_dir)
    if _embedded.shutil.which("unshare") is None:
        pytest.skip("no unshare")
    planted = _embedded.wrapper_path(bin_dir / "pg_ctl").parent
    planted.mkdir()
    planted.chmod(0o777)
    with pytest.raises(EmbeddedUnavailable, match="not a private directory"):
        _embedded.pg_ctl_executable()


async def test_dev_database_gives_the_three_logins_on_the_app_database():
    async with dev_database(local_server="example.org") as db:
        assert isinstance(db, DevDatabase) and db.applied
        for dsn in (db.dsn, db.owner_dsn, db.operator_dsn, db.admin_dsn):
            assert "dbname=kgm" in dsn
        with psycopg.connect(db.admin_dsn) as conn:  # the superuser, on the app database
            assert conn.execute("SELECT current_database()").fetchone() == ("kgm",)
            assert conn.execute("SELECT count(*) FROM memory_scope").fetchone() == (0,)
        with psycopg.connect(db.dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM memory_entry")
        async with await GovernedMemoryStore.open(db.dsn, local_server=db.local_server,
                                                  sweep_every=None) as store:
            assert await store.migrate() == []
            await store.grant(make_key(), purpose=PURPOSE)
        socket_dir = db.dsn.split("host=")[1].split()[0]
        assert "password" not in repr(db) and db.admin_dsn not in repr(db)
    assert not Path(socket_dir).exists()  # stopped and removed


async def test_dev_database_keeps_a_data_dir(tmp_path):
    key = make_key()
    async with dev_database(data_dir=tmp_path / "pg") as db:
        assert db.data_dir == tmp_path / "pg"
        async with await GovernedMemoryStore.open(db.dsn, local_server=db.local_server,
                                                  sweep_every=None) as store:
            await store.grant(key, purpose=PURPOSE)
    async with dev_database(data_dir=tmp_path / "pg") as db:
        assert db.applied == ()  # already current
        async with await GovernedMemoryStore.open(db.dsn, local_server=db.local_server,
                                                  sweep_every=None) as store:
            assert (await store.status(key)).enabled


async def test_a_data_dir_that_is_not_postgresql_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(EmbeddedUnavailable, match="neither empty nor"):
        async with dev_database(data_dir=tmp_path):
            pass
    assert (tmp_path / "notes.txt").read_text() == "mine"


def _dev_db_dsn(data_dir: Path) -> tuple[dict, subprocess.Popen]:
    """Start ``dev-db --data-dir`` and read the DSNs it prints; the caller stops it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kagent_governed_memory", "dev-db", "--data-dir", str(data_dir),
         "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=60)
        raise AssertionError(proc.stderr.read()[-2000:] if proc.stderr else "no output")
    return json.loads(line), proc


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0


def test_dev_db_with_a_data_dir_prints_the_same_dsn_every_run(tmp_path):
    """`export KGM_DSN=…` from the first run still works for the second (issue 26)."""
    data_dir = tmp_path / "pg"
    first, proc = _dev_db_dsn(data_dir)
    try:
        with psycopg.connect(first["dsn"]) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("kgm_app",)
    finally:
        _stop(proc)
    second, proc = _dev_db_dsn(data_dir)
    try:
        assert second["applied"] == [] and second["dsn"] == first["dsn"]
        assert second["operator_dsn"] == first["operator_dsn"]
        # in the data directory (or, were its path too long, a stable private one)
        assert f"host={_embedded.socket_dir_for(data_dir)} " in second["dsn"]
        with psycopg.connect(second["dsn"]) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("kgm_app",)
    finally:
        _stop(proc)
    assert not list(data_dir.glob(".s.PGSQL.*"))  # the server removed its socket on stop


def test_a_data_dir_too_long_for_a_socket_gets_a_stable_private_one(tmp_path):
    long_dir = tmp_path / ("d" * 60) / ("e" * 40) / "pg"
    sock = _embedded.socket_dir_for(long_dir)
    assert sock == _embedded.socket_dir_for(long_dir)  # stable
    assert sock != _embedded.socket_dir_for(tmp_path / ("d" * 60) / ("e" * 40) / "pg2")
    assert len(str(sock / ".s.PGSQL.5432")) <= 107 and str(os.getuid()) in sock.name
    spaced = tmp_path / "my data"
    assert _embedded.socket_dir_for(spaced) != spaced  # a DSN would need quoting
    assert _embedded.socket_dir_for(tmp_path / "pg") == tmp_path / "pg"


async def test_a_long_data_dir_runs_on_its_private_socket_and_removes_it(tmp_path):
    long_dir = tmp_path / ("d" * 60) / ("e" * 40) / "pg"
    sock = _embedded.socket_dir_for(long_dir)
    dsns = []
    for _ in range(2):
        async with dev_database(data_dir=long_dir) as db:
            dsns.append(db.dsn)
            assert stat.S_IMODE(os.stat(sock).st_mode) == 0o700
            assert os.stat(sock).st_uid == os.getuid()
            with psycopg.connect(db.dsn) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        assert not sock.exists()  # removed on stop, made again on the next start
    assert dsns[0] == dsns[1] and f"host={sock} " in dsns[0]
