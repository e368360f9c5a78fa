"""Admit objects against a kagent ``main`` tree's CRDs as kube-apiserver would, without a cluster.

kagent checks its CRDs' CEL rules with envtest (a real kube-apiserver and etcd, fetched by
``make setup-envtest`` from GitHub), which machines here cannot reach: the envtest tests of a
patch are reported NOT RUN, and this script runs the same cases through
``tests/series/go_crdcheck/main.go`` instead -- apiextensions-apiserver's structural defaulting,
OpenAPI validation and CEL evaluation, built inside the tree's own module (its pinned k8s.io
versions) with the substitute ``go.mod`` of ``scripts/series standins modfile``.

Every object in ``--cases`` carries ``metadata.annotations``:

* ``kgm.test/expect``: ``accept``, or ``reject:<text>`` (some admission error contains it);
* ``kgm.test/mode`` (optional): the value ``spec.declarative.memory.mode`` must have after
  defaulting.

One PASS/FAIL line per object; exit 0 when all pass, 1 when one fails, 2 on bad arguments.
``verify()`` is what ``scripts/series verify --series main --step crd`` runs on a patched
tree: every case file of ``tests/series/kagent_main/``, and the API packages' own unit tests
with ``-race`` (their envtest tests reported NOT RUN by name).  Stdlib + PyYAML.  Usage::

    scripts/series crd --tree /path/to/kagent --cases FILE [--go GO]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from . import REPO, command

CHECKER = REPO / "tests" / "series" / "go_crdcheck" / "main.go"
CASES = REPO / "tests" / "series" / "kagent_main"
API_PACKAGES = ("./api/v1alpha2/", "./api/v1alpha3/")


def _expectations(cases: Path) -> list[tuple[str, str, str | None]]:
    out = []
    for obj in yaml.safe_load_all(cases.read_text()):
        if not obj:
            continue
        meta = obj["metadata"]
        notes = meta.get("annotations") or {}
        out.append((f'{obj["apiVersion"]} {obj["kind"]} {meta["name"]}',
                    str(notes["kgm.test/expect"]), notes.get("kgm.test/mode")))
    return out


def _build(tree: Path, go: str, work: Path) -> Path:
    gosrc = work / "tree" / "go"
    shutil.copytree(tree / "go", gosrc, ignore=shutil.ignore_patterns("bin", ".git"))
    (gosrc / "kgm-crdcheck").mkdir()
    shutil.copy(CHECKER, gosrc / "kgm-crdcheck" / "main.go")
    modfile = work / "modfile"
    subprocess.run(command("standins", "modfile", "--tree", str(work / "tree"), "--out",
                           str(modfile)), check=True, capture_output=True, text=True)
    env = {**os.environ, "GOFLAGS": f"-modfile={modfile / 'go.mod'} -mod=mod",
           "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "go1.27.3")}
    out = work / "kgm-crdcheck"
    subprocess.run([go, "build", "-o", str(out), "./kgm-crdcheck"], cwd=gosrc, env=env,
                   check=True, capture_output=True, text=True)
    return out


def _envtest_tests(gosrc: Path) -> list[str]:
    """The API packages' tests that start envtest (a kube-apiserver fetched from GitHub)."""
    names: set[str] = set()
    for pkg in API_PACKAGES:
        for test in (gosrc / pkg).glob("*_test.go"):
            for body in re.split(r"(?m)^func ", test.read_text())[1:]:
                if "envtest.Environment" in body and (m := re.match(r"(Test\w+)\(", body)):
                    names.add(m.group(1))
    return sorted(names)


def verify(tree: Path, env: dict[str, str]) -> list[tuple[str, str, float, str]]:
    """(status, what, seconds, output) lines for a patched tree; ``env`` holds GOFLAGS with the
    substitute modfile and GOTOOLCHAIN."""
    import time
    lines: list[tuple[str, str, float, str]] = []
    for cases in sorted(CASES.glob("*.yaml")):
        started = time.monotonic()
        done = subprocess.run(command("crd", "--tree", str(tree), "--cases", str(cases)),
                              env=env, capture_output=True, text=True, check=False)
        passed = done.stdout.count("\nPASS") + done.stdout.startswith("PASS")
        lines.append(("PASS" if done.returncode == 0 else "FAIL",
                      f"{passed} admission cases of {cases.name} through kube-apiserver's "
                      "validation and CEL code", time.monotonic() - started,
                      done.stdout + done.stderr))
    envtest = _envtest_tests(tree / "go")
    started = time.monotonic()
    done = subprocess.run(["go", "test", "-race", "-count=1", "-skip",
                           "^(" + "|".join(envtest) + ")$", *API_PACKAGES], cwd=tree / "go",
                          env=env, capture_output=True, text=True, check=False)
    lines.append(("PASS" if done.returncode == 0 else "FAIL",
                  "go test -race of the API packages' unit tests", time.monotonic() - started,
                  done.stdout + done.stderr))
    lines.append(("NOT RUN", "kagent's envtest tests (" + ", ".join(envtest) + "): envtest's "
                  "kube-apiserver and etcd come from GitHub, unreachable here; the admission "
                  "cases above are the same", 0.0, ""))
    return lines


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--go", default=shutil.which("go") or "go")
    args = parser.parse_args(argv)
    crds = args.tree / "go" / "api" / "config" / "crd" / "bases"
    if not crds.is_dir() or not args.cases.is_file():
        print(f"bad arguments: no {crds} or no {args.cases}", file=sys.stderr)
        return 2
    expected = _expectations(args.cases)
    with tempfile.TemporaryDirectory(prefix="kgm-crdcheck-") as tmp:
        try:
            checker = _build(args.tree, args.go, Path(tmp))
        except subprocess.CalledProcessError as failed:
            print(f"FAIL    crdcheck build: {(failed.stderr or '')[-2000:]}")
            return 1
        done = subprocess.run([str(checker), "-crds", str(crds), str(args.cases)],
                              capture_output=True, text=True, check=False)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if done.returncode not in (0, 1) or len(results) != len(expected):
        print(f"FAIL    crdcheck: {len(results)} results for {len(expected)} objects "
              f"(exit {done.returncode}): {done.stderr[-2000:]}")
        return 1
    failed = 0
    for (label, expect, mode), got in zip(expected, results, strict=True):
        errors = got.get("errors") or []
        if expect == "accept":
            ok = not errors
            if ok and mode is not None:
                spec = (got.get("defaulted") or {}).get("spec", {})
                ok = spec.get("declarative", {}).get("memory", {}).get("mode") == mode
        else:
            text = expect.removeprefix("reject:")
            ok = any(text in e for e in errors)
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}    {label}: expect {expect}"
              f"{'' if mode is None else f' (mode {mode})'}; got {errors or 'accepted'}")
    return 1 if failed else 0

