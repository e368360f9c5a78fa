"""Governed long-term memory for kagent / google-adk agents (ADR 0023).

Nothing is collected before explicit consent; every read and write is fenced by the consent
generation inside the database transaction; expiry is an authorization boundary; one fact can
be erased and the erasure verified; no log, trace, metric or error carries memory content.

Importing this package changes no global logging or tracing configuration.
"""

from typing import TYPE_CHECKING

from .dev import DevBridge, dev_database
from .embedding import Embedder, HashingEmbedder, OpenAICompatibleEmbedder
from .errors import (
    AdmissionDenied,
    ConsentConflict,
    ConsentRequired,
    EntryCapReached,
    ErasureFailed,
    FactTooLarge,
    GovernanceError,
    InvalidIdentity,
    InvalidInput,
    ProviderError,
    ReasonCode,
    ScopeDenied,
    StaleGeneration,
    StoreUnavailable,
)
from .identity import (
    AgentIdentity,
    Issuer,
    MatrixIssuer,
    MemoryScope,
    OidcIssuer,
    OriginKind,
    OriginName,
    Principal,
    ScopeKey,
    ScopeKind,
    ScopeKindName,
)
from .kagent import KagentControllerStore
from .models import (
    ConsentReceipt,
    ErasureReceipt,
    ForgetReceipt,
    InspectPage,
    MemoryRecord,
    ScopeStatus,
)
from .policy import DEV_POLICY, PROTOTYPE_POLICY, MemoryPolicy
from .repository import (
    ControlRepository,
    MemoryRepository,
    OperatorRepository,
    RuntimeRepository,
)
from .scope import memory_request
from .store import EMBEDDING_DIMENSION, GovernedMemoryStore

if TYPE_CHECKING:  # real types for the lazily imported names below
    from .adk import GovernedMemoryService, configure_governed_memory

# The version's single definition: the build backend reads it from here (pyproject.toml,
# [tool.hatch.version]).
__version__ = "0.1.0"

# google-adk (the ``adk`` extra) is imported on first use of these names, not by
# ``import kagent_governed_memory`` (it is heavy, and the store, CLI and bridge-side code do not
# need it).
_ADK_NAMES = {"GovernedMemoryService", "configure_governed_memory"}


def __getattr__(name: str) -> object:
    if name in _ADK_NAMES:
        from . import adk

        return getattr(adk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# What an agent author imports.  Bridge, operator, development and telemetry names live in the
# subpackages: scope, controls, store, dev, telemetry, kagent, matrix, cli (docs/api.md).
__all__ = [
    "DEV_POLICY",
    "EMBEDDING_DIMENSION",
    "PROTOTYPE_POLICY",
    "AdmissionDenied",
    "AgentIdentity",
    "ConsentConflict",
    "ConsentReceipt",
    "ConsentRequired",
    "ControlRepository",
    "DevBridge",
    "Embedder",
    "EntryCapReached",
    "ErasureFailed",
    "ErasureReceipt",
    "FactTooLarge",
    "ForgetReceipt",
    "GovernanceError",
    "GovernedMemoryService",
    "GovernedMemoryStore",
    "HashingEmbedder",
    "InspectPage",
    "InvalidIdentity",
    "InvalidInput",
    "Issuer",
    "KagentControllerStore",
    "MatrixIssuer",
    "MemoryPolicy",
    "MemoryRecord",
    "MemoryRepository",
    "MemoryScope",
    "OidcIssuer",
    "OpenAICompatibleEmbedder",
    "OperatorRepository",
    "OriginKind",
    "OriginName",
    "Principal",
    "ProviderError",
    "ReasonCode",
    "RuntimeRepository",
    "ScopeDenied",
    "ScopeKey",
    "ScopeKind",
    "ScopeKindName",
    "ScopeStatus",
    "StaleGeneration",
    "StoreUnavailable",
    "configure_governed_memory",
    "dev_database",
    "memory_request",
]
