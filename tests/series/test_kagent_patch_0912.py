"""The Python patch series on the second carry target, the real kagent-adk 0.9.12 wheel.

kagent v0.9.12's ``python/`` tree is v0.9.11's (only kagent's own workspace packages have new
versions), so the venv is built from ``patches/kagent-v0.9.11/constraints-0.9.12.txt``: the
0.9.11 lock with those versions moved to 0.9.12.  The same copy-and-patch tooling as
``tests/series/test_kagent_patch.py`` applies the series to the installed package; then

* the unit tests the series adds pass against the patched 0.9.12 copy, and
* one governed runtime scenario (the driver's ``patched`` run against the Python stand-in
  controller) passes the same gates as on 0.9.11: no collection before consent, the
  per-request gate, consented save and load, per-entry forget, no memory text in logs.

The full matrix (unpatched, legacy, dim1024, otel, the compiled controller) stays on 0.9.11
to keep CI time down.  ``KGM_SKIP_KAGENT_RUNTIME=1`` skips this module as it does the other.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from support.kagent_runtime.patched_copy import (
    apply_series,
    copy_package,
    python_patches,
    site_packages,
)
from support.kagent_runtime.runtime_venv import (
    RuntimeUnavailable,
    default_constraints,
    ensure_venv,
    python_of,
)
from psycopg.conninfo import make_conninfo

from kagent_governed_memory.dev import APP_ROLE, OWNER_ROLE, prepare_app_database

import test_kagent_patch as on_0911  # the gates, asserted the same way on both releases

# the Python patch series in the kagent-adk 0.9.12 venv
pytestmark = pytest.mark.series

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parents[1] / "support" / "kagent_runtime"
VERSION = "0.9.12"

if os.environ.get("KGM_SKIP_KAGENT_RUNTIME", "").strip() not in ("", "0"):
    pytest.skip("KGM_SKIP_KAGENT_RUNTIME is set", allow_module_level=True)


@pytest.fixture(scope="module")
def runtime_0912(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("git") is None:
        pytest.fail("git is needed to apply the patch series (git apply)", pytrace=False)
    try:
        venv, _ = ensure_venv(default_constraints(REPO, VERSION), VERSION)
    except RuntimeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    python = python_of(venv)
    installed = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('kagent-adk'))"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert installed == VERSION
    root = tmp_path_factory.mktemp("kagent-adk-0912")
    patched = copy_package(site_packages(python) / "kagent", root / "patched")
    apply_series(python_patches(), patched, root / "upstream-tests")
    return {"python": python, "patched": patched, "logs": root,
            "tests": root / "upstream-tests" / "tests" / "unittests"}


def test_series_unit_tests_pass_on_0912(runtime_0912):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KAGENT_MEMORY_SCOPE_VECTORS")}
    env.update({"PYTHONPATH": str(runtime_0912["patched"]), "PYTHONDONTWRITEBYTECODE": "1"})
    done = subprocess.run(
        [str(runtime_0912["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(runtime_0912["tests"]), str(runtime_0912["tests"])],
        cwd=runtime_0912["tests"], env=env, capture_output=True, text=True,
        timeout=on_0911.DRIVER_TIMEOUT, check=False)
    out = done.stdout + done.stderr
    files = sorted(p.name for p in runtime_0912["tests"].glob("test_*.py"))
    assert files == ["test_embedding_logs.py", "test_governed_memory_autosave.py",
                     "test_governed_memory_service.py", "test_governed_memory_telemetry.py",
                     "test_governed_memory_token.py", "test_governed_memory_tools.py",
                     "test_memory_scope.py"]
    assert done.returncode == 0, out[-6000:]
    assert " passed" in out and "failed" not in out and "skipped" not in out


@pytest.fixture(scope="module")
def governed_0912(runtime_0912, postgresql_proc) -> dict:
    """The driver's governed scenario (``patched``) on 0.9.12, against the stand-in controller
    on a database of its own."""
    name = f"n_{uuid.uuid4().hex[:16]}"
    base = make_conninfo(host=postgresql_proc.host, port=postgresql_proc.port,
                         user=postgresql_proc.user, dbname="postgres")
    prepare_app_database(base, name, template=postgresql_proc.template_dbname)
    log = runtime_0912["logs"] / "patched.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(runtime_0912["patched"]), str(REPO), str(HERE)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "KGM_TEST_DSN": make_conninfo(base, user=APP_ROLE, dbname=name),
        "KGM_TEST_ADMIN_DSN": make_conninfo(base, dbname=name),
        "KGM_TEST_OWNER_DSN": make_conninfo(base, user=OWNER_ROLE, dbname=name),
        "KGM_TEST_LOG_FILE": str(log),
    })
    try:
        done = subprocess.run([str(runtime_0912["python"]), str(HERE / "driver.py"), "patched"],
                              env=env, capture_output=True, text=True,
                              timeout=on_0911.DRIVER_TIMEOUT, check=False)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("KGM-REPORT ")]
    assert lines, f"0.9.12 driver printed no report (exit {done.returncode}):\n{done.stderr[-4000:]}"
    report = json.loads(lines[-1].removeprefix("KGM-REPORT "))
    assert "driver_error" not in report, report["driver_error"]
    assert report["memory_service_file"].startswith(str(runtime_0912["patched"]))
    report["log_file"] = str(log)
    return report


def test_governed_scenario_passes_the_gates_on_0912(governed_0912):
    on_0911.test_patched_no_collection_before_consent(governed_0912)
    on_0911.test_patched_per_request_disable_gate(governed_0912)
    on_0911.test_patched_consented_save_and_load(governed_0912)
    on_0911.test_patched_per_entry_forget(governed_0912)
    on_0911.test_patched_no_sentinel_in_logs(governed_0912)
