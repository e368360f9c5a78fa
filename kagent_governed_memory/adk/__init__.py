"""google-adk integration: the memory service, governed tools, prefetch and auto-save."""

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
