"""In-place checks of ``go/core/internal/grpcserver`` for ``verify --series main --substrate-src``.

Package grpcserver imports ``github.com/kagent-dev/substrate`` (through ``service/system``), of
which the module proxy here serves no version.  Given an agent-substrate/substrate source, this
module builds the COMPILE STAND-IN (``standins.py``: agent-substrate@86e138f6 +
this project's overlay; not the real v0.0.20), writes a substitute go.mod that replaces
substrate with it (``modfile.py --substrate``), and on the tree holding the Go
patches in order runs, in place, for each of ``PACKAGES`` (grpcserver, and with ``0017``
``memorygrant`` and ``a2a``):

* ``go vet ./core/internal/grpcserver/...``;
* golangci-lint (main's pin, rebuilt as ``lint.lint_binary`` does) with main's
  ``go/.golangci.yaml`` minus its custom plugins (they lint ``api/v1alpha*`` only);
* ``go test -race -count=1 -v ./core/internal/grpcserver/...``;
* with ``0018``'s wiring test in the tree: ``go build`` of ``./core/cmd/controller/...`` and
  ``./core/cli/cmd/kagent/``, and the three checks above for ``./core/pkg/app/`` and
  ``./core/cli/cmd/kagent/``;

and then shows the tests the fix adds fail without it: BASE plus only the ``_test.go`` files
under grpcserver of the patch that fixes grpcserver (``git apply --include``), where ``go test``
must compile and fail, each failing test being one of the added ones.

Stdlib only; imported by ``verify_main.py`` (which passes in what it owns, so there is
no import cycle).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from . import command, standins, verify_tag

PKG_DIR = "go/core/internal/grpcserver"
PKG = "./core/internal/grpcserver/..."
# every package checked in place (each imports substrate): grpcserver, 0017's memorygrant (it
# imports grpcserver) and the A2A transport it changes; one that the tree lacks is skipped
PACKAGES = (PKG, "./core/internal/memorygrant/...", "./core/internal/a2a/...")
STEP = "go-tests"
STANDIN = "substrate COMPILE STAND-IN (not the real v0.0.20)"


class Reporter(Protocol):
    def line(self, status: str, step: str, what: str, secs: float = 0.0,
             out: str = "") -> None: ...


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 3600) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def fix_patch(patches: list[Path]) -> Path | None:
    """The patch that changes grpcserver's non-test code and adds tests there."""
    for patch in patches:
        files = re.findall(r"^diff --git a/(\S+) ", patch.read_text(), re.MULTILINE)
        mine = [f for f in files if f.startswith(PKG_DIR + "/")]
        if any(f.endswith("_test.go") for f in mine) and any(
                not f.endswith("_test.go") for f in mine):
            return patch
    return None


def standin_env(rep: Reporter, work: Path, tree: Path, substrate_src: Path,
                base_env: dict[str, str]) -> dict[str, str] | None:
    """The Go environment for ``tree`` with substrate replaced by the stand-in."""
    code, out, secs = run(command("standins", "substrate", "--src", str(substrate_src)),
                           env=base_env)
    if code != 0:
        lines = [x for x in out.splitlines() if "NOT RUN" in x] or out.strip().splitlines()[-1:]
        rep.line("NOT RUN" if code == 3 else "FAIL", STEP,
                 f"building the {STANDIN}: " + (lines[-1] if lines else f"exit {code}"),
                 secs, out)
        return None
    standin = standins.path_from_output(out)
    print("\n".join("    " + x for x in out.strip().splitlines() if x.startswith("***")),
          flush=True)
    out_dir = work / "modfile-standin" / tree.name
    code, out, secs = run(command("standins", "modfile", "--tree", str(tree), "--out",
                                  str(out_dir), "--substrate", str(standin)), env=base_env)
    if code != 0:
        rep.line("FAIL", STEP, f"substitute go.mod with the {STANDIN} for {tree.name}", secs,
                 out)
        return None
    print("\n".join("    " + x for x in out.rstrip().splitlines()
                    if "substituted:" in x or "packages:" in x), flush=True)
    return {**base_env, "GOFLAGS": f"-modfile={out_dir / 'go.mod'} -mod=mod"}


def _lint_config(go_dir: Path) -> Path:
    text = (go_dir / ".golangci.yaml").read_text()
    derived = go_dir / ".golangci.verify-inplace.yaml"
    plugins = set(verify_tag.custom_linters(text))
    derived.write_text(verify_tag.config_with_plugins(text, plugins, {}))
    return derived


def _tests(out: str) -> tuple[int, list[str]]:
    return out.count("--- PASS: "), re.findall(r"--- FAIL: (\S+)", out)


