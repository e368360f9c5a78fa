"""google-adk integration: the memory service, governed tools, prefetch and auto-save.

Needs google-adk, the ``adk`` extra: ``pip install -e '.[adk]'``.
"""

try:
    import google.adk  # noqa: F401
except ModuleNotFoundError as missing:  # the extra is not installed
    if not (missing.name or "").startswith("google"):
        raise
    raise ModuleNotFoundError(
        "kagent_governed_memory.adk needs google-adk, which is not installed: "
        "pip install -e '.[adk]' in a clone (docs/install.md)",
        name=missing.name,
    ) from None

from .service import Admitted, GovernedMemoryService, SaveOutcome
from .tools import (
    GovernedLoadMemoryTool,
    GovernedPrefetchMemoryTool,
    GovernedSaveMemoryTool,
    configure_governed_memory,
)

__all__ = [
    "Admitted",
    "GovernedLoadMemoryTool",
    "GovernedMemoryService",
    "GovernedPrefetchMemoryTool",
    "GovernedSaveMemoryTool",
    "SaveOutcome",
    "configure_governed_memory",
]
