"""The Go half of the patch series, checked the way kagent's CI would, on this machine.

On each kagent tree ``go_controller.build(tag)`` makes (each tag of ``go_controller.TAGS``,
v0.9.11 and v0.9.12, + the Go patches, via ``git am``):

* ``scripts/series verify --series v0.9.11 --lint``: every Go commit builds, vets, is
  gofmt-clean and
  regenerates byte-identically with sqlc v1.30.0; golangci-lint v2.12.2 at the top;
* ``scripts/series go-db-tests``: kagent's own Go tests of the touched packages and the
  series' new ones, ``go test -race``, against the embedded PostgreSQL (the governed tables as
  the EXECUTE-only roles).

Both tags share GOCACHE and GOMODCACHE, so the second tag mostly reuses the first one's
build of kagent's packages.  Without Go or kagent's source both are reported as NOT RUN (skipped with the reason, shown in
pytest's summary); nothing passes silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.go_controller import TAGS, Unavailable, build
from support.tmp_guard import original_tmpdir

# the Go patch series: go_controller.build compiles the controller stand-in on each tag
pytestmark = [pytest.mark.series, pytest.mark.controller]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=TAGS)
def tag(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def go_tree(tag: str) -> Path:
    try:
        tree, _, _ = build(tag)
    except Unavailable as exc:
        pytest.skip(f"GO VERIFICATION NOT RUN ({tag}): {exc}")
    return tree


def _run(script: str, *args: str) -> tuple[int, str, float]:
    started = time.monotonic()
    # the Go series' worktree sits at a fixed path outside the session's private TMPDIR: the
    # caches of golangci-lint and the go command are keyed by it (scripts/series verify)
    workdir = Path(original_tmpdir()) / f"verify-go-series-{os.getuid()}"
    env = {**os.environ, "VERIFY_GO_SERIES_WORKDIR": str(workdir)}
    done = subprocess.run([sys.executable, str(REPO / "scripts/series"), *script.split(), *args],
                          env=env,
                          capture_output=True, text=True, timeout=2400, check=False)
    took = time.monotonic() - started
    print(f"{script}: exit {done.returncode} in {took:.0f} s\n{done.stdout[-6000:]}")
    return done.returncode, done.stdout + done.stderr, took


def test_every_go_commit_builds_vets_formats_regenerates_and_lints(go_tree: Path,
                                                                    tag: str) -> None:
    code, out, _ = _run("verify --series v0.9.11", "--tree", str(go_tree), "--base", tag, "--lint")
    if code == 3:
        pytest.skip(f"GO VERIFICATION NOT RUN ({tag}): go not found")
    assert code == 0, out[-8000:]


def test_kagent_go_tests_pass_on_the_patched_tree(go_tree: Path, tag: str) -> None:
    code, out, _ = _run("go-db-tests", "--tree", str(go_tree))
    if code == 3:
        pytest.skip(f"GO DB TESTS NOT RUN ({tag}): go not found")
    assert code == 0, out[-8000:]
