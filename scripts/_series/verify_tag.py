"""Check every Go commit of the kagent patch series the way kagent's CI does.

Given a kagent work tree whose HEAD is the series applied as commits on top of a base tag
(default ``v0.9.11``), walk every commit from the base that touches ``go/``, oldest first,
each checked out detached in a temporary ``git worktree`` of that tree (the tree itself, its
checkout and its branches are not touched; the worktree is added for the run and removed
after it), and run in ``go/``:

* ``build``: ``go build ./...`` (``--build-list FILE``: the packages FILE lists instead);
* ``vet``:   ``go vet`` on the packages whose ``.go`` files the commit adds or changes;
* ``gofmt``: ``gofmt -l`` on the ``.go`` files the commit adds or changes;
* ``sqlc``:  ``sqlc generate`` where ``go/Makefile``'s ``sqlc-generate`` target runs it
  (``core/internal/database``), as the "sqlc Generate Check" workflow does;
* ``clean``: the work tree must be byte-identical afterwards (``git status --porcelain``
  empty, untracked files included); the diff is printed when it is not;

and, with ``--lint``, ``golangci-lint run`` once at HEAD with the repository's
``go/.golangci.yaml`` on the packages the series touches (``--lint-all``: ``./...``, as
``make lint`` does); ``--lint-each`` (implies ``--lint``) also lints each commit's touched
packages at that commit, so a finding shows in the commit that introduced it.  A custom linter plugin the config names (kagent: kube-api-linter,
``bin/kube-api-linter.so``, built by ``make lint`` from a golangci-lint source clone) is used
when ``--lint-plugin NAME=PATH`` gives it or the tree given by ``--tree`` has it at the
configured path; otherwise it is removed from a derived copy of the config and the run says
so loudly.

Tools: sqlc is ``--sqlc PATH``, else ``$SQLC``, else
``go run github.com/sqlc-dev/sqlc/cmd/sqlc@<SQLC_VERSION from go/Makefile>``; golangci-lint
is ``--golangci-lint PATH``, else ``$GOLANGCI_LINT``, else ``golangci-lint`` on PATH, else
``go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@<GOLANGCI_LINT_VERSION>``.
A tool whose version differs from the pin in ``go/Makefile`` fails the ``tools`` check.
The environment is passed through unchanged, so GOCACHE and GOMODCACHE persist between runs.

For a given ``--tree`` the temporary worktree is always at the same path,
``$TMPDIR/verify-go-series-<uid>/<key>/tree`` (``$VERIFY_GO_SERIES_WORKDIR/<key>/tree`` if
set; <key> is a hash of the tree's path), one run per tree at a time holds a lock beside it,
and golangci-lint gets a cache of its own for that path,
``$XDG_CACHE_HOME/verify-go-series/<key of the worktree's path>/golangci-lint``
(``--lint-cache``), kept between runs.  Both matter: golangci-lint caches a package's issues with absolute file names, so an
entry written for another directory (another run's worktree, your own checkout) names files
that are gone or hold other text, its "generated file" filter cannot read them, and sqlc's
``gen/`` output is reported as lint findings that are not there.  The go command likewise
keys a package by its directory (without ``-trimpath``), so a fixed path also lets warm runs
reuse kagent's own packages from GOCACHE.

Prints one line per commit and check (status, commit, check, duration, what ran), then a
summary.  Exit status: 0 all passed; 1 a check failed; 2 bad arguments or tree; 3 ``go`` is
not on PATH ("GO VERIFICATION NOT RUN").

Stdlib only, Python >= 3.11.  Usage::

    scripts/series verify --series v0.9.11 --tree /path/to/kagent [--base v0.9.11]
        [--sqlc PATH] [--lint | --lint-each] [--lint-all] [--golangci-lint PATH]
        [--lint-config FILE] [--lint-plugin NAME=PATH] [--lint-cache DIR]
        [--build-list FILE] [-v]
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_BASE = "v0.9.11"
DEFAULT_SQLC_VERSION = "v1.30.0"
DEFAULT_GOLANGCI_LINT_VERSION = "v2.12.2"
SQLC_MODULE = "github.com/sqlc-dev/sqlc/cmd/sqlc"
GOLANGCI_LINT_MODULE = "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
DEFAULT_SQLC_DIR = "core/internal/database"  # relative to go/
DETAIL_LINES = 60
LOCK_NAME = "lock"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GO = 0, 1, 2, 3


class SetupError(Exception):
    """The tree, the base or a tool cannot be used at all."""


@dataclass
class Result:
    commit: str  # abbreviated sha, or "HEAD" for once-only checks
    check: str
    status: str  # PASS, FAIL, SKIP
    seconds: float
    what: str
    detail: str = ""


@dataclass
class Run:
    results: list[Result] = field(default_factory=list)
    verbose: bool = False

    def add(self, result: Result) -> Result:
        self.results.append(result)
        print(f"{result.status:<4} {result.commit:<10} {result.check:<6} "
              f"{result.seconds:7.1f}s  {result.what}", flush=True)
        if result.detail and (result.status == "FAIL" or self.verbose):
            lines = result.detail.rstrip("\n").split("\n")
            if len(lines) > DETAIL_LINES:
                lines = lines[:DETAIL_LINES] + [f"... ({len(lines) - DETAIL_LINES} more lines)"]
            for line in lines:
                print(f"       | {line}", flush=True)
        return result


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float | None = None) -> tuple[int, str, float]:
    """Runs cmd; returns (exit status, stdout+stderr, seconds)."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=timeout, check=False)
        return proc.returncode, proc.stdout, time.monotonic() - start
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(
            "utf-8", "replace")
        return 124, out + f"\n(timed out after {timeout:.0f}s)", time.monotonic() - start
    except OSError as exc:
        return 127, f"{cmd[0]}: {exc}", time.monotonic() - start


