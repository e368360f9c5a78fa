"""The README's first example runs exactly as written and shows memory working: nothing before
consent, a fact saved in one session and recalled into a NEW session's model request, inspected,
forgotten (verified), and memory turned off (erased, verified).

``ScriptedModel`` answers "From memory: <fact>" only when the fact was in that request's
``<memory>`` block (tests/adk/test_scripted_model.py proves the rule), so the printed turn after the
new session is the proof that the recalled fact reached the new session's model request."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "async with bridge.request(session.id)"


def first_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    [example] = [b for b in blocks if MARKER in b]
    return example


def test_the_first_fact_example_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "first.py"
    script.write_text(first_example())
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KGM_", "KAGENT_", "ADK_CAPTURE"))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    agent = [line.strip().removeprefix("agent: ") for line in done.stdout.splitlines()
             if line.strip().startswith("agent: ")]
    assert agent == [
        "Not saved: consent_required.",          # nothing before consent
        "Saved.",
        "From memory: I prefer green tea.",      # a new session: recalled into its request
        "Nothing remembered about that.",        # forgotten
    ], done.stdout
    out = done.stdout
    assert "memory on" in out and "generation 1" in out, out
    assert "inspect: 1 entry" in out and "I prefer green tea." in out, out
    assert re.search(r"forgot \S+: verified", out), out
    assert "memory off" in out and "verified" in out.split("memory off", 1)[1], out
    # loud about being a development bridge, and nothing else on stderr but that
    assert "development bridge" in done.stderr, done.stderr[-2000:]
