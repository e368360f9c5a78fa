"""``scripts/series``: one command for the patch series, one help text, every command's help
reachable; ``scripts/`` keeps only what a user runs (issue 46)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.series

ROOT = Path(__file__).resolve().parents[2]
SERIES = ROOT / "scripts" / "series"
COMMANDS = ("sync-sql", "verify", "standins", "lint", "protos", "go-db-tests", "helm", "crd",
            "python-pr")
HELPS = [[c] for c in COMMANDS] + [
    ["sync-sql", "--series", "v0.9.11"], ["sync-sql", "--series", "main"],
    ["verify", "--series", "v0.9.11"], ["verify", "--series", "main"],
    ["standins", "substrate"], ["standins", "modfile"], ["protos", "stubs"], ["protos", "kagent"]]


def series(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SERIES), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_scripts_holds_the_tool_its_package_and_test_under_load_only() -> None:
    entries = {p.name for p in (ROOT / "scripts").iterdir() if p.name != "__pycache__"}
    assert entries == {"series", "_series", "test-under-load"}


def test_one_help_text_names_every_command() -> None:
    done = series("--help")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()
              if line.startswith("  ") and not line.startswith("   ")]
    assert tuple(listed) == COMMANDS


@pytest.mark.parametrize("args", HELPS, ids=" ".join)
def test_every_command_has_its_help(args: list[str]) -> None:
    done = series(*args, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: series " + args[0]), done.stdout[:200]


def test_an_unknown_command_or_series_is_refused_with_the_help() -> None:
    done = series("nope")
    assert done.returncode == 2 and "unknown command 'nope'" in done.stderr
    assert "commands:" in done.stderr
    done = series("verify", "--series", "v0.9.10")
    assert done.returncode == 2 and "choose from v0.9.11, main" in done.stderr


def test_both_series_carry_the_librarys_sql() -> None:
    done = series("sync-sql", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "patch SQL matches" in done.stdout  # v0.9.11
    assert "sync_patch_sql_main:" in done.stdout and " match " in done.stdout  # main
