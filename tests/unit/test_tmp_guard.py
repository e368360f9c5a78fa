"""The session-end check of tests/support/tmp_guard.py: a run that leaves a file in its TMPDIR fails and
names it; a clean run, or one that leaves only the kept pg_ctl wrapper directory, passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[1] / "support"

LEAK = '''
import os, tempfile
def test_it():
    assert os.environ["TMPDIR"] == tempfile.gettempdir() != {outer!r}
    {action}
'''


def inner_run(tmp_path: Path, action: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path / "tmp"
    root.mkdir()
    (tmp_path / "test_probe.py").write_text(
        LEAK.format(outer=str(root), action=action))
    env = {**os.environ, "TMPDIR": str(root), "PYTHONPATH": str(SUPPORT)}
    env.pop("PYTEST_DEBUG_TEMPROOT", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tmp_guard",
                           "-p", "no:cacheprovider", "test_probe.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    return done, root


def test_a_file_left_in_the_session_tmpdir_fails_the_run_and_is_named(tmp_path: Path) -> None:
    done, root = inner_run(tmp_path, 'open(os.path.join(tempfile.gettempdir(), "kgm-trace-x"), "w").close()')
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TEMPORARY FILES LEFT BEHIND" in done.stdout and "kgm-trace-x" in done.stdout
    assert os.listdir(root) == []  # the private directory itself is removed


@pytest.mark.parametrize("action", [
    "pass",
    f'os.makedirs(os.path.join(tempfile.gettempdir(), "kgm-pg-ctl-{os.getuid()}-0123abcd"))',
])
def test_a_clean_run_or_the_kept_pg_ctl_wrapper_passes(tmp_path: Path, action: str) -> None:
    done, root = inner_run(tmp_path, action)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TEMPORARY FILES LEFT BEHIND" not in done.stdout
    assert os.listdir(root) == []


def test_this_session_runs_in_a_private_tmpdir() -> None:
    import tempfile

    here = tempfile.gettempdir()
    assert os.environ["TMPDIR"] == here
    assert os.path.basename(here).startswith(f"kgm-pytest-{os.getpid()}-")
