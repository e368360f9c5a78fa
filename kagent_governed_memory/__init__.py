"""Governed long-term memory for kagent / google-adk agents (ADR 0023).

Nothing is collected before explicit consent; every read and write is fenced by the consent
generation inside the database transaction; expiry is an authorization boundary; one fact can
be erased and the erasure verified; no log, trace, metric or error carries memory content.

Importing this package changes no global logging or tracing configuration.
"""

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
from .identity import AgentIdentity, MemoryScope, OriginKind, Principal, ScopeKey, ScopeKind
from .models import (
    ConsentReceipt,
    ErasureReceipt,
    ForgetReceipt,
    InspectPage,
    MemoryRecord,
    OffboardReport,
    ScopeOutcome,
    ScopeStatus,
)
from .policy import PROTOTYPE_POLICY, MemoryPolicy
from .store import EMBEDDING_DIMENSION, GovernedMemoryStore

__version__ = "0.1.0"

__all__ = [
    "EMBEDDING_DIMENSION",
    "PROTOTYPE_POLICY",
    "AdmissionDenied",
    "AgentIdentity",
    "ConsentConflict",
    "ConsentReceipt",
    "ConsentRequired",
    "EntryCapReached",
    "ErasureFailed",
    "ErasureReceipt",
    "FactTooLarge",
    "ForgetReceipt",
    "GovernanceError",
    "GovernedMemoryStore",
    "InspectPage",
    "InvalidIdentity",
    "InvalidInput",
    "MemoryPolicy",
    "MemoryRecord",
    "MemoryScope",
    "OffboardReport",
    "OriginKind",
    "ProviderError",
    "Principal",
    "ReasonCode",
    "ScopeDenied",
    "ScopeKey",
    "ScopeKind",
    "ScopeOutcome",
    "ScopeStatus",
    "StaleGeneration",
    "StoreUnavailable",
]
