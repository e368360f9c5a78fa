"""``scripts/series verify``: verify a patch series, on a tag or on kagent main.

Three forms:

* ``series verify`` -- everything, from a clean clone, on both carry targets v0.9.11 and
  v0.9.12 (the tip of release/v0.9.x) and on kagent main:

  1. the SQL carried by the v0.9.11 Go patches is byte-identical to the library's
     (``sync-sql --series v0.9.11 --check``);
  2. the series applies with ``git am`` to tags v0.9.11 and v0.9.12 (when ``KAGENT_SRC``
     names a kagent clone or mirror; without one this step is reported as not run);
  3. the migrations upgrade a database holding upstream's 000001-000003 and old rows, and roll
     back; the Python patches pass against the real kagent-adk 0.9.11, with the Python
     stand-in controller and with the controller compiled from the Go series
     (``test_patches.py``, ``test_kagent_patch.py``); the contract scenarios pass on the
     library and on that controller (``test_contract.py``); every Go commit builds, vets, is
     gofmt-clean and regenerates with sqlc v1.30.0, golangci-lint v2.12.2 passes, and kagent's
     Go tests of the touched packages pass with -race on the embedded PostgreSQL
     (``test_go_series.py``: ``verify --series v0.9.11`` and ``go-db-tests``), on both tags;
     the Python patches also on the kagent-adk 0.9.12 wheel (``test_kagent_patch.py``);
  4. the upstream path on kagent main (``patches/kagent-main/``, ``test_kagent_main.py``:
     ``verify --series main``): each small PR applies and passes alone on the snapshot in
     ``patches/kagent-main/BASE``, all apply in order, kagent's Go tests of the touched
     packages pass with -race, the Python PR passes in main's own lock.

  The Go steps use ``KGM_KAGENT_SRC`` (default: ``KAGENT_SRC``) and say NOT RUN where Go or
  kagent's source is missing.  ``PYTHON`` (default ``.venv/bin/python``) runs the tests.

* ``series verify --series v0.9.11 --tree KAGENT [--base TAG] [--lint] ...`` -- every Go
  commit of a kagent tree whose HEAD is a series on top of ``--base`` (``verify_tag.py``; the
  v0.9.11 series is checked on v0.9.11 and v0.9.12 this way, and each kagent main PR by
  ``--series main``'s ``go`` step);
* ``series verify --series main [--src KAGENT] [--step STEP]... [--no-lint]
  [--substrate-src SUBSTRATE]`` -- ``patches/kagent-main/`` as kagent's CI would
  (``verify_main.py``).

``series verify --series v0.9.11 --help`` and ``series verify --series main --help`` list
each form's options.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import REPO, command

SERIES = ("v0.9.11", "main")
TAGS = ("v0.9.11", "v0.9.12")
# the test files the whole verification runs, found by name anywhere under tests/
TESTS = ("test_patches.py", "test_kagent_patch.py", "test_contract.py", "test_go_series.py",
         "test_kagent_main.py")
PROG = "series verify"


def split_series(argv: list[str]) -> tuple[str | None, list[str]] | str:
    """(``--series`` value or None, the other arguments), or an error message."""
    rest: list[str] = []
    series: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--series" or arg.startswith("--series="):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                return "--series needs a value: " + " or ".join(SERIES)
            if value not in SERIES:
                return f"--series {value!r}: choose from {', '.join(SERIES)}"
            series = value
        else:
            rest.append(arg)
        i += 1
    return series, rest


def test_files() -> list[str]:
    found = []
    for name in TESTS:
        paths = sorted((REPO / "tests").rglob(name))
        if not paths:
            raise FileNotFoundError(f"no {name} under {REPO / 'tests'}")
        found.append(str(paths[0].relative_to(REPO)))
    return found


def verify_all() -> int:
    """The whole verification (the first form of the module's docstring)."""
    os.chdir(REPO)
    py = os.environ.get("PYTHON") or ".venv/bin/python"
    env = {**os.environ,
           "KGM_KAGENT_SRC": os.environ.get("KGM_KAGENT_SRC") or os.environ.get("KAGENT_SRC", "")}
    done = subprocess.run([py, *command("sync-sql", "--series", "v0.9.11", "--check")[1:]],
                          env=env, check=False)
    if done.returncode != 0:
        return done.returncode
    kagent_src = os.environ.get("KAGENT_SRC")
    if kagent_src:
        series = sorted(str(p) for p in (REPO / "patches" / "kagent-v0.9.11").glob("*.patch"))
        with tempfile.TemporaryDirectory() as work:
            for tag in TAGS:
                tree = Path(work) / f"kagent-{tag}"
                for cmd in (["git", "clone", "-q", kagent_src, str(tree)],
                            ["git", "-C", str(tree), "checkout", "-q", tag],
                            ["git", "-C", str(tree), "-c", "user.name=verify", "-c",
                             "user.email=verify@localhost", "am", "-q", *series]):
                    done = subprocess.run(cmd, check=False)
                    if done.returncode != 0:
                        return done.returncode
                count = subprocess.run(["git", "-C", str(tree), "rev-list", "--count",
                                        f"{tag}..HEAD"], capture_output=True, text=True,
                                       check=True).stdout.strip()
                print(f"verify-patches: the series applies to {tag} ({count} commits)",
                      flush=True)
    else:
        print("verify-patches: KAGENT_SRC not set: git am against v0.9.11 and v0.9.12 NOT run",
              flush=True)
    return subprocess.run([py, "-m", "pytest", "-q", *test_files()], env=env,
                          check=False).returncode


def main(argv: list[str]) -> int:
    parsed = split_series(argv)
    if isinstance(parsed, str):
        print(f"{PROG}: {parsed}", file=sys.stderr)
        return 2
    series, rest = parsed
    if series == "v0.9.11":
        from . import verify_tag

        return verify_tag.main(rest, prog=f"{PROG} --series v0.9.11")
    if series == "main":
        from . import verify_main

        return verify_main.main(rest, prog=f"{PROG} --series main")
    if rest in (["-h"], ["--help"]):
        print(f"usage: {PROG} [--series {{{','.join(SERIES)}}}] ...\n\n{__doc__}")
        return 0
    if rest:
        print(f"{PROG}: {' '.join(rest)}: the whole verification takes no argument (its "
              "environment: KAGENT_SRC, KGM_KAGENT_SRC, PYTHON); with options, name a "
              "--series", file=sys.stderr)
        return 2
    return verify_all()
