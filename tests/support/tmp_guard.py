"""The suite leaves nothing in the temporary directory (docs/testing.md).

Loaded by ``tests/conftest.py`` (its two hooks). Every temporary file of this pytest process and
its descendants (drivers, CLIs, controllers, Go builds) goes to a private directory, pointed at by
``TMPDIR`` and ``tempfile.tempdir`` for the session; at the end it must be empty but for the kept
exception below, or the run fails (exit 1) and names what was left. Runs of others sharing /tmp
are not looked at. pytest's own ``tmp_path`` stays where pytest keeps it
(``PYTEST_DEBUG_TEMPROOT`` = the original temp dir).

The one kept exception: the embedded PostgreSQL's root-safe ``pg_ctl`` wrapper, intentionally kept
per installation in ``$TMPDIR/kgm-pg-ctl-<uid>-<hash>`` (``kagent_governed_memory.dev``).
Outside the private directory on purpose: the Go series' fixed worktree
(``<original temp dir>/verify-go-series-<uid>/``, ``original_tmpdir()``).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

KEPT_TMP_PREFIXES = (f"kgm-pg-ctl-{os.getuid()}-",)
_SESSION_TMP: dict[str, str] = {}


def original_tmpdir() -> str:
    """The temporary directory before the session's private one: for what must outlive the
    session on purpose at a fixed path (the Go series' worktree, whose path golangci-lint's and
    the go command's caches are keyed by; ``scripts/series verify``)."""
    return _SESSION_TMP.get("original") or tempfile.gettempdir()


def leftover_tmp_entries(directory: str) -> list[str]:
    """Entries of ``directory`` a test left behind (everything but the kept exception)."""
    return sorted(name for name in os.listdir(directory)
                  if not name.startswith(KEPT_TMP_PREFIXES))


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or "dir" in _SESSION_TMP:
        return
    original = tempfile.gettempdir()
    private = tempfile.mkdtemp(prefix=f"kgm-pytest-{os.getpid()}-", dir=original)
    os.chmod(private, 0o1777)  # like /tmp: the embedded server runs as nobody in a namespace
    _SESSION_TMP.update(dir=private, original=original,
                        tmpdir=os.environ.get("TMPDIR", ""),
                        temproot=os.environ.get("PYTEST_DEBUG_TEMPROOT", ""))
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", original)
    os.environ["TMPDIR"] = private
    tempfile.tempdir = private


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    private = _SESSION_TMP.pop("dir", None)
    if private is None:
        return
    os.environ["TMPDIR"] = _SESSION_TMP["tmpdir"]
    if not _SESSION_TMP["tmpdir"]:
        del os.environ["TMPDIR"]
    if not _SESSION_TMP["temproot"]:
        os.environ.pop("PYTEST_DEBUG_TEMPROOT", None)
    tempfile.tempdir = None
    try:
        left = leftover_tmp_entries(private)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"TEMPORARY FILES LEFT BEHIND: the suite left {len(left)} entr"
                   f"{'y' if len(left) == 1 else 'ies'} in its TMPDIR ({', '.join(left)}): "
                   "a test must remove what it creates or use tmp_path (docs/testing.md)")
        if reporter is not None:
            reporter.write_line("")
            reporter.write_sep("!", message, red=True, bold=True)
        else:
            print(message)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
