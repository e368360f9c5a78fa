"""Write a substitute ``go.mod``/``go.sum`` for a kagent ``main`` tree, outside that tree.

kagent ``main``'s ``go/go.mod`` pins four module versions that the Go module proxy this
project's machines reach refuses (HTTP 403), so the tree does not build here as checked in.
This script copies ``TREE/go/go.mod`` and ``TREE/go/go.sum`` to ``--out`` (a directory that
must not be inside the tree), swaps each refused version for the nearest one the proxy serves
(the table ``SUBSTITUTES`` below), and drops the one module of which no version is served
(``github.com/agent-substrate/substrate``, replaced upstream by ``github.com/kagent-dev/substrate``)
together with its ``replace`` line.  The packages that import that module, directly or through
another package of the module, cannot be built; they are named, and every other package is
written to ``OUT/build-list`` (one import path a line, for ``scripts/series verify
--series v0.9.11 --build-list``).

With ``--substrate DIR`` (a COMPILE STAND-IN module built by ``standins.py``, not
the real fork) substrate is kept and its ``replace`` points at DIR instead, nothing is left out
of ``build-list``, and envoy is substituted by ``STANDIN_SUBSTITUTES`` (see there).

Use the result with ``GOFLAGS="-modfile=OUT/go.mod -mod=mod"`` (printed at the end); the go
command then reads and writes ``OUT/go.sum`` beside it and never touches the tree's own files.
Nothing written here belongs in a patch.

Stdlib only.  Usage::

    scripts/series standins modfile --tree /path/to/kagent --out /tmp/kagent-modfile

Exit status: 0 written; 2 bad arguments (no ``go/go.mod``, ``--out`` inside the tree, or a
pinned version in the table that the tree no longer pins -- the table needs a look).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

# module path -> (version main pins, version used instead).  Every entry: refused by the module
# proxy (403) on 2026-12-02; nearest served.
SUBSTITUTES: dict[str, tuple[str, str]] = {
    # refused by the module proxy (403) on 2026-12-02; nearest served
    "github.com/a2aproject/a2a-go/v2": ("v2.5.0", "v2.4.0"),
    # refused by the module proxy (403) on 2026-12-02; nearest served
    "github.com/envoyproxy/go-control-plane/envoy": (
        "v1.37.1-0.20260812071801-353463cc7248", "v1.37.0"),
    # refused by the module proxy (403) on 2026-12-02; nearest served
    "istio.io/istio": (
        "v0.0.0-20260820015531-47320ba1a73b", "v0.0.0-20260826214018-9739e10eb9d7"),
}

# With --substrate the packages that import substrate are built too, and four of them
# (core/cmd/controller, core/cmd/controller-v2, core/pkg/app, core/v2/controller) reach istio's
# pkg/kube/kclient, which at the istio above lacks client-go v0.36's HasSyncedChecker; the newest
# istio the proxy serves (@latest on 2026-12-03) has it.  Its envoy requirement
# (v1.37.1-0.20260713214202-ca8ce173c36f) is refused (403) and the packages it imports are first
# in envoy v1.40.0 (what `-mod=mod` picks), so envoy goes there.
STANDIN_SUBSTITUTES: dict[str, str] = {
    "github.com/envoyproxy/go-control-plane/envoy": "v1.40.0",
    "istio.io/istio": "v0.0.0-20260827124520-eed52ebb66ad",
}

# Refused by the module proxy (403) on 2026-12-02; no version at all is served, so it is
# dropped (require and replace) and the packages importing it are left out of the build.
DROPPED = {
    "github.com/agent-substrate/substrate": "github.com/kagent-dev/substrate v0.0.20",
}

_IMPORT_BLOCK = re.compile(r"^import\s*\((.*?)^\)", re.MULTILINE | re.DOTALL)
_IMPORT_LINE = re.compile(r'^import\s+(?:[\w.]+\s+)?"([^"]+)"', re.MULTILINE)
_QUOTED = re.compile(r'"([^"]+)"')


def module_path(go_mod: str) -> str:
    match = re.search(r"^module\s+(\S+)", go_mod, re.MULTILINE)
    if not match:
        raise SystemExit("kagent_main_modfile: go.mod has no module line")
    return match.group(1)


def substitute(go_mod: str, substrate: Path | None = None) -> tuple[str, list[str]]:
    """Return the substitute go.mod text and one line per change made.

    With ``substrate`` (a stand-in module directory from ``scripts/series standins substrate``) the
    dropped module is kept and its ``replace`` points at that directory instead.
    """
    changes: list[str] = []
    for mod, (pinned, served) in SUBSTITUTES.items():
        reason = "refused by the proxy, 403; nearest served"
        if substrate is not None and mod in STANDIN_SUBSTITUTES:
            served = STANDIN_SUBSTITUTES[mod]
            reason = ("refused by the proxy, 403; with the substrate stand-in: see "
                      "STANDIN_SUBSTITUTES")
        pattern = re.compile(
            rf"^(\s*(?:require\s+)?){re.escape(mod)}\s+{re.escape(pinned)}(?=\s|$)", re.MULTILINE)
        go_mod, count = pattern.subn(rf"\g<1>{mod} {served}", go_mod)
        if count == 0:
            raise SystemExit(f"kagent_main_modfile: {mod} {pinned} is not pinned by this go.mod; "
                             "update SUBSTITUTES")
        changes.append(f"{mod} {pinned} -> {served} ({reason})")
    for mod, target in DROPPED.items():
        if substrate is not None:
            replace = re.compile(rf"^(\s*(?:replace\s+)?{re.escape(mod)}(?:\s+\S+)?\s+=>).*$",
                                 re.MULTILINE)
            go_mod, n_rep = replace.subn(lambda m: f"{m.group(1)} {substrate}", go_mod)
            if n_rep != 1:
                raise SystemExit(f"kagent_main_modfile: {mod} has {n_rep} replace lines, not 1; "
                                 "update DROPPED")
            changes.append(f"{mod} (=> {target}) replaced by the COMPILE STAND-IN {substrate} "
                           "(refused by the proxy, 403; no version served; NOT the real module)")
            continue
        require = re.compile(rf"^\s*(?:require\s+)?{re.escape(mod)}\s+\S+.*\n", re.MULTILINE)
        replace = re.compile(rf"^\s*(?:replace\s+)?{re.escape(mod)}(?:\s+\S+)?\s+=>.*\n",
                             re.MULTILINE)
        go_mod, n_req = require.subn("", go_mod)
        go_mod, n_rep = replace.subn("", go_mod)
        if n_req == 0:
            raise SystemExit(f"kagent_main_modfile: {mod} is not required by this go.mod; "
                             "update DROPPED")
        changes.append(f"{mod} (=> {target}) dropped: require x{n_req}, replace x{n_rep} "
                       "(refused by the proxy, 403; no version served)")
    return go_mod, changes


def imports_of(source: str) -> set[str]:
    found = set(_IMPORT_LINE.findall(source))
    for block in _IMPORT_BLOCK.findall(source):
        for line in block.splitlines():
            line = line.split("//", 1)[0]
            found.update(_QUOTED.findall(line))
    return found


def packages(go_dir: Path, module: str) -> dict[str, set[str]]:
    """import path -> imports of its non-test .go files (vendor/testdata/hidden dirs skipped)."""
    pkgs: dict[str, set[str]] = {}
    for path in sorted(go_dir.rglob("*.go")):
        rel = path.relative_to(go_dir)
        parts = rel.parts[:-1]
        if any(p in ("vendor", "testdata") or p.startswith((".", "_")) for p in parts):
            continue
        if path.name.endswith("_test.go"):
            continue
        # a nested module is not part of this one
        if any((go_dir.joinpath(*parts[:i]) / "go.mod").exists() for i in range(1, len(parts) + 1)):
            continue
        ip = "/".join((module, *parts)) if parts else module
        pkgs.setdefault(ip, set()).update(imports_of(path.read_text(errors="replace")))
    return pkgs


def excluded(pkgs: dict[str, set[str]]) -> dict[str, str]:
    """Packages that import a dropped module, directly or through the module's packages."""
    out: dict[str, str] = {}
    for ip, imps in pkgs.items():
        for imp in imps:
            if any(imp == d or imp.startswith(d + "/") for d in DROPPED):
                out[ip] = f"imports {imp}"
                break
    changed = True
    while changed:
        changed = False
        for ip, imps in pkgs.items():
            if ip in out:
                continue
            via = sorted(imp for imp in imps if imp in out)
            if via:
                out[ip] = f"imports {via[0]}"
                changed = True
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", required=True, type=Path, help="kagent work tree")
    parser.add_argument("--out", required=True, type=Path,
                        help="directory for go.mod, go.sum and build-list (outside the tree)")
    parser.add_argument("--substrate", type=Path, default=None,
                        help="a substrate stand-in module dir (scripts/series standins substrate): "
                             "replace substrate with it instead of leaving its importers out")
    args = parser.parse_args(argv)
    substrate = args.substrate.resolve() if args.substrate else None
    if substrate is not None and not (substrate / "go.mod").is_file():
        print(f"kagent_main_modfile: --substrate {substrate} has no go.mod", file=sys.stderr)
        return 2
    tree, out = args.tree.resolve(), args.out.resolve()
    go_dir = tree / "go"
    if not (go_dir / "go.mod").is_file():
        print(f"kagent_main_modfile: {go_dir / 'go.mod'} not found", file=sys.stderr)
        return 2
    if out == tree or tree in out.parents:
        print(f"kagent_main_modfile: --out {out} is inside the tree {tree}", file=sys.stderr)
        return 2

    text = (go_dir / "go.mod").read_text()
    module = module_path(text)
    new_text, changes = substitute(text, substrate)
    out.mkdir(parents=True, exist_ok=True)
    (out / "go.mod").write_text(new_text)
    shutil.copyfile(go_dir / "go.sum", out / "go.sum")

    pkgs = packages(go_dir, module)
    skip = excluded(pkgs) if substrate is None else {}
    build = sorted(ip for ip in pkgs if ip not in skip)
    (out / "build-list").write_text(
        "# packages of %s buildable with the substitute go.mod (%d of %d)\n%s\n"
        % (module, len(build), len(pkgs), "\n".join(build)))
    (out / "excluded").write_text("".join(f"{ip}\t{why}\n" for ip, why in sorted(skip.items())))

    print(f"substitute go.mod for {go_dir}: {out / 'go.mod'} (go.sum beside it)")
    for line in changes:
        print(f"  substituted: {line}")
    print(f"  packages: {len(build)} buildable (listed in {out / 'build-list'}), "
          f"{len(skip)} excluded (they need github.com/agent-substrate/substrate)"
          + (":" if skip else "; substrate is the COMPILE STAND-IN, not the real v0.0.20"))
    for ip, why in sorted(skip.items()):
        print(f"    excluded: {ip} ({why})")
    print(f'GOFLAGS="-modfile={out / "go.mod"} -mod=mod"')
    return 0