def git(tree: Path, *args: str) -> str:
    code, out, _ = run(["git", "-C", str(tree), *args], cwd=tree)
    if code != 0:
        raise SetupError(f"git {' '.join(args)}: {out.strip()}")
    return out


def shell_join(cmd: list[str]) -> str:
    return " ".join(c if re.fullmatch(r"[\w@%+=:,./-]+", c) else repr(c) for c in cmd)


# -- what a commit touches -----------------------------------------------------------------


def touched_go_files(tree: Path, commit: str) -> list[str]:
    """Paths relative to go/ of the .go files the commit adds or changes (existing after it)."""
    out = git(tree, "diff-tree", "--no-commit-id", "-r", "--name-only", "--diff-filter=ACMRT",
              "-z", commit, "--", "go/")
    files = [p for p in out.split("\0") if p]
    return sorted(p[len("go/"):] for p in files if p.endswith(".go"))


def package_dirs(go_dir: Path, files: list[str]) -> list[str]:
    """The ./dir package patterns of those files (skipping testdata, _ and . directories)."""
    dirs = set()
    for rel in files:
        parent = Path(rel).parent
        if any(part == "testdata" or part.startswith(("_", ".")) for part in parent.parts):
            continue
        if any((go_dir / parent).glob("*.go")):
            dirs.add("." if str(parent) == "." else f"./{parent.as_posix()}")
    return sorted(dirs)


def buildable(go_dir: Path, dirs: list[str], build: list[str] | None
              ) -> tuple[list[str], list[str]]:
    """Split ./dir patterns into those --build-list names (by import path) and the rest."""
    if build is None:
        return dirs, []
    match = re.search(r"^module\s+(\S+)", (go_dir / "go.mod").read_text(), re.M)
    module = match.group(1) if match else ""
    listed = set(build)
    keep = [d for d in dirs if (module if d == "." else f"{module}/{d[2:]}") in listed]
    return keep, [d for d in dirs if d not in keep]


def makefile_var(go_dir: Path, name: str, default: str) -> str:
    try:
        text = (go_dir / "Makefile").read_text()
    except OSError:
        return default
    m = re.search(rf"^{name}\s*\??=\s*(\S+)\s*$", text, re.MULTILINE)
    return m.group(1) if m else default


