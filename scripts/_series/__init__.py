"""The patch-series tool behind ``scripts/series`` (see ``cli.py`` for the one help text).

Each module is one part of maintaining ``patches/kagent-v0.9.11/`` and ``patches/kagent-main/``;
they import each other package-relatively, and where one runs another in a child process it
runs ``scripts/series SUBCOMMAND`` (``command``), never a module's file.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent.parent
ENTRY = PACKAGE.parent / "series"


def command(*args: str) -> list[str]:
    """The argv that runs ``scripts/series ARGS...`` with this interpreter."""
    return [sys.executable, str(ENTRY), *args]
