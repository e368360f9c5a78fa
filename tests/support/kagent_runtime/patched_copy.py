"""The installed kagent-adk 0.9.11 package, copied and patched with the Python series (01xx).

Shared by tests/series/test_kagent_patch.py (the runtime driver and the series' own unit tests) and
tests/series/test_kagent_upstream_tests.py (kagent's own unit tests against the patched package).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PATCHES = REPO / "patches" / "kagent-v0.9.11"


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def python_patches() -> list[Path]:
    patches = sorted(PATCHES.glob("01[0-9][0-9]-*.patch"))
    assert patches, f"no Python runtime patches (01xx-*.patch) in {PATCHES}"
    return patches


def copy_package(kagent_dir: Path, target: Path) -> Path:
    dest = target / "kagent" / "adk"
    shutil.copytree(kagent_dir / "adk", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return target


SRC = "diff --git a/python/packages/kagent-adk/src/kagent/adk/"
NEW_TESTS = "diff --git a/python/packages/kagent-adk/tests/unittests/test_"
FIXTURES = "diff --git a/python/packages/kagent-adk/tests/fixtures/"


def _sections(patch: Path, prefix: str | tuple[str, ...]) -> str:
    """Only the file sections of ``patch`` whose ``diff --git`` header starts with ``prefix``
    (``git apply -pN`` refuses a patch with any path shorter than N components, e.g.
    ``python/uv.lock``, even when ``--include`` would skip it)."""
    text = patch.read_text()
    parts = text.split("\ndiff --git ")
    kept = ["diff --git " + p for p in parts[1:] if ("diff --git " + p).startswith(prefix)]
    return "\n".join(k.rstrip("\n") for k in kept) + "\n"


def _git_apply(patch: Path, root: Path, strip: int, include: str, expected: int,
               prefix: str | tuple[str, ...]) -> None:
    """``--include`` silently skips what it does not match: count what it would apply first."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)}
    base = ["git", "apply", f"-p{strip}", f"--include={include}"]
    body = _sections(patch, prefix)
    stat = subprocess.run([*base, "--numstat", "-"], cwd=root, env=env, input=body,
                          capture_output=True, text=True, check=False)
    assert len(stat.stdout.splitlines()) == expected, (patch.name, stat.stdout, stat.stderr)
    done = subprocess.run([*base, "-"], cwd=root, env=env, input=body, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, (
        f"{patch.name} does not apply to the installed kagent-adk:\n{done.stderr}")


def apply_series(patches: list[Path], package_root: Path, tests_root: Path) -> None:
    """Source hunks → the package copy (``-p5``: ``python/packages/kagent-adk/src/kagent/adk/x``
    → ``kagent/adk/x``); the unit-test files the series adds, and its test fixtures
    (``tests/fixtures/``) → ``tests_root`` (``-p4``).  The series never modifies one of kagent's
    own tests (asserted here): a later patch may change only test files an earlier patch of the
    series added.  A patch may change tests only (no source).
    ``pyproject.toml``/``uv.lock`` are left out (the venv is built from upstream's lock, which
    already installs ``pyjwt[crypto]`` through agentsts-core)."""
    tests_root.mkdir(parents=True, exist_ok=True)
    added: set[str] = set()  # test files added by the series so far
    for patch in patches:
        text = patch.read_text()
        headers = [line for line in text.splitlines() if line.startswith("diff --git ")]
        src = [h for h in headers if h.startswith(SRC)]
        new_tests = [h for h in headers if h.startswith(NEW_TESTS) or h.startswith(FIXTURES)]
        others = [h for h in headers if h not in src and h not in new_tests]
        assert src or new_tests, f"{patch.name} changes no kagent-adk source and no test"
        packaging = ("python/packages/kagent-adk/pyproject.toml", "python/uv.lock")
        assert all(h.endswith(packaging) for h in others), (patch.name, others)
        test_sections = ["diff --git " + p for p in text.split("\ndiff --git ")[1:]
                         if ("diff --git " + p).startswith((NEW_TESTS, FIXTURES))]
        for section in test_sections:
            header = section.split("\n", 1)[0]
            if "\nnew file mode " in section.split("\n@@", 1)[0]:
                added.add(header)
            else:
                assert header in added, f"{patch.name} modifies kagent's own tests: {header}"
        if src:
            _git_apply(patch, package_root, 5, "kagent/adk/*", len(src), SRC)
        if new_tests:
            _git_apply(patch, tests_root, 4, "tests/*", len(new_tests), (NEW_TESTS, FIXTURES))
