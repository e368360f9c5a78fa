"""A true install, as docs/install.md tells it: the wheel built from this repository, installed
with the ``embedded`` extra into a fresh virtual environment (not editable), and the console
script's demo run from a directory outside the repository.

Takes about 20 s with a warm pip cache (the build backend, hatchling, and the dependencies come
from the configured index or the cache; no index serves kagent-governed-memory itself)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "kagent_governed_memory" / "sql" / "migrations"


def _run(*args: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done


def test_the_built_wheel_installs_into_a_fresh_venv_and_runs_the_demo(tmp_path):
    # nothing of this checkout may leak in: no PYTHONPATH, no KGM_* settings, no active venv
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("KGM_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # the new installation's root-safe pg_ctl wrapper and the demo's cluster go here, removed
    # below (short: the demo's Unix socket path must stay under 108 bytes)
    env["TMPDIR"] = scratch = tempfile.mkdtemp(prefix="kgm-inst-")
    try:
        _install_and_run_the_demo(tmp_path, env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _install_and_run_the_demo(tmp_path: Path, env: dict[str, str]) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT,
         cwd=outside, env=env)
    [wheel] = dist.glob("kagent_governed_memory-*-py3-none-any.whl")

    names = set(zipfile.ZipFile(wheel).namelist())
    assert "kagent_governed_memory/py.typed" in names
    shipped = {Path(n).name for n in names
               if n.startswith("kagent_governed_memory/sql/migrations/")}
    in_repo = {p.name for p in MIGRATIONS.glob("*.sql")}
    assert in_repo and shipped == in_repo  # every up and down migration, nothing else
    assert "kagent_governed_memory/sql/queries.sql" in names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=outside, env=env)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", f"{wheel}[embedded]", cwd=outside, env=env)

    where = _run(python, "-c", "import kagent_governed_memory as k; print(k.__file__)",
                 cwd=outside, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT), where

    demo = _run(venv / "bin" / "kagent-governed-memory", "demo", "--json", cwd=outside, env=env)
    body = json.loads(demo.stdout)
    assert body["ok"] is True
    steps = {s["step"]: s["outcome"] for s in body["steps"]}
    assert steps["save before consent"] == "refused: consent_required"
    assert steps["raw SQL on memory_entry as the application login"].startswith("refused")
    assert steps["withdraw"] == "disabled, deleted 2, verified True"
    assert steps["late save with the old generation"] == "refused: stale_generation"
    assert list(outside.iterdir()) == []  # the demo leaves nothing where it ran
