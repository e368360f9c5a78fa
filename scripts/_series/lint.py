"""golangci-lint at kagent main's pin, built for ``verify_main.py`` and ``scripts/series lint``.

The v2.13.0 release links golang.org/x/tools v0.49.0, whose export-data reader stops at version
4, and go1.27.3 writes version 5, so the release binary reports only typecheck errors on main:
``lint_binary`` builds v2.13.0 from its module with x/tools ``LINT_XTOOLS`` and caches it.
Stdlib only.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Protocol

from .inplace import run

LINT_VERSION, LINT_XTOOLS = "2.13.0", "v0.52.0"
LINT_MODULE = "github.com/golangci/golangci-lint/v2"
GOTOOLCHAIN = "go1.27.3"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kagent-governed-memory"


class Reporter(Protocol):
    def line(self, status: str, step: str, what: str, secs: float = 0.0,
             out: str = "") -> None: ...


def lint_binary(rep: Reporter) -> Path | None:
    """golangci-lint LINT_VERSION built from its module with x/tools LINT_XTOOLS (cached)."""
    out_dir = CACHE / f"golangci-lint-v{LINT_VERSION}-xtools-{LINT_XTOOLS}"
    binary = out_dir / "golangci-lint"
    if binary.exists():
        return binary
    env = {k: v for k, v in os.environ.items() if k != "GOFLAGS"}
    env["GOTOOLCHAIN"] = os.environ.get("GOTOOLCHAIN", GOTOOLCHAIN)
    started = time.monotonic()
    code, out, _ = run(["go", "mod", "download", "-json", f"{LINT_MODULE}@v{LINT_VERSION}"],
                       env=env)
    if code != 0:
        rep.line("FAIL", "lint", f"go mod download {LINT_MODULE}@v{LINT_VERSION}", 0, out)
        return None
    src = Path(json.loads(out[out.index("{"):])["Dir"])
    build_dir = out_dir / "src"
    if build_dir.exists():
        shutil.rmtree(build_dir)
    shutil.copytree(src, build_dir)
    for path in [build_dir, *build_dir.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    for cmd in (["go", "mod", "edit", f"-require=golang.org/x/tools@{LINT_XTOOLS}"],
                ["go", "mod", "tidy"],
                ["go", "build", "-o", str(binary), "-ldflags",
                 f"-X main.version={LINT_VERSION} -X main.date=rebuilt-with-x/tools-{LINT_XTOOLS}",
                 "./cmd/golangci-lint"]):
        code, out, _ = run(cmd, cwd=build_dir, env=env)
        if code != 0:
            rep.line("FAIL", "lint", f"building golangci-lint: {' '.join(cmd[:3])}", 0, out)
            return None
    shutil.rmtree(build_dir)
    rep.line("INFO", "lint", f"built golangci-lint v{LINT_VERSION} with golang.org/x/tools "
             f"{LINT_XTOOLS} into {binary}", time.monotonic() - started)
    return binary
