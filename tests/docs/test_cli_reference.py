"""The console script as its reference (docs/cli.md) describes it: plain help texts, every
option explained, one exit-code table, "ok": true on every success JSON, an operator command
with the wrong login that says to use an operator login, and the documented commands equal to
the real ones (issue 26)."""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from support.cli import run

from kagent_governed_memory import PROTOTYPE_POLICY
from kagent_governed_memory.cli import _parser

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"  # the lead may move the reference: one constant


def _commands(parser: argparse.ArgumentParser,
              prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and subcommand, as ("policy register", its parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*prefix, name)), sub
                yield from _commands(sub, (*prefix, name))


def _leaves() -> dict[str, argparse.ArgumentParser]:
    every = dict(_commands(_parser()))
    return {name: p for name, p in every.items()
            if not any(other.startswith(name + " ") for other in every)}


def test_help_texts_are_plain_text_and_every_option_is_explained():
    top = _parser()
    for name, parser in [("", top), *_commands(top)]:
        text = parser.format_help()
        assert "`" not in text, (name, re.findall(r".*`.*", text))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
    # what --help prints is what format_help gives
    assert "`" not in run("policy", "--help").stdout + run("--help").stdout


def test_the_exit_code_table_is_printed_once_and_every_command_points_to_it():
    top = run("--help").stdout
    assert top.count("exit codes") == 1
    for code in ("0  done", "1  a check failed", "2  usage", "3  unavailable",
                 "4  configuration", "130  interrupted"):
        assert code in top, code
    for name, parser in _commands(_parser()):
        text = parser.format_help()
        assert "exit codes: see kagent-governed-memory --help" in text, name
        assert "  0  done" not in text and "4  configuration" not in text, name


def _dev_db_json(tmp_path: Path) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "kagent_governed_memory", "dev-db", "--json",
                             "--data-dir", str(tmp_path / "pg")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        return json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0


def test_every_success_json_says_ok(database, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(PROTOTYPE_POLICY.model_copy(update={"version": "cli-json-1"})
                      .model_dump_json())
    app, op, owner = database.dsn, database.operator_dsn, database.owner_dsn
    scope = ["--principal", "@alice:example.org", "--namespace", "kagent", "--agent", "demo",
             "--room", "!room:example.org"]
    calls = {
        "migrate": ["--dsn", owner],
        "demo": ["--dsn", app],
        "sweep": ["--dsn", app],
        "status": ["--dsn", op],
        "verify": ["--dsn", op],
        "policy register": ["--dsn", op, "--file", str(policy)],
        "policy allow": ["--dsn", op, "--version", "cli-json-1"],
        "policy disallow": ["--dsn", op, "--version", "cli-json-1"],
        "login register-runtime": ["--dsn", op, "--login", "kgm_runtime", "--namespace",
                                   "kagent", "--agent", "demo"],
        "login register-verifier": ["--dsn", op, "--login", "kgm_controller"],
        "login unregister": ["--dsn", op, "--login", "kgm_runtime"],
        "offboard": ["--dsn", op, "--principal", "@alice:example.org"],
        "unblock": ["--dsn", op, "--principal", "@alice:example.org"],
        "configure": ["--dsn", op],
        "issuer register": ["--dsn", op, "--oidc", "https://idp.example.org"],
        "issuer disable": ["--dsn", op, "--oidc", "https://idp.example.org"],
    }
    # every command that takes --json is here (dev-db below); keys takes none: it prints PEM,
    # or a JWK Set, a document for the verifiers' configuration, not a result
    with_json = {name for name, p in _leaves().items()
                 if any("--json" in a.option_strings for a in p._actions)}
    assert with_json == set(calls) | {"dev-db"}
    for name, args in calls.items():
        done = run(*name.split(), *args, "--json")
        assert done.returncode == 0, (name, done.stdout, done.stderr[-2000:])
        assert json.loads(done.stdout)["ok"] is True, name
    scoped = run("status", "--dsn", app, *scope, "--json")
    assert scoped.returncode == 0 and json.loads(scoped.stdout)["ok"] is True
    assert _dev_db_json(tmp_path)["ok"] is True


def test_an_operator_command_with_an_application_login_says_use_an_operator_login(database):
    assert run("migrate", "--dsn", database.owner_dsn).returncode == 0
    for command in (["offboard", "--principal", "@alice:example.org"],
                    ["unblock", "--principal", "@alice:example.org"],
                    ["policy", "allow", "--version", PROTOTYPE_POLICY.version],
                    ["login", "unregister", "--login", "kgm_runtime"]):
        plain = run(*command, "--dsn", database.dsn)
        assert plain.returncode == 4, (command, plain.stderr)
        assert "use an operator login" in plain.stderr, plain.stderr
        assert "migrat" not in plain.stderr, plain.stderr
        as_json = json.loads(run(*command, "--dsn", database.dsn, "--json").stdout)
        assert as_json["ok"] is False and as_json["exit_code"] == 4
        assert "use an operator login" in as_json["message"]


def _documented_commands(path: Path = CLI_DOC) -> set[str]:
    """The commands docs/cli.md's command table lists: rows "| `kagent-governed-memory X` |"."""
    text = path.read_text(encoding="utf-8")
    return set(re.findall(r"^\| `kagent-governed-memory ([a-z -]+?)(?: [-\[<A-Z].*?)?` \|",
                          text, re.MULTILINE))


def test_the_reference_documents_exactly_the_real_commands():
    documented = _documented_commands()
    real = set(_leaves())
    assert documented == real, (sorted(documented - real), sorted(real - documented))
    text = CLI_DOC.read_text(encoding="utf-8")
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 130 |"):
        assert code in text, code


def test_the_reference_lists_exactly_the_shipped_migrations():
    shipped = {p.name.split(".")[0] for p in
               (ROOT / "kagent_governed_memory" / "sql" / "migrations").glob("*.up.sql")}
    listed = set(re.findall(r"^\| \d{6} \| `(\d{6}_\w+)` \|", CLI_DOC.read_text(encoding="utf-8"),
                            re.MULTILINE))
    assert listed == shipped, (sorted(listed ^ shipped))
