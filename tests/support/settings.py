"""The tests' constants: the local homeserver name and the wall-clock budgets.

Budgets (docs/testing.md) are generous, never the production defaults, so a loaded machine
slows a test down instead of failing it.  A test about a budget injects its own.
"""

from __future__ import annotations

LOCAL = "example.org"
POOL_TIMEOUT = 60.0  # GovernedMemoryStore.open(timeout=): connecting and waiting for a connection
# KagentControllerStore/KagentBridgeStore: per-read/connect timeouts and the whole-call deadline
# (production: 10 s read, 3 s connect/pool, 15 s per call)
CONTROLLER_BUDGETS: dict[str, float] = {"timeout": 60.0, "deadline": 120.0}
EMBEDDER_TIMEOUT = 60.0  # OpenAICompatibleEmbedder against a local fake provider (production: 10 s)
