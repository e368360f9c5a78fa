"""Check a kagent ``main`` tree's Python the way kagent's CI does (``python-test``, ``python-lint``).

In ``TREE/python``, with main's own lock and Python 3.13 (main's ``.python-version``):

* ``uv sync --frozen --all-extras`` -- the lock as checked in, nothing re-resolved (the venv,
  ``TREE/python/.venv``, is kept between runs);
* ``make generate-test-certs`` (the TLS fixtures kagent-adk's tests read);
* ``ruff check --no-fix`` and ``ruff format --diff`` on ``packages/kagent-adk``;
* ``pytest packages/kagent-adk/tests`` (``OPENAI_API_KEY=fake``, as the workflow sets it).

uv is ``$UV``, else the ``uv`` beside this interpreter (the ``test`` extra installs it), else
``uv`` on PATH.  Python 3.13 is ``$KGM_PYTHON313``, else a working ``python3.13`` on PATH, else a
pyenv or Debian install; uv is told never to download one.  Without uv or Python 3.13 the run
prints "PYTHON PR NOT RUN: <what is missing>" and exits 3.

Usage: ``scripts/series python-pr --tree /path/to/kagent``.  Exit status: 0
passed, 1 a check failed, 2 bad tree, 3 not run.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = "packages/kagent-adk"


def find_uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    for candidate in (os.environ.get("UV"), str(beside) if beside.exists() else None,
                      shutil.which("uv")):
        if candidate:
            return candidate
    return None


def find_python313() -> str | None:
    candidates = [os.environ.get("KGM_PYTHON313"), shutil.which("python3.13"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")),
                          reverse=True), "/usr/bin/python3.13", "/usr/local/bin/python3.13"]
    for candidate in candidates:
        if not candidate or not Path(candidate).exists():
            continue
        done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip() == "(3, 13)":
            return candidate
    return None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", required=True, type=Path)
    args = ap.parse_args(argv)
    python_dir = args.tree / "python"
    if not (python_dir / "uv.lock").is_file() or not (python_dir / PACKAGE).is_dir():
        print(f"verify_main_python_pr: {args.tree} has no python/uv.lock or {PACKAGE}",
              file=sys.stderr)
        return 2
    uv, python = find_uv(), find_python313()
    missing = [what for what, found in (("uv", uv), ("Python 3.13", python)) if not found]
    if missing:
        print(f"PYTHON PR NOT RUN: {' and '.join(missing)} not found "
              "(uv: the test extra; Python 3.13: KGM_PYTHON313)")
        return 3
    assert uv is not None and python is not None
    env = {**os.environ, "UV_PYTHON": python, "UV_PYTHON_DOWNLOADS": "never",
           "UV_PROJECT_ENVIRONMENT": str(python_dir / ".venv"), "OPENAI_API_KEY": "fake"}
    env.pop("VIRTUAL_ENV", None)
    steps = [
        ("uv sync", [uv, "sync", "--frozen", "--all-extras"]),
        ("test certs", ["make", "generate-test-certs"]),
        ("ruff check", [uv, "run", "--frozen", "--no-sync", "ruff", "check", "--no-fix", PACKAGE]),
        ("ruff format", [uv, "run", "--frozen", "--no-sync", "ruff", "format", "--diff", PACKAGE]),
        ("pytest", [uv, "run", "--frozen", "--no-sync", "pytest", "-q", "-p", "no:cacheprovider",
                    f"{PACKAGE}/tests"]),
    ]
    print(f"verify_main_python_pr: {python} ({uv})", flush=True)
    with tempfile.TemporaryDirectory(prefix="verify-main-python-") as tmp:
        env["TMPDIR"] = tmp  # uv leaves lock files in its temporary directory
        return _run_steps(steps, python_dir, env)


def _run_steps(steps: list[tuple[str, list[str]]], python_dir: Path,
               env: dict[str, str]) -> int:
    failed = False
    for name, cmd in steps:
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=python_dir, env=env, capture_output=True, text=True,
                              check=False)
        took = time.monotonic() - started
        tail = (done.stdout + done.stderr).strip().splitlines()
        status = "PASS" if done.returncode == 0 else "FAIL"
        summary = tail[-1] if tail and name == "pytest" else ""
        print(f"{status:5} {name:12} {took:6.1f}s  {summary}", flush=True)
        if done.returncode != 0:
            print("\n".join("    " + line for line in tail[-60:]), flush=True)
            failed = True
            if name == "uv sync":
                break
    return 1 if failed else 0

