"""Moved: kagent mode's stores are in ``kagent_governed_memory.kagent`` (one module per
transport). This name keeps working; import from ``kagent_governed_memory`` or
``kagent_governed_memory.kagent`` instead."""

from .kagent import KagentBridgeStore, KagentControllerStore

__all__ = ["KagentBridgeStore", "KagentControllerStore"]
