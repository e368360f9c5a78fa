"""docs/adk.md's agent-author example (the production wiring: a bridge key, a signed assertion
per request) runs, offline, against the test database, as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.db import migrated

EXAMPLE_DOC = Path(__file__).resolve().parents[2] / "docs" / "adk.md"


async def test_readme_adk_example_runs(database, tmp_path):
    await migrated(database)  # the operator's step, as the owner (README: database roles)
    readme = EXAMPLE_DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    [example] = [b for b in blocks if "configure_governed_memory(agent, memory)" in b]
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {k: v for k, v in os.environ.items()
           if k != "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"} | {"KGM_DSN": database.dsn}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["Noted.", "True"]
    assert database.scalar("SELECT count(*) FROM memory_scope WHERE enabled") == 1


def _readme_example() -> str:
    readme = EXAMPLE_DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    [example] = [b for b in blocks if "configure_governed_memory(agent, memory)" in b]
    return example


def test_readme_adk_example_runs_after_dev_db(tmp_path):
    """The README's path for a newcomer: `kagent-governed-memory dev-db` in one terminal,
    `export KGM_DSN=...` as it printed, the example pasted as written (twice: a second run on
    the same database works too); Ctrl-C/SIGTERM stops the server and removes it."""
    import shlex
    import signal

    env = {k: v for k, v in os.environ.items()
           if k not in ("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "KGM_DSN", "KGM_LOCAL_SERVER")}
    server = subprocess.Popen([sys.executable, "-m", "kagent_governed_memory", "dev-db"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        exports: dict[str, str] = {}
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("export "):
                name, _, value = line[len("export "):].strip().partition("=")
                exports[name] = shlex.split(value)[0]
            if "Ctrl-C" in line:
                break
        assert set(exports) == {"KGM_DSN", "KGM_LOCAL_SERVER"}, exports
        assert "user=kgm_app" in exports["KGM_DSN"]
        script = tmp_path / "example.py"
        script.write_text(_readme_example())
        for _ in range(2):
            done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                                  timeout=120, env=env | exports, check=False)
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.split() == ["Noted.", "True"]
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err[-2000:]
    socket_dir = exports["KGM_DSN"].split("host=")[1].split()[0]
    assert not Path(socket_dir).exists()
