"""Build a COMPILE STAND-IN for ``github.com/kagent-dev/substrate v0.0.20`` (kagent main's pin).

kagent ``main`` (BASE 5229184e) replaces ``github.com/agent-substrate/substrate`` with
``github.com/kagent-dev/substrate v0.0.20``, a fork of which the Go module proxy here serves no
version, so 21 of kagent's packages (``core/internal/grpcserver`` among them) cannot be built.
This script makes a module directory that compiles in its place:

1. ``pkg/api/v1alpha1``, ``pkg/client`` and ``pkg/proto/ateapipb`` (plus ``go.mod``, ``go.sum``,
   ``LICENSE``) of agent-substrate/substrate at ``SUBSTRATE_COMMIT``, read from a clone or git
   directory (``--src``, default ``$KGM_SUBSTRATE_SRC``);
2. ``scripts/_series/substrate/overlay.patch`` applied on top (this project's code: the API
   shape kagent main compiles against, derived by compiling kagent's importing packages);
3. ``ateapi.pb.go``/``ateapi_grpc.pb.go`` regenerated from the overlaid ``ateapi.proto`` with
   protoc 33.5 and protoc-gen-go v1.36.11 / protoc-gen-go-grpc v1.6.1 (the versions upstream's
   generated headers name for the plugins; kagent main's own code uses v1.36.11 / v1.6.2; the
   tools and their download code are ``protos.py``'s, cached under its cache);
4. upstream's ``_test.go`` files removed (they need modules outside these packages) and
   ``go mod tidy`` run, so the stand-in requires only what these packages import (upstream's
   whole-repository go.mod would pull an envoy version the proxy refuses into kagent's graph);
   then ``go build ./pkg/...``.

The result is cached at ``~/.cache/kagent-governed-memory/substrate-standin-<commit>-<overlay
sha256>`` and its path printed last.  IT IS NOT THE REAL v0.0.20: the fork's wire format and
behaviour are unknown here; the stand-in is for compiling and testing kagent's packages only
(``scripts/series standins modfile --substrate DIR`` replaces substrate with it).  Nothing
of it belongs in a patch.

Usage::

    scripts/series standins substrate --src /path/to/agent-substrate [--print-path]

Exit status: 0 built (or cached); 2 bad arguments; 3 NOT RUN (no source holding the commit, or
a tool cannot be had); 1 the build failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import re
from pathlib import Path

from . import PACKAGE
from . import protos as protogen

SUBSTRATE_COMMIT = "86e138f628e419426be5ac9bbc68507e8333a4c4"
FORK = "github.com/kagent-dev/substrate v0.0.20"
OVERLAY = PACKAGE / "substrate" / "overlay.patch"
PATHS = ["go.mod", "go.sum", "LICENSE", "pkg/api/v1alpha1", "pkg/client", "pkg/proto/ateapipb"]
PROTO_DIR = "pkg/proto/ateapipb"
PROTOC_GEN_GO = ("protoc-gen-go", "google.golang.org/protobuf/cmd/protoc-gen-go", "v1.36.11")
PROTOC_GEN_GO_GRPC = ("protoc-gen-go-grpc", "google.golang.org/grpc/cmd/protoc-gen-go-grpc",
                      "v1.6.1")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kagent-governed-memory"
MARKER = ".standin-complete"
# bump when build() changes what it makes, so an old cached stand-in is not reused
RECIPE = "tests-dropped+tidy"
BANNER = (f"COMPILE STAND-IN for {FORK}: agent-substrate@{SUBSTRATE_COMMIT[:12]} + this "
          "project's overlay; for compiling/testing kagent only, NOT the real v0.0.20")


class Failed(Exception):
    pass


def overlay_digest() -> str:
    """sha256 of the overlay and the generator versions (either changing makes a new dir)."""
    tools = f"{RECIPE} {protogen.PROTOC[0]} {PROTOC_GEN_GO[2]} {PROTOC_GEN_GO_GRPC[2]}\n".encode()
    return hashlib.sha256(tools + OVERLAY.read_bytes()).hexdigest()[:12]


def standin_dir() -> Path:
    return CACHE / f"substrate-standin-{SUBSTRATE_COMMIT[:12]}-{overlay_digest()}"


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Failed(f"{' '.join(cmd[:3])} exited {done.returncode}:\n"
                     + (done.stdout + done.stderr)[-3000:])
    return done.stdout


def extract(src: Path, dest: Path) -> None:
    """``PATHS`` of ``SUBSTRATE_COMMIT`` from the git repository ``src`` into ``dest``."""
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "src.tar"
        _run(["git", "-C", str(src), "archive", "-o", str(tar), SUBSTRATE_COMMIT, *PATHS])
        with tarfile.open(tar) as archive:
            archive.extractall(dest, filter="data")


def apply_overlay(dest: Path) -> None:
    # a throw-away repository, so git apply resolves paths against dest whatever encloses it
    _run(["git", "init", "-q", str(dest)])
    _run(["git", "-C", str(dest), "apply", "--whitespace=nowarn", str(OVERLAY)])
    shutil.rmtree(dest / ".git")


def regenerate(dest: Path, tools: protogen.Tools) -> None:
    protoc = tools.protoc()
    gen_go = tools.go_tool(*PROTOC_GEN_GO)
    gen_grpc = tools.go_tool(*PROTOC_GEN_GO_GRPC)
    proto = dest / PROTO_DIR
    for name in ("ateapi.pb.go", "ateapi_grpc.pb.go"):
        (proto / name).unlink()
    _run([str(protoc), f"--plugin=protoc-gen-go={gen_go}",
          f"--plugin=protoc-gen-go-grpc={gen_grpc}", "--go_out=paths=source_relative:.",
          "--go-grpc_out=paths=source_relative:.", "-I.", "ateapi.proto"], cwd=proto)
    for name in ("ateapi.pb.go", "ateapi_grpc.pb.go"):
        if not (proto / name).is_file():
            raise Failed(f"protoc wrote no {name}")


def build(src: Path, install: bool) -> Path:
    out = standin_dir()
    if (out / MARKER).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        extract(src, work)
        apply_overlay(work)
        regenerate(work, protogen.Tools(CACHE / "protogen", install=install))
        # upstream's tests need its envtest module and its go.mod requires what the whole
        # repository uses (go-control-plane among it, whose envoy pin the proxy refuses):
        # drop the tests and tidy, so the stand-in requires only what these packages import
        for test in work.rglob("*_test.go"):
            test.unlink()
        env = {**os.environ, "GOFLAGS": "",
               "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "go1.27.3")}
        _run(["go", "mod", "tidy"], cwd=work, env=env)
        _run(["go", "build", "./pkg/..."], cwd=work, env=env)
        (work / MARKER).write_text(
            f"agent-substrate/substrate@{SUBSTRATE_COMMIT} + overlay.patch (+ tools) sha256:"
            f"{overlay_digest()}\n{BANNER}\n")
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


# a terminal control sequence (CSI: ESC [ ... final byte), as a tool's output can carry
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def path_from_output(out: str) -> Path:
    """The stand-in's path from ``main``'s output: its last line, terminal control sequences
    (an ANSI reset a tool left before it) removed."""
    lines = [x.strip() for x in ANSI.sub("", out).splitlines() if x.strip()]
    if not lines:
        raise ValueError("no path in the stand-in builder's output")
    return Path(lines[-1])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=os.environ.get("KGM_SUBSTRATE_SRC") or None,
                    help="an agent-substrate/substrate clone or git directory holding "
                         f"{SUBSTRATE_COMMIT[:12]} (default $KGM_SUBSTRATE_SRC)")
    ap.add_argument("--no-install", action="store_true",
                    help="use only tools already in the cache")
    ap.add_argument("--print-path", action="store_true", help="print only the path on success")
    args = ap.parse_args(argv)
    if args.src is None or not Path(args.src).exists():
        print("SUBSTRATE STAND-IN NOT RUN: no agent-substrate source (set KGM_SUBSTRATE_SRC "
              f"or --src to a clone holding {SUBSTRATE_COMMIT})")
        return 3
    src = Path(args.src)
    if subprocess.run(["git", "-C", str(src), "cat-file", "-e", SUBSTRATE_COMMIT + "^{commit}"],
                      capture_output=True, check=False).returncode != 0:
        print(f"SUBSTRATE STAND-IN NOT RUN: {src} does not hold {SUBSTRATE_COMMIT}")
        return 3
    try:
        out = build(src, install=not args.no_install)
    except protogen.NotRun as exc:
        print(f"SUBSTRATE STAND-IN NOT RUN: {exc}")
        return 3
    except Failed as exc:
        print(f"kagent_main_substrate: FAILED building the stand-in: {exc}", file=sys.stderr)
        return 1
    if not args.print_path:
        print(f"*** {BANNER} ***")
    print(out)
    return 0

