"""kagent's OWN kagent-adk unit tests (tag v0.9.11) against the PATCHED package.

The Python series (patches/kagent-v0.9.11/01xx) must leave legacy memory exactly as v0.9.11
ships it, and may only add test files.  This runs upstream's unchanged
``python/packages/kagent-adk/tests/unittests`` (taken with ``git archive v0.9.11`` from the
kagent source: ``$KGM_KAGENT_SRC``, else this workplace's mirror -- see tests/support/go_controller.py)
with the kagent venv's pytest (tests/support/kagent_runtime/runtime_venv.py: kagent-adk 0.9.11 under
upstream's lock, pytest and pytest-asyncio as the lock pins them) against the installed package
copied and patched with the series.  Upstream's ``[tool.pytest.ini_options]`` (asyncio_mode
auto) comes from the same tag's ``pyproject.toml``.  The TLS fixtures upstream git-ignores
(``tests/fixtures/certs/*.pem``) are generated with openssl as its README says.

Any failing upstream test fails this test.  It is skipped -- loudly, "NOT RUN" -- only when the
kagent source is unavailable; ``KGM_SKIP_KAGENT_RUNTIME=1`` skips it like the other runtime
tests.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from support.go_controller import TAG, Unavailable, kagent_source
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

# the Python patch series in the kagent venv, under kagent's own unit tests
pytestmark = pytest.mark.series

REPO = Path(__file__).resolve().parents[2]
ADK = "python/packages/kagent-adk"
TIMEOUT = 900

if os.environ.get("KGM_SKIP_KAGENT_RUNTIME", "").strip() not in ("", "0"):
    pytest.skip("KGM_SKIP_KAGENT_RUNTIME is set", allow_module_level=True)


def _upstream_tests(dest: Path) -> Path:
    """kagent-adk's tests/ and pyproject.toml at the tag, under ``dest``; the package dir."""
    try:
        src = kagent_source()
    except Unavailable as exc:
        pytest.skip(f"KAGENT'S OWN TESTS NOT RUN: {exc}")
    git_dir = ["git", "-C", str(src)]
    if subprocess.run([*git_dir, "rev-parse", "-q", "--verify", f"refs/tags/{TAG}"],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip(f"KAGENT'S OWN TESTS NOT RUN: {src} has no tag {TAG}")
    done = subprocess.run([*git_dir, "archive", "--format=tar", TAG, f"{ADK}/tests",
                           f"{ADK}/pyproject.toml"], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest / ADK


def _generate_certs(certs: Path) -> None:
    """Upstream's README commands (RSA 2048 and 2 days instead of 4096 and 365: faster)."""
    if (certs / "server-cert.pem").exists():
        return
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed for kagent's TLS test fixtures (tests/fixtures/certs)"
    subj_ca = "/CN=Test CA/O=Kagent Test/OU=Test"
    subj_server = "/CN=localhost/O=Kagent Test/OU=Test Server"
    (certs / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for cmd in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out",
         "ca-cert.pem", "-days", "2", "-subj", subj_ca, "-extensions", "v3_ca", "-config",
         "ca-extensions.conf"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out",
         "server-req.pem", "-subj", subj_server],
        ["x509", "-req", "-in", "server-req.pem", "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem",
         "-CAcreateserial", "-out", "server-cert.pem", "-days", "2", "-extfile", "san.ext"],
    ):
        done = subprocess.run([openssl, *cmd], cwd=certs, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr[-2000:]


def test_kagents_own_unit_tests_pass_against_the_patched_package(tmp_path):
    adk = _upstream_tests(tmp_path / "kagent")
    unittests = adk / "tests" / "unittests"
    assert unittests.is_dir(), f"no tests/unittests in kagent-adk at {TAG}"
    _generate_certs(adk / "tests" / "fixtures" / "certs")
    try:
        venv, _ = ensure_venv(default_constraints(REPO))
    except RuntimeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    python = python_of(venv)
    patched = copy_package(site_packages(python) / "kagent", tmp_path / "patched")
    # the series' own new test files go elsewhere: only upstream's tests run here
    apply_series(python_patches(), patched, tmp_path / "series-tests")
    upstream_files = sorted(p.relative_to(unittests).as_posix() for p in unittests.rglob("test_*.py"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"PYTHONPATH": str(patched), "PYTHONDONTWRITEBYTECODE": "1"})
    started = time.monotonic()
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/unittests"],
        cwd=adk, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    output = done.stdout + done.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    print(f"kagent-adk {TAG} unit tests ({len(upstream_files)} files) against the patched "
          f"package: {summary} ({time.monotonic() - started:.1f}s)")
    assert done.returncode == 0, output[-8000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 300, summary  # 318 at v0.9.11
    assert not re.search(r"\d+ (failed|error)", summary), summary
    # the patched package really was the one under test
    probe = subprocess.run([str(python), "-c", "import kagent.adk._governed_memory_service as m;"
                            " print(m.__file__)"], env=env, capture_output=True, text=True,
                           check=False)
    assert probe.stdout.strip().startswith(str(patched)), probe.stderr
