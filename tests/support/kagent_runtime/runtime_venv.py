"""The kagent-adk 0.9.11 runtime the patch tests run against, in its own cached virtualenv.

``pip install -c <constraints> kagent-adk==0.9.11`` (upstream's ``python/uv.lock`` pins, see
``patches/kagent-v0.9.11/constraints.txt``) plus what the test controller needs; about 1.5-2
minutes and 840 MB the first time, then reused.  The cache lives in
``$KGM_KAGENT_VENV_CACHE`` (default ``~/.cache/kagent-governed-memory/kagent-adk-0.9.11``),
one directory per hash of (tooling version, Python version, constraints file, requirements).

A venv is built in a temporary directory next to its final place and renamed only once it is
complete and imports; a lock file serialises builders, so concurrent pytest processes build it
once.  Only ``bin/python`` is used afterwards (the renamed venv's console scripts would carry
the temporary path in their shebangs).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

KAGENT_ADK_VERSION = "0.9.11"
KAGENT_ADK = f"kagent-adk=={KAGENT_ADK_VERSION}"
# The kagent-adk releases the Python series is carried on: 0.9.11 (the main target) and
# 0.9.12 (kagent v0.9.12; its python/ tree and uv.lock are those of v0.9.11 except the
# versions of kagent's own workspace packages, hence constraints-0.9.12.txt).
KAGENT_ADK_VERSIONS = (KAGENT_ADK_VERSION, "0.9.12")
# The library's own runtime dependencies that the kagent venv lacks (the repository itself is
# put on PYTHONPATH, never installed, so the cache does not depend on where it is checked out),
# and pytest for the unit tests the series adds (versions as upstream's lock pins them).
EXTRA = ("psycopg[binary]==3.3.9", "psycopg-pool==3.3.3", "pgvector==0.5.1",
         "pytest==9.1.1", "pytest-asyncio==1.4.0")
_TOOLING_VERSION = "1"
_COMPLETE = "kgm-venv-complete.json"
_STALE_SECONDS = 3 * 3600


class RuntimeUnavailable(RuntimeError):
    pass


def default_constraints(repo_root: Path, version: str = KAGENT_ADK_VERSION) -> Path:
    """The repository's copy of upstream's lock for kagent-adk ``version``
    (``patches/kagent-v0.9.11/constraints.txt`` for 0.9.11, exported from kagent's
    ``python/uv.lock`` at the tag; ``constraints-<version>.txt`` for the other carry targets),
    unless overridden by ``KGM_KAGENT_CONSTRAINTS`` (0.9.11 only)."""
    if version not in KAGENT_ADK_VERSIONS:
        raise ValueError(f"unknown kagent-adk carry target {version!r}")
    override = os.environ.get("KGM_KAGENT_CONSTRAINTS")
    if override and version == KAGENT_ADK_VERSION:
        return Path(override)
    name = "constraints.txt" if version == KAGENT_ADK_VERSION else f"constraints-{version}.txt"
    return repo_root / "patches" / "kagent-v0.9.11" / name


def cache_root(version: str = KAGENT_ADK_VERSION) -> Path:
    override = os.environ.get("KGM_KAGENT_VENV_CACHE")
    if override:
        return Path(override) if version == KAGENT_ADK_VERSION else Path(override) / version
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kagent-governed-memory" / f"kagent-adk-{version}"


def venv_key(constraints: bytes, version: str = KAGENT_ADK_VERSION) -> str:
    h = hashlib.sha256()
    for part in (_TOOLING_VERSION, sys.implementation.name, f"{sys.version_info[:2]}",
                 f"kagent-adk=={version}", *EXTRA):
        h.update(part.encode() + b"\0")
    h.update(constraints)
    return h.hexdigest()[:16]


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(constraints: Path, version: str = KAGENT_ADK_VERSION) -> tuple[Path, bool]:
    """The ready venv of kagent-adk ``version`` for ``constraints`` and whether this call
    built it."""
    if not constraints.is_file():
        raise RuntimeUnavailable(
            f"kagent-adk constraints not found at {constraints}: the kagent runtime tests need "
            "upstream's v0.9.11 lock as pip constraints (patches/kagent-v0.9.11/constraints.txt, "
            "or KGM_KAGENT_CONSTRAINTS=<file>)"
        )
    key = venv_key(constraints.read_bytes(), version)
    root = cache_root(version)
    final = root / key
    if _complete(final):
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{key}.lock"):
        if _complete(final):  # built by another process while we waited
            return final, False
        _remove_stale(root, key)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            _build(tmp, constraints, version)
            (tmp / _COMPLETE).write_text(json.dumps({
                "key": key, "kagent_adk": f"kagent-adk=={version}", "extra": list(EXTRA),
                "constraints": str(constraints), "python": sys.version.split()[0],
                "built_at": time.time(),
            }))
            if final.exists():  # an incomplete leftover (no marker): replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final, True


def _complete(venv: Path) -> bool:
    return (venv / _COMPLETE).is_file() and python_of(venv).exists()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _remove_stale(root: Path, key: str) -> None:
    """Temporary build dirs of crashed builders (we hold the lock: nobody is building)."""
    for leftover in root.glob(f".{key}-*"):
        with contextlib.suppress(OSError):
            shutil.rmtree(leftover)
    for leftover in root.glob(".*-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(leftover)


def _build(venv: Path, constraints: Path, version: str) -> None:
    _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
    python = str(python_of(venv))
    spec = f"kagent-adk=={version}"
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q",
          "-c", str(constraints), spec, *EXTRA], f"pip install {spec}", timeout=1800)
    _run([python, "-c", "import kagent.adk._memory_service, psycopg, pgvector, psycopg_pool, pytest"],
         "import check")


def _run(cmd: list[str], what: str, timeout: float = 600) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeUnavailable(f"{what} failed (exit {done.returncode}):\n{tail}")
