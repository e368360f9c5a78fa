"""``kagent-governed-memory demo --matrix`` (issue 28, item 4), run as a user runs it: a
subprocess that starts its own Synapse, database, agent and bridge and prints the control
room's transcript.  Where Synapse cannot start: ``MATRIX DEMO NOT RUN``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kagent_governed_memory.matrix.homeserver import synapse_available

# the demo starts its own Synapse
pytestmark = pytest.mark.synapse


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KGM_DSN"}
    return subprocess.run([sys.executable, "-m", "kagent_governed_memory", *args],
                          capture_output=True, text=True, timeout=300, env=env, check=False)


def test_demo_matrix_prints_the_transcript() -> None:
    why = synapse_available()
    if why is not None:
        print(f"\n*** MATRIX DEMO NOT RUN: {why} ***")
        pytest.skip(f"MATRIX DEMO NOT RUN: {why}")
    done = run("demo", "--matrix")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.strip() for line in done.stdout.splitlines()]
    expected = [  # in this order, as a person reads the room
        "alice: Remember that I prefer green tea.",
        "my-agent: Not saved: consent_required.",
        "alice: !memory on my-agent personal_preferences",
        "my-agent: Saved.",
        "my-agent: From memory: ",  # both facts, in the order recall ranked them
        "memory-bot: What my-agent remembers about you (2 entries):",
        "my-agent: From memory: my cat is called Miso.",
        "memory-bot: Memory is off for my-agent: 1 entry erased and verified gone.",
        "memory-bot: Memory is off for my-agent. Nothing is collected.",
    ]
    at = 0
    for want in expected:
        found = [i for i, line in enumerate(lines[at:], at) if line.startswith(want)]
        assert found, f"missing, in order: {want!r}\n{done.stdout}"
        at = found[0] + 1
    recalled = next(line for line in lines if line.startswith("my-agent: From memory: "))
    assert "I prefer green tea." in recalled and "my cat is called Miso." in recalled
    assert any(line.startswith("memory-bot: Forgot entry") and "verified gone" in line
               for line in lines)
    assert "demo complete" in done.stdout
    assert "EXPERIMENTAL" not in done.stderr


def test_demo_matrix_refuses_dsn_and_json() -> None:
    done = run("demo", "--matrix", "--json")
    assert done.returncode != 0 and "drop --dsn and --json" in done.stderr