def sqlc_dir(go_dir: Path) -> str:
    """Where go/Makefile's sqlc-generate target runs sqlc (relative to go/)."""
    try:
        text = (go_dir / "Makefile").read_text()
    except OSError:
        return DEFAULT_SQLC_DIR
    m = re.search(r"^sqlc-generate:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    if m:
        cd = re.search(r"cd\s+(\S+)\s*&&\s*\$\(SQLC\)\s+generate", m.group(1))
        if cd:
            return cd.group(1)
    return DEFAULT_SQLC_DIR


# -- tools -----------------------------------------------------------------------------------


def version_of(cmd: list[str], args: list[str], cwd: Path, env: dict[str, str],
               pattern: str) -> tuple[str | None, str, float]:
    code, out, secs = run([*cmd, *args], cwd=cwd, env=env)
    if code != 0:
        return None, out, secs
    # ``go run`` reports what it downloads and builds on the same streams ("go: downloading
    # <module> v1.9.0", ...) the first time on a machine: only the tool's own lines count.
    own = "\n".join(line for line in out.splitlines() if not line.startswith("go: "))
    m = re.search(pattern, own)
    return (m.group(1) if m else None), out, secs


def check_tool(run_: Run, name: str, cmd: list[str], args: list[str], pattern: str,
               pinned: str, cwd: Path, env: dict[str, str]) -> bool:
    found, out, secs = version_of(cmd, args, cwd, env, pattern)
    want = pinned.lstrip("v")
    if found is None:
        run_.add(Result("-", "tools", "FAIL", secs, f"{name}: {shell_join(cmd)} did not run",
                        out))
        return False
    ok = found.lstrip("v") == want
    run_.add(Result("-", "tools", "PASS" if ok else "FAIL", secs,
                    f"{name} v{found.lstrip('v')} ({shell_join(cmd)})"
                    + ("" if ok else f": go/Makefile pins {pinned}")))
    return ok


# -- golangci-lint config without an unavailable plugin -------------------------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], i: int) -> int:
    """Index after the YAML block that starts at line i (the line and all deeper lines)."""
    base, j = _indent(lines[i]), i + 1
    while j < len(lines):
        s = lines[j].strip()
        if s and not s.startswith("#") and _indent(lines[j]) <= base:
            break
        j += 1
    while j > i + 1 and not lines[j - 1].strip():  # leave trailing blank lines outside
        j -= 1
    return j


def _parent(lines: list[str], i: int) -> int | None:
    want = _indent(lines[i])
    for j in range(i - 1, -1, -1):
        s = lines[j].strip()
        if s and not s.startswith("#") and _indent(lines[j]) < want:
            return j
    return None


def custom_linters(text: str) -> dict[str, str]:
    """Custom (plugin) linters of a golangci-lint v2 config: name -> plugin path."""
    lines = text.split("\n")
    out: dict[str, str] = {}
    for i, line in enumerate(lines):
        if line.strip() == "custom:":
            end = _block_end(lines, i)
            child = None
            for j in range(i + 1, end):
                s = lines[j].strip()
                if not s or s.startswith("#"):
                    continue
                child = child if child is not None else _indent(lines[j])
                if _indent(lines[j]) == child and s.endswith(":"):
                    name = s[:-1].strip("\"'")
                    sub_end = _block_end(lines, j)
                    for k in range(j + 1, sub_end):
                        m = re.match(r"^\s*path:\s*[\"']?([^\"'#]+?)[\"']?\s*(#.*)?$", lines[k])
                        if m and _indent(lines[k]) == child + 2:
                            out[name] = m.group(1)
                            break
    return out


def config_with_plugins(text: str, drop: set[str], repath: dict[str, str]) -> str:
    """The config with the plugins in drop removed and those in repath pointed elsewhere."""
    lines = text.split("\n")
    # Point kept plugins at an absolute path.
    for name, path in repath.items():
        for i, line in enumerate(lines):
            if line.strip() == f"{name}:":
                for k in range(i + 1, _block_end(lines, i)):
                    m = re.match(r"^(\s*path:\s*).*$", lines[k])
                    if m and _indent(lines[k]) == _indent(line) + 2:
                        lines[k] = f'{m.group(1)}"{path}"'
                        break
    changed = True
    while changed:  # one removal at a time; indexes move
        changed = False
        for i, line in enumerate(lines):
            s = line.strip()
            entry = re.fullmatch(r"-\s*[\"']?([\w.-]+)[\"']?", s)
            if entry and entry.group(1) in drop:
                parent = _parent(lines, i)
                if parent is not None and lines[parent].strip() == "- linters:":
                    # An exclusion rule: drop the whole rule if only plugins are left in it,
                    # else only this entry (an empty linters list would widen the rule).
                    names = [re.fullmatch(r"-\s*[\"']?([\w.-]+)[\"']?", lines[k].strip())
                             for k in range(parent + 1, _block_end(lines, parent))
                             if _parent(lines, k) == parent and lines[k].strip().startswith("-")]
                    if all(n and n.group(1) in drop for n in names):
                        del lines[parent:_block_end(lines, parent)]
                        changed = True
                        break
                del lines[i]
                changed = True
                break
            if s.endswith(":") and s[:-1].strip("\"'") in drop:
                parent = _parent(lines, i)
                if parent is not None and lines[parent].strip() == "custom:":
                    del lines[i:_block_end(lines, i)]
                    changed = True
                    break
            if s in ("custom:", "rules:") and _block_end(lines, i) == i + 1:
                del lines[i]  # emptied by the removals above
                changed = True
                break
    return "\n".join(lines)


def parse_plugin_args(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SetupError(f"--lint-plugin {value!r}: expected NAME=PATH")
        out[name] = str(Path(path).resolve())
    return out


# -- the worktree ----------------------------------------------------------------------------


def tree_key(tree: Path) -> str:
    return hashlib.sha256(str(tree).encode()).hexdigest()[:12]


def work_dir(tree: Path) -> Path:
    """Fixed for a given --tree, so the worktree path is the same from run to run."""
    given = os.environ.get("VERIFY_GO_SERIES_WORKDIR")
    root = Path(given).resolve() if given else (
        Path(tempfile.gettempdir()) / f"verify-go-series-{os.getuid()}")
    return root / tree_key(tree)


def default_lint_cache(tree: Path) -> Path:
    """golangci-lint's cache for one worktree path (its entries name files under it): keyed by
    the worktree's own path, so a run whose ``$TMPDIR`` differs never reads entries that name
    another run's files."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache"))
    return cache / "verify-go-series" / tree_key(work_dir(tree)) / "golangci-lint"


def take_lock(workdir: Path) -> tuple[int, float]:
    """One run per --tree at a time; returns the locked descriptor and the seconds waited."""
    workdir.mkdir(parents=True, exist_ok=True)
    fd = os.open(workdir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    start = time.monotonic()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"verify_go_series: waiting for another run on this tree "
              f"({workdir / LOCK_NAME})", flush=True)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, time.monotonic() - start


def add_worktree(tree: Path, wt: Path, head: str) -> None:
    """A detached worktree of tree at wt, replacing what an interrupted run left there."""
    if wt.exists():
        run(["git", "-C", str(tree), "worktree", "remove", "--force", str(wt)], cwd=tree)
    if wt.exists():  # left by a run on another clone, or not a worktree at all
        shutil.rmtree(wt)
    # --force: the path may still be registered (missing) from an interrupted run.
    git(tree, "worktree", "add", "--force", "--quiet", "--detach", str(wt), head)


# -- the walk --------------------------------------------------------------------------------


def check_commit(run_: Run, wt: Path, commit: str, sqlc_cmd: list[str],
                 env: dict[str, str], gofmt: str, linter: Linter | None,
                 build: list[str] | None = None) -> None:
    short = commit[:9]
    go_dir = wt / "go"
    git(wt, "checkout", "--quiet", "--detach", commit)
    files = touched_go_files(wt, commit)

    targets = build or ["./..."]
    code, out, secs = run(["go", "build", *targets], go_dir, env)
    what = ("go build ./..." if targets == ["./..."]
            else f"go build ({len(targets)} packages of --build-list)")
    run_.add(Result(short, "build", "PASS" if code == 0 else "FAIL", secs, what, out))

    pkgs, unbuilt = buildable(go_dir, package_dirs(go_dir, files), build)
    for pkg in unbuilt:
        run_.add(Result(short, "vet", "SKIP", 0.0,
                        f"go vet {pkg} NOT RUN: not in --build-list (cannot be built here)"))
    if pkgs:
        code, out, secs = run(["go", "vet", *pkgs], go_dir, env)
        run_.add(Result(short, "vet", "PASS" if code == 0 else "FAIL", secs,
                        f"go vet {' '.join(pkgs)}", out))
    else:
        run_.add(Result(short, "vet", "SKIP", 0.0, "no Go package touched"))

    if files:
        code, out, secs = run([gofmt, "-l", *files], go_dir, env)
        ok = code == 0 and not out.strip()
        what = f"gofmt -l ({len(files)} file{'s' if len(files) != 1 else ''})"
        if not ok:
            what += ": " + (" ".join(out.split()) if code == 0 else f"exit {code}")
        run_.add(Result(short, "gofmt", "PASS" if ok else "FAIL", secs, what,
                        "" if ok and code == 0 else out))
    else:
        run_.add(Result(short, "gofmt", "SKIP", 0.0, "no .go file touched"))

    rel = sqlc_dir(go_dir)
    if (go_dir / rel / "sqlc.yaml").is_file() or (go_dir / rel / "sqlc.yml").is_file():
        code, out, secs = run([*sqlc_cmd, "generate"], go_dir / rel, env)
        run_.add(Result(short, "sqlc", "PASS" if code == 0 else "FAIL", secs,
                        f"(cd go/{rel} && sqlc generate)", out))
    else:
        run_.add(Result(short, "sqlc", "SKIP", 0.0, f"no go/{rel}/sqlc.yaml"))

    start = time.monotonic()
    status = git(wt, "status", "--porcelain", "--untracked-files=all")
    if status.strip():
        diff = git(wt, "diff", "--stat") + "\n" + git(wt, "diff")
        run_.add(Result(short, "clean", "FAIL", time.monotonic() - start,
                        "tree changed after the checks: "
                        + ", ".join(line[3:] for line in status.splitlines()[:6]),
                        status + "\n" + diff))
    else:
        run_.add(Result(short, "clean", "PASS", time.monotonic() - start,
                        "git status --porcelain: clean"))
    git(wt, "reset", "--quiet", "--hard")
    git(wt, "clean", "-fdq")
    if linter is not None:  # --lint-each: the packages this commit touches, at this commit
        for pkg in unbuilt:
            run_.add(Result(short, "lint", "SKIP", 0.0,
                            f"lint of {pkg} NOT RUN: not in --build-list"))
        if pkgs:
            linter.run(run_, wt, short, pkgs)
        else:
            run_.add(Result(short, "lint", "SKIP", 0.0, "no Go package touched"))


@dataclass
class Linter:
    """golangci-lint with the repository's config as it is at the commit being linted."""

    cmd: list[str]
    env: dict[str, str]
    tree: Path  # the --tree, where a built plugin may already sit
    config: Path | None  # --lint-config, else go/.golangci.yaml of the commit
    plugins: dict[str, str]  # --lint-plugin NAME=PATH
    announced: set[str] = field(default_factory=set)

    def run(self, run_: Run, wt: Path, label: str, packages: list[str]) -> None:
        go_dir = wt / "go"
        derived: Path | None = None
        config = self.config
        if config is None:
            repo_cfg = next((go_dir / n for n in (".golangci.yaml", ".golangci.yml")
                             if (go_dir / n).is_file()), None)
            if repo_cfg is None:
                run_.add(Result(label, "lint", "FAIL", 0.0, "no go/.golangci.yaml"))
                return
            text = repo_cfg.read_text()
            customs = custom_linters(text)
            drop, repath = set(), {}
            for name, path in customs.items():
                given = self.plugins.get(name)
                in_tree = self.tree / "go" / path
                if given and Path(given).is_file():
                    repath[name] = given
                elif in_tree.is_file():
                    repath[name] = str(in_tree.resolve())
                else:
                    drop.add(name)
            for name in sorted(drop - self.announced):
                print(f"LINT PLUGIN NOT LOADED: {name} ({customs[name]} not built; pass "
                      f"--lint-plugin {name}=PATH): linted with {repo_cfg.name} minus {name}",
                      flush=True)
            for name in sorted(set(repath) - self.announced):
                print(f"lint plugin {name}: {repath[name]}", flush=True)
            self.announced |= drop | set(repath)
            if drop or repath:
                derived = go_dir / ".golangci.verify-go-series.yaml"  # beside the original
                derived.write_text(config_with_plugins(text, drop, repath))
                config = derived
            else:
                config = repo_cfg
        try:
            code, out, secs = run([*self.cmd, "run", "--config", str(config), *packages],
                                  go_dir, self.env)
        finally:
            if derived is not None:
                derived.unlink(missing_ok=True)
        what = shell_join(["golangci-lint", "run", "--config", config.name, *packages])
        if len(what) > 160:
            what = what[:157] + "..."
        run_.add(Result(label, "lint", "PASS" if code == 0 else "FAIL", secs, what, out))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", required=True, type=Path,
                        help="kagent work tree; its HEAD is the series on top of --base")
    parser.add_argument("--base", default=DEFAULT_BASE, help="default %(default)s")
    parser.add_argument("--sqlc", help="sqlc binary (else $SQLC, else go run ...@pinned)")
    parser.add_argument("--lint", action="store_true", help="run golangci-lint at HEAD")
    parser.add_argument("--lint-each", action="store_true",
                        help="also lint each commit's touched packages at that commit "
                             "(a finding belongs to the commit that introduced it)")
    parser.add_argument("--lint-all", action="store_true",
                        help="lint ./... (as make lint) instead of the touched packages")
    parser.add_argument("--golangci-lint", dest="golangci_lint",
                        help="golangci-lint binary (else $GOLANGCI_LINT, PATH, go run)")
    parser.add_argument("--lint-config", type=Path,
                        help="use this config instead of go/.golangci.yaml at HEAD")
    parser.add_argument("--lint-plugin", action="append", default=[], metavar="NAME=PATH",
                        help="a built plugin for a custom linter of the config")
    parser.add_argument("--lint-cache", type=Path,
                        help="golangci-lint cache for these runs (default "
                             "$XDG_CACHE_HOME/verify-go-series/golangci-lint)")
    parser.add_argument("--build-list", type=Path,
                        help="build the packages listed in this file (one import path or "
                             "pattern per line) instead of ./... -- for a tree some of whose "
                             "packages cannot be built here (kagent main: modules the proxy "
                             "refuses, scripts/series standins modfile)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print command output for passing checks too")
    args = parser.parse_args(argv)
    build: list[str] | None = None
    if args.build_list is not None:
        build = [line.strip() for line in args.build_list.read_text().splitlines()
                 if line.strip() and not line.lstrip().startswith("#")]
        if not build:
            parser.error(f"--build-list {args.build_list}: no package listed")

    if shutil.which("go") is None:
        bar = "!" * 64
        print(f"{bar}\nGO VERIFICATION NOT RUN: go not found\n{bar}", file=sys.stderr)
        print("GO VERIFICATION NOT RUN: go not found")
        return EXIT_NO_GO

    def on_term(signum, frame):  # cleanup runs in the finally below
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    env = dict(os.environ)
    run_ = Run(verbose=args.verbose)
    workdir = work_dir(args.tree.resolve())
    waited = 0.0
    wt: Path | None = None
    lock_fd: int | None = None
    tree = args.tree.resolve()
    started = time.monotonic()
    try:
        if not tree.is_dir():
            raise SetupError(f"--tree {tree}: not a directory")
        head = git(tree, "rev-parse", "--verify", "HEAD^{commit}").strip()
        base = git(tree, "rev-parse", "--verify", f"{args.base}^{{commit}}").strip()
        code, _, _ = run(["git", "-C", str(tree), "merge-base", "--is-ancestor", base, head],
                         cwd=tree)
        if code != 0:
            raise SetupError(f"{args.base} is not an ancestor of HEAD {head[:9]}")
        commits = git(tree, "rev-list", "--reverse", "--topo-order", f"{base}..{head}",
                      "--", "go/").split()
        if not commits:
            raise SetupError(f"no commit in {args.base}..HEAD touches go/")
        go_version = run(["go", "version"], tree, env)[1].strip()
        go_env = run(["go", "env", "GOCACHE", "GOMODCACHE", "GOROOT"], tree, env)[1].split()
        gofmt = str(Path(go_env[2]) / "bin" / "gofmt") if len(go_env) == 3 else "gofmt"
        if not Path(gofmt).is_file():
            gofmt = shutil.which("gofmt") or "gofmt"
        print(f"verify_go_series: tree {tree} HEAD {head[:9]}, base {args.base} "
              f"({base[:9]}): {len(commits)} commit(s) touch go/")
        print(f"verify_go_series: {go_version}; GOCACHE={go_env[0] if go_env else '?'} "
              f"GOMODCACHE={go_env[1] if len(go_env) > 1 else '?'}", flush=True)

        lock_fd, waited = take_lock(workdir)
        if waited >= 1:
            print(f"verify_go_series: lock taken after {waited:.1f}s", flush=True)
        wt = workdir / "tree"
        add_worktree(tree, wt, head)
        head_go = wt / "go"
        sqlc_pin = makefile_var(head_go, "SQLC_VERSION", DEFAULT_SQLC_VERSION)
        lint_pin = makefile_var(head_go, "GOLANGCI_LINT_VERSION", DEFAULT_GOLANGCI_LINT_VERSION)

        sqlc_path = args.sqlc or env.get("SQLC")
        sqlc_cmd = [sqlc_path] if sqlc_path else ["go", "run", f"{SQLC_MODULE}@{sqlc_pin}"]
        check_tool(run_, "sqlc", sqlc_cmd, ["version"], r"v?(\d+\.\d+\.\d+)", sqlc_pin,
                   workdir, env)
        lint_cmd: list[str] = []
        linter: Linter | None = None
        if args.lint_each:
            args.lint = True
        if args.lint:
            lint_path = args.golangci_lint or env.get("GOLANGCI_LINT") or shutil.which(
                "golangci-lint")
            lint_cmd = [lint_path] if lint_path else [
                "go", "run", f"{GOLANGCI_LINT_MODULE}@{lint_pin}"]
            check_tool(run_, "golangci-lint", lint_cmd, ["version"],
                       r"version v?(\d+\.\d+\.\d+)", lint_pin, workdir, env)
            lint_cache = (args.lint_cache or default_lint_cache(tree)).resolve()
            lint_cache.mkdir(parents=True, exist_ok=True)
            print(f"verify_go_series: golangci-lint cache {lint_cache}", flush=True)
            linter = Linter(lint_cmd, {**env, "GOLANGCI_LINT_CACHE": str(lint_cache)}, tree,
                            args.lint_config.resolve() if args.lint_config else None,
                            parse_plugin_args(args.lint_plugin))

        touched: set[str] = set()
        for n, commit in enumerate(commits, 1):
            subject = git(tree, "log", "-1", "--format=%s", commit).strip()
            print(f"--- [{n}/{len(commits)}] {commit[:9]} {subject}", flush=True)
            check_commit(run_, wt, commit, sqlc_cmd, env, gofmt,
                         linter if args.lint_each else None, build)
            touched.update(touched_go_files(tree, commit))

        if linter is not None:
            print(f"--- lint at HEAD {head[:9]}", flush=True)
            git(wt, "checkout", "--quiet", "--detach", head)
            packages = ["./..."] if args.lint_all else package_dirs(head_go, sorted(touched))
            if build is not None:
                packages, unbuilt = buildable(head_go, packages, build)
                for pkg in unbuilt:
                    run_.add(Result(head[:9], "lint", "SKIP", 0.0,
                                    f"lint of {pkg} NOT RUN: not in --build-list"))
                if args.lint_all:
                    packages = build
            if packages or build is None:
                linter.run(run_, wt, head[:9], packages or ["./..."])
            else:  # what was touched cannot be built here (said above), and nothing else
                run_.add(Result(head[:9], "lint", "SKIP", 0.0, "no buildable Go package touched"))
    except SetupError as exc:
        print(f"verify_go_series: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("verify_go_series: interrupted", file=sys.stderr)
        return 130
    finally:
        if wt is not None:
            code, out, _ = run(["git", "-C", str(tree), "worktree", "remove", "--force",
                                str(wt)], cwd=tree)
            if code != 0:
                print(f"verify_go_series: could not remove worktree {wt}: {out.strip()}",
                      file=sys.stderr)
        if lock_fd is not None:
            os.close(lock_fd)  # releases the lock

    failed = [r for r in run_.results if r.status == "FAIL"]
    passed = sum(1 for r in run_.results if r.status == "PASS")
    skipped = sum(1 for r in run_.results if r.status == "SKIP")
    total = time.monotonic() - started - waited
    print(f"SUMMARY: {len(commits)} commit(s), {len(run_.results)} checks: {passed} passed, "
          f"{len(failed)} failed, {skipped} skipped; {total:.1f}s"
          + (f" (+{waited:.1f}s waiting for another run)" if waited >= 1 else ""))
    for r in failed:
        print(f"  FAILED {r.commit} {r.check}: {r.what}")
    print("GO SERIES VERIFIED" if not failed else "GO SERIES NOT VERIFIED")
    return EXIT_FAILED if failed else EXIT_OK

