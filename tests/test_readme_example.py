"""The README's agent-author example runs, offline, against the test database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import migrated


async def test_readme_adk_example_runs(database, tmp_path):
    await migrated(database)  # the operator's step, as the owner (README: database roles)
    readme = (Path(__file__).parent.parent / "README.md").read_text()
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
