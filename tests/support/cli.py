"""The console script run as a subprocess, as a user runs it (never with the caller's
``$KGM_DSN`` unless given): database/test_cli.py, docs/test_cli_reference.py."""

from __future__ import annotations

import os
import subprocess
import sys


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "KGM_DSN"} | (env or {})
    return subprocess.run([sys.executable, "-m", "kagent_governed_memory", *args],
                          capture_output=True, text=True, timeout=180, env=full_env, check=False)
