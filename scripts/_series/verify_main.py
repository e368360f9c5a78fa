"""Check ``patches/kagent-main/`` -- the upstream path on kagent ``main`` -- as kagent's CI would.

The series is a set of small pull requests, each standalone against the snapshot named in
``patches/kagent-main/BASE``.  Steps (each prints PASS, FAIL or NOT RUN with the reason):

* ``apply``: every patch applies alone on BASE (``git am``) -- a stacked PR, one that names
  prerequisites (``prerequisite-patch-id``), on exactly those -- and all apply in order;
* ``go``: for every patch that touches ``go/``, on BASE + that patch alone, or on the Go
  patches it names as prerequisites (``prerequisite-patch-id``) when it has any (``0011`` on
  ``0001``, ``0013`` on ``0001``+``0011``, ``0015`` on ``0010``, ``0016`` on
  ``0001``+``0010``-``0013``+``0015``, ``0017`` on ``0001``+``0010``+``0011``+``0015``), checking its
  own commit only (one tree path, reset between PRs, so the build cache carries over):
  ``scripts/series verify --series v0.9.11 --lint`` (builds, ``go vet`` and ``gofmt -l`` of the touched
  packages, ``sqlc generate`` v1.30.0 leaves the tree byte-identical, golangci-lint at main's pin
  with main's ``go/.golangci.yaml``);
* ``go-tests``: kagent's own Go tests of the touched packages and the PRs' new tests, ``go test
  -race``, on BASE + all the Go patches in order (the dbtest seam, 0001, is what lets them run
  on the embedded PostgreSQL: ``scripts/series go-db-tests``);
* ``crd``: for every patch that changes the CRDs, on BASE + that patch alone: the API packages'
  unit tests, and the admission cases of ``tests/series/kagent_main/`` through kube-apiserver's own
  defaulting, validation and CEL code (``scripts/series crd``); kagent's envtest
  tests need binaries from GitHub and are reported NOT RUN;
* ``python``: for every patch that touches ``python/``, on BASE + that patch alone (or on the
  patches it names as prerequisites: ``0020`` on ``0010``), ruff and
  kagent-adk's unit tests in main's own lock (``uv sync --frozen``, Python 3.13):
  ``scripts/series python-pr``.
* ``helm``: on all patches in order, ``helm unittest helm/kagent`` and ``helm template`` with
  governed memory off byte-identical to BASE's: ``helm.py`` (``scripts/series helm``).

main's ``go.mod`` pins four module versions that the Go module proxy here refuses (403), so
main itself does not build here unchanged.  ``scripts/series standins modfile`` writes a
substitute ``go.mod`` outside the tree (nearest served versions; packages that need the one
module with no version served are left out of the build and named), passed as ``GOFLAGS=
-modfile=...``; every Go line below says so.  Nothing of the substitute enters a patch.
With ``--substrate-src`` the ``go-tests`` step also checks the packages that import substrate
in place on a compile stand-in for substrate (``inplace.py``,
``IN_PLACE_PACKAGES``: ``core/internal/grpcserver``, ``0017``'s ``core/internal/memorygrant``
and ``core/internal/a2a``, and ``0018``'s ``core/pkg/app`` and ``core/cli/cmd/kagent``); without it
those checks say NOT RUN.

Go needs 1.27: ``GOTOOLCHAIN`` defaults to ``go1.27.3`` (fetched through the module proxy).
Trees live at fixed paths under ``$VERIFY_KAGENT_MAIN_WORKDIR`` (default
``$TMPDIR/verify-kagent-main-<uid>``) so the go command's and golangci-lint's caches, keyed by
directory, stay warm between runs.

Usage::

    scripts/series verify --series main --src /path/to/kagent [--step apply|go|go-tests|python]...
        [--substrate-src /path/to/agent-substrate]

Exit status: 0 every step that ran passed; 1 a step failed; 2 bad arguments; 3 nothing could
run (no kagent source holding BASE) -- "KAGENT MAIN VERIFICATION NOT RUN".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import PACKAGE, REPO, command
from . import crd
from . import helm
from . import inplace
from .inplace import run
from .lint import LINT_VERSION, LINT_XTOOLS, lint_binary

SERIES = REPO / "patches" / "kagent-main"
STEPS = ("apply", "proto", "go", "go-tests", "crd", "python", "helm")
GOTOOLCHAIN = "go1.27.3"
IDENTITY = ["-c", "user.name=verify", "-c", "user.email=verify@localhost"]
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_RUN = 0, 1, 2, 3
# the packages the Go PRs touch or add (0012: memoryscope; 0013: database, dbtest)
GO_TEST_PACKAGES = ("./core/internal/dbtest/...", "./core/pkg/migrations/...",
                    "./core/internal/database/...", "./core/internal/service/memory/...",
                    "./core/internal/memoryscope/...", "./adk/pkg/memory/...",
                    "./core/internal/controller/translator/agent/...")
# the packages the Go PRs touch that import substrate (0015, 0016: grpcserver; 0017: memorygrant,
# a2a; 0018: pkg/app, the CLI): checked in place on the substrate stand-in only (--substrate-src)
IN_PLACE_PACKAGES = inplace.PACKAGES + (inplace.APP_PKG, inplace.CLI_PKG)


def base_commit() -> str:
    return (SERIES / "BASE").read_text().split()[0]


def patches() -> list[Path]:
    return sorted(SERIES.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def touched(patch: Path) -> set[str]:
    """Top-level directories of kagent a patch changes (from its diff headers)."""
    tops: set[str] = set()
    for line in patch.read_text().splitlines():
        if line.startswith("diff --git a/"):
            tops.add(line.split()[2][2:].split("/", 1)[0])
    return tops


def prerequisites(patch: Path) -> list[Path]:
    """The patches of the series that ``patch`` names as prerequisites (git format-patch --base
    writes a ``prerequisite-patch-id`` per commit between the base and the patch)."""
    wanted = set(re.findall(r"^prerequisite-patch-id: ([0-9a-f]{40})$", patch.read_text(), re.M))
    found = []
    for other in patches():
        done = subprocess.run(["git", "patch-id", "--stable"], stdin=other.open("rb"),
                              capture_output=True, check=True)
        if done.stdout.split()[:1] and done.stdout.split()[0].decode() in wanted:
            found.append(other)
    return found


class Report:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.ran = 0

    def line(self, status: str, step: str, what: str, secs: float = 0.0,
             out: str = "") -> None:
        print(f"{status:7} {step:9} {secs:7.1f}s  {what}", flush=True)
        if status == "FAIL":
            self.failed.append(f"{step}: {what}")
            if out:
                print("\n".join("    " + x for x in out.rstrip().splitlines()[-60:]), flush=True)
        if status in ("PASS", "FAIL"):
            self.ran += 1


def fresh_tree(src: Path, path: Path, base: str) -> None:
    """A clone of ``src`` at ``base`` at a fixed ``path`` (reused when it is one already)."""
    if (path / ".git").is_dir():
        subprocess.run(["git", "-C", str(path), "am", "--abort"], capture_output=True,
                       check=False)
        subprocess.run(["git", "-C", str(path), "checkout", "-q", "-f", "--detach", base],
                       check=True, capture_output=True)
        # python/.venv: main's own lock installed by uv, kept between runs
        subprocess.run(["git", "-C", str(path), "clean", "-q", "-fdx", "-e", "python/.venv"],
                       check=True, capture_output=True)
        return
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(src), str(path)],
                   check=True, capture_output=True)
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "--detach", base], check=True,
                   capture_output=True)


def apply(tree: Path, series: list[Path]) -> tuple[int, str, float]:
    return run(["git", *IDENTITY, "-C", str(tree), "am", "-q", "--keep-cr",
                *map(str, series)])


def step_apply(rep: Report, src: Path, work: Path, base: str) -> None:
    for patch in patches():
        tree = work / "alone"
        fresh_tree(src, tree, base)
        code, out, secs = apply(tree, [patch])
        before = prerequisites(patch)
        if code == 0 or not before:
            rep.line("PASS" if code == 0 else "FAIL", "apply",
                     f"{patch.name} alone on {base[:9]}", secs, out)
            continue
        # a stacked PR (it changes what a prerequisite adds) applies on exactly its prerequisites
        fresh_tree(src, tree, base)
        code, out, secs = apply(tree, [*before, patch])
        on = "+".join(p.name[:4] for p in before)
        rep.line("PASS" if code == 0 else "FAIL", "apply",
                 f"{patch.name} on its prerequisites {on} on {base[:9]}", secs, out)
    tree = work / "series"
    fresh_tree(src, tree, base)
    code, out, secs = apply(tree, patches())
    rep.line("PASS" if code == 0 else "FAIL", "apply",
             f"all {len(patches())} patches in order on {base[:9]}", secs, out)
    code, out, secs = run(command("sync-sql", "--series", "main", "--check"))
    rep.line("PASS" if code == 0 else "FAIL", "apply", "0011-0013 carry the library's files as "
             "generated (governed track, qualified statements, assertion vectors)", secs, out)


def go_env(work: Path, tree: Path, rep: Report) -> dict[str, str] | None:
    """The environment for Go on ``tree``: toolchain 1.27 and the substitute modfile."""
    env = {**os.environ, "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", GOTOOLCHAIN)}
    out_dir = work / "modfile" / tree.name
    code, out, secs = run(command("standins", "modfile", "--tree", str(tree), "--out",
                                  str(out_dir)), env=env)
    if code != 0:
        rep.line("FAIL", "modfile", f"substitute go.mod for {tree.name}", secs, out)
        return None
    print("\n".join("    " + x for x in out.rstrip().splitlines()), flush=True)
    env["GOFLAGS"] = f"-modfile={out_dir / 'go.mod'} -mod=mod"
    return env


def step_proto(rep: Report, src: Path, work: Path, base: str) -> None:
    """main's own generated code reproduced by the pinned plugins, run locally; then each PR
    that touches proto/ alone: buf lint, buf breaking against BASE, regeneration clean."""
    tree = work / "alone"
    fresh_tree(src, tree, base)
    script = command("protos", "kagent")
    code, out, secs = run([*script, "--tree", str(tree), "--check"])
    rep.line("PASS" if code == 0 else ("NOT RUN" if code == 3 else "FAIL"), "proto",
             f"BASE's checked-in generated code reproduced byte for byte (buf generate with "
             f"the pinned plugins built locally){_reason(code, out)}", secs, out)
    for patch in patches():
        if "proto" not in touched(patch):
            continue
        fresh_tree(src, tree, base)
        code, out, secs = apply(tree, [patch])
        if code == 0:
            code, out, secs = run([*script, "--tree", str(tree), "--check",
                                   "--lint", "--breaking-against", base])
        rep.line("PASS" if code == 0 else ("NOT RUN" if code == 3 else "FAIL"), "proto",
                 f"{patch.name} alone: buf lint, buf breaking against BASE, generated code "
                 f"as checked in{_reason(code, out)}", secs, out)


def _reason(code: int, out: str) -> str:
    if code != 3:
        return ""
    lines = [x for x in out.splitlines() if "NOT RUN" in x]
    return ": " + (lines[-1] if lines else out.strip()[-200:])


def step_probe(rep: Report, tree: Path, env: dict[str, str], substrate_src: Path | None,
               work: Path, src: Path, base: str) -> None:
    """The grpcserver package needs substrate (not served), so its interceptor tests run on a
    copy of the interceptors outside the package (scripts/_series/grpcserver_probe.sh)."""
    if not (tree / "go/core/internal/grpcserver/interceptors_logs_test.go").exists():
        return
    code, out, secs = run(["bash", str(PACKAGE / "grpcserver_probe.sh"),
                           str(tree)], env=env)
    if code == 0:
        probe = "./core/internal/zz_grpcserverprobe/"
        code, out, secs = run(["go", "test", "-race", "-count=1", "-v", probe],
                              cwd=tree / "go", env=env)
        ran = out.count("--- PASS: ")
        if code == 0 and ran == 0:
            code, out = 1, out + "\nno interceptor test ran"
        if code == 0:
            code, vet_out, _ = run(["go", "vet", probe], cwd=tree / "go", env=env)
            out += vet_out
    shutil.rmtree(tree / "go/core/internal/zz_grpcserverprobe", ignore_errors=True)
    rep.line("PASS" if code == 0 else "FAIL", "go-tests",
             f"grpcserver's interceptor tests (0003: {out.count('--- PASS: ')} passed) with "
             "-race and vet, on a copy of "
             "interceptors.go outside the package (the package needs substrate)", secs, out)
    if substrate_src is None:
        rep.line("NOT RUN", "go-tests", inplace.not_run_line())
        return
    base_env = {k: v for k, v in env.items() if k != "GOFLAGS"}
    inplace.step_grpcserver(rep, work, tree, substrate_src, patches(), base_env,
                            lambda: lint_binary(rep), lambda p: fresh_tree(src, p, base))


def step_go(rep: Report, src: Path, work: Path, base: str, lint: bool) -> None:
    for patch in patches():
        if "go" not in touched(patch):
            continue
        # one tree path for every PR: the go command keys a package's build by its directory,
        # so the second PR rebuilds only what differs from the first
        # a PR that declares Go prerequisites (0013 needs 0011's track) is checked on them:
        # only its own commit, from the last prerequisite
        tree = work / "alone"
        fresh_tree(src, tree, base)
        before = [p for p in prerequisites(patch) if "go" in touched(p)]
        code, out, secs = apply(tree, [*before, patch])
        if code != 0:
            rep.line("FAIL", "go", f"{patch.name}: does not apply", secs, out)
            continue
        env = go_env(work, tree, rep)
        if env is None:
            continue
        pr_base = run(["git", "-C", str(tree), "rev-parse", "HEAD~1"])[1].strip() if before else base
        on = f"on {'+'.join(p.name[:4] for p in before)}" if before else "alone"
        cmd = [*command("verify", "--series", "v0.9.11"), "--tree", str(tree),
               "--base", pr_base, "--build-list", str(work / "modfile" / tree.name / "build-list")]
        if lint:
            binary = lint_binary(rep)
            if binary is None:
                continue
            cmd += ["--lint", "--golangci-lint", str(binary)]
        env["VERIFY_GO_SERIES_WORKDIR"] = str(work / "verify-go-series")
        code, out, secs = run(cmd, env=env)
        print("\n".join("    " + x for x in out.rstrip().splitlines()
                        if x.startswith(("PASS", "FAIL", "SKIP", "SUMMARY", "  FAILED",
                                         "verify_go_series:"))), flush=True)
        rep.line("PASS" if code == 0 else ("NOT RUN" if code == 3 else "FAIL"), "go",
                 f"{patch.name} {on}: build (substitute modfile), vet, gofmt, sqlc, "
                 + (f"golangci-lint v{LINT_VERSION} (x/tools {LINT_XTOOLS})" if lint
                    else "golangci-lint NOT RUN (--no-lint)"), secs, out)


def step_go_tests(rep: Report, src: Path, work: Path, base: str,
                  substrate_src: Path | None = None) -> None:
    go_patches = [p for p in patches() if "go" in touched(p)]
    tree = work / "go-series"
    fresh_tree(src, tree, base)
    code, out, secs = apply(tree, go_patches)
    if code != 0:
        rep.line("FAIL", "go-tests", "the Go patches do not apply in order", secs, out)
        return
    env = go_env(work, tree, rep)
    if env is None:
        return
    cmd = command("go-db-tests", "--tree", str(tree))
    for pattern in GO_TEST_PACKAGES:
        cmd += ["--package", pattern]
    code, out, secs = run(cmd, env=env)
    print("\n".join("    " + x for x in out.rstrip().splitlines()[-40:]), flush=True)
    rep.line("PASS" if code == 0 else ("NOT RUN" if code == 3 else "FAIL"), "go-tests",
             f"go test -race of the touched packages on {len(go_patches)} Go patches in "
             "order (embedded PostgreSQL, substitute modfile)", secs, out)
    step_probe(rep, tree, env, substrate_src, work, src, base)


def step_crd(rep: Report, src: Path, work: Path, base: str) -> None:
    """Each PR that changes the CRDs, alone: its admission cases through kube-apiserver's own
    validation code (envtest's binaries come from GitHub, unreachable here)."""
    for patch in patches():
        if not any("go/api/config/crd/" in x for x in patch.read_text().splitlines()
                   if x.startswith("diff --git")):
            continue
        tree = work / "alone"
        fresh_tree(src, tree, base)
        code, out, secs = apply(tree, [patch])
        env = go_env(work, tree, rep) if code == 0 else None
        if env is not None:
            for status, what, secs, out in crd.verify(tree, env):
                rep.line(status, "crd", f"{patch.name} alone: {what}", secs, out)
        elif code != 0:
            rep.line("FAIL", "crd", f"{patch.name}: does not apply", secs, out)


def step_python(rep: Report, src: Path, work: Path, base: str) -> None:
    for patch in patches():
        if "python" not in touched(patch):
            continue
        tree = work / f"alone-{patch.name[:4]}"
        fresh_tree(src, tree, base)
        # a PR that declares prerequisites (0020 needs 0010's generated governed stubs) is checked
        # on them; ruff and the tests then see the PR's own change on top of them
        before = prerequisites(patch)
        code, out, secs = apply(tree, [*before, patch])
        if code != 0:
            rep.line("FAIL", "python", f"{patch.name}: does not apply", secs, out)
            continue
        code, out, secs = run(command("python-pr", "--tree", str(tree)))
        print("\n".join("    " + x for x in out.rstrip().splitlines()[-25:]), flush=True)
        status = "PASS" if code == 0 else ("NOT RUN" if code == 3 else "FAIL")
        on = f"on {'+'.join(p.name[:4] for p in before)}" if before else "alone"
        rep.line(status, "python", f"{patch.name} {on}: ruff and kagent-adk's unit tests "
                 "in main's lock (Python 3.13)", secs, out)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=os.environ.get("KGM_KAGENT_SRC") or None,
                    help="a kagent clone or git directory holding BASE (default $KGM_KAGENT_SRC)")
    ap.add_argument("--step", action="append", choices=STEPS, dest="steps",
                    help="run only these steps (default: all)")
    ap.add_argument("--no-lint", action="store_true", help="skip golangci-lint (said so)")
    ap.add_argument("--substrate-src", type=Path, default=inplace.default_src(),
                    help="an agent-substrate/substrate clone or git directory: run grpcserver's "
                         "checks in place on a compile stand-in (default $KGM_SUBSTRATE_SRC; "
                         "without it they say NOT RUN)")
    args = ap.parse_args(argv)
    base = base_commit()
    if not patches():
        print(f"verify_kagent_main: no patch in {SERIES}", file=sys.stderr)
        return EXIT_USAGE
    if args.src is None or not Path(args.src).exists():
        print("KAGENT MAIN VERIFICATION NOT RUN: no kagent source (set KGM_KAGENT_SRC or "
              "--src to a kagent clone holding " + base + ")")
        return EXIT_NOT_RUN
    src = Path(args.src)
    if run(["git", "-C", str(src), "cat-file", "-e", base + "^{commit}"])[0] != 0:
        print(f"KAGENT MAIN VERIFICATION NOT RUN: {src} does not hold {base}")
        return EXIT_NOT_RUN
    work = Path(os.environ.get("VERIFY_KAGENT_MAIN_WORKDIR")
                or Path(tempfile.gettempdir()) / f"verify-kagent-main-{os.getuid()}")
    work.mkdir(parents=True, exist_ok=True)
    steps = args.steps or list(STEPS)
    print(f"verify_kagent_main: {len(patches())} patches, base {base[:12]}, work {work}, "
          f"steps {', '.join(steps)}", flush=True)
    rep = Report()
    started = time.monotonic()
    if "apply" in steps:
        step_apply(rep, src, work, base)
    if "proto" in steps:
        step_proto(rep, src, work, base)
    if ("go" in steps or "go-tests" in steps) and shutil.which("go") is None:
        rep.line("NOT RUN", "go", "GO VERIFICATION NOT RUN: go not found on PATH")
    else:
        if "go" in steps:
            step_go(rep, src, work, base, lint=not args.no_lint)
        if "go-tests" in steps:
            step_go_tests(rep, src, work, base, args.substrate_src)
        if "crd" in steps:
            step_crd(rep, src, work, base)
    if "python" in steps:
        step_python(rep, src, work, base)
    if "helm" in steps:  # helm unittest and the off render on all patches in order
        tree = work / "in-order"
        fresh_tree(src, tree, base)
        code, out, secs = apply(tree, patches())
        for status, what, secs, out in (helm.verify(tree, src, base, work)
                                        if code == 0 else [("FAIL", "does not apply", secs, out)]):
            rep.line(status, "helm", what, secs, out)
    print(f"SUMMARY: {rep.ran} checks ran, {len(rep.failed)} failed; "
          f"{time.monotonic() - started:.0f}s")
    for failure in rep.failed:
        print(f"  FAILED {failure}")
    if rep.failed:
        return EXIT_FAILED
    return EXIT_OK if rep.ran else EXIT_NOT_RUN