def check_in_place(rep: Reporter, work: Path, tree: Path, env: dict[str, str],
                   lint_binary: Callable[[], Path | None], pkg: str = PKG) -> None:
    go_dir = tree / "go"
    code, out, secs = run(["go", "vet", pkg], cwd=go_dir, env=env)
    rep.line("PASS" if code == 0 else "FAIL", STEP,
             f"go vet {pkg} in place (all Go patches; {STANDIN})", secs, out)
    binary = lint_binary()
    if binary is None:
        rep.line("NOT RUN", STEP, f"golangci-lint of {pkg} in place: no golangci-lint binary")
    else:
        config = _lint_config(go_dir)
        lint_env = {**env, "GOLANGCI_LINT_CACHE": str(work / "golangci-lint-inplace")}
        try:
            code, out, secs = run([str(binary), "run", "--config", str(config), pkg],
                                   cwd=go_dir, env=lint_env)
        finally:
            config.unlink(missing_ok=True)
        rep.line("PASS" if code == 0 else "FAIL", STEP,
                 f"golangci-lint {pkg} in place (main's .golangci.yaml minus its custom "
                 f"plugins; {STANDIN})", secs, out)
    # through go_db_tests.py: 0016's tests serve GovernedMemoryService on the embedded
    # PostgreSQL (the dbtest seam); go test -race -count=1 -v as before otherwise
    code, out, secs = run(command("go-db-tests", "--tree", str(tree), "--package", pkg, "-v"),
                          env=env)
    passed, failed = _tests(out)
    if code == 0 and passed == 0:
        code, out = 1, out + "\nno test ran"
    rep.line("PASS" if code == 0 else ("NOT RUN" if code in (3, 4) else "FAIL"), STEP,
             f"go test -race {pkg} in place: {passed} passed, {len(failed)} failed "
             f"(all Go patches; embedded PostgreSQL; {STANDIN})", secs, out)


APP_PKG = "./core/pkg/app/"
CLI_PKG = "./core/cli/cmd/kagent/"  # 0018's `kagent db migrate` track switch
APP_TEST = "go/core/pkg/app/governed_memory_test.go"


def check_app(rep: Reporter, work: Path, tree: Path, env: dict[str, str],
              lint_binary: Callable[[], Path | None]) -> None:
    """0018's wiring (pkg/app imports substrate too): the controller and the CLI build, and
    pkg/app and the CLI's command package are vetted, linted and tested in place like the
    other packages, on the same stand-in; only when the series has 0018's test."""
    if not (tree / APP_TEST).exists():
        return
    go_dir = tree / "go"
    code, out, secs = run(["go", "build", "./core/cmd/controller/...", "./core/cli/cmd/kagent/"],
                          cwd=go_dir, env=env)
    rep.line("PASS" if code == 0 else "FAIL", STEP,
             f"go build ./core/cmd/controller/... ./core/cli/cmd/kagent/ (all Go patches; "
             f"{STANDIN})", secs, out)
    for pkg in (APP_PKG, CLI_PKG):
        check_in_place(rep, work, tree, env, lint_binary, pkg)


def check_without_fix(rep: Reporter, work: Path, tree: Path, patch: Path,
                      env: dict[str, str]) -> None:
    """BASE + only ``patch``'s grpcserver tests: they must compile and fail."""
    include = f"{PKG_DIR}/*_test.go"
    code, out, secs = run(["git", "-C", str(tree), "apply", f"--include={include}",
                            str(patch)])
    if code != 0:
        rep.line("FAIL", STEP, f"{patch.name}'s grpcserver tests do not apply alone on BASE",
                 secs, out)
        return
    added = re.findall(r"^\+func (Test\w+)\(", patch.read_text(), re.MULTILINE)
    code, out, secs = run(["go", "test", "-race", "-count=1", "-v", PKG], cwd=tree / "go",
                           env=env)
    passed, failed = _tests(out)
    top = sorted({name.split("/")[0] for name in failed})
    ok = (code != 0 and "[build failed]" not in out and bool(top)
          and all(name in added for name in top))
    if not ok:
        out += (f"\nexpected a compiled run failing only in the tests {patch.name} adds "
                f"({', '.join(added)}); failed: {', '.join(top) or 'none'}")
    rep.line("PASS" if ok else "FAIL", STEP,
             f"without {patch.name[:4]}'s fix (BASE + its grpcserver tests only) go test "
             f"-race {PKG} fails as it must: {', '.join(top) or 'nothing'} failed, {passed} "
             f"passed ({STANDIN})", secs, out)


def step_grpcserver(rep: Reporter, work: Path, series_tree: Path, substrate_src: Path,
                    patches: list[Path], base_env: dict[str, str],
                    lint_binary: Callable[[], Path | None],
                    base_tree: Callable[[Path], None]) -> None:
    """All of the above; ``base_tree(path)`` makes a clean tree at BASE there."""
    patch = fix_patch(patches)
    if patch is None:
        rep.line("NOT RUN", STEP, f"no patch changes {PKG_DIR} with tests: nothing in place")
        return
    env = standin_env(rep, work, series_tree, substrate_src, base_env)
    if env is None:
        return
    for pkg in PACKAGES:
        if (series_tree / "go" / pkg.removeprefix("./").removesuffix("/...")).is_dir():
            check_in_place(rep, work, series_tree, env, lint_binary, pkg)
    check_app(rep, work, series_tree, env, lint_binary)
    nofix = work / "grpcserver-nofix"
    base_tree(nofix)
    env = standin_env(rep, work, nofix, substrate_src, base_env)
    if env is not None:
        check_without_fix(rep, work, nofix, patch, env)


def not_run_line() -> str:
    return ("go vet, golangci-lint and go test of ./core/internal/grpcserver in place: it "
            "imports github.com/kagent-dev/substrate (through service/system), of which the "
            "module proxy serves no version; pass --substrate-src (or set KGM_SUBSTRATE_SRC) "
            "to an agent-substrate/substrate clone to run them on a compile stand-in")


def default_src() -> str | None:
    return os.environ.get("KGM_SUBSTRATE_SRC") or None
