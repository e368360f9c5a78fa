"""usage: scripts/series COMMAND [ARGS...]

Maintain the kagent patch series of this repository: patches/kagent-v0.9.11/ (carried on
kagent v0.9.11 and v0.9.12) and patches/kagent-main/ (small PRs on kagent main).

commands:
  sync-sql     keep the SQL the series carry byte-identical to kagent_governed_memory/sql/
               [--series v0.9.11|main] [--check]; without --series: both (v0.9.11 rewrites
               its patches in place; main writes into --tree KAGENT, or checks)
  verify       verify the series: without arguments everything (both tags, kagent main, the
               series' tests; KAGENT_SRC names a kagent clone); --series v0.9.11 --tree KAGENT:
               every Go commit of a tree on a tag (--base, --lint, ...); --series main
               [--src KAGENT] [--step STEP]...: patches/kagent-main/ as kagent's CI would
  standins     build the compile stand-ins kagent main needs here:
               substrate --src SUBSTRATE [--print-path]   (github.com/kagent-dev/substrate)
               modfile --tree KAGENT --out DIR [--substrate DIR]   (a substitute go.mod)
  lint         build golangci-lint at kagent main's pin (cached) and print its path
  protos       stubs [--check]: the library's Python gRPC stubs from patch 0010's proto;
               kagent --tree KAGENT [--check] [--lint] [--breaking-against REF]: kagent main's
               generated code with local copies of its pinned buf plugins
  go-db-tests  kagent's Go database tests of a patched tree on the embedded PostgreSQL
               --tree KAGENT [--package PATTERN]... [-v]
  helm         the chart on kagent main with every patch (= verify --series main --step helm)
  crd          SandboxAgent admission cases through kube-apiserver's validation and CEL code
               --tree KAGENT --cases FILE [--go GO]
  python-pr    a kagent main tree's Python as kagent's CI checks it --tree KAGENT

`scripts/series COMMAND --help` lists a command's options (for verify and sync-sql also with
--series v0.9.11 or --series main).  Exit status, each command: 0 passed/done, 1 a check
failed, 2 bad arguments, 3 NOT RUN (a tool or source is missing; the output says which).
docs/patches.md describes the series; the code is in scripts/_series/.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType

Command = Callable[[list[str]], int]


def _module(name: str) -> ModuleType:
    """A module of the package, imported when its command runs (``sync-sql`` needs only the
    standard library; ``crd`` needs PyYAML, ``protos stubs`` grpcio-tools)."""
    return importlib.import_module(f"{__package__}.{name}")


def _main(name: str, prog: str) -> Command:
    """The command that runs ``name``'s ``main(argv, prog=prog)``."""
    return lambda argv: int(_module(name).main(argv, prog=prog))


def _sync_sql(argv: list[str]) -> int:
    from .verify import split_series

    sync_sql, sync_sql_main = _module("sync_sql"), _module("sync_sql_main")
    parsed = split_series(argv)
    prog = "series sync-sql"
    if isinstance(parsed, str):
        print(f"{prog}: {parsed}", file=sys.stderr)
        return 2
    series, rest = parsed
    if series == "v0.9.11":
        return sync_sql.main(rest, prog=f"{prog} --series v0.9.11")
    if series == "main":
        return sync_sql_main.main(rest, prog=f"{prog} --series main")
    if "-h" in rest or "--help" in rest:
        print(f"usage: {prog} [--series {{v0.9.11,main}}] [--check] [--sql-dir DIR] ...\n\n"
              "Without --series: the v0.9.11 series (its patches rewritten in place, or\n"
              "--check), then kagent main's (--check compares; --tree KAGENT is main's only).\n"
              "Each series' options:\n")
        for name, module in (("v0.9.11", sync_sql), ("main", sync_sql_main)):
            try:
                module.main(["--help"], prog=f"{prog} --series {name}")
            except SystemExit:
                pass
            print()
        return 0
    only = {"--patches-dir": "v0.9.11", "--vectors": "v0.9.11", "--tree": "main"}
    for arg in rest:
        name = arg.split("=", 1)[0]
        if name in only:
            print(f"{prog}: {name} is the {only[name]} series' option: add --series "
                  f"{only[name]}", file=sys.stderr)
            return 2
    code = sync_sql.main(rest, prog=f"{prog} --series v0.9.11")
    return max(code, sync_sql_main.main(rest, prog=f"{prog} --series main"))


def _group(prog: str, commands: dict[str, tuple[Command, str]]) -> Command:
    """A command with sub-commands (``standins substrate``, ``protos stubs``, ...)."""
    def run(argv: list[str]) -> int:
        if argv and argv[0] in commands:
            return commands[argv[0]][0](argv[1:])
        lines = [f"usage: {prog} {{{','.join(commands)}}} [ARGS...]", ""]
        lines += [f"  {name:<10} {what}" for name, (_, what) in commands.items()]
        lines += ["", f"`{prog} NAME --help` lists its options."]
        if argv in (["-h"], ["--help"]):
            print("\n".join(lines))
            return 0
        print("\n".join(lines), file=sys.stderr)
        return 2
    return run


def _lint(argv: list[str]) -> int:
    import argparse

    lint = _module("lint")
    ap = argparse.ArgumentParser(prog="series lint", description=(
        f"Build golangci-lint v{lint.LINT_VERSION} (kagent main's pin) with golang.org/x/tools "
        f"{lint.LINT_XTOOLS} into {lint.CACHE} (once; cached) and print the binary's path. "
        "`verify --series main` lints with it."))
    ap.parse_args(argv)

    class Printer:
        def line(self, status: str, step: str, what: str, secs: float = 0.0,
                 out: str = "") -> None:
            print(f"{status:<8}{step}: {what}" + (f" ({secs:.0f}s)" if secs else ""))
            if status == "FAIL" and out:
                print(out[-3000:])

    binary = lint.lint_binary(Printer())
    if binary is None:
        return 1
    print(binary)
    return 0


def _helm(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print("usage: series helm [--src KAGENT]\n\nThe chart on kagent main with every patch "
              "applied in order: helm unittest helm/kagent,\nand helm template with governed "
              "memory off byte-identical to BASE's (scripts/_series/helm.py).\nThe same as "
              "`series verify --series main --step helm`; its other options apply.")
        return 0
    return int(_module("verify_main").main(["--step", "helm", *argv], prog="series helm"))


COMMANDS: dict[str, Command] = {
    "sync-sql": _sync_sql,
    "verify": lambda argv: int(_module("verify").main(argv)),
    "standins": _group("series standins", {
        "substrate": (_main("standins", "series standins substrate"),
                      "the compile stand-in for github.com/kagent-dev/substrate v0.0.20"),
        "modfile": (_main("modfile", "series standins modfile"),
                    "a substitute go.mod/go.sum for a kagent main tree, outside it"),
    }),
    "lint": _lint,
    "protos": _group("series protos", {
        "stubs": (_main("stubs", "series protos stubs"),
                  "the library's Python stubs for GovernedMemoryService (patch 0010)"),
        "kagent": (_main("protos", "series protos kagent"),
                   "kagent main's generated code with its pinned buf plugins, locally"),
    }),
    "go-db-tests": _main("go_db_tests", "series go-db-tests"),
    "helm": _helm,
    "crd": _main("crd", "series crd"),
    "python-pr": _main("python_pr", "series python-pr"),
}


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(__doc__.rstrip())
        return 0
    if not argv or argv[0] not in COMMANDS:
        if argv:
            print(f"series: unknown command {argv[0]!r}\n", file=sys.stderr)
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])
